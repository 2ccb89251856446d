"""What one PDE run is: its options (:class:`PDEOptions`) and its resolved, frozen spec (:class:`PDESpec`).

:meth:`PDESpec.resolve` fills every default of a run once, from the model and its space (``solvers.spaces``):
the resolution's cap and the handoff degree, the continuation, the nodes and their tolerances, the output grid.
The solver (``solvers.pde``), the run layer's configuration files, their refusals and the archive all read the
spec; a field that a configuration file may set declares its check (``solvers.fields.toml``), from which the
file's [pde] table is made.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from spectral.filters import make_filter
from . import validators as check
from .fields import ANGLE, DEGREE, POS, Choice, Int, Num, Table, toml
from .model import Model

__all__ = ["PDEOptions", "PDESpec", "CONTINUATIONS", "METHODS", "NODE_TOLERANCE", "SNAPSHOTS_PER_DOUBLING",
           "DENSE_DOUBLINGS", "LATE_PER_DOUBLING", "snapshot_time", "space_for"]

CONTINUATIONS = ("lagrangian", "none")
METHODS = ("DP54", "BS32")
PLANNERS = ("FFTW_ESTIMATE", "FFTW_MEASURE", "FFTW_PATIENT", "FFTW_EXHAUSTIVE")
#: a configuration file's [pde.filter]: the explicit exponential filter (its kind may be left out)
FILTER = Table({"kind": Choice(("exponential",)), "alpha": POS, "order": Int(min=2)})
#: smallest tail_tol, tail_max, positivity_tol accepted (see PDEOptions)
_ROUND_OFF_FLOOR = 1e-14


#: the nodes' default step tolerance, as a fraction of their mean spacing (PDEOptions.node_rtol)
NODE_TOLERANCE = 2.5e-3

#: with t_final = inf, snapshots are save_every apart for the first hundred, then twice as far apart for
#: every next hundred, and past DENSE_DOUBLINGS doublings ten per doubling: a run of unknown length keeps a
#: bounded number of them per decade of time (a slow stage can last to t = 1e40)
SNAPSHOTS_PER_DOUBLING = 100
DENSE_DOUBLINGS = 8
LATE_PER_DOUBLING = 10


def snapshot_time(k: int, save_every: float | None, t_final: float) -> float:
    """The time of snapshot k >= 1 (snapshot 0 is the start): k save_every up to t_final; with t_final = inf,
    the schedule of ``SNAPSHOTS_PER_DOUBLING``; without save_every, t_final."""
    if save_every is None:
        return t_final
    if math.isfinite(t_final):
        return min(k * save_every, t_final)
    n = SNAPSHOTS_PER_DOUBLING
    if k - 1 < n * DENSE_DOUBLINGS:
        b, j = divmod(k - 1, n)
        return save_every * (n * (2.0 ** b - 1.0) + 2.0 ** b * (j + 1))
    b, j = divmod(k - 1 - n * DENSE_DOUBLINGS, LATE_PER_DOUBLING)
    b += DENSE_DOUBLINGS
    return save_every * (n * (2.0 ** b - 1.0) + (n // LATE_PER_DOUBLING) * 2.0 ** b * (j + 1))


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

    rtol: float = field(default=1e-8, metadata=toml(POS))
    atol: float = field(default=1e-12, metadata=toml(POS))
    method: str = field(default="DP54", metadata=toml(Choice(METHODS)))
    cfl: float = field(default=1.0, metadata=toml(POS))
    dt0: float | None = field(default=None, metadata=toml(POS))
    dt_max: float | None = field(default=None, metadata=toml(POS))
    max_degree: int | None = field(default=None, metadata=toml(DEGREE))
    tail_tol: float = field(default=1e-4, metadata=toml(POS))
    tail_max: float = field(default=1e-3, metadata=toml(POS))
    positivity_tol: float = field(default=1e-3, metadata=toml(POS))
    sa_psi_min: float = field(default=1e-11, metadata=toml(POS))
    filter: Any = field(default=None, metadata=toml(FILTER))
    max_steps: int = field(default=10_000_000, metadata=toml(Int(min=1)))
    output_points: int | None = field(default=None, metadata=toml(Int(min=2)))
    threads: int = field(default=1, metadata=toml(Int(min=1)))
    planner: str = field(default="FFTW_ESTIMATE", metadata=toml(Choice(PLANNERS)))
    continuation: str | None = field(default=None, metadata=toml(Choice(CONTINUATIONS)))
    handoff_degree: int | None = field(default=None, metadata=toml(DEGREE))
    handoff_at: float | None = field(default=None, metadata=toml(POS))
    nodes: int | None = field(default=None, metadata=toml(Int(min=2)))
    node_rtol: float | None = field(default=None, metadata=toml(POS))
    node_atol: float | None = field(default=None, metadata=toml(POS))
    merge_tol: float = field(default=1e-6, metadata=toml(ANGLE))
    drift_tol: float = field(default=1e-10, metadata=toml(POS))
    atom_radius: float | None = field(default=None, metadata=toml(ANGLE))
    error_estimate: bool = field(default=True, metadata=toml(Choice((True, False))))
    kick: float = field(default=1e-4, metadata=toml(POS))

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


@dataclass(frozen=True)
class PDESpec:
    """One PDE run, every default resolved (:meth:`resolve`): what ``solve_pde`` runs and the archive records.

    Attributes
    ----------
    model : Model
    degree : int
        The starting resolution (Fourier modes K on S^1, harmonic degree L on S^2).
    t_final : float
        The end (inf: until the terminal state is certified).
    save_every : float or None
        Snapshot interval (None: t = 0 and t_final only).
    initial : "uniform", callable or array
        The initial density as ``solve_pde`` takes it.
    options : PDEOptions
        The options as the run records them in its restart states: the continuation, its handoff degree and
        the node tolerances resolved; ``max_degree``, ``output_points`` and ``nodes`` as given (their
        resolved values are the fields below), as the restart states of every earlier archive hold them.
    max_degree, output_points : int
        The cap of the resolution and the output grid (``space.default_*`` unless given).
    nodes : int or None
        The continuation's nodes (None without the continuation).
    given : frozenset
        The names the caller set (the rest are defaults): the refusals name a default as such.
    """

    model: Model
    degree: int = field(metadata=toml(DEGREE))
    t_final: float = field(metadata=toml(Num(gt=0, infinite=check.UNTIL_CERTIFIED)))
    save_every: float | None = field(default=None, metadata=toml(POS))
    initial: Any = field(default="uniform", compare=False)
    options: PDEOptions = field(default_factory=PDEOptions)
    max_degree: int = 0
    output_points: int = 0
    nodes: int | None = None
    given: frozenset = field(default=frozenset(), compare=False)

    @classmethod
    def resolve(cls, model: Model, t_final: float, degree: int, initial: Any = "uniform",
                save_every: float | None = None, options: PDEOptions | dict | None = None, *,
                strict: bool = True) -> "PDESpec":
        """The spec of ``solve_pde(model, t_final, degree, initial, save_every, **options)``: the arguments
        checked one by one (ValueError, TypeError) and every default filled in. ``strict``: also refuse what
        the fields allow together but the run cannot do (:meth:`check`); a configuration file first says
        those in its own words."""
        if not isinstance(model, Model):
            raise TypeError(f"model must be a solvers.Model, got {type(model).__name__}")
        space = space_for(model.d)[1]
        if not isinstance(options, PDEOptions):
            options = PDEOptions.from_kwargs(dict(options or {}))
        given = frozenset(f.name for f in fields(PDEOptions)
                          if getattr(options, f.name) != f.default or f.name == "filter" and options.filter)
        check.number("t_final", t_final, gt=0, infinite=check.UNTIL_CERTIFIED)
        check.number("save_every", save_every, gt=0, allow_none=True)
        check.integer("degree", degree, ge=space.min_degree)
        continuation = options.continuation or ("lagrangian" if model.noise == 0 else "none")
        resolved: dict = {"continuation": continuation}
        nodes = None
        if continuation == "lagrangian":
            nodes = options.nodes or space.default_nodes
            node_rtol = options.node_rtol
            if node_rtol is None:
                node_rtol = NODE_TOLERANCE * space.node_spacing(nodes)
            resolved.update(node_rtol=node_rtol,
                            node_atol=1e-2 * node_rtol if options.node_atol is None else options.node_atol,
                            # a degree above the default handoff degree raises it: the user asked for it
                            handoff_degree=options.handoff_degree or max(space.default_handoff_degree, int(degree)))
        spec = cls(model=model, degree=int(degree), t_final=float(t_final), save_every=save_every, initial=initial,
                   options=dataclasses.replace(options, **resolved),
                   max_degree=int(options.max_degree or space.default_max_degree),
                   output_points=int(options.output_points or space.default_output_points), nodes=nodes,
                   given=given)
        if strict:
            spec.check()
        return spec

    def check(self) -> None:
        """ValueError for settings that are each allowed but that the run cannot do together."""
        o, model, degree = self.options, self.model, self.degree
        if degree > self.max_degree:
            raise ValueError(f"degree {degree} exceeds max_degree {self.max_degree}")
        if o.continuation == "lagrangian" and model.noise > 0 and "continuation" in self.given:
            raise ValueError("continuation='lagrangian' carries the density along the characteristics of the flow, "
                             f"which noise (nu = {model.noise:g}) does not have: use continuation='none'")
        if self.t_final == math.inf and o.continuation != "lagrangian":
            raise ValueError("t_final = inf runs until the terminal state is certified, which the Lagrangian "
                             "continuation does (noise = 0, continuation='lagrangian'): give a finite t_final"
                             + (" (with noise the stationary density is a smooth one)" if model.noise > 0 else ""))
        if self.continues:
            if degree > o.handoff_degree:
                raise ValueError(f"degree {degree} exceeds handoff_degree {o.handoff_degree} (the continuation's "
                                 "largest Eulerian resolution): raise handoff_degree or lower degree")
            if o.handoff_at is not None and o.handoff_at >= self.t_final:
                raise ValueError(f"handoff_at = {o.handoff_at!r} is not before t_final = {self.t_final!r}")
        elif any(k in self.given for k in ("handoff_degree", "handoff_at", "nodes", "atom_radius")):
            raise ValueError("handoff_degree, handoff_at, nodes and atom_radius are options of the Lagrangian "
                             "continuation, which continuation='none' turns off")

    # --- what the run and the run layer ask -------------------------------------------------------------
    @property
    def space(self):
        """The spectral space of the model's sphere (``solvers.spaces.Space``)."""
        return space_for(self.model.d)[1]

    @property
    def continues(self) -> bool:
        """Whether the Lagrangian continuation takes over where the grid no longer follows the density."""
        return self.options.continuation == "lagrangian"

    @property
    def handoff_degree(self) -> int | None:
        """The largest Eulerian resolution of the continuation (None without it)."""
        return self.options.handoff_degree if self.continues else None

    @property
    def cap(self) -> int:
        """The largest Eulerian resolution: refinements are clipped to it."""
        return min(self.max_degree, self.options.handoff_degree) if self.continues else self.max_degree

    @property
    def cap_key(self) -> str:
        """The option that sets :attr:`cap`: "handoff_degree" where the continuation caps below max_degree."""
        return "handoff_degree" if self.continues and self.options.handoff_degree < self.max_degree else "max_degree"

    @property
    def largest_degree(self) -> int:
        """The largest harmonic degree (wavenumber on S^1) that :attr:`max_degree` resolves."""
        return self.max_degree - self.space.degree_holding(0)

    def snapshot_time(self, k: int) -> float:
        """The time of snapshot k >= 1 (:func:`snapshot_time`)."""
        return snapshot_time(k, self.save_every, self.t_final)

    def snapshot_times(self, most: int = 10 ** 6) -> np.ndarray | None:
        """The snapshot times from t = 0 (None: more than ``most``); with t_final = inf the first 20 doublings
        of the schedule."""
        if self.save_every is None:
            return np.array([0.0, self.t_final])
        if math.isinf(self.t_final):
            return np.array([0.0] + [self.snapshot_time(k) for k in range(1, 20 * SNAPSHOTS_PER_DOUBLING + 1)])
        n = math.ceil(self.t_final / self.save_every - 1e-9)
        return None if n > most else np.unique(np.minimum(np.arange(n + 1) * float(self.save_every), self.t_final))

    def options_dict(self) -> dict:
        """The options as this run uses them, each default replaced by its value (the archive's /pde@options):
        dt0 (from the initial state) and atom_radius (from the handoff's nodes) stay None unless given."""
        out = self.options.to_dict()
        out.update(max_degree=self.max_degree, output_points=self.output_points)
        if self.continues:
            out["nodes"] = self.nodes
        return out

    def to_dict(self) -> dict:
        """The spec as plain values (the archive's /pde@spec): the run's own settings and its options."""
        return {"degree": self.degree, "t_final": self.t_final, "save_every": self.save_every,
                **self.options_dict()}

    def with_model(self, model: Model) -> "PDESpec":
        """The same run of another model (a sweep's member): the given settings resolved again."""
        given = {k: getattr(self.options, k) for k in self.given if k in PDEOptions.__dataclass_fields__}
        return PDESpec.resolve(model, self.t_final, self.degree, self.initial, self.save_every, given, strict=False)
