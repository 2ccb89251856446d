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

import math
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np

from spectral.filters import make_filter
from . import lagrangian
from . import validators as check
from ._blas import blas_threads
from ._memory import refuse_if_too_big
from .atoms import DEFAULT_PROMINENCE
from .interaction import InteractionSums
from .interrupts import at_once, graceful_stop
from .model import Model, density_values
from .stepping import TABLEAUS, Integration, Progress, StepController

__all__ = ["solve_pde", "prepare_pde", "PDERun", "PDEResult", "PDEOptions", "STOP_REASONS", "space_for"]

STOP_REASONS = ("t_final", "stationary", "resolution", "positivity", "non-finite", "max_steps", "interrupted")
CONTINUATIONS = ("lagrangian", "none")
METHODS = ("DP54", "BS32")
#: smallest tail_tol, tail_max, positivity_tol accepted (see PDEOptions)
_ROUND_OFF_FLOOR = 1e-14


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
        FFTW planner effort: of the circle's FFTs, and on the sphere SHTns's initialisation
        ("FFTW_ESTIMATE", the default, is deterministic: restarts then reproduce uninterrupted runs
        exactly; any other effort times FFTW's plans, and on the sphere SHTns's algorithm variants, so
        the plans and the round-off can differ between runs and machines).
    continuation : {"lagrangian", "none"} or None
        What happens when the grid can no longer follow the density (``solvers.lagrangian``). Default
        (None): "lagrangian" when noise = 0, "none" with noise (which has no characteristics to follow).
        "lagrangian": when the run would have to refine past ``handoff_degree`` or would stop for
        resolution or positivity, the last resolved state (tail <= tail_tol) becomes a node measure that
        moves along the characteristics to t_final or until "stationary". "none": the Eulerian run alone,
        which stops as described above.
    handoff_degree : int or None
        Largest Eulerian resolution with the continuation (S^1 default 1024 modes, S^2 default L = 127;
        refinements are clipped to it, as to ``max_degree``).
    handoff_at : float or None
        Hand off at this time (a resolved state), whatever the resolution: for consistency checks.
    nodes : int or None
        Nodes of the continuation (default ``space.default_nodes``: 4096 on S^1, 8192 on S^2, where the
        count is rounded to a Gauss grid 2 nlat^2).
    node_rtol, node_atol : float
        Step error tolerances of the nodes (radians): max_j |err_j| <= node_atol + node_rtol.
    merge_tol : float
        Nodes closer than this (radians) become one node.
    drift_tol : float
        Stop with "stationary" when max |v| over the nodes is below this (radians per unit time).
    atom_radius : float or None
        Grouping radius of the atoms of a node measure (default a tenth of the initial node spacing).
    error_estimate : bool
        After the run, repeat the continuation from the handoff state with twice the nodes to the same
        time: the atoms then carry error estimates (``PDEResult.atoms``).
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
    continuation: str | None = None
    handoff_degree: int | None = None
    handoff_at: float | None = None
    nodes: int | None = None
    node_rtol: float = 1e-6
    node_atol: float = 1e-8
    merge_tol: float = 1e-6
    drift_tol: float = 1e-6
    atom_radius: float | None = None
    error_estimate: bool = True

    def __post_init__(self) -> None:
        for name in ("rtol", "atol", "cfl", "tail_tol", "tail_max", "positivity_tol", "sa_psi_min", "node_rtol",
                     "node_atol", "merge_tol", "drift_tol"):
            check.number(f"option {name}", getattr(self, name), gt=0)
        for name in ("dt0", "dt_max", "handoff_at", "atom_radius"):
            check.number(f"option {name}", getattr(self, name), gt=0, allow_none=True)
        if self.continuation is not None:
            check.choice("option continuation", self.continuation, CONTINUATIONS)
        check.flag("option error_estimate", self.error_estimate)
        check.choice("option method", self.method, METHODS)
        for name in ("max_steps", "threads"):
            check.integer(f"option {name}", getattr(self, name), ge=1)
        for name in ("max_degree", "output_points", "handoff_degree", "nodes"):
            check.integer(f"option {name}", getattr(self, name), ge=2, allow_none=True)
        if self.tail_max < self.tail_tol:
            raise ValueError(f"option tail_max ({self.tail_max}) must be >= tail_tol ({self.tail_tol})")
        for name in ("tail_tol", "tail_max", "positivity_tol"):
            # the spectral tail and min rho / max rho of a resolved density sit at double-precision
            # round-off, about 1e-15: a tolerance below it fails at the first check
            if getattr(self, name) < _ROUND_OFF_FLOOR:
                raise ValueError(f"option {name} = {getattr(self, name)!r} is below the round-off floor "
                                 f"{_ROUND_OFF_FLOOR:g} of what it bounds (~1e-15 in double precision): the run would "
                                 "stop at its first check; use a larger value")
        self._filter = make_filter(self.filter)
        if self._filter is not None:
            self.filter = self._filter.describe()

    @classmethod
    def from_kwargs(cls, options: dict, arguments: tuple = ()) -> "PDEOptions":
        """The options ``options``; TypeError for an unknown one (``arguments``: the named parameters of
        solve_pde, listed in the message)."""
        check.known_options("solve_pde", options, [f.name for f in fields(cls)], arguments)
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
    grids : list of (degree, *grid sizes): the computational grid of every degree used ((M,) on S^1,
        (nlat, nphi) on S^2), fixed by the degree (``space.computational_grid``)
    stop_reason : one of STOP_REASONS; message : human-readable detail; t_stop : time reached
    restart : the state a run continues from (``solve_pde(..., restart=...)``, bit for bit): that of the
        last snapshot, or, for a run that Ctrl-C stopped after its current step (:mod:`solvers.interrupts`),
        that step's (``restart["t"] == t_stop`` past ``restart["last_snapshot_t"]``)
    nodes : per snapshot, None (an Eulerian snapshot) or the node measure of the continuation: a dict of
        "x" (N, d), "w" (N,), "count" (N,) (initial nodes held by each node) and "max_drift"
    lagrangian : None (no handoff), or a dict: "handoff" (t, reason, message, degree, nodes, clipped_mass,
        description, smoothing, atom_radius), "merges" (M, 3: t, nodes before, nodes after),
        "node_nsteps", "node_nrejected", "check" (the error-estimate run at twice the nodes: "t",
        "initial_nodes", "x", "w", "count", "nsteps", "stop_reason", "wall_time"; None if not run),
        "check_interrupted" (a Ctrl-C cut that run: the solution reached its end and its atoms hold,
        without error bars; a resume runs the rerun again)

    Past a handoff (``lagrangian`` not None) the snapshots are those of the node measure: ``coeffs`` its
    exact coefficients up to the handoff degree, ``density`` their heat-smoothed series on the output grid
    (scale ``lagrangian["handoff"]["smoothing"]``: ``space.smoothing_scale`` of the handoff degree), with
    ``min_density`` its minimum, ``mass`` the sum of the weights, ``tail`` that of the coefficients.
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
    grids: list = field(default_factory=list)
    nodes: list = field(default_factory=list, repr=False)
    lagrangian: dict | None = field(default=None, repr=False)

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
        """The series of snapshot i's coefficients at unit vectors x (n, d) (direct summation): rho there.

        Past the handoff the snapshot is a node measure and these are its exact coefficients up to the
        handoff degree: the density where the measure is resolved at that degree (a smooth state: to
        1e-8 of the Eulerian run, tests), an oscillating series, negative in places, where it has
        concentrated (near atoms); ``density`` holds its heat-smoothed series on the output grid."""
        return self.space.evaluate(self.coefficients(i), np.asarray(x, dtype=float))

    @property
    def t_handoff(self) -> float | None:
        """Time of the handoff to the Lagrangian continuation (None without one)."""
        return None if self.lagrangian is None else float(self.lagrangian["handoff"]["t"])

    def node_measure(self, i: int = -1) -> "lagrangian.Nodes | None":
        """The node measure of snapshot i (None for an Eulerian snapshot)."""
        n = self.nodes[self._index(i)] if self.nodes else None
        return None if n is None else lagrangian.Nodes(n["x"], n["w"], n["count"])

    def atoms(self, i: int = -1, threshold: float = 10.0, method: str = "basin", min_mass: float = 0.0,
              smoothing: float | str | None = "auto", prominence: float = DEFAULT_PROMINENCE):
        """Positions (k, d) and masses (k,) of the concentrated pieces of rho at snapshot i.

        Past the handoff (a snapshot of the node measure) the atoms are the node groups of
        ``solvers.lagrangian.node_atoms`` (a :class:`~solvers.lagrangian.NodeAtoms`: also ``counts``,
        ``diffuse``, and at the last snapshot, after the error-estimate run, ``mass_errors``,
        ``position_errors``, ``diffuse_error``); ``threshold``, ``method``, ``smoothing`` and
        ``prominence`` do not apply there, ``min_mass`` does (lighter groups count as diffuse).
        Before it:

        ``method="basin"`` (default): every peak of rho with rho >= threshold (the uniform density is
        1) is an atom carrying the mass of its steepest-ascent basin, i.e. of everything that slopes
        up into it; peaks less prominent than ``prominence`` x their height above the saddle to a
        higher peak are merged into it (spurious maxima of the grid along a ridge; ``solvers.atoms``);
        mass frozen on a plateau beyond a dip is not counted.
        ``method="level"``: the connected components of {rho >= threshold}, with the mass above the
        level set only. Positions are normalised rho-weighted mean directions.
        ``smoothing``: peaks, basins and levels are those of rho smoothed by the heat kernel at this
        angular scale ("auto": for the basin method one (S^2) or two (S^1) wavelengths of the highest
        resolved mode — Gibbs oscillations beside a jump are not atoms —, for the level method none;
        None: rho itself); masses are those of rho. The basin method tests the threshold on rho itself
        in each peak's core (the top 10% of the smoothed peak): a narrow resolved peak the smoothing
        lowers below the threshold is still an atom; beside an unresolved jump the test sees rho's Gibbs
        overshoot (up to ~9% of the jump). Peaks closer than the smoothing scale allows merge into one
        atom (``solvers.atoms``); ``smoothing=None`` resolves them when rho is resolved. Mass in no
        atom's basin is reported by the summary.
        """
        i = self._index(i)
        nodes = self.node_measure(i)
        if nodes is not None:
            radius = float(self.lagrangian["handoff"]["atom_radius"])
            atoms = lagrangian.node_atoms(nodes, radius)
            check = self.lagrangian.get("check")
            if i == len(self.t) - 1 and check is not None and float(check["t"]) == float(self.t[i]):
                fine = lagrangian.Nodes(np.asarray(check["x"]), np.asarray(check["w"]), np.asarray(check["count"]))
                n2 = int(check["initial_nodes"])
                ratio = n2 / float(self.lagrangian["handoff"]["nodes"])
                # the grouping radius scales with the node spacing; the order of the node quadrature of a
                # basin is N^-1/(d-1) (lagrangian module docstring)
                atoms = lagrangian.estimate_atoms(
                    atoms, lagrangian.node_atoms(fine, radius / ratio ** (1.0 / (self.model.d - 1))), n2,
                    floor=self.space.basin_floor_nodes * float(self.lagrangian["handoff"].get("max_weight", 0.0)),
                    ratio=ratio, order=1.0 / (self.model.d - 1))
            return atoms.heavy(min_mass) if min_mass > 0 else atoms
        return self.space.atoms(self.coefficients(i), threshold=threshold, method=method, min_mass=min_mass,
                                smoothing=smoothing, prominence=prominence)

    def step_counts(self) -> str:
        """The steps taken: the spectral solver's ``nsteps`` (``nrejected``), and past a handoff the node
        measure's (the error-estimate rerun's are not counted)."""
        text = f"{self.nsteps} spectral steps ({self.nrejected} rejected)"
        if self.lagrangian is not None:
            text += (f" + {self.lagrangian.get('node_nsteps', 0)} node steps "
                     f"({self.lagrangian.get('node_nrejected', 0)} rejected)")
        return text

    def summary(self) -> str:
        m = self.model
        lines = [
            f"PDE on S^{m.d - 1}: beta={m.beta:g} flow={m.flow} attention={m.attention} "
            f"strength={m.strength:g} noise={m.noise:g} perceptron={m.perceptron!r}",
            f"  stop: {self.stop_reason} at t={self.t_stop:.6g} ({self.message})",
            f"  {self.step_counts()}, {len(self.t)} snapshots, "
            f"resolution {int(self.degree[0])} -> {int(self.degree[-1])}, wall {self.wall_time:.2f} s",
            f"  energy {self.energy[0]:.10g} -> {self.energy[-1]:.10g}; |mass - 1| <= "
            f"{np.max(np.abs(self.mass - 1)):.2e}; min rho {self.min_density[-1]:.3g}; tail {self.tail[-1]:.2e}",
        ]
        if self.lagrangian is not None:
            h = self.lagrangian["handoff"]
            merges = self.lagrangian["merges"]
            lines.append(f"  handoff at t={h['t']:.6g} ({h['reason']}: {h['message']}), degree {h['degree']}, "
                         f"{h['nodes']} nodes, clipped mass {h['clipped_mass']:.2e}; {len(merges)} merge steps, "
                         f"{int(merges[-1, 2]) if len(merges) else h['nodes']} nodes at the end")
        atoms = self.atoms()
        if isinstance(atoms, lagrangian.NodeAtoms):
            lines.append(f"  atoms (node groups within {atoms.radius:.2g} rad): {len(atoms)}; diffuse mass "
                         f"{atoms.diffuse:.4f}" + (f" ± {atoms.diffuse_error:.1e}" if atoms.diffuse_error is not None
                                                   else ""))
            note = lagrangian.not_stationary_note(self.stop_reason, float(self.t[-1]), len(atoms))
            if note:
                lines.append(f"  {note}")
            loose = lagrangian.unresolved(atoms.masses, atoms.mass_errors)
            for k in range(min(len(atoms), 12)):
                err = "" if atoms.mass_errors is None else f" ± {atoms.mass_errors[k]:.1e}"
                lines.append(f"    mass {atoms.masses[k]:.4f}{err} at {np.round(atoms.positions[k], 4).tolist()}"
                             + (lagrangian.UNRESOLVED if loose[k] else ""))
        elif len(atoms):
            lines.append(f"  atoms (rho >= 10): {len(atoms)}, masses "
                         + ", ".join(f"{w:.4f}" for w in atoms.masses[:12])
                         + (" ..." if len(atoms) > 12 else "")
                         + f"; outside their basins {max(0.0, 1.0 - float(np.sum(atoms.masses))):.4f}")
        else:
            lines.append("  atoms (rho >= 10): none")
        return "\n".join(lines)


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


