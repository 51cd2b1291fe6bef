"""Checkpointed open (issue #37): opening a store from its checkpoint gives the state a full
replay of its log gives, whatever the log and wherever the checkpoint, also after a crash
between appending events and moving the checkpoint; a checkpoint or log changed outside
toki is refused or named, never served."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

from tests.test_conflict_groups import workload
from tests.test_replay_properties import KEYS, day, scripted_memory
from toki import FactKey, Memory
from toki import checkpoint as checkpoint_module
from toki.canonical import canonical_json, decode_json
from toki.checkpoint import UNCHECKED, text_digest
from toki.errors import IntegrityError
from toki.log import Event
from toki.model import fact_key_of_text
from toki.replay import is_built, replay
from toki.store.sqlite import SQLiteStore

SEED = 37
print(f"test_checkpoint: hypothesis seed {SEED}")


@dataclass
class Where:
    """A store of one backend, and the edits outside toki the tests make to it."""

    kind: str  # "sqlite" | "postgresql"
    url: str
    raw: Callable[[], Any]  # a new store object on `url` (not a Memory)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement outside toki (qmark placeholders), committed."""
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"))
            with conn:
                rows = conn.execute(statement, params).fetchall()
            conn.close()
            return rows
        store = self.raw()
        try:
            return store.execute(statement.replace("?", "%s"), params)  # type: ignore[no-any-return]
        finally:
            store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """factory() -> a fresh, empty store of the backend (PostgreSQL: its own schema)."""
    if request.param == "sqlite":

        def make_sqlite() -> Where:
            path = tmp_path_factory.mktemp("ckpt") / "store.db"
            return Where("sqlite", f"sqlite:///{path}", lambda: SQLiteStore(path))

        return make_sqlite
    from toki.store.pg_rows import with_schema
    from toki.store.postgres import PostgresStore

    dsn, schemas = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_store")

    def make_pg() -> Where:
        schema = schemas().schema  # created now, dropped after the test
        return Where(
            "postgresql",
            with_schema(dsn, schema),
            lambda: PostgresStore(dsn, schema=schema),
        )

    return make_pg


def _append(w: Where, events: list[Event], upto: int) -> None:
    """Append events[:upto] as a writer would have committed them (rows and projection),
    without touching the checkpoint (a process that died before moving it)."""
    store = w.raw()
    done = store.last_seq()
    todo = [e for e in events[:upto] if e.seq > done]
    if todo:
        with store.write_lock():
            store.append(todo, replay(events[:upto]).summaries(), todo[-1].seq, replace=True)
    store.close()


def _store(w: Where, events: list[Event], cut: int) -> None:
    """A store whose checkpoint is at events[cut - 1] and whose log holds every event."""
    _append(w, events, cut)
    with Memory.open(w.url) as mem:
        assert mem.open_report is not None and mem.open_report.opened_from == "full replay"
        made = mem.checkpoint()
        assert made is not None and made.seq == events[cut - 1].seq
    _append(w, events, len(events))


