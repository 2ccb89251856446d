"""Spectral solver of the mean-field PDE  d_t rho + div(rho v[rho]) = nu Laplacian rho  (SPEC §1, §4).

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

import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

import numpy as np

from spectral.filters import make_filter
from .model import Model
from .stepping import TABLEAUS, IFRungeKutta, StepController

__all__ = ["solve_pde", "PDEResult", "PDEOptions", "STOP_REASONS", "space_for"]

STOP_REASONS = ("t_final", "resolution", "positivity", "non-finite", "max_steps", "interrupted")


def space_for(d: int):
    """(Discretization class, Space class) for the PDE on S^{d-1}."""
    if d == 2:
        from .pde_circle import CircleDiscretization, CircleSpace
        return CircleDiscretization, CircleSpace
    if d == 3:
        from .pde_sphere import SphereDiscretization, SphereSpace
        return SphereDiscretization, SphereSpace
    raise ValueError(f"the spectral PDE solver works on the circle (d = 2) and the sphere (d = 3), got d = {d}")


@dataclass
class PDEOptions:
    """Numerical options of :func:`solve_pde` (all recorded with the run).

    Attributes
    ----------
    rtol, atol : float
        Tolerances of the embedded error estimate, in the L^2(sigma) norm of rho:
        err <= atol + rtol * ||rho||.
    method : {"DP54", "BS32"}
        Embedded Runge–Kutta pair (integrating-factor form when noise > 0).
    cfl : float
        Step bound dt <= cfl * h / max|v| with h the grid spacing (radians).
    dt0, dt_max : float or None
        First step (default from ||rho|| / ||d rho/dt||) and largest step (default none).
    max_degree : int or None
        Cap of the resolution (circle: modes, default 2^16; sphere: degree, default 511).
    tail_tol : float
        Refine (double the degree) when the spectral tail exceeds this.
    tail_max : float
        At the cap, stop with "resolution" when the tail exceeds this.
    positivity_tol : float
        Stop with "positivity" when min rho < -positivity_tol * max rho on the grid.
    sa_psi_min : float
        SA only: stop with "resolution" when min Psi / (absolute sum of its series) falls below this,
        i.e. when log Psi (hence the SA velocity) loses more than -log10(sa_psi_min) digits.
    filter : None or mapping
        Explicit exponential filter {"kind": "exponential", "alpha": 36, "order": 16} applied to the
        state after every accepted step. Off by default.
    max_steps : int
        Stop with "max_steps" after this many accepted steps.
    output_points : int or None
        Output grid: number of points on S^1 (default 1024); on S^2 the number of latitudes of an
        equiangular grid with twice as many longitudes (default 96).
    threads : int
        Threads for the transforms.
    planner : str
        FFTW planner effort for the circle ("FFTW_ESTIMATE" is deterministic; restarts then reproduce
        uninterrupted runs exactly).
    """

    rtol: float = 1e-8
    atol: float = 1e-12
    method: str = "DP54"
    cfl: float = 1.0
    dt0: float | None = None
    dt_max: float | None = None
    max_degree: int | None = None
    tail_tol: float = 1e-4
    tail_max: float = 1e-3
    positivity_tol: float = 1e-3
    sa_psi_min: float = 1e-11
    filter: Any = None
    max_steps: int = 10_000_000
    output_points: int | None = None
    threads: int = 1
    planner: str = "FFTW_ESTIMATE"

    def __post_init__(self) -> None:
        def positive(name, allow_none=False):
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"option {name} must be a finite number > 0, got {v!r}")
        for name in ("rtol", "atol", "cfl", "tail_tol", "tail_max", "positivity_tol", "sa_psi_min"):
            positive(name)
        for name in ("dt0", "dt_max"):
            positive(name, allow_none=True)
        if self.method not in ("DP54", "BS32"):
            raise ValueError(f"option method must be 'DP54' or 'BS32', got {self.method!r}")
        for name in ("max_steps", "threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"option {name} must be an integer >= 1, got {v!r}")
        for name in ("max_degree", "output_points"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 2):
                raise ValueError(f"option {name} must be an integer >= 2, got {v!r}")
        if self.tail_max < self.tail_tol:
            raise ValueError(f"option tail_max ({self.tail_max}) must be >= tail_tol ({self.tail_tol})")
        self._filter = make_filter(self.filter)
        if self._filter is not None:
            self.filter = self._filter.describe()

    @classmethod
    def from_kwargs(cls, options: dict) -> "PDEOptions":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"solve_pde: unknown option(s) {unknown}; allowed: {sorted(names)}")
        return cls(**options)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class PDEResult:
    """The run of :func:`solve_pde`: snapshots, diagnostics and how it ended.

    Attributes
    ----------
    model : Model
    t : (T,) snapshot times
    coeffs : (T, n) complex canonical coefficients, zero-padded to the finest resolution reached
        (circle: c_0..c_{K-1}; sphere: orthonormal-harmonic coefficients in l-major order, index
        l(l+1)/2 + m, m >= 0 — a coarser representation is a prefix of a finer one)
    degree : (T,) resolution of each snapshot (circle: modes K; sphere: maximal degree L)
    grid : unit vectors of the output grid, (n, 2) on S^1, (nlat, nphi, 3) on S^2
    density : (T, *grid.shape[:-1]) rho on the output grid
    energy, mass, min_density, tail, dissipation : (T,) per snapshot; min_density is on the
        computational grid; dissipation is s ∫ rho |v|^2 dsigma (= dE/dt for noiseless USA)
    steps : dict of arrays "t", "dt", "error", "accepted" — every attempted step
    refinements : list of (t, old degree, new degree)
    stop_reason : one of STOP_REASONS; message : human-readable detail; t_stop : time reached
    """

    model: Model
    t: np.ndarray
    coeffs: np.ndarray
    degree: np.ndarray
    grid: np.ndarray
    density: np.ndarray
    energy: np.ndarray
    mass: np.ndarray
    min_density: np.ndarray
    tail: np.ndarray
    dissipation: np.ndarray
    steps: dict
    refinements: list
    stop_reason: str
    message: str
    t_stop: float
    nsteps: int
    nrejected: int
    options: dict
    initial: str
    wall_time: float
    restart: dict | None = field(default=None, repr=False)

    @property
    def space(self):
        return space_for(self.model.d)[1]

    def _index(self, i: int) -> int:
        T = len(self.t)
        if not -T <= i < T:
            raise IndexError(f"snapshot index {i} out of range for {T} snapshots")
        return i % T

    def coefficients(self, i: int = -1) -> np.ndarray:
        """Canonical coefficients of snapshot i, at that snapshot's own resolution."""
        i = self._index(i)
        return self.coeffs[i, : self.space.ncoef(int(self.degree[i]))]

    def at(self, x: np.ndarray, i: int = -1) -> np.ndarray:
        """rho at unit vectors x (n, d) at snapshot i, evaluated from the coefficients."""
        return self.space.evaluate(self.coefficients(i), np.asarray(x, dtype=float))

    def atoms(self, i: int = -1, threshold: float = 10.0, method: str = "basin", min_mass: float = 0.0,
              smoothing: float | str | None = "auto"):
        """Positions (k, d) and masses (k,) of the concentrated pieces of rho at snapshot i.

        ``method="basin"`` (default): every local maximum of rho with rho >= threshold (the uniform
        density is 1) is an atom carrying the mass of its steepest-ascent basin, i.e. of everything
        that slopes up into it; mass frozen on a plateau beyond a dip is not counted.
        ``method="level"``: the connected components of {rho >= threshold}, with the mass above the
        level set only. Positions are normalised rho-weighted mean directions.
        ``smoothing``: peaks, basins and levels are found on rho smoothed by the heat kernel at this
        angular scale ("auto": for the basin method about two wavelengths of the highest resolved
        mode — Gibbs oscillations beside a jump are not atoms —, for the level method none; None:
        rho itself); masses are those of rho.
        """
        return self.space.atoms(self.coefficients(i), threshold=threshold, method=method, min_mass=min_mass,
                                smoothing=smoothing)

    def summary(self) -> str:
        m = self.model
        lines = [
            f"PDE on S^{m.d - 1}: beta={m.beta:g} flow={m.flow} attention={m.attention} "
            f"strength={m.strength:g} noise={m.noise:g} perceptron={m.perceptron!r}",
            f"  stop: {self.stop_reason} at t={self.t_stop:.6g} ({self.message})",
            f"  {self.nsteps} steps ({self.nrejected} rejected), {len(self.t)} snapshots, "
            f"resolution {int(self.degree[0])} -> {int(self.degree[-1])}, wall {self.wall_time:.2f} s",
            f"  energy {self.energy[0]:.10g} -> {self.energy[-1]:.10g}; |mass - 1| <= "
            f"{np.max(np.abs(self.mass - 1)):.2e}; min rho {self.min_density[-1]:.3g}; tail {self.tail[-1]:.2e}",
        ]
        atoms = self.atoms()
        if len(atoms):
            lines.append(f"  atoms (rho >= 10): {len(atoms)}, masses "
                         + ", ".join(f"{w:.4f}" for w in atoms.masses[:12])
                         + (" ..." if len(atoms) > 12 else ""))
        else:
            lines.append("  atoms (rho >= 10): none")
        return "\n".join(lines)