def _check_restart_settings(saved: dict | None, now: dict) -> None:
    """ValueError listing what differs between a restart state's settings and this run's."""
    if saved is None:
        return
    norm = lambda v: tuple(v) if isinstance(v, list) else v
    # a setting the saved state does not name was not recorded when it was written (an older archive's:
    # "option threads" until 2026-11-27); it ran with that setting's behaviour then, which is not checked
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
            miss = float(np.linalg.norm(space.evaluate(c, probe) - want / mass) / np.linalg.norm(want / mass))
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
            out = {key: np.zeros(0) for key in ("t", "energy", "mass", "min_density", "tail", "dissipation")}
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
    Disc, space = space_for(model.d)
    opts = PDEOptions.from_kwargs(options, check.named_parameters(solve_pde))
    check.number("t_final", t_final, gt=0)
    check.number("save_every", save_every, gt=0, allow_none=True)
    max_degree = opts.max_degree or space.default_max_degree
    check.integer("degree", degree, ge=space.min_degree)
    if degree > max_degree:
        raise ValueError(f"degree {degree} exceeds max_degree {max_degree}")
    if opts.continuation is None:
        opts.continuation = "lagrangian" if model.noise == 0 else "none"
    elif opts.continuation == "lagrangian" and model.noise > 0:
        raise ValueError("continuation='lagrangian' carries the density along the characteristics of the flow, "
                         f"which noise (nu = {model.noise:g}) does not have: use continuation='none'")
    if opts.continuation == "lagrangian":
        opts.handoff_degree = opts.handoff_degree or space.default_handoff_degree
        if degree > opts.handoff_degree:
            raise ValueError(f"degree {degree} exceeds handoff_degree {opts.handoff_degree} (the continuation's "
                             "largest Eulerian resolution): raise handoff_degree or lower degree")
        if opts.handoff_at is not None and opts.handoff_at >= t_final:
            raise ValueError(f"handoff_at = {opts.handoff_at!r} is not before t_final = {t_final!r}")
    elif any(getattr(opts, k) is not None for k in ("handoff_degree", "handoff_at", "nodes", "atom_radius")):
        raise ValueError("handoff_degree, handoff_at, nodes and atom_radius are options of the Lagrangian "
                         "continuation, which continuation='none' turns off")
    # one BLAS thread, as in the run: the initial checks' norms are BLAS dots, split by thread at K >= 10^4
    with blas_threads(1):
        return PDERun(model, Disc, space, float(t_final), int(degree), initial, save_every, opts, max_degree,
                      restart)


