"""Where the independent tasks of a fan-out run: local processes, or a Dask cluster.

``attnpde sweep`` (one task per beta), ``attnpde validate`` (one task per particle count and seed) and
the study scripts (``scripts/paper_protocol.py``, ``scripts/atoms_study.py``) hand their tasks to a
:class:`TaskPool` and collect the results as they complete. Two implementations, one interface:

- :class:`LocalPool` (the default, no ``--scheduler``): a ``ProcessPoolExecutor`` of ``workers``
  processes on this machine. It starts in milliseconds (a ``distributed.LocalCluster`` takes about a
  second, measured: docs/cluster.md), which matters for the small sweeps of the
  test suite, and it needs no Dask.
- :class:`DaskPool` (``--scheduler ADDRESS``): a ``dask.distributed`` client of a running scheduler
  (``dask scheduler`` / ``dask worker`` on any number of machines, or dask-jobqueue on SLURM/PBS). A task
  lost with its worker (a killed process, a lost machine) is run again by the scheduler on another
  worker, up to ``distributed.scheduler.allowed-failures`` times (Dask's default 3). Tasks that *raise*
  are not retried: every task is deterministic (its seeds are in its arguments), so an exception would
  only repeat.

In both, every task runs with one thread for OpenMP, OpenBLAS and the NUFFT sums
(:func:`run_single_threaded`): the parallelism is across tasks, and a worker that runs one task per
core must not oversubscribe it. The results do not depend on the thread count anyway (the solvers fix
their reduction orders), so a task gives the same bits in a local process and on a cluster worker.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import uuid
from abc import ABC, abstractmethod
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

__all__ = ["TaskPool", "LocalPool", "DaskPool", "open_pool", "run_single_threaded", "SchedulerError", "TaskLost",
           "TaskInterrupted", "THREAD_VARIABLES"]

#: the environment variables that set the thread counts of OpenMP (FFTW via pyfftw, SHTns), the BLAS
#: libraries and the NUFFT sums (``solvers.interaction`` reads OMP_NUM_THREADS)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class SchedulerError(RuntimeError):
    """``--scheduler`` cannot be used: dask.distributed is not installed, or the scheduler is unreachable."""


class TaskLost(RuntimeError):
    """A task's process died and the task will not be run again: a local worker process killed (by a
    signal, the out-of-memory killer), or on a cluster a task whose workers died more often than Dask's
    ``distributed.scheduler.allowed-failures``."""


class TaskInterrupted(KeyboardInterrupt):
    """A task not started because its local worker process was interrupted (Ctrl-C) before it; raised by
    the task's future, and taken for a KeyboardInterrupt by the caller."""


# --- Ctrl-C in the local worker processes -------------------------------------------------------------
# A terminal's Ctrl-C reaches the whole process group. A worker running a task must get its
# KeyboardInterrupt (the runs catch it and leave a resumable archive marked "interrupted"), at every
# Ctrl-C as in any Python process; an idle worker must not (raised in ProcessPoolExecutor's own loop it
# kills the worker, and the pool's shutdown could then wait forever), and the tasks already queued to it must not
# start. When only the pool's owner was interrupted
# (kill -INT of its pid) it forwards FORWARDED_SIGNAL, which interrupts a task only if no Ctrl-C did:
# after a Ctrl-C of the group it must not interrupt a run that is writing its interrupted state.
# ``solvers.app.runner.deferred_interrupt`` holds both signals during an archive write: it calls these
# handlers at once (the flag is set) and raises their KeyboardInterrupt once the write is done.
# A signal to the group and the one the owner forwards because of it can reach a worker in either order
# (Python runs pending handlers in the order of the signals' numbers, SIGINT 2, SIGUSR1 10, SIGTERM 15, and
# one delivered to another of the worker's threads later), so the first direct signal after a forwarded
# one is taken for the same interrupt; a second direct one (a second Ctrl-C) interrupts again, which stops
# a run at once (solvers.interrupts). Once interrupted, a worker's later runs in the same task stop after
# their first step (``solvers.interrupts.set_stop_pending``): a task may hold several (a PDE, then
# particles).
FORWARDED_SIGNAL = signal.SIGUSR1
# "first": the first interrupting signal the worker took (None: not interrupted); "board", "slot": where
# it shows its owner whether it is done (see _Board)
_WORKER: dict[str, Any] = {"in_task": False, "first": None, "direct": 0, "forwarded": False, "terminated": False,
                           "board": None, "slot": None}


