"""What one particle run is: its options (:class:`ParticleOptions`), its stopping rule (:class:`StopRule`) and
its resolved, frozen spec (:class:`ParticleSpec`), whose :meth:`~ParticleSpec.resolve` fills every default once
(the step, the snapshot interval, the seed). A field that a configuration file may set declares its check
(``solvers.fields.toml``): the file's [particles] and [particles.stop] tables are made from them.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, cast

import numpy as np

from . import validators as check
from .atoms import CLUSTER_RULES
from .fields import NONNEG, POS, Choice, Int, table_of, toml
from .interaction import DEFAULT_BLOCK_BYTES, DEFAULT_TOL, SUM_METHODS
from .model import Model

__all__ = ["ParticleSpec", "ParticleOptions", "StopRule", "STOP_REASONS", "INTEGRATORS", "INITS", "DEFAULT_DT",
           "STOP_WINDOW_MIN"]

STOP_REASONS = ("t_final", "converged", "non-finite", "max_steps", "interrupted")
INTEGRATORS = ("euler", "rk4", "adaptive")
INITS = ("random", "quasi-uniform", "quadrature")

#: step of the fixed-step integrators when none is given: the reference experiments' dt
DEFAULT_DT = 0.1


# ----------------------------------------------------------------------------------------------
# options
# ----------------------------------------------------------------------------------------------
#: the stopping rule looks at this many snapshots at least (one snapshot is trivially "unchanged")
STOP_WINDOW_MIN = 2


@dataclass
class StopRule:
    """The stopping rule of the main paper's experiments (its §4; The model §5), with this package's defaults.

    A run stops when the cluster count at radius r = min(scale / sqrt(beta), pi / (2 d)) is unchanged over
    ``window`` snapshots and the largest drift is at most ``drift_tol``. The released code also asks that no
    cluster be wider than r, uses greedy arcs on S^1 and drift_tol 1e-4: ``StopRule(rule="paper",
    drift_tol=1e-4)`` is that rule. The defaults differ on all three: single linkage on every sphere, no
    spread condition, drift_tol 5e-4. So a set that has not concentrated but moves slower than drift_tol
    (in descent with ReLU, the mass where every unit is inactive, which gathers into atoms only over
    thousands of time units) stops a default run; its "clusters" are then chains of particles within r
    of one another, not atoms.

    Attributes
    ----------
    window : int
        Number of consecutive snapshots (after t = 0) with the same cluster count.
    drift_tol : float
        Largest drift max_i |v(x_i)| allowed at the last of them (radians per unit time).
    scale : float
        Cluster radius min(scale / sqrt(beta), pi / (2 d)).
    rule : {"linkage", "paper"}
        How clusters are counted (:func:`solvers.atoms.clusters`): single linkage, or the released code's
        rule (greedy arcs on S^1, components on S^2).
    spread_factor : float
        With ``rule="paper"`` only, the released code's third condition: every cluster's diameter
        (:func:`solvers.atoms.cluster_spread`) is <= spread_factor x the radius at the last snapshot
        (0 drops it; its default 1).
    """

    window: int = field(default=5, metadata=toml(Int(min=STOP_WINDOW_MIN)))
    drift_tol: float = field(default=5e-4, metadata=toml(POS))
    scale: float = field(default=0.5, metadata=toml(POS))
    rule: str = field(default="linkage", metadata=toml(Choice(CLUSTER_RULES)))
    spread_factor: float = field(default=1.0, metadata=toml(NONNEG))

    def __post_init__(self) -> None:
        check.integer("stop: window", self.window, ge=STOP_WINDOW_MIN)
        check.number("stop: drift_tol", self.drift_tol, gt=0)
        check.number("stop: scale", self.scale, gt=0)
        if self.rule not in CLUSTER_RULES:
            raise ValueError(f"stop: rule must be one of {CLUSTER_RULES}, got {self.rule!r}")
        check.number("stop: spread_factor", self.spread_factor, ge=0)

    def settings(self) -> tuple:
        """What a restart must share (the linkage rule's triple as before the paper rule existed)."""
        base = (self.window, self.drift_tol, self.scale)
        return base if self.rule == "linkage" else base + (self.rule, self.spread_factor)

    @classmethod
    def from_arg(cls, stop) -> "StopRule | None":
        """None/False: no rule; True: the default rule (see the class); a dict of fields; or a StopRule."""
        if stop is None or stop is False:
            return None
        if stop is True:
            return cls()
        if isinstance(stop, cls):
            return stop
        if isinstance(stop, dict):
            unknown = sorted(set(stop) - {f.name for f in fields(cls)})
            if unknown:
                raise ValueError(f"stop: unknown field(s) {unknown}; allowed: window, drift_tol, scale, rule, "
                                 "spread_factor")
            return cls(**stop)
        raise ValueError("stop must be None, True, a dict (window, drift_tol, scale, rule, spread_factor) or a "
                         f"StopRule, got {stop!r}")


@dataclass
class ParticleOptions:
    """Numerical options of :func:`simulate_particles` (recorded with the run).

    Attributes
    ----------
    sum : {"auto", "direct", "fast", "nufft"}
        Interaction sums (:class:`solvers.interaction.InteractionSums`; "fast" and "nufft": S^1 and S^2).
    sum_tol : float
        Truncation of the series relative to lambda_0 (and the NUFFT precision, at least 3e-13).
    block_bytes : int
        Memory bound of a block of the numpy direct sums (bytes). The runs' sums are compiled and hold no
        blocks: it has no effect, and is kept so that the options of earlier runs read back.
    rtol, atol : float
        "adaptive" only: accepted when max_i |err_i| <= atol + rtol (radians).
    dt_max : float or None
        "adaptive" only: largest step.
    max_steps : int
        Stop with "max_steps" after this many accepted steps.
    record_clusters : bool
        Count clusters at every snapshot (always on when a stopping rule is given).
    blas_threads : int or None
        OpenBLAS threads during the run (default 1, see ``solvers._blas``; None: leave alone).
    """

    sum: str = field(default="auto", metadata=toml(Choice(SUM_METHODS)))
    sum_tol: float = field(default=DEFAULT_TOL, metadata=toml(POS))
    block_bytes: int = DEFAULT_BLOCK_BYTES
    rtol: float = field(default=1e-8, metadata=toml(POS))
    atol: float = field(default=1e-10, metadata=toml(POS))
    dt_max: float | None = field(default=None, metadata=toml(POS))
    max_steps: int = field(default=1_000_000, metadata=toml(Int(min=1)))
    record_clusters: bool = True
    blas_threads: int | None = 1

    def __post_init__(self) -> None:
        check.choice("option sum", self.sum, SUM_METHODS)
        for name in ("sum_tol", "rtol", "atol"):
            check.number(f"option {name}", getattr(self, name), gt=0)
        check.number("option dt_max", self.dt_max, gt=0, allow_none=True)
        for name in ("block_bytes", "max_steps"):
            check.integer(f"option {name}", getattr(self, name), ge=1)
        check.integer("option blas_threads", self.blas_threads, ge=1, allow_none=True)
        check.flag("option record_clusters", self.record_clusters)

    @classmethod
    def from_kwargs(cls, options: dict, arguments: tuple = ()) -> "ParticleOptions":
        """The options ``options``; TypeError for an unknown one (``arguments``: the named parameters of
        simulate_particles, listed in the message)."""
        check.known_options("simulate_particles", options, [f.name for f in fields(cls)], arguments)
        return cls(**options)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_time(name: str, v, allow_none: bool = True) -> float | None:
    return check.number(name, v, gt=0, allow_none=allow_none)


@dataclass(frozen=True)
class ParticleSpec:
    """One particle run, every default resolved (:meth:`resolve`): what ``simulate_particles`` runs and the
    archive records (/particles@options, with the sums the run picked).

    Attributes
    ----------
    model : Model
    n : int or None
        The number of particles (None: the caller gives positions, or a restart state carries them).
    init, seed, integrator, dt, t_final, save_every, stop
        As :func:`~solvers.particles.prepare_particles` takes them, resolved: ``dt`` the step of a fixed-step
        integrator (``DEFAULT_DT`` unless given), ``save_every`` 10 dt with a stopping rule unless given, a seed
        drawn from the operating system's entropy when None was given, ``stop`` a :class:`StopRule` or None.
    density : callable or None
        The initial density the particles sample (None: uniform).
    options : ParticleOptions
    given : frozenset
        The names the caller set (the rest are defaults): the refusals name a default as such.
    """

    model: Model
    n: int | None = field(default=None, metadata=toml(Int(min=1)))
    init: str = field(default="random", metadata=toml(Choice(INITS)))
    seed: int = field(default=0, metadata=toml(Int(min=0)))
    integrator: str = field(default="rk4", metadata=toml(Choice(INTEGRATORS)))
    dt: float | None = field(default=None, metadata=toml(POS))
    t_final: float | None = field(default=None, metadata=toml(POS))
    save_every: float | None = field(default=None, metadata=toml(POS))
    stop: StopRule | None = field(default=None, metadata=toml(table_of(StopRule)))
    density: Callable | None = field(default=None, compare=False)
    options: ParticleOptions = field(default_factory=ParticleOptions)
    given: frozenset = field(default=frozenset(), compare=False)

    @classmethod
    def resolve(cls, model: Model, n: int | None = None, t_final: float | None = None, init: str = "random",
                density: Callable | None = None, seed: Any = 0, integrator: str = "rk4", dt: float | None = None,
                save_every: float | None = None, stop: Any = None,
                options: ParticleOptions | dict | None = None) -> "ParticleSpec":
        """The spec of ``simulate_particles(model, n, ...)``: the arguments checked (ValueError, TypeError) and
        every default filled in; ``stop`` None, True, a dict of :class:`StopRule` fields or a StopRule."""
        if not isinstance(model, Model):
            raise TypeError(f"model must be a solvers.Model, got {type(model).__name__}")
        if not isinstance(options, ParticleOptions):
            options = ParticleOptions.from_kwargs(dict(options or {}))
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS}, got {integrator!r}")
        if init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {init!r}")
        given = frozenset(k for k, v in (("n", n), ("t_final", t_final), ("dt", dt), ("save_every", save_every),
                                         ("stop", stop), ("density", density)) if v is not None)
        t_final = _check_time("t_final", t_final)
        dt = _check_time("dt", dt)
        save_every = _check_time("save_every", save_every)
        if seed is None:
            # every random choice has a seed on record: an unseeded run gets one, kept in its result
            seed = int(cast(int, np.random.SeedSequence().entropy))
        elif not check.is_integer(seed) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0 or None, got {seed!r}")
        rule = StopRule.from_arg(stop)
        if t_final is None and rule is None:
            raise ValueError("give t_final, or a stopping rule (stop=True) to run until convergence")
        if model.noise > 0 and integrator == "adaptive":
            raise ValueError("integrator 'adaptive' controls the error of a deterministic step, which an "
                             "O(sqrt(dt)) noise increment swamps; with noise > 0 use 'euler' or 'rk4' with a fixed dt")
        if integrator != "adaptive" and dt is None:
            dt = DEFAULT_DT
        if save_every is None and rule is not None:
            save_every = 10.0 * (dt if dt is not None else DEFAULT_DT)
        if model.noise > 0 and rule is not None and t_final is None:
            raise ValueError("a stopping rule with noise > 0 needs t_final: the deterministic drift of a noisy "
                             "cloud does not fall to drift_tol, so the rule alone would run to max_steps")
        return cls(model=model, n=n, init=init, seed=seed, integrator=integrator, dt=dt, t_final=t_final,
                   save_every=save_every, stop=rule, density=density, options=options, given=given)

    def snapshot_times(self, most: int = 10 ** 6) -> np.ndarray | None:
        """The snapshot times from t = 0 to t_final (None: more than ``most``, or no t_final); a stopping rule
        may end the run before the last."""
        if self.t_final is None:
            return None
        if self.save_every is None:
            return np.array([0.0, self.t_final])
        n = math.ceil(self.t_final / self.save_every - 1e-9)
        return None if n > most else np.unique(np.minimum(np.arange(n + 1) * float(self.save_every), self.t_final))

    def to_dict(self) -> dict:
        """The spec as plain values (the archive's /particles@options, with the sums the run picked)."""
        return {"n": self.n, "init": self.init, "seed": self.seed, "integrator": self.integrator, "dt": self.dt,
                "t_final": self.t_final, "save_every": self.save_every,
                "stop": None if self.stop is None else asdict(self.stop), **self.options.to_dict()}

    def with_model(self, model: Model) -> "ParticleSpec":
        """The same run of another model (a sweep's member)."""
        return ParticleSpec.resolve(model, self.n, self.t_final, self.init, self.density, self.seed,
                                    self.integrator, self.dt if "dt" in self.given else None,
                                    self.save_every if "save_every" in self.given else None, self.stop,
                                    self.options)
