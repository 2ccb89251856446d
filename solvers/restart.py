"""Restart states: what a run continues from, bit for bit, as one versioned dataclass per phase.

A PDE run is in its Eulerian (spectral) phase (:class:`EulerianState`) or, past the handoff, in its
Lagrangian (node) phase (:class:`LagrangianState`); a particle run has :class:`ParticleState`. Each is
built by the phase that owns it and parsed by its ``from_dict``. Results, callbacks and checkpoints
carry ``to_dict()``: arrays (ndarray, ndim >= 1) and JSON values under the keys the archive stores
(``solvers.app.archive``), so a dict read back from an archive, also one written before a key or the
``version`` existed, is accepted (a missing key takes the value a run without it had), and one of a newer
``version`` than this software knows is refused.

Times are in the model's time units; positions are unit vectors; angles are in radians.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .continuation_record import Handoff
from .terminal import Plateau, Stage, TerminalState

__all__ = ["RunState", "EulerianState", "LagrangianState", "ParticleState", "pde_state_from_dict"]


def _version(cls, d: dict) -> int:
    """The state's version in ``d`` (1 when absent: states written before the key); ValueError for a newer
    one than this software reads."""
    v = int(d.get("version", 1))
    if v > cls.VERSION:
        raise ValueError(f"the restart state ({cls.__name__}) has version {v}, newer than the version {cls.VERSION} "
                         "this software reads; upgrade attnpde")
    return v


def _nan_or(x) -> float:
    return float("nan") if x is None else float(x)


@dataclass(kw_only=True)
class RunState:
    """What every restart state holds.

    Attributes
    ----------
    version : int
        Layout version of the state (``VERSION`` of its class when written by this software).
    t : float
        Time of the state (model time units).
    last_snapshot_t : float or None
        Time of the last snapshot taken; below ``t`` for a state kept between snapshots (an interruption's
        or a checkpoint's). None: no snapshot yet.
    nsteps, nrejected : int
        Accepted and rejected steps (of the PDE: the spectral ones).
    save_index : int
        The next snapshot k (at ``snapshot_time(k)``).
    initial : str
        Description of the initial data.
    settings : dict or None
        What a restart must share with the run it continues (checked on resume); None: not recorded.
    """

    VERSION: ClassVar[int] = 1

    version: int = 1
    t: float
    last_snapshot_t: float | None
    nsteps: int
    nrejected: int
    save_index: int
    initial: str = "restart"
    settings: dict | None = None

    @staticmethod
    def _common(d: dict) -> dict:
        """The common fields of a state dict (defaults of states written before a key existed)."""
        t = float(d["t"])
        last = d.get("last_snapshot_t", t)
        return {"t": t, "last_snapshot_t": None if last is None else float(last), "nsteps": int(d["nsteps"]),
                "nrejected": int(d["nrejected"]), "save_index": int(d["save_index"]),
                "initial": str(d.get("initial", "restart")), "settings": d.get("settings")}


@dataclass(kw_only=True)
class _SpectralPart(RunState):
    """The fields of a PDE state that its spectral phase leaves, also past the handoff.

    Attributes
    ----------
    step_log : int
        Attempted spectral steps the run logged up to this state (the archive's rows of them).
    refinements : list of (t, old degree, new degree)
    grids : list of (degree, *grid sizes)
        The computational grid of every degree used.
    degree : int
        Resolution (circle: modes K; sphere: maximal degree L). Past the handoff: the handoff degree.
    coeffs : (n,) complex ndarray
        Canonical coefficients of the state. Past the handoff: those of the last snapshot's node measure
        up to the handoff degree (of the handoff state before the first node snapshot).
    facold : float
        The spectral step-size controller's memory (frozen at the handoff).
    """

    step_log: int = 0
    refinements: list = field(default_factory=list)
    grids: list = field(default_factory=list)
    degree: int
    coeffs: np.ndarray
    facold: float

    @staticmethod
    def _spectral(d: dict) -> dict:
        return {"step_log": int(d.get("step_log", 0)), "refinements": [tuple(r) for r in d.get("refinements", [])],
                "grids": [tuple(r) for r in d.get("grids", [])], "degree": int(d["degree"]),
                "coeffs": np.asarray(d["coeffs"], dtype=complex), "facold": float(d["facold"])}

    def _spectral_dict(self) -> dict:
        return {"t": self.t, "last_snapshot_t": self.last_snapshot_t, "step_log": self.step_log,
                "nsteps": self.nsteps, "nrejected": self.nrejected, "save_index": self.save_index,
                "initial": self.initial, "refinements": [tuple(r) for r in self.refinements],
                "grids": [tuple(r) for r in self.grids], "settings": self.settings}


@dataclass(frozen=True)
class GoodState:
    """The last resolved spectral state (tail <= tail_tol, positivity and SA checks passed): the handoff's
    source.

    Attributes
    ----------
    t : float
        Its time.
    degree : int
        Its resolution.
    save_index : int
        The next snapshot k at that time.
    coeffs : (n,) complex ndarray
        Its canonical coefficients.
    """

    t: float
    degree: int
    save_index: int
    coeffs: np.ndarray


@dataclass(kw_only=True)
class EulerianState(_SpectralPart):
    """A PDE run in its spectral phase (:class:`solvers.eulerian.EulerianPhase`).

    Attributes
    ----------
    dt : float
        The next step (nan: not chosen yet).
    good : GoodState or None
        The handoff's source so far (with the Lagrangian continuation; None without one or before any).
    """

    dt: float
    good: GoodState | None = None

    def to_dict(self) -> dict:
        out = {**self._spectral_dict(), "coeffs": self.coeffs, "degree": self.degree, "dt": self.dt,
               "facold": self.facold}
        if self.good is not None:
            g = self.good
            out.update(good_t=g.t, good_degree=g.degree, good_save_index=g.save_index, good_coeffs=g.coeffs)
        out["version"] = self.version
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "EulerianState":
        good = None
        if "good_coeffs" in d:
            good = GoodState(float(d["good_t"]), int(d["good_degree"]), int(d["good_save_index"]),
                             np.asarray(d["good_coeffs"], dtype=complex))
        return cls(version=_version(cls, d), **cls._common(d), **cls._spectral(d), dt=float(d["dt"]), good=good)


@dataclass(kw_only=True)
class LagrangianState(_SpectralPart):
    """A PDE run past its handoff, in its node phase (:class:`solvers.lagrangian.LagrangianPhase`).

    ``t`` is the node measure's time; ``nsteps``, ``nrejected``, ``facold`` are the spectral phase's.

    Attributes
    ----------
    handoff : Handoff
        What the handoff was (``PDEResult.lagrangian.handoff``).
    handoff_coeffs : (n,) complex ndarray
        Canonical coefficients of the handoff state (the error-estimate rerun starts from it).
    good_t : float
        Time of the handoff state.
    good_save_index : int
        The next snapshot k at that time.
    x : (N, d) ndarray
        Node positions (unit vectors).
    w : (N,) ndarray
        Node weights (sum 1).
    count : (N,) int ndarray
        Initial nodes held by each node.
    dt : float
        The next node step (nan: not chosen yet).
    node_nsteps, node_nrejected : int
        Accepted and rejected node steps.
    merges : list of (t, nodes before, nodes after)
    node_facold : float
        The node step-size controller's memory.
    implicit : bool
        Rosenbrock (ROS34PW2) node steps, else Dormand–Prince.
    t_begin : float
        Start of the node phase (the certification attempts' schedule grows from it).
    next_attempt : float
        Time of the next certification attempt.
    quiet : (int, float) or None
        After a plateau: its group count and the time attempts resume.
    samples : list of (t, energy)
        Energies at the attempts since the last plateau.
    plateaus : list of Plateau
    diffuse_log : list of (t, diffuse mass)
        At the last two attempts.
    terminal : TerminalState or None
        The certified terminal state.
    ended : (str, str) or None
        (stop reason, message) once certified stationary.
    stages : list of Stage
        The slow stages so far (the last one may be open).
    atoms_mode : bool
        Every node is an atom: the flow is the atom system.
    forced : bool
        A forced certification attempt failed and nothing has changed since.
    kink_crossings : int
        Atoms placed off a ReLU switching line (``solvers.lagrangian.KINK``).
    """

    handoff: Handoff
    handoff_coeffs: np.ndarray
    good_t: float
    good_save_index: int
    x: np.ndarray
    w: np.ndarray
    count: np.ndarray
    dt: float
    node_nsteps: int
    node_nrejected: int
    merges: list = field(default_factory=list)
    node_facold: float
    implicit: bool = False
    t_begin: float
    next_attempt: float
    quiet: tuple | None = None
    samples: list = field(default_factory=list)
    plateaus: list = field(default_factory=list)
    diffuse_log: list = field(default_factory=list)
    terminal: TerminalState | None = None
    ended: tuple | None = None
    stages: list = field(default_factory=list)
    atoms_mode: bool = False
    forced: bool = False
    kink_crossings: int = 0

    def to_dict(self) -> dict:
        return {**self._spectral_dict(), "phase": "lagrangian", "degree": self.degree, "coeffs": self.coeffs,
                "handoff": self.handoff.to_dict(), "handoff_coeffs": self.handoff_coeffs, "good_t": self.good_t,
                "good_save_index": self.good_save_index, "dt": self.dt, "facold": self.facold, "x": self.x,
                "w": self.w, "count": self.count, "node_nsteps": self.node_nsteps,
                "node_nrejected": self.node_nrejected, "merges": [list(m) for m in self.merges],
                "node_facold": self.node_facold, "implicit": self.implicit, "t_begin": self.t_begin,
                "next_attempt": self.next_attempt, "quiet": None if self.quiet is None else list(self.quiet),
                "samples": [list(s) for s in self.samples], "plateaus": [p.to_dict() for p in self.plateaus],
                "diffuse_log": [list(d) for d in self.diffuse_log],
                "terminal": None if self.terminal is None else self.terminal.to_dict(),
                "ended": None if self.ended is None else list(self.ended),
                "stages": [st.to_dict() for st in self.stages], "atoms_mode": self.atoms_mode, "forced": self.forced,
                "kink_crossings": self.kink_crossings,
                "version": self.version}

    @classmethod
    def from_dict(cls, d: dict) -> "LagrangianState":
        common = cls._common(d)
        t = common["t"]
        q = d.get("quiet")
        return cls(
            version=_version(cls, d), **common, **cls._spectral(d), handoff=Handoff.from_dict(d["handoff"]),
            handoff_coeffs=np.asarray(d["handoff_coeffs"], dtype=complex), good_t=float(d["good_t"]),
            good_save_index=int(d["good_save_index"]), x=np.ascontiguousarray(d["x"], dtype=float),
            w=np.asarray(d["w"], dtype=float), count=np.asarray(d["count"], dtype=np.int64), dt=float(d["dt"]),
            node_nsteps=int(d["node_nsteps"]), node_nrejected=int(d["node_nrejected"]),
            merges=[tuple(m) for m in d.get("merges", [])], node_facold=float(d["node_facold"]),
            implicit=bool(d.get("implicit", False)), t_begin=float(d.get("t_begin", t)),
            next_attempt=float(d.get("next_attempt", t)), quiet=None if q is None else (int(q[0]), float(q[1])),
            samples=[(float(a), float(b)) for a, b in d.get("samples", [])],
            plateaus=[Plateau.from_dict(p) for p in d.get("plateaus", [])],
            diffuse_log=[(float(a), float(b)) for a, b in d.get("diffuse_log", [])],
            terminal=None if d.get("terminal") is None else TerminalState.from_dict(d["terminal"]),
            ended=None if d.get("ended") is None else tuple(d["ended"]),
            stages=[Stage.from_dict(st) for st in d.get("stages", [])], atoms_mode=bool(d.get("atoms_mode", False)),
            forced=bool(d.get("forced", False)), kink_crossings=int(d.get("kink_crossings", 0)))


def pde_state_from_dict(d: dict) -> EulerianState | LagrangianState:
    """The typed state of a PDE restart dict (``PDEResult.restart``, a callback's, an archive's)."""
    return LagrangianState.from_dict(d) if d.get("phase") == "lagrangian" else EulerianState.from_dict(d)


@dataclass(kw_only=True)
class ParticleState(RunState):
    """A particle run (:class:`solvers.particles.ParticleRun`).

    Attributes
    ----------
    x : (N, d) ndarray
        Positions (unit vectors).
    w : (N,) ndarray
        Weights (sum 1).
    dt : float
        The current step of "adaptive" (nan: none chosen, or a fixed-step integrator's state written before).
    rng_state : dict
        The noise generator's PCG64 state.
    stop_counts : list of int
        Cluster counts in the stopping rule's window.
    stiffness : (float, float, float) or None
        The fixed steps' largest q since the last snapshot, over the run, and the time of the first step
        beyond the stability bound (nan: none); None: not recorded (a state written before it was).
    facold : float or None
        The step-size controller's memory ("adaptive" only).
    """

    x: np.ndarray
    w: np.ndarray
    dt: float = math.nan
    rng_state: Any
    stop_counts: list = field(default_factory=list)
    stiffness: tuple | None = None
    facold: float | None = None

    def to_dict(self) -> dict:
        out = {"t": self.t, "last_snapshot_t": self.last_snapshot_t, "x": self.x, "w": self.w, "nsteps": self.nsteps,
               "nrejected": self.nrejected, "save_index": self.save_index, "dt": self.dt, "rng_state": self.rng_state,
               "stop_counts": list(self.stop_counts),
               "stiffness": None if self.stiffness is None else list(self.stiffness), "initial": self.initial,
               "settings": self.settings}
        if self.facold is not None:
            out["facold"] = self.facold
        out["version"] = self.version
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "ParticleState":
        dt = d.get("dt")
        st = d.get("stiffness")
        return cls(version=_version(cls, d), **cls._common(d), x=np.array(d["x"], dtype=float),
                   w=np.array(d["w"], dtype=float), dt=math.nan if dt is None else float(dt), rng_state=d["rng_state"],
                   stop_counts=[int(c) for c in d.get("stop_counts", [])],
                   stiffness=None if st is None else tuple(float(v) for v in st),
                   facold=float(d["facold"]) if "facold" in d else None)
