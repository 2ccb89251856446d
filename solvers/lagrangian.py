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
- Atoms of a node measure (:func:`node_atoms`): groups of nodes within ``atom_radius`` of each other
  (single linkage) that hold at least two initial nodes; the rest is the *diffuse part* (mass that has not
  collapsed: in descent with a ReLU perceptron, the dead zone, where every unit is off, keeps a share of
  the mass that spreads slowly and never collapses). ``atom_radius`` defaults to a tenth of the initial
  node spacing (2 pi / N on S^1, sqrt(4 pi / N) on S^2): nodes that never compressed stay farther apart.
- Error estimate (:func:`estimate_atoms`): the same continuation from the same handoff state with twice
  the nodes, to the same time; atoms matched by position; the error of a mass (position) is its
  difference between the two runs (an atom without a partner: its own mass), and likewise for the
  diffuse mass.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.optimize import linear_sum_assignment

from spectral import fourier, sphere
from .atoms import Atoms, single_linkage_clusters
from .interaction import InteractionSums
from .model import Model
from .particles import measure_energy, measure_velocity
from .stepping import TABLEAUS, IFRungeKutta, StepController

__all__ = ["Nodes", "handoff_nodes", "default_nodes", "node_atoms", "estimate_atoms", "NodeAtoms",
           "LagrangianPhase", "initial_spacing"]


# ----------------------------------------------------------------------------------------------
# node measures
# ----------------------------------------------------------------------------------------------
@dataclass
class Nodes:
    """A node measure sum_j w_j delta_{x_j}: positions (N, d) unit vectors, weights (N,) > 0 summing to
    1, and ``count`` (N,) the number of initial nodes each node holds (1 until merges)."""

    x: np.ndarray
    w: np.ndarray
    count: np.ndarray

    def __len__(self) -> int:
        return self.w.size

    def copy(self) -> "Nodes":
        return Nodes(self.x.copy(), self.w.copy(), self.count.copy())


def default_nodes(d: int) -> int:
    """Default node count: S^1 4096 (four nodes per mode at the default handoff of 1024 modes), S^2 8192
    (the Gauss grid 64 x 128). Measured here (2 cores): a velocity evaluation of 8192 nodes on S^2 at
    beta = 9 costs 0.04 s, of 32768 nodes (nlat = L + 1 at L = 127) 0.17 s."""
    return 4096 if d == 2 else 8192


def _sphere_nlat(n: int) -> int:
    """nlat of the Gauss grid with about n = 2 nlat^2 nodes (even, >= 2)."""
    nlat = max(int(round(math.sqrt(n / 2.0))), 2)
    return nlat + nlat % 2


def initial_spacing(d: int, n: int) -> float:
    """Mean spacing of n nodes: 2 pi / n on S^1, sqrt(4 pi / n) on S^2 (radians)."""
    return 2.0 * math.pi / n if d == 2 else math.sqrt(4.0 * math.pi / n)


def handoff_nodes(d: int, c: np.ndarray, degree: int, n: int) -> tuple[Nodes, float, str]:
    """The node measure of the density with canonical coefficients ``c`` (module docstring).

    Returns (nodes, clipped mass, description). ``n`` is the node count (on S^2 rounded to a Gauss grid
    2 nlat^2, nlat even)."""
    c = np.asarray(c, dtype=complex)
    if d == 2:
        return _circle_nodes(c, int(n))
    if d == 3:
        return _sphere_nodes(c, int(degree), int(n))
    raise ValueError(f"the continuation works on S^1 and S^2 (d = 2, 3), got d = {d}")


def _circle_nodes(c: np.ndarray, n: int) -> tuple[Nodes, float, str]:
    K = c.size
    fine = max(16 * K, 8 * n, 4096)
    rho = fourier.interpolate(c, fine)
    u = (np.arange(n) + 0.5) / n
    if rho.min() >= 0.0:
        theta = fourier.inverse_cdf(c, u)
        clipped = 0.0
        how = "exact inverse CDF of the series"
    else:
        # clip the undershoot: the CDF of max(rho, 0) by the trapezoidal rule on the fine grid, inverted
        # by linear interpolation (second order where rho crosses 0, as the clipping itself is)
        neg = np.minimum(rho, 0.0)
        clipped = float(-neg.mean() / c[0].real)
        pos = rho - neg
        cum = np.concatenate([[0.0], np.cumsum(0.5 * (pos + np.roll(pos, -1)))])
        cum /= cum[-1]
        grid = 2.0 * np.pi * np.arange(fine + 1) / fine
        theta = np.interp(u, cum, grid)
        how = f"inverse CDF of max(rho, 0) tabulated on {fine} points"
    x = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    return (Nodes(x, np.full(n, 1.0 / n), np.ones(n, dtype=np.int64)), clipped,
            f"{n} equal-mass nodes ({how}, {K} modes)")