def _calls(w: Where, method: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The `upto` of every call of the backend's store `method` from now on (a whole-log
    read the test says must not happen)."""
    store = w.raw()
    kind = type(store)
    store.close()
    calls: list[int] = []
    real = getattr(kind, method)
    monkeypatch.setattr(kind, method, lambda s, upto: calls.append(upto) or real(s, upto))
    return calls


def _same(opened: Memory, full: Memory, times: list[datetime]) -> None:
    assert opened.state_hash() == full.state_hash()
    keys = full.keys()
    assert opened.keys() == keys
    for key in keys:
        for at in times:
            assert opened.resolve_at(key, at) == full.resolve_at(key, at)
            assert opened.resolve_at(key, at, times[1]) == full.resolve_at(key, at, times[1])
        assert opened.history(key) == full.history(key)
        assert opened.audit(key) == full.audit(key)
        assert opened.open_conflicts(key) == full.open_conflicts(key)


TIMES = [day(0), day(10), day(25), day(45), day(400)]


CASES = dict(
    script=st.sampled_from(["conflicts", "lifecycle"]),
    script_seed=st.integers(0, 10**6),
    at=st.floats(0, 1),
    bulk_share=st.sampled_from([0.0, 0.05, 1.0, 2.0]),
)
HEALTH = [HealthCheck.function_scoped_fixture]


@pytest.mark.slow  # about a minute on the shared 2-core machine
@seed(SEED)
@settings(max_examples=25, deadline=None, suppress_health_check=HEALTH)
@given(**CASES)
def test_checkpoint_open_equals_full_replay(
    tmp_path_factory: pytest.TempPathFactory,
    script: str,
    script_seed: int,
    at: float,
    bulk_share: float,
) -> None:
    """bulk_share: the share of the prefix read key by key before the rest is built in one
    pass (0: at the first key; 2.0: after reading twice the prefix key by key)."""
    path = tmp_path_factory.mktemp("ckpt") / "store.db"
    w = Where("sqlite", f"sqlite:///{path}", lambda: SQLiteStore(path))
    _with_bulk_share(
        bulk_share, lambda: _checkpoint_open_equals_full_replay(w, script, script_seed, at)
    )


@pytest.mark.slow  # about a minute on the shared 2-core machine
@seed(SEED)
@settings(max_examples=8, deadline=None, suppress_health_check=HEALTH)
@given(**CASES)
def test_checkpoint_open_equals_full_replay_on_postgresql(
    pg_dsn: str,
    pg_store: Callable[..., Any],
    script: str,
    script_seed: int,
    at: float,
    bulk_share: float,
) -> None:
    """The same law on PostgreSQL (fewer examples: each one is a schema on the server)."""
    from toki.store.pg_rows import with_schema
    from toki.store.postgres import PostgresStore

    schema = pg_store().schema
    w = Where(
        "postgresql", with_schema(pg_dsn, schema), lambda: PostgresStore(pg_dsn, schema=schema)
    )
    _with_bulk_share(
        bulk_share, lambda: _checkpoint_open_equals_full_replay(w, script, script_seed, at)
    )


def _with_bulk_share(bulk_share: float, run: Callable[[], None]) -> None:
    saved, checkpoint_module.BULK_SHARE = checkpoint_module.BULK_SHARE, bulk_share
    try:
        run()
    finally:
        checkpoint_module.BULK_SHARE = saved


def _checkpoint_open_equals_full_replay(w: Where, script: str, script_seed: int, at: float) -> None:
    built = workload(script_seed, 40) if script == "conflicts" else scripted_memory(script_seed, 40)
    events = list(built.events())
    cut = max(1, round(at * len(events)))
    note(f"{w.kind}: script {script} seed {script_seed}: {len(events)} events, checkpoint at {cut}")
    _store(w, events, cut)
    full = Memory.replay(events)
    opened = Memory.open(w.url)
    report = opened.open_report
    assert report is not None and report.ok
    assert report.opened_from.startswith(f"checkpoint at seq {cut} ({len(events) - cut} tail")
    _same(opened, full, TIMES)
    other = Memory.open(w.url)
    assert opened.digest() == other.digest()
    other.close()
    assert [e.event_id for e in opened.events()] == [e.event_id for e in events]  # lazy, chained
    # writes on the opened store continue the log as on the full replay
    for mem in (opened, full):
        mem.assert_fact(KEYS[0], "Oslo", valid_from=day(3), recorded_at=day(500), source_id="after")
    _same(opened, full, TIMES)
    # a checkpoint written now leaves the tail keys nobody used unbuilt (their rows UNCHECKED)
    opened.checkpoint()
    opened._store.close()
    again = Memory.open(w.url)
    assert again.open_report is not None and again.open_report.ok
    _same(again, full, TIMES)
    again.close()


def test_a_crash_between_tail_events_and_the_checkpoint(
    where: Callable[[], Where], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes commit their events; the checkpoint only moves when one is due, so a process
    that dies leaves a tail that the next open folds (and may then write a new one).
    MIN_TAIL 200 instead of 1,000: the same law, a fifth of the writes."""
    monkeypatch.setattr(checkpoint_module, "MIN_TAIL", 200)
    url = where().url
    mem = Memory.open(url, clock=lambda: day(400))
    keys = [FactKey("t", f"u{j}", "city") for j in range(20)]  # short per-key partitions
    for i in range(330):
        mem.assert_fact(keys[i % 20], f"v{i % 7}", valid_from=day(i), source_id=f"s{i}")
    assert mem._checkpoint is not None
    at, tail = mem._checkpoint.seq, mem.watermark - mem._checkpoint.seq
    assert at >= 400 and 0 < tail < 200
    expected = mem.state_hash()
    mem._store.close()  # killed: no close(), so no checkpoint at the head
    again = Memory.open(url)
    assert again.open_report is not None
    assert again.open_report.opened_from.startswith(f"checkpoint at seq {at} ({tail} tail")
    assert again.state_hash() == expected == Memory.replay(again.events()).state_hash()
    again.close()


def _set_checkpoint(w: Where, text: str, digest: str | None = None) -> None:
    w.sql("UPDATE toki_meta SET value = ? WHERE name = 'checkpoint'", (text,))
    if digest is not None:
        w.sql("UPDATE toki_meta SET value = ? WHERE name = 'checkpoint_digest'", (digest,))


def _checkpointed(where: Callable[[], Where]) -> tuple[Where, list[Event]]:
    events = list(workload(7, 60).events())
    w = where()
    _store(w, events, len(events) - 5)
    return w, events


def _record(w: Where) -> dict:  # type: ignore[type-arg]
    text = w.sql("SELECT value FROM toki_meta WHERE name = 'checkpoint'")[0][0]
    return dict(decode_json(text))


def test_a_checkpoint_edited_without_its_digest_is_refused(where: Callable[[], Where]) -> None:
    w, events = _checkpointed(where)
    record = _record(w)
    record["keys"] = record["keys"][1:]  # a key forgotten
    _set_checkpoint(w, canonical_json(record))
    with Memory.open(w.url) as mem:
        assert mem.open_report is not None
        assert mem.open_report.opened_from.startswith("full replay (checkpoint refused:")
        assert mem.state_hash() == Memory.replay(events).state_hash()


def test_a_forged_head_is_refused(where: Callable[[], Where]) -> None:
    w, events = _checkpointed(where)
    record = _record(w)
    record["head"] = "0" * 64
    text = canonical_json(record)
    _set_checkpoint(w, text, text_digest(text))  # digest recomputed too
    with Memory.open(w.url) as mem:
        assert mem.open_report is not None
        assert "is not the checkpoint's head" in mem.open_report.opened_from
        assert mem.state_hash() == Memory.replay(events).state_hash()


