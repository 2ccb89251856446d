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
from .eulerian import EulerianPhase, grid_rows
from .restart import GoodState, LagrangianState, pde_state_from_dict
from .stepping import Progress
from .terminal import Stage, TerminalState

__all__ = ["solve_pde", "prepare_pde", "PDERun", "PDEResult", "PDEOptions", "STOP_REASONS", "space_for",
           "snapshot_time"]

STOP_REASONS = ("t_final", "stationary", "resolution", "positivity", "non-finite", "max_steps", "interrupted")
CONTINUATIONS = ("lagrangian", "none")
METHODS = ("DP54", "BS32")
#: smallest tail_tol, tail_max, positivity_tol accepted (see PDEOptions)
_ROUND_OFF_FLOOR = 1e-14


#: the nodes' default step tolerance, as a fraction of their mean spacing (PDEOptions.node_rtol)
NODE_TOLERANCE = 2.5e-3

#: with t_final = inf, snapshots are save_every apart for the first hundred, then twice as far apart for
#: every next hundred: a run of unknown length keeps a bounded number of them per decade of time
SNAPSHOTS_PER_DOUBLING = 100


def snapshot_time(k: int, save_every: float | None, t_final: float) -> float:
    """The time of snapshot k >= 1 (snapshot 0 is the start): k save_every up to t_final; with t_final = inf,
    the schedule of ``SNAPSHOTS_PER_DOUBLING``; without save_every, t_final."""
    if save_every is None:
        return t_final
    if math.isfinite(t_final):
        return min(k * save_every, t_final)
    b, j = divmod(k - 1, SNAPSHOTS_PER_DOUBLING)
    n = SNAPSHOTS_PER_DOUBLING
    return save_every * (n * (2.0 ** b - 1.0) + 2.0 ** b * (j + 1))


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
        Largest Eulerian resolution with the continuation (default the larger of ``degree`` and 1024 modes
        on S^1, L = 127 on S^2; refinements are clipped to it, as to ``max_degree``).
    handoff_at : float or None
        Hand off at this time (a resolved state), whatever the resolution: for consistency checks.
    nodes : int or None
        Nodes of the continuation (default ``space.default_nodes``: 4096 on S^1, 8192 on S^2, where the
        count is rounded to a Gauss grid 2 nlat^2).
    node_rtol, node_atol : float or None
        Step error tolerances of the nodes (radians): max_j |err_j| <= node_atol + node_rtol. Default
        ``NODE_TOLERANCE`` (2.5e-3) times the nodes' mean spacing, and node_atol 1e-2 of that (S^1, 4096
        nodes: 3.8e-6; S^2, 8192 nodes: 9.8e-5 rad): a step's error is then a small fraction of the distance
        between nodes, which is what decides the atoms and their masses. The error-estimate rerun scales
        them with its own spacing. Much finer tolerances only multiply the rejected steps where nodes cross a
        ReLU unit's switching line (the drift's derivative jumps there).
    merge_tol : float
        Nodes closer than this (radians) become one node.
    drift_tol : float
        The nodes are at rest when max |v| over them is below this (radians per unit time): the run is
        certified there or stops "stationary" with the reason it is not (``solvers.terminal``).
    kick : float
        The perturbation (radians) along the unstable direction of a certified saddle, after which the run
        goes on (a plateau: ``PDEResult.plateaus``).
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
    node_rtol: float | None = None
    node_atol: float | None = None
    merge_tol: float = 1e-6
    drift_tol: float = 1e-10
    atom_radius: float | None = None
    error_estimate: bool = True
    kick: float = 1e-4

    def __post_init__(self) -> None:
        for name in ("rtol", "atol", "cfl", "tail_tol", "tail_max", "positivity_tol", "sa_psi_min", "merge_tol",
                     "drift_tol", "kick"):
            check.number(f"option {name}", getattr(self, name), gt=0)
        for name in ("dt0", "dt_max", "handoff_at", "atom_radius", "node_rtol", "node_atol"):
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
    terminal: TerminalState | None = None
    plateaus: list = field(default_factory=list)
    slow_stages: list = field(default_factory=list)

    @property
    def stages(self) -> list:
        """The slow stages (``slow_stages``) and the plateaus (``plateaus``) as :class:`~solvers.terminal.Stage`
        records, in the order the flow met them (solvers.terminal)."""
        out = list(self.slow_stages) + [Stage.of_plateau(p) for p in self.plateaus]
        return sorted(out, key=lambda s: (s.t_entered, s.kind))

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

    def diffuse_rate(self) -> tuple[float, float] | None:
        """(mass outside every group of two or more initial nodes, how fast it fell per unit time) between the
        continuation's last two certification attempts; None before two. It says how far a run still moving
        is from its end."""
        return None if self.lagrangian is None else self.lagrangian.get("diffuse_rate")

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
            # the rerun ends at the same time, or, for a certified run, at its own certified end: end against end
            same_end = check is not None and (float(check["t"]) == float(self.t[i]) or (
                self.terminal is not None and check.get("stop_reason") == "stationary"))
            if i == len(self.t) - 1 and same_end:
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
            f"{np.max(np.abs(self.mass - 1)):.2e}"
            # past the handoff rho is a node measure: no minimum or spectral tail to watch
            + (f"; min rho {self.min_density[-1]:.3g}; tail {self.tail[-1]:.2e}" if self.lagrangian is None else ""),
        ]
        if self.lagrangian is not None:
            h = self.lagrangian["handoff"]
            merges = self.lagrangian["merges"]
            lines.append(f"  handoff at t={h['t']:.6g} ({h['reason']}: {h['message']}), degree {h['degree']}, "
                         f"{h['nodes']} nodes, clipped mass {h['clipped_mass']:.2e}; {len(merges)} merge steps, "
                         f"{int(merges[-1, 2]) if len(merges) else h['nodes']} nodes at the end")
        for k, pl in enumerate(self.plateaus):
            lines.append(f"  plateau {k + 1}: entered t={pl.t_entered:.6g}, certified t={pl.t_certified:.6g}, "
                         f"{len(pl.masses)} atom(s), energy {pl.energy:.10g}, growth {pl.growth:.3e} ({pl.part}), "
                         f"left by a kick of {pl.kick:.1e} rad")
        for st in self.slow_stages:
            lines.append(f"  {st.summary()}")
        if self.terminal is not None:
            lines += ["  " + line for line in self.terminal.summary_lines()]
        elif self.lagrangian is not None:
            lines.append("  terminal state: not certified")
        atoms = self.atoms()
        if isinstance(atoms, lagrangian.NodeAtoms):
            lines.append(f"  atoms (node groups within {atoms.radius:.2g} rad): {len(atoms)}; diffuse mass "
                         f"{atoms.diffuse:.4f}" + (f" ± {atoms.diffuse_error:.1e}" if atoms.diffuse_error is not None
                                                   else "")
                         + (f"; dust (groups below {lagrangian.DUST:g}): {atoms.dust_groups} groups, mass "
                            f"{atoms.dust:.4f}" if atoms.dust_groups else ""))
            rate = self.diffuse_rate()
            if rate is not None and self.terminal is None:
                left, fall = rate
                lines.append(f"  mass in no group: {left:.4f}, falling by {fall:.2e} per unit time at the end"
                             + (f" (at that rate gone in {left / fall:.3g} time units)" if fall > 0 and left > 0
                                else ""))
            note = lagrangian.not_stationary_note(self.stop_reason, float(self.t[-1]), len(atoms))
            if note and self.terminal is None:
                lines.append(f"  {note}")
            loose = lagrangian.unresolved(atoms.masses, atoms.mass_errors)
            # a certified end lists its atoms above; the node groups it was polished from only count
            for k in range(0 if self.terminal is not None else min(len(atoms), 12)):
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