def _initial_coefficients(space, initial, degree: int, tail_tol: float, max_degree: int):
    """Canonical coefficients of the initial density and the degree actually used."""
    if isinstance(initial, str):
        if initial != "uniform":
            raise ValueError(f"initial must be 'uniform', a callable on unit vectors, or an array of "
                             f"coefficients, got {initial!r}")
        c = np.zeros(space.ncoef(degree), dtype=complex)
        c[0] = space.mass_coefficient
        return c, degree, "uniform"
    if callable(initial):
        while True:
            c = space.project(initial, degree)
            mass = space.mass(c)
            if not mass > 0:
                raise ValueError(f"initial density has mass {mass:.3g}; it must be positive")
            c = c / mass
            if space.tail(c) <= tail_tol or degree >= max_degree:
                break
            degree = min(2 * degree, max_degree)
        desc = f"callable {getattr(initial, '__name__', type(initial).__name__)} (normalised by 1/{mass:.12g})"
        return c, degree, desc
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
    return out, degree, f"coefficients ({c.size})"


class _Snapshots:
    """Growing per-snapshot records (coefficients zero-padded to the finest resolution)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, row: dict) -> None:
        self.rows.append(row)

    def arrays(self, space) -> dict:
        if not self.rows:
            out = {key: np.zeros(0) for key in ("t", "energy", "mass", "min_density", "tail", "dissipation")}
            out.update(degree=np.zeros(0, dtype=int), coeffs=np.zeros((0, 0), dtype=complex), density=None)
            return out
        n = max(r["coeffs"].size for r in self.rows)
        coeffs = np.zeros((len(self.rows), n), dtype=complex)
        for i, r in enumerate(self.rows):
            coeffs[i, : r["coeffs"].size] = r["coeffs"]
        out = {"coeffs": coeffs}
        for key in ("t", "degree", "energy", "mass", "min_density", "tail", "dissipation"):
            out[key] = np.array([r[key] for r in self.rows])
        out["density"] = np.array([r["density"] for r in self.rows])
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
        (normalised to mass 1; the resolution is raised until its tail is below ``tail_tol``);
        or canonical coefficients (mass coefficient exactly that of a probability density).
    save_every : float, optional
        Snapshot interval (time units); the step sequence lands exactly on every snapshot time.
        Default: snapshots at t = 0 and t_final only.
    progress : bool or callable
        True for a tqdm progress bar; a callable receives a dict (t, dt, degree, ...) after every
        accepted step.
    callback : callable, optional
        Receives each snapshot as a dict (including its restart state) as soon as it is taken.
    restart : dict, optional
        Restart state of a snapshot of an earlier run (``PDEResult.restart`` or an archive's): the run
        continues from it exactly as the uninterrupted run would have.
    **options
        See :class:`PDEOptions`.

    Returns
    -------
    PDEResult
    """
    if not isinstance(model, Model):
        raise TypeError(f"model must be a solvers.Model, got {type(model).__name__}")
    Disc, space = space_for(model.d)
    opts = PDEOptions.from_kwargs(options)
    if isinstance(t_final, bool) or not isinstance(t_final, (int, float)) or not math.isfinite(t_final) \
            or t_final <= 0:
        raise ValueError(f"t_final must be a finite number > 0, got {t_final!r}")
    if save_every is not None and (isinstance(save_every, bool) or not isinstance(save_every, (int, float))
                                   or not math.isfinite(save_every) or save_every <= 0):
        raise ValueError(f"save_every must be a finite number > 0 or None, got {save_every!r}")
    max_degree = opts.max_degree or space.default_max_degree
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < space.min_degree:
        raise ValueError(f"degree must be an integer >= {space.min_degree}, got {degree!r}")
    if degree > max_degree:
        raise ValueError(f"degree {degree} exceeds max_degree {max_degree}")
    return _Run(model, Disc, space, float(t_final), int(degree), initial, save_every, opts, max_degree,
                progress, callback, restart).run()


