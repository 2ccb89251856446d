"""What a PDE run's Lagrangian continuation did: its handoff, its error-estimate rerun, its node steps.

:class:`ContinuationRecord` is ``PDEResult.lagrangian`` (None for a run without a handoff). Each record has
``to_dict`` / ``from_dict``: the dictionaries are the archive's layout (``/pde/lagrangian@handoff`` is the
JSON of :meth:`Handoff.to_dict`, ``/pde/lagrangian/check`` holds an :class:`ErrorEstimate`), so archives of
every format version read into the same records.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .terminal import TerminalState

__all__ = ["Handoff", "ErrorEstimate", "ContinuationRecord"]


@dataclass(frozen=True)
class Handoff:
    """The switch from the spectral solver to the node measure.

    Attributes
    ----------
    t : float
        Time of the handoff state (the last resolved spectral state).
    reason, message : str
        Why the grid could no longer follow the density (a stop reason of the spectral phase), and in words.
    degree : int
        Resolution of the handoff state (circle: modes K; sphere: degree L).
    nodes : int
        Nodes of the measure built from it.
    clipped_mass : float
        Negative quadrature weight (Gibbs undershoot) clipped at the handoff, as a mass.
    description : str
        How the nodes were placed (``space.handoff_nodes``).
    max_weight : float
        The largest node weight (the floor of the atoms' mass errors scales with it).
    smoothing : float
        Angular scale (rad) of the heat smoothing of the node snapshots' density (``space.smoothing_scale``
        of the handoff degree).
    atom_radius : float
        Grouping radius (rad) of the nodes into atoms.
    """

    t: float
    reason: str
    message: str
    degree: int
    nodes: int
    clipped_mass: float
    description: str
    max_weight: float
    smoothing: float
    atom_radius: float

    def to_dict(self) -> dict:
        return {"t": self.t, "reason": self.reason, "message": self.message, "degree": self.degree,
                "nodes": self.nodes, "clipped_mass": self.clipped_mass, "description": self.description,
                "max_weight": self.max_weight, "smoothing": self.smoothing, "atom_radius": self.atom_radius}

    @classmethod
    def from_dict(cls, d: dict) -> "Handoff":
        return cls(t=float(d["t"]), reason=str(d["reason"]), message=str(d["message"]), degree=int(d["degree"]),
                   nodes=int(d["nodes"]), clipped_mass=float(d["clipped_mass"]), description=str(d["description"]),
                   max_weight=float(d.get("max_weight", 0.0)), smoothing=float(d["smoothing"]),
                   atom_radius=float(d["atom_radius"]))


@dataclass
class ErrorEstimate:
    """The error-estimate rerun: the continuation again from the handoff state with twice the nodes.

    Attributes
    ----------
    t : float
        Where it ended: the run's end, or its own certified end when the run was certified stationary.
    initial_nodes : int
        Its nodes at the handoff.
    x : (N, d) ndarray
        Its final node positions (unit vectors).
    w : (N,) ndarray
        Their weights.
    count : (N,) int ndarray
        Initial nodes held by each node.
    nsteps : int
        Its accepted node steps.
    stop_reason : str
        How it ended.
    wall_time : float
        Its wall time (s).
    terminal : TerminalState or None
        Its certified terminal state (not archived: the archive keeps the run's, with error bars from this).
    """

    t: float
    initial_nodes: int
    x: np.ndarray
    w: np.ndarray
    count: np.ndarray
    nsteps: int
    stop_reason: str
    wall_time: float
    terminal: TerminalState | None = None

    #: the scalars the archive keeps as attributes of /pde/lagrangian/check (the arrays are its datasets)
    SCALARS = ("t", "initial_nodes", "nsteps", "stop_reason", "wall_time")

    def scalars(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.SCALARS}

    def to_dict(self) -> dict:
        return {**self.scalars(), "x": self.x, "w": self.w, "count": self.count,
                "terminal": None if self.terminal is None else self.terminal.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> "ErrorEstimate":
        return cls(t=float(d["t"]), initial_nodes=int(d["initial_nodes"]), x=np.asarray(d["x"], dtype=float),
                   w=np.asarray(d["w"], dtype=float), count=np.asarray(d["count"]), nsteps=int(d["nsteps"]),
                   stop_reason=str(d["stop_reason"]), wall_time=float(d["wall_time"]),
                   terminal=None if d.get("terminal") is None else TerminalState.from_dict(d["terminal"]))


@dataclass
class ContinuationRecord:
    """A PDE run's Lagrangian continuation (``PDEResult.lagrangian``).

    Attributes
    ----------
    handoff : Handoff
    merges : (M, 3) ndarray
        Merge steps of the nodes: t, nodes before, nodes after.
    node_nsteps, node_nrejected : int
        Accepted and rejected node steps of the whole run (not the rerun's).
    check : ErrorEstimate or None
        The error-estimate rerun; None when it did not run (or was cut).
    kink_crossings : int
        Atoms placed off a ReLU switching line (``solvers.lagrangian.KINK``).
    diffuse_rate : (float, float) or None
        (diffuse mass, how fast it fell per unit time) between the last two certification attempts.
    check_interrupted : bool
        A Ctrl-C cut the rerun: the solution reached its end and its atoms hold, without error bars (a
        resume runs the rerun again).
    """

    handoff: Handoff
    merges: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    node_nsteps: int = 0
    node_nrejected: int = 0
    check: ErrorEstimate | None = None
    kink_crossings: int = 0
    diffuse_rate: tuple[float, float] | None = None
    check_interrupted: bool = False

    def to_dict(self) -> dict:
        return {"handoff": self.handoff.to_dict(), "merges": self.merges, "node_nsteps": self.node_nsteps,
                "node_nrejected": self.node_nrejected, "check": None if self.check is None else self.check.to_dict(),
                "kink_crossings": self.kink_crossings, "diffuse_rate": self.diffuse_rate,
                "check_interrupted": self.check_interrupted}

    @classmethod
    def from_dict(cls, d: dict) -> "ContinuationRecord":
        rate = d.get("diffuse_rate")
        return cls(handoff=Handoff.from_dict(d["handoff"]),
                   merges=np.array(d.get("merges", []), dtype=float).reshape(-1, 3),
                   node_nsteps=int(d.get("node_nsteps", 0)), node_nrejected=int(d.get("node_nrejected", 0)),
                   check=None if d.get("check") is None else ErrorEstimate.from_dict(d["check"]),
                   kink_crossings=int(d.get("kink_crossings", 0)),
                   diffuse_rate=None if rate is None else (float(rate[0]), float(rate[1])),
                   check_interrupted=bool(d.get("check_interrupted", False)))
