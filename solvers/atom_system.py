"""The atom system: the continuation's flow once every node group is an atom (:mod:`solvers.lagrangian`).

Then the node measure is the atomic measure it has become, to within the grouping radius, and its flow is that
of k atoms with fixed masses: summed directly (each atom's own term exact), stepped by RODASP with the exact
Jacobian to ``ATOM_TOLERANCE`` (its steps resolve every growing mode: ``UNSTABLE_STEP``), in ascent merging
atoms that meet within the grouping radius at the time they meet, and carrying atoms off a ReLU unit's
switching line (``KINK``). :class:`AtomSystem` holds these parts of :class:`~solvers.lagrangian.LagrangianPhase`.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from . import terminal as term
from .node_measures import Nodes
from .stepping import Rosenbrock
from .tableaus import RosenbrockTableau, Tableau

__all__ = ["AtomSystem", "IMPLICIT_DIMENSIONS", "ATOM_TOLERANCE", "UNSTABLE_STEP", "KINK"]

#: node groups of at most this many tangent dimensions, each within the grouping radius of its centre, are the
#: atom system (AtomSystem._all_atoms), stepped with its dense Jacobian
IMPLICIT_DIMENSIONS = 768
#: the step error (radians) of the atom system (LagrangianPhase.atoms_mode): a few atoms cost little, and the
#: times of their late merges are integrals of their whole slow approach
ATOM_TOLERANCE = 1e-9
#: and its steps follow every growing mode: h x (growth rate) at most this
UNSTABLE_STEP = 0.5
#: an atom carried across a ReLU unit's switching line from within this (of <a, x> + b) is placed this far on
#: the active side (AtomSystem._off_kinks): 1e-12 rad, far below every error bar
KINK = 1e-12


class AtomSystem:
    """The atom system's part of :class:`~solvers.lagrangian.LagrangianPhase` (module docstring): when it starts
    (:meth:`_all_atoms`, :meth:`_to_atoms`), the meetings and merges of atoms in ascent, and the switching
    lines of a ReLU perceptron."""

    if TYPE_CHECKING:     # the state and methods of the phase this is a part of (LagrangianPhase)
        from .model import Model
        model: Model
        nodes: Nodes
        atom_radius: float
        atoms_mode: bool
        f: np.ndarray | None
        psi: np.ndarray | None
        _merge_slack: float | None
        forced: bool
        kink_crossings: int
        _t_step: float
        tableau: Tableau | RosenbrockTableau

        def rhs(self, t: float, u: np.ndarray, last: bool = False) -> np.ndarray: ...

        def jacobian_factor(self, u: np.ndarray, g: float) -> Callable: ...

        def _check_stiffness(self) -> None: ...

        def _choose_method(self) -> None: ...

    def _all_atoms(self, groups: "term.Groups") -> bool:
        """Whether every node group is an atom within the grouping radius: at least two initial nodes (a node
        that never met another is mass not yet collapsed) within ``atom_radius`` of its centre; and few enough
        for the atom system's dense implicit steps."""
        d = self.nodes.x.shape[1]
        return (len(groups) * (d - 1) <= IMPLICIT_DIMENSIONS and bool(np.all(groups.counts >= 2))
                and bool(np.all(groups.extents <= self.atom_radius)) and bool(np.all(groups.resultant >= 0.5)))

    def _to_atoms(self, groups: "term.Groups") -> None:
        """Replace every node group by one node at its centre (the normalised weighted mean, with the group's
        mass and initial nodes): the node measure is then the atomic measure it has become, to within the
        grouping radius, and its flow is the k-atom system, stepped from here with RODASP and its exact
        Jacobian to ``ATOM_TOLERANCE``, summed directly, and (in ascent) merging atoms that meet within the
        grouping radius."""
        first = np.full(len(groups), len(self.nodes))
        np.minimum.at(first, groups.labels, np.arange(len(self.nodes)))
        order = np.argsort(first, kind="stable")       # the nodes' own order, as _merge keeps it
        self.nodes = Nodes(np.ascontiguousarray(groups.centres[order]), groups.masses[order].copy(),
                           groups.counts[order].copy())
        self.atoms_mode = True
        self.f = self.psi = None
        self._merge_slack = None
        self.forced = False
        self._check_stiffness()

    def _meetings(self, x_old: np.ndarray, x_new: np.ndarray) -> tuple[list, bool]:
        """The pairs (i, j) of atoms within the grouping radius after the step and closer than before it (they
        meet: in ascent they merge), and whether some pair crossed the radius during the step."""
        link = 2.0 * math.sin(self.atom_radius / 2.0)
        new = np.linalg.norm(x_new[:, None, :] - x_new[None, :, :], axis=2)
        old = np.linalg.norm(x_old[:, None, :] - x_old[None, :, :], axis=2)
        i, j = np.nonzero(np.triu((new <= link) & (new < old), 1))
        return list(zip(i.tolist(), j.tolist())), bool(np.any(old[i, j] > link))

    def _meeting_time(self, x_old: np.ndarray, f_old: np.ndarray, h: float, pairs: list) -> float:
        """The time within the step from (``_t_step``, x_old) at which the first of ``pairs`` came within the
        grouping radius: the step taken again with shorter lengths, bisection and secant on its length."""
        link = 2.0 * math.sin(self.atom_radius / 2.0)
        assert isinstance(self.tableau, RosenbrockTableau)      # the atom system's steps are RODASP's
        stepper = Rosenbrock(self.rhs, self.tableau, self.jacobian_factor)
        i, j = np.array(pairs).T

        def gap(s: float) -> float:
            u = stepper.step(self._t_step, x_old, s, f_old)[0]
            u = u / np.linalg.norm(u, axis=1, keepdims=True)
            return float(np.min(np.linalg.norm(u[i] - u[j], axis=1))) - link

        lo, hi = 0.0, h
        g_lo, g_hi = float(np.min(np.linalg.norm(x_old[i] - x_old[j], axis=1))) - link, gap(hi)
        for _ in range(60):
            if hi - lo <= 1e-13 * h:
                break
            s = hi - g_hi * (hi - lo) / (g_hi - g_lo) if g_hi != g_lo else 0.5 * (lo + hi)
            if not lo < s < hi:
                s = 0.5 * (lo + hi)
            g = gap(s)
            if g > 0.0:
                lo, g_lo = s, g
            else:
                hi, g_hi = s, g
            if abs(g) <= 1e-15:
                break
        return self._t_step + hi

    def _off_kinks(self, x: np.ndarray) -> np.ndarray:
        """Atoms within ``KINK`` of a ReLU unit's switching line and carried into the unit's active side, placed
        on that side at ``KINK`` (counted in ``kink_crossings``). Past the line the unit's push grows the
        distance at its own rate from wherever the atom is; from within round-off of the line that growth moves
        the atom by less than its coordinates resolve, and steps short enough to follow the growth would
        leave it there for ever."""
        p = self.model.perceptron
        if p is None or p.activation != "relu":
            return x
        z = x @ p.a.T + p.b                                                 # (k, m)
        near = np.abs(z) <= KINK
        if not near.any():
            return x
        v = self.model.velocity_at_atoms(x, self.nodes.w)
        push = near & ((v @ p.a.T) > 0.0)
        if not push.any():
            return x
        x = x.copy()
        for i, u in zip(*np.nonzero(push)):
            t = p.a[u] - (p.a[u] @ x[i]) * x[i]                             # grad of <a_u, x> on the sphere
            x[i] += (KINK - z[i, u]) * t / (t @ t)
            x[i] /= np.linalg.norm(x[i])
            self.kink_crossings += 1
        return x

    def _merge_atoms(self, x: np.ndarray, pairs: list) -> Nodes:
        """The atoms with each linked set of ``pairs`` joined into one (normalised weighted mean, summed mass
        and initial nodes), in the order of their first member."""
        N = len(x)
        i, j = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
        # components are numbered as a traversal from atom 0 meets them: in the order of their first member
        k, index = connected_components(coo_matrix((np.ones(len(i)), (i, j)), shape=(N, N)), directed=False)
        w, count = self.nodes.w, self.nodes.count
        mass = np.bincount(index, weights=w, minlength=k)
        centre = np.zeros((k, x.shape[1]))
        np.add.at(centre, index, w[:, None] * x)
        centre /= np.linalg.norm(centre, axis=1, keepdims=True)
        counts = np.bincount(index, weights=count, minlength=k).astype(np.int64)
        return Nodes(np.ascontiguousarray(centre), mass, counts)
