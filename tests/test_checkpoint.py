"""Checkpointed open (issue #37): opening a store from its checkpoint gives the state a full
replay of its log gives, whatever the log and wherever the checkpoint, also after a crash
between appending events and moving the checkpoint; a checkpoint or log changed outside
toki is refused or named, never served."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

from tests.test_conflict_groups import workload
from tests.test_replay_properties import KEYS, day, scripted_memory
from toki import FactKey, Memory
from toki import checkpoint as checkpoint_module
from toki.canonical import canonical_json, decode_json
from toki.checkpoint import text_digest
from toki.errors import IntegrityError
from toki.log import Event
from toki.replay import replay
from toki.store.sqlite import SQLiteStore

SEED = 37
print(f"test_checkpoint: hypothesis seed {SEED}")


def _append(path: Path, events: list[Event], upto: int) -> None:
    """Append events[:upto] as a writer would have committed them (rows and projection),
    without touching the checkpoint (a process that died before moving it)."""
    store = SQLiteStore(path)
    done = store.last_seq()
    todo = [e for e in events[:upto] if e.seq > done]
    if todo:
        with store.write_lock():
            store.append(todo, replay(events[:upto]).summaries(), todo[-1].seq, replace=True)
    store.close()


def _store(path: Path, events: list[Event], cut: int) -> None:
    """A store whose checkpoint is at events[cut - 1] and whose log holds every event."""
    _append(path, events, cut)
    with Memory.open(f"sqlite:///{path}") as mem:
        assert mem.open_report is not None and mem.open_report.opened_from == "full replay"
        made = mem.checkpoint()
        assert made is not None and made.seq == events[cut - 1].seq
    _append(path, events, len(events))


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


@pytest.mark.slow  # about a minute on the shared 2-core machine
@seed(SEED)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    script=st.sampled_from(["conflicts", "lifecycle"]),
    script_seed=st.integers(0, 10**6),
    where=st.floats(0, 1),
    bulk_after=st.sampled_from([0, 1, 64]),
)
def test_checkpoint_open_equals_full_replay(
    tmp_path_factory: pytest.TempPathFactory,
    script: str,
    script_seed: int,
    where: float,
    bulk_after: int,
) -> None:
    """bulk_after: keys built one by one before the rest are built in one pass."""
    saved, checkpoint_module.BULK_AFTER = checkpoint_module.BULK_AFTER, bulk_after
    try:
        _checkpoint_open_equals_full_replay(tmp_path_factory, script, script_seed, where)
    finally:
        checkpoint_module.BULK_AFTER = saved


def _checkpoint_open_equals_full_replay(
    tmp_path_factory: pytest.TempPathFactory, script: str, script_seed: int, where: float
) -> None:
    built = workload(script_seed, 40) if script == "conflicts" else scripted_memory(script_seed, 40)
    events = list(built.events())
    cut = max(1, round(where * len(events)))
    note(f"script {script} seed {script_seed}: {len(events)} events, checkpoint at {cut}")
    path = tmp_path_factory.mktemp("ckpt") / "store.db"
    _store(path, events, cut)
    full = Memory.replay(events)
    opened = Memory.open(f"sqlite:///{path}")
    report = opened.open_report
    assert report is not None and report.ok
    assert report.opened_from.startswith(f"checkpoint at seq {cut} ({len(events) - cut} tail")
    _same(opened, full, TIMES)
    assert opened.digest() == Memory.open(f"sqlite:///{path}").digest()
    assert [e.event_id for e in opened.events()] == [e.event_id for e in events]  # lazy, chained
    # writes on the opened store continue the log as on the full replay
    for mem in (opened, full):
        mem.assert_fact(KEYS[0], "Oslo", valid_from=day(3), recorded_at=day(500), source_id="after")
    _same(opened, full, TIMES)
    opened.close()


def test_a_crash_between_tail_events_and_the_checkpoint(tmp_path: Path) -> None:
    """Writes commit their events; the checkpoint only moves when one is due, so a process
    that dies leaves a tail that the next open folds (and may then write a new one)."""
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    mem = Memory.open(url, clock=lambda: day(400))
    for i in range(1_300):
        mem.assert_fact(KEYS[i % 2], f"v{i % 7}", valid_from=day(i), source_id=f"s{i}")
    assert mem._checkpoint is not None
    at, tail = mem._checkpoint.seq, mem.watermark - mem._checkpoint.seq
    assert at >= 1_000 and 0 < tail < 1_000
    expected = mem.state_hash()
    mem._store.close()  # killed: no close(), so no checkpoint at the head
    again = Memory.open(url)
    assert again.open_report is not None
    assert again.open_report.opened_from.startswith(f"checkpoint at seq {at} ({tail} tail")
    assert again.state_hash() == expected == Memory.replay(again.events()).state_hash()


def _set_checkpoint(path: Path, text: str, digest: str | None = None) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE toki_meta SET value = ? WHERE name = 'checkpoint'", (text,))
        if digest is not None:
            conn.execute(
                "UPDATE toki_meta SET value = ? WHERE name = 'checkpoint_digest'", (digest,)
            )
    conn.close()


def _checkpointed(tmp_path: Path) -> tuple[Path, list[Event]]:
    events = list(workload(7, 60).events())
    path = tmp_path / "store.db"
    _store(path, events, len(events) - 5)
    return path, events


def _record(path: Path) -> dict:  # type: ignore[type-arg]
    conn = sqlite3.connect(path)
    text = conn.execute("SELECT value FROM toki_meta WHERE name = 'checkpoint'").fetchone()[0]
    conn.close()
    return dict(decode_json(text))


def test_a_checkpoint_edited_without_its_digest_is_refused(tmp_path: Path) -> None:
    path, events = _checkpointed(tmp_path)
    record = _record(path)
    record["keys"] = record["keys"][1:]  # a key forgotten
    _set_checkpoint(path, canonical_json(record))
    with Memory.open(f"sqlite:///{path}") as mem:
        assert mem.open_report is not None
        assert mem.open_report.opened_from.startswith("full replay (checkpoint refused:")
        assert mem.state_hash() == Memory.replay(events).state_hash()


def test_a_forged_head_is_refused(tmp_path: Path) -> None:
    path, events = _checkpointed(tmp_path)
    record = _record(path)
    record["head"] = "0" * 64
    text = canonical_json(record)
    _set_checkpoint(path, text, text_digest(text))  # digest recomputed too
    with Memory.open(f"sqlite:///{path}") as mem:
        assert mem.open_report is not None
        assert "is not the checkpoint's head" in mem.open_report.opened_from
        assert mem.state_hash() == Memory.replay(events).state_hash()


def test_a_forged_per_key_seq_is_named_on_first_use(tmp_path: Path) -> None:
    path, _ = _checkpointed(tmp_path)
    record = _record(path)
    record["keys"][0][1] += 1  # the checkpoint now claims an event the log does not hold
    text = canonical_json(record)
    _set_checkpoint(path, text, text_digest(text))
    mem = Memory.open(f"sqlite:///{path}")
    key = FactKey.from_json(record["keys"][0][0])
    with pytest.raises(IntegrityError, match="checkpoint recorded"):
        mem.history(key)
    mem._store.close()


def _rewrite_first_value(path: Path) -> FactKey:
    """Rewrite the first ASSERT's value with its payload hash and event id recomputed, its
    chain link left as it was (the threat model's second row)."""
    from toki.log import EventKind, make_event

    conn = sqlite3.connect(path)
    seq, key_seq, payload = conn.execute(
        "SELECT seq, key_seq, payload FROM toki_event WHERE kind = 'ASSERT' ORDER BY seq"
    ).fetchone()
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
    conn.execute("DROP TRIGGER toki_event_no_update")
    conn.execute(
        "UPDATE toki_event SET payload = ?, payload_hash = ?, event_id = ? WHERE seq = ?",
        (event.payload, event.payload_hash, event.event_id, seq),
    )
    conn.commit()
    conn.close()
    return key


def test_a_rewritten_prefix_event_is_named_by_its_key_and_by_verify(tmp_path: Path) -> None:
    path, _ = _checkpointed(tmp_path)
    key = _rewrite_first_value(path)
    mem = Memory.open(f"sqlite:///{path}")  # the prefix is not walked on open
    with pytest.raises(IntegrityError, match="chain link does not follow"):
        mem.current(key)  # never served: the key's rows are checked when it is built
    with pytest.raises(IntegrityError):
        mem.events()  # the whole prefix, walked to the checkpoint's head
    report = mem.verify()
    assert not report.ok and "chain link" in (report.problem or "")
    mem._store.close()


def test_an_edited_projection_row_is_detected_on_open(tmp_path: Path) -> None:
    path, events = _checkpointed(tmp_path)
    touched = {e.key for e in events[-5:]}
    untouched = next(k for k in sorted({e.key for e in events}) if k not in touched)
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE toki_current SET open_intervals = open_intervals + 1 WHERE fact_key = ?",
        (canonical_json(untouched.to_json()),),
    )
    conn.commit()
    conn.close()
    with pytest.raises(IntegrityError, match="stored projection differs"):
        Memory.open(f"sqlite:///{path}")
    with Memory.open(f"sqlite:///{path}", repair_projection=True) as mem:
        assert mem.open_report is not None and not mem.open_report.ok
    assert Memory.open(f"sqlite:///{path}").open_report.ok  # type: ignore[union-attr]


