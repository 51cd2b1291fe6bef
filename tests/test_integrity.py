"""Tamper evidence (issue #18): each tampering of the issue, done as an attacker with file or
database-owner access would (the append-only trigger dropped, hashes recomputed with toki's
own code), is detected on open or by `verify` against a digest saved earlier — on SQLite and
PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.small_history import K, write_small_history
from tests.store.legacy import unpinned
from toki import Memory
from toki.canonical import digest as sha
from toki.chain import GENESIS, Digest, link
from toki.cli import main
from toki.errors import IntegrityError, InvalidInput
from toki.log import EventKind, _event_id, event_from_record
from toki.store.base import ALL_SEQS

KEY = b"kept-outside-the-store"


@dataclass
class Target:
    """One store under attack: how to open it and how to run raw SQL on it."""

    url: str
    open: Callable[..., Memory]
    raw: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]
    backend: str


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        path = tmp_path / "audit.db"
        url = f"sqlite:///{path}"

        def raw_sqlite(query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
            conn = sqlite3.connect(path, isolation_level=None)
            try:
                return conn.execute(query, params).fetchall()
            finally:
                conn.close()

        yield Target(url, lambda **kw: Memory.open(url, **kw), raw_sqlite, "sqlite")
        return
    factory = request.getfixturevalue("pg_store")
    first = factory()
    schema = first.schema
    first.close()

    def raw_pg(query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        store = factory(schema)
        try:
            return store.execute(query.replace("?", "%s"), params)
        finally:
            store.close()

    yield Target(first.url, lambda **kw: Memory(factory(schema), **kw), raw_pg, "postgres")


def _fill(t: Target) -> tuple[Digest, Digest]:
    """A small history with a DECISION; returns the digest and a keyed digest saved now."""
    with t.open() as mem:
        write_small_history(mem)
        kinds = [e.kind for e in mem.events()]
        assert EventKind.DECISION in kinds and mem.verify().ok
        return mem.digest(), mem.digest(key=KEY)


def _drop_triggers(t: Target) -> None:
    if t.backend == "sqlite":
        t.raw("DROP TRIGGER IF EXISTS toki_event_no_update", ())
        t.raw("DROP TRIGGER IF EXISTS toki_event_no_delete", ())
    else:
        t.raw("DROP TRIGGER IF EXISTS toki_event_append_only ON toki_event", ())


def _rows(t: Target) -> list[tuple[Any, ...]]:
    return t.raw("SELECT seq, key_seq, kind, payload, payload_hash, event_id, chain "
                 "FROM toki_event ORDER BY seq", ())


def _rewrite(t: Target, seq: int, change: Callable[[dict[str, Any]], None]) -> None:
    """Change an event's payload and recompute its payload hash and id (both unkeyed sha256
    of the row's own text, as toki computes them)."""
    row = next(r for r in _rows(t) if r[0] == seq)
    body = json.loads(row[3])
    change(body)
    payload = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    t.raw("UPDATE toki_event SET payload = ?, payload_hash = ?, event_id = ? WHERE seq = ?",
          (payload, sha(payload, 64), _event_id(EventKind(row[2]), payload), seq))


def _relink(t: Target, *, seal: bool = True) -> None:
    """Recompute every stored chain link from the (tampered) rows, as toki would, and (seal)
    the chain seal in toki_meta too: the thorough attacker."""
    prev, seq = GENESIS, 0
    for seq, key_seq, kind, payload, payload_hash, event_id, _ in _rows(t):
        event = event_from_record({"seq": seq, "key_seq": key_seq, "kind": kind,
                                   "payload": payload, "payload_hash": payload_hash,
                                   "event_id": event_id})
        prev = link(prev, event)
        t.raw("UPDATE toki_event SET chain = ? WHERE seq = ?", (prev, seq))
    if seal:
        t.raw("UPDATE toki_meta SET value = ? WHERE name = 'chain_seal'", (f"{seq}:{prev}",))