def _sphere_nodes(c: np.ndarray, L: int, n: int) -> tuple[Nodes, float, str]:
    nlat = _sphere_nlat(n)
    nphi = 2 * nlat
    x, q = sphere.gauss_nodes(nlat)
    c = sphere.resize(c, L)
    if nlat > L and nlat >= 32:
        b = sphere.SphereBasis(L, nlat, nphi)             # the same nodes, by SHTns
        rho = b.synth(b.from_canonical(c)).ravel()
    else:
        rho = sphere.evaluate(c, x)
    mass = rho * q
    clipped = float(np.maximum(-mass, 0.0).sum())
    keep = mass > 0
    w = mass[keep]
    total = w.sum()
    x = x[keep]
    return (Nodes(np.ascontiguousarray(x), w / total, np.ones(w.size, dtype=np.int64)), clipped,
            f"Gauss grid {nlat} x {2 * nlat} ({w.size} nodes with rho > 0), weights rho x Gauss weight, L = {L}")


# ----------------------------------------------------------------------------------------------
# atoms of a node measure
# ----------------------------------------------------------------------------------------------
class NodeAtoms(Atoms):
    """Atoms of a node measure: ``positions``, ``masses`` (heaviest first), ``counts`` (initial nodes in each
    atom), ``diffuse`` (the mass outside atoms), ``radius`` (the grouping radius). After
    :func:`estimate_atoms` also ``mass_errors``, ``position_errors`` (radians), ``diffuse_error`` and
    ``check_nodes`` (the node count of the finer run); otherwise these are None."""

    def __init__(self, positions, masses, counts, diffuse: float, radius: float) -> None:
        order = np.argsort(-np.asarray(masses), kind="stable")
        super().__init__(positions, masses)
        self.counts = np.asarray(counts, dtype=np.int64)[order]
        self.diffuse = float(diffuse)
        self.radius = float(radius)
        self.mass_errors = self.position_errors = None
        self.diffuse_error = None
        self.check_nodes = None

    def heavy(self, min_mass: float) -> "NodeAtoms":
        keep = self.masses >= min_mass
        out = NodeAtoms(self.positions[keep], self.masses[keep], self.counts[keep],
                        self.diffuse + float(self.masses[~keep].sum()), self.radius)
        if self.mass_errors is not None:
            out.mass_errors, out.position_errors = self.mass_errors[keep], self.position_errors[keep]
            out.diffuse_error, out.check_nodes = self.diffuse_error, self.check_nodes
        return out

    def __repr__(self) -> str:
        err = self.mass_errors if self.mass_errors is not None else [None] * len(self)
        rows = ", ".join(f"{m:.4f}" + (f"±{e:.1e}" if e is not None else "") + f"@{np.round(p, 4).tolist()}"
                         for p, m, e in zip(self.positions, self.masses, err))
        return f"NodeAtoms({len(self)}: {rows}; diffuse {self.diffuse:.4f})"


def node_atoms(nodes: Nodes, radius: float) -> NodeAtoms:
    """Atoms of a node measure: single-linkage groups at geodesic ``radius`` holding >= 2 initial nodes."""
    x, w, count = nodes.x, nodes.w, nodes.count
    d = x.shape[1]
    if len(w) == 0:
        return NodeAtoms(np.zeros((0, d)), np.zeros(0), np.zeros(0), 0.0, radius)
    centres, masses, labels = single_linkage_clusters(x, w, radius)
    counts = np.bincount(labels, weights=count, minlength=len(masses)).astype(np.int64)
    atom = counts >= 2
    return NodeAtoms(centres[atom], masses[atom], counts[atom], float(masses[~atom].sum()), radius)


def estimate_atoms(atoms: NodeAtoms, check: NodeAtoms, check_nodes: int, floor: float = 0.0,
                   match_radius: float = 0.1) -> NodeAtoms:
    """``atoms`` with the error estimate from ``check``, the atoms of the same continuation with twice the
    nodes at the same time: atoms paired one to one by least total distance (pairs farther than
    ``match_radius`` radians do not count); a paired atom's errors are its mass and position differences,
    an unpaired one's its own mass (and an unknown position error, nan). Mass errors are at least
    ``floor``, the largest initial node weight: an atom's basin boundary lies somewhere within one node
    spacing, so its mass is not known more finely (two runs can agree exactly when both grids put the
    boundary between the same mass coordinates)."""
    out = NodeAtoms(atoms.positions, atoms.masses, atoms.counts, atoms.diffuse, atoms.radius)
    n = len(out)
    merr = out.masses.copy()
    perr = np.full(n, np.nan)
    if n and len(check):
        dist = np.arccos(np.clip(out.positions @ check.positions.T, -1.0, 1.0))
        rows, cols = linear_sum_assignment(np.where(dist <= match_radius, dist, 1e6))
        for i, j in zip(rows, cols):
            if dist[i, j] <= match_radius:
                merr[i] = max(abs(out.masses[i] - check.masses[j]), floor)
                perr[i] = dist[i, j]
    out.mass_errors, out.position_errors = merr, perr
    out.diffuse_error = max(abs(out.diffuse - check.diffuse), floor)
    out.check_nodes = int(check_nodes)
    return out


