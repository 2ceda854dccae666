"""Work on many ranks at once: ``work(task, *args)`` for every task on local worker
processes, or on the workers of a Dask cluster (``scheduler="tcp://host:port"``, or
``"local"`` for a ``LocalCluster`` of two workers on this machine).

Nothing is lost: a local worker that dies (the OOM killer, a signal) breaks the pool;
the tasks it took down run again, each in a process of its own, so the one that dies
again is named with how it died and every other finishes. On Dask the scheduler runs a
dead worker's tasks again on another (``distributed.scheduler.allowed-failures``); a
task that still cannot finish is named the same way. An error the work raises
(:class:`~traceviz.errors.TraceVizError`: bad input) is raised here, as it would be in
this process.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import wait as mp_wait
from typing import Any

from ..errors import TraceVizError, UsageError
from ..table.scratch import exit_on_sigterm

PARENT_POLL_S = 0.5


@dataclass
class Finished:
    """What became of one task: ``work``'s result, or ``died``: how the process running
    it died (twice: in the pool, then alone; or on every Dask worker that tried it).
    ``rerun``: how a worker died while this task was queued or running beside it (the
    task then ran again in a process of its own)."""

    task: Any
    result: Any = None
    died: str | None = None
    rerun: str | None = None


def worker_init(jobs: int, parent: int | None = None) -> None:
    """A worker hands freed memory back as the command does; SIGTERMed, it removes its
    temporary files and exits; it SIGTERMs itself when its parent ``parent`` (pid) is
    gone (``kill -9`` of the command: nothing is left running). ``jobs``: how many
    workers run at once."""
    from ..parse.budget import hand_back_freed_memory

    hand_back_freed_memory()
    exit_on_sigterm(None)
    if parent is not None:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    """SIGTERM this process once its parent ``parent`` has gone (it is then re-parented:
    its parent pid changes)."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def run(work: Callable, tasks: list, args: tuple = (), *, jobs: int = 1,
        scheduler: str | None = None, init: Callable[..., None] = worker_init,
        here: bool | None = None) -> Iterator[Finished]:
    """Each task's :class:`Finished`, in the order they finish: on ``scheduler`` (Dask),
    else on ``jobs`` local processes, each started with ``init(jobs, parent pid)``, or
    in this process where ``here`` (None: for ``jobs`` 1). ``work`` and ``init`` must
    be module-level functions (they travel to the workers by name)."""
    if scheduler:
        yield from _run_dask(work, tasks, args, scheduler)
    elif here or (here is None and jobs <= 1):
        for t in tasks:
            yield Finished(t, work(t, *args))
    else:
        yield from _run_local(work, tasks, args, jobs, init)


def _run_local(work: Callable, tasks: list, args: tuple, jobs: int, init,
               deaths: tuple[str, ...] = ()) -> Iterator[Finished]:
    """Each task on a pool of ``jobs`` processes. Where a worker dies the pool breaks:
    the tasks that had not started run again on a fresh pool (the same way), those that
    had (the dead worker's, and what the others were running when the pool stopped
    them: at most ``jobs``) each in a process of its own, where the one that dies again
    is named. ``deaths``: how workers of earlier pools died."""
    broken: list[tuple[int, Any]] = []
    ctx = get_context("spawn")
    # per task, set to 1 by the worker that begins it (shared memory: never blocks)
    started = ctx.RawArray("b", max(len(tasks), 1))
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_traced,
                               initargs=(init, jobs, os.getpid(), started))
    try:
        futures = {pool.submit(_traced, work, k, t, *args): (k, t)
                   for k, t in enumerate(tasks)}
        workers = _workers(pool)  # the pool forgets a worker once it is broken
        for fut in as_completed(futures):
            k, t = futures[fut]
            try:
                result = fut.result()
            except BrokenProcessPool:
                broken.append((k, t))
                continue
            yield Finished(t, result, rerun=", ".join(deaths) or None)
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown()
    if not broken:
        return
    finished = len(tasks) - len(broken)
    # the pool SIGTERMs its other workers when one dies: the cause is another signal
    died = sorted({death(p.exitcode) for p in workers
                   if p.exitcode and p.exitcode != -signal.SIGTERM})
    died = died or sorted({death(p.exitcode) for p in workers if p.exitcode})
    seen = {k for k, _ in broken if started[k]}
    said = tuple(dict.fromkeys(deaths + tuple(died or ["cause unknown"])))
    if not seen and not finished:  # the workers die before any task: none can run here
        raise TraceVizError(f"the worker processes died before any task began "
                            f"({', '.join(said)}); run with -j 1 (a script that starts "
                            "workers needs an 'if __name__ == \"__main__\":' guard)")
    suspects = [t for k, t in broken if k in seen]
    waiting = [t for k, t in broken if k not in seen]
    for f in _run_isolated(work, suspects, args, jobs, init):
        f.rerun = ", ".join(said)
        yield f
    if waiting:
        yield from _run_local(work, waiting, args, jobs, init, said)