def _seq_of(t: Target, kind: str) -> int:
    return next(r[0] for r in _rows(t) if r[2] == kind)


def _detected(t: Target, saved: Digest, keyed: Digest, seq: int | None, says: str) -> None:
    """Open refuses, naming the store and seq; verify with the digest fails too."""
    with pytest.raises(IntegrityError, match=says) as info:
        t.open()
    assert t.url.split("?")[0].removeprefix("sqlite:///") in str(info.value)  # names the store
    if seq is not None:
        assert f"seq {seq}" in str(info.value)
    assert main(["verify", t.url, "--digest", str(saved)]) == 1


# -- the tamperings of the issue -------------------------------------------------------------


def test_a_consistent_rewrite_of_a_value_is_detected(target: Target) -> None:
    saved, keyed = _fill(target)
    _drop_triggers(target)
    seq = _seq_of(target, "ASSERT")
    _rewrite(target, seq, lambda b: b["version"].__setitem__("value", "Porto"))
    _detected(target, saved, keyed, seq, "stored chain link does not match")


def test_a_rewrite_with_every_link_recomputed_is_caught_by_a_saved_digest(
    target: Target,
) -> None:
    """The attacker recomputes payload hash, id, every link after it and the projection:
    open cannot tell, a digest saved earlier (plain or keyed) can."""
    saved, keyed = _fill(target)
    _drop_triggers(target)
    seq = _seq_of(target, "ASSERT")
    _rewrite(target, seq, lambda b: b["version"].__setitem__("value", "Porto"))
    _relink(target)
    target.open(repair_projection=True).close()  # the attacker rebuilds the projection too
    with target.open() as mem:  # open-time checks alone are fooled: a consistent forgery
        report = mem.verify(saved)
        assert not report.ok and f"up to seq {saved.seq} differs" in str(report.problem)
        assert not mem.verify(keyed, key=KEY).ok
        assert mem.verify(Digest(saved.seq, mem.digest().head)).ok  # the forged chain itself
    assert main(["verify", target.url, "--digest", str(saved)]) == 1


def test_a_rewritten_provenance_is_detected(target: Target) -> None:
    """The audit would name another operator/approver: the DECISION's link no longer fits."""
    saved, keyed = _fill(target)
    _drop_triggers(target)
    seq = _seq_of(target, "DECISION")

    def forge(body: dict[str, Any]) -> None:
        body["provenance"]["operator"] = "RULE"
        body["provenance"]["reason"] = "approved by mallory"

    _rewrite(target, seq, forge)
    _detected(target, saved, keyed, seq, "stored chain link does not match")


def test_deleting_the_last_event_and_its_summary_row_is_caught_by_a_saved_digest(
    target: Target,
) -> None:
    saved, keyed = _fill(target)
    _drop_triggers(target)
    last = _rows(target)[-1][0]
    target.raw("DELETE FROM toki_event WHERE seq = ?", (last,))
    if target.backend == "sqlite":
        target.raw("DELETE FROM toki_current WHERE fact_key LIKE '%u2%'", ())
    else:
        target.raw("DELETE FROM toki_current WHERE subject = 'u2'", ())
        target.raw("DELETE FROM toki_adjudicated WHERE subject = 'u2'", ())
        target.raw("DELETE FROM toki_head WHERE subject = 'u2'", ())
        target.raw("DROP TRIGGER toki_version_append_only ON toki_version", ())
        target.raw("DELETE FROM toki_version WHERE subject = 'u2'", ())  # a projection too
    target.raw("UPDATE toki_meta SET value = ? WHERE name = 'watermark'", (str(last - 1),))
    with pytest.raises(IntegrityError, match=f"ends at seq {last - 1}, before seq {last}"):
        target.open()  # the chain seal still names the deleted head (issue #36)
    assert main(["verify", target.url]) == 1
    link_before = next(r[6] for r in _rows(target) if r[0] == last - 1)
    target.raw("UPDATE toki_meta SET value = ? WHERE name = 'chain_seal'",
               (f"{last - 1}:{link_before}",))  # the thorough attacker lowers the seal too
    with target.open() as mem:  # consistent: open cannot tell
        report = mem.verify(saved)
        assert not report.ok and f"ends at seq {last - 1}" in str(report.problem)
        assert report.first_bad == last
        assert not mem.verify(keyed, key=KEY).ok
    assert main(["verify", target.url, "--digest", str(saved)]) == 1


