"""The result of a PDE run (:class:`PDEResult`): its snapshots, diagnostics, how it ended, its atoms and summary."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import lagrangian
from .lagrangian import Nodes
from .atoms import DEFAULT_PROMINENCE
from .continuation_record import ContinuationRecord
from .model import Model
from .pde_spec import space_for
from .terminal import Stage, TerminalState

__all__ = ["PDEResult"]


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
    lagrangian : None (no handoff), or the :class:`~solvers.continuation_record.ContinuationRecord`: its
        ``handoff`` (a :class:`~solvers.continuation_record.Handoff`), ``merges``, node step counts,
        ``check`` (the error-estimate rerun at twice the nodes, an
        :class:`~solvers.continuation_record.ErrorEstimate`; None if not run) and ``check_interrupted``

    Past a handoff (``lagrangian`` not None) the snapshots are those of the node measure: ``coeffs`` its
    exact coefficients up to the handoff degree, ``density`` their heat-smoothed series on the output grid
    (scale ``lagrangian.handoff.smoothing``: ``space.smoothing_scale`` of the handoff degree), with
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
    lagrangian: ContinuationRecord | None = field(default=None, repr=False)
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
        return None if self.lagrangian is None else self.lagrangian.diffuse_rate

    @property
    def t_handoff(self) -> float | None:
        """Time of the handoff to the Lagrangian continuation (None without one)."""
        return None if self.lagrangian is None else float(self.lagrangian.handoff.t)

    def node_measure(self, i: int = -1) -> Nodes | None:
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
            handoff = self.lagrangian.handoff
            radius = float(handoff.atom_radius)
            atoms = lagrangian.node_atoms(nodes, radius)
            check = self.lagrangian.check
            # the rerun ends at the same time, or, for a certified run, at its own certified end: end against end
            same_end = check is not None and (float(check.t) == float(self.t[i]) or (
                self.terminal is not None and check.stop_reason == "stationary"))
            if i == len(self.t) - 1 and same_end:
                fine = lagrangian.Nodes(np.asarray(check.x), np.asarray(check.w), np.asarray(check.count))
                n2 = int(check.initial_nodes)
                ratio = n2 / float(handoff.nodes)
                # the grouping radius scales with the node spacing; the order of the node quadrature of a
                # basin is N^-1/(d-1) (lagrangian module docstring)
                atoms = lagrangian.estimate_atoms(
                    atoms, lagrangian.node_atoms(fine, radius / ratio ** (1.0 / (self.model.d - 1))), n2,
                    floor=self.space.basin_floor_nodes * float(handoff.max_weight),
                    ratio=ratio, order=1.0 / (self.model.d - 1))
            return atoms.heavy(min_mass) if min_mass > 0 else atoms
        return self.space.atoms(self.coefficients(i), threshold=threshold, method=method, min_mass=min_mass,
                                smoothing=smoothing, prominence=prominence)

    def step_counts(self) -> str:
        """The steps taken: the spectral solver's ``nsteps`` (``nrejected``), and past a handoff the node
        measure's (the error-estimate rerun's are not counted)."""
        text = f"{self.nsteps} spectral steps ({self.nrejected} rejected)"
        if self.lagrangian is not None:
            text += (f" + {self.lagrangian.node_nsteps} node steps "
                     f"({self.lagrangian.node_nrejected} rejected)")
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
            h = self.lagrangian.handoff
            merges = self.lagrangian.merges
            lines.append(f"  handoff at t={h.t:.6g} ({h.reason}: {h.message}), degree {h.degree}, "
                         f"{h.nodes} nodes, clipped mass {h.clipped_mass:.2e}; {len(merges)} merge steps, "
                         f"{int(merges[-1, 2]) if len(merges) else h.nodes} nodes at the end")
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