class _Board:
    """What the owner of a broken pool can see of its workers, in shared memory: for each worker its pid and
    whether it is *done*, interrupted and running no task. A done worker will start none (``_local_task``)
    and holds no run, so :meth:`LocalPool.close` kills it at once instead of waiting BROKEN_GRACE for an
    end it may never reach (Python >= 3.12 sends it no shutdown sentinel; a lost idle worker leaves the task
    queue's lock held)."""

    def __init__(self, ctx, workers: int) -> None:
        self.pids = ctx.Array("q", workers, lock=False)
        self.done = ctx.Array("b", workers, lock=False)
        self.claimed = ctx.Value("i", 0)

    def claim(self) -> int | None:
        """In a starting worker: its slot (None if every slot is taken: it is then never taken for done)."""
        with self.claimed.get_lock():
            i = self.claimed.value
            if i >= len(self.pids):
                return None
            self.claimed.value = i + 1
        self.pids[i] = os.getpid()
        return i

    def is_done(self, pid: int) -> bool:
        return any(p == pid and d for p, d in zip(self.pids[:], self.done[:]))


def _show() -> None:
    """Publish on the board whether this worker is done (interrupted and in no task)."""
    board, slot = _WORKER["board"], _WORKER["slot"]
    if board is not None and slot is not None:
        board.done[slot] = _WORKER["first"] is not None and not _WORKER["in_task"]


def _took(signum: int) -> None:
    if _WORKER["first"] is None:
        _WORKER["first"] = signum
        _show()


def _on_interrupt(signum, frame) -> None:
    if signum == signal.SIGTERM:
        if _WORKER["terminated"]:
            return          # the same stop (see SIGTERM below)
        _WORKER["terminated"] = True
    again = _WORKER["direct"] > 0 or not _WORKER["forwarded"]
    _WORKER["direct"] += 1
    _took(signum)
    if again and _WORKER["in_task"]:
        raise KeyboardInterrupt


def _on_forwarded(signum, frame) -> None:
    first = _WORKER["first"] is None
    _WORKER["forwarded"] = True
    _took(signum)
    if first and _WORKER["in_task"]:
        raise KeyboardInterrupt


# SIGTERM is a Ctrl-C too: sent to the whole process group (GNU ``timeout``, a batch system's time limit,
# ``kill -TERM -PGID``), it reaches the workers with their owner, and a running task stops after its step
# with its state kept, instead of dying with the work since its last snapshot or checkpoint. (A SIGTERM to
# one worker alone stops its task so too; a task queued behind it then reports an interruption to the
# owner, which interrupts the others, as after a Ctrl-C.) The executor also sends SIGTERM to its other workers when
# one of them died (a broken pool): their runs stop after their step, and :meth:`LocalPool.close` kills
# each once its board (:class:`_Board`) shows it done, or after BROKEN_GRACE seconds (the executor may wait
# for them forever: Python >= 3.12 sends them no shutdown sentinel, and a worker killed while it waited for
# work leaves the task queue's lock held). A worker whose owner died (killed by the group's SIGTERM without a handler
# of its own, or by kill -9) has nobody to collect its result or end it: :func:`_watch_owner` stops its task after
# the step and ends the process.
# A worker takes only its first SIGTERM: the executor of Python >= 3.12 sends a broken pool's workers two
# in a row (when it breaks, and again when it joins them), which would stop their runs at once, without
# their step's state, as a second Ctrl-C does; ``timeout`` and batch systems send one, then SIGKILL. A
# Ctrl-C after a SIGTERM still stops a run at once.
ORPHAN_POLL = 1.0          # s between a worker's checks that its owner is alive
BROKEN_GRACE = 20.0        # s a broken pool's other workers have to stop after their step
BROKEN_POLL = 0.05         # s between the checks of a broken pool's board