def test_renumbered_events_are_detected(target: Target) -> None:
    saved, keyed = _fill(target)
    _drop_triggers(target)
    last = _rows(target)[-1][0]
    target.raw("UPDATE toki_event SET seq = seq + 1000 WHERE seq >= 3", ())
    _detected(target, saved, keyed, 1003, "seq 3.* is missing")
    _drop_triggers(target)  # opening a SQLite store recreates them
    target.raw("UPDATE toki_event SET seq = seq - 1000 WHERE seq > 1000", ())
    # a dense renumbering: two events swap places
    target.raw("UPDATE toki_event SET seq = -1 WHERE seq = 2", ())
    target.raw("UPDATE toki_event SET seq = 2 WHERE seq = ?", (last,))
    target.raw("UPDATE toki_event SET seq = ? WHERE seq = -1", (last,))
    _detected(target, saved, keyed, 2, "stored chain link does not match")


def test_a_deleted_middle_event_is_detected(target: Target) -> None:
    saved, keyed = _fill(target)
    _drop_triggers(target)
    target.raw("DELETE FROM toki_event WHERE seq = 2", ())
    _detected(target, saved, keyed, 3, "seq 2 is missing")


def test_a_negative_seq_is_detected(target: Target) -> None:
    saved, keyed = _fill(target)
    _drop_triggers(target)
    target.raw("UPDATE toki_event SET seq = -2 WHERE seq = 2", ())
    _detected(target, saved, keyed, -2, "seq -2 is not positive")


def test_an_edited_row_with_stale_hashes_names_its_seq(target: Target) -> None:
    saved, keyed = _fill(target)
    _drop_triggers(target)
    target.raw("UPDATE toki_event SET payload = replace(payload, 'Berlin', 'Bern') WHERE seq = ?",
               (_seq_of(target, "DECISION") + 1,))
    _detected(target, saved, keyed, None, "payload hash mismatch")


# -- digests, keyed mode, the CLI ------------------------------------------------------------


def test_an_intact_log_verifies_against_every_digest_saved_along_the_way(target: Target) -> None:
    digests = []
    with target.open() as mem:
        for n in range(5):
            mem.assert_fact(K, n, recorded_at=f"2026-01-0{n + 1}T00:00:00Z", source_id="s")
            digests.append((mem.digest(), mem.digest(key=KEY)))
    with target.open() as mem:
        for plain, keyed in digests:
            assert mem.verify(plain).ok
            assert mem.verify(keyed, key=KEY).ok
            assert not mem.verify(keyed).ok  # a keyed digest needs its key
            assert not mem.verify(plain, key=b"another key").ok
        assert mem.digest() == digests[-1][0]


