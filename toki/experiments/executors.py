"""Run independent tasks on local processes or on a Dask cluster, with one progress callback.

Tasks are plain data and carry their own seeds, so where a task runs cannot change what it
returns: results come back in task order whichever executor ran them. Progress is reported
as tasks finish (`as_completed`), so one bar covers every worker.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import as_completed as futures_completed
from typing import Any, TypeVar

from toki.errors import InvalidInput

__all__ = ["EXECUTORS", "run_tasks"]

T = TypeVar("T")
R = TypeVar("R")
EXECUTORS = ("local", "dask")


def run_tasks(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    *,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    processes: bool = True,
    progress: Callable[[int], None] | None = None,
) -> list[R]:
    """`[fn(t) for t in tasks]`, computed on `executor`; `fn` must be importable by name.

    local: a spawn-context process pool (`workers`, default all cores). dask: the cluster at
    `address`, or a `distributed.LocalCluster` of `workers` single-threaded workers
    (`processes=False` keeps them in this process, for tests)."""
    if executor not in EXECUTORS:
        raise InvalidInput("executor", f"unknown executor {executor!r}", "use local or dask")
    if workers is not None and workers < 1:
        raise InvalidInput("workers", f"need at least one worker, got {workers}")
    if not tasks:
        return []
    if executor == "dask":
        return _run_dask(fn, tasks, workers, address, processes, progress)
    return _run_local(fn, tasks, workers, progress)


def _run_local(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    workers: int | None,
    progress: Callable[[int], None] | None,
) -> list[R]:
    n = min(workers or os.cpu_count() or 1, len(tasks))
    out: dict[int, R] = {}
    ctx = multiprocessing.get_context("spawn")  # no forked copies of locks or caches
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
        index = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
        for fut in futures_completed(index):
            out[index[fut]] = fut.result()
            if progress is not None:
                progress(1)
    return [out[i] for i in range(len(tasks))]


def _run_dask(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    workers: int | None,
    address: str | None,
    processes: bool,
    progress: Callable[[int], None] | None,
) -> list[R]:
    import importlib

    dd: Any = importlib.import_module("distributed")  # typed loosely: its calls are untyped
    cluster: Any = None
    if address:
        client = dd.Client(address)
    else:
        cluster = dd.LocalCluster(
            n_workers=workers or os.cpu_count() or 1,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=None,
        )
        client = dd.Client(cluster)
    try:
        # pure=False: each task runs once even if two specs happen to be equal
        futures = [client.submit(fn, t, pure=False) for t in tasks]
        index = {f.key: i for i, f in enumerate(futures)}
        out: dict[int, R] = {}
        for fut in dd.as_completed(futures):
            out[index[fut.key]] = fut.result()
            if progress is not None:
                progress(1)
        return [out[i] for i in range(len(tasks))]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
