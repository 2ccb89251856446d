"""Progress of a run (:class:`Progress`): a tqdm bar, a rate-limited callable, or nothing; the stepping loop
(:class:`solvers.stepping.Integration`) calls it after its accepted steps."""
from __future__ import annotations

import math
import time

__all__ = ["Progress", "always"]


class Progress:
    """Progress of a run: a tqdm bar (``progress=True``), a callable receiving a dict after every
    accepted step, or nothing. One object can serve the successive phases of a run.

    A callable with an attribute ``interval`` (seconds, > 0) asks to be called at most that often: it
    still receives the first step after the time went back (a new phase, e.g. the PDE's error-estimate
    rerun from its handoff) and the step that ends a phase (``t`` reaching ``info["t_end"]``, default
    ``t_final``). The bar is drawn at most every 0.1 s and once more when it is closed (where the run
    ended). Both limits matter on short runs, where formatting a line after each of a thousand steps
    would cost several percent of the run; the stepping loop does not even build the dict for a call the
    interval would drop (:meth:`wants`)."""

    def __init__(self, progress, t_final: float, t0: float = 0.0, max_steps: int | None = None) -> None:
        self.callback = progress if callable(progress) else None
        self.interval = float(getattr(self.callback, "interval", 0.0) or 0.0)
        self.bar = None
        if progress is True:
            from tqdm.auto import tqdm
            if math.isfinite(t_final):
                self.bar = tqdm(total=t_final, initial=t0, unit="t", bar_format=
                                "{l_bar}{bar}| t={n:.4g}/{total:.4g} [{elapsed}<{remaining}] {postfix}")
            else:
                self.bar = tqdm(total=max_steps, initial=0, unit="step")
        self.t_final = t_final
        self._drawn = self._called = -math.inf
        self._phase, self._bar_t = None, -math.inf      # the drawn phase's t_end (None: the run's) and last t
        self._last_t = -math.inf
        self._undrawn: tuple[float, dict] | None = None

    def __call__(self, t: float, info: dict) -> None:
        if self.bar is not None:
            # drawn at most every 0.1 s, by our clock: tqdm's own rule (update) waits for n to pass the
            # mark of its last drawing, which a phase that starts earlier (the PDE's error-estimate rerun
            # from its handoff) does not do until it is back there
            now = time.monotonic()
            if now - self._drawn < 0.1:
                self._undrawn = (t, info)
                return
            self._draw(t, info)
            self._drawn = now
        elif self.callback is not None:
            if self.interval > 0.0:
                now = time.monotonic()
                drop = self._drops(t, info.get("t_end", self.t_final), now)
                self._last_t = t
                if drop:
                    return
                self._called = now
            self.callback({"t": t, "t_final": self.t_final, **info})

    def _drops(self, t: float, t_end: float, now: float) -> bool:
        """Whether the rate-limited callable skips a call at ``t``: within ``interval`` of the last call it
        got, and neither a phase's first step (the time went back) nor its last (``t_end``)."""
        return now - self._called < self.interval and t >= self._last_t and t < t_end

    def _draw(self, t: float, info: dict) -> None:
        self._undrawn = None
        if math.isfinite(self.t_final):
            # a phase of its own (one that names its end, ``t_end``: the PDE's error-estimate rerun; or one
            # that went back in time) gets a bar of its own: its total, and its clock and rate counted from
            # its first drawn time, not the whole run's (which gave "t=3.7/1000 <31:53>" for a phase of a
            # second, and a negative rate on a resumed run, whose bar starts at the time resumed from)
            phase = info.get("t_end")
            total = min(float(phase if phase is not None else self.t_final), self.t_final)
            if phase != self._phase or t < self._bar_t:
                self.bar.reset(total=total)
                self.bar.initial = min(t, total)
                self._phase = phase
            self._bar_t = t
            self.bar.n = min(t, total)
        else:
            self.bar.n = info.get("nsteps", 0)
        self.bar.set_postfix_str(" ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}"
                                           for k, v in info.items()), refresh=False)
        self.bar.refresh()

    @property
    def active(self) -> bool:
        """Whether a call shows or delivers anything (else the loop skips building its dict)."""
        return self.bar is not None or self.callback is not None

    def wants(self, t: float) -> bool:
        """Whether a call at ``t`` after a step of a phase ending at ``t_final`` would deliver its dict:
        the loop builds the dict only then. False only for a rate-limited callable within its interval
        (then ``t`` is taken as the call would have taken it); a bar keeps every call's dict (the last
        one undrawn is drawn at close). A call after True decides exactly as it would have alone."""
        if self.bar is not None or self.interval <= 0.0:
            return self.active
        if self._drops(t, self.t_final, time.monotonic()):
            self._last_t = t
            return False
        return True

    def close(self) -> None:
        if self.bar is not None:
            if self._undrawn is not None:           # the bar ends where the run did
                self._draw(*self._undrawn)
            self.bar.close()


def always(t: float) -> bool:
    """The ``wants`` of a plain callable: every call."""
    return True
