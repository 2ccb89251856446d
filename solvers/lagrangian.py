"""The Lagrangian continuation of the PDE past the reach of its grid (noise-free runs).

Why. From uniform data the density concentrates exponentially fast, and with a ReLU perceptron it also
jumps where a unit switches off, so every Eulerian resolution is exhausted at a finite time, long before
the atoms form. For nu = 0 the PDE is pure transport,

    rho_t = X_{t0 -> t} # rho_{t0},     dX/dt = v[rho_t](X),

and a measure can be carried along its characteristics without any grid. At the handoff the last
resolved Eulerian state (spectral tail <= tail_tol) becomes a *node measure* mu = sum_j w_j delta_{x_j}
by a quadrature of its series:

- S^1: the N equal-mass nodes theta_j = F^{-1}((j + 1/2) / N) of its CDF F (``spectral.fourier.inverse_cdf``;
  the midpoint rule in the mass variable, spectrally accurate for smooth densities);
- S^2: the Gauss grid of nlat x 2 nlat nodes, weights rho(x_j) x Gauss weight (default nlat = 64, 8192
  nodes: the field needs the node measure's moments only up to the kernel's bandwidth, L = 31 at
  beta = 9, which this grid integrates exactly for a density of degree <= 96 and to the handoff state's
  own tail beyond; nlat > L makes every coefficient of degree <= L exact).

Negative quadrature weights (the Gibbs undershoot of the handoff state, at most ``positivity_tol`` of the
maximum) are clipped to 0; the clipped mass is recorded and the measure renormalised to mass 1.

The nodes then move with their weights under the velocity of mu itself: the attention fields from the
exact coefficients of mu with the kernel's Funk–Hecke multipliers (the fast sums of
:mod:`solvers.interaction`: the Bessel series on S^1, the addition theorem on S^2) and the perceptron drift
at the nodes, combined by ``Model.velocity`` (the one definition both solvers use). Smooth observables
follow the PDE to the quadrature's accuracy; the node measure goes on where the grid cannot, and atoms
show up as nodes that coincide.

- Steps: Dormand–Prince 5(4) of F(x) = v(x / |x|) (the field extended off the sphere, whose flow keeps
  |x|), error max_j |err_j| <= node_atol + node_rtol (radians), positions normalised after each step.
- Merging: after every accepted step, nodes within ``merge_tol`` (geodesic, single linkage) become one node
  at their normalised weighted mean, carrying their summed weight and the number of initial nodes it
  holds (``count``). Coincident nodes have the same velocity, and self-interaction adds nothing to USA,
  so a merge changes the flow by O(merge_tol). Merges are recorded (time, nodes before, after). The
  number of nodes, hence the cost of a step, falls as atoms form.
- Stop "stationary": max_j |v(x_j)| <= ``drift_tol`` over the nodes (all carry mass); else "t_final".
- Atoms of a node measure and the error estimate of their masses: :mod:`solvers.node_measures`. Once every
  node group is an atom the flow is the atom system (:class:`~solvers.atom_system.AtomSystem`).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from . import terminal as term
from .atom_system import ATOM_TOLERANCE, IMPLICIT_DIMENSIONS, KINK, UNSTABLE_STEP, AtomSystem
from .atomic import reduced_jacobian
from .balance import balanced, force_scales
from .atoms import circle_closest_chord, circle_neighbour_chords, single_linkage_clusters
from .interaction import InteractionSums
from .model import Model
from .empirical import measure_energy, measure_velocity
from .node_jacobian import (DENSE_DIMENSIONS, GroupedJacobian, atoms_factor, growth_bound, spectral_radius,
                            tangent_solver)
# the node measures are a module of their own; their names are also imported from here
from .node_measures import (DUST, UNRESOLVED, NodeAtoms, Nodes, estimate_atoms, handoff_nodes, node_atoms,
                            not_stationary_note, unresolved)
from .restart import LagrangianState
from .stepping import RODASP, ROS34PW2, TABLEAUS, Integration, StepController

__all__ = ["Nodes", "handoff_nodes", "node_atoms", "estimate_atoms", "NodeAtoms", "LagrangianPhase", "DUST",
           "UNRESOLVED", "unresolved", "not_stationary_note", "KINK", "ATOM_TOLERANCE", "UNSTABLE_STEP",
           "IMPLICIT_DIMENSIONS"]


def _merge(nodes: Nodes, tol: float, slack: float | None = None) -> tuple[Nodes, int, float | None]:
    """Nodes within ``tol`` of each other (single linkage) joined into one; returns (nodes, merges made, slack).

    ``slack``: a lower bound of (smallest chord between two nodes) - (the chord of ``tol``), from an earlier
    call, decreased by the caller by twice every node's largest move since (the triangle inequality: no
    pair comes closer by more). While it is positive no pair can be within ``tol`` and the nearest-pair
    search is skipped: the same merges, found without a k-d tree at every step (7 ms at 8192 nodes on
    S^2, which was 2.9 s of a 29 s continuation). The slack returned is the new bound (None after
    merges: the next call searches)."""
    N = len(nodes)
    if N < 2:
        return nodes, 0, None
    if slack is not None and slack > _SLACK_ROUNDING:
        return nodes, 0, slack
    # on S^1 the angular order of the nodes serves both the closest chord and the linkage (None elsewhere)
    near = circle_neighbour_chords(nodes.x)
    gap = _closest_chord(nodes.x, near) - _link_chord(tol)
    if gap > 0.0:
        return nodes, 0, gap
    centres, masses, labels = single_linkage_clusters(nodes.x, nodes.w, tol, near)
    k = len(masses)
    if k == N:
        return nodes, 0, None
    # keep the nodes in the order of their first member (the grouping's own order is by mass)
    first = np.full(k, N)
    np.minimum.at(first, labels, np.arange(N))
    order = np.argsort(first, kind="stable")
    counts = np.bincount(labels, weights=nodes.count, minlength=k).astype(np.int64)
    return Nodes(np.ascontiguousarray(centres[order]), masses[order], counts[order]), N - k, None


#: a slack (:func:`_merge`) at most this large is not trusted: the chords and moves it sums are rounded
_SLACK_ROUNDING = 1e-12


def _moved(slack: float | None, new: np.ndarray, old: np.ndarray) -> float | None:
    """The slack of :func:`_merge` after the nodes moved from ``old`` to ``new``: less twice the largest move
    (two nodes come closer by at most the sum of their moves); None stays None."""
    if slack is None:
        return None
    d = new - old
    return slack - 2.0 * math.sqrt(float(np.einsum("nd,nd->n", d, d).max()))


def _link_chord(tol: float) -> float:
    """The chord within which two nodes are linked: 2 sin(tol/2), widened as ``single_linkage_clusters``
    widens it (so that no pair it links is missed)."""
    return 2.0 * math.sin(min(tol, math.pi) / 2.0) * (1 + 1e-12)


#: a generic direction for :func:`_strip_closest_chord` (not a coordinate axis: nodes may line up on one)
_STRIP_DIRECTION = np.array([0.5345224838248488, 0.6681531047810609, 0.8017837257372732])   # (4, 5, 6) / |.|
#: offsets (in the projection's order) the strip search tries before it leaves the search to a k-d tree
STRIP_MAX_OFFSETS = 32


def _strip_closest_chord(x: np.ndarray) -> float | None:
    """The smallest chord between two of the points (n, 3) by a strip search, less 1e-15 (a lower bound:
    the projections round), or None when it would take more than STRIP_MAX_OFFSETS offsets.

    The points are sorted by their projection p on a fixed direction; the pairs (i, i + k) are examined
    for k = 1, 2, ... while p_{i+k} - p_i does not exceed the best chord so far (a pair farther apart in
    projection is farther apart in space). Where nodes gather on atoms the best chord is soon tiny and few
    pairs stay in the strip: 8192 nodes on S^2 in 2 ms against a k-d tree's 7.6 ms (uniform or clustered,
    the same minimum, measured); points strung along a curve that folds in the projection need many
    offsets, and go to the tree."""
    n = x.shape[0]
    p = x @ _STRIP_DIRECTION
    order = np.argsort(p, kind="stable")
    xs, ps = x[order], p[order]
    best2, best = math.inf, math.inf
    cand = np.arange(n)
    for k in range(1, STRIP_MAX_OFFSETS + 1):
        cand = cand[: np.searchsorted(cand, n - k)]     # i + k < n (cand is increasing)
        gap = ps[cand + k] - ps[cand]
        cand = cand[gap <= best]                         # the gaps grow with k: a pair out stays out
        if cand.size == 0:
            return max(0.0, best - 1e-15)
        d = xs[cand + k] - xs[cand]
        best2 = min(best2, float(np.einsum("nd,nd->n", d, d).min()))
        if best2 == 0.0:                                 # coincident points: nothing is closer
            return 0.0
        best = math.sqrt(best2)
    return None


def _closest_chord(x: np.ndarray, near: tuple | None = None) -> float:
    """The smallest chord |x_i - x_j| between two of the points, or a lower bound a few 1e-15 below it: on
    S^1 from angular neighbours (:func:`~solvers.atoms.circle_closest_chord`; at 4096 nodes 0.6 ms against a
    k-d tree's 3.8 ms, which every step of a continuation whose nodes keep merging pays), on S^2 by a strip
    search (:func:`_strip_closest_chord`), else (or where those give up) by a k-d tree. The merge's slack is
    a lower bound either way, and a gap within the difference goes to the linkage, which decides exactly.
    ``near``: :func:`~solvers.atoms.circle_neighbour_chords` of x when the caller has it."""
    from scipy.spatial import cKDTree

    low = circle_closest_chord(x, near)
    if low is None and x.shape[1] == 3 and x.shape[0] >= 2:
        low = _strip_closest_chord(x)
    if low is not None:
        return low
    dist, _ = cKDTree(x).query(x, k=2)
    return float(dist[:, 1].min())


# ----------------------------------------------------------------------------------------------
# the continuation
# ----------------------------------------------------------------------------------------------
#: the steps are checked for stiffness every this many steps: h rho(W) above STIFF (DP54's real stability
#: bound is 3.3) switches from DP54 to ROS34PW2, and below NONSTIFF back
STIFFNESS_CHECK = 25
STIFF = 2.0
NONSTIFF = 0.5
#: after a failed certification attempt the next comes after this fraction of the time since the phase began
ATTEMPT_GROWTH = 0.25
#: and at least this long after it (time units)
ATTEMPT_MIN_GAP = 1.0
#: a plateau's kick has had time to grow by e^LEAVE_GROWTHS before the same groups are polished again
LEAVE_GROWTHS = 20.0
#: the run stops at the state it is on after this many plateaus: a guard against a cycle the check for a
#: plateau met again misses, set far above the dozens of split plateaus through which a dead-zone lattice forms
MAX_PLATEAUS = 1024


def diffuse_rate_of(log: list) -> tuple[float, float] | None:
    """(diffuse mass, how fast it falls per unit time) from a diffuse log [(t, diffuse mass)] of the last two
    certification attempts (a restart state's ``diffuse_log``); None before two."""
    if len(log) < 2 or log[1][0] <= log[0][0]:
        return None
    (t0, d0), (t1, d1) = log
    return float(d1), (float(d0) - float(d1)) / (float(t1) - float(t0))


class LagrangianPhase(AtomSystem, Integration):
    """The node measure stepped in time (module docstring): an :class:`~solvers.stepping.Integration` of the
    node positions, built at the handoff or from a restart state; :meth:`run` advances it to t_final or
    until "stationary".

    Steps are Dormand–Prince 5(4) until they are stiff, then ROS34PW2 (a linearly implicit W-method) with
    the node flow's Jacobian (:func:`~solvers.atomic.reduced_jacobian`) while the nodes' tangent dimensions
    are at most ``IMPLICIT_DIMENSIONS``, with its block-diagonal perceptron part beyond: an atom on a ReLU
    unit's switching line, or the perceptron's rate at a dead zone's edge, would otherwise hold the explicit
    step at its stability bound while the last nodes collapse slowly. With ``certify`` the phase polishes its node
    groups into a stationary atomic measure on a schedule and classifies it (:mod:`solvers.terminal`): a
    stable one ends the run ("stationary", ``terminal``), an unstable one is recorded as a plateau
    (``plateaus``) and left by a kick of ``kick`` radians.

    Attributes
    ----------
    model, sums : the model and its interaction sums (None without attention)
    nodes : the current node measure; t : its time
    degree : the handoff degree (snapshots keep the node measure's coefficients up to it)
    rtol, atol, merge_tol : step error tolerances (radians), merge distance
    drift_tol : all nodes slower than this (radians per unit time) and not certifiable: "stationary"
    certify, atom_radius, kick : certification on, its grouping radius, the plateau kick (radians)
    state : a :class:`~solvers.restart.LagrangianState` to continue from (its nodes, time, steps and
        certification replace ``nodes``, ``t``, ``dt``, ``nsteps``, ``nrejected`` and ``merges``)
    """

    HOLD_AFTER_REJECT = True

    def __init__(self, model: Model, space, nodes: Nodes | None, t: float, degree: int, rtol: float, atol: float,
                 merge_tol: float, drift_tol: float, sums: InteractionSums | None = None, dt: float | None = None,
                 nsteps: int = 0, nrejected: int = 0, merges: list | None = None, certify: bool = False,
                 atom_radius: float = 0.0, kick: float = 1e-4, state: LagrangianState | None = None) -> None:
        if state is not None:
            nodes = Nodes(state.x, state.w, state.count)
            t, dt, nsteps, nrejected = state.t, state.dt if math.isfinite(state.dt) else None, state.node_nsteps, \
                state.node_nrejected
            merges = list(state.merges)
        # t_final, max_steps: those of run()
        super().__init__(t=t, t_final=math.inf, dt=dt, tableau=None, controller=None, max_steps=10 ** 9,
                         nsteps=nsteps, nrejected=nrejected)
        self.model, self.space, self.nodes, self.degree = model, space, nodes, degree
        self.rtol, self.atol, self.merge_tol, self.drift_tol = rtol, atol, merge_tol, drift_tol
        self.sums = sums
        self.merges = [] if merges is None else merges
        self.certify, self.atom_radius, self.kick = certify, atom_radius, kick
        self.psi: np.ndarray | None = None
        self._save_time: Callable[[], float] | None = None
        self._on_save: Callable[[], None] | None = None
        self.stationary = True
        self._merge_slack: float | None = None     # see _merge (not part of the restart state: it only skips searches)
        self.implicit = False             # Rosenbrock steps (see _check_stiffness)
        self._jac: tuple | None = None    # (x, w, kind, W) of the last W (see _jacobian)
        self.terminal = None              # the certified state (solvers.terminal.TerminalState)
        self.ended = None                 # (stop reason, message) once certified stationary
        self.plateaus: list = []
        self.t_begin = self.t             # the phase's start (the attempts' schedule grows from it)
        self.next_attempt = self.t        # the next certification attempt
        self.quiet = None                 # after a plateau: (its group count, the time attempts resume)
        self.samples: list = []           # (t, energy) at the attempts since the last plateau
        self.diffuse_log: list = []       # (t, diffuse mass) at the last two attempts
        self.why_not = ""                 # why the last attempt did not certify
        self.stages: list = []            # the slow stages (solvers.terminal.Stage), the last one maybe open
        self.atoms_mode = False           # every node an atom: the atom system (_to_atoms)
        self.forced = False               # a forced attempt failed, and nothing has changed since
        self.kink_crossings = 0           # atoms placed off a ReLU switching line (_off_kinks)
        self._t_step = self.t             # the time of the step being taken
        if state is not None:
            self.implicit = state.implicit
            self.t_begin, self.next_attempt, self.quiet = state.t_begin, state.next_attempt, state.quiet
            self.samples, self.plateaus = list(state.samples), list(state.plateaus)
            self.diffuse_log, self.terminal, self.ended = list(state.diffuse_log), state.terminal, state.ended
            self.stages, self.atoms_mode, self.forced = list(state.stages), state.atoms_mode, state.forced
            self.kink_crossings = state.kink_crossings
        if self.nodes is not None:
            self._choose_method()
        if state is not None:
            self.controller.facold = state.node_facold

    def _choose_method(self) -> None:
        """DP54, or ROS34PW2 once the explicit steps are stiff (``implicit``), or RODASP for the atom system; a
        change of method starts its controller afresh."""
        tab = RODASP if self.atoms_mode else ROS34PW2 if self.implicit else TABLEAUS["DP54"]
        if tab is not self.tableau:
            self.tableau = tab
            self.controller = StepController(tab.error_order)

    def _w_kind(self) -> str:
        """Which W the Rosenbrock steps use (:mod:`solvers.node_jacobian`): "atoms" (the atom system's exact
        Jacobian), "dense" (the node flow's whole Jacobian, few nodes) or "grouped" (each node's own block and
        the attention of sources aggregated over cells half a kernel width wide). A W-method keeps its order
        with either."""
        if self.atoms_mode:
            return "atoms"
        return "dense" if len(self.nodes) * (self.nodes.x.shape[1] - 1) <= DENSE_DIMENSIONS else "grouped"

    def _jacobian(self, kind: str, x: np.ndarray | None = None):
        """The W of ``kind`` at the current nodes (or at ``x``, not kept): a :class:`GroupedJacobian`, or
        (J, frames) with J the dense reduced Jacobian. Computed once per state: the step bound, the
        factorisation and the retries of a rejected step share it."""
        n = self.nodes
        if x is not None:
            return GroupedJacobian(self.model, x, n.w) if kind == "grouped" else reduced_jacobian(self.model, x, n.w)
        c = self._jac
        if c is not None and c[0] is n.x and c[1] is n.w and c[2] == kind:
            return c[3]
        W = GroupedJacobian(self.model, n.x, n.w) if kind == "grouped" else reduced_jacobian(self.model, n.x, n.w)
        self._jac = (n.x, n.w, kind, W)
        return W

    def _check_stiffness(self) -> None:
        """After an accepted step, every STIFFNESS_CHECK steps: switch to the Rosenbrock steps when the explicit
        ones are stiff, h rho(W) > STIFF for the next step h, and back when they are no longer, h rho(W) <
        NONSTIFF. The atom system always steps with them: its slow drifts outlast every other rate by many
        decades."""
        if self.atoms_mode:
            self.implicit = True
        elif self.nsteps % STIFFNESS_CHECK == 0 and self.dt:
            stiff = self.dt * self._rate(self._jacobian(self._w_kind()))
            self.implicit = stiff > NONSTIFF if self.implicit else stiff > STIFF
        self._choose_method()

    # --- the field --------------------------------------------------------------------------------
    @property
    def state(self) -> np.ndarray:
        return self.nodes.x

    def rhs(self, t: float, u: np.ndarray, last: bool = False) -> np.ndarray:
        """F(u) = v(u / |u|): the field extended off the sphere (its flow keeps |u|). The atom system sums
        directly, each atom's own term exact (``Model.velocity_at_atoms``): a fast sum's error is relative to
        the largest field, and an atom held by forces of 1e-14 would move with that error instead."""
        x = u / np.linalg.norm(u, axis=1, keepdims=True)
        if self.atoms_mode:
            return self.model.velocity_at_atoms(x, self.nodes.w)
        return measure_velocity(self.model, self.sums, x, self.nodes.w)[0]

    def rhs_at_state(self) -> np.ndarray:
        return self.velocity()

    def velocity(self) -> np.ndarray:
        """v at the nodes (also kept as the first stage of the next step)."""
        if self.f is None:
            if self.atoms_mode:
                self.f, self.psi = self.model.velocity_at_atoms(self.nodes.x, self.nodes.w), None
            else:
                self.f, self.psi = measure_velocity(self.model, self.sums, self.nodes.x, self.nodes.w)
        return self.f

    def max_drift(self) -> float:
        v = self.velocity()
        return float(np.sqrt(np.einsum("nd,nd->n", v, v).max())) if len(self.nodes) else 0.0

    def error_norm(self, err: np.ndarray, u: np.ndarray, u_new: np.ndarray) -> float:
        if self.atoms_mode:
            # the tangential part only: the step is normalised onto the sphere, and with steps that outlast
            # the stiff rates by decades the embedded method's normal component is not an error of the flow
            x = u_new / np.linalg.norm(u_new, axis=1, keepdims=True)
            err = err - np.einsum("nd,nd->n", err, x)[:, None] * x
            return float(np.sqrt(np.einsum("nd,nd->n", err, err).max())) / ATOM_TOLERANCE
        return float(np.sqrt(np.einsum("nd,nd->n", err, err).max())) / (self.atol + self.rtol)

    def step_bound(self) -> float:
        """The atom system's steps resolve every growing mode: h Re(lambda) <= ``UNSTABLE_STEP`` for the
        eigenvalues of its Jacobian. An implicit step much longer than 1 / lambda damps a growing mode instead of
        following it: an atom that has just crossed a ReLU unit's switching line into the unit's push would be
        put back, step after step. (:func:`~solvers.node_jacobian.growth_bound`: the largest real part of the
        eigenvalues, or a bound of it.)"""
        if not self.atoms_mode:
            return math.inf
        J, _ = self._jacobian("atoms")
        growth = growth_bound(J, self.nodes.w, self.model.has_energy, UNSTABLE_STEP / self.dt if self.dt else 0.0)
        return UNSTABLE_STEP / growth if growth > 0 else math.inf

    def min_step(self) -> float:
        """The atom system is autonomous and its late events are fast (atoms that approach over many decades
        of time meet within a few time units): its steps may be finer than t resolves."""
        return 1e-14 if self.atoms_mode else super().min_step()

    def jacobian_factor(self, u: np.ndarray, g: float):
        """(I - g W)^{-1} for the Rosenbrock steps (:meth:`_w_kind`, :mod:`solvers.node_jacobian`): W = E J E^T
        with J the node flow's Jacobian on the nodes' tangent frames E, or its near-neighbour part; the normal
        components of a vector pass through unchanged (the flow keeps |x|). The atom system's W is the exact
        Jacobian of F(u) = v(u / |u|), its normal part included (RODASP needs it)."""
        kind = self._w_kind()
        x = u if u is self.nodes.x else u / np.linalg.norm(u, axis=1, keepdims=True)
        W = self._jacobian(kind, None if u is self.nodes.x else x)
        if isinstance(W, GroupedJacobian):
            return W.solver(g)
        J, E = W
        if kind == "atoms":
            v = self.f if u is self.nodes.x and self.f is not None else self.model.velocity_at_atoms(x, self.nodes.w)
            return atoms_factor(J, E, x, v, g)
        return tangent_solver(J, E, g)

    @staticmethod
    def _rate(W) -> float:
        """rho(W), estimated by the power method (:func:`~solvers.node_jacobian.spectral_radius`)."""
        return W.spectral_radius() if isinstance(W, GroupedJacobian) else spectral_radius(W[0])

    # --- snapshots --------------------------------------------------------------------------------
    def row(self, output_points: int, smoothing: float) -> dict:
        """The snapshot of the node measure: the PDE's per-snapshot fields and the nodes themselves."""
        n = self.nodes
        v = self.velocity()
        if self.psi is None and self.sums is not None and not self.atoms_mode:
            self.f = None
            v = self.velocity()
        space = self.space
        c = space.particle_coefficients(n.x, n.w, self.degree)
        density = space.on_output_grid(space.heat_smooth(c, smoothing), output_points)
        speed2 = np.einsum("nd,nd->n", v, v)
        return {"t": self.t, "coeffs": c, "degree": self.degree, "energy": self._energy(), "mass": float(n.w.sum()),
                "min_density": float(np.min(density)), "tail": float(space.tail(c)),
                "dissipation": float(self.model.sign * (n.w @ speed2)), "density": density,
                "nodes": {"x": n.x.copy(), "w": n.w.copy(), "count": n.count.copy(),
                          "max_drift": float(math.sqrt(speed2.max()))}}

    def restart_state(self, **run) -> LagrangianState:
        """The state :class:`LagrangianPhase` continues from bit for bit (``state=``), with ``run``: the fields
        of the run that the node phase does not hold (:class:`~solvers.restart.LagrangianState`)."""
        return LagrangianState(
            **run, t=self.t, degree=self.degree, x=self.nodes.x.copy(), w=self.nodes.w.copy(),
            count=self.nodes.count.copy(), dt=float(self.dt) if self.dt is not None else float("nan"),
            node_nsteps=self.nsteps, node_nrejected=self.nrejected, merges=list(self.merges),
            node_facold=self.controller.facold, implicit=self.implicit, t_begin=self.t_begin,
            next_attempt=self.next_attempt, quiet=self.quiet, samples=list(self.samples),
            plateaus=list(self.plateaus), diffuse_log=list(self.diffuse_log), terminal=self.terminal,
            ended=self.ended, stages=list(self.stages), atoms_mode=self.atoms_mode, forced=self.forced,
            kink_crossings=self.kink_crossings)

    # --- the protocol of Integration ----------------------------------------------------------------
    def save_time(self) -> float:
        return min(self._save_time(), self.t_final) if self._save_time is not None else self.t_final

    def before_step(self) -> tuple[str, str] | None:
        if self.ended is not None:
            return self.ended
        self._t_step = self.t
        drift = self.max_drift()
        if not math.isfinite(drift):
            return "non-finite", f"non-finite node velocity at t = {self.t:.6g}"
        if self.stationary and drift <= self.drift_tol and not self.forced:
            if not self.certify:
                return "stationary", (f"max |v| over the {len(self.nodes)} nodes = {drift:.3g} <= drift_tol "
                                      f"{self.drift_tol:g}")
            plateaus = len(self.plateaus)
            stop = self._attempt(force=True, slow=True)
            if stop is not None:
                return stop
            # slow and not balanced: a slow stage, and the flow goes on; it is forced again once the atoms change
            self.forced = len(self.plateaus) == plateaus
            drift = self.max_drift()
            if drift == 0.0:
                # nothing moves, exactly: no later state can differ from this one
                return "stationary", (f"every node is at rest exactly (max |v| = 0) but the state is not "
                                      f"certified: {self.why_not}")
        if self.t >= self.t_final:
            message = f"reached t_final (max |v| over the nodes {drift:.3g})"
            if self.certify:
                self._attempt(force=True, final=True)
                if self.terminal is None:
                    message += f"; not certified stationary: {self.why_not}"
                else:
                    message += (f"; its state is certified stationary ({len(self.terminal)} atom(s), "
                                f"{self.terminal.verdict})")
            return "t_final", message
        if self.dt is None:
            self.dt = 0.01 / drift if drift > 0 else min(self.save_time() - self.t, 1.0)
        return None

    # --- certification (solvers.terminal) --------------------------------------------------------------
    def _energy(self) -> float:
        if self.atoms_mode:
            return self.model.energy_direct(self.nodes.x, self.nodes.w)
        self.velocity()
        if self.psi is None and self.sums is not None:
            self.f = None
            self.velocity()
        return measure_energy(self.model, self.sums, self.nodes.x, self.nodes.w, self.psi)

    def _attempt(self, force: bool = False, final: bool = False, slow: bool = False) -> tuple[str, str] | None:
        """A certification attempt (:func:`solvers.terminal.certify`) when one is due (or ``force``). A
        stable (or marginal) state ends the run: ("stationary", message), ``terminal`` set; ``final`` (at
        t_final) records any certified state as ``terminal`` and returns None. An unstable one is a plateau:
        recorded, the nodes kicked off it, None. A state that is not certified while its nodes are ``slow``
        is a slow stage; once every node group is an atom (:meth:`_to_atoms`) the flow goes on as the atom
        system."""
        if not force and self.t < self.next_attempt:
            return None
        self.next_attempt = self.t + max(ATTEMPT_MIN_GAP, ATTEMPT_GROWTH * (self.t - self.t_begin))
        if self.model.has_energy:
            self.samples.append((self.t, self._energy()))
        n = self.nodes
        groups = term.group_nodes(n.x, n.w, n.count, self.atom_radius)
        # the mass still outside every group of two or more initial nodes, and how fast it falls
        self.diffuse_log = (self.diffuse_log + [(self.t, float(groups.masses[groups.counts < 2].sum()))])[-2:]
        if self.quiet is not None and not force:
            k, t_resume = self.quiet
            if len(groups) == k and self.t < t_resume:
                self.why_not = "leaving a plateau"
                return None
            self.quiet = None
        cert, self.why_not, info = term.certify(self.model, groups, self.atom_radius, self.t, self._stays_put,
                                                self._energy_of)
        if cert is None:
            if slow:
                self._slow_stage(groups, info)
            if not self.atoms_mode and self._all_atoms(groups):
                self._to_atoms(groups)
            return None
        self._leave_stage()
        verdict = cert.verdict
        word = f"certified stationary ({len(cert.masses)} atom(s), {verdict}, growth {cert.growth:.3e})"
        if final or verdict != "unstable":
            return self._end(cert, None if final else word)
        for p in self.plateaus:
            if cert.same_state(p.positions, p.masses, self.atom_radius):
                return self._end(cert, f"{word}: the flow came back to the plateau certified at t = "
                                       f"{p.t_certified:.6g}")
        if len(self.plateaus) >= MAX_PLATEAUS:
            return self._end(cert, f"{word}, after {MAX_PLATEAUS} plateaus")
        x, w, c, plateau = term.kicked(cert, self.kick)
        plateau.t_entered = term.entered(self.samples, cert.energy, self.t) if self.model.has_energy else self.t
        self.plateaus.append(plateau)
        self.samples = []
        self.nodes = Nodes(np.ascontiguousarray(x), w, c)
        self.f = self.psi = None
        self._merge_slack = None
        self.quiet = (len(cert.masses), self.t + LEAVE_GROWTHS / max(plateau.growth, 1e-300))
        self.forced = False
        self._choose_method()
        self.why_not = "leaving a plateau"
        return None

    def _slow_stage(self, groups: "term.Groups", info) -> None:
        """Open a slow stage (none is open): the nodes are slow and the forces do not balance. Its atom is the
        slowest of the unbalanced groups (by their centres' residuals before Newton's method), or the group
        farthest from balance when Newton's method was not run or failed for another reason."""
        if self.stages and not math.isfinite(self.stages[-1].t_left):
            return
        if info is not None:
            r, S = info.initial_residuals, info.initial_scales
        else:
            v = self.model.velocity_at_atoms(groups.centres, groups.masses)
            r = np.sqrt(np.einsum("kd,kd->k", v, v))
            S = force_scales(self.model, groups.centres, groups.masses)[0]
        off = ~balanced(r, S, term.CERTIFICATE, term.BALANCE_RTOL)
        if np.any(off):
            i = int(np.flatnonzero(off)[np.argmin(r[off])])
        else:
            i = int(np.argmax(np.divide(r, S, out=np.zeros_like(r), where=S > 0)))
        speed = float(r[i])
        self.stages.append(term.Stage("slow", self.t, math.nan, len(groups), i, groups.centres[i].copy(),
                                      float(groups.masses[i]), speed, float(S[i]),
                                      self.atom_radius / speed if speed > 0 else math.inf, why=self.why_not))

    def _leave_stage(self, t: float | None = None) -> None:
        """Close the open slow stage (if any) at ``t`` (default now): the atoms changed, or the end came."""
        if self.stages and not math.isfinite(self.stages[-1].t_left):
            self.stages[-1].t_left = self.t if t is None else t

    def _end(self, cert, message: str | None) -> tuple[str, str] | None:
        """Keep ``cert`` as the terminal state; with a message, the run ends there ("stationary")."""
        self.terminal = term.TerminalState.from_certificate(cert)
        if message is None:
            return None
        self.ended = ("stationary", message)
        return self.ended

    def _energy_of(self, positions: np.ndarray, masses: np.ndarray) -> float:
        return measure_energy(self.model, self.sums, positions, masses,
                              None if self.sums is None else self.sums.fields(positions, masses)[0])

    def _stays_put(self, positions: np.ndarray, masses: np.ndarray, counts: np.ndarray) -> float:
        """The largest move (radians) of the node flow from these atoms over ``terminal.STAY_TIME``."""
        phase = LagrangianPhase(self.model, self.space, Nodes(positions.copy(), masses.copy(), counts.copy()),
                                self.t, self.degree, self.rtol, self.atol, 0.0, 0.0, sums=self.sums)
        stop, _ = phase.run(self.t + term.STAY_TIME, stationary=False, max_steps=10_000)
        if stop != "t_final" or len(phase.nodes) != len(masses):
            return math.inf
        cos = np.clip(np.einsum("nd,nd->n", phase.nodes.x, positions), -1.0, 1.0)
        chord = np.linalg.norm(phase.nodes.x - positions, axis=1)
        return float(np.max(2.0 * np.arcsin(np.minimum(chord / 2.0, 1.0)))) if cos.size else 0.0

    def accept(self, u_new: np.ndarray, f_new: np.ndarray | None, h: float, lands: bool) -> tuple[str, str] | None:
        x = u_new / np.linalg.norm(u_new, axis=1, keepdims=True)
        if not np.all(np.isfinite(x)):
            return "non-finite", f"non-finite node positions after the step to t = {self.t:.6g}"
        before = len(self.nodes)
        if self.atoms_mode:
            merged = 0
            pairs, crossed = self._meetings(self.nodes.x, x) if self.model.sign > 0 else ([], False)
            if pairs:
                t_meet = self._meeting_time(self.nodes.x, self.f, h, pairs) if crossed else self.t
                self.nodes = self._merge_atoms(x, pairs)
                merged = before - len(self.nodes)
                self.merges.append((t_meet, before, len(self.nodes)))
                self._leave_stage(t_meet)
                self.forced = False
            else:
                self.nodes = Nodes(self._off_kinks(x), self.nodes.w, self.nodes.count)
            self.f, self.psi = None, None
        else:
            self.nodes, merged, self._merge_slack = _merge(Nodes(x, self.nodes.w, self.nodes.count), self.merge_tol,
                                                           _moved(self._merge_slack, x, self.nodes.x))
            # F(u) = v(u / |u|): the velocity at the new nodes, unless merges changed the measure
            self.f, self.psi = (None, None) if merged else (f_new, None)
            if merged:
                self.merges.append((self.t, before, len(self.nodes)))
        self._check_stiffness()
        if lands and self._on_save is not None and self._save_time is not None:
            self._on_save()
        if self.certify and self.t < self.t_final:
            return self._attempt(force=merged > 0 and self.atoms_mode)
        return None

    def diffuse_rate(self) -> tuple[float, float] | None:
        """(diffuse mass, how fast it falls per unit time) from the last two certification attempts; None
        before two."""
        return diffuse_rate_of(self.diffuse_log)

    def report(self, h: float) -> dict:
        out = {"dt": h, "nodes": len(self.nodes), "nsteps": self.nsteps}
        if self.diffuse_log:
            out["diffuse"] = self.diffuse_log[-1][1]
        return out

    def run(self, t_final: float, *, save_time: Callable[[], float] | None = None,
            on_save: Callable[[], None] | None = None, progress: Callable | None = None,
            max_steps: int = 10 ** 9, stationary: bool = True) -> tuple[str, str]:
        """Step to ``t_final`` (or until stationary); returns (stop reason, message).

        ``save_time()`` is the next snapshot time (steps land on it) and ``on_save()`` is called at each;
        ``progress(t, info)`` after every accepted step. The stop reasons are "stationary", "t_final",
        "max_steps", "non-finite"; KeyboardInterrupt propagates (the state is that of the last step)."""
        self.t_final, self.max_steps, self.stationary = t_final, max_steps, stationary
        self._save_time, self._on_save = save_time, on_save
        return self.integrate(progress)