def _merge(nodes: Nodes, tol: float) -> tuple[Nodes, int]:
    """Nodes within ``tol`` of each other (single linkage) joined into one; returns (nodes, merges made)."""
    N = len(nodes)
    if N < 2 or not _has_close_pair(nodes.x, tol):
        return nodes, 0
    centres, masses, labels = single_linkage_clusters(nodes.x, nodes.w, tol)
    k = len(masses)
    if k == N:
        return nodes, 0
    # keep the nodes in the order of their first member (the grouping's own order is by mass)
    first = np.full(k, N)
    np.minimum.at(first, labels, np.arange(N))
    order = np.argsort(first, kind="stable")
    counts = np.bincount(labels, weights=nodes.count, minlength=k).astype(np.int64)
    return Nodes(np.ascontiguousarray(centres[order]), masses[order], counts[order]), N - k


def _has_close_pair(x: np.ndarray, tol: float) -> bool:
    """Whether two points are within chord 2 sin(tol/2) (a cheap test before the grouping)."""
    chord = 2.0 * math.sin(min(tol, math.pi) / 2.0)
    if x.shape[1] == 2:
        th = np.sort(np.arctan2(x[:, 1], x[:, 0]))
        gaps = np.diff(np.concatenate([th, [th[0] + 2.0 * math.pi]]))
        return bool(gaps.min() <= tol * (1 + 1e-12))
    from scipy.spatial import cKDTree
    dist, _ = cKDTree(x).query(x, k=2)
    return bool(dist[:, 1].min() <= chord * (1 + 1e-12))


