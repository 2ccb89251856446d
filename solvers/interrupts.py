"""Ctrl-C as a stop at the next step boundary, so that an interrupted run keeps its work.

While :func:`graceful_stop` is active (in the main thread), the first Ctrl-C does not raise where it
lands: the handler the process already had is called, and the KeyboardInterrupt it raises becomes a
:class:`StopRequest`. The integration loop (:class:`solvers.stepping.Integration`) polls the request
after every accepted step and then returns the stop reason ``"interrupted"``: the run ends at that
step's state, which its restart state reproduces exactly (a resume continues from the time reached,
not from the last snapshot). A second signal raises at once, as it would without this. A handler that
decides not to interrupt (a local pool worker between tasks, ``solvers.app.executor``) still decides.
A process that has already taken an interrupt (a pool worker, :func:`set_stop_pending`) starts every
later block with its request made: the next run of its task stops after its first step.

SIGTERM is handled the same way only where the process already has a Python handler for it (the
``attnpde`` command and its local pool workers install one); elsewhere it keeps its default action (the
process ends at once).
Nothing here writes output.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

__all__ = ["StopRequest", "graceful_stop", "add_stop_signal", "set_stop_pending", "at_once"]

_NAMES: dict[int, str] = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}

#: the signals :func:`graceful_stop` turns into a stop request (where they have a Python handler)
_STOP_SIGNALS: list[int] = [signal.SIGINT, signal.SIGTERM]


#: the signal of an interrupt this process took before the current block (None: none), see
#: :func:`set_stop_pending`
_PENDING: list = [lambda: None]


def add_stop_signal(signum: int, name: str) -> None:
    """Handle ``signum`` as Ctrl-C is, in this process (a pool worker: the signal its pool forwards)."""
    if signum not in _STOP_SIGNALS:
        _STOP_SIGNALS.append(signum)
    _NAMES[signum] = name


def set_stop_pending(pending):
    """``pending()``: the signal of an interrupt this process already took (None: none). A block of
    :func:`graceful_stop` entered after it starts with its request made, so that the next run of an
    interrupted task (a pool worker's, whose task may hold several runs) stops after its first step, and a
    command whose Ctrl-C was swallowed before its run began (see ``solvers.app.cli``) stops it after its
    first step. Returns the previous ``pending``."""
    previous, _PENDING[0] = _PENDING[0], pending
    return previous


class StopRequest:
    """Whether a stop was asked (falsy until a signal came); ``signum`` is the signal, ``why`` the
    message of the stop."""

    __slots__ = ("signum",)

    def __init__(self) -> None:
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    @property
    def why(self) -> str:
        return f"interrupted by {_NAMES.get(self.signum, f'signal {self.signum}')}"


@contextlib.contextmanager
def graceful_stop(signals: tuple | None = None) -> Iterator[StopRequest]:
    """Turn the first of ``signals`` (default: SIGINT, SIGTERM and those added by :func:`add_stop_signal`)
    into a :class:`StopRequest` for the duration of the block (module docstring). Outside the main
    thread, or for a signal without a Python handler (ignored, or its default action), nothing changes:
    the request stays falsy."""
    signals = tuple(_STOP_SIGNALS) if signals is None else signals
    request = StopRequest()
    request.signum = _PENDING[0]()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    saved: dict = {}

    def handler(signum, frame):
        previous = saved[signum]
        if request:
            previous(signum, frame)          # a second signal: what it would do without us (raise)
            return
        try:
            previous(signum, frame)
        except KeyboardInterrupt:
            request.signum = signum

    for sig in signals:
        previous = signal.getsignal(sig)
        if callable(previous):
            saved[sig] = previous
            signal.signal(sig, handler)
    try:
        yield request
    finally:
        for sig, previous in saved.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, previous)


def at_once(request: StopRequest | None, rerun: bool = False) -> str:
    """The message of a run stopped at once by a KeyboardInterrupt (not after its step): a second signal
    after ``request``'s, the first signal where a stage cannot stop after a step (``rerun``: the PDE's
    error-estimate rerun, started again by a resume), or a KeyboardInterrupt of the caller's own."""
    if not request:
        return "interrupted by the user (KeyboardInterrupt)"
    return request.why if rerun else f"{request.why}, then at once by a second signal"