_STARTED: Any = None  # in a worker: the flags of the tasks begun (one byte per task)


def _init_traced(init: Callable, jobs: int, parent: int, started) -> None:
    global _STARTED
    _STARTED = started
    init(jobs, parent)


def _traced(work: Callable, k: int, task, *args):
    """``work(task, *args)``, having said that task ``k`` began (in a worker)."""
    _STARTED[k] = 1
    return work(task, *args)


def _workers(pool: ProcessPoolExecutor) -> list:
    """The pool's worker processes (the executor keeps them privately; [] if not)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def death(code: int) -> str:
    """How a process ended, from its exit code (negative: the signal; 143: SIGTERM, after
    removing its temporary files)."""
    if code == 128 + signal.SIGTERM:
        code = -signal.SIGTERM
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
    return f"exited with status {code}"


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and SIGTERM the workers (they clean up and exit)."""
    pool.shutdown(wait=False, cancel_futures=True)
    for p in _workers(pool):
        with contextlib.suppress(Exception):
            p.terminate()
            p.join(5)


def _child(conn, work, task, args: tuple, jobs: int, parent: int, init) -> None:
    init(jobs, parent)
    try:
        answer = ("done", work(task, *args))
    except BaseException as exc:  # raised in the parent, as in its own process
        answer = ("raised", exc)
    conn.send(answer)
    conn.close()


def _run_isolated(work: Callable, tasks: list, args: tuple, jobs: int, init
                  ) -> Iterator[Finished]:
    """Each task run in a fresh process of its own, ``jobs`` at a time; a process that
    dies gives a :class:`Finished` naming how."""
    ctx = get_context("spawn")
    waiting, running = list(tasks), []  # type: list, list
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                t = waiting.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(send, work, t, args, jobs,
                                                        os.getpid(), init), daemon=True)
                proc.start()
                send.close()
                running.append((t, proc, recv))
            ready = mp_wait([r for _, _, r in running])
            for item in [x for x in running if x[2] in ready]:
                t, proc, recv = item
                running.remove(item)
                try:
                    how, value = recv.recv()
                except EOFError:  # died before it could answer
                    proc.join()
                    yield Finished(t, died=death(proc.exitcode or 0))
                    continue
                proc.join()
                if how == "raised":
                    raise value
                yield Finished(t, value)
    finally:
        for _, proc, _ in running:
            proc.terminate()
            proc.join(5)


def _run_dask(work: Callable, tasks: list, args: tuple, scheduler: str
              ) -> Iterator[Finished]:
    try:
        from distributed import CancelledError, Client, KilledWorker, LocalCluster
        from distributed import as_completed as dask_completed
        from distributed.comm.core import CommClosedError
    except ImportError:
        raise UsageError("--scheduler needs Dask: pip install 'traceviz[dask]'") from None
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                           dashboard_address=None) if scheduler == "local" else None
    try:
        with Client(cluster or scheduler) as client:
            futures = {client.submit(work, t, *args, pure=False): t for t in tasks}
            for fut in dask_completed(list(futures)):
                t = futures.pop(fut)
                try:
                    result = fut.result()
                except (KilledWorker, CancelledError, CommClosedError) as exc:
                    # its workers died (the scheduler tried it on several) or were lost
                    yield Finished(t, died=f"the Dask worker running it died "
                                           f"({type(exc).__name__}: {exc})")
                    continue
                fut.release()  # the result lives here now, not on the worker too
                yield Finished(t, result)
    except OSError as exc:
        raise TraceVizError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
    finally:
        if cluster is not None:
            cluster.close()