def test_a_forged_per_key_seq_is_named_on_first_use(where: Callable[[], Where]) -> None:
    w, _ = _checkpointed(where)
    record = _record(w)
    record["keys"][0][1] += 1  # the checkpoint now claims an event the log does not hold
    text = canonical_json(record)
    _set_checkpoint(w, text, text_digest(text))
    mem = Memory.open(w.url)
    key = fact_key_of_text(record["keys"][0][0])
    with pytest.raises(IntegrityError, match="checkpoint recorded"):
        mem.history(key)
    mem._store.close()


def _rewrite_first_value(w: Where) -> FactKey:
    """Rewrite the first ASSERT's value with its payload hash and event id recomputed, its
    chain link left as it was (the threat model's second row)."""
    from toki.log import EventKind, make_event

    seq, key_seq, payload = w.sql(
        "SELECT seq, key_seq, payload FROM toki_event WHERE kind = 'ASSERT' ORDER BY seq"
    )[0]
    body = dict(decode_json(payload))
    body["version"] = {**body["version"], "value": "Forged"}
    key = FactKey.from_json(body["_key"])
    event = make_event(
        seq,
        key_seq,
        EventKind.ASSERT,
        key,
        datetime.fromisoformat(body["_recorded_at"]),
        tuple(body["_version_ids"]),
        {k: v for k, v in body.items() if not k.startswith("_")},
    )
    if w.kind == "sqlite":
        w.sql("DROP TRIGGER toki_event_no_update")
    else:
        w.sql("ALTER TABLE toki_event DISABLE TRIGGER toki_event_append_only")
    w.sql(
        "UPDATE toki_event SET payload = ?, payload_hash = ?, event_id = ? WHERE seq = ?",
        (event.payload, event.payload_hash, event.event_id, seq),
    )
    return key


def test_a_rewritten_prefix_event_is_named_by_its_key_and_by_verify(
    where: Callable[[], Where],
) -> None:
    w, _ = _checkpointed(where)
    key = _rewrite_first_value(w)
    mem = Memory.open(w.url)  # the prefix is not walked on open
    with pytest.raises(IntegrityError, match="chain link does not follow"):
        mem.current(key)  # never served: the key's rows are checked when it is built
    with pytest.raises(IntegrityError):
        mem.events()  # the whole prefix, walked to the checkpoint's head
    report = mem.verify()
    assert not report.ok and "chain link" in (report.problem or "")
    mem._store.close()


def _bump_intervals(w: Where, key: FactKey) -> None:
    """Edit one projection row outside toki."""
    if w.kind == "sqlite":
        where, params = "fact_key = ?", (canonical_json(key.to_json()),)
    else:
        where = "tenant = ? AND subject = ? AND scope_kind = ? AND scope_key = ? AND fact_key = ?"
        params = (key.tenant, key.subject, key.scope_kind, key.scope_key, key.fact_key)
    w.sql(f"UPDATE toki_current SET open_intervals = open_intervals + 1 WHERE {where}", params)


def test_an_edited_projection_row_is_detected_on_open(where: Callable[[], Where]) -> None:
    w, events = _checkpointed(where)
    touched = {e.key for e in events[-5:]}
    untouched = next(k for k in sorted({e.key for e in events}) if k not in touched)
    _bump_intervals(w, untouched)
    with pytest.raises(IntegrityError, match="stored projection differs"):
        Memory.open(w.url)
    with Memory.open(w.url, repair_projection=True) as mem:
        assert mem.open_report is not None and not mem.open_report.ok
    with Memory.open(w.url) as mem:
        assert mem.open_report is not None and mem.open_report.ok


def test_an_edited_row_of_a_tail_key_is_named_on_its_first_use(where: Callable[[], Where]) -> None:
    w, events = _checkpointed(where)
    key = events[-1].key
    _bump_intervals(w, key)
    mem = Memory.open(w.url)  # a key the tail touched checks its row when it is built
    with pytest.raises(IntegrityError, match="projection row of"):
        mem.history(key)
    mem._store.close()


def test_a_store_without_a_checkpoint_opens_by_replay_and_gets_one(
    where: Callable[[], Where],
) -> None:
    mem = scripted_memory(3, 30)
    events = list(mem.events())
    many = list(Memory.replay(events).events())
    small = where()
    _append(small, many, len(many))
    assert small.raw().load_checkpoint() is None
    with Memory.open(small.url) as opened:  # small: replayed, no checkpoint due
        assert opened.open_report is not None
        assert opened.open_report.opened_from == "full replay"
    big = Memory(clock=lambda: day(400))
    for i in range(1_100):
        big.assert_fact(KEYS[i % 2], f"v{i % 5}", valid_from=day(i % 90), source_id=f"s{i}")
    w = where()
    _append(w, list(big.events()), len(big.events()))
    with Memory.open(w.url) as opened:
        assert opened.open_report is not None
        assert opened.open_report.opened_from == "full replay"
    store = w.raw()
    assert store.load_checkpoint() is not None  # written by that open
    store.close()
    with Memory.open(w.url) as opened:
        assert opened.open_report is not None
        head = len(big.events())
        assert opened.open_report.opened_from.startswith(f"checkpoint at seq {head} (0 tail")
        assert opened.state_hash() == big.state_hash()


