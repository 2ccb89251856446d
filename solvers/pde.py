"""Spectral solver of the mean-field PDE  d_t rho + div(rho v[rho]) = nu Laplacian rho  (The model §1, §4).

:func:`solve_pde` evolves rho from its initial data with an integrating-factor embedded Runge–Kutta
method (noise exact), adaptive steps bounded by a CFL condition, and resolution control: after every
accepted step it measures the spectral tail (relative L^2 size of the top third of the spectrum),
the minimum of rho on the grid and the mass; when the tail exceeds ``tail_tol`` the state is
re-represented exactly at twice the degree (up to ``max_degree``); past the cap the run goes on
while the tail stays below ``tail_max`` and then stops with reason "resolution". Every stop is
explicit (:data:`STOP_REASONS`), with its time and a message; snapshots saved before it are kept.

The discretisation (circle or sphere) is chosen by ``model.d`` and lives in ``pde_circle`` /
``pde_sphere``; this module only drives it.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable

import numpy as np

from . import lagrangian
from . import validators as check
from ._blas import blas_threads
from ._memory import refuse_if_too_big
from .interaction import InteractionSums
from .interrupts import at_once, graceful_stop
from .model import Model, density_values
from .eulerian import EulerianPhase, grid_rows
from .rerun import BackgroundRerun, spare_core
from .restart import GoodState, LagrangianState, pde_state_from_dict
from .stepping import Progress
from .terminal import TerminalState
from .continuation_record import ContinuationRecord, ErrorEstimate, Handoff
from .pde_result import PDEResult
from .pde_spec import (DENSE_DOUBLINGS, LATE_PER_DOUBLING, SNAPSHOTS_PER_DOUBLING, PDEOptions, PDESpec,
                       snapshot_time, space_for)

__all__ = ["solve_pde", "prepare_pde", "prepare_spec", "PDERun", "PDEResult", "PDEOptions", "PDESpec", "STOP_REASONS",
           "space_for", "snapshot_time"]

STOP_REASONS = ("t_final", "stationary", "resolution", "positivity", "non-finite", "max_steps", "interrupted")

def _beside_extremum(model: Model, terminal: TerminalState) -> TerminalState:
    """The certified end with its distance to the global extremum of the energy (:func:`solvers.compare_end`:
    ``energy_gap``, ``is_global``), or the reason there is none (a model the extremum does not cover)."""
    from .landscape_end import compare_end
    out = dataclasses.replace(terminal)
    try:
        c = compare_end(model, terminal.positions, terminal.masses, terminal.position_errors, terminal.mass_errors)
    except ValueError as e:
        out.global_note = f"not compared: {e}"
        return out
    out.energy_gap, out.is_global, out.extremum_energy = float(c.energy_gap), bool(c.is_global), float(c.energy_star)
    out.extremum_kind, out.global_note = c.kind, c.reason
    return out


def _check_restart_settings(saved: dict | None, now: dict) -> None:
    """ValueError listing what differs between a restart state's settings and this run's."""
    if saved is None:
        return
    def norm(v):
        return tuple(v) if isinstance(v, list) else v
    # a setting the saved state does not name was not recorded when it was written (an older archive's,
    # "option threads" say); it ran with that setting's behaviour then, which is not checked
    diff = [f"{k}: {saved.get(k)!r} -> {now[k]!r}" for k in now
            if (k in saved or not k.startswith("option ")) and norm(saved.get(k)) != norm(now[k])]
    if diff:
        raise ValueError("the restart state belongs to a run with other settings (" + "; ".join(diff[:6])
                         + "); pass the same model, save_every and options")


def _initial_coefficients(space, initial, degree: int, tail_tol: float, max_degree: int):
    """Canonical coefficients of the initial density, the degree used, a description, and the relative RMS
    miss of the series at check points (a callable's; 0 for the others)."""
    if isinstance(initial, str):
        if initial != "uniform":
            raise ValueError(f"initial must be 'uniform', a callable on unit vectors, or an array of "
                             f"coefficients, got {initial!r}")
        c = np.zeros(space.ncoef(degree), dtype=complex)
        c[0] = space.mass_coefficient
        return c, degree, "uniform", 0.0
    if callable(initial):
        # the tail of the kept coefficients misses what lies entirely above the resolution (a harmonic of
        # degree 40 at degree 32 projects to the uniform density, with tail 0): the series is also compared
        # with the density itself at check points, and that relative RMS miss counts as a tail
        probe = space.probe_points(257)
        want = density_values(initial, probe, "initial density")
        while True:
            c = space.project(initial, degree)
            mass = space.mass(c)
            if not mass > 0:
                raise ValueError(f"initial density has mass {mass:.3g}; it must be positive")
            c = c / mass
            miss = (float(np.linalg.norm(space.evaluate(c, probe) - want / mass) / np.linalg.norm(want / mass))
                    if np.any(want) else math.inf)
            if max(space.tail(c), miss) <= tail_tol or degree >= max_degree:
                break
            degree = min(2 * degree, max_degree)
        desc = f"callable {getattr(initial, '__name__', type(initial).__name__)} (normalised by 1/{mass:.12g})"
        return c, degree, desc, miss
    c = np.asarray(initial)
    if c.ndim != 1 or not np.issubdtype(c.dtype, np.number):
        raise ValueError("initial coefficients must be a 1-D numeric array in the canonical layout")
    if not np.all(np.isfinite(c)):
        raise ValueError("initial coefficients must be finite")
    n = space.ncoef(degree)
    if c.size > n:
        raise ValueError(f"initial coefficients have {c.size} entries, more than the {n} of degree {degree}; "
                         "raise the degree")
    mass = space.mass(c)
    if abs(mass - 1.0) > 1e-12:
        raise ValueError(f"initial coefficients must describe a probability density (mass 1), got mass {mass!r}")
    out = np.zeros(n, dtype=complex)
    out[: c.size] = c
    return out, degree, f"coefficients ({c.size})", 0.0


class _Snapshots:
    """Growing per-snapshot records (coefficients zero-padded to the finest resolution)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.nodes: list[dict | None] = []

    def add(self, row: dict, nodes: dict | None = None) -> None:
        self.rows.append(row)
        self.nodes.append(nodes)

    def arrays(self, space) -> dict:
        if not self.rows:
            out: dict[str, Any] = {key: np.zeros(0) for key in ("t", "energy", "mass", "min_density", "tail",
                                                                "dissipation")}
            out.update(degree=np.zeros(0, dtype=int), coeffs=np.zeros((0, 0), dtype=complex), density=None,
                       nodes=[])
            return out
        n = max(r["coeffs"].size for r in self.rows)
        coeffs = np.zeros((len(self.rows), n), dtype=complex)
        for i, r in enumerate(self.rows):
            coeffs[i, : r["coeffs"].size] = r["coeffs"]
        out = {"coeffs": coeffs}
        for key in ("t", "degree", "energy", "mass", "min_density", "tail", "dissipation"):
            out[key] = np.array([r[key] for r in self.rows])
        out["density"] = np.array([r["density"] for r in self.rows])
        out["nodes"] = list(self.nodes)
        return out


def solve_pde(model: Model, t_final: float, degree: int, initial="uniform", save_every: float | None = None,
              *, progress: bool | Callable[[dict], None] = False,
              callback: Callable[[dict], None] | None = None,
              restart: dict | None = None, **options) -> PDEResult:
    """Solve the mean-field PDE of ``model`` from ``initial`` up to ``t_final``.

    Parameters
    ----------
    model : Model
        d = 2 (Fourier on S^1) or d = 3 (spherical harmonics on S^2).
    t_final : float
        Final time (> 0, finite).
    degree : int
        Initial resolution: number of Fourier modes K on S^1; maximal harmonic degree L on S^2.
    initial : "uniform", callable or array
        "uniform" (rho = 1); a callable taking unit vectors (n, d) and returning density values
        (normalised to mass 1; the resolution is raised until its tail is below ``tail_tol``; it is
        sampled on a grid of a few times the resolution's points, so a feature narrower than their
        spacing can fall between them unseen: start at a ``degree`` that resolves it);
        or canonical coefficients (mass coefficient exactly that of a probability density).
    save_every : float, optional
        Snapshot interval (time units); the step sequence lands exactly on every snapshot time.
        Default: snapshots at t = 0 and t_final only.
    progress : bool or callable
        True for a tqdm progress bar; a callable receives a dict (t, t_final, dt, degree, ...) after
        every accepted step. During the continuation's error-estimate rerun (from the handoff, twice
        the nodes) the dict also has ``check`` and ``t_end``, the time the rerun goes to (the run's
        stop, before t_final when it stopped stationary). A callable with an attribute ``interval``
        (seconds) is called at most that often, and at the start and end of each phase
        (:class:`solvers.stepping.Progress`).
    callback : callable, optional
        Receives each snapshot as a dict (including its restart state) as soon as it is taken.
    restart : dict, optional
        Restart state of an earlier run (``PDEResult.restart`` or an archive's; a snapshot's, or the one an
        interruption kept after it): the run
        continues from it exactly as the uninterrupted run would have.
    **options
        See :class:`PDEOptions`.

    Returns
    -------
    PDEResult
    """
    return prepare_pde(model, t_final, degree, initial, save_every, restart=restart, **options).run(
        progress=progress, callback=callback)


def prepare_pde(model: Model, t_final: float, degree: int, initial="uniform", save_every: float | None = None,
                *, restart: dict | None = None, **options) -> "PDERun":
    """Check the arguments of :func:`solve_pde` and build the initial state, without taking a step.

    Everything a run would refuse is refused here (ValueError, TypeError): bad arguments, and initial
    data the run could not even start from — a density negative somewhere on the computational grid
    (beyond ``positivity_tol``), one not resolved at the largest resolution (tail above ``tail_max``,
    or above ``tail_tol`` at the handoff degree when the continuation would have to start from it),
    SA's log Psi not representable, non-finite values; the Lagrangian continuation asked for with
    noise. ``prepare_pde(...).run(progress=, callback=)`` is :func:`solve_pde`; the run layer prepares
    before it creates an archive.
    """
    if not isinstance(model, Model):
        raise TypeError(f"model must be a solvers.Model, got {type(model).__name__}")
    space_for(model.d)
    opts = PDEOptions.from_kwargs(options, check.named_parameters(solve_pde))
    return prepare_spec(PDESpec.resolve(model, t_final, degree, initial, save_every, opts), restart)


def prepare_spec(spec: PDESpec, restart: dict | None = None) -> "PDERun":
    """:func:`prepare_pde` of a resolved spec (the run layer's way in): its combined settings checked
    (:meth:`PDESpec.check`), the initial state built, or that of ``restart``, whose run it continues."""
    spec.check()
    # one BLAS thread, as in the run: the initial checks' norms are BLAS dots, split by thread at K >= 10^4
    with blas_threads(1):
        return PDERun(spec, restart)


class PDERun:
    """One prepared integration (:func:`prepare_pde`); :meth:`run` integrates it once.

    A thin driver of the phases: the Eulerian (spectral) phase with resolution control
    (:class:`~solvers.eulerian.EulerianPhase`); with ``continuation="lagrangian"`` the handoff to a node
    measure and its Lagrangian phase (:class:`~solvers.lagrangian.LagrangianPhase`); then, by default, the
    error-estimate run of the continuation at twice the nodes. The driver owns the snapshot schedule past
    the handoff, the snapshots of both phases (one record path), the callbacks and checkpoints, the restart
    states, the result and the wording of an interruption.
    """

    def __init__(self, spec: PDESpec, restart: dict | None) -> None:
        self.spec = spec
        model, opts, max_degree, degree, initial = spec.model, spec.options, spec.max_degree, spec.degree, spec.initial
        Disc, space = space_for(model.d)
        t_final, save_every = spec.t_final, spec.save_every
        self.model, self.space = model, space
        self.t_final, self.save_every, self.opts, self.max_degree = t_final, save_every, opts, max_degree
        self.continues = spec.continues
        # the largest Eulerian resolution: refinements are clipped to it
        self.cap = spec.cap
        self.callback: Callable[[dict], None] | None = None
        self.progress: Progress | None = None
        self.stop_request: Any = None
        self.checkpoint: Callable[[], None] | None = None
        self.checkpoint_every = math.inf
        self._keep: Callable[[dict], None] | None = None
        self._settings_once: dict | None = None
        self.snaps = _Snapshots()
        self.steps: dict[str, list] = {"t": [], "dt": [], "error": [], "accepted": []}
        self._steps_mark = 0
        self.refinements: list = []
        # the computational grid of every degree used (fixed by the degree: recorded so that a resume on
        # a machine or version whose grid would differ can be refused)
        self.grids: dict = {}
        self.output_points = spec.output_points
        state = None if restart is None else pde_state_from_dict(restart)
        self.t = 0.0 if state is None else state.t
        self._refuse_too_big()
        self.grid = space.output_grid(self.output_points)
        self.euler: EulerianPhase | None = None     # the spectral phase, until the handoff
        self.lag: lagrangian.LagrangianPhase | None = None     # the Lagrangian phase, after the handoff
        self.handoff: Handoff | None = None             # what the handoff was, after it
        self.good: GoodState | None = None           # the handoff state, after it
        # (nsteps, nrejected, facold) the spectral phase ended with, after it
        self.spectral: tuple[int, int, float] | None = None
        self.check: ErrorEstimate | None = None               # the error-estimate run's final node measure
        self.checking = False        # inside the error-estimate run (an interruption there says so)
        self._background: BackgroundRerun | None = None   # the error-estimate rerun beside the run (solvers.rerun)
        self.last_restart: dict | None = None
        self._ran = False
        self._resumed_from = None if state is None else state.t
        # a restart state is that of the last snapshot taken, or of a step after it where an interruption
        # stopped the run (archives before the key: at a snapshot)
        self._last_snapshot_t = None if state is None else state.last_snapshot_t
        miss = 0.0
        if state is None:
            c, first, self.initial_desc, miss = _initial_coefficients(space, initial, degree, opts.tail_tol, self.cap)
            if first != degree:
                self.refinements.append((0.0, degree, first))
            degree = first
        else:
            c = None
            self.initial_desc = state.initial
            self.refinements = [tuple(r) for r in state.refinements]
            _check_restart_settings(state.settings, self._settings())
            # at t_final a continuation may still owe its error-estimate run
            owes = isinstance(state, LagrangianState) and opts.error_estimate and self.t == t_final
            if self.t >= t_final and not owes:
                raise ValueError(f"the restart state is at t = {self.t:.6g} >= t_final = {t_final:g}: nothing to run")
            self.grids = {int(row[0]): tuple(int(v) for v in row[1:]) for row in state.grids}
        if isinstance(state, LagrangianState):
            self._restore_lagrangian(state)
            return
        self.euler = EulerianPhase(model, space, Disc, opts, t_final, degree, c, miss, self.cap, max_degree,
                                   self.continues, self._save_time, save_every, self.output_points, self.steps,
                                   self.refinements, self.grids, lambda row: self._record(row, None), state)

    def _refuse_too_big(self) -> None:
        """Refuse (ValueError) a run whose snapshots, output grid and transforms would not fit in memory
        (checked before any of them is built)."""
        space = self.space
        left = self.t_final - self.t
        if self.save_every is None:
            n_snap = 2
        elif math.isinf(left):
            # the schedule of snapshot_time, counted to t = 1e40 save_every
            n_snap = 2 + SNAPSHOTS_PER_DOUBLING * DENSE_DOUBLINGS + LATE_PER_DOUBLING * 126
        else:
            n_snap = 2 + math.ceil(left / self.save_every)
        grid_points = space.output_grid_size(self.output_points)
        per_snap = 8.0 * grid_points + 16.0 * space.ncoef(self.cap)
        if self.continues:
            per_snap += 8.0 * (self.model.d + 2) * self.spec.nodes
        # the snapshots are kept as rows, then stacked into the result's arrays: at the peak both, and the
        # temporaries of the stacking
        parts = {f"{n_snap} snapshots kept and stacked": 2.5 * n_snap * per_snap,
                 "output grid": 8.0 * self.model.d * grid_points}
        parts[f"transforms at degree {self.cap}"] = space.transform_bytes(self.cap)
        refuse_if_too_big(parts, "raise save_every, lower output_points or max_degree")

    # --- helpers --------------------------------------------------------------------------------
    def _save_time(self, k: int) -> float:
        return snapshot_time(k, self.save_every, self.t_final)

    def _settings(self) -> dict:
        """What a restart must share with the run it continues (else it would not be that run); t_final
        and the step budget may change. Fixed for the run: computed once (every restart state holds it)."""
        if self._settings_once is None:
            self._settings_once = self._compute_settings()
        return dict(self._settings_once)

    def _compute_settings(self) -> dict:
        m = self.model
        p = m.perceptron
        digest = None
        if p is not None:
            import hashlib
            h = hashlib.sha256()
            for k, v in sorted(p.to_dict().items()):
                h.update(k.encode())
                h.update(np.ascontiguousarray(v).tobytes() if isinstance(v, np.ndarray) else repr(v).encode())
            digest = h.hexdigest()[:16]
        # threads count: on S^2 SHTns's transforms round differently with 1 and 2 threads, so a restart with
        # other threads would not continue the run bit for bit
        opts = {k: v for k, v in self.opts.to_dict().items() if k != "max_steps"}
        return {"d": m.d, "beta": m.beta, "flow": m.flow, "attention": m.attention, "strength": m.strength,
                "noise": m.noise, "perceptron": digest, "save_every": self.save_every,
                **{f"option {k}": v for k, v in opts.items()}}

    def _spectral(self) -> tuple[int, int, float]:
        """(nsteps, nrejected, facold) of the spectral phase, running or ended by the handoff."""
        e = self.euler
        return (e.nsteps, e.nrejected, e.controller.facold) if e is not None else self.spectral

    def _restart_state(self) -> dict:
        # last_snapshot_t < t: a state kept where an interruption stopped the run, between snapshots
        # step_log: the attempted steps this run has logged up to this state (the archive's rows of them)
        common = {"last_snapshot_t": self._last_snapshot_t, "step_log": len(self.steps["t"]),
                  "initial": self.initial_desc, "settings": self._settings()}
        if self.lag is None:
            return self.euler.restart_state(**common).to_dict()
        nsteps, nrejected, facold = self._spectral()
        g = self.good
        return self.lag.restart_state(
            **common, nsteps=nsteps, nrejected=nrejected, save_index=self.save_index,
            refinements=[tuple(r) for r in self.refinements], grids=grid_rows(self.grids),
            coeffs=self.snaps.rows[-1]["coeffs"] if self.snaps.rows else g.coeffs, handoff=self.handoff,
            handoff_coeffs=g.coeffs, good_t=g.t, good_save_index=g.save_index, facold=facold).to_dict()

    def _checkpoint(self) -> None:
        """Hand the state of the step just accepted (spectral or node phase) to the checkpoint callable."""
        steps = {k: v[self._steps_mark:] for k, v in self.steps.items()}
        self._steps_mark = len(self.steps["t"])
        self._keep({"restart": self._restart_state(), "steps": steps})

    def _record(self, row: dict, nodes: dict | None) -> None:
        """Keep a snapshot row (and the node measure of a Lagrangian one) and hand it to the callback."""
        self.snaps.add(row, nodes)
        self._last_snapshot_t = row["t"]
        self.last_restart = self._restart_state()
        if self.callback is not None:
            # the steps attempted since the previous snapshot travel with it (for the archive)
            steps = {k: v[self._steps_mark:] for k, v in self.steps.items()}
            self.callback({**row, "nodes": nodes, "restart": self.last_restart, "steps": steps})
        self._steps_mark = len(self.steps["t"])

    # --- the run --------------------------------------------------------------------------------
    def run(self, progress: bool | Callable[[dict], None] = False,
            callback: Callable[[dict], None] | None = None, checkpoint: Callable[[dict], None] | None = None,
            checkpoint_every: float | None = None) -> PDEResult:
        """Integrate (see :func:`solve_pde` for ``progress`` and ``callback``); once per prepared run.

        ``checkpoint``: called every ``checkpoint_every`` seconds of wall clock (after the step that ends
        them; spectral and node steps, not the error-estimate rerun) with {"restart": the state of that
        step (a restart continues from it bit for bit), "steps": the attempted spectral steps since the
        previous snapshot or checkpoint}, so that a run killed between snapshots loses at most that long."""
        if self._ran:
            raise RuntimeError("this prepared PDE run has already been run; prepare a new one")
        self._ran = True
        self.callback = callback
        if checkpoint is not None and checkpoint_every is not None:
            self._keep, self.checkpoint_every = checkpoint, check.number("checkpoint_every", checkpoint_every, gt=0)
            self.checkpoint = self._checkpoint
        self.progress = Progress(progress, self.t_final, self.t)
        wall0 = time.perf_counter()
        stop: str | None = None
        message: Any = ""
        try:
            # one BLAS thread: the loop's BLAS calls (the norms) are a few microseconds each; the
            # first Ctrl-C stops the loop after its current step (solvers.interrupts), a second at once
            with blas_threads(1), graceful_stop() as self.stop_request:
                if self.lag is None:
                    stop, message = self._eulerian()
                    if stop == "handoff":
                        stop, message = self._hand_off(*message)
                if self.lag is not None and stop is None:
                    stop, message = self._lagrangian()
                    if self.opts.error_estimate and stop in ("t_final", "stationary"):
                        self._error_estimate_run()
                if stop == "interrupted":
                    # stopped after an accepted step: the state there is kept, and a resume continues from it
                    self.last_restart = self._restart_state()
                    message += f" after the step to t = {self.t:.6g}: its state is kept, and a resume continues from it"
        except KeyboardInterrupt:
            stop, message = "interrupted", self._interrupted()
        finally:
            if self._background is not None:        # started, and neither kept nor cancelled: not used
                self._background.cancel()
                self._background = None
            self.progress.close()
        return self._result(stop, message, time.perf_counter() - wall0)

    def _interrupted(self) -> str:
        """The message of a stop the loop could not keep: a signal in the rerun, a second signal, a
        KeyboardInterrupt of a caller's own."""
        message = at_once(self.stop_request, rerun=self.checking)
        if self.checking:
            return message + (f" during the error-estimate rerun (twice the nodes from the handoff at t = "
                              f"{self.good.t:.6g}); the solution had reached t = {self.t:.6g}, and a resume "
                              "runs the error estimate again")
        # the phase's loop had not handed its time back
        if self.lag is not None:
            self.t = self.lag.t
        elif self.euler is not None:
            self.t = self.euler.t
        # what a resume starts from: the last snapshot (``restart``), the state this run resumed from
        # if none came since, or an archive's later checkpoint
        last = self._last_snapshot_t
        start = self._resumed_from
        if last is not None and max(last, start or last) < self.t:
            where = (f"the state this run resumed from, at t = {start:.6g}" if start is not None
                     and start > last else f"the last snapshot, at t = {last:.6g}"
                     + ("" if self.save_every else " (no save_every: snapshots at t = 0 and t_final only)"))
            message += (f" at t = {self.t:.6g}; a resume continues from {where} (or from the archive's "
                        "checkpoint, if later)")
        return message

    def _eulerian(self) -> tuple[str, object]:
        """The spectral phase; returns (stop reason, message), or ("handoff", (reason, message))."""
        e = self.euler
        e.stop_request = self.stop_request
        e.checkpoint, e.checkpoint_every = self.checkpoint, self.checkpoint_every
        stop, message = e.run(self.progress)
        self.t = e.t
        return stop, message

    def resolved_options(self) -> dict:
        """The options as this run uses them (``PDESpec.options_dict``)."""
        return self.spec.options_dict()

    # --- the continuation -------------------------------------------------------------------------
    def _continuation_nodes(self, factor: int = 1):
        g = self.good
        n = self.spec.nodes * factor
        return lagrangian.handoff_nodes(self.space, g.coeffs, g.degree, n)

    def _new_phase(self, nodes, t: float, radius: float | None = None,
                   state: LagrangianState | None = None) -> "lagrangian.LagrangianPhase":
        """A node phase (from ``nodes`` at ``t``, or ``state``); with ``radius`` (the atoms' grouping radius)
        one that certifies its end."""
        o = self.opts
        sums = None
        if self.model.attention != "none":
            sums = InteractionSums(self.model.d, self.model.beta, "auto")
        # the rerun at twice the nodes steps to its own, finer spacing
        scale = 1.0 if nodes is None else self.space.node_spacing(len(nodes)) / self.space.node_spacing(
            self.handoff.nodes)
        return lagrangian.LagrangianPhase(self.model, self.space, nodes, t, self.good.degree, o.node_rtol * scale,
                                          o.node_atol * scale, o.merge_tol, o.drift_tol, sums=sums,
                                          certify=radius is not None, atom_radius=radius or 0.0, kick=o.kick,
                                          state=state)

    def _hand_off(self, reason: str, message: str) -> tuple[str | None, str]:
        """Build the node measure from the last resolved state and make it the state of the run."""
        e = self.euler
        if e.good is None:
            return "resolution", f"{message}; no resolved state (tail <= tail_tol) to hand off from"
        g = self.good = e.good
        nodes, clipped, desc = self._continuation_nodes()
        self.handoff = Handoff(t=g.t, reason=reason, message=message, degree=g.degree, nodes=len(nodes),
                               clipped_mass=clipped, description=desc, max_weight=float(nodes.w.max()),
                               smoothing=float(self.space.smoothing_scale(g.degree)),
                               atom_radius=self._atom_radius(len(nodes)))
        self.t, self.save_index = g.t, g.save_index
        self.spectral = (e.nsteps, e.nrejected, e.controller.facold)
        self.lag = self._new_phase(nodes, g.t, self.handoff.atom_radius)
        self.euler = None               # its transforms go
        return None, ""

    def _atom_radius(self, n: int) -> float:
        return self.opts.atom_radius or 0.1 * self.space.node_spacing(n)

    def _restore_lagrangian(self, state: LagrangianState) -> None:
        self.handoff = state.handoff
        self.good = GoodState(state.good_t, self.handoff.degree, state.good_save_index, state.handoff_coeffs)
        self.save_index = state.save_index
        self.spectral = (state.nsteps, state.nrejected, state.facold)
        self.lag = self._new_phase(None, self.t, self.handoff.atom_radius, state=state)

    def _lagrangian(self) -> tuple[str, str]:
        lag = self.lag
        smoothing = self.handoff.smoothing

        def save() -> None:
            self.t = lag.t
            self.save_index += 1
            self._snapshot_nodes(smoothing)

        # the error-estimate rerun starts now, on a thread of its own beside the run (solvers.rerun), expecting
        # the end a run to t_final = inf has (certified: the rerun to its own certified end) or a finite t_final
        # has (reached: the rerun to it); _error_estimate_run keeps it only where the run ended so
        self._background = None
        if self.opts.error_estimate and spare_core():
            certify = math.isinf(self.t_final)
            phase, n2 = self._rerun_phase(certify)
            self._background = BackgroundRerun(phase, n2, self.t_final, certify, self.opts.max_steps,
                                               self.stop_request, {"check": "2x nodes", "t_end": self.t_final})
            self._background.start()
        # a resumed run re-derives its stop from the state (t >= t_final, stationary, max_steps): a run
        # killed after its last snapshot goes straight on to the error-estimate run
        lag.stop_request = self.stop_request
        lag.checkpoint, lag.checkpoint_every = self.checkpoint, self.checkpoint_every
        stop = None
        try:
            stop, message = lag.run(self.t_final, save_time=lambda: self._save_time(self.save_index),
                                    on_save=save, progress=self.progress, max_steps=self.opts.max_steps)
        finally:
            # an exception, an interruption or a stop that has no rerun: the thread stops after its step
            if self._background is not None and stop not in ("t_final", "stationary"):
                self._background.cancel()
                self._background = None
        self.t = lag.t
        if stop != "interrupted" and self._last_snapshot_t != self.t:
            self._snapshot_nodes(smoothing)
        return stop, message

    def _snapshot_nodes(self, smoothing: float) -> None:
        row = self.lag.row(self.output_points, smoothing)
        nodes = row.pop("nodes")
        self._record(row, nodes)

    def _rerun_phase(self, certify: bool) -> tuple["lagrangian.LagrangianPhase", int]:
        """The error-estimate rerun's phase: twice the nodes from the handoff state, certifying its own end
        when ``certify``; and its node count."""
        nodes, _, _ = self._continuation_nodes(factor=2)
        return self._new_phase(nodes, self.good.t, self._atom_radius(len(nodes)) if certify else None), len(nodes)

    def _error_estimate_run(self) -> None:
        """The continuation again from the handoff state with twice the nodes: to its own certified end when
        the run was certified stationary (the terminal masses are compared), else to the same time. The rerun
        started beside the run at the handoff (:meth:`_lagrangian`) is that one when the run ended as it
        expected, and its numbers are the same (:mod:`solvers.rerun`); otherwise it is run here."""
        t_end = self.lag.t
        certified = self.lag.terminal is not None and self.lag.ended is not None
        background, self._background = self._background, None
        if background is not None and not (background.certify == certified and (certified or t_end == self.t_final)):
            background.cancel()
            background = None
        self.t = self.good.t
        # t_end: the rerun's end, which is before t_final when the run stopped stationary
        end = self.t_final if certified else t_end
        report = lambda t, info: self.progress(t, {"check": "2x nodes", "t_end": end, **info})  # noqa: E731
        self.checking = True
        try:
            if background is not None:
                phase, n2 = background.phase, background.initial_nodes
                stop, message = background.wait(self.progress)
                wall = background.wall
            else:
                phase, n2 = self._rerun_phase(certified)
                wall0 = time.perf_counter()
                phase.stop_request = self.stop_request
                stop, message = phase.run(self.t_final if certified else t_end, progress=report,
                                          stationary=certified, max_steps=self.opts.max_steps)
                wall = time.perf_counter() - wall0
            if stop == "interrupted":
                raise KeyboardInterrupt      # reported as an interruption of the rerun (see run)
        finally:
            self.t = t_end                   # the run's own state is at t_end, interrupted or not
        self.checking = False
        self.check = ErrorEstimate(t=phase.t, initial_nodes=n2, x=phase.nodes.x, w=phase.nodes.w,
                                   count=phase.nodes.count, nsteps=phase.nsteps, stop_reason=stop,
                                   wall_time=wall, terminal=phase.terminal)

    def _terminal_errors(self, terminal: TerminalState, check: TerminalState, n2: int) -> TerminalState:
        """The terminal state with the errors of its masses and positions from the rerun's terminal state (the
        rule of ``PDEResult.atoms``: paired by position, Richardson-extrapolated, at least the basin floor)."""
        n1 = self.handoff.nodes
        mine = lagrangian.NodeAtoms(terminal.positions, terminal.masses, terminal.counts, 0.0, 0.0)
        other = lagrangian.NodeAtoms(check.positions, check.masses, check.counts, 0.0, 0.0)
        est = lagrangian.estimate_atoms(mine, other, n2,
                                        floor=self.space.basin_floor_nodes * self.handoff.max_weight, ratio=n2 / n1,
                                        order=1.0 / (self.model.d - 1))
        out = dataclasses.replace(terminal)
        # NodeAtoms sorts by mass, as TerminalState does (heaviest first, stable): the same order
        out.mass_errors, out.position_errors, out.check_nodes = est.mass_errors, est.position_errors, n2
        return out

    def _result(self, stop: str, message: str, wall: float) -> PDEResult:
        a = self.snaps.arrays(self.space)
        steps = {"t": np.array(self.steps["t"]), "dt": np.array(self.steps["dt"]),
                 "error": np.array(self.steps["error"]), "accepted": np.array(self.steps["accepted"], dtype=bool)}
        lag = None
        if self.lag is not None:
            lag = ContinuationRecord(
                handoff=self.handoff, merges=np.array(self.lag.merges, dtype=float).reshape(-1, 3),
                node_nsteps=self.lag.nsteps, node_nrejected=self.lag.nrejected, check=self.check,
                kink_crossings=self.lag.kink_crossings, diffuse_rate=self.lag.diffuse_rate(),
                # the solution reached its end and only the error-estimate rerun was cut: its atoms hold,
                # without error bars
                check_interrupted=bool(self.checking))
        terminal = plateaus = slow = None
        if self.lag is not None:
            terminal, plateaus, slow = self.lag.terminal, list(self.lag.plateaus), list(self.lag.stages)
            if terminal is not None and self.check is not None and self.check.terminal is not None:
                terminal = self._terminal_errors(terminal, self.check.terminal, self.check.initial_nodes)
        if terminal is not None and stop == "stationary":
            terminal = _beside_extremum(self.model, terminal)
        nsteps, nrejected, _ = self._spectral()
        return PDEResult(
            terminal=terminal, plateaus=plateaus or [], slow_stages=slow or [],
            model=self.model, t=a["t"], coeffs=a["coeffs"], degree=a["degree"], grid=self.grid,
            density=a["density"], energy=a["energy"], mass=a["mass"], min_density=a["min_density"],
            tail=a["tail"], dissipation=a["dissipation"], steps=steps, refinements=list(self.refinements),
            grids=grid_rows(self.grids), stop_reason=stop, message=message, t_stop=self.t, nsteps=nsteps,
            nrejected=nrejected, options=self.opts.to_dict(), initial=self.initial_desc, wall_time=wall,
            restart=self.last_restart, nodes=a["nodes"], lagrangian=lag)