def test_the_verify_command(target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                            ) -> None:
    saved, keyed = _fill(target)
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY + b"\n")
    assert main(["verify", target.url]) == 0
    assert main(["verify", target.url, "--digest", str(saved)]) == 0
    assert main(["verify", target.url, "--digest", str(keyed), "--key-file", str(key_file)]) == 0
    assert main(["verify", target.url, "--digest", str(keyed)]) == 1
    capsys.readouterr()
    assert main(["verify", target.url, "--digest", str(saved), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["digest"] == str(saved) and out["events"] == saved.seq
    assert main(["verify", target.url, "--digest", "nonsense"]) == 2
    assert "not a toki digest" in capsys.readouterr().err


def test_digest_text_round_trips() -> None:
    d = Digest(12, "ab" * 32)
    assert Digest.parse(str(d)) == d
    for bad in ("12", "x:" + "ab" * 32, "12:" + "zz" * 32, ""):
        with pytest.raises(InvalidInput, match="digest"):
            Digest.parse(bad)


# -- the migration of an unchained log -------------------------------------------------------


def test_an_unchained_log_is_chained_on_first_open_and_that_is_an_event(target: Target) -> None:
    _fill(target)
    _drop_triggers(target)
    for seq, _, kind, payload, *_ in _rows(target):  # and payloads as a toki before #36 wrote
        target.raw("UPDATE toki_event SET payload = ?, payload_hash = ?, event_id = ? "
                   "WHERE seq = ?", (*unpinned(kind, payload), seq))
    if target.backend == "sqlite":  # exactly the schema-1 layout: no chain column at all
        target.raw("ALTER TABLE toki_event DROP COLUMN chain", ())
        target.raw("UPDATE toki_meta SET value = '1' WHERE name = 'schema_version'", ())
        target.raw("CREATE TRIGGER toki_event_no_update BEFORE UPDATE ON toki_event "
                   "BEGIN SELECT RAISE(ABORT, 'append-only'); END", ())
    else:
        target.raw("UPDATE toki_event SET chain = NULL", ())
        target.raw("CREATE TRIGGER toki_event_append_only BEFORE UPDATE OR DELETE ON toki_event "
                   "FOR EACH ROW EXECUTE FUNCTION toki_append_only()", ())
    target.raw("DELETE FROM toki_meta WHERE name = 'chain_seal'", ())  # no seal before it
    before = target.raw("SELECT count(*) FROM toki_event", ())[0][0]
    with target.open() as mem:
        events = mem.events()
        assert len(events) == before + 1 and events[-1].kind is EventKind.CHAIN
        assert events[-1].body["chained"] == before
        assert mem.verify().ok
        saved = mem.digest()
    assert all(r[6] is not None for r in _rows(target))
    with target.open() as mem:  # once: a second open does not chain again
        assert len(mem.events()) == before + 1
        assert mem.verify(saved).ok


def test_every_stored_link_is_the_recomputed_one(target: Target) -> None:
    _fill(target)
    with target.open() as mem:
        stored = [e.chain for e in mem._store.load(ALL_SEQS)]
        prev, mine = GENESIS, []
        for e in mem.events():
            prev = link(prev, e)
            mine.append(prev)
        assert stored == mine


@pytest.mark.parametrize(
    "field, bad", [("kind", "NOPE"), ("kind", ["ASSERT"]), ("start_source", "guessed"),
                   ("start_source", ["evidence"]), ("end_source", 7)],
)  # fmt: skip
def test_a_row_with_a_kind_or_bound_source_toki_never_wrote_is_unreadable(
    field: str, bad: object
) -> None:
    """Kinds and bound sources are looked up by value (not through Enum's call); a value no
    kind or source has, hashable or not, is still an unreadable row naming its seq."""
    from toki.store.base import LOG_COLUMNS, events_from_rows

    mem = Memory()
    write_small_history(mem)
    event = next(e for e in mem.events() if e.kind is EventKind.ASSERT)
    body = json.loads(event.payload)
    kind: object = event.kind.value
    if field == "kind":
        kind = bad
    else:
        body["version"]["valid"][field] = bad
    payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
    row = (event.seq, event.key_seq, kind, payload, sha(payload, 64),
           _event_id(EventKind.ASSERT, payload), None)  # fmt: skip
    assert len(row) == len(LOG_COLUMNS.split(", "))
    with pytest.raises(IntegrityError, match=f"x.db: event seq {event.seq} is unreadable"):
        list(events_from_rows([row], "x.db"))