def _init_local_worker(board: _Board | None = None) -> None:
    from ..interrupts import add_stop_signal, set_stop_pending

    _WORKER["board"] = board
    _WORKER["slot"] = board.claim() if board is not None else None

    # a forked worker inherits the command's handlers (solvers.app.cli); these replace them
    signal.signal(signal.SIGINT, _on_interrupt)
    signal.signal(signal.SIGTERM, _on_interrupt)
    signal.signal(FORWARDED_SIGNAL, _on_forwarded)
    # the forwarded interrupt stops a run after its current step, as Ctrl-C does (solvers.interrupts)
    add_stop_signal(FORWARDED_SIGNAL, "the pool's owner (interrupted)")
    set_stop_pending(lambda: _WORKER["first"])
    # the parent now: the owner, or under the forkserver start method the server, which ends with it
    threading.Thread(target=_watch_owner, args=(os.getppid(),), name="attnpde-owner", daemon=True).start()


def _watch_owner(parent: int) -> None:
    """In a local worker: once its parent process (``parent``) is gone, interrupt the running task as the
    owner would (it stops after its step, its state kept), and end the worker once no task runs."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_POLL)
    os.kill(os.getpid(), FORWARDED_SIGNAL)
    while _WORKER["in_task"]:
        time.sleep(ORPHAN_POLL / 10)
    os._exit(1)


def _local_task(fn: Callable, *args: Any) -> Any:
    """A task in a local worker: not started once the worker has been interrupted."""
    try:
        # in a task before the check, so that the board never shows done a worker that starts a run
        _WORKER["in_task"] = True
        _show()
        if _WORKER["first"] is not None:
            raise TaskInterrupted("not started: interrupted before it began")
        return run_single_threaded(fn, *args)
    finally:
        _WORKER["in_task"] = False
        _show()


# The OpenMP runtimes a process may hold (SHTns links the system's libgomp, FINUFFT's wheel brings its own).
_OPENMP_LIBRARIES = ("libgomp", "libomp", "libiomp5")


def _openmp_one_thread() -> None:
    """One thread for the parallel regions that this thread starts, in every OpenMP runtime already loaded.

    A runtime reads OMP_NUM_THREADS once, when it is loaded: in a worker forked from an owner that had
    loaded it (every sweep of S^2: SHTns), the variable set for the task changes nothing. And libgomp is
    not fork-safe: the owner's pool of OpenMP threads is copied into the worker without its threads, so the
    worker's first region of two or more threads waits for them forever (SHTns's ``shtns_create`` in the
    first member of an S^2 sweep with local workers). A region of one thread uses no pool."""
    import ctypes

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[-1].strip() for line in maps if any(n in line for n in _OPENMP_LIBRARIES)}
    except OSError:                     # not Linux: no fork by default, and the variable is read at load
        return
    for path in sorted(paths):
        # a library replaced on disk since it was loaded is listed "(deleted)", under the name it was loaded
        # by; RTLD_NOLOAD finds the loaded one by that name and never loads a second copy
        path = path.removesuffix(" (deleted)")
        try:
            ctypes.CDLL(path, mode=os.RTLD_NOLOAD).omp_set_num_threads(1)
        except (OSError, AttributeError):           # not loaded under that name, or not a runtime
            pass


def run_single_threaded(fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` with one thread per library (see the module docstring). The variables are set before
    the task builds its solvers (the NUFFT sums read OMP_NUM_THREADS then; the FFTW and SHTns transforms
    take theirs from the configuration, ``pde.threads``, default 1); OpenBLAS read its own when it was
    loaded, so it is set through its API for the duration of the task, and the OpenMP runtimes already
    loaded through theirs (:func:`_openmp_one_thread`)."""
    from .._blas import blas_threads

    for name in THREAD_VARIABLES:
        os.environ[name] = "1"
    _openmp_one_thread()
    with blas_threads(1):
        return fn(*args)