def test_a_store_without_a_checkpoint_opens_by_replay_and_gets_one(tmp_path: Path) -> None:
    mem = scripted_memory(3, 30)
    events = list(mem.events())
    many = list(Memory.replay(events).events())
    path = tmp_path / "old.db"
    _append(path, many, len(many))
    assert SQLiteStore(path).load_checkpoint() is None
    with Memory.open(f"sqlite:///{path}") as opened:  # small: replayed, no checkpoint due
        assert opened.open_report is not None
        assert opened.open_report.opened_from == "full replay"
    big = Memory(clock=lambda: day(400))
    for i in range(1_100):
        big.assert_fact(KEYS[i % 2], f"v{i % 5}", valid_from=day(i % 90), source_id=f"s{i}")
    path = tmp_path / "big.db"
    _append(path, list(big.events()), len(big.events()))
    with Memory.open(f"sqlite:///{path}") as opened:
        assert opened.open_report is not None
        assert opened.open_report.opened_from == "full replay"
    assert SQLiteStore(path).load_checkpoint() is not None  # written by that open
    with Memory.open(f"sqlite:///{path}") as opened:
        assert opened.open_report is not None
        head = len(big.events())
        assert opened.open_report.opened_from.startswith(f"checkpoint at seq {head} (0 tail")
        assert opened.state_hash() == big.state_hash()


def test_verify_names_a_forged_checkpoint_and_toki_checkpoint_rewrites_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from toki.cli import main

    path, _ = _checkpointed(tmp_path)
    url = f"sqlite:///{path}"
    assert main(["verify", url]) == 0
    record = _record(path)
    record["keys"][0][2] = "0" * 64  # a projection-row digest, with the record's own digest
    text = canonical_json(record)
    _set_checkpoint(path, text, text_digest(text))
    capsys.readouterr()
    assert main(["verify", url]) == 1
    assert "checkpoint at seq" in capsys.readouterr().out
    assert main(["checkpoint", url]) == 0  # replays the log, writes a new record
    assert "opened by full replay" in capsys.readouterr().out
    assert main(["verify", url]) == 0


def test_a_db_taken_after_a_checkpointed_open_never_changes(tmp_path: Path) -> None:
    """Copy on write holds for lazy states: the Db keeps the state it was handed."""
    path, events = _checkpointed(tmp_path)
    mem = Memory.open(f"sqlite:///{path}")
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
