"""Certified terminal states of the Lagrangian continuation, and the stages on the way to them.

A node measure whose nodes have gathered is grouped into atoms and the stationary atomic measure near it
is solved for directly (:func:`~solvers.balance.polish_atoms`: v(x_i) = 0 at every atom, masses fixed).
The result is accepted as the state the flow is heading to only if

1. the forces balance: Newton's method, always run (at least one step: a zero step proves nothing) and
   converging quadratically, brings every atom to |v(x_i)| <= ``BALANCE_RTOL`` S_i and <= ``CERTIFICATE``,
   S_i the sum of the sizes of the forces at x_i (each other atom's attention, each unit's drift:
   :func:`~solvers.balance.force_scales`). An absolute speed cannot tell a balanced atom from one pulled
   by a single far atom through e^{-beta (1 - cos theta)} with nothing opposing it;
2. no atom moved further than its group's extent (at least the grouping radius: a group of one node has
   no extent of its own, and the grouping cannot tell positions apart more finely), and no two atoms came
   within the grouping radius of each other (coincident atoms solve v = 0 trivially). The rule is the
   same for every atom, however light;
3. a short continuation of the node flow from the polished atoms stays put (``STAY_TIME``, at most
   ``STAY_DISTANCE``): the same state is stationary for the flow's own velocity sums.

Mass that has not collapsed is never polished away: a node still on its way to an atom has no stationary
position of its own nearby, so Newton's method either fails or moves it further than condition 2 allows,
and the flow goes on.

A state whose nodes are slow (every node slower than ``drift_tol``) but which fails the balance is a
*slow stage* (:class:`Stage`): the run records when it entered it, its slowest unbalanced atom, that atom's
speed and the time it would take to move one grouping radius, and follows the flow on.

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

from .atomic import AtomicState, Mode, arc_lengths, atomic_state
from .atoms import single_linkage_clusters
from .balance import PolishInfo, polish_atoms, scaled_residual
from .model import Model

__all__ = ["CERTIFICATE", "BALANCE_RTOL", "TerminalState", "Plateau", "Stage", "Groups", "group_nodes", "Certificate",
           "certify", "entered", "kicked", "ENTERED"]

#: max_i |v(x_i)| of a certified stationary state (radians per unit time)
CERTIFICATE = 1e-10
#: and |v(x_i)| / S_i, S_i the size of the forces at x_i (solvers.balance.force_scales)
BALANCE_RTOL = 1e-9
#: the short continuation from the polished atoms: its duration and the largest move it may make
STAY_TIME = 1.0
STAY_DISTANCE = 1e-8
#: groups of more tangent dimensions than this are not polished (the dense Newton system would be large):
#: the flow goes on merging first
POLISH_DIMENSIONS = 512
#: Newton steps of one attempt: from a state the flow has nearly reached, a few suffice
MAX_NEWTON = 12


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
    gap = arc_lengths(x, centres[labels])
    extents = np.zeros(k)
    np.maximum.at(extents, labels, gap)
    total = np.zeros((k, d))
    np.add.at(total, labels, w[:, None] * x)
    resultant = np.linalg.norm(total, axis=1) / masses
    return Groups(centres, masses, counts, extents, resultant, labels)


@dataclass
class Certificate:
    """A polished stationary atomic state, accepted (module docstring) and classified: ``verdict``,
    ``growth`` and ``mode`` (the leading unstable direction) are those of every non-neutral eigenvalue
    (:func:`~solvers.atomic.atomic_state`). ``polish`` is how Newton's method got there (the residuals
    |v(x_i)|, the force scales S_i, dead zones, underflow)."""

    t: float
    positions: np.ndarray
    masses: np.ndarray
    counts: np.ndarray
    extents: np.ndarray
    energy: float
    state: AtomicState
    polish: PolishInfo
    verdict: str = ""
    growth: float = math.nan
    mode: Mode | None = None

    def __post_init__(self) -> None:
        s = self.state
        self.verdict, self.growth, self.mode = s.verdict, float(s.growth), s.unstable_direction

    @property
    def displacement(self) -> np.ndarray:
        return self.polish.displacement

    @property
    def stable(self) -> bool:
        return self.verdict == "stable"

    def same_state(self, positions: np.ndarray, masses: np.ndarray, radius: float) -> bool:
        """Whether (positions, masses) are these atoms: the same masses, each within ``radius``."""
        if len(masses) != len(self.masses) or not np.allclose(np.sort(masses), np.sort(self.masses), atol=1e-12):
            return False
        near = np.linalg.norm(positions[:, None, :] - self.positions[None, :, :], axis=2).min(axis=1)
        return bool(np.all(near <= 2.0 * math.sin(radius / 2.0)))


def certify(model: Model, groups: Groups, radius: float, t: float, stays_put, energy
            ) -> tuple[Certificate | None, str, PolishInfo | None]:
    """Polish ``groups`` into a stationary atomic measure and accept it or not (module docstring).

    ``stays_put(positions, masses, counts)`` returns the largest move (radians) of the node flow from those
    atoms over ``STAY_TIME``; ``energy(positions, masses)`` the energy of the atomic measure. Returns
    (certificate, "", polish) or (None, why not, polish or None when Newton's method was not run)."""
    d = groups.centres.shape[1]
    k = len(groups)
    if k * (d - 1) > POLISH_DIMENSIONS:
        return None, f"{k} node groups, single nodes included: more than {POLISH_DIMENSIONS // (d - 1)} to polish", None
    if np.any(groups.resultant < 0.5):
        return None, "a group spread around a great circle", None
    allowed = np.maximum(groups.extents, radius)
    positions, info = polish_atoms(model, groups.centres, groups.masses, tol=CERTIFICATE, rtol=BALANCE_RTOL,
                                   max_iter=MAX_NEWTON, min_iter=1, max_displacement=allowed)
    if not info.converged:
        return None, f"not balanced: {info.message}", info
    over = info.displacement > allowed
    if np.any(over):
        i = int(np.argmax(info.displacement - allowed))
        return None, (f"polishing moved a group of mass {groups.masses[i]:.3g} by {info.displacement[i]:.2e} rad, "
                      f"beyond its extent {allowed[i]:.2e}"), info
    if k > 1:
        chord = np.linalg.norm(positions[:, None, :] - positions[None, :, :], axis=2)
        np.fill_diagonal(chord, np.inf)
        if chord.min() <= 2.0 * math.sin(radius / 2.0):
            # two groups polished onto (nearly) one point: a degenerate solution; the flow decides whether
            # they merge
            return None, "polishing brought two groups within the grouping radius of each other", info
    moved = stays_put(positions, groups.masses, groups.counts)
    if not moved <= STAY_DISTANCE:
        return None, f"the flow from the polished atoms moved {moved:.2e} rad in {STAY_TIME:g}", info
    state = atomic_state(model, positions, groups.masses)
    return Certificate(t, positions, groups.masses.copy(), groups.counts.copy(), groups.extents.copy(),
                       float(energy(positions, groups.masses)), state, info), "", info


@dataclass
class Stage:
    """A stretch of the flow on its way to the end (``PDEResult.stages``): a *slow stage* (every node slower
    than ``drift_tol`` while the forces do not balance) or a *plateau* (a certified saddle, :class:`Plateau`).

    Attributes
    ----------
    kind : {"slow", "plateau"}
    t_entered : float
        Slow: the certification attempt that found the nodes slow and the forces unbalanced. Plateau: when
        the flow arrived (``Plateau.t_entered``).
    t_left : float
        When the flow left it: slow, the next change of the atoms (a merge, a plateau) or the certified end;
        plateau, its kick. nan while open.
    atoms : int
        Atoms (node groups) of the state.
    atom : int
        Slow: the slowest unbalanced atom (index into the attempt's groups, heaviest first); plateau: the atom
        of a "pull" instability, -1 for "atoms".
    position : ndarray (d,)
        That atom's position.
    mass : float
        Its mass.
    speed : float
        Slow: its speed |v(x_i)| (radians per unit time); plateau: nan.
    scale : float
        Slow: the size S_i of the forces on it (its speed / scale is how far they are from balancing).
    t_move : float
        Slow: the time it would take at that speed to move one grouping radius (radius / speed). Plateau:
        log(1 / kick) / growth, the time its kick takes to grow to order one.
    growth : float
        Plateau: its growth; slow: nan.
    why : str
        Slow: why the state was not certified.
    """

    kind: str
    t_entered: float
    t_left: float
    atoms: int
    atom: int
    position: np.ndarray
    mass: float
    speed: float = math.nan
    scale: float = math.nan
    t_move: float = math.nan
    growth: float = math.nan
    why: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "t_entered": self.t_entered, "t_left": self.t_left, "atoms": self.atoms,
                "atom": self.atom, "position": np.asarray(self.position, dtype=float).tolist(), "mass": self.mass,
                "speed": self.speed, "scale": self.scale, "t_move": self.t_move, "growth": self.growth,
                "why": self.why}

    @classmethod
    def from_dict(cls, d: dict) -> "Stage":
        return cls(str(d["kind"]), float(d["t_entered"]), float(d["t_left"]), int(d["atoms"]), int(d["atom"]),
                   np.asarray(d["position"], dtype=float), float(d["mass"]), float(d["speed"]),
                   float(d["scale"]), float(d["t_move"]), float(d["growth"]), str(d.get("why", "")))

    @classmethod
    def of_plateau(cls, p: "Plateau") -> "Stage":
        atom = p.atom if p.atom >= 0 else int(np.argmax(p.masses))
        return cls("plateau", p.t_entered, p.t_certified, len(p.masses), p.atom, p.positions[atom],
                   float(p.masses[atom]), t_move=math.log(1.0 / p.kick) / p.growth if p.growth > 0 else math.inf,
                   growth=p.growth)

    def summary(self) -> str:
        left = "open" if not math.isfinite(self.t_left) else f"{self.t_left:.4g}"
        if self.kind == "slow":
            return (f"slow stage {self.t_entered:.4g} -> {left}: {self.atoms} atom(s); the slowest unbalanced, "
                    f"mass {self.mass:.4f}, moves at {self.speed:.2e} rad/time against forces of {self.scale:.2e} "
                    f"(one grouping radius in {self.t_move:.2e})")
        return (f"plateau {self.t_entered:.4g} -> {left}: {self.atoms} atom(s), growth {self.growth:.2e}")


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
        The atoms (polished to a balance of the forces), heaviest first.
    counts : ndarray (k,)
        Initial nodes in each atom.
    extents : ndarray (k,)
        How far its group's nodes still were from the atom when it was certified (radians).
    displacement : ndarray (k,)
        How far Newton's method moved each atom (radians): how far the flow still was from the state.
    max_speed : float
        max_i |v(x_i)| of the polished atoms.
    stable : bool
    verdict : {"stable", "unstable", "marginal"}
    growth : float
        The largest real part of all the non-neutral eigenvalues (1 / unit time).
    eigenvalues : ndarray
        Every non-neutral eigenvalue of parts (a) and (b) (:mod:`solvers.atomic`), by real part descending.
    neutral : int
        The number of exact symmetry directions left out of ``growth`` and ``eigenvalues`` (rotations that
        map the model to itself: a stationary state moved along them is the same state rotated).
    energy : float
    mass_errors, position_errors : ndarray (k,) or None
        From the rerun at twice the nodes (``PDEResult.atoms``' rule); None without it.
    residuals, scales : ndarray (k,)
        |v(x_i)| and the size S_i of the forces at x_i (:func:`~solvers.balance.force_scales`): the balance
        is residuals <= BALANCE_RTOL scales and <= CERTIFICATE.
    dead : ndarray (k,) of bool
        The atom sits in a dead zone (no perceptron unit acts there).
    underflow : ndarray (k,) of bool
        Every force on the atom is below the floating-point range (its balance is only that range's).
    newton_steps : int
        Newton steps of the certificate.
    energy_gap : float or None
        E(end) - E* in descent, E* - E(end) in ascent (>= 0 up to the extremum's certified gap): how far the
        end is from the global extremum of the energy (:func:`solvers.extremum`, the main paper's Prop. 3.7);
        None where that extremum is not computed (``global_note`` says why).
    is_global : bool or None
        The end is the global extremum within its error bars (:func:`solvers.compare_end`).
    extremum_energy : float or None
        E*, the extremum's energy.
    extremum_kind : {"minimum", "maximum", ""}
    global_note : str
        Why the end is or is not the global extremum, or why it was not compared.
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
    residuals: np.ndarray | None = None
    scales: np.ndarray | None = None
    dead: np.ndarray | None = None
    underflow: np.ndarray | None = None
    newton_steps: int = 0
    energy_gap: float | None = None
    is_global: bool | None = None
    extremum_energy: float | None = None
    extremum_kind: str = ""
    global_note: str = ""

    @classmethod
    def from_certificate(cls, cert: Certificate) -> "TerminalState":
        s, p = cert.state, cert.polish
        o = np.argsort(-cert.masses, kind="stable")
        return cls(cert.t, cert.positions[o], cert.masses[o], cert.counts[o], cert.extents[o], p.displacement[o],
                   float(s.max_speed), cert.stable, cert.verdict, float(cert.growth), np.asarray(s.eigenvalues),
                   int(s.n_neutral), cert.energy, residuals=p.residuals[o], scales=p.scales[o], dead=p.dead[o],
                   underflow=p.underflow[o], newton_steps=int(p.iterations))

    def __len__(self) -> int:
        return len(self.masses)

    @property
    def balance(self) -> float | None:
        """max_i |v(x_i)| / S_i over the atoms some force acts on (None for a state stored without them)."""
        return None if self.scales is None else scaled_residual(self.residuals, self.scales)

    @property
    def left_out(self) -> str:
        """What ``growth`` leaves out, and why."""
        if not self.neutral:
            return "nothing"
        return (f"{self.neutral} neutral direction(s): rotations that map the model to itself move the state "
                "along a circle of the same states (eigenvalue 0 exactly)")

    _ARRAYS = ("positions", "masses", "counts", "extents", "displacement", "mass_errors", "position_errors",
               "residuals", "scales", "dead", "underflow")

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("t", "max_speed", "stable", "verdict", "growth", "neutral", "energy",
                                             "check_nodes", "newton_steps", "energy_gap", "is_global",
                                             "extremum_energy", "extremum_kind", "global_note")}
        for k in self._ARRAYS:
            v = getattr(self, k)
            out[k] = None if v is None else np.asarray(v).tolist()
        ev = np.asarray(self.eigenvalues)
        out["eigenvalues"] = ev.real.tolist()
        out["eigenvalues_imag"] = ev.imag.tolist() if np.iscomplexobj(ev) else None
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "TerminalState":
        def arr(k, dt=float):
            return None if d.get(k) is None else np.asarray(d[k], dtype=dt)
        ev = np.asarray(d["eigenvalues"], dtype=float)
        if d.get("eigenvalues_imag") is not None:
            ev = ev + 1j * np.asarray(d["eigenvalues_imag"], dtype=float)
        return cls(float(d["t"]), arr("positions"), arr("masses"), arr("counts", np.int64), arr("extents"),
                   arr("displacement"), float(d["max_speed"]), bool(d["stable"]), str(d["verdict"]),
                   float(d["growth"]), ev, int(d["neutral"]), float(d["energy"]), arr("mass_errors"),
                   arr("position_errors"), None if d.get("check_nodes") is None else int(d["check_nodes"]),
                   arr("residuals"), arr("scales"), arr("dead", bool), arr("underflow", bool),
                   int(d.get("newton_steps", 0)), _maybe(d.get("energy_gap"), float),
                   _maybe(d.get("is_global"), bool), _maybe(d.get("extremum_energy"), float),
                   str(d.get("extremum_kind", "")), str(d.get("global_note", "")))

    def summary_lines(self) -> list[str]:
        word = {"stable": "stable", "unstable": "unstable (a saddle)", "marginal": "marginal"}[self.verdict]
        lines = [f"terminal state: certified at t = {self.t:.6g}, {len(self)} atom(s), {word}, growth "
                 f"{self.growth:.3e}, max |v| {self.max_speed:.1e}" + (f", {self.neutral} neutral (symmetry)"
                                                                       if self.neutral else "")]
        if self.balance is not None:
            lines.append(f"  balanced: max |v(x_i)| / S_i = {self.balance:.1e} (forces cancel to that fraction of "
                         f"their size) after {self.newton_steps} Newton step(s), which moved the atoms by at most "
                         f"{float(np.max(self.displacement, initial=0.0)):.1e} rad")
        if self.energy_gap is not None:
            lines.append(f"  against the global {self.extremum_kind or 'extremum'} of the energy (E* = "
                         f"{self.extremum_energy:.10g}): energy gap {self.energy_gap:.3e}; "
                         f"{'the end IS the global ' if self.is_global else 'not the global '}"
                         f"{self.extremum_kind or 'extremum'} ({self.global_note})")
        elif self.global_note:
            lines.append(f"  global extremum: {self.global_note}")
        err = self.mass_errors if self.mass_errors is not None else [None] * len(self)
        for i, (p, m, e, c) in enumerate(zip(self.positions, self.masses, err, self.counts)):
            pm = f" ± {e:.1e}" if e is not None and math.isfinite(e) else ""
            notes = []
            if self.dead is not None and self.dead[i]:
                notes.append("in a dead zone")
            if self.underflow is not None and self.underflow[i]:
                notes.append("every force on it underflows: balanced only to the floating-point range")
            lines.append(f"  atom mass {m:.4f}{pm} at {np.round(p, 4).tolist()} ({int(c)} initial nodes"
                         + "".join(f"; {n}" for n in notes) + ")")
        return lines


def _maybe(v, kind):
    """None, or ``v`` as ``kind`` (archives store a missing value as NaN or an empty string)."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v):
        return None
    return kind(v)