class TaskPool(ABC):
    """Submit tasks (picklable top-level functions and arguments); collect their futures as they complete.

    Use as a context manager; futures have ``result()`` (which re-raises the task's exception).
    """

    #: one line saying where the tasks run (for the logs)
    description: str = ""

    @abstractmethod
    def submit(self, fn: Callable, *args: Any) -> Any:
        """Start ``fn(*args)`` (single-threaded, :func:`run_single_threaded`); returns its future."""

    @abstractmethod
    def as_completed(self, futures: Iterable) -> Iterator:
        """The futures in the order they complete."""

    def results(self, futures: Iterable) -> Iterator[tuple[int, Any]]:
        """(index in ``futures``, result) of each task as it completes; a task's exception is raised, a
        task lost with its process as :class:`TaskLost`."""
        futures = list(futures)
        index = {id(f): i for i, f in enumerate(futures)}
        for f in self.as_completed(futures):
            try:
                value = f.result()
            except self._lost_errors() as e:
                raise TaskLost(f"a task was lost with the process that ran it ({type(e).__name__}: {e}); "
                               "what finished before is kept") from e
            yield index[id(f)], value

    def _lost_errors(self) -> tuple:
        return ()

    @abstractmethod
    def close(self) -> None:
        """Wait for nothing more; release the processes or the connection."""

    def __enter__(self) -> "TaskPool":
        return self

    def interrupt(self) -> None:
        """The caller was interrupted: stop the tasks running for it (default: nothing to tell)."""

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
                self.interrupt()
        finally:
            self.close()


class LocalPool(TaskPool):
    """``workers`` processes on this machine (a ``ProcessPoolExecutor``)."""

    def __init__(self, workers: int) -> None:
        if int(workers) < 1:
            raise ValueError(f"workers must be >= 1, got {workers!r}")
        self.workers = int(workers)
        ctx = multiprocessing.get_context()
        self._board = _Board(ctx, self.workers)
        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_init_local_worker,
                                         initargs=(self._board,))
        self.description = f"{self.workers} local process(es)"

    def submit(self, fn: Callable, *args: Any) -> Future:
        return self._pool.submit(_local_task, fn, *args)

    def as_completed(self, futures: Iterable) -> Iterator[Future]:
        return as_completed(list(futures))

    def _lost_errors(self) -> tuple:
        from concurrent.futures.process import BrokenProcessPool
        return (BrokenProcessPool,)

    def close(self) -> None:
        if getattr(self._pool, "_broken", False):      # private, set before the futures fail
            self._end_broken()
        # a KeyboardInterrupt in the caller must not wait for tasks that were never started
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _end_broken(self) -> None:
        """The pool is broken (a worker died) and sends SIGTERM to the others: wait up to BROKEN_GRACE
        seconds for them to stop after their step, kill each as soon as it is done (interrupted and in no
        task: :class:`_Board`), and kill those still there at the end (see above)."""
        from multiprocessing.connection import wait

        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        deadline = time.monotonic() + BROKEN_GRACE
        while procs and time.monotonic() < deadline:
            ended = wait([p.sentinel for p in procs], timeout=min(BROKEN_POLL, deadline - time.monotonic()))
            procs = [p for p in procs if p.sentinel not in ended]
            _kill(p for p in procs if self._board.is_done(p.pid))
        _kill(procs)

    def interrupt(self) -> None:
        # the owner alone may have been interrupted (kill -INT of its pid): its workers' running tasks stop
        # as after a Ctrl-C, and the tasks queued to them do not start (after a Ctrl-C of the group the
        # forwarded signal does nothing more: _on_forwarded). ``_processes``: the executor's worker
        # processes (a private attribute of ProcessPoolExecutor since Python 3.2; absent, nothing is sent)
        for proc in list((getattr(self._pool, "_processes", None) or {}).values()):
            try:
                os.kill(proc.pid, FORWARDED_SIGNAL)
            except (OSError, AttributeError):           # gone, or not ours any more
                pass