def _beside_extremum(model: Model, terminal: TerminalState) -> TerminalState:
    """The certified end with its distance to the global extremum of the energy (:func:`solvers.compare_end`:
    ``energy_gap``, ``is_global``), or the reason there is none (a model the extremum does not cover)."""
    from .landscape_end import compare_end
    out = dataclasses.replace(terminal)
    perr = terminal.position_errors
    if perr is not None:
        # an atom without a partner in the rerun: its position is not known to any tolerance
        perr = np.where(np.isfinite(perr), perr, math.pi)
    try:
        c = compare_end(model, terminal.positions, terminal.masses, perr, terminal.mass_errors)
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
    check.number("t_final", t_final, gt=0, infinite=check.UNTIL_CERTIFIED)
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
    if t_final == math.inf and opts.continuation != "lagrangian":
        raise ValueError("t_final = inf runs until the terminal state is certified, which the Lagrangian "
                         "continuation does (noise = 0, continuation='lagrangian'): give a finite t_final"
                         + (" (with noise the stationary density is a smooth one)" if model.noise > 0 else ""))
    if opts.continuation == "lagrangian":
        spacing = space.node_spacing(opts.nodes or space.default_nodes)
        if opts.node_rtol is None:
            opts.node_rtol = NODE_TOLERANCE * spacing
        if opts.node_atol is None:
            opts.node_atol = 1e-2 * opts.node_rtol
        # a degree above the default handoff degree raises it: the user asked for that resolution
        opts.handoff_degree = opts.handoff_degree or max(space.default_handoff_degree, int(degree))
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


