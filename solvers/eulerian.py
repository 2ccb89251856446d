"""The Eulerian (spectral) phase of a PDE run: rho stepped on its spectral representation with resolution
control (module docstring of :mod:`solvers.pde`), up to a stop or the handoff to the Lagrangian phase
(:mod:`solvers.lagrangian`). :class:`solvers.pde.PDERun` drives it.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .restart import EulerianState, GoodState
from .stepping import TABLEAUS, Integration, StepController

__all__ = ["EulerianPhase", "grid_rows"]


def _sci(x: float) -> str:
    """``x`` in e-notation with the digits it has: 1e-04, 2.5e-04 (``:g`` writes 0.0001)."""
    mantissa, exponent = f"{x:.15e}".split("e")
    return mantissa.rstrip("0").rstrip(".") + "e" + exponent


def _above(x: float, bound: float) -> str:
    """``x`` (> ``bound``) with three significant digits, or as many more as it takes to read above the
    bound: a tail of 1.0004e-4 against a tolerance of 1e-4 is 1.0004e-04, not 1.00e-04."""
    for digits in range(2, 17):
        text = f"{x:.{digits}e}"
        if float(text) > bound:
            return text
    return repr(x)


def grid_rows(grids: dict) -> list[tuple[int, ...]]:
    """(degree, *grid sizes) of every degree in ``grids`` (degree -> grid shape), by degree."""
    return [(deg, *shape) for deg, shape in sorted(grids.items())]


class EulerianPhase(Integration):
    """The spectral stepping of a PDE run, on the loop of :class:`~solvers.stepping.Integration`.

    Built from the initial coefficients (``state`` None) or from an :class:`~solvers.restart.EulerianState`;
    either way the initial state is checked here (``prepare_pde`` refuses what the run could not start from).
    After every accepted step: the explicit filter, refinement to twice the degree (up to ``cap``), the
    checks of the state (positivity, SA's Psi, finiteness, the tail at the cap, rest with t_final = inf),
    the last resolved state (``good``: the handoff's source) and the snapshots, which go to ``on_snapshot``.
    With the continuation (``continues``) a state the grid can no longer follow returns ("handoff",
    (reason, message)) from :meth:`run`.

    Parameters
    ----------
    model, space, Disc, opts : the model, its space and discretisation class, the run's PDEOptions
    t_final : float
    degree : int
        Resolution of ``coeffs`` (fresh start) or ignored (``state``'s).
    coeffs : (n,) complex ndarray or None
        Canonical initial coefficients (fresh start).
    miss : float
        What the series of a callable initial density misses at check points (counted as tail).
    cap, max_degree : int
        Largest Eulerian resolution (refinements are clipped to it; the handoff degree with the
        continuation) and the option max_degree.
    continues : bool
        With the Lagrangian continuation.
    save_time : callable
        ``save_time(k)``: the time of snapshot k.
    save_every : float or None
    output_points : int
        Of the snapshots' output grid.
    steps, refinements, grids : the run's step log, list of refinements and grids (degree -> shape), which
        the phase extends
    on_snapshot : callable
        ``on_snapshot(row)`` records a snapshot row (keys of ``PDEResult``'s per-snapshot fields).
    state : EulerianState or None
    """

    def __init__(self, model, space, Disc, opts, t_final: float, degree: int, coeffs: np.ndarray | None,
                 miss: float, cap: int, max_degree: int, continues: bool, save_time: Callable[[int], float],
                 save_every: float | None, output_points: int, steps: dict, refinements: list, grids: dict,
                 on_snapshot: Callable[[dict], None], state: EulerianState | None = None) -> None:
        tableau = TABLEAUS[opts.method]
        controller = StepController(tableau.error_order)
        if state is None:
            t, nsteps, nrejected, save_index, dt = 0.0, 0, 0, 1, opts.dt0
        else:
            degree = state.degree
            coeffs = state.coeffs[: space.ncoef(degree)]
            t, nsteps, nrejected, save_index, dt = state.t, state.nsteps, state.nrejected, state.save_index, state.dt
            controller.facold = state.facold
        super().__init__(t=t, t_final=t_final, dt=dt, tableau=tableau, controller=controller,
                         max_steps=opts.max_steps, nsteps=nsteps, nrejected=nrejected, steps=steps)
        self.model, self.space, self.opts = model, space, opts
        self.cap, self.max_degree, self.continues = cap, max_degree, continues
        self._save_time, self.save_every, self.save_index = save_time, save_every, save_index
        self.refinements, self.grids, self.on_snapshot = refinements, grids, on_snapshot
        self.output_points = output_points
        self.fresh = state is None
        self.filter = opts._filter
        self.degree = degree
        self._norms: tuple = ((None, 0.0), (None, 0.0))      # (state, its norm), see _norm
        self._scaled: tuple | None = None                     # see rhs_scaled
        self._forced: float | None = None                     # handoff_at, once the phase runs
        self.disc = Disc(model, degree, threads=opts.threads, effort=opts.planner)
        self.lin = self.disc.lin
        grids[degree] = tuple(self.disc.grid_shape)
        self.u = space.to_state(coeffs, degree)
        with np.errstate(all="ignore"):             # a state it cannot use is reported just below
            self._start = self._rhs_with_diag()
        self.diag: dict | None = None
        self.tail: float | None = None
        # the last resolved state (tail <= tail_tol, positivity and SA checks passed): the handoff's source
        self.good: GoodState | None = None
        self._refuse_infeasible(self._start[1])
        if state is None:
            self._refuse_unusable_initial_state(self._start[1], miss)
            self._remember_good(self._start[1])
        else:
            self.good = state.good

    # --- refusals before any step ---------------------------------------------------------------------
    def _refuse_infeasible(self, diag: dict) -> None:
        """Refuse (ValueError) a run that cannot reach t_final within max_steps."""
        opts = self.opts
        left = self.t_final - self.t
        if math.isinf(left):
            return
        if self.save_every is not None:
            n_save = math.ceil(left / self.save_every - 1e-9)
            if n_save > opts.max_steps:
                raise ValueError(f"max_steps = {opts.max_steps} cannot reach t_final = {self.t_final:g}: the "
                                 f"{n_save} snapshot times left each need a step; raise max_steps or save_every")
        vmax = diag.get("vmax", 0.0)
        if vmax > 0 and math.isfinite(vmax):
            # the CFL bound at the present, coarsest, grid: finer grids only need more steps
            need = left * vmax / (opts.cfl * self.disc.spacing)
            if need > opts.max_steps:
                raise ValueError(f"at t = {self.t:g} max |v| = {vmax:.3g} limits the step to cfl h / max|v| = "
                                 f"{opts.cfl * self.disc.spacing / vmax:.3g}: t_final = {self.t_final:g} needs more "
                                 f"than max_steps = {opts.max_steps} steps (check the model's perceptron scale and "
                                 "strength, and the option cfl)")

    def _refuse_unusable_initial_state(self, diag: dict, miss: float) -> None:
        """Raise ValueError when the run would stop at its first check (docstring of prepare_pde). An
        unresolved density is named as such first: its Gibbs undershoot would otherwise pass for a
        negative density."""
        opts = self.opts
        # what the kept coefficients miss of a callable counts as tail (see _initial_coefficients)
        tail = max(self.disc.tail(self.u), miss)
        if self.degree >= self.cap and self.continues and tail > opts.tail_tol:
            raise ValueError(f"initial data refused before any step: the initial density is not resolved at the "
                             f"handoff degree {self.cap} (spectral tail or miss at check points "
                             f"{_above(tail, opts.tail_tol)} > tail_tol {_sci(opts.tail_tol)}), so the continuation "
                             "has no resolved state to start from; raise handoff_degree (and max_degree), or start "
                             "from a smoother density")
        if self.degree >= self.cap and tail > opts.tail_max:
            raise ValueError(f"initial data refused before any step: the initial density is not resolved at "
                             f"max_degree = {self.max_degree} (spectral tail or miss at check points "
                             f"{_above(tail, opts.tail_max)} > tail_max {_sci(opts.tail_max)}; the run would stop at "
                             "once with 'resolution'); raise max_degree, or start from a smoother density")
        chk = self._check_state(diag)
        if chk is not None:
            reason, message = chk
            advice = {"positivity": "give the coefficients of a density >= 0 (or raise positivity_tol)",
                      "resolution": "lower beta, or start from smoother data",
                      "non-finite": "give finite data"}[reason]
            raise ValueError(f"initial data refused before any step: {message} on the computational grid of "
                             f"degree {self.degree} (the run would stop at once with '{reason}'); {advice}")

    # --- the state --------------------------------------------------------------------------------------
    def restart_state(self, *, last_snapshot_t: float | None, step_log: int, initial: str,
                      settings: dict) -> EulerianState:
        """The state a restart continues from (the run's own part: the arguments)."""
        return EulerianState(t=self.t, last_snapshot_t=last_snapshot_t, step_log=step_log, nsteps=self.nsteps,
                             nrejected=self.nrejected, save_index=self.save_index, initial=initial,
                             refinements=[tuple(r) for r in self.refinements], grids=grid_rows(self.grids),
                             settings=settings, coeffs=self.space.to_canonical(self.u, self.degree),
                             degree=self.degree, dt=float(self.dt) if self.dt is not None else float("nan"),
                             facold=self.controller.facold, good=self.good)

    def row(self, diag: dict) -> dict:
        """The snapshot of the current state."""
        canon = self.space.to_canonical(self.u, self.degree)
        return {"t": self.t, "coeffs": canon, "degree": self.degree,
                "energy": self.disc.energy(self.u), "mass": self.space.mass(canon),
                "min_density": diag["min_density"], "tail": self.disc.tail(self.u),
                "dissipation": self.disc.dissipation(self.u),
                "density": self.space.on_output_grid(canon, self.output_points)}

    def _snapshot(self, diag: dict) -> None:
        self.on_snapshot(self.row(diag))

    def _rhs_with_diag(self):
        f = self.disc.rhs(self.t, self.u, True)
        return f, dict(self.disc.last)

    def _cfl_dt(self, diag: dict) -> float:
        vmax = diag.get("vmax", 0.0)
        return math.inf if vmax <= 0 else self.opts.cfl * self.disc.spacing / vmax

    def _check_state(self, diag: dict) -> tuple[str, str] | None:
        """Stop reason and message if the state has lost resolution or positivity, else None."""
        opts = self.opts
        # SA first: where Psi's series reaches 0 the velocity G / Psi is infinite, and the cause is Psi
        if "psi_ratio" in diag and math.isfinite(diag["psi_ratio"]) and diag["psi_ratio"] < opts.sa_psi_min:
            return "resolution", (f"SA: min Psi / |Psi series| = {diag['psi_ratio']:.2e} < sa_psi_min = "
                                  f"{opts.sa_psi_min:.0e}: log Psi, hence the normalised velocity, is no longer "
                                  "accurate in double precision")
        if not all(map(math.isfinite, diag.values())):
            return "non-finite", "non-finite values in the density or the velocity"
        if diag["min_density"] < -opts.positivity_tol * max(diag["max_density"], 1.0):
            return "positivity", (f"min rho = {diag['min_density']:.3e} < -{opts.positivity_tol:g} max rho "
                                  f"(max rho = {diag['max_density']:.3e})")
        return None

    def _remember_good(self, diag: dict) -> None:
        """Keep the current state as the handoff source if it is resolved (continuation only)."""
        if self.continues and self.disc.tail(self.u) <= self.opts.tail_tol and self._check_state(diag) is None:
            self.good = GoodState(self.t, self.degree, self.save_index, self.space.to_canonical(self.u, self.degree))

    # --- the run ----------------------------------------------------------------------------------------
    def run(self, progress) -> tuple[str, object]:
        """The spectral stepping; returns (stop reason, message), or ("handoff", (reason, message))."""
        (self.f, self.diag), self._start = self._start, None
        self.tail = self.disc.tail(self.u)
        if self.fresh:
            self._snapshot(self.diag)
        if self.dt is None or not math.isfinite(self.dt):
            nf = self.disc.norm(self.f)
            self.dt = 0.01 * self.disc.norm(self.u) / nf if nf > 0 else 0.01 * self.t_final
            self.dt = min(self.dt, self._cfl_dt(self.diag), self.t_final)
        self._forced = self.opts.handoff_at if self.continues else None
        return self.integrate(progress)

    # --- the protocol of Integration ----------------------------------------------------------------
    @property
    def state(self) -> np.ndarray:
        return self.u

    def rhs(self, t: float, u: np.ndarray, last: bool = False) -> np.ndarray:
        return self.disc.rhs(t, u, last)

    def rhs_scaled(self) -> tuple:
        """(rhs_flux, divergence[, True]) of the discretisation (True: rhs_flux takes stages in factored
        form, its ``factored_stages``), one tuple per discretisation (the loop compares it by identity
        every step to notice a refinement)."""
        disc = self.disc
        if self._scaled is None or self._scaled[0].__self__ is not disc:
            self._scaled = (disc.rhs_flux, disc.divergence) + ((True,) if disc.factored_stages else ())
        return self._scaled

    def error_norm(self, err: np.ndarray, u: np.ndarray, u_new: np.ndarray) -> float:
        scale = self.opts.atol + self.opts.rtol * max(self._norm(u), self._norm(u_new))
        return self.disc.norm(err) / scale

    def _norm(self, u: np.ndarray) -> float:
        """||u|| of a state, remembered for the last two states asked: a step starts from the previous
        step's u_new (accepted, unfiltered) or retries from the same u (rejected)."""
        for x, val in self._norms:
            if x is u:
                return val
        val = self.disc.norm(u)
        self._norms = (self._norms[-1], (u, val))
        return val

    def step_bound(self) -> float:
        return min(self._cfl_dt(self.diag), self.opts.dt_max or math.inf)

    def save_time(self) -> float:
        return self._save_time(self.save_index)

    def next_landing(self) -> float:
        forced = self._forced
        return min(self.save_time(), forced) if forced is not None else self.save_time()

    def before_step(self) -> tuple[str, Any] | None:
        if self._forced is not None and self.t >= self._forced:
            return "handoff", ("handoff_at", f"handoff forced at t = {self._forced:g} (option handoff_at)")
        return None

    def accept(self, u_new: np.ndarray, f_new: np.ndarray | None, h: float, lands: bool) -> tuple[str, Any] | None:
        """An accepted spectral step: the explicit filter, refinement (an exact re-representation at twice
        the degree) or, with the continuation at its largest degree, the handoff; the checks of the
        state; the snapshot when the step landed on a snapshot time."""
        opts = self.opts
        self.u, self.f = u_new, f_new
        diag = dict(self.disc.last)
        if self.filter is not None:
            self.u = self.u * self.disc.filter_multipliers(self.filter)
            self.f, diag = self._rhs_with_diag()
        tail = self.disc.tail(self.u, self._norm(self.u))   # the norm of u_new is known from error_norm
        if tail > opts.tail_tol and self.degree < self.cap:
            new = min(2 * self.degree, self.cap)
            canon = self.space.to_canonical(self.u, self.degree)
            self.refinements.append((self.t, self.degree, new))
            self.degree = new
            self.disc = self.disc.refined(new)
            self.lin = self.disc.lin
            self.grids[new] = tuple(self.disc.grid_shape)
            self.u = self.space.to_state(self.space.resize(canon, new), new)
            self.f, diag = self._rhs_with_diag()
            tail = self.disc.tail(self.u)
        self.diag, self.tail = diag, tail
        chk = self._check_state(diag)
        if self.continues and chk is not None and chk[0] != "non-finite":
            return "handoff", (chk[0], f"at t = {self.t:.6g}: {chk[1]}")
        if self.continues and tail > opts.tail_tol:
            return "handoff", ("resolution", f"at t = {self.t:.6g} the spectral tail {_above(tail, opts.tail_tol)} > "
                                             f"tail_tol {_sci(opts.tail_tol)} at the handoff degree {self.cap}")
        if chk is None and tail > opts.tail_max and self.degree >= self.cap:
            chk = ("resolution", f"spectral tail {_above(tail, opts.tail_max)} > tail_max {_sci(opts.tail_max)} at the "
                                 f"maximal resolution {self.max_degree}")
            if opts.continuation == "none" and self.model.noise > 0:
                chk = (chk[0], chk[1] + " (no Lagrangian continuation with noise: the flow has no "
                                        "characteristics to follow)")
        rest = max(opts.drift_tol, opts.rtol)
        if chk is None and math.isinf(self.t_final) and diag["vmax"] <= rest:
            # a density at rest (the uniform one, without a perceptron): the end of a run without end. Its
            # slowest modes decay at the explicit steps' stability bound once below the step tolerance, so
            # rest is judged to that accuracy (rtol), not below it
            chk = ("stationary", f"the density is at rest: max |v| on the grid {diag['vmax']:.3g} <= "
                                 f"max(drift_tol, rtol) = {_sci(rest)} (a stationary density, not atomic)")
        if lands and self.t == self.save_time() and chk is None:
            self.save_index += 1
            self._snapshot(diag)
        if chk is not None:
            if chk[0] != "non-finite":
                self._snapshot(diag)
            return chk
        self._remember_good(diag)
        return None

    def report(self, h: float) -> dict:
        return {"dt": h, "degree": self.degree, "nsteps": self.nsteps, "tail": self.tail,
                "min_density": self.diag["min_density"]}
