"""The error-estimate rerun of the continuation on a thread of its own, beside the run it checks.

The rerun (:meth:`solvers.pde.PDERun._error_estimate_run`: the continuation again from the handoff state with
twice the nodes) depends only on the handoff state and on how the run ends: to its own certified end when the
run is certified stationary, else to the time the run reached. A run to ``t_final = inf`` ends certified (or
has no rerun), one to a finite ``t_final`` reaches it: so the rerun can start at the handoff with that
expectation and run while the run itself does. Its phase is built and stepped exactly as it would be
afterwards (the same nodes, options and loop, each step computed from the phase's own state), so its result
is the same to the bit; the run keeps it only if the expectation held, and otherwise runs the rerun again
as before.

Its progress reports are queued and handed to the run's progress in the caller's thread when the caller waits
for the rerun (:meth:`BackgroundRerun.wait`): a callback that raises there stops the rerun as it would stop a
rerun run afterwards. The phase polls a stop request that is set by :meth:`BackgroundRerun.cancel` or by the
run's own request (Ctrl-C, SIGTERM: :mod:`solvers.interrupts`).
"""
from __future__ import annotations

import os
import queue
import threading
import time
from typing import Callable

__all__ = ["BackgroundRerun", "spare_core"]


def spare_core() -> bool:
    """Whether this process may keep two cores busy, so that a thread beside the run gains: OMP_NUM_THREADS
    when it is set (a task pool sets 1 in each worker: :mod:`solvers.app.executor`), else its CPU affinity."""
    budget = os.environ.get("OMP_NUM_THREADS", "").strip()
    if budget:
        try:
            return int(budget) >= 2
        except ValueError:
            pass
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) >= 2


class _Request:
    """The stop request the rerun's loop polls: truthy once cancelled or once the run's own request is."""

    __slots__ = ("run", "cancelled")

    def __init__(self, run) -> None:
        self.run, self.cancelled = run, False

    def __bool__(self) -> bool:
        return self.cancelled or bool(self.run)

    @property
    def why(self) -> str:
        return self.run.why if self.run else "cancelled"


class BackgroundRerun:
    """``phase.run(t_final, stationary=certify, max_steps=max_steps)`` on a thread, with its progress queued.

    ``initial_nodes``: the phase's node count at its start; ``certify``: whether it certifies its own end (the
    expectation the caller checks before it keeps the result); ``extra``: the entries the rerun adds to each
    progress dict (its name and the time it ends at)."""

    def __init__(self, phase, initial_nodes: int, t_final: float, certify: bool, max_steps: int, stop_request,
                 extra: dict) -> None:
        self.phase, self.initial_nodes, self.certify, self.extra = phase, int(initial_nodes), bool(certify), extra
        self._args = (t_final, self.certify, max_steps)
        self.request = _Request(stop_request)
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self.result: tuple[str, str] | None = None
        self.error: BaseException | None = None
        self.wall = 0.0
        self._thread = threading.Thread(target=self._target, name="attnpde-rerun", daemon=True)

    def start(self) -> "BackgroundRerun":
        self._thread.start()
        return self

    def _report(self, t: float, info: dict) -> None:
        self._events.put((t, {**self.extra, **info}))

    def _target(self) -> None:
        t_final, stationary, max_steps = self._args
        self.phase.stop_request = self.request
        wall0 = time.perf_counter()
        try:
            self.result = self.phase.run(t_final, progress=self._report, stationary=stationary, max_steps=max_steps)
        except BaseException as e:            # handed to the caller's thread (wait)
            self.error = e
        self.wall = time.perf_counter() - wall0

    def _drain(self, progress: Callable | None) -> None:
        while True:
            try:
                t, info = self._events.get_nowait()
            except queue.Empty:
                return
            if progress is not None:
                progress(t, info)

    def wait(self, progress: Callable | None) -> tuple[str, str]:
        """Wait for the rerun, handing its progress reports to ``progress`` in this thread; returns its (stop
        reason, message). An exception of ``progress`` (a KeyboardInterrupt) cancels the rerun and propagates."""
        try:
            while self._thread.is_alive():
                self._thread.join(0.05)
                self._drain(progress)
            self._drain(progress)
        except BaseException:
            self.cancel()
            raise
        if self.error is not None:
            raise self.error
        return self.result

    def cancel(self) -> None:
        """Stop the rerun after its current step and wait until it has (its result is not used)."""
        self.request.cancelled = True
        if self._thread.is_alive():
            self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
