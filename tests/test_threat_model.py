"""The threat-model table of docs/integrity.md, generated: each tamper method against each
check (open, `toki verify`, `toki verify --digest`, keyed digest), on a real store.

The doc's table between the `threat-model` markers must equal what this test measures;
`TOKI_REGENERATE_DOCS=1 pytest tests/test_threat_model.py` rewrites it. Tampers run on
SQLite; the toki_version and toki_head rows (PostgreSQL tables) on PostgreSQL."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from tests.small_history import K, write_small_history
from toki import Claim, Memory
from toki.canonical import digest as sha
from toki.chain import GENESIS, link
from toki.cli import main
from toki.errors import IntegrityError
from toki.log import EventKind, _event_id, event_from_record

DOC = Path(__file__).parents[1] / "docs" / "integrity.md"
BEGIN, END = "<!-- threat-model:begin -->", "<!-- threat-model:end -->"
KEY = b"kept-outside-the-store"
CHECKS = (
    "open",
    "open from a checkpoint",
    "… then a read of every key",
    "toki verify",
    "verify --digest D",
    "verify --digest D (keyed)",
)

Raw = Callable[..., list[tuple[Any, ...]]]


def _sqlite(path: Path) -> Raw:
    def raw(query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            return conn.execute(query, params).fetchall()
        finally:
            conn.close()

    return raw


def _rows(raw: Raw) -> list[tuple[Any, ...]]:
    return raw("SELECT seq, key_seq, kind, payload, payload_hash, event_id, chain "
               "FROM toki_event ORDER BY seq")  # fmt: skip


def _unguard(raw: Raw) -> None:
    raw("DROP TRIGGER IF EXISTS toki_event_no_update")
    raw("DROP TRIGGER IF EXISTS toki_event_no_delete")


def _edit_value(raw: Raw, *, rehash: bool = True) -> None:
    seq, _, _, payload, *_ = next(r for r in _rows(raw) if r[2] == "ASSERT")
    body = json.loads(payload)
    body["version"]["value"] = "Porto"
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if rehash:
        raw("UPDATE toki_event SET payload = ?, payload_hash = ?, event_id = ? WHERE seq = ?",
            (text, sha(text, 64), _event_id(EventKind.ASSERT, text), seq))  # fmt: skip
    else:
        raw("UPDATE toki_event SET payload = ? WHERE seq = ?", (text, seq))


def _relink(raw: Raw, *, seal: bool) -> None:
    prev, seq = GENESIS, 0
    for seq, key_seq, kind, payload, payload_hash, event_id, _ in _rows(raw):
        event = event_from_record({"seq": seq, "key_seq": key_seq, "kind": kind,
                                   "payload": payload, "payload_hash": payload_hash,
                                   "event_id": event_id})  # fmt: skip
        prev = link(prev, event)
        raw("UPDATE toki_event SET chain = ? WHERE seq = ?", (prev, seq))
    if seal:
        raw("UPDATE toki_meta SET value = ? WHERE name = 'chain_seal'", (f"{seq}:{prev}",))


def _rebuild_projection(url: str) -> None:
    Memory.open(url, repair_projection=True).close()  # the attacker's own repair


def t_stale(raw: Raw, url: str) -> None:
    _edit_value(raw, rehash=False)


def t_rehash(raw: Raw, url: str) -> None:
    _edit_value(raw)


def t_relink(raw: Raw, url: str) -> None:
    _edit_value(raw)
    _relink(raw, seal=False)
    raw("DELETE FROM toki_current")  # the projection rebuilt to match, as a repair would


def t_relink_seal(raw: Raw, url: str) -> None:
    _edit_value(raw)
    _relink(raw, seal=True)
    _rebuild_projection(url)


def t_strip(raw: Raw, url: str) -> None:
    _edit_value(raw)
    raw("UPDATE toki_event SET chain = NULL")


def t_strip_seal(raw: Raw, url: str) -> None:
    t_strip(raw, url)
    raw("DELETE FROM toki_meta WHERE name = 'chain_seal'")


def t_delete_middle(raw: Raw, url: str) -> None:
    raw("DELETE FROM toki_event WHERE seq = 2")


def t_delete_last(raw: Raw, url: str) -> None:
    last = _rows(raw)[-1][0]
    raw("DELETE FROM toki_event WHERE seq = ?", (last,))
    raw("DELETE FROM toki_current WHERE fact_key LIKE '%u2%'")
    raw("UPDATE toki_meta SET value = ? WHERE name = 'watermark'", (str(last - 1),))


def t_delete_last_seal(raw: Raw, url: str) -> None:
    t_delete_last(raw, url)
    seq, *_, chain = _rows(raw)[-1]
    raw("UPDATE toki_meta SET value = ? WHERE name = 'chain_seal'", (f"{seq}:{chain}",))


def t_renumber(raw: Raw, url: str) -> None:
    raw("UPDATE toki_event SET seq = seq + 1000 WHERE seq >= 3")


def t_projection(raw: Raw, url: str) -> None:
    raw("UPDATE toki_current SET value_hash = 'forged'")


def t_key_index(raw: Raw, url: str) -> None:
    raw("DROP TRIGGER IF EXISTS toki_key_no_update")
    raw("UPDATE toki_key SET fact_key = replace(fact_key, 'u1', 'u9')")


def t_consumption(raw: Raw, url: str) -> None:
    raw("DROP TRIGGER IF EXISTS toki_consumption_no_delete")
    raw("DELETE FROM toki_consumption WHERE consumer = 'reader-1'")


TAMPERS: list[tuple[str, Callable[[Raw, str], None]]] = [
    ("edits a value without recomputing its hashes", t_stale),
    ("rewrites a value and recomputes its payload hash and id", t_rehash),
    ("… and recomputes every link after it", t_relink),
    ("… and the chain seal and the projection too (a consistent forgery)", t_relink_seal),
    ("rewrites a value and sets every link to NULL (chain-strip downgrade)", t_strip),
    ("… and deletes the chain seal", t_strip_seal),
    ("deletes a middle event", t_delete_middle),
    ("deletes the last event and its summary row", t_delete_last),
    ("… and lowers the chain seal to match", t_delete_last_seal),
    ("renumbers events", t_renumber),
    ("edits only the projection (toki_current)", t_projection),
    ("edits SQLite's `toki_key` (which key each event is filed under)", t_key_index),
    ("deletes a consumption record (a named read)", t_consumption),
]


def _checks(
    url: str, saved: str, keyed: str, key_file: Path, checkpointed: str | None = None
) -> list[bool | None]:
    """Detected? by each check, read-only ones first (a passing open may write).
    checkpointed: the same store with a checkpoint at its head, tampered the same way
    (None: the backend keeps no checkpoints)."""
    verify = main(["verify", url]) == 1
    with_digest = main(["verify", url, "--digest", saved]) == 1
    with_key = main(["verify", url, "--digest", keyed, "--key-file", str(key_file)]) == 1
    try:
        Memory.open(url).close()
        opened = False
    except IntegrityError:
        opened = True
    from_checkpoint = read_all = None
    if checkpointed is not None:
        try:
            mem = Memory.open(checkpointed)
            from_checkpoint = False
        except IntegrityError:
            from_checkpoint = read_all = True
        else:
            try:
                for key in list(mem.keys()):  # each key's state built from its log rows
                    mem.history(key)
                read_all = False
            except IntegrityError:
                read_all = True
            mem.close()
    return [opened, from_checkpoint, read_all, verify, with_digest, with_key]


def _measure(
    url: str,
    raw: Raw,
    tamper: Callable[[Raw, str], None],
    key_file: Path,
    twin: str | None = None,
) -> list[bool | None]:
    """twin: on PostgreSQL, a second empty store that gets the same history, a checkpoint
    at its head and the same tamper (the checkpointed columns)."""
    with Memory.open(url) if url.startswith("sqlite") else _pg_memory(url) as mem:
        write_small_history(mem)
        for reader in ("reader-0", "reader-1", "reader-2"):
            mem.current(K, consumer=reader)
        saved, keyed = str(mem.digest()), str(mem.digest(key=KEY))
    checkpointed = None
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        copy = path.with_name(path.stem + "-checkpointed.db")
        shutil.copy(path, copy)
        checkpointed = f"sqlite:///{copy}"
        with Memory.open(checkpointed) as mem:
            assert mem.checkpoint() is not None
        for where, how in ((url, raw), (checkpointed, _sqlite(copy))):
            _unguard(how)
            tamper(how, where)
    else:
        if twin is not None:
            with _pg_memory(twin) as mem:
                write_small_history(mem)
                for reader in ("reader-0", "reader-1", "reader-2"):
                    mem.current(K, consumer=reader)
                assert mem.checkpoint() is not None
            tamper(pg_raw_for(twin), twin)
            checkpointed = twin
        tamper(raw, url)
    return _checks(url, saved, keyed, key_file, checkpointed)


def _pg_memory(url: str) -> Memory:
    from toki.store.postgres import PostgresStore

    return Memory(PostgresStore(url))


def _older_copy(tmp_path: Path, key_file: Path) -> list[bool | None]:
    """Replaces the whole store by an older copy of itself (digest saved before the copy
    was restored, after more writes)."""
    path, old = tmp_path / "older.db", tmp_path / "older-copy.db"
    url = f"sqlite:///{path}"
    with Memory.open(url) as mem:
        write_small_history(mem)
    shutil.copy(path, old)
    with Memory.open(url) as mem:
        mem.write(Claim(K, "Rome", "msg-4", recorded_at="2026-04-01T00:00:00Z"))
        saved, keyed = str(mem.digest()), str(mem.digest(key=KEY))
    shutil.copy(old, path)
    copy = tmp_path / "older-checkpointed.db"
    shutil.copy(old, copy)
    with Memory.open(f"sqlite:///{copy}") as mem:
        mem.checkpoint()
    return _checks(url, saved, keyed, key_file, f"sqlite:///{copy}")


def pg_raw_for(url: str) -> Raw:
    """Raw SQL in the schema of a toki PostgreSQL URL."""
    from toki.store.pg_rows import split_schema

    dsn, schema = split_schema(url)

    def raw(query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"'.encode())
            cur = conn.execute(query.replace("?", "%s").encode(), params)
            return list(cur.fetchall()) if cur.description else []

    return raw


def _cell(detected: bool | None) -> str:
    if detected is None:
        return "—"
    return "detected" if detected else "**not detected**"


def table(rows: list[tuple[str, list[bool | None]]]) -> str:
    head = "| the attacker … | " + " | ".join(f"`{c}`" if "verify" in c else c for c in CHECKS)
    lines = [head + " |", "|---" * (len(CHECKS) + 1) + "|"]
    lines += [f"| {what} | " + " | ".join(_cell(d) for d in found) + " |" for what, found in rows]
    return "\n".join(lines)


def test_the_threat_model_table_is_measured(tmp_path: Path, pg_store: Callable[..., Any]) -> None:
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    rows: list[tuple[str, list[bool | None]]] = []
    for i, (what, tamper) in enumerate(TAMPERS):
        path = tmp_path / f"t{i}.db"
        rows.append((what, _measure(f"sqlite:///{path}", _sqlite(path), tamper, key_file)))
    older = _older_copy(tmp_path, key_file)
    rows.append(("replaces the whole store by an older copy of itself", older))
    store = pg_store()
    url = store.url

    pg_raw = pg_raw_for(url)

    def t_version(raw: Raw, url: str) -> None:
        raw("DROP TRIGGER toki_version_append_only ON toki_version")
        raw("UPDATE toki_version SET value = '\"Porto\"'::jsonb WHERE subject = 'u1'")

    rows.append(("edits PostgreSQL's `toki_version` (the table offered for SQL)",
                 _measure(url, pg_raw, t_version, key_file, pg_store().url)))  # fmt: skip

    def t_head(raw: Raw, url: str) -> None:
        raw("UPDATE toki_head SET pos = pos + 5 WHERE subject = 'u1'")

    head_url = pg_store().url
    rows.append(("edits PostgreSQL's `toki_head` (each key's last per-key seq)",
                 _measure(head_url, pg_raw_for(head_url), t_head, key_file,
                          pg_store().url)))  # fmt: skip
    generated = table(rows)
    print(generated)
    # the facts the design promises, whatever the doc says
    found = dict(rows)
    assert all(found[w][4] for w in found if "older copy" not in w)  # a digest catches all
    assert all(found[w][3] for w in found if "consistent forgery" not in w
               and "lowers the chain seal" not in w and "older copy" not in w)  # fmt: skip
    # a checkpointed store never serves what the log does not say: what open or a plain
    # verify catches, opening from a checkpoint and reading every key catches too
    assert all(found[w][2] for w in found if found[w][2] is not None and found[w][0]
               and "projection" not in w)  # fmt: skip
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    if os.environ.get("TOKI_REGENERATE_DOCS") == "1":
        text = text[:start] + "\n" + generated + "\n" + text[end:]
        DOC.write_text(text, encoding="utf-8")
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    assert text[start:end].strip() == generated, (
        "docs/integrity.md's threat-model table is not what the tampers measure: rerun with "
        "TOKI_REGENERATE_DOCS=1"
    )