def test_verify_names_a_forged_checkpoint_and_toki_checkpoint_rewrites_it(
    where: Callable[[], Where], capsys: pytest.CaptureFixture[str]
) -> None:
    from toki.cli import main

    w, _ = _checkpointed(where)
    url = w.url
    assert main(["verify", url]) == 0
    record = _record(w)
    record["keys"][0][2] = "0" * 64  # a projection-row digest, with the record's own digest
    text = canonical_json(record)
    _set_checkpoint(w, text, text_digest(text))
    capsys.readouterr()
    assert main(["verify", url]) == 1
    assert "checkpoint at seq" in capsys.readouterr().out
    assert main(["checkpoint", url]) == 0  # replays the log, writes a new record
    assert "opened by full replay" in capsys.readouterr().out
    assert main(["verify", url]) == 0


def test_a_db_taken_after_a_checkpointed_open_never_changes(where: Callable[[], Where]) -> None:
    """Copy on write holds for lazy states: the Db keeps the state it was handed."""
    w, events = _checkpointed(where)
    mem = Memory.open(w.url)
    before = mem.db()
    expected = Memory.replay(events)
    key = KEYS[0]
    mem.assert_fact(key, "Oslo", valid_from=day(2), recorded_at=day(600), source_id="later")
    assert before.state_hash() == expected.state_hash()
    assert before.history(key) == expected.history(key)
    assert mem.history(key) != expected.history(key)
    expected.assert_fact(key, "Oslo", valid_from=day(2), recorded_at=day(600), source_id="later")
    assert mem.state_hash() == expected.state_hash()
    mem.close()


# -- PostgreSQL only: the sequencer and concurrent writers ---------------------------------


def _pg(pg_dsn: str, pg_store: Callable[..., Any]) -> Where:
    from toki.store.pg_rows import with_schema
    from toki.store.postgres import PostgresStore

    schema = pg_store().schema
    return Where(
        "postgresql", with_schema(pg_dsn, schema), lambda: PostgresStore(pg_dsn, schema=schema)
    )