class PDERun(Integration):
    """One prepared integration (:func:`prepare_pde`); :meth:`run` integrates it once.

    Phases: the Eulerian (spectral) stepping with resolution control; with ``continuation="lagrangian"``
    the handoff to a node measure and its Lagrangian stepping (``solvers.lagrangian``); then, by
    default, the error-estimate run of the continuation at twice the nodes.
    """

    def __init__(self, model, Disc, space, t_final, degree, initial, save_every, opts: PDEOptions,
                 max_degree, restart) -> None:
        self.model, self.Disc, self.space = model, Disc, space
        self.t_final, self.save_every, self.opts, self.max_degree = t_final, save_every, opts, max_degree
        self.continues = opts.continuation == "lagrangian"
        # the largest Eulerian resolution: refinements are clipped to it
        self.cap = min(max_degree, opts.handoff_degree) if self.continues else max_degree
        self.callback = self.progress = None
        self._settings_once = None
        self.tableau = TABLEAUS[opts.method]
        self.controller = StepController(self.tableau.error_order)
        self.snaps = _Snapshots()
        self.steps = {"t": [], "dt": [], "error": [], "accepted": []}
        self._steps_mark = 0
        self._norms = ((None, 0.0), (None, 0.0))       # (state, its norm), see _norm
        self._scaled = None                            # see rhs_scaled
        self.refinements: list = []
        self.output_points = opts.output_points or space.default_output_points
        self.t = 0.0 if restart is None else float(restart["t"])
        self._refuse_too_big()
        self.grid = space.output_grid(self.output_points)
        self.lag = None              # the Lagrangian phase, after the handoff
        self.handoff = None          # what the handoff was (dict), after it
        self.check = None            # the error-estimate run's final node measure
        self.checking = False        # inside the error-estimate run (an interruption there says so)
        self._ran = False
        restart = dict(restart) if restart is not None else None
        # a restart state is that of the last snapshot taken, or of a step after it where an interruption
        # stopped the run (archives before the key: at a snapshot)
        self._last_snapshot_t = None if restart is None else float(restart.get("last_snapshot_t", restart["t"]))
        if restart is None:
            c, self.degree, self.initial_desc, self._miss = _initial_coefficients(space, initial, degree,
                                                                                  opts.tail_tol, self.cap)
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
            self._miss = 0.0
            _check_restart_settings(restart.get("settings"), self._settings())
            # at t_final a continuation may still owe its error-estimate run
            owes = restart.get("phase") == "lagrangian" and opts.error_estimate and self.t == t_final
            if self.t >= t_final and not owes:
                raise ValueError(f"the restart state is at t = {self.t:.6g} >= t_final = {t_final:g}: nothing to run")
        self.restart_from = restart
        self.filter = opts._filter
        # the computational grid of every degree used (fixed by the degree: recorded so that a resume on
        # a machine or version whose grid would differ can be refused)
        self.grids = {int(row[0]): tuple(int(v) for v in row[1:]) for row in (restart or {}).get("grids", [])}
        if restart is not None and restart.get("phase") == "lagrangian":
            self._restore_lagrangian(restart)
            return
        self.disc = Disc(model, self.degree, threads=opts.threads, effort=opts.planner)
        self.grids[self.degree] = tuple(self.disc.grid_shape)
        self.u = space.to_state(c, self.degree)
        with np.errstate(all="ignore"):             # a state it cannot use is reported just below
            self._start = self._rhs_with_diag()
        # the last resolved state (tail <= tail_tol, positivity and SA checks passed): the handoff's source
        self.good = None
        self._refuse_infeasible(self._start[1])
        if restart is None:
            self._refuse_unusable_initial_state(self._start[1])
            self._remember_good(self._start[1])
        elif "good_coeffs" in restart:
            self.good = {"t": float(restart["good_t"]), "degree": int(restart["good_degree"]),
                         "save_index": int(restart["good_save_index"]),
                         "coeffs": np.asarray(restart["good_coeffs"], dtype=complex)}

    def _refuse_too_big(self) -> None:
        """Refuse (ValueError) a run whose snapshots, output grid and transforms would not fit in memory
        (checked before any of them is built)."""
        opts, space = self.opts, self.space
        left = self.t_final - self.t
        n_snap = 2 + (math.ceil(left / self.save_every) if self.save_every is not None else 0)
        grid_points = space.output_grid_size(self.output_points)
        per_snap = 8.0 * grid_points + 16.0 * space.ncoef(self.cap)
        if self.continues:
            per_snap += 8.0 * (self.model.d + 2) * (opts.nodes or space.default_nodes)
        # the snapshots are kept as rows, then stacked into the result's arrays (measured peak: 2.3 x their
        # size, 1002 snapshots of 2^17 points on S^1)
        parts = {f"{n_snap} snapshots kept and stacked": 2.5 * n_snap * per_snap,
                 "output grid": 8.0 * self.model.d * grid_points}
        parts[f"transforms at degree {self.cap}"] = space.transform_bytes(self.cap)
        refuse_if_too_big(parts, "raise save_every, lower output_points or max_degree")

    def _refuse_infeasible(self, diag: dict) -> None:
        """Refuse (ValueError) a run that cannot reach t_final within max_steps."""
        opts = self.opts
        left = self.t_final - self.t
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
                                 f"{opts.cfl * self.disc.spacing / vmax:.3g}: t_final = {self.t_final:g} needs more than "
                                 f"max_steps = {opts.max_steps} steps (check the model's perceptron scale and "
                                 "strength, and the option cfl)")

    def _refuse_unusable_initial_state(self, diag: dict) -> None:
        """Raise ValueError when the run would stop at its first check (docstring of prepare_pde). An
        unresolved density is named as such first: its Gibbs undershoot would otherwise pass for a
        negative density."""
        opts = self.opts
        # what the kept coefficients miss of a callable counts as tail (see _initial_coefficients)
        tail = max(self.disc.tail(self.u), self._miss)
        if self.degree >= self.cap and self.continues and tail > opts.tail_tol:
            raise ValueError(f"initial data refused before any step: the initial density is not resolved at the "
                             f"handoff degree {self.cap} (spectral tail or miss at check points "
                             f"{_above(tail, opts.tail_tol)} > tail_tol {_sci(opts.tail_tol)}), so the continuation has no resolved state to start "
                             "from; raise handoff_degree (and max_degree), or start from a smoother density")
        if self.degree >= self.cap and tail > opts.tail_max:
            raise ValueError(f"initial data refused before any step: the initial density is not resolved at "
                             f"max_degree = {self.max_degree} (spectral tail or miss at check points "
                             f"{_above(tail, opts.tail_max)} > tail_max {_sci(opts.tail_max)}; the run would stop at once with 'resolution'); raise "
                             "max_degree, or start from a smoother density")
        chk = self._check_state(diag)
        if chk is not None:
            reason, message = chk
            advice = {"positivity": "give the coefficients of a density >= 0 (or raise positivity_tol)",
                      "resolution": "lower beta, or start from smoother data",
                      "non-finite": "give finite data"}[reason]
            raise ValueError(f"initial data refused before any step: {message} on the computational grid of "
                             f"degree {self.degree} (the run would stop at once with '{reason}'); {advice}")

    # --- helpers --------------------------------------------------------------------------------
    def _save_time(self, k: int) -> float:
        if self.save_every is None:
            return self.t_final
        return min(k * self.save_every, self.t_final)

    def _common_state(self) -> dict:
        # last_snapshot_t < t: a state kept where an interruption stopped the run, between snapshots
        # step_log: the attempted steps this run has logged up to this state (the archive's rows of them)
        return {"t": self.t, "last_snapshot_t": self._last_snapshot_t, "step_log": len(self.steps["t"]),
                "nsteps": self.nsteps, "nrejected": self.nrejected, "save_index": self.save_index,
                "initial": self.initial_desc, "refinements": [tuple(r) for r in self.refinements],
                "grids": self._grid_rows(), "settings": self._settings()}

    def _settings(self) -> dict:
        """What a restart must share with the run it continues (else it would not be that run); t_final
        and the step budget may change. Fixed for the run: computed once (every restart state holds it;
        14 us a snapshot otherwise, measured)."""
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
        # threads count: on S^2 SHTns's transforms round differently with 1 and 2 threads (2.5e-16, measured),
        # so a restart with other threads would not continue the run bit for bit
        opts = {k: v for k, v in self.opts.to_dict().items() if k != "max_steps"}
        return {"d": m.d, "beta": m.beta, "flow": m.flow, "attention": m.attention, "strength": m.strength,
                "noise": m.noise, "perceptron": digest, "save_every": self.save_every,
                **{f"option {k}": v for k, v in opts.items()}}

    def _restart_state(self) -> dict:
        if self.lag is not None:
            return self._lagrangian_state()
        out = {**self._common_state(), "coeffs": self.space.to_canonical(self.u, self.degree),
               "degree": self.degree, "dt": float(self.dt) if self.dt is not None else float("nan"),
               **self.controller.state()}
        if self.good is not None:
            g = self.good
            out.update(good_t=g["t"], good_degree=g["degree"], good_save_index=g["save_index"],
                       good_coeffs=g["coeffs"])
        return out

    def _grid_rows(self) -> list[tuple[int, ...]]:
        return [(deg, *shape) for deg, shape in sorted(self.grids.items())]

    def _snapshot(self, diag: dict) -> None:
        canon = self.space.to_canonical(self.u, self.degree)
        row = {"t": self.t, "coeffs": canon, "degree": self.degree,
               "energy": self.disc.energy(self.u), "mass": self.space.mass(canon),
               "min_density": diag["min_density"], "tail": self.disc.tail(self.u),
               "dissipation": self.disc.dissipation(self.u),
               "density": self.space.on_output_grid(canon, self.output_points)}
        self._record(row, None)

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
            self.good = {"t": self.t, "degree": self.degree, "save_index": self.save_index,
                         "coeffs": self.space.to_canonical(self.u, self.degree)}

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
        stop, message = None, ""
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
            # a stop the loop cannot keep: a signal in the rerun, a second signal, a KeyboardInterrupt of
            # a caller's own
            stop, message = "interrupted", at_once(self.stop_request, rerun=self.checking)
            if self.checking:
                message += (f" during the error-estimate rerun (twice the nodes from the handoff at t = "
                            f"{self.good['t']:.6g}); the solution had reached t = {self.t:.6g}, and a resume "
                            "runs the error estimate again")
            else:
                if self.lag is not None:
                    self.t = self.lag.t          # the node phase's loop had not handed its time back
                # what a resume starts from: the last snapshot (``restart``), the state this run resumed from
                # if none came since, or an archive's later checkpoint
                last = self._last_snapshot_t
                start = None if self.restart_from is None else float(self.restart_from["t"])
                if last is not None and max(last, start or last) < self.t:
                    where = (f"the state this run resumed from, at t = {start:.6g}" if start is not None
                             and start > last else f"the last snapshot, at t = {last:.6g}"
                             + ("" if self.save_every else " (no save_every: snapshots at t = 0 and t_final only)"))
                    message += (f" at t = {self.t:.6g}; a resume continues from {where} (or from the archive's "
                                "checkpoint, if later)")
        finally:
            self.progress.close()
        return self._result(stop, message, time.perf_counter() - wall0)

    # --- the Eulerian phase: the protocol of Integration --------------------------------------------
    @property
    def state(self) -> np.ndarray:
        return self.u

    @property
    def lin(self) -> np.ndarray | None:
        return self.disc.lin

    @property
    def max_steps(self) -> int:
        return self.opts.max_steps

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

    def before_step(self) -> tuple[str, object] | None:
        if self._forced is not None and self.t >= self._forced:
            return "handoff", ("handoff_at", f"handoff forced at t = {self._forced:g} (option handoff_at)")
        return None

    def accept(self, u_new: np.ndarray, f_new: np.ndarray | None, h: float, lands: bool) -> tuple[str, object] | None:
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

    def _eulerian(self) -> tuple[str, object]:
        """The spectral stepping; returns (stop reason, message), or ("handoff", (reason, message))."""
        (self.f, self.diag), self._start = self._start, None
        self.tail = self.disc.tail(self.u)
        if self.restart_from is None:
            self._snapshot(self.diag)
        if self.dt is None or not math.isfinite(self.dt):
            nf = self.disc.norm(self.f)
            self.dt = 0.01 * self.disc.norm(self.u) / nf if nf > 0 else 0.01 * self.t_final
            self.dt = min(self.dt, self._cfl_dt(self.diag), self.t_final)
        self._forced = self.opts.handoff_at if self.continues else None
        return self.integrate(self.progress)

    def resolved_options(self) -> dict:
        """The options as this run uses them: each one left to a default of the space (None) replaced by its
        value, so that a record of them repeats the run under other defaults. dt0 (from the initial state)
        and atom_radius (from the handoff's nodes) stay None unless given: they are computed by the run."""
        out = self.opts.to_dict()
        out.update(max_degree=self.max_degree, output_points=self.output_points)
        if self.continues:
            out["nodes"] = self.opts.nodes or self.space.default_nodes
        return out

    # --- the continuation -------------------------------------------------------------------------
    def _continuation_nodes(self, factor: int = 1):
        g = self.good
        n = (self.opts.nodes or self.space.default_nodes) * factor
        return lagrangian.handoff_nodes(self.space, g["coeffs"], g["degree"], n)

    def _new_phase(self, nodes, t: float) -> "lagrangian.LagrangianPhase":
        o = self.opts
        sums = None
        if self.model.attention != "none":
            sums = InteractionSums(self.model.d, self.model.beta, "auto")
        return lagrangian.LagrangianPhase(self.model, self.space, nodes, t, self.good["degree"], o.node_rtol,
                                          o.node_atol, o.merge_tol, o.drift_tol, sums=sums)

    def _hand_off(self, reason: str, message: str) -> tuple[str | None, str]:
        """Build the node measure from the last resolved state and make it the state of the run."""
        if self.good is None:
            return "resolution", f"{message}; no resolved state (tail <= tail_tol) to hand off from"
        g = self.good
        nodes, clipped, desc = self._continuation_nodes()
        self.handoff = {"t": g["t"], "reason": reason, "message": message, "degree": g["degree"],
                        "nodes": len(nodes), "clipped_mass": clipped, "description": desc,
                        "max_weight": float(nodes.w.max()),
                        "smoothing": float(self.space.smoothing_scale(g["degree"])),
                        "atom_radius": self._atom_radius(len(nodes))}
        self.t, self.save_index, self.degree = g["t"], g["save_index"], g["degree"]
        self.lag = self._new_phase(nodes, g["t"])
        self.disc = self.u = None
        self._scaled = None             # it holds the discretisation's rhs_flux: let the transforms go
        return None, ""

    def _atom_radius(self, n: int) -> float:
        return self.opts.atom_radius or 0.1 * self.space.node_spacing(n)

    def _lagrangian(self) -> tuple[str, str]:
        lag = self.lag
        smoothing = self.handoff["smoothing"]

        def save() -> None:
            self.t = lag.t
            self.save_index += 1
            self._snapshot_nodes(smoothing)

        # a resumed run re-derives its stop from the state (t >= t_final, stationary, max_steps): a run
        # killed after its last snapshot goes straight on to the error-estimate run
        lag.stop_request = self.stop_request
        lag.checkpoint, lag.checkpoint_every = self.checkpoint, self.checkpoint_every
        stop, message = lag.run(self.t_final, save_time=lambda: self._save_time(self.save_index),
                                on_save=save, progress=self.progress, max_steps=self.opts.max_steps)
        self.t = lag.t
        if stop != "interrupted" and self._last_snapshot_t != self.t:
            self._snapshot_nodes(smoothing)
        return stop, message

    def _snapshot_nodes(self, smoothing: float) -> None:
        row = self.lag.row(self.output_points, smoothing)
        nodes = row.pop("nodes")
        self._record(row, nodes)

    def _lagrangian_state(self) -> dict:
        out = {**self._common_state(), "phase": "lagrangian", "degree": self.lag.degree,
               "coeffs": self.snaps.rows[-1]["coeffs"] if self.snaps.rows else self.good["coeffs"],
               "handoff": {k: v for k, v in self.handoff.items()}, "handoff_coeffs": self.good["coeffs"],
               "good_t": self.good["t"], "good_save_index": self.good["save_index"],
               "dt": float("nan"), "facold": self.controller.facold, **self.lag.state_dict()}
        return out

    def _restore_lagrangian(self, restart: dict) -> None:
        self.handoff = dict(restart["handoff"])
        self.good = {"t": float(restart["good_t"]), "degree": int(self.handoff["degree"]),
                     "save_index": int(restart["good_save_index"]),
                     "coeffs": np.asarray(restart["handoff_coeffs"], dtype=complex)}
        self.disc = self.u = None
        self._scaled = None             # it holds the discretisation's rhs_flux: let the transforms go
        self.lag = self._new_phase(None, self.t)
        self.lag.restore(restart)

    def _error_estimate_run(self) -> None:
        """The continuation again from the handoff state with twice the nodes, to the same time."""
        t_end = self.lag.t
        nodes, _, _ = self._continuation_nodes(factor=2)
        phase = self._new_phase(nodes, self.good["t"])
        wall0 = time.perf_counter()
        self.t = self.good["t"]
        # t_end: the rerun's end, which is before t_final when the run stopped stationary
        report = lambda t, info: self.progress(t, {"check": "2x nodes", "t_end": t_end, **info})  # noqa: E731
        self.checking = True
        phase.stop_request = self.stop_request
        try:
            stop, message = phase.run(t_end, progress=report, stationary=False, max_steps=self.opts.max_steps)
            if stop == "interrupted":
                raise KeyboardInterrupt      # reported as an interruption of the rerun (see run)
        finally:
            self.t = t_end                   # the run's own state is at t_end, interrupted or not
        self.checking = False
        self.check = {"t": phase.t, "initial_nodes": len(nodes), "x": phase.nodes.x, "w": phase.nodes.w,
                      "count": phase.nodes.count, "nsteps": phase.nsteps, "stop_reason": stop,
                      "wall_time": time.perf_counter() - wall0}

    def _result(self, stop: str, message: str, wall: float) -> PDEResult:
        a = self.snaps.arrays(self.space)
        steps = {"t": np.array(self.steps["t"]), "dt": np.array(self.steps["dt"]),
                 "error": np.array(self.steps["error"]), "accepted": np.array(self.steps["accepted"], dtype=bool)}
        lag = None
        if self.lag is not None:
            lag = {"handoff": dict(self.handoff), "merges": np.array(self.lag.merges, dtype=float).reshape(-1, 3),
                   "node_nsteps": self.lag.nsteps, "node_nrejected": self.lag.nrejected, "check": self.check,
                   # the solution reached its end and only the error-estimate rerun was cut: its atoms hold,
                   # without error bars
                   "check_interrupted": bool(self.checking)}
        return PDEResult(
            model=self.model, t=a["t"], coeffs=a["coeffs"], degree=a["degree"], grid=self.grid,
            density=a["density"], energy=a["energy"], mass=a["mass"], min_density=a["min_density"],
            tail=a["tail"], dissipation=a["dissipation"], steps=steps, refinements=list(self.refinements),
            grids=self._grid_rows(), stop_reason=stop, message=message, t_stop=self.t, nsteps=self.nsteps,
            nrejected=self.nrejected, options=self.opts.to_dict(), initial=self.initial_desc, wall_time=wall,
            restart=getattr(self, "last_restart", None), nodes=a["nodes"], lagrangian=lag)
