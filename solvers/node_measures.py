"""Node measures mu = sum_j w_j delta_{x_j} of the Lagrangian continuation (:mod:`solvers.lagrangian`): the
measure at the handoff, its atoms and diffuse part, and the error estimate of the atoms from the rerun at
twice the nodes.

- Atoms of a node measure (:func:`node_atoms`): groups of nodes within ``atom_radius`` of each other
  (single linkage) that hold at least two initial nodes and have a node within ``atom_radius`` of their
  centre (the normalised weighted mean, which is the atom's position; its resultant length at least
  1/2); the rest is the *diffuse part* (mass that has not collapsed yet: in descent with a ReLU
  perceptron, the mass in the dead zone, where every unit is off, crystallises into atoms only over
  thousands of time units). The centre condition leaves out groups whose mean is not where their mass is: a ring of
  nodes closing in on a point (data symmetric about an axis on S^2; its mean is the ring's axis), a
  strongly bent chain, a group around a great circle. An atom's ``extent`` is the largest distance of
  its nodes from its centre: a group still contracting along a straight or gently bent chain of linked
  nodes (common on S^1 at t_final, where a chain is never left out) is an atom whose extent says how far
  it is from a point. ``atom_radius`` defaults to a tenth of the initial
  node spacing (``space.node_spacing``: 2 pi / N on S^1, sqrt(4 pi / N) on S^2): nodes that never
  compressed stay farther apart.
- Error estimate (:func:`estimate_atoms`): the same continuation from the same handoff state with twice
  the nodes, to the same time; atoms matched by position; the error of a mass (position) is its
  difference between the two runs extrapolated to infinitely many nodes (Richardson, with the order of
  the node measure's quadrature of a basin: N^-1 on S^1, where equal-mass nodes place a boundary within
  one node, and N^-1/2 on S^2, where the node spacing is N^-1/2: the difference times 2, and times 3.4),
  and likewise for the diffuse mass; an atom without a partner: its own mass. What the rerun cannot see
  is not in it: the handoff state itself (the Eulerian solution at the handoff, resolved to tail_tol).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from .atomic import arc_lengths
from .atoms import Atoms, single_linkage_clusters

__all__ = ["Nodes", "handoff_nodes", "NodeAtoms", "node_atoms", "estimate_atoms", "not_stationary_note", "UNRESOLVED",
           "unresolved", "DUST"]


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


def handoff_nodes(space, c: np.ndarray, degree: int, n: int) -> tuple[Nodes, float, str]:
    """The node measure of the density with canonical coefficients ``c`` of resolution ``degree`` on
    ``space`` (its ``handoff_nodes``: see the module docstring), about ``n`` nodes. Returns (nodes, clipped
    mass, description)."""
    x, w, clipped, desc = space.handoff_nodes(np.asarray(c, dtype=complex), int(degree), int(n))
    return Nodes(x, w, np.ones(w.size, dtype=np.int64)), clipped, desc


# ----------------------------------------------------------------------------------------------
# atoms of a node measure
# ----------------------------------------------------------------------------------------------
class NodeAtoms(Atoms):
    """Atoms of a node measure: ``positions``, ``masses`` (heaviest first), ``counts`` (initial nodes in each
    atom), ``extents`` (radians: the largest distance of an atom's nodes from its position), ``diffuse``
    (the mass outside atoms), ``radius`` (the grouping radius). After :func:`estimate_atoms` also
    ``mass_errors``, ``position_errors`` (radians), ``diffuse_error`` and ``check_nodes`` (the node count
    of the finer run); otherwise these are None."""

    def __init__(self, positions, masses, counts, diffuse: float, radius: float, extents=None,
                 dust: float = 0.0, dust_groups: int = 0) -> None:
        order = np.argsort(-np.asarray(masses), kind="stable")
        super().__init__(positions, masses)
        self.counts = np.asarray(counts, dtype=np.int64)[order]
        self.extents = (np.full(len(order), np.nan) if extents is None else np.asarray(extents, dtype=float))[order]
        self.diffuse = float(diffuse)
        self.radius = float(radius)
        self.dust, self.dust_groups = float(dust), int(dust_groups)
        self.mass_errors: np.ndarray | None = None
        self.position_errors: np.ndarray | None = None
        self.diffuse_error: float | None = None
        self.check_nodes: int | None = None

    def heavy(self, min_mass: float) -> "NodeAtoms":
        keep = self.masses >= min_mass
        out = NodeAtoms(self.positions[keep], self.masses[keep], self.counts[keep],
                        self.diffuse + float(self.masses[~keep].sum()), self.radius, self.extents[keep],
                        self.dust, self.dust_groups)
        if self.mass_errors is not None:
            out.mass_errors, out.position_errors = self.mass_errors[keep], self.position_errors[keep]
            out.diffuse_error, out.check_nodes = self.diffuse_error, self.check_nodes
        return out

    def __repr__(self) -> str:
        err = self.mass_errors if self.mass_errors is not None else [None] * len(self)
        rows = ", ".join(f"{m:.4f}" + (f"±{e:.1e}" if e is not None else "") + f"@{np.round(p, 4).tolist()}"
                         for p, m, e in zip(self.positions, self.masses, err))
        return (f"NodeAtoms({len(self)}: {rows}; diffuse {self.diffuse:.4f}"
                + (f"; dust {self.dust:.4f} in {self.dust_groups} groups" if self.dust_groups else "") + ")")


def not_stationary_note(stop_reason: str, t_last: float, groups: int) -> str | None:
    """The line that says what the ``groups`` node groups of the last snapshot (at ``t_last``) are when the
    continuation ran to t_final still moving: the measure at that time, in which the groups that still move
    may yet merge or grow (a ReLU perceptron's dead zone collapses slowly: docs/numerics.md). None for any
    other end: "stationary"; an interruption (which the run's message already
    explains, and which may have come after the stop, in the error-estimate rerun); or no group at all."""
    if stop_reason != "t_final" or groups == 0:
        return None
    return (f"not stationary at t_final: these node groups are the measure at t = {t_last:.6g}, and those still "
            "moving may yet merge or grow")


#: what a listing adds to a node group whose mass is not above its mass error (:func:`unresolved`)
UNRESOLVED = " (not resolved: its mass is within its error)"


def unresolved(masses, errors) -> np.ndarray:
    """Which node groups have a mass no larger than its error estimate (:func:`estimate_atoms`): groups the
    node count does not resolve, e.g. a few nodes still on their way, or the nodes of a polar ring of the
    S^2 Gauss grid, closer than the default radius from the start, that the clipping of rho <= 0 left as an
    arc. All False without errors."""
    masses = np.asarray(masses, dtype=float)
    return np.zeros(masses.shape, bool) if errors is None else np.asarray(errors, dtype=float) >= masses


#: node groups lighter than this (of the total mass) are dust, counted apart from the atoms: along a ReLU
#: unit's dead-zone boundary the nodes gather into strings of tiny groups that are not the run's answer
DUST = 1e-3


def node_atoms(nodes: Nodes, radius: float, dust: float = DUST) -> NodeAtoms:
    """Atoms of a node measure: single-linkage groups at geodesic ``radius`` holding >= 2 initial nodes,
    with a node within ``radius`` of their centre (module docstring); groups lighter than ``dust`` are
    counted apart (``NodeAtoms.dust``, ``dust_groups``)."""
    x, w, count = nodes.x, nodes.w, nodes.count
    d = x.shape[1]
    if len(w) == 0:
        return NodeAtoms(np.zeros((0, d)), np.zeros(0), np.zeros(0), 0.0, radius)
    centres, masses, labels = single_linkage_clusters(x, w, radius)
    k = len(masses)
    counts = np.bincount(labels, weights=count, minlength=k).astype(np.int64)
    # geodesic distance of each node from its group's centre, from the chord (accurate for small angles)
    gap = arc_lengths(x, centres[labels])
    extents, nearest = np.zeros(k), np.full(k, np.inf)
    np.maximum.at(extents, labels, gap)
    np.minimum.at(nearest, labels, gap)
    # the mean resultant length: near 0 for a group around a whole great circle, whose normalised mean is a
    # round-off direction (which may even fall on one of its nodes)
    total = np.zeros((k, d))
    np.add.at(total, labels, w[:, None] * x)
    resultant = np.divide(np.linalg.norm(total, axis=1), masses, out=np.zeros(k), where=masses > 0)
    atom = (counts >= 2) & (nearest <= radius) & (resultant >= 0.5)
    small = atom & (masses < dust)
    atom &= ~small
    rest = ~atom & ~small
    return NodeAtoms(centres[atom], masses[atom], counts[atom], float(masses[rest].sum()), radius, extents[atom],
                     float(masses[small].sum()), int(small.sum()))


def estimate_atoms(atoms: NodeAtoms, check: NodeAtoms, check_nodes: int, floor: float = 0.0,
                   match_radius: float = 0.1, ratio: float = 2.0, order: float = 1.0) -> NodeAtoms:
    """``atoms`` with the error estimate from ``check``, the atoms of the same continuation with ``ratio``
    times the nodes at the same time: atoms paired one to one by least total distance (pairs farther than
    ``match_radius`` radians do not count). A paired atom's errors are its mass and position differences
    extrapolated (Richardson): if a quantity converges like N^-order in the node count, its error at N is
    the difference divided by 1 - ratio^-order (2 for order 1 and ratio 2: the difference alone is about
    half the error). An unpaired atom's mass error is its own mass (its position error is unknown, nan).
    Mass errors are at least ``floor`` (the caller's: the largest initial node weight per end of a basin,
    two on S^1): an atom's basin boundary lies somewhere within one node spacing, so its mass is not known
    more finely (two runs can agree exactly when both grids put the boundary between the same mass
    coordinates)."""
    out = NodeAtoms(atoms.positions, atoms.masses, atoms.counts, atoms.diffuse, atoms.radius, atoms.extents,
                    atoms.dust, atoms.dust_groups)
    n = len(out)
    merr = out.masses.copy()
    perr = np.full(n, np.nan)
    gain = 1.0 / (1.0 - float(ratio) ** -float(order))
    if n and len(check):
        dist = np.arccos(np.clip(out.positions @ check.positions.T, -1.0, 1.0))
        rows, cols = linear_sum_assignment(np.where(dist <= match_radius, dist, 1e6))
        for i, j in zip(rows, cols):
            if dist[i, j] <= match_radius:
                merr[i] = max(gain * abs(out.masses[i] - check.masses[j]), floor)
                perr[i] = gain * dist[i, j]
    out.mass_errors, out.position_errors = merr, perr
    out.diffuse_error = max(gain * abs(out.diffuse - check.diffuse), floor)
    out.check_nodes = int(check_nodes)
    return out
