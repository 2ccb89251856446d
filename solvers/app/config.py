"""Run configurations: TOML files validated before any work is done.

A configuration has these tables (either solver may be absent, not both)::

    [run]                   name, description; archive: compression ("none" (default) | "density" | "all"),
                            flush_interval (seconds between archive writes, 0 = every snapshot),
                            checkpoint_interval (seconds between restart states kept between snapshots)
    [model]                 d, beta, flow, attention, strength, noise
    [model.perceptron]      random: units, activation, scale, seed, form, bias_scale
                            or explicit: a, c | w, b, activation
    [initial]               rho_0 of both solvers: kind = "uniform" | "von_mises" | "zonal_harmonic"
    [pde]                   degree, t_final, save_every, and the options of solvers.pde_spec.PDEOptions
    [particles]             n, init, seed, integrator, dt, t_final, save_every, sum, sum_tol, max_steps,
                            rtol, atol, dt_max
    [particles.stop]        the reference stopping rule: window, drift_tol, scale, rule ("linkage" |
                            "paper"), spread_factor (with rule = "paper")
    [compare]               PDE <-> particle comparison (needs both solvers)

Every problem is reported as a :class:`ConfigError` naming the key path (``model.beta``) and what is
allowed, in one line. :func:`load_config` parses and validates; nothing is run or written.

Limits before work. A configuration is read only from a regular file of at most 1 MiB in UTF-8
(:func:`read_config_text`: FIFOs, devices, directories are refused from their stat); the TOML parser's own
failures, deep nesting included, are one line (:func:`parse_toml`). Every number that sets a size or enters
an exponent is bounded, the reason said with the bound: beta <= 1e9 (the range of the multipliers ive(k,
beta)), kappa <= 1e300 (the von Mises sampler), biases within 1e150 (the activations' primitives z^2/2),
degrees <= 2^20, t_final / save_every and t_final / dt <= 2^53, radii >= 1e-15 rad, integers within 64 bits.
Names have no control character (they end up in HDF5 attributes and file names). What needs memory is
estimated against this machine's before anything is built (the perceptron's weights here, its products with
the points it is evaluated at and the PDE's transforms in :func:`check_memory`; the solvers' snapshots when
they are prepared), and refused naming the key.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..model import (ATTENTIONS, BETA_MAX, BETA_MAX_WHY, FLOWS, KAPPA_MAX, KAPPA_MAX_WHY, Model, VonMisesFisher,
                     unit_vector)
from ..perceptron import ACTIVATION_ARRAYS, ACTIVATIONS, BIAS_MAX, SCALE_MAX, Perceptron
from ..particle_result import cluster_radius
from ..particle_spec import ParticleOptions, ParticleSpec
from ..pde_spec import PDEOptions, PDESpec
from .config_text import MAX_CONFIG_BYTES, dump_toml, parse_toml, read_config_text
from ..fields import (ANGLE_MIN, ANGLE_WHY, DEGREE_MAX, DEGREE_WHY, NONNEG, POS, Array, Choice,
                      ConfigError, Int, Num, Str, Table, table_of)

__all__ = ["ConfigError", "RunConfig", "load_config", "parse_config", "initial_density", "dump_toml",
           "read_config_text", "parse_toml", "check_memory", "perceptron_points", "MAX_CONFIG_BYTES"]



PERCEPTRON = Table({
    "units": Int(min=1), "activation": Choice(ACTIVATIONS),
    "scale": Num(gt=0, max=SCALE_MAX, why="the weights scale N(0, 1) stay finite"), "seed": Int(min=0),
    "form": Choice(("gradient", "general")),
    "bias_scale": Num(min=0, max=BIAS_MAX / 10, why=f"ten standard deviations within the biases' bound {BIAS_MAX:g}, "
                                                     "where the activations' primitives z^2/2 stay finite"),
    "a": Array(2), "c": Array(1), "w": Array(2), "b": Array(1),
})

MODEL = Table({
    "d": Int(min=2), "beta": Num(min=0, max=BETA_MAX, why=BETA_MAX_WHY), "flow": Choice(FLOWS),
    "attention": Choice(ATTENTIONS),
    "strength": POS, "noise": NONNEG, "perceptron": PERCEPTRON,
}, required=("d", "beta", "flow"))

INITIAL = Table({
    "kind": Choice(("uniform", "von_mises", "zonal_harmonic")), "mu": Array(1),
    "kappa": Num(gt=0, max=KAPPA_MAX, why=KAPPA_MAX_WHY),
    "axis": Array(1), "degree": Int(min=1, max=DEGREE_MAX, why=DEGREE_WHY), "amplitude": Num(min=-1.0, max=1.0),
}, required=("kind",))


#: [pde] and [particles]: the fields of the specs and of their options that a file may set (solvers.fields.toml)
PDE = table_of(PDESpec, PDEOptions, required=("degree", "t_final"))
PARTICLES = table_of(ParticleSpec, ParticleOptions, required=("n", "t_final"))

COMPARE = Table({
    "moments": Int(min=1), "mmd_beta": NONNEG, "atom_radius": POS, "smoothing": POS, "atom_threshold": POS,
    "min_mass": Num(min=0, max=1), "cluster_scale": POS,
})

RUN = Table({"name": Str(name=True), "description": Str(), "compression": Choice(("density", "all", "none")),
             "flush_interval": NONNEG, "checkpoint_interval": POS})

SCHEMA = Table({"run": RUN, "model": MODEL, "initial": INITIAL, "pde": PDE, "particles": PARTICLES,
                "compare": COMPARE}, required=("model",))

#: seconds of wall clock between the restart states a run's archive keeps between its snapshots (``[run]
#: checkpoint_interval``): a run killed (kill -9, a crash, the machine lost) loses at most about this much
CHECKPOINT_INTERVAL = 60.0


# --- the validated configuration -----------------------------------------------------------------------
@dataclass
class RunConfig:
    """A validated run: the model, the initial density, each solver's resolved spec (``PDESpec``,
    ``ParticleSpec``), the comparison's options and the [run] table; ``text`` and ``raw`` what the file said
    (the archive keeps the text; a resume compares what was written)."""

    text: str
    raw: dict
    model: Model
    initial: dict
    pde: PDESpec | None
    particles: ParticleSpec | None
    compare: dict | None
    name: str = ""
    source: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def run(self) -> dict:
        """The [run] table as written."""
        return self.raw.get("run", {})

    @property
    def checkpoint_interval(self) -> float:
        return float(self.run.get("checkpoint_interval", CHECKPOINT_INTERVAL))

    @property
    def flush_interval(self) -> float:
        return float(self.run.get("flush_interval", 1.0))

    @property
    def compression(self) -> str:
        return str(self.run.get("compression", "none"))

    def initial_density(self) -> Callable | str:
        """The initial density as solve_pde / simulate_particles take it ("uniform" or a callable)."""
        return initial_density(self.initial, self.model.d)

    def with_beta(self, beta: float, name: str, source: str) -> "RunConfig":
        """This run at another beta (a sweep's member, named ``name``): the model and each spec with beta
        replaced, their defaults resolved again; the text is the file's with those two values changed."""
        raw = copy.deepcopy(self.raw)
        raw["model"]["beta"] = float(beta)
        raw.setdefault("run", {})["name"] = name
        try:
            model = self.model.replace(beta=float(beta))
        except ValueError as e:
            raise ConfigError("model", str(e).replace("Model: ", "")) from None
        particles = None if self.particles is None else self.particles.with_model(model)
        _check_beta_scales(model, particles, self.compare)
        return RunConfig(text=dump_toml(raw), raw=raw, model=model, initial=self.initial,
                         pde=None if self.pde is None else self.pde.with_model(model), particles=particles,
                         compare=self.compare, name=name, source=source)


def _perceptron(spec: dict, d: int) -> Perceptron:
    explicit = {"a", "c", "w", "b"} & set(spec)
    random_keys = {"units", "scale", "seed", "form", "bias_scale"} & set(spec)
    path = "model.perceptron"
    if explicit and random_keys:
        raise ConfigError(path, f"give either random weights ({', '.join(sorted(random_keys))}) or explicit "
                                f"weights ({', '.join(sorted(explicit))}), not both")
    activation = spec.get("activation", "relu")
    if explicit:
        if "a" not in spec:
            raise ConfigError(f"{path}.a", "is required with explicit weights (one direction per unit)")
        a = spec["a"]
        if a.shape[1] != d:
            raise ConfigError(f"{path}.a", f"each direction must have d = {d} entries, got {a.shape[1]}")
        b = spec.get("b")
        if b is not None and np.any(np.abs(b) > BIAS_MAX):
            raise ConfigError(f"{path}.b", f"every bias must be within +-{BIAS_MAX:g} (the activations' primitives "
                                           "grow as z^2/2 at z = <a_k, x> + b_k, finite below 1.3e154), got "
                                           f"{float(b[np.argmax(np.abs(b))]):g}")
        try:
            return Perceptron(a, c=spec.get("c"), w=spec.get("w"), b=b, activation=activation)
        except ValueError as e:
            raise ConfigError(path, str(e).replace("Perceptron: ", "")) from None
    units = spec.get("units", d)
    # named by the larger of its two factors
    key = f"{path}.units" if "units" in spec and units >= d else "model.d"
    _refuse_too_big(key, {f"the weights of {units} units in R^{d}": _perceptron_table_bytes(units, d)},
                    "lower units" if key != "model.d" else "lower d" if "units" in spec else
                    f"lower d, or set {path}.units (its default is d)")
    try:
        return Perceptron.random(d, units, activation, spec.get("scale", 1.0), spec.get("seed", 0),
                                 general=spec.get("form", "gradient") == "general",
                                 bias_scale=spec.get("bias_scale", 0.0))
    except ValueError as e:
        raise ConfigError(path, str(e).replace("Perceptron.random: ", "")) from None


def _perceptron_table_bytes(units: int, d: int) -> float:
    """Bytes of a random perceptron's tables while it is made: directions drawn and normalised, weights,
    biases, the product W and their temporaries: at their peak 4 d + 7.4 doubles per unit in the gradient
    form, 5 d + 5.4 in the general one, bounded by 5 d + 8."""
    return 8.0 * float(units) * (5.0 * d + 8.0)


def _refuse_too_big(key: str, parts: dict, advice: str) -> None:
    """ConfigError naming ``key`` when the estimated bytes ``parts`` exceed the share of this machine's memory
    a run may plan to use (``solvers._memory``: the solvers' own refusals use the same share)."""
    from .. import _memory

    try:
        _memory.refuse_if_too_big(parts, advice)
    except ValueError as e:
        raise ConfigError(key, str(e).replace("the run would need", "would need")) from None


@dataclass(frozen=True)
class ZonalHarmonic:
    """rho_0 = 1 + amplitude P_degree(<x, axis>) (P the zonal harmonic normalised to 1 at the axis: cos(k theta)
    on S^1, the Gegenbauer polynomial on S^{d-1}), unnormalised, callable on unit vectors (n, d)."""

    axis: tuple
    degree: int
    amplitude: float
    __name__ = "zonal_harmonic"                 # the name the run's description gives it

    def __call__(self, x: np.ndarray) -> np.ndarray:
        from scipy.special import eval_gegenbauer

        d = len(self.axis)
        t = np.clip(np.asarray(x) @ np.asarray(self.axis), -1.0, 1.0)
        if d == 2:
            p = np.cos(self.degree * np.arccos(t))
        else:
            alpha = (d - 2) / 2.0
            p = eval_gegenbauer(self.degree, alpha, t) / eval_gegenbauer(self.degree, alpha, 1.0)
        return 1.0 + self.amplitude * p


def initial_density(spec: dict, d: int) -> Callable | str:
    """rho_0 from an [initial] table: "uniform", or a callable on unit vectors (n, d) (unnormalised)."""
    kind = spec.get("kind", "uniform")
    if kind == "uniform":
        return "uniform"
    if kind == "von_mises":
        # a density with an exact sampler: i.i.d. particles of a concentrated one without rejection
        return VonMisesFisher(spec["mu"], float(spec["kappa"]))
    if "axis" in spec:
        axis = unit_vector(spec["axis"])
    else:                                   # e_d (e_1 on the circle), not a row of the d x d identity
        axis = np.zeros(d)
        axis[-1 if d > 2 else 0] = 1.0
    return ZonalHarmonic(tuple(float(v) for v in axis), int(spec["degree"]), float(spec["amplitude"]))


def _initial(spec: dict | None, d: int) -> dict:
    spec = dict(spec or {"kind": "uniform"})
    kind = spec["kind"]
    need = {"uniform": (), "von_mises": ("mu", "kappa"), "zonal_harmonic": ("degree", "amplitude")}[kind]
    allowed = set(need) | {"kind"} | ({"axis"} if kind == "zonal_harmonic" else set())
    for key in need:
        if key not in spec:
            raise ConfigError(f"initial.{key}", f"is required for kind = {kind!r}")
    for key in spec:
        if key not in allowed:
            raise ConfigError(f"initial.{key}",
                              f"does not apply to kind = {kind!r} (allowed: {', '.join(sorted(allowed))})")
    for key in ("mu", "axis"):
        if key in spec:
            v = spec[key]
            if v.shape != (d,):
                raise ConfigError(f"initial.{key}", f"must have d = {d} entries, got {v.size}")
            if not np.any(v != 0):
                raise ConfigError(f"initial.{key}", "must be a non-zero vector")
    return spec


def _check_zonal_degree(degree: int, pde: PDESpec | None) -> None:
    """Refuse a zonal harmonic initial density of a degree beyond the PDE's largest resolution: it would be
    evaluated on the grid of that resolution (its Gegenbauer polynomial costs O(degree) per point), then
    refused as unresolved."""
    if pde is not None and degree > pde.largest_degree:
        raise ConfigError("initial.degree", f"must be <= {pde.largest_degree}, the largest degree the PDE resolves "
                                            f"(pde.max_degree = {pde.max_degree}"
                                            f"{'' if 'max_degree' in pde.given else ', the default'}), "
                                            f"got {degree}")


#: relative size below which the comparison drops the MMD kernel's multipliers (``comparison.compare``
#: sets its degree as kernel_bandwidth(mmd_beta, d, 1e-16))
_MMD_TOL = 1e-16


def _mmd_degree_fits(mmd_beta: float, d: int, top: int) -> bool:
    """Whether the MMD kernel of ``mmd_beta`` needs no harmonic degree above ``top``.

    kernel_bandwidth(mmd_beta, d, tol) is the last degree before the first multiplier <= tol lambda_0;
    the multipliers decrease with the degree, so it is <= top exactly when lambda_{top+1} <= tol lambda_0.
    Evaluated at top + 1 only: kernel_bandwidth itself would first try a degree of about
    sqrt(2 mmd_beta log(1/tol)), which for a huge mmd_beta is an array of that many entries.
    """
    from spectral.multipliers import zonal_multipliers

    if mmd_beta == 0:
        return True
    if mmd_beta > BETA_MAX:          # beyond the multipliers' range (NaN): as far beyond any resolution
        return False
    lam = zonal_multipliers(mmd_beta, d, top + 1)
    # lambda_0 underflows to 0 only for an mmd_beta far beyond any resolution
    return bool(lam[0] > 0 and lam[top + 1] <= _MMD_TOL * lam[0])


def _compare_default(name: str):
    """The default of ``solvers.compare``'s option ``name`` (read from its signature: defined there once)."""
    import inspect

    from ..comparison import compare
    return inspect.signature(compare).parameters[name].default


def _check_compare(compare: dict, pde: PDESpec) -> None:
    """Refuse a [compare] table that needs degrees beyond the PDE's largest resolution: the comparison
    would build the coefficients of every particle measure up to that degree, only after both solvers
    ran (at moments = 10^5 on S^2, arrays of tens of GiB)."""
    d, res, top = pde.model.d, pde.max_degree, pde.largest_degree
    what = (f"pde.max_degree = {res}" + (" Fourier modes" if d == 2 else "")
            + ("" if "max_degree" in pde.given else ", the default"))
    moments = compare.get("moments", _compare_default("moments"))
    if moments > top:
        raise ConfigError("compare.moments", f"must be <= {top}, the largest degree the PDE resolves ({what}), "
                                             f"got {moments}: lower moments")
    mmd_beta = compare.get("mmd_beta", _compare_default("mmd_beta"))
    if not _mmd_degree_fits(mmd_beta, d, top):
        # the largest mmd_beta whose kernel fits, to 3 significant digits, rounded down (bisection in log mmd_beta)
        lo, hi = 0.0, mmd_beta
        for _ in range(60):
            mid = math.sqrt(max(lo, 1e-3) * hi)
            lo, hi = (mid, hi) if _mmd_degree_fits(mid, d, top) else (lo, mid)
            if hi - lo <= 1e-4 * hi:
                break
        unit = 10.0 ** (math.floor(math.log10(lo)) - 2) if lo > 0 else 1.0
        limit = float(f"{math.floor(lo / unit) * unit:.3g}")
        raise ConfigError("compare.mmd_beta", f"{mmd_beta:g} makes the MMD kernel exp(mmd_beta (<x,y> - 1)) need "
                                              f"harmonic degrees above {top}, the largest the PDE resolves ({what}): "
                                              f"set mmd_beta <= {limit:g}")


def _check_common_times(pde: PDESpec, particles: ParticleSpec) -> None:
    """Refuse a [compare] whose solvers share fewer than two snapshot times after t = 0: the comparison is
    made at the common times only (``comparison.common_times``), and with none it would measure the initial
    data alone, with one it would be a single number without a trend (pde.save_every = 0.25 against
    particles.save_every = 0.3 to t = 1 meet at t = 0 and t = 1 only)."""
    from ..comparison import common_times

    tp, tq = pde.snapshot_times(), particles.snapshot_times()
    if tp is None or tq is None:
        return
    ip, _ = common_times(tp[tp > 0], tq)
    if len(ip) >= 2:
        return

    def schedule(spec) -> str:
        if spec.save_every is not None:
            return (f"save_every = {spec.save_every:g}"
                    + ("" if "save_every" in spec.given or isinstance(spec, PDESpec) else
                       " (the default with a stop rule)") + f", t_final = {spec.t_final:g}")
        return f"no save_every: t = 0 and t_final = {spec.t_final:g}"
    shared = ("share no snapshot time after t = 0" if not len(ip) else
              f"share one snapshot time after t = 0 (t = {tp[tp > 0][ip[0]]:g})")
    # the same save_every gives every snapshot of the shorter run in common; two of them need t_final >= 2 of it
    shorter = min(float(pde.t_final), float(particles.t_final))
    raise ConfigError("compare", f"the PDE ({schedule(pde)}) and the particles ({schedule(particles)}) "
                                 f"{shared}, and the comparison is made at common times, at least two after t = 0: "
                                 "set pde.save_every and particles.save_every to the same value, at most half the "
                                 f"shorter t_final ({shorter:g})")


def _check_beta_scales(model: Model, particles: ParticleSpec | None, compare: dict | None) -> None:
    """Refuse the scales that beta sets and that would be round-off: the cluster radius of the stopping rule,
    and the [compare] atom radius and smoothing (their defaults filled in by ``comparison.atom_scales``), which
    the comparison would refuse after both solvers ran."""
    from ..comparison import atom_scales

    if particles is not None and particles.stop is not None:
        radius = cluster_radius(model.beta, model.d, particles.stop.scale)
        if not radius >= ANGLE_MIN:
            raise ConfigError("particles.stop.scale", "makes the cluster radius scale / sqrt(beta) "
                                                      f"{radius:.3g} rad, below {ANGLE_MIN:g} ({ANGLE_WHY})")
    if compare is None:
        return
    kw = {k: compare[k] for k in ("atom_radius", "smoothing", "cluster_scale") if k in compare}
    radius, h = atom_scales(model, check=False, **kw)
    for key, v, what in (("atom_radius", radius, "the atom radius"), ("smoothing", h, "the smoothing scale")):
        if not v >= ANGLE_MIN:
            given = key if key in compare else ("cluster_scale" if "atom_radius" not in compare else "atom_radius")
            raise ConfigError(f"compare.{given}", f"makes {what} {v:.3g} rad, below {ANGLE_MIN:g} ({ANGLE_WHY}); "
                                                  f"raise compare.{given}")


def quadrature_count_problem(d: int, n: int) -> str | None:
    """Why init = "quadrature" cannot place ``n`` particles on S^{d-1} (None if it can): on S^2 it takes
    a Gauss grid of 2 nlat^2 nodes. The message is the particle solver's own."""
    nlat = int(round(math.sqrt(n / 2.0)))
    if d != 3 or (nlat >= 1 and 2 * nlat * nlat == n):
        return None
    from ..particles import initial_particles
    try:
        # refuses such an n before it builds anything
        initial_particles(d, n, "quadrature")
    except ValueError as e:
        return str(e)
    return None



#: the largest count of snapshots (t_final / save_every) or of fixed steps (t_final / dt) a table may ask
#: for: the integers a double counts exactly (2^53); the solvers then refuse what does not fit in memory or
#: max_steps, their counts finite
COUNT_MAX = float(1 << 53)


def _check_counts(table: dict, name: str, keys: tuple) -> None:
    """Refuse t_final / key above COUNT_MAX for each key of ``keys`` given in the table ``name``."""
    t_final = table["t_final"]
    for key in keys:
        if key in table and math.isfinite(t_final):
            count = t_final / table[key]
            if not count <= COUNT_MAX:
                what = "snapshots" if key == "save_every" else "steps"
                raise ConfigError(f"{name}.{key}", f"{name}.t_final / {key} = {count:.3g} {what}, above 2^53 = "
                                                   f"{COUNT_MAX:.3g} (the integers a double counts exactly): "
                                                   f"raise {key} or lower t_final")


def parse_config(text: str, source: str = "<string>") -> RunConfig:
    """Parse and validate TOML text; raise ConfigError naming the first problem. Nothing here depends on the
    machine but the memory of a random perceptron's weights, checked before they are drawn
    (:func:`check_memory` estimates the rest: :func:`load_config` calls it)."""
    raw = parse_toml(text)
    if isinstance(raw, dict) and "branch" in raw:
        # a configuration of the other command: said, rather than "unknown key"
        raise ConfigError("branch", "is the table of an `attnpde branch` configuration (a branch of stationary "
                                    "states with noise, docs/noise.md): run it with `attnpde branch CONFIG`; "
                                    "`attnpde run`, `sweep` and `validate` take [run], [model], [initial], [pde], "
                                    "[particles] and [compare]")
    cfg = SCHEMA.check("", raw)
    if "pde" not in cfg and "particles" not in cfg:
        raise ConfigError("", "nothing to run: give a [pde] table, a [particles] table, or both")
    model = parse_model(cfg["model"])
    d = model.d
    initial = _initial(cfg.get("initial"), d)
    density = initial_density(initial, d)
    pde = _pde_spec(cfg["pde"], model, density) if "pde" in cfg else None
    if initial["kind"] == "zonal_harmonic":
        _check_zonal_degree(initial["degree"], pde)
    if pde is not None:
        _check_pde(cfg["pde"], pde)
    particles = _particle_spec(cfg["particles"], model, initial, density) if "particles" in cfg else None
    compare = cfg.get("compare")
    if compare is not None and (pde is None or particles is None):
        raise ConfigError("compare", "needs both a [pde] and a [particles] table")
    if compare is not None:
        _check_compare(compare, pde)
        _check_common_times(pde, particles)
    _check_beta_scales(model, particles, compare)
    run = cfg.get("run", {})
    return RunConfig(text=text, raw=raw, model=model, initial=initial, pde=pde, particles=particles,
                     compare=compare, name=run.get("name", ""), source=source)


def parse_model(m: dict) -> Model:
    """The model of a checked [model] table (ConfigError naming the key)."""
    d = m["d"]
    perceptron = _perceptron(m["perceptron"], d) if "perceptron" in m else None
    if m.get("attention") == "normalized" and m.get("strength", 1.0) != 1.0:
        raise ConfigError("model.strength", "plays no role with attention = 'normalized' (SA): remove it or set 1.0")
    given = {k: m[k] for k in ("attention", "strength", "noise") if k in m}
    try:
        return Model(d=d, beta=m["beta"], flow=m["flow"], perceptron=perceptron, **given)
    except ValueError as e:
        raise ConfigError("model", str(e).replace("Model: ", "")) from None


def _pde_spec(table: dict, model: Model, density) -> PDESpec:
    """The PDE's spec from a checked [pde] table, its defaults resolved (ConfigError naming the key)."""
    d = model.d
    if d not in (2, 3):
        raise ConfigError("pde", f"the spectral PDE solver works on the circle (d = 2) and the sphere (d = 3); "
                                 f"model.d = {d}: remove [pde] or change d (particles work for any d)")
    if "max_degree" in table and table["max_degree"] < table["degree"]:
        raise ConfigError("pde.max_degree", f"must be >= pde.degree = {table['degree']}, got {table['max_degree']}")
    opts = {k: v for k, v in table.items() if k not in ("degree", "t_final", "save_every")}
    if "filter" in opts:
        opts["filter"] = {"kind": "exponential", **opts["filter"]}
    try:
        # what the fields allow together but the run cannot do is refused when the run is prepared, and
        # what this file says in its own words (_check_pde) first
        return PDESpec.resolve(model, table["t_final"], table["degree"], density, table.get("save_every"), opts,
                               strict=False)
    except (TypeError, ValueError) as e:
        raise ConfigError("pde", str(e).replace("option ", "")) from None


def _check_pde(table: dict, spec: PDESpec) -> None:
    """Refuse, in the file's words, the PDE settings that the solver would refuse only once it runs."""
    degree, d = spec.degree, spec.model.d
    # with noise the continuation cannot run (the solver refuses it, saying so): no cap of its own then
    if spec.continues and spec.model.noise == 0 and degree > spec.handoff_degree:
        # the Lagrangian continuation (on by default without noise) caps the Eulerian resolution below
        # max_degree's default: said first, or raising max_degree alone would meet this refusal next
        given = "handoff_degree" in spec.given
        raise ConfigError("pde.degree", f"must be <= pde.handoff_degree ({'' if given else 'default '}"
                                        f"{spec.handoff_degree} on S^{d - 1}: the largest Eulerian resolution of the "
                                        f"Lagrangian continuation, on by default without noise), got {degree}: lower "
                                        "degree, raise handoff_degree" + ("" if given else
                                                                          ", or set continuation = \"none\""))
    if "max_degree" not in spec.given and degree > spec.max_degree:
        # the solver would refuse it only once the run is under way
        raise ConfigError("pde.degree", f"must be <= pde.max_degree (default {spec.max_degree} on S^{d - 1}), got "
                                        f"{degree}: lower degree, or set max_degree >= {degree}")
    if spec.save_every is not None and spec.save_every > spec.t_final:
        raise ConfigError("pde.save_every", f"must be <= pde.t_final = {table['t_final']}")
    _check_counts(table, "pde", ("save_every",))


def _particle_spec(table: dict, model: Model, initial: dict, density) -> ParticleSpec:
    """The particles' spec from a checked [particles] table, its defaults resolved (ConfigError naming the
    key)."""
    d = model.d
    init = table.get("init", "random")
    if init in ("quasi-uniform", "quadrature") and d not in (2, 3):
        raise ConfigError("particles.init", f"{init!r} is defined on S^1 and S^2 only (d = 2, 3); model.d = {d}")
    if init == "quasi-uniform" and initial["kind"] != "uniform":
        raise ConfigError("particles.init", "'quasi-uniform' places particles for the uniform density only; "
                                            f"[initial] is {initial['kind']!r}: use 'random' or 'quadrature'")
    if table.get("integrator") == "adaptive" and model.noise > 0:
        raise ConfigError("particles.integrator", "'adaptive' has no error control for the noise: use "
                                                  "'euler' or 'rk4' (Euler–Maruyama noise step) with noise > 0")
    if "save_every" in table and table["save_every"] > table["t_final"]:
        raise ConfigError("particles.save_every", f"must be <= particles.t_final = {table['t_final']}")
    _check_counts(table, "particles", ("save_every", "dt"))
    if init == "quadrature":
        problem = quadrature_count_problem(d, table["n"])
        if problem is not None:
            raise ConfigError("particles.n", problem)
    args = {k: table[k] for k in ("init", "seed", "integrator", "dt", "save_every", "stop") if k in table}
    options = {k: v for k, v in table.items() if k in ParticleOptions.__dataclass_fields__}
    try:
        return ParticleSpec.resolve(model, table["n"], table["t_final"],
                                    density=None if density == "uniform" else density, options=options, **args)
    except (TypeError, ValueError) as e:
        raise ConfigError("particles", str(e).replace("option ", "")) from None


def perceptron_points(config: RunConfig, n: int | None = None) -> tuple[int, str]:
    """(the most points the perceptron is evaluated at at once in a run of ``config``, where): the PDE's
    grid at its largest Eulerian resolution, the continuation's nodes (twice them for the error estimate;
    the energy takes the potential at all nodes at once), the particles (``n``, default particles.n: the
    potential of all of them at once)."""
    best = (0, "")
    pde = config.pde
    if pde is not None:
        grid = int(np.prod(pde.space.computational_grid(pde.cap)))
        best = max(best, (grid, f"the PDE's grid at {pde.cap_key} = {pde.cap}"))
        if pde.continues and pde.model.noise == 0:
            twice = pde.options.error_estimate
            best = max(best, ((2 if twice else 1) * pde.nodes,
                              f"the continuation's {pde.nodes} nodes"
                              + (", twice for its error estimate" if twice else "")))
    if config.particles is not None:
        n = config.particles.n if n is None else n
        best = max(best, (n, f"{n} particles"))
    return best


def check_memory(config: RunConfig, n: int | None = None, key_n: str = "particles.n") -> None:
    """Refuse (ConfigError naming the key) what cannot fit in this machine's memory before anything runs:
    the PDE's transforms at its largest resolution, and the perceptron evaluated at its most points at once
    (units x points, ACTIVATION_ARRAYS arrays at the peak). ``n``: a particle count to check instead of
    particles.n (``attnpde validate --n``), named ``key_n``. The solvers check the rest (snapshots, output
    grid, particles) when they are prepared, also before the archive is made."""
    pde = config.pde
    if pde is not None:
        cap, which = pde.cap, pde.cap_key
        given = which in pde.given
        _refuse_too_big(f"pde.{which}" if given else "pde.degree",
                        {f"the PDE's transforms at {which} = {cap}": pde.space.transform_bytes(cap)},
                        f"lower {which}" + ("" if given else f" (default {cap})"))
    p = config.model.perceptron
    if p is None:
        return
    points, where = perceptron_points(config, n)
    arrays = ACTIVATION_ARRAYS[p.activation]
    spec = config.raw.get("model", {}).get("perceptron", {})
    key = ("model.perceptron.a" if "a" in spec else "model.perceptron.units" if "units" in spec else "model.d")
    if n is not None and points == n:
        key = key_n
    _refuse_too_big(key, {f"the perceptron's {p.units} units at {where} ({arrays} arrays of units x points for "
                          f"{p.activation})": 8.0 * arrays * p.units * points},
                    "lower " + {"model.perceptron.a": "the number of units (rows of a)",
                                "model.d": "d, or set model.perceptron.units (its default is d)",
                                key_n: "the particle count, or the units"}.get(key, key.split(".")[-1]))


def load_config(path: str | Path) -> RunConfig:
    """Read (:func:`read_config_text`), validate and check against this machine's memory
    (:func:`check_memory`) a TOML configuration file."""
    p = Path(path)
    cfg = parse_config(read_config_text(path), str(p))
    if not cfg.name:
        cfg.name = p.stem
    check_memory(cfg)
    return cfg
