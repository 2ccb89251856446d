"""Certified terminal states of the Lagrangian continuation, and the plateaus on the way to them.

A node measure that has slowed down is grouped into atoms and the stationary atomic measure near it is
solved for directly (:func:`~solvers.atomic.polish_atoms`: v(x_i) = 0 at every atom, masses fixed). The
result is accepted as the state the flow is heading to only if

1. Newton's method converged: max_i |v(x_i)| <= ``CERTIFICATE`` (1e-10 radians per unit time);
2. no atom moved further than its group's extent (at least the grouping radius: a group of one node has
   no extent of its own, and the grouping cannot tell positions apart more finely; ten grouping radii, a
   node spacing by default, for dust, below the nodes' resolution), and no two atoms came within the
   grouping radius of each other (coincident atoms solve v = 0 trivially);
3. a short continuation of the node flow from the polished atoms stays put (``STAY_TIME``, at most
   ``STAY_DISTANCE``): the same state is stationary for the flow's own velocity sums.

Mass that has not collapsed is never polished away: a node still on its way to an atom has no stationary
position of its own nearby, so Newton's method either fails or moves it further than condition 2 allows,
and the flow goes on. Nodes that stop without ever meeting another node (a stationary lattice of single
nodes) are certified as what they are, atoms of one initial node each, whose masses are within their
error estimate.

The certified state is then classified by :func:`~solvers.atomic.atomic_state`. A stable one ends the
run ("stationary"). An unstable one (a saddle of the energy for gradient flows) is a *metastable plateau*:
the flow can approach it along its stable directions and stay near it for a time that grows like
log(1 / distance) / growth. The run records it (:class:`Plateau`), replaces the nodes by the polished atoms,
moves them by ``kick`` radians along the unstable direction (part "atoms": every atom along its
displacement, scaled so that the largest is ``kick``; part "pull": the atom is split into two halves at
x_i +- kick xi) and goes on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .atomic import atomic_state, polish_atoms
from .atoms import single_linkage_clusters
from .model import Model

__all__ = ["CERTIFICATE", "TerminalState", "Plateau", "Groups", "group_nodes", "Certificate", "certify", "entered",
           "kicked", "ENTERED"]

#: max_i |v(x_i)| of a certified stationary state (radians per unit time)
CERTIFICATE = 1e-10
#: the short continuation from the polished atoms: its duration and the largest move it may make
STAY_TIME = 1.0
STAY_DISTANCE = 1e-8
#: groups of more tangent dimensions than this are not polished (the dense Newton system would be large):
#: the flow goes on merging first
POLISH_DIMENSIONS = 512
#: Newton steps of one attempt: from a state the flow has nearly reached, a few suffice
MAX_NEWTON = 12
#: atoms lighter than this (of the total mass) are below what the node count resolves (dust): an unstable pull
#: of theirs is reported, but does not make the state a plateau or decide its verdict
DUST = 1e-3


@dataclass
class Groups:
    """The nodes grouped by single linkage at ``radius``: centres (k, d), masses (k,), counts (k,) of
    initial nodes, extents (k,) (radians: the largest distance of a member from its centre), resultant
    (k,) (|weighted mean| / mass: near 1 for a compact group), labels (N,) of the nodes."""

    centres: np.ndarray
    masses: np.ndarray
    counts: np.ndarray
    extents: np.ndarray
    resultant: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.masses)


def group_nodes(x: np.ndarray, w: np.ndarray, count: np.ndarray, radius: float) -> Groups:
    """Single-linkage groups of the node measure at geodesic ``radius`` (every node in one group)."""
    centres, masses, labels = single_linkage_clusters(x, w, radius)
    k, d = len(masses), x.shape[1]
    counts = np.bincount(labels, weights=count, minlength=k).astype(np.int64)
    gap = 2.0 * np.arcsin(np.minimum(np.linalg.norm(x - centres[labels], axis=1) / 2.0, 1.0))
    extents = np.zeros(k)
    np.maximum.at(extents, labels, gap)
    total = np.zeros((k, d))
    np.add.at(total, labels, w[:, None] * x)
    resultant = np.linalg.norm(total, axis=1) / masses
    return Groups(centres, masses, counts, extents, resultant, labels)


@dataclass
class Certificate:
    """A polished stationary atomic state, accepted (module docstring) and classified. ``verdict``,
    ``growth`` and ``mode`` (the leading unstable direction) leave out the pull of dust atoms (mass below
    ``DUST``), whose instabilities ``dust_unstable`` counts."""

    t: float
    positions: np.ndarray
    masses: np.ndarray
    counts: np.ndarray
    extents: np.ndarray
    displacement: np.ndarray
    energy: float
    state: object        # solvers.atomic.AtomicState
    verdict: str = ""
    growth: float = math.nan
    mode: object = None
    dust_unstable: int = 0

    def __post_init__(self) -> None:
        s = self.state
        dust = self.masses < DUST
        pulls = np.real(np.asarray(s.pull_eigenvalues))                       # (k, d - 1)
        reduced = np.real(np.asarray(s.reduced_eigenvalues))
        kept = [(float(v), ("atoms", j)) for j, v in enumerate(reduced)]
        kept += [(float(v), ("pull", (i, j))) for i in np.nonzero(~dust)[0] for j, v in enumerate(pulls[i])]
        self.dust_unstable = int(np.sum(np.any(pulls[dust] > s.zero_tol, axis=1))) if dust.any() else 0
        if not kept:
            self.verdict, self.growth, self.mode = s.verdict, float(s.growth), s.unstable_direction
            return
        growth, (part, where) = max(kept, key=lambda g: g[0])
        self.growth = growth
        self.verdict = "unstable" if growth > s.zero_tol else ("stable" if growth < -s.zero_tol else "marginal")
        from .atomic import Mode
        if part == "atoms":
            self.mode = Mode("atoms", s.reduced_eigenvalues[where], s.reduced_vectors[where])
        else:
            i, j = where
            self.mode = Mode("pull", s.pull_eigenvalues[i][j], s.pull_vectors[i][j], atom=int(i))

    @property
    def stable(self) -> bool:
        return self.verdict == "stable"

    def same_state(self, positions: np.ndarray, masses: np.ndarray, radius: float) -> bool:
        """Whether (positions, masses) are these atoms: the same masses, each within ``radius``."""
        if len(masses) != len(self.masses) or not np.allclose(np.sort(masses), np.sort(self.masses), atol=1e-12):
            return False
        near = np.linalg.norm(positions[:, None, :] - self.positions[None, :, :], axis=2).min(axis=1)
        return bool(np.all(near <= 2.0 * math.sin(radius / 2.0)))


def certify(model: Model, groups: Groups, radius: float, t: float, stays_put, energy) -> tuple[Certificate | None, str]:
    """Polish ``groups`` into a stationary atomic measure and accept it or not (module docstring).

    ``stays_put(positions, masses, counts)`` returns the largest move (radians) of the node flow from those
    atoms over ``STAY_TIME``; ``energy(positions, masses)`` the energy of the atomic measure. Returns
    (certificate, "") or (None, why not)."""
    d = groups.centres.shape[1]
    k = len(groups)
    if k * (d - 1) > POLISH_DIMENSIONS:
        return None, f"{k} node groups, single nodes included: more than {POLISH_DIMENSIONS // (d - 1)} to polish"
    if np.any(groups.resultant < 0.5):
        return None, "a group spread around a great circle"
    # dust (below the nodes' resolution) is known only to about a node spacing, ten grouping radii by default:
    # in the flat field far out in a dead zone such a node can rest 1e-10 from an equilibrium 4e-4 away
    allowed = np.maximum(groups.extents, np.where(groups.masses < DUST, 10.0 * radius, radius))
    positions, info = polish_atoms(model, groups.centres, groups.masses, tol=CERTIFICATE, max_iter=MAX_NEWTON,
                                   max_displacement=allowed)
    if not info.converged:
        return None, f"Newton's method did not converge: {info.message}"
    over = info.displacement > allowed
    if np.any(over):
        i = int(np.argmax(info.displacement - allowed))
        return None, (f"polishing moved a group of mass {groups.masses[i]:.3g} by {info.displacement[i]:.2e} rad, "
                      f"beyond its extent {allowed[i]:.2e}")
    if k > 1:
        chord = np.linalg.norm(positions[:, None, :] - positions[None, :, :], axis=2)
        np.fill_diagonal(chord, np.inf)
        if chord.min() <= 2.0 * math.sin(radius / 2.0):
            # two groups polished onto (nearly) one point: a degenerate solution; the flow decides whether
            # they merge
            return None, "polishing brought two groups within the grouping radius of each other"
    moved = stays_put(positions, groups.masses, groups.counts)
    if not moved <= STAY_DISTANCE:
        return None, f"the flow from the polished atoms moved {moved:.2e} rad in {STAY_TIME:g}"
    state = atomic_state(model, positions, groups.masses)
    return Certificate(t, positions, groups.masses.copy(), groups.counts.copy(), groups.extents.copy(),
                       info.displacement, float(energy(positions, groups.masses)), state), ""


@dataclass
class Plateau:
    """A certified unstable stationary state the flow came near and left.

    Attributes
    ----------
    t_entered : float
        The first time the energy came within ``ENTERED`` of its change to the plateau's value (gradient
        flows; for other models the time it was certified), to the resolution of the energy samples (the
        certification attempts).
    t_certified : float
        When the run certified it.
    energy : float
        The energy of the polished atoms.
    growth : float
        The largest real part of its eigenvalues (1 / unit time): leaving it takes about
        log(distance / kick) / growth.
    part : {"atoms", "pull"}
        Where the instability is: the atoms as a particle system, or the pull of atom ``atom`` on mass
        near it.
    atom : int
        The atom of a "pull" instability (-1 for "atoms").
    direction : ndarray (k, d)
        The unstable direction: a tangent displacement of every atom ("atoms"), or the tangent direction at
        ``atom`` in its row ("pull"; the other rows zero).
    kick : float
        The perturbation applied along it (radians).
    positions, masses : ndarray
        The polished atoms.
    """

    t_entered: float
    t_certified: float
    energy: float
    growth: float
    part: str
    atom: int
    direction: np.ndarray
    kick: float
    positions: np.ndarray
    masses: np.ndarray

    def to_dict(self) -> dict:
        return {"t_entered": self.t_entered, "t_certified": self.t_certified, "energy": self.energy,
                "growth": self.growth, "part": self.part, "atom": self.atom, "direction": self.direction.tolist(),
                "kick": self.kick, "positions": self.positions.tolist(), "masses": self.masses.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> "Plateau":
        return cls(float(d["t_entered"]), float(d["t_certified"]), float(d["energy"]), float(d["growth"]),
                   str(d["part"]), int(d["atom"]), np.asarray(d["direction"], dtype=float), float(d["kick"]),
                   np.asarray(d["positions"], dtype=float), np.asarray(d["masses"], dtype=float))


#: a plateau is entered when the energy has come within this fraction of its drop to the plateau's
ENTERED = 1e-3


def entered(samples: list, energy: float, t_certified: float) -> float:
    """The first sampled time (t, E) at which |E - energy| <= ENTERED |E_first - energy| (descent lowers the
    energy, ascent raises it), else t_certified."""
    if not samples:
        return t_certified
    change = abs(samples[0][1] - energy)
    for t, e in samples:
        if abs(e - energy) <= ENTERED * change:
            return float(t)
    return t_certified


def kicked(cert: Certificate, kick: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, Plateau]:
    """The nodes (x, w, count) of a plateau's polished atoms moved by ``kick`` along its unstable direction,
    and the direction as a :class:`Plateau` field (the rest of the record is the caller's)."""
    mode = cert.mode
    x, w, c = cert.positions.copy(), cert.masses.copy(), cert.counts.copy()
    direction = np.zeros_like(x)
    if mode.part == "atoms":
        v = np.real(np.asarray(mode.vector, dtype=complex))
        scale = np.linalg.norm(v, axis=1).max()
        direction = v / scale
        x = x + kick * direction
        atom = -1
    else:
        atom = int(mode.atom)
        xi = np.real(np.asarray(mode.vector, dtype=complex))
        xi = xi / np.linalg.norm(xi)
        direction[atom] = xi
        half = (c[atom] + 1) // 2, c[atom] // 2
        x = np.vstack([x, x[atom] - kick * xi])
        x[atom] = x[atom] + kick * xi
        w = np.append(w, w[atom] / 2.0)
        w[atom] = w[-1]
        c = np.append(c, half[1])
        c[atom] = half[0]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    plateau = Plateau(math.nan, cert.t, cert.energy, float(cert.growth), mode.part, atom, direction, kick,
                      cert.positions.copy(), cert.masses.copy())
    return x, w, c, plateau


@dataclass
class TerminalState:
    """The certified end of a run (``PDEResult.terminal``).

    Attributes
    ----------
    t : float
        The time it was certified.
    positions, masses : ndarray (k, d), (k,)
        The atoms (polished: max |v| <= CERTIFICATE), heaviest first.
    counts : ndarray (k,)
        Initial nodes in each atom.
    extents : ndarray (k,)
        How far its group's nodes still were from the atom when it was certified (radians).
    displacement : ndarray (k,)
        How far polishing moved each atom (radians).
    max_speed : float
        max_i |v(x_i)| of the polished atoms.
    stable : bool
    verdict : {"stable", "unstable", "marginal"}
    growth : float
        The largest real part of the non-neutral eigenvalues (1 / unit time), the pull of dust atoms left out.
    eigenvalues : ndarray
        Every non-neutral eigenvalue of parts (a) and (b) (:mod:`solvers.atomic`), by real part descending.
    neutral : int
        The number of exact symmetry directions left out (rotations, without a perceptron).
    energy : float
    mass_errors, position_errors : ndarray (k,) or None
        From the rerun at twice the nodes (``PDEResult.atoms``' rule); None without it.
    dust_unstable : int
        Atoms lighter than ``DUST`` (below what the node count resolves) whose pull is unstable: reported,
        not counted in the verdict.
    """

    t: float
    positions: np.ndarray
    masses: np.ndarray
    counts: np.ndarray
    extents: np.ndarray
    displacement: np.ndarray
    max_speed: float
    stable: bool
    verdict: str
    growth: float
    eigenvalues: np.ndarray
    neutral: int
    energy: float
    mass_errors: np.ndarray | None = None
    position_errors: np.ndarray | None = None
    check_nodes: int | None = None
    dust_unstable: int = 0

    @classmethod
    def from_certificate(cls, cert: Certificate) -> "TerminalState":
        s = cert.state
        order = np.argsort(-cert.masses, kind="stable")
        return cls(cert.t, cert.positions[order], cert.masses[order], cert.counts[order], cert.extents[order],
                   cert.displacement[order], float(s.max_speed), cert.stable, cert.verdict, float(cert.growth),
                   np.asarray(s.eigenvalues), int(s.n_neutral), cert.energy, dust_unstable=cert.dust_unstable)

    def __len__(self) -> int:
        return len(self.masses)

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("t", "max_speed", "stable", "verdict", "growth", "neutral", "energy",
                                             "check_nodes", "dust_unstable")}
        for k in ("positions", "masses", "counts", "extents", "displacement", "mass_errors", "position_errors"):
            v = getattr(self, k)
            out[k] = None if v is None else np.asarray(v).tolist()
        ev = np.asarray(self.eigenvalues)
        out["eigenvalues"] = ev.real.tolist()
        out["eigenvalues_imag"] = ev.imag.tolist() if np.iscomplexobj(ev) else None
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "TerminalState":
        arr = lambda k, dt=float: None if d.get(k) is None else np.asarray(d[k], dtype=dt)  # noqa: E731
        ev = np.asarray(d["eigenvalues"], dtype=float)
        if d.get("eigenvalues_imag") is not None:
            ev = ev + 1j * np.asarray(d["eigenvalues_imag"], dtype=float)
        return cls(float(d["t"]), arr("positions"), arr("masses"), arr("counts", np.int64), arr("extents"),
                   arr("displacement"), float(d["max_speed"]), bool(d["stable"]), str(d["verdict"]),
                   float(d["growth"]), ev, int(d["neutral"]), float(d["energy"]), arr("mass_errors"),
                   arr("position_errors"), None if d.get("check_nodes") is None else int(d["check_nodes"]),
                   int(d.get("dust_unstable", 0)))

    def summary_lines(self) -> list[str]:
        word = {"stable": "stable", "unstable": "unstable (a saddle)", "marginal": "marginal"}[self.verdict]
        lines = [f"terminal state: certified at t = {self.t:.6g}, {len(self)} atom(s), {word}, growth "
                 f"{self.growth:.3e}, max |v| {self.max_speed:.1e}" + (f", {self.neutral} neutral (symmetry)"
                                                                       if self.neutral else "")
                 + (f"; {self.dust_unstable} dust atom(s) (mass < {DUST:g}, below the nodes' resolution) repel "
                    "the mass near them" if self.dust_unstable else "")]
        err = self.mass_errors if self.mass_errors is not None else [None] * len(self)
        for p, m, e, c in zip(self.positions, self.masses, err, self.counts):
            pm = f" ± {e:.1e}" if e is not None and math.isfinite(e) else ""
            lines.append(f"  atom mass {m:.4f}{pm} at {np.round(p, 4).tolist()} ({int(c)} initial nodes)")
        return lines