class PDERun:
    """One prepared integration (:func:`prepare_pde`); :meth:`run` integrates it once.

    A thin driver of the phases: the Eulerian (spectral) phase with resolution control
    (:class:`~solvers.eulerian.EulerianPhase`); with ``continuation="lagrangian"`` the handoff to a node
    measure and its Lagrangian phase (:class:`~solvers.lagrangian.LagrangianPhase`); then, by default, the
    error-estimate run of the continuation at twice the nodes. The driver owns the snapshot schedule past
    the handoff, the snapshots of both phases (one record path), the callbacks and checkpoints, the restart
    states, the result and the wording of an interruption.
    """

    def __init__(self, model, Disc, space, t_final, degree, initial, save_every, opts: PDEOptions,
                 max_degree, restart) -> None:
        self.model, self.space = model, space
        self.t_final, self.save_every, self.opts, self.max_degree = t_final, save_every, opts, max_degree
        self.continues = opts.continuation == "lagrangian"
        # the largest Eulerian resolution: refinements are clipped to it
        self.cap = min(max_degree, opts.handoff_degree) if self.continues else max_degree
        self.callback = self.progress = self.stop_request = None
        self.checkpoint, self.checkpoint_every = None, math.inf
        self._settings_once = None
        self.snaps = _Snapshots()
        self.steps = {"t": [], "dt": [], "error": [], "accepted": []}
        self._steps_mark = 0
        self.refinements: list = []
        # the computational grid of every degree used (fixed by the degree: recorded so that a resume on
        # a machine or version whose grid would differ can be refused)
        self.grids: dict = {}
        self.output_points = opts.output_points or space.default_output_points
        state = None if restart is None else pde_state_from_dict(restart)
        self.t = 0.0 if state is None else state.t
        self._refuse_too_big()
        self.grid = space.output_grid(self.output_points)
        self.euler: EulerianPhase | None = None     # the spectral phase, until the handoff
        self.lag = None              # the Lagrangian phase, after the handoff
        self.handoff = None          # what the handoff was (dict), after it
        self.good = None             # the handoff state (GoodState), after it
        self.spectral = None         # (nsteps, nrejected, facold) the spectral phase ended with, after it
        self.check = None            # the error-estimate run's final node measure
        self.checking = False        # inside the error-estimate run (an interruption there says so)
        self.last_restart = None
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
        opts, space = self.opts, self.space
        left = self.t_final - self.t
        if self.save_every is None:
            n_snap = 2
        elif math.isinf(left):
            # the schedule of snapshot_time: ~100 per doubling of time; counted to 2^20 save_every
            n_snap = 2 + SNAPSHOTS_PER_DOUBLING * 13
        else:
            n_snap = 2 + math.ceil(left / self.save_every)
        grid_points = space.output_grid_size(self.output_points)
        per_snap = 8.0 * grid_points + 16.0 * space.ncoef(self.cap)
        if self.continues:
            per_snap += 8.0 * (self.model.d + 2) * (opts.nodes or space.default_nodes)
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
            coeffs=self.snaps.rows[-1]["coeffs"] if self.snaps.rows else g.coeffs, handoff=dict(self.handoff),
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
            stop, message = "interrupted", self._interrupted()
        finally:
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
            int(self.handoff["nodes"]))
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
        self.handoff = {"t": g.t, "reason": reason, "message": message, "degree": g.degree,
                        "nodes": len(nodes), "clipped_mass": clipped, "description": desc,
                        "max_weight": float(nodes.w.max()),
                        "smoothing": float(self.space.smoothing_scale(g.degree)),
                        "atom_radius": self._atom_radius(len(nodes))}
        self.t, self.save_index = g.t, g.save_index
        self.spectral = (e.nsteps, e.nrejected, e.controller.facold)
        self.lag = self._new_phase(nodes, g.t, self.handoff["atom_radius"])
        self.euler = None               # its transforms go
        return None, ""

    def _atom_radius(self, n: int) -> float:
        return self.opts.atom_radius or 0.1 * self.space.node_spacing(n)

    def _restore_lagrangian(self, state: LagrangianState) -> None:
        self.handoff = dict(state.handoff)
        self.good = GoodState(state.good_t, int(self.handoff["degree"]), state.good_save_index, state.handoff_coeffs)
        self.save_index = state.save_index
        self.spectral = (state.nsteps, state.nrejected, state.facold)
        self.lag = self._new_phase(None, self.t, self.handoff["atom_radius"], state=state)

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

    def _error_estimate_run(self) -> None:
        """The continuation again from the handoff state with twice the nodes: to its own certified end when
        the run was certified stationary (the terminal masses are compared), else to the same time."""
        t_end = self.lag.t
        nodes, _, _ = self._continuation_nodes(factor=2)
        certified = self.lag.terminal is not None and self.lag.ended is not None
        phase = self._new_phase(nodes, self.good.t,
                                self._atom_radius(len(nodes)) if certified else None)
        wall0 = time.perf_counter()
        self.t = self.good.t
        # t_end: the rerun's end, which is before t_final when the run stopped stationary
        end = self.t_final if certified else t_end
        report = lambda t, info: self.progress(t, {"check": "2x nodes", "t_end": end, **info})  # noqa: E731
        self.checking = True
        phase.stop_request = self.stop_request
        try:
            stop, message = phase.run(self.t_final if certified else t_end, progress=report,
                                      stationary=certified, max_steps=self.opts.max_steps)
            if stop == "interrupted":
                raise KeyboardInterrupt      # reported as an interruption of the rerun (see run)
        finally:
            self.t = t_end                   # the run's own state is at t_end, interrupted or not
        self.checking = False
        self.check = {"t": phase.t, "initial_nodes": len(nodes), "x": phase.nodes.x, "w": phase.nodes.w,
                      "count": phase.nodes.count, "nsteps": phase.nsteps, "stop_reason": stop,
                      "wall_time": time.perf_counter() - wall0,
                      "terminal": None if phase.terminal is None else phase.terminal.to_dict()}

    def _terminal_errors(self, terminal: TerminalState, check: TerminalState, n2: int) -> TerminalState:
        """The terminal state with the errors of its masses and positions from the rerun's terminal state (the
        rule of ``PDEResult.atoms``: paired by position, Richardson-extrapolated, at least the basin floor)."""
        n1 = int(self.handoff["nodes"])
        mine = lagrangian.NodeAtoms(terminal.positions, terminal.masses, terminal.counts, 0.0, 0.0)
        other = lagrangian.NodeAtoms(check.positions, check.masses, check.counts, 0.0, 0.0)
        est = lagrangian.estimate_atoms(mine, other, n2,
                                        floor=self.space.basin_floor_nodes * self.handoff["max_weight"], ratio=n2 / n1,
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
            lag = {"handoff": dict(self.handoff), "merges": np.array(self.lag.merges, dtype=float).reshape(-1, 3),
                   "node_nsteps": self.lag.nsteps, "node_nrejected": self.lag.nrejected, "check": self.check,
                   "kink_crossings": self.lag.kink_crossings,
                   "diffuse_rate": self.lag.diffuse_rate(),
                   # the solution reached its end and only the error-estimate rerun was cut: its atoms hold,
                   # without error bars
                   "check_interrupted": bool(self.checking)}
        terminal = plateaus = slow = None
        if self.lag is not None:
            terminal, plateaus, slow = self.lag.terminal, list(self.lag.plateaus), list(self.lag.stages)
            if terminal is not None and self.check is not None and self.check.get("terminal") is not None:
                terminal = self._terminal_errors(terminal, TerminalState.from_dict(self.check["terminal"]),
                                                 int(self.check["initial_nodes"]))
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
