"""A restart fault is a process death: the worker is killed (SIGKILL) and a new worker
process reopens the library from its files (docs/real.md, Restart; toki/real/session.py,
`respawn`). The library is `toki/real/inenv/restart_demo.py`: a JSON document on disk plus
a module-level cache of the last document written, which serves reads; it reports where a
reopened instance got its document and how many instances its process has built."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from toki.canonical import canonical_json
from toki.real.adapter import RealSystem
from toki.real.cli import make_real_workload
from toki.real.driver import finish_run, open_session, real_program, real_runs
from toki.real.faults import parse_faults
from toki.real.session import Session
from toki.sim.dpor import DPOR
from toki.sim.explore import Stats, replay_schedule

from .test_units import JUDGE, RECOVERY, DemoHost

SYSTEM = RealSystem(
    name="restart-demo",
    title="a JSON-document library with a module-level cache of what it wrote",
    library="toki-restart-demo",
    version="1",
    module="json",
    adapter="restart_demo",
    host=DemoHost(),
)
TWO = make_real_workload(None, 2, 1, 1, 0)  # two agents, one claim each


@pytest.fixture(scope="module")
def demo() -> Iterator[Session]:
    with open_session(SYSTEM) as session:
        yield session


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_every_death_reopens_in_a_new_process_without_the_dead_ones_module_state(
    demo: Session,
) -> None:
    """Every schedule DPOR reaches with one death: the library is reopened by a process
    other than the one that died, which is gone; the reopened instance is the first its
    process built, and it read the file, not the dead process's module-level cache (which
    held the document whenever the death came after a write)."""
    runs = list(
        real_runs(SYSTEM, demo, TWO, DPOR(), JUDGE, RECOVERY, budget=200,
                  faults=parse_faults("restart:1"))
    )  # fmt: skip
    died = [rr for rr in runs if rr.restart is not None]
    assert died  # DPOR places the death at every point between gate points
    for rr in died:
        assert rr.worker_pids is not None
        dead, reopened = rr.worker_pids
        assert dead != reopened and not _alive(dead)
        assert rr.restart is not None
        assert rr.restart["integrity_reopened"] == {"source": "file", "built_in_this_process": 1}
    after_write = [rr for rr in died if any(t.get("point") == "doc.write" for t in rr.trace)]
    assert after_write  # deaths after a write: the dead process had the document cached
    for rr in after_write:
        assert rr.restart is not None
        served = rr.restart["reopened"]["memories"]
        assert served  # what was written before the death is read back from the file


def test_the_same_process_reopen_is_served_by_its_own_cache(demo: Session) -> None:
    """What the old restart (a fresh instance in the same worker) would show: the protocol
    still has `kill` and `reopen`; sent to one process, the reopened instance reads the
    dead one's module-level cache and its process has built two instances."""
    demo.call("open", seed=0, config={})
    resp = demo.call("start", agent=0, inbox=[c.to_json() for c in TWO.inboxes[0]])
    while resp["state"] == "parked":
        resp = demo.call("step", agent=0, reply=None)
    demo.call("kill", tear=False)
    same = demo.call("reopen")
    assert same["integrity"]["source"] == "cache"
    assert same["integrity"]["built_in_this_process"] >= 2


def test_a_torn_write_is_seen_by_the_new_process_and_each_run_replays(demo: Session) -> None:
    """torn:1 cuts the last write of the document in half: the new process cannot parse it
    (the cache that would have hidden it died with the old one). Each run, its schedule
    replayed with the same seed, gives the same record bytes, in yet another process."""
    program, live = real_program(SYSTEM, demo, TWO, JUDGE, faults=parse_faults("torn:1"))
    torn = []
    for run in DPOR().runs(program, Stats()):
        rr = finish_run(SYSTEM, demo, live, run, RECOVERY, JUDGE)
        if rr.restart is not None and any(t.get("torn") for t in rr.trace):
            torn.append(rr)
    assert torn
    for rr in torn:
        assert rr.restart is not None
        assert str(rr.restart["failed"]).startswith("JSONDecodeError")
    for rr in torn:
        again, live_again = real_program(SYSTEM, demo, TWO, JUDGE, faults=parse_faults("torn:1"))
        replayed = finish_run(
            SYSTEM, demo, live_again, replay_schedule(again, rr.schedule), RECOVERY, JUDGE
        )
        assert replayed.worker_pids is not None and rr.worker_pids is not None
        assert replayed.worker_pids[1] != rr.worker_pids[1]
        assert canonical_json(replayed.record) == canonical_json(rr.record)