def test_two_concurrent_writers_each_write_a_valid_record(
    pg_dsn: str, pg_store: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Memories write different keys at once; both reach a due checkpoint and write
    it (the last one wins); every record written names a sequenced seq and its head, and
    the store then opens from the record to the state a full replay gives."""
    from toki.checkpoint import Checkpoint

    monkeypatch.setattr(checkpoint_module, "MIN_TAIL", 200)  # the same law, fewer writes
    w = _pg(pg_dsn, pg_store)
    mems = [Memory.open(w.url, clock=lambda: day(400)) for _ in range(2)]
    saved: list[str] = []
    for mem in mems:
        store: Any = mem._store
        save = store.save_checkpoint

        def spy(text: str, digest: str, save: Any = save) -> None:
            save(text, digest)
            saved.append(text)

        store.save_checkpoint = spy

    def writes(mem: Memory, key: FactKey, tag: str) -> None:
        for i in range(100):
            mem.assert_fact(key, f"{tag}{i % 7}", valid_from=day(i), source_id=f"{tag}{i}")

    threads = [
        threading.Thread(target=writes, args=(m, KEYS[i], f"w{i}")) for i, m in enumerate(mems)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(saved) >= 2  # each writer wrote one
    log = {e.seq: e.chain for e in mems[0].events()}
    for text in saved:
        record = Checkpoint.from_text(text, text_digest(text), w.url)
        assert record is not None and log[record.seq] == record.head
    for mem in mems:
        mem._store.close()
    with Memory.open(w.url) as again:
        assert again.open_report is not None
        assert again.open_report.opened_from.startswith("checkpoint at seq")
        assert again.state_hash() == Memory.replay(again.events()).state_hash()
        assert again.verify().ok  # the record itself checked against a replay


def test_a_checkpoint_never_covers_unsequenced_events(
    pg_dsn: str, pg_store: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that committed but was not sequenced leaves a pending event: an open that
    cannot see it sequenced does not open from the record (it replays the sequenced log,
    as before), and a record ahead of the sequenced log is refused."""
    from toki.checkpoint import Checkpoint
    from toki.store.postgres import PostgresStore

    class Unsequenced(PostgresStore):
        def sequence(self) -> int:
            return 0

    monkeypatch.setattr(checkpoint_module, "MIN_TAIL", 200)  # the same law, fewer writes
    w = _pg(pg_dsn, pg_store)
    schema = w.raw().schema
    mem = Memory.open(w.url, clock=lambda: day(400))
    for i in range(120):
        mem.assert_fact(KEYS[i % 2], f"v{i % 7}", valid_from=day(i), source_id=f"s{i}")
    assert mem._checkpoint is not None
    mem.close()
    stalled = Memory(Unsequenced(pg_dsn, schema=schema), clock=lambda: day(401))
    stalled.assert_fact(KEYS[1], "late", valid_from=day(1), source_id="late")
    assert w.sql("SELECT count(*) FROM toki_pending")[0][0] > 0
    blind = Memory(Unsequenced(pg_dsn, schema=schema))
    assert blind.open_report is not None
    assert "not used: concurrent writes kept the log unsequenced" in blind.open_report.opened_from
    last = blind._store.last_seq()
    ahead = Checkpoint(last + 1, "0" * 64, ())
    store: Any = blind._store
    with pytest.raises(IntegrityError, match="does not match the log"), store.write_lock():
        store.save_checkpoint(ahead.to_text(), text_digest(ahead.to_text()))
    blind._store.close()
    stalled._store.close()
    with Memory.open(w.url) as again:  # sequences the pending event, opens from the record
        assert again.open_report is not None
        assert again.open_report.opened_from.startswith("checkpoint at seq")
        assert again.watermark > last
        assert again.state_hash() == Memory.replay(again.events()).state_hash()


def test_an_edited_version_row_is_named_on_first_use(
    pg_dsn: str, pg_store: Callable[..., Any]
) -> None:
    """toki_version is part of a key's projection on PostgreSQL: after an open from a
    checkpoint, an edited row of the prefix is named when its key is built, one of the tail
    when its key is first used (toki verify names both)."""
    w = _pg(pg_dsn, pg_store)
    events = list(workload(7, 60).events())
    _store(w, events, len(events) - 5)
    tail_key = next(e.key for e in reversed(events) if e.kind.value == "ASSERT")
    touched = {e.key for e in events[-5:]}
    prefix_key = next(e.key for e in events if e.kind.value == "ASSERT" and e.key not in touched)
    w.sql("ALTER TABLE toki_version DISABLE TRIGGER toki_version_append_only")
    for key, last in ((prefix_key, "ASC"), (tail_key, "DESC")):
        w.sql(
            "UPDATE toki_version SET weight = weight + 1 WHERE id = (SELECT id FROM "
            f"toki_version WHERE subject = ? AND fact_key = ? ORDER BY key_seq {last} LIMIT 1)",
            (key.subject, key.fact_key),
        )
    mem = Memory.open(w.url)
    with pytest.raises(IntegrityError, match=r"its toki_version row .* differs from the log"):
        mem.history(prefix_key)
    with pytest.raises(IntegrityError, match=r"stored projection row of .* differs"):
        mem.history(tail_key)
    assert not mem.verify().ok
    mem._store.close()


def test_a_tail_event_is_decoded_only_when_its_key_is_used() -> None:
    """SQLite reads the tail for the chain check without decoding payloads (LazyEvent); a
    key's tail events are decoded, and verified, when that key is first used."""
    import tempfile

    from toki.log import LazyEvent

    with tempfile.TemporaryDirectory() as tmp:
        w = Where("sqlite", f"sqlite:///{tmp}/s.db", lambda: SQLiteStore(f"{tmp}/s.db"))
        events = list(workload(7, 60).events())
        _store(w, events, len(events) - 5)
        mem = Memory.open(w.url)
        tail = [e for e in mem._log._events if e.seq > len(events) - 5]
        assert len(tail) == 5 and all(isinstance(e, LazyEvent) for e in tail)
        key = tail[-1].key
        mem.history(key)
        assert all(type(e) is Event for e in tail if e.key == key)
        assert tail == events[-5:]  # equal to what was written, field by field (decodes)
        assert all(type(e) is Event for e in tail)
        mem._store.close()


def test_a_tail_payload_edited_outside_toki_is_never_served(where: Callable[[], Where]) -> None:
    """A tail event's payload changed (its stored hash, id and link left): the link check at
    open cannot see it (the link covers the hash), the payload check can: at open
    (PostgreSQL decodes its tail) or when the key is first used (SQLite)."""
    w, events = _checkpointed(where)
    last = events[-1]
    body = dict(decode_json(last.payload))
    body["_edited"] = True
    if w.kind == "sqlite":
        w.sql("DROP TRIGGER toki_event_no_update")
    else:
        w.sql("ALTER TABLE toki_event DISABLE TRIGGER toki_event_append_only")
    w.sql("UPDATE toki_event SET payload = ? WHERE seq = ?", (canonical_json(body), last.seq))
    with pytest.raises(IntegrityError, match="payload hash mismatch"):
        mem = Memory.open(w.url)
        try:
            mem.history(last.key)
        finally:
            mem._store.close()


def test_a_record_of_the_first_format_is_ignored(where: Callable[[], Where]) -> None:
    """Format 1 named keys by JSON objects and digested rows otherwise: never misread, the
    open replays and writes a record of the current format."""
    w, events = _checkpointed(where)
    record = _record(w)
    old = {**record, "format": 1, "keys": [[decode_json(t), n, d] for t, n, d in record["keys"]]}
    text = canonical_json(old)
    _set_checkpoint(w, text, text_digest(text))
    with Memory.open(w.url) as mem:
        assert mem.open_report is not None
        assert mem.open_report.opened_from == "full replay (checkpoint of another format ignored)"
        assert mem.state_hash() == Memory.replay(events).state_hash()
        mem.checkpoint()
    assert _record(w)["format"] == checkpoint_module.FORMAT == 2


def _unused_tail_key(where: Callable[[], Where]) -> tuple[Where, Memory, FactKey, FactKey]:
    """An open of a store checkpointed before a tail on two keys or more, then a write on one
    of them and a checkpoint; (the store, the Memory, the written key, a tail key unused)."""
    events = list(workload(7, 60).events())
    cut = next(c for c in range(len(events) - 1, 0, -1) if len({e.key for e in events[c:]}) > 1)
    w = where()
    _store(w, events, cut)
    tail_keys = sorted({e.key for e in events[cut:]})
    used, unused = tail_keys[0], tail_keys[1]
    mem = Memory.open(w.url)
    mem.assert_fact(used, "Oslo", valid_from=day(3), recorded_at=day(500), source_id="after")
    made = mem.checkpoint()
    assert made is not None
    return w, mem, used, unused


def test_a_checkpoint_after_an_open_never_builds_the_tail_keys(where: Callable[[], Where]) -> None:
    """Writing a record after a checkpointed open builds no key the tail touched that nobody
    used (at 10^6 events the first checkpoint after an open built ~630 of them, 14 s): the
    record marks their rows UNCHECKED, and the next open checks those rows on first use."""
    w, mem, used, unused = _unused_tail_key(where)
    assert is_built(mem._snapshot.keys[used]) and not is_built(mem._snapshot.keys[unused])
    digests = {fact_key_of_text(t): d for t, _, d in _record(w)["keys"]}
    assert digests[unused] == UNCHECKED and digests[used] != UNCHECKED
    expected = mem.state_hash()
    mem._store.close()
    again = Memory.open(w.url)
    assert again.open_report is not None and again.open_report.ok
    assert again.verify().ok  # the record vouches for no unchecked row: nothing to name
    assert again.state_hash() == expected == Memory.replay(again.events()).state_hash()
    assert again.checkpoint() is not None  # now built (state_hash): digested again
    assert UNCHECKED not in {d for _, _, d in _record(w)["keys"]}
    again._store.close()


def test_an_edited_row_left_unchecked_is_named_on_its_first_use(
    where: Callable[[], Where],
) -> None:
    """A record never vouches for a row its writer did not check: an edit to such a row
    before the next open is named when that key is first used, never served."""
    w, mem, _, unused = _unused_tail_key(where)
    mem._store.close()
    _bump_intervals(w, unused)
    again = Memory.open(w.url)
    assert again.open_report is not None and again.open_report.ok  # not read at open
    with pytest.raises(IntegrityError, match="projection row of"):
        again.history(unused)
    again._store.close()


def test_holds_are_found_by_token_after_a_checkpointed_open(
    where: Callable[[], Where], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an open from a checkpoint a write reads no holds, and confirm or reject finds
    its token's key by an index (SQLite's and PostgreSQL's toki_event_token): listing every
    hold read all of the log's DECISION events (0.33 s at 10^6 events), once on every first
    write and then on the first confirm. A hold of the tail, one of the prefix and an
    unknown token are each answered without that read."""
    from toki import Claim
    from toki.algebra.await_ import AWAIT
    from toki.errors import UnknownProposal

    w = where()
    key, other = FactKey("t", "alice", "city"), FactKey("t", "bob", "city")
    mem = Memory.open(w.url)
    mem.write(Claim(key, "Lisbon", "s1", day(1), recorded_at=day(2)), AWAIT)
    held = mem.write(Claim(key, "Berlin", "s2", day(1), recorded_at=day(3)), AWAIT)
    mem.checkpoint()
    mem.write(Claim(other, "Oslo", "s3", day(1), recorded_at=day(4)), AWAIT)
    in_tail = mem.write(Claim(other, "Rome", "s4", day(1), recorded_at=day(5)), AWAIT)
    mem._store.close()  # not close(): that may checkpoint the tail away
    assert held.token and in_tail.token  # the premise: one hold each side of the checkpoint
    reads = _calls(w, "decision_events", monkeypatch)
    opened = Memory.open(w.url)
    assert opened.open_report is not None and opened.open_report.opened_from.startswith("check")
    opened.assert_fact(other, "Oslo", valid_from=day(1), recorded_at=day(6), source_id="s5")
    assert opened.confirm(held.token, recorded_at=day(7))
    assert opened.reject(in_tail.token, recorded_at=day(8))
    with pytest.raises(UnknownProposal):
        opened.confirm("no-such-token", recorded_at=day(9))
    assert reads == []
    assert opened.state_hash() == Memory.replay(opened.events()).state_hash()
    assert dict(opened._snapshot.holds) == Memory.replay(opened.events())._snapshot.holds
    assert len(reads) == 1  # a full read still reads them all
    opened._store.close()


def test_a_version_is_found_by_its_index_after_a_checkpointed_open(
    where: Callable[[], Where], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read or write naming a version by id looks up that one version's key (SQLite's
    toki_event_version index, PostgreSQL's toki_version): loading every version's key from
    the log took 2 s at 10^6 events, on the first such call after an open. An unknown id is
    a miss without a load either."""
    from toki.errors import UnknownVersion

    w, events = _checkpointed(where)
    cut = len(events) - 5
    full = Memory.replay(events)
    prefix_vid = next(  # one that can be revoked
        e.version_ids[0]
        for e in events[:cut]
        if e.kind.value == "ASSERT" and full.lifecycle(e.version_ids[0]).value == "ACTIVE"
    )
    loads = _calls(w, "version_keys", monkeypatch)
    mem = Memory.open(w.url)
    assert mem.lifecycle(prefix_vid) == full.lifecycle(prefix_vid)
    with pytest.raises(UnknownVersion):
        mem.lifecycle("v-" + "0" * 32)
    for m in (mem, full):
        m.revoke(prefix_vid, reason="wrong", recorded_at=day(600))
    assert loads == []
    assert mem.state_hash() == full.state_hash()
    assert dict(mem._snapshot.version_key.items()) == dict(full._snapshot.version_key.items())
    assert loads == [events[cut - 1].seq]  # a full read still loads them all, once
    mem.close()


def test_the_version_lookup_goes_through_its_index(tmp_path: Any) -> None:
    """SQLite uses an expression index only for the very expression it indexes: the lookup
    must repeat it exactly, or each lookup scans the whole log."""
    from toki.store.sqlite import VERSION_KEY

    store = SQLiteStore(tmp_path / "s.db")
    plan = store.execute("EXPLAIN QUERY PLAN " + VERSION_KEY, ("v-x", 1))
    store.close()
    assert any("toki_event_version" in str(row) for row in plan), plan


def test_the_hold_lookup_goes_through_its_index(tmp_path: Any) -> None:
    """As for versions: confirm's token lookup repeats toki_event_token's expression."""
    from toki.store.sqlite import HOLD_KEY

    store = SQLiteStore(tmp_path / "s.db")
    plan = store.execute("EXPLAIN QUERY PLAN " + HOLD_KEY, ("tok", 1))
    store.close()
    assert any("toki_event_token" in str(row) for row in plan), plan


def test_a_write_after_a_checkpointed_open_runs_the_statements_of_any_write(
    tmp_path: Any,
) -> None:
    """Folding its own committed events never asks the store whether it has seen them: after
    an open from a checkpoint that question is an indexed query per event (the event-id set
    is lazy), which every write paid after its commit."""
    from collections import Counter

    def statements(url: str, first: int) -> Counter[str]:
        mem = Memory.open(url)
        report = mem.open_report  # None for a new store
        assert (report is not None and report.opened_from.startswith("checkpoint")) == (first > 0)
        seen: Counter[str] = Counter()
        mem._store._conn.set_trace_callback(lambda sql: seen.update([sql.split("(")[0]]))
        for i in range(first, first + 6):
            key = FactKey("t", f"s{i % 3}", "city")
            mem.assert_fact(key, f"v{i}", valid_from=day(i), recorded_at=day(i), source_id=f"x{i}")
        mem._store._conn.set_trace_callback(None)
        assert mem.state_hash() == Memory.replay(mem.events()).state_hash()
        mem._store.close()
        return seen

    url = f"sqlite:///{tmp_path}/s.db"
    fresh = statements(url, 0)  # every key new to this Memory's store: no checkpoint yet
    with Memory.open(url) as mem:
        assert mem.checkpoint() is not None
    after = statements(url, 6)  # opened from that checkpoint
    assert not any("SELECT 1 FROM toki_event" in sql for sql in after), after
    builds = {sql for sql in after if sql.startswith(("SELECT e.seq", "SELECT seq, key_seq"))}
    assert set(after) - builds == set(fresh), (after, fresh)  # first use builds the keys


def test_judge_verdicts_load_per_key_after_a_checkpointed_open(
    where: Callable[[], Where], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an open from a checkpoint a key's logged verdicts come from its own DECISION
    events, the prefix's and the tail's: a judged write reads no other key's (listing every
    verdict read all of the log's DECISION events, 0.33 s at 10^6 events, on the first
    judged write); a full read still sees every verdict, the first per θ as a replay does."""
    from toki import Claim
    from toki.algebra.ewm import EWM
    from toki.judge import StochasticJudge

    w = where()
    a, b = FactKey("t", "alice", "city"), FactKey("t", "bob", "city")
    judge = StochasticJudge(0.5, stream_seed=SEED)
    mem = Memory.open(w.url)
    for i, value in enumerate(["Lisbon", "Berlin", "Oslo"]):
        mem.write(Claim(a, value, f"s{i}", day(1), recorded_at=day(2 + i)), EWM, judge=judge)
    mem.checkpoint()
    for i, value in enumerate(["Rome", "Paris"]):  # the tail
        mem.write(Claim(b, value, f"t{i}", day(1), recorded_at=day(9 + i)), EWM, judge=judge)
    mem._store.close()  # not close(): that may checkpoint the tail away
    logged = [e for e in mem.events() if e.body.get("decision") == "judge"]
    assert {e.key for e in logged} == {a, b}  # the premise: verdicts before and after
    reads = _calls(w, "decision_events", monkeypatch)
    opened = Memory.open(w.url)
    assert opened.open_report is not None and opened.open_report.opened_from.startswith("check")
    full = Memory.replay(mem.events())
    log, want = opened._snapshot.judge_log, full._snapshot.judge_log
    for e in logged:
        digest = str(e.body["theta_digest"])
        assert log.verdict_of(e.key, digest) == want.verdict_of(e.key, digest) is not None
    asked = judge.calls
    opened.write(Claim(a, "Madrid", "s9", day(1), recorded_at=day(20)), EWM, judge=judge)
    assert reads == [] and judge.calls > asked  # a judged write on a key with verdicts
    again = Memory.replay(opened.events())
    assert len(opened._snapshot.judge_log) == len(again._snapshot.judge_log)  # a full read
    assert len(reads) == 1
    assert opened.state_hash() == again.state_hash()
    opened._store.close()


def _vouched_rows_match(path: Any) -> dict[str, str]:
    """Each key text the record vouches for, with its digest, after asserting it is the
    digest of the projection row stored for that key."""
    conn = sqlite3.connect(path)
    stored = {str(r[0]): checkpoint_module.row_digest(r) for r in conn.execute(
        "SELECT * FROM toki_current")}
    text = conn.execute("SELECT value FROM toki_meta WHERE name = 'checkpoint'").fetchone()[0]
    conn.close()
    vouched = {t: d for t, _, d in decode_json(text)["keys"] if d != UNCHECKED}
    assert vouched and all(stored[t] == d for t, d in vouched.items())
    return vouched


def _summaries(monkeypatch: pytest.MonkeyPatch) -> list[FactKey]:
    """The key of every KeyState.summary() computed from now on."""
    from toki.replay import KeyState

    calls: list[FactKey] = []
    real = KeyState.summary
    monkeypatch.setattr(KeyState, "summary", lambda s: calls.append(s.key) or real(s))
    return calls


def test_a_checkpoint_vouches_for_the_rows_its_own_writes_stored(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint written after this Memory's own writes (SQLite: one writer) takes each
    key's digest from the projection row its last write stored, without folding the key's
    summary again (a third of a checkpoint's time on a store of 500 keys), and the next open
    finds every vouched row as recorded."""
    path = tmp_path / "own.db"
    mem = Memory.open(f"sqlite:///{path}")
    keys = [FactKey("t", f"s{i}", "city") for i in range(6)]
    for i, value in enumerate(["Lisbon", "Oslo", "Rome", "Paris", "Oslo", "Lima", "Kyiv"] * 3):
        mem.assert_fact(keys[i % 6], value, valid_from=day(i % 5), recorded_at=day(10 + i),
                        source_id=f"s{i}")
    summaries = _summaries(monkeypatch)
    assert mem.checkpoint() is not None
    assert summaries == []
    assert set(_vouched_rows_match(path)) == {SQLiteStore.key_text(mem._store, k) for k in keys}  # type: ignore[arg-type]
    expected = mem.state_hash()
    mem._store.close()
    again = Memory.open(f"sqlite:///{path}")
    assert again.open_report is not None and again.open_report.ok
    assert again.open_report.opened_from.startswith("checkpoint at seq")
    assert again.state_hash() == expected == Memory.replay(again.events()).state_hash()
    again._store.close()


def test_a_key_another_writer_wrote_since_is_folded_again_for_the_checkpoint(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When another process wrote a key after this Memory's own write, the row this Memory
    stored is no longer the key's: its checkpoint folds the key's summary again, and vouches
    for the row the other writer stored (using the stale one would make the next open report
    the projection as drifted)."""
    path = tmp_path / "two.db"
    url = f"sqlite:///{path}"
    a, b = Memory.open(url), Memory.open(url)
    k, other = FactKey("t", "alice", "city"), FactKey("t", "bob", "city")
    a.assert_fact(k, "Lisbon", valid_from=day(1), recorded_at=day(2), source_id="a")
    a.assert_fact(other, "Rome", valid_from=day(1), recorded_at=day(2), source_id="a")
    b.assert_fact(k, "Oslo", valid_from=day(3), recorded_at=day(4), source_id="b")
    summaries = _summaries(monkeypatch)
    assert a.checkpoint() is not None
    assert summaries == [k]  # folded again; `other`'s row is a's own
    _vouched_rows_match(path)
    for mem in (a, b):
        mem._store.close()
    again = Memory.open(url)
    assert again.open_report is not None and again.open_report.ok
    assert {h.version.value for h in again.history(k)} == {"Lisbon", "Oslo"}
    assert again.state_hash() == Memory.replay(again.events()).state_hash()
    again._store.close()


def test_a_sweep_of_every_key_reads_the_log_once(
    where: Callable[[], Where], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`state_hash` reads every key: after an open from a checkpoint it builds them all from
    one pass over the log up to the checkpoint, not one read per key first (that rent, then
    the pass, read the prefix about twice: 73 s for state_hash at 10^6 events,
    benchmarks/results/open.json); the hash is the full replay's."""
    w, events = _checkpointed(where)
    cut = len(events) - 5
    store = w.raw()
    kind = type(store)
    store.close()
    reads: list[str] = []
    for method in ("key_events", "prefix_events"):
        real = getattr(kind, method)

        def counted(s: Any, *args: Any, _real: Any = real, _name: str = method) -> Any:
            reads.append(_name)
            return _real(s, *args)

        monkeypatch.setattr(kind, method, counted)
    opened = Memory.open(w.url)
    assert opened.open_report is not None and opened.open_report.opened_from.startswith(
        f"checkpoint at seq {cut} "
    )
    assert opened.state_hash() == Memory.replay(events).state_hash()
    assert reads == ["prefix_events"]
    opened.current(KEYS[0])  # every key built: nothing more is read
    assert reads == ["prefix_events"]
    opened.close()