class _Run:
    """One integration: state, stepping, monitoring, snapshots."""

    def __init__(self, model, Disc, space, t_final, degree, initial, save_every, opts: PDEOptions,
                 max_degree, progress, callback, restart) -> None:
        self.model, self.Disc, self.space = model, Disc, space
        self.t_final, self.save_every, self.opts, self.max_degree = t_final, save_every, opts, max_degree
        self.callback = callback
        self.progress = progress
        self.tableau = TABLEAUS[opts.method]
        self.controller = StepController(self.tableau.error_order)
        self.snaps = _Snapshots()
        self.steps = {"t": [], "dt": [], "error": [], "accepted": []}
        self._steps_mark = 0
        self.refinements: list = []
        self.output_points = opts.output_points or space.default_output_points
        self.grid = space.output_grid(self.output_points)
        if restart is None:
            c, self.degree, self.initial_desc = _initial_coefficients(space, initial, degree, opts.tail_tol,
                                                                      max_degree)
            if self.degree != degree:
                self.refinements.append((0.0, degree, self.degree))
            self.t = 0.0
            self.nsteps = self.nrejected = 0
            self.save_index = 1
            self.dt = opts.dt0
        else:
            self.degree = int(restart["degree"])
            c = np.asarray(restart["coeffs"], dtype=complex)[: space.ncoef(self.degree)]
            self.t = float(restart["t"])
            self.nsteps, self.nrejected = int(restart["nsteps"]), int(restart["nrejected"])
            self.save_index = int(restart["save_index"])
            self.dt = float(restart["dt"])
            self.controller.restore(restart)
            self.initial_desc = str(restart.get("initial", "restart"))
            self.refinements = [tuple(r) for r in restart.get("refinements", [])]
        self.disc = Disc(model, self.degree, threads=opts.threads, effort=opts.planner)
        self.u = space.to_state(c, self.degree)
        self.restart_from = restart
        self.filter = opts._filter

    # --- helpers --------------------------------------------------------------------------------
    def _save_time(self, k: int) -> float:
        if self.save_every is None:
            return self.t_final
        return min(k * self.save_every, self.t_final)

    def _restart_state(self) -> dict:
        return {"t": self.t, "coeffs": self.space.to_canonical(self.u, self.degree), "degree": self.degree,
                "dt": float(self.dt) if self.dt is not None else float("nan"), "nsteps": self.nsteps,
                "nrejected": self.nrejected, "save_index": self.save_index, "initial": self.initial_desc,
                "refinements": [tuple(r) for r in self.refinements], **self.controller.state()}

    def _snapshot(self, diag: dict) -> None:
        canon = self.space.to_canonical(self.u, self.degree)
        row = {"t": self.t, "coeffs": canon, "degree": self.degree,
               "energy": self.disc.energy(self.u), "mass": self.space.mass(canon),
               "min_density": diag["min_density"], "tail": self.disc.tail(self.u),
               "dissipation": self.disc.dissipation(self.u),
               "density": self.space.on_output_grid(canon, self.output_points)}
        self.snaps.add(row)
        self.last_restart = self._restart_state()
        if self.callback is not None:
            # the steps attempted since the previous snapshot travel with it (for the archive)
            steps = {k: v[self._steps_mark:] for k, v in self.steps.items()}
            self.callback({**row, "restart": self.last_restart, "steps": steps})
        self._steps_mark = len(self.steps["t"])

    def _rhs_with_diag(self):
        f = self.disc.rhs(self.t, self.u, True)
        return f, dict(self.disc.last)

    def _cfl_dt(self, diag: dict) -> float:
        vmax = diag.get("vmax", 0.0)
        return math.inf if vmax <= 0 else self.opts.cfl * self.disc.spacing / vmax

    def _check_state(self, diag: dict) -> tuple[str, str] | None:
        """Stop reason and message if the state has lost resolution or positivity, else None."""
        opts = self.opts
        if not all(math.isfinite(v) for v in diag.values()):
            return "non-finite", "non-finite values in the density or the velocity"
        if "psi_ratio" in diag and diag["psi_ratio"] < opts.sa_psi_min:
            return "resolution", (f"SA: min Psi / |Psi series| = {diag['psi_ratio']:.2e} < sa_psi_min = "
                                  f"{opts.sa_psi_min:.0e}: log Psi, hence the normalised velocity, is no longer "
                                  "accurate in double precision")
        if diag["min_density"] < -opts.positivity_tol * max(diag["max_density"], 1.0):
            return "positivity", (f"min rho = {diag['min_density']:.3e} < -{opts.positivity_tol:g} max rho "
                                  f"(max rho = {diag['max_density']:.3e})")
        return None

    # --- the loop -------------------------------------------------------------------------------
    def run(self) -> PDEResult:
        opts = self.opts
        wall0 = time.perf_counter()
        stop, message = None, ""
        bar = None
        try:
            f, diag = self._rhs_with_diag()
            stepper = IFRungeKutta(self.disc.rhs, self.tableau, self.disc.lin)
            if self.restart_from is None:
                self._snapshot(diag)
                chk = self._check_state(diag)
                if chk:
                    stop, message = chk
            if self.dt is None or not math.isfinite(self.dt):
                nf = self.disc.norm(f)
                self.dt = 0.01 * self.disc.norm(self.u) / nf if nf > 0 else 0.01 * self.t_final
                self.dt = min(self.dt, self._cfl_dt(diag), self.t_final)
            if self.progress is True:
                from tqdm.auto import tqdm
                bar = tqdm(total=self.t_final, initial=self.t, unit="t", bar_format=
                           "{l_bar}{bar}| t={n:.4g}/{total:.4g} [{elapsed}<{remaining}] {postfix}")
            consecutive_bad = 0
            while stop is None:
                if self.t >= self.t_final:
                    stop, message = "t_final", "reached t_final"
                    break
                if self.nsteps >= opts.max_steps:
                    stop, message = "max_steps", f"{opts.max_steps} accepted steps"
                    break
                t_save = self._save_time(self.save_index)
                h = min(self.dt, self._cfl_dt(diag), t_save - self.t)
                if opts.dt_max:
                    h = min(h, opts.dt_max)
                lands = h >= t_save - self.t
                with np.errstate(all="ignore"):
                    u_new, f_new, err = stepper.step(self.t, self.u, h, f)
                    scale = opts.atol + opts.rtol * max(self.disc.norm(self.u), self.disc.norm(u_new))
                    errn = self.disc.norm(err) / scale
                ok, dt_new = self.controller.propose(h, errn if math.isfinite(errn) else math.inf)
                self.steps["t"].append(self.t)
                self.steps["dt"].append(h)
                self.steps["error"].append(errn)
                self.steps["accepted"].append(ok)
                if not ok:
                    self.nrejected += 1
                    consecutive_bad = consecutive_bad + 1 if not math.isfinite(errn) else 0
                    self.dt = dt_new
                    if consecutive_bad >= 20 or dt_new < 1e-14 * max(1.0, self.t):
                        stop = "non-finite"
                        message = ("step size underflow" if math.isfinite(errn)
                                   else "non-finite right-hand side on 20 successive attempts")
                    continue
                consecutive_bad = 0
                self.t = t_save if lands else self.t + h
                self.u, f = u_new, f_new
                self.dt = dt_new
                self.nsteps += 1
                diag = dict(self.disc.last)
                if self.filter is not None:
                    self.u = self.u * self.disc.filter_multipliers(self.filter)
                    f, diag = self._rhs_with_diag()
                tail = self.disc.tail(self.u)
                if tail > opts.tail_tol and self.degree < self.max_degree:
                    new = min(2 * self.degree, self.max_degree)
                    canon = self.space.to_canonical(self.u, self.degree)
                    self.refinements.append((self.t, self.degree, new))
                    self.degree = new
                    self.disc = self.disc.refined(new)
                    self.u = self.space.to_state(self.space.resize(canon, new), new)
                    stepper = IFRungeKutta(self.disc.rhs, self.tableau, self.disc.lin)
                    f, diag = self._rhs_with_diag()
                    tail = self.disc.tail(self.u)
                chk = self._check_state(diag)
                if chk is None and tail > opts.tail_max and self.degree >= self.max_degree:
                    chk = ("resolution", f"spectral tail {tail:.2e} > tail_max {opts.tail_max:.0e} at the "
                                         f"maximal resolution {self.max_degree}")
                if lands and chk is None:
                    self.save_index += 1
                    self._snapshot(diag)
                if chk is not None:
                    stop, message = chk
                    if stop != "non-finite":
                        self._snapshot(diag)
                    break
                if bar is not None:
                    bar.n = self.t
                    bar.set_postfix_str(f"dt={h:.2e} degree={self.degree}", refresh=False)
                    bar.update(0)
                elif callable(self.progress):
                    self.progress({"t": self.t, "t_final": self.t_final, "dt": h, "degree": self.degree,
                                   "nsteps": self.nsteps, "tail": tail, "min_density": diag["min_density"]})
        except KeyboardInterrupt:
            stop, message = "interrupted", "interrupted by the user (KeyboardInterrupt)"
        finally:
            if bar is not None:
                bar.close()
        return self._result(stop, message, time.perf_counter() - wall0)

    def _result(self, stop: str, message: str, wall: float) -> PDEResult:
        a = self.snaps.arrays(self.space)
        steps = {"t": np.array(self.steps["t"]), "dt": np.array(self.steps["dt"]),
                 "error": np.array(self.steps["error"]), "accepted": np.array(self.steps["accepted"], dtype=bool)}
        return PDEResult(
            model=self.model, t=a["t"], coeffs=a["coeffs"], degree=a["degree"], grid=self.grid,
            density=a["density"], energy=a["energy"], mass=a["mass"], min_density=a["min_density"],
            tail=a["tail"], dissipation=a["dissipation"], steps=steps, refinements=list(self.refinements),
            stop_reason=stop, message=message, t_stop=self.t, nsteps=self.nsteps, nrejected=self.nrejected,
            options=self.opts.to_dict(), initial=self.initial_desc, wall_time=wall,
            restart=getattr(self, "last_restart", None))