def _kill(procs: Iterable) -> None:
    for p in procs:
        try:
            p.kill()
        except (OSError, ValueError):             # ended meanwhile
            pass


class DaskPool(TaskPool):
    """The workers of a running Dask scheduler (``address``: ``tcp://host:port``, or the path of the JSON
    file written by ``dask scheduler --scheduler-file``). ``timeout`` (s): how long to try to connect
    (None: Dask's ``distributed.comm.timeouts.connect``, 30 s unless configured, e.g. with the
    environment variable DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=5s)."""

    def __init__(self, address: str, *, timeout: float | None = None) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise SchedulerError("--scheduler needs dask.distributed, which is not installed; install the "
                                 "cluster extra: pip install -e '.[cluster]' (scripts/setup does)") from None
        where: dict[str, Any] = ({"scheduler_file": address} if Path(address).is_file()
                                 else {"address": _checked_address(address)})
        if timeout is not None:
            where["timeout"] = timeout
        try:
            self.client = Client(**where, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as e:
            raise SchedulerError(f"--scheduler {address}: cannot connect to a Dask scheduler ({e}); start one "
                                 "with `dask scheduler` and its workers with `dask worker ADDRESS --nthreads 1`"
                                 ) from None
        self.description = f"the Dask cluster at {self.client.scheduler.address}"

    def submit(self, fn: Callable, *args: Any):
        # pure=False with a fresh key: two tasks with equal arguments are still two runs, and a resubmitted
        # sweep never collects a stale result the scheduler kept
        key = f"{getattr(fn, '__name__', 'task')}-{uuid.uuid4().hex}"
        return self.client.submit(run_single_threaded, fn, *args, key=key, pure=False)

    def as_completed(self, futures: Iterable) -> Iterator:
        from distributed import as_completed as dask_as_completed
        # the loop of this client: it is not the process's default client (set_as_default=False), so that
        # nothing else in the process picks it up by accident
        return iter(dask_as_completed(list(futures), loop=self.client.loop))

    def _lost_errors(self) -> tuple:
        from distributed import KilledWorker
        return (KilledWorker,)

    def close(self) -> None:
        self.client.close()


def _checked_address(address: str) -> str:
    """``address`` if it is a scheduler address Dask can parse; else SchedulerError at once. A malformed one
    (no port, a scheduler file that does not exist) given to ``Client`` failed only after the client had
    started, and the half-made client then waited 60 s to close and printed a traceback at exit."""
    from distributed.comm.addressing import parse_address, parse_host_port

    looks_like_file = ("://" not in address and any(sep in address for sep in ("/", "\\"))) or address.endswith(".json")
    if looks_like_file:
        raise SchedulerError(f"--scheduler {address}: no such scheduler file (nor a scheduler address: "
                             "tcp://HOST:PORT)")
    try:
        scheme, location = parse_address(address)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
    except ValueError as e:
        raise SchedulerError(f"--scheduler {address}: not a scheduler address ({e}); give tcp://HOST:PORT or the "
                             "file written by `dask scheduler --scheduler-file`") from None
    return address


def open_pool(workers: int = 2, scheduler: str | None = None) -> TaskPool:
    """A :class:`DaskPool` on ``scheduler`` if given, else a :class:`LocalPool` of ``workers`` processes.

    Raises SchedulerError when the scheduler cannot be used (checked here, before any task is submitted).
    """
    if scheduler is not None:
        if not str(scheduler).strip():
            raise SchedulerError("--scheduler: give the scheduler's address (tcp://HOST:PORT) or its scheduler file")
        return DaskPool(str(scheduler))
    return LocalPool(workers)