# ----------------------------------------------------------------------------------------------
# the continuation
# ----------------------------------------------------------------------------------------------
@dataclass
class LagrangianPhase:
    """The node measure stepped in time (module docstring). Built at the handoff or from a restart
    state; :meth:`run` advances it to t_final or "stationary".

    Attributes
    ----------
    model, sums : the model and its interaction sums (None without attention)
    nodes : the current node measure; t : its time
    degree : the handoff degree (snapshots keep the node measure's coefficients up to it)
    rtol, atol, merge_tol, drift_tol : step error tolerances (radians), merge distance, stationary drift
    """

    model: Model
    space: object
    nodes: Nodes
    t: float
    degree: int
    rtol: float
    atol: float
    merge_tol: float
    drift_tol: float
    sums: InteractionSums | None = None
    dt: float | None = None
    nsteps: int = 0
    nrejected: int = 0
    merges: list = field(default_factory=list)
    controller: StepController = field(default_factory=lambda: StepController(TABLEAUS["DP54"].error_order))

    def __post_init__(self) -> None:
        self.stepper = IFRungeKutta(self._rhs, TABLEAUS["DP54"], None)
        self.f = None
        self.psi = None

    # --- the field --------------------------------------------------------------------------------
    def _rhs(self, t: float, u: np.ndarray, last: bool = False) -> np.ndarray:
        return measure_velocity(self.model, self.sums, u / np.linalg.norm(u, axis=1, keepdims=True),
                                self.nodes.w)[0]

    def velocity(self) -> np.ndarray:
        """v at the nodes (also kept as the first stage of the next step)."""
        if self.f is None:
            self.f, self.psi = measure_velocity(self.model, self.sums, self.nodes.x, self.nodes.w)
        return self.f

    def max_drift(self) -> float:
        v = self.velocity()
        return float(np.sqrt(np.einsum("nd,nd->n", v, v).max())) if len(self.nodes) else 0.0

    # --- snapshots --------------------------------------------------------------------------------
    def row(self, output_points: int, smoothing: float) -> dict:
        """The snapshot of the node measure: the PDE's per-snapshot fields and the nodes themselves."""
        n = self.nodes
        v = self.velocity()
        if self.psi is None and self.sums is not None:
            self.f = None
            v = self.velocity()
        space = self.space
        c = space.particle_coefficients(n.x, n.w, self.degree)
        density = space.on_output_grid(space.heat_smooth(c, smoothing), output_points)
        speed2 = np.einsum("nd,nd->n", v, v)
        return {"t": self.t, "coeffs": c, "degree": self.degree,
                "energy": measure_energy(self.model, self.sums, n.x, n.w, self.psi), "mass": float(n.w.sum()),
                "min_density": float(np.min(density)), "tail": float(space.tail(c)),
                "dissipation": float(self.model.sign * (n.w @ speed2)), "density": density,
                "nodes": {"x": n.x.copy(), "w": n.w.copy(), "count": n.count.copy(),
                          "max_drift": float(math.sqrt(speed2.max()))}}

    def state(self) -> dict:
        """Restart state (arrays and scalars): with it :meth:`run` continues bit for bit."""
        return {"t": self.t, "x": self.nodes.x.copy(), "w": self.nodes.w.copy(), "count": self.nodes.count.copy(),
                "dt": float(self.dt) if self.dt is not None else float("nan"), "node_nsteps": self.nsteps,
                "node_nrejected": self.nrejected, "merges": [list(m) for m in self.merges],
                "node_facold": self.controller.facold}

    def restore(self, state: dict) -> None:
        self.t = float(state["t"])
        self.nodes = Nodes(np.ascontiguousarray(state["x"], dtype=float), np.asarray(state["w"], dtype=float),
                           np.asarray(state["count"], dtype=np.int64))
        dt = float(state["dt"])
        self.dt = dt if math.isfinite(dt) else None
        self.nsteps, self.nrejected = int(state["node_nsteps"]), int(state["node_nrejected"])
        self.merges = [tuple(m) for m in state.get("merges", [])]
        self.controller.facold = float(state["node_facold"])
        self.f = self.psi = None

    # --- stepping ---------------------------------------------------------------------------------
    def run(self, t_final: float, *, save_time: Callable[[], float] | None = None,
            on_save: Callable[[bool], None] | None = None, progress: Callable[[dict], None] | None = None,
            max_steps: int = 10 ** 9, stationary: bool = True) -> tuple[str, str]:
        """Step to ``t_final`` (or until stationary); returns (stop reason, message).

        ``save_time()`` is the next snapshot time (steps land on it) and ``on_save(final)`` is called at
        each; ``progress`` after every accepted step. The stop reasons are "stationary", "t_final",
        "max_steps", "non-finite"; KeyboardInterrupt propagates (the state is that of the last step)."""
        while True:
            v = self.velocity()
            drift = self.max_drift()
            if not math.isfinite(drift):
                return "non-finite", f"non-finite node velocity at t = {self.t:.6g}"
            if stationary and drift <= self.drift_tol:
                return "stationary", (f"max |v| over the {len(self.nodes)} nodes = {drift:.3g} <= drift_tol "
                                      f"{self.drift_tol:g}")
            if self.t >= t_final:
                return "t_final", f"reached t_final (max |v| over the nodes {drift:.3g})"
            if self.nsteps >= max_steps:
                return "max_steps", f"{max_steps} accepted node steps"
            t_save = min(save_time() if save_time is not None else t_final, t_final)
            if self.dt is None:
                self.dt = 0.01 / drift if drift > 0 else t_save - self.t
            h = min(self.dt, t_save - self.t)
            lands = h >= t_save - self.t
            with np.errstate(all="ignore"):
                u, f_new, err = self.stepper.step(self.t, self.nodes.x, h, v)
                errn = float(np.sqrt(np.einsum("nd,nd->n", err, err).max())) / (self.atol + self.rtol)
            ok, self.dt = self.controller.propose(h, errn if math.isfinite(errn) else math.inf)
            if not ok:
                self.nrejected += 1
                if not math.isfinite(self.dt) or self.dt < 1e-14 * max(1.0, abs(self.t)):
                    return "non-finite", ("node step size underflow" if math.isfinite(errn)
                                          else "non-finite node velocity")
                continue
            x = u / np.linalg.norm(u, axis=1, keepdims=True)
            if not np.all(np.isfinite(x)):
                return "non-finite", f"non-finite node positions after the step from t = {self.t:.6g}"
            self.t = t_save if lands else self.t + h
            self.nsteps += 1
            before = len(self.nodes)
            self.nodes, merged = _merge(Nodes(x, self.nodes.w, self.nodes.count), self.merge_tol)
            # F(u) = v(u / |u|): the velocity at the new nodes, unless merges changed the measure
            self.f, self.psi = (None, None) if merged else (f_new, None)
            if merged:
                self.merges.append((self.t, before, len(self.nodes)))
            if progress is not None:
                progress({"t": self.t, "dt": h, "nodes": len(self.nodes), "nsteps": self.nsteps})
            if lands and on_save is not None:
                on_save(False)
