"""Run configurations: TOML files validated before any work is done.

A configuration has these tables (either solver may be absent, not both)::

    [run]                   name, description; archive: compression ("none" (default) | "density" | "all"),
                            flush_interval (seconds between archive writes, 0 = every snapshot),
                            checkpoint_interval (seconds between restart states kept between snapshots)
    [model]                 d, beta, flow, attention, strength, noise
    [model.perceptron]      random: units, activation, scale, seed, form, bias_scale
                            or explicit: a, c | w, b, activation
    [initial]               rho_0 of both solvers: kind = "uniform" | "von_mises" | "zonal_harmonic"
    [pde]                   degree, t_final, save_every, and the options of solvers.pde.PDEOptions
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

import math
import os
import re
import reprlib
import stat
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..model import (ATTENTIONS, BETA_MAX, BETA_MAX_WHY, FLOWS, KAPPA_MAX, KAPPA_MAX_WHY, Model, VonMisesFisher,
                     unit_vector)
from ..atoms import CLUSTER_RULES
from ..particles import INITS, INTEGRATORS, STOP_WINDOW_MIN
from ..interaction import SUM_METHODS
from ..pde import CONTINUATIONS, METHODS
from ..spaces import MIN_DEGREE
from ..validators import UNTIL_CERTIFIED, is_integer, is_number, number_problem, spells_infinity
from ..perceptron import ACTIVATION_ARRAYS, ACTIVATIONS, BIAS_MAX, SCALE_MAX, Perceptron

__all__ = ["ConfigError", "RunConfig", "load_config", "parse_config", "initial_density", "dump_toml",
           "read_config_text", "parse_toml", "check_memory", "perceptron_points", "MAX_CONFIG_BYTES"]

#: the largest configuration file read (bytes): the largest of runs/ is ~1.5 KiB; 1 MiB holds explicit
#: perceptron weights of ~10^5 numbers, and keeps any value's check and message cheap
MAX_CONFIG_BYTES = 1 << 20


def _show(v: Any) -> str:
    """repr(v) shortened for a one-line message (a long list or string, a deeply nested array)."""
    r = reprlib.Repr()
    r.maxlist = r.maxtuple = r.maxdict = 8
    r.maxlevel = 3
    r.maxstring = r.maxother = 60
    return r.repr(v)


class ConfigError(ValueError):
    """A configuration problem: ``path`` is the dotted key path, the message says what is allowed."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.detail = message
        super().__init__(f"{path}: {message}" if path else message)


# --- field specifications ---------------------------------------------------------------------------
#: TOML's integers are 64-bit (the specification's range; tomllib reads any size)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _is_float_text(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Num:
    min: float | None = None      # inclusive
    gt: float | None = None       # exclusive
    max: float | None = None
    infinite: str = ""            # +inf allowed, meaning this (pde.t_final: until the terminal state is certified)
    why: str = ""                 # the reason of the bounds, said with them

    def check(self, path: str, v: Any) -> float:
        if self.infinite:
            # the words of the Python API's refusal (solvers.validators), which accepts the same values
            ok = is_number(v) and not (isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX) and (
                v == math.inf or (math.isfinite(v) and (self.min is None or v >= self.min)
                                  and (self.gt is None or v > self.gt) and (self.max is None or v <= self.max)))
            if not ok:
                raise ConfigError(path, number_problem(v, gt=self.gt, ge=self.min, le=self.max, infinite=self.infinite,
                                                       why=self.why))
            return float(v)
        if not is_number(v):
            hint = ""
            if isinstance(v, str):
                hint = ("; infinity is not allowed here" if spells_infinity(v) else
                        "; write it without quotes" if _is_float_text(v) else "")
            raise ConfigError(path, f"must be a number{self._range()}, got {_show(v)} ({type(v).__name__}){hint}")
        if isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX:
            raise ConfigError(path, f"must be a number{self._range()}, got an integer beyond TOML's 64 bits")
        v = float(v)
        if not math.isfinite(v):
            raise ConfigError(path, f"must be a finite number{self._range()}, got {v!r}")
        if (self.min is not None and v < self.min) or (self.gt is not None and v <= self.gt):
            # a bounds' reason explains the largest value when there is one: not said of one below the least
            raise ConfigError(path, f"must be a number{self._range(why=self.max is None)}, got {v!r}")
        if self.max is not None and v > self.max:
            raise ConfigError(path, f"must be a number{self._range()}, got {v!r}")
        return v

    def _range(self, why: bool = True) -> str:
        """The bounds, and with ``why`` their reason."""
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min:g}")
        if self.gt is not None:
            parts.append(f"> {self.gt:g}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}")
        return ((" " + " and ".join(parts)) if parts else "") + (f" ({self.why})" if why and self.why else "")


@dataclass(frozen=True)
class Int:
    min: int | None = None
    max: int | None = None
    why: str = ""                 # the reason of the bounds, said with them

    def check(self, path: str, v: Any) -> int:
        if not is_integer(v):
            raise ConfigError(path, f"must be an integer{self._range()}, got {_show(v)} ({type(v).__name__})")
        if not INT64_MIN <= v <= INT64_MAX:
            raise ConfigError(path, f"must be an integer{self._range()}, got one beyond TOML's 64 bits")
        if self.min is not None and v < self.min:
            raise ConfigError(path, f"must be an integer{self._range(why=self.max is None)}, got {v!r}")
        if self.max is not None and v > self.max:
            raise ConfigError(path, f"must be an integer{self._range()}, got {v!r}")
        return v

    def _range(self, why: bool = True) -> str:
        """The bounds, and with ``why`` their reason."""
        parts = (([f">= {self.min}"] if self.min is not None else [])
                 + ([f"<= {self.max}"] if self.max is not None else []))
        return ((" " + " and ".join(parts)) if parts else "") + (f" ({self.why})" if why and self.why else "")


@dataclass(frozen=True)
class Choice:
    options: tuple

    def check(self, path: str, v: Any) -> Any:
        if v not in self.options or isinstance(v, bool) != isinstance(self.options[0], bool):
            raise ConfigError(path, f"must be one of {', '.join(repr(o) for o in self.options)}, got {_show(v)}")
        return v


@dataclass(frozen=True)
class Str:
    """A string; ``name``: a name (no control character, no '/', at most NAME_MAX_BYTES in UTF-8), else
    free text without NUL or control characters but tab and line breaks (it is kept in an HDF5 attribute,
    whose strings end at a NUL)."""

    name: bool = False

    def check(self, path: str, v: Any) -> str:
        if not isinstance(v, str):
            raise ConfigError(path, f"must be a string, got {_show(v)}")
        allowed = "" if self.name else "\t\n\r"
        bad = next((c for c in v if c not in allowed and unicodedata.category(c) in _CONTROL), None)
        if bad is not None:
            what = "NUL" if bad == "\0" else f"the control character U+{ord(bad):04X}"
            where = "a name" if self.name else "text kept in the archive's attributes (tab and line breaks are allowed)"
            raise ConfigError(path, f"contains {what}, not allowed in {where}; got {_show(v)}")
        if self.name:
            if "/" in v:
                raise ConfigError(path, f"must not contain '/' (a sweep names its archives <name>_beta<beta>.h5 "
                                        f"in its directory), got {_show(v)}")
            size = len(v.encode("utf-8"))
            if size > NAME_MAX_BYTES:
                raise ConfigError(path, f"is {size} bytes long in UTF-8, above {NAME_MAX_BYTES}: a sweep names its "
                                        "archives <name>_beta<beta>.h5.part, which must fit the 255 bytes of a file "
                                        "name")
        return v


#: Unicode categories refused in strings: controls (NUL, C0, DEL, C1), surrogates, line and paragraph separators
_CONTROL = ("Cc", "Cs", "Zl", "Zp")

#: the longest run.name (UTF-8 bytes): <name>_beta<beta:g>.h5.part (a sweep member's archive while it runs)
#: adds at most 5 + 12 + 8 bytes, within the 255 of a file name (NAME_MAX)
NAME_MAX_BYTES = 200


@dataclass(frozen=True)
class Array:
    """A list of numbers (ndim 1) or a list of equal-length lists of numbers (ndim 2)."""

    ndim: int

    def check(self, path: str, v: Any) -> np.ndarray:
        what = "a list of numbers" if self.ndim == 1 else "a list of lists of numbers (one row per unit)"
        if not isinstance(v, list) or not v:
            raise ConfigError(path, f"must be {what}, got {_show(v)}")
        rows = v if self.ndim == 2 else [v]
        width = None
        for row in rows:
            if not isinstance(row, list) or not row:
                raise ConfigError(path, f"must be {what}, got {_show(v)}")
            if width is not None and len(row) != width:
                raise ConfigError(path, f"rows must all have the same length, got {_show([len(r) for r in rows])}")
            width = len(row)
            for x in row:
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                    raise ConfigError(path, f"must be {what} (finite), got an entry {_show(x)}")
        return np.array(v, dtype=float)


@dataclass(frozen=True)
class Table:
    fields: dict
    required: tuple = ()

    def check(self, path: str, v: Any) -> dict:
        if not isinstance(v, dict):
            # the hint only where it holds: a table without required keys takes its defaults when empty
            raise ConfigError(path, f"must be a table, got {_show(v)}" + (
                f": write it as [{path}] (an empty one takes the defaults)" if path and not self.required else ""))
        unknown = sorted(set(v) - set(self.fields))
        if unknown:
            key = _key(unknown[0])
            raise ConfigError(_join(path, key), f"unknown key; allowed in [{path or 'top level'}]: "
                                                f"{', '.join(sorted(self.fields))}")
        for key in self.required:
            if key not in v:
                raise ConfigError(_join(path, key), "is required")
        return {k: spec.check(_join(path, k), v[k]) for k, spec in self.fields.items() if k in v}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _key(key: str) -> str:
    """A key as TOML writes it: bare, or quoted with its control characters escaped (one line)."""
    if re.fullmatch(r"[A-Za-z0-9_-]{1,60}", key):
        return key
    return json_string(key if len(key) <= 60 else key[:57] + "...")


POS = Num(gt=0)
NONNEG = Num(min=0)

#: the largest resolution (Fourier modes on S^1, harmonic degree on S^2) of any table: the most degrees the
#: package computes the kernel's multipliers to (``spectral.multipliers.kernel_bandwidth``'s cap, 2^20); the
#: kernel itself needs at most ~8.9 sqrt(beta) = 2.8e5 of them (beta <= 1e9)
DEGREE_MAX = 1 << 20
DEGREE_WHY = "2^20, the most degrees the package computes the kernel's multipliers to"
DEGREE = Int(min=MIN_DEGREE, max=DEGREE_MAX, why=DEGREE_WHY)

#: the smallest angle (rad) taken as a radius, a merging distance or a smoothing scale: unit vectors are
#: known to about eps = 2.2e-16 per entry, so a smaller angle between two of them is round-off; the linkage
#: of clusters and atoms (``solvers.atoms``) bins points in cubes of that side, whose integer indices x / side
#: must stay within 64 bits (a subnormal radius divided by 4, the comparison's default smoothing, is 0)
ANGLE_MIN = 1e-15
ANGLE_WHY = "unit vectors are known to about 2.2e-16 per entry: a smaller angle between two is round-off"
ANGLE = Num(min=ANGLE_MIN, why=ANGLE_WHY)

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

PDE = Table({
    "degree": DEGREE, "t_final": Num(gt=0, infinite=UNTIL_CERTIFIED), "save_every": POS, "rtol": POS, "atol": POS,
    "method": Choice(METHODS), "cfl": POS, "dt0": POS, "dt_max": POS, "max_degree": DEGREE,
    "tail_tol": POS, "tail_max": POS, "positivity_tol": POS, "sa_psi_min": POS,
    "filter": Table({"kind": Choice(("exponential",)), "alpha": POS, "order": Int(min=2)}),
    "max_steps": Int(min=1), "output_points": Int(min=2), "threads": Int(min=1),
    "planner": Choice(("FFTW_ESTIMATE", "FFTW_MEASURE", "FFTW_PATIENT", "FFTW_EXHAUSTIVE")),
    "continuation": Choice(CONTINUATIONS), "handoff_degree": DEGREE, "handoff_at": POS,
    "nodes": Int(min=2), "node_rtol": POS, "node_atol": POS, "merge_tol": ANGLE, "drift_tol": POS, "kick": POS,
    "atom_radius": ANGLE, "error_estimate": Choice((True, False)),
}, required=("degree", "t_final"))

PARTICLES = Table({
    "n": Int(min=1), "init": Choice(INITS), "seed": Int(min=0),
    "integrator": Choice(INTEGRATORS), "dt": POS, "t_final": POS, "save_every": POS,
    "sum": Choice(SUM_METHODS), "sum_tol": POS, "max_steps": Int(min=1), "rtol": POS, "atol": POS,
    "dt_max": POS,
    "stop": Table({"window": Int(min=STOP_WINDOW_MIN), "drift_tol": POS, "scale": POS,
                   "rule": Choice(CLUSTER_RULES), "spread_factor": NONNEG}),
}, required=("n", "t_final"))

COMPARE = Table({
    "moments": Int(min=1), "mmd_beta": NONNEG, "atom_radius": POS, "smoothing": POS, "atom_threshold": POS,
    "min_mass": Num(min=0, max=1), "cluster_scale": POS,
})

RUN = Table({"name": Str(name=True), "description": Str(), "compression": Choice(("density", "all", "none")),
             "flush_interval": NONNEG, "checkpoint_interval": POS})

SCHEMA = Table({"run": RUN, "model": MODEL, "initial": INITIAL, "pde": PDE, "particles": PARTICLES,
                "compare": COMPARE}, required=("model",))


# --- the validated configuration -----------------------------------------------------------------------
@dataclass
class RunConfig:
    """A validated run: the model, the initial density and each solver's arguments."""

    text: str
    raw: dict
    model: Model
    initial: dict
    pde: dict | None
    particles: dict | None
    compare: dict | None
    name: str = ""
    source: str = ""
    extra: dict = field(default_factory=dict)

    def initial_density(self) -> Callable | str:
        """The initial density as solve_pde / simulate_particles take it ("uniform" or a callable)."""
        return initial_density(self.initial, self.model.d)

    def pde_kwargs(self) -> dict:
        """Keyword arguments of solve_pde (without model and the hooks)."""
        kw = dict(self.pde)
        kw["initial"] = self.initial_density()
        return kw

    def particle_kwargs(self) -> dict:
        kw = dict(self.particles)
        init = self.initial_density()
        if init != "uniform":
            kw["density"] = init
        if "stop" in kw:
            kw["stop"] = dict(kw["stop"])
        return kw


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
    degree, amplitude = int(spec["degree"]), float(spec["amplitude"])
    from scipy.special import eval_gegenbauer

    def zonal_harmonic(x: np.ndarray) -> np.ndarray:
        t = np.clip(np.asarray(x) @ axis, -1.0, 1.0)
        if d == 2:
            p = np.cos(degree * np.arccos(t))
        else:
            alpha = (d - 2) / 2.0
            p = eval_gegenbauer(degree, alpha, t) / eval_gegenbauer(degree, alpha, 1.0)
        return 1.0 + amplitude * p
    return zonal_harmonic


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


def _check_zonal_degree(degree: int, pde: dict | None, d: int) -> None:
    """Refuse a zonal harmonic initial density of a degree beyond the PDE's largest resolution: it would be
    evaluated on the grid of that resolution (its Gegenbauer polynomial costs O(degree) per point), then
    refused as unresolved."""
    if pde is not None and d in (2, 3):
        res = _largest_resolution(pde, d)
        top = res - 1 if d == 2 else res
        if degree > top:
            raise ConfigError("initial.degree", f"must be <= {top}, the largest degree the PDE resolves "
                                                f"(pde.max_degree = {res}"
                                                f"{'' if 'max_degree' in pde else ', the default'}), "
                                                f"got {degree}")


def _largest_resolution(pde: dict, d: int) -> int:
    """pde.max_degree, or the solver's default for S^{d-1} (Fourier modes K on S^1, degree L on S^2)."""
    from ..pde import space_for
    return pde.get("max_degree", space_for(d)[1].default_max_degree)


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


def _check_compare(compare: dict, pde: dict, d: int) -> None:
    """Refuse a [compare] table that needs degrees beyond the PDE's largest resolution: the comparison
    would build the coefficients of every particle measure up to that degree, only after both solvers
    ran (at moments = 10^5 on S^2, arrays of tens of GiB)."""
    res = _largest_resolution(pde, d)
    # the circle's resolution counts the modes 0..K-1, the sphere's the largest degree L
    top = res - 1 if d == 2 else res
    what = (f"pde.max_degree = {res}" + (" Fourier modes" if d == 2 else "")
            + ("" if "max_degree" in pde else ", the default"))
    moments = compare.get("moments", 8)
    if moments > top:
        raise ConfigError("compare.moments", f"must be <= {top}, the largest degree the PDE resolves ({what}), "
                                             f"got {moments}: lower moments")
    mmd_beta = compare.get("mmd_beta", 4.0)
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


def _snapshot_times(table: dict, default_every: float | None) -> np.ndarray | None:
    """The snapshot times a solver's table asks for: k save_every below t_final, and t_final (None: more
    than 10^6 of them, not checked)."""
    t_final, every = float(table["t_final"]), table.get("save_every", default_every)
    if every is None:
        return np.array([0.0, t_final])
    if math.isinf(t_final):
        from ..pde import SNAPSHOTS_PER_DOUBLING, snapshot_time
        return np.array([0.0] + [snapshot_time(k, float(every), t_final)
                                 for k in range(1, 20 * SNAPSHOTS_PER_DOUBLING + 1)])
    n = math.ceil(t_final / every - 1e-9)
    return None if n > 10 ** 6 else np.unique(np.minimum(np.arange(n + 1) * float(every), t_final))


def _check_common_times(pde: dict, particles: dict) -> None:
    """Refuse a [compare] whose solvers share fewer than two snapshot times after t = 0: the comparison is
    made at the common times only (``comparison.common_times``), and with none it would measure the initial
    data alone, with one it would be a single number without a trend (pde.save_every = 0.25 against
    particles.save_every = 0.3 to t = 1 meet at t = 0 and t = 1 only)."""
    from ..comparison import common_times
    from ..particles import DEFAULT_DT

    stop = particles.get("stop")
    # the particle solver's default with a stop rule (an empty [particles.stop] is the default rule)
    every = 10.0 * particles.get("dt", DEFAULT_DT) if stop is not None else None
    tp, tq = _snapshot_times(pde, None), _snapshot_times(particles, every)
    if tp is None or tq is None:
        return
    ip, _ = common_times(tp[tp > 0], tq)
    if len(ip) >= 2:
        return

    def schedule(table: dict, default: float | None) -> str:
        if "save_every" in table or default is not None:
            return (f"save_every = {table.get('save_every', default):g}"
                    + ("" if "save_every" in table else " (the default with a stop rule)")
                    + f", t_final = {table['t_final']:g}")
        return f"no save_every: t = 0 and t_final = {table['t_final']:g}"
    shared = ("share no snapshot time after t = 0" if not len(ip) else
              f"share one snapshot time after t = 0 (t = {tp[tp > 0][ip[0]]:g})")
    # the same save_every gives every snapshot of the shorter run in common; two of them need t_final >= 2 of it
    shorter = min(float(pde["t_final"]), float(particles["t_final"]))
    raise ConfigError("compare", f"the PDE ({schedule(pde, None)}) and the particles ({schedule(particles, every)}) "
                                 f"{shared}, and the comparison is made at common times, at least two after t = 0: "
                                 "set pde.save_every and particles.save_every to the same value, at most half the "
                                 f"shorter t_final ({shorter:g})")


def _check_compare_scales(compare: dict, model: Model) -> None:
    """Refuse the [compare] scales whose atom radius or smoothing (defaults filled in as the comparison does:
    ``comparison.atom_scales``) is below ANGLE_MIN: the comparison would refuse them after both solvers ran."""
    from ..particles import cluster_radius

    scale = compare.get("cluster_scale", 0.5)
    radius = compare.get("atom_radius", min(cluster_radius(model.beta, model.d, scale), 0.1))
    h = compare.get("smoothing", radius / 4.0)
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


def parse_toml(text: str) -> dict:
    """The table of TOML text; ConfigError with tomllib's own one-line message (and its line and column)
    when it is not valid TOML, also for arrays or inline tables nested too deep for the parser (tomllib
    recurses once per level: a few hundred levels exhaust Python's stack)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("", f"not valid TOML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise ConfigError("", "not valid TOML here: arrays or inline tables nested too deep for the parser "
                              f"(Python's recursion limit {sys.getrecursionlimit()})") from None


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
    m = cfg["model"]
    d = m["d"]
    perceptron = _perceptron(m["perceptron"], d) if "perceptron" in m else None
    if m.get("attention") == "normalized" and m.get("strength", 1.0) != 1.0:
        raise ConfigError("model.strength", "plays no role with attention = 'normalized' (SA): remove it or set 1.0")
    try:
        model = Model(d=d, beta=m["beta"], flow=m["flow"], attention=m.get("attention", "unnormalized"),
                      strength=m.get("strength", 1.0), perceptron=perceptron, noise=m.get("noise", 0.0))
    except ValueError as e:
        raise ConfigError("model", str(e).replace("Model: ", "")) from None
    initial = _initial(cfg.get("initial"), d)
    if initial["kind"] == "zonal_harmonic":
        _check_zonal_degree(initial["degree"], cfg.get("pde"), d)

    pde = cfg.get("pde")
    if pde is not None:
        if d not in (2, 3):
            raise ConfigError("pde", f"the spectral PDE solver works on the circle (d = 2) and the sphere (d = 3); "
                                     f"model.d = {d}: remove [pde] or change d (particles work for any d)")
        if "max_degree" in pde and pde["max_degree"] < pde["degree"]:
            raise ConfigError("pde.max_degree", f"must be >= pde.degree = {pde['degree']}, got {pde['max_degree']}")
        top = _largest_resolution(pde, d)
        # with noise the continuation cannot run (the solver refuses it, saying so): no cap of its own then
        continues = model.noise == 0 and pde.get("continuation", "lagrangian") == "lagrangian"
        if continues:
            from ..pde import space_for
            handoff = pde.get("handoff_degree") or max(space_for(d)[1].default_handoff_degree, pde["degree"])
            if pde["degree"] > handoff:
                # the Lagrangian continuation (on by default without noise) caps the Eulerian resolution below
                # max_degree's default: said first, or raising max_degree alone would meet this refusal next
                which = "" if "handoff_degree" in pde else "default "
                raise ConfigError("pde.degree", f"must be <= pde.handoff_degree ({which}{handoff} on S^{d - 1}: "
                                                "the largest Eulerian resolution of the Lagrangian continuation, "
                                                f"on by default without noise), got {pde['degree']}: lower degree, "
                                                "raise handoff_degree" + ("" if "handoff_degree" in pde else
                                                                          ", or set continuation = \"none\""))
        if "max_degree" not in pde and pde["degree"] > top:
            # the solver would refuse it only once the run is under way
            raise ConfigError("pde.degree", f"must be <= pde.max_degree (default {top} on S^{d - 1}), got "
                                            f"{pde['degree']}: lower degree, or set max_degree >= {pde['degree']}")
        if "save_every" in pde and pde["save_every"] > pde["t_final"]:
            raise ConfigError("pde.save_every", f"must be <= pde.t_final = {pde['t_final']}")
        _check_counts(pde, "pde", ("save_every",))
        from ..pde import PDEOptions
        opts = {k: v for k, v in pde.items() if k not in ("degree", "t_final", "save_every")}
        if "filter" in opts:
            opts["filter"] = {"kind": "exponential", **opts["filter"]}
        try:
            PDEOptions.from_kwargs(opts)
        except (TypeError, ValueError) as e:
            raise ConfigError("pde", str(e).replace("option ", "")) from None
        pde = {**pde, **({"filter": opts["filter"]} if "filter" in opts else {})}

    particles = cfg.get("particles")
    if particles is not None:
        init = particles.get("init", "random")
        if init in ("quasi-uniform", "quadrature") and d not in (2, 3):
            raise ConfigError("particles.init", f"{init!r} is defined on S^1 and S^2 only (d = 2, 3); model.d = {d}")
        if init == "quasi-uniform" and initial["kind"] != "uniform":
            raise ConfigError("particles.init", "'quasi-uniform' places particles for the uniform density only; "
                                                f"[initial] is {initial['kind']!r}: use 'random' or 'quadrature'")
        if particles.get("integrator") == "adaptive" and model.noise > 0:
            raise ConfigError("particles.integrator", "'adaptive' has no error control for the noise: use "
                                                      "'euler' or 'rk4' (Euler–Maruyama noise step) with noise > 0")
        if "save_every" in particles and particles["save_every"] > particles["t_final"]:
            raise ConfigError("particles.save_every", f"must be <= particles.t_final = {particles['t_final']}")
        _check_counts(particles, "particles", ("save_every", "dt"))
        stop = particles.get("stop")
        if stop is not None:
            from ..particles import cluster_radius
            radius = cluster_radius(model.beta, d, stop.get("scale", 0.5))
            if not radius >= ANGLE_MIN:
                raise ConfigError("particles.stop.scale", "makes the cluster radius scale / sqrt(beta) "
                                                          f"{radius:.3g} rad, below {ANGLE_MIN:g} ({ANGLE_WHY})")
        if init == "quadrature":
            problem = quadrature_count_problem(d, particles["n"])
            if problem is not None:
                raise ConfigError("particles.n", problem)

    compare = cfg.get("compare")
    if compare is not None and (pde is None or particles is None):
        raise ConfigError("compare", "needs both a [pde] and a [particles] table")
    if compare is not None:
        _check_compare(compare, pde, d)
        _check_common_times(pde, particles)
        _check_compare_scales(compare, model)

    run = cfg.get("run", {})
    return RunConfig(text=text, raw=raw, model=model, initial=initial, pde=pde, particles=particles,
                     compare=compare, name=run.get("name", ""), source=source)


def _eulerian_cap(config: RunConfig) -> tuple[int, str, bool]:
    """(the PDE's largest Eulerian resolution, the key that sets it, whether the Lagrangian continuation
    takes over there), as ``solvers.pde`` sets its cap: min(max_degree, handoff_degree) with the continuation
    (on by default without noise), max_degree without."""
    from ..pde import space_for

    pde, space = config.pde, space_for(config.model.d)[1]
    max_degree = pde.get("max_degree", space.default_max_degree)
    continues = config.model.noise == 0 and pde.get("continuation", "lagrangian") == "lagrangian"
    if continues:
        handoff = pde.get("handoff_degree") or max(space.default_handoff_degree, pde["degree"])
        if handoff < max_degree:
            return handoff, "handoff_degree", True
    return max_degree, "max_degree", continues


def perceptron_points(config: RunConfig, n: int | None = None) -> tuple[int, str]:
    """(the most points the perceptron is evaluated at at once in a run of ``config``, where): the PDE's
    grid at its largest Eulerian resolution, the continuation's nodes (twice them for the error estimate;
    the energy takes the potential at all nodes at once), the particles (``n``, default particles.n: the
    potential of all of them at once)."""
    best = (0, "")
    pde, d = config.pde, config.model.d
    if pde is not None:
        from ..pde import space_for
        space = space_for(d)[1]
        cap, which, continues = _eulerian_cap(config)
        grid = int(np.prod(space.computational_grid(cap)))
        best = max(best, (grid, f"the PDE's grid at {which} = {cap}"))
        if continues:
            nodes = pde.get("nodes", space.default_nodes)
            twice = pde.get("error_estimate", True)
            best = max(best, ((2 if twice else 1) * nodes,
                              f"the continuation's {nodes} nodes"
                              + (", twice for its error estimate" if twice else "")))
    if config.particles is not None:
        n = config.particles["n"] if n is None else n
        best = max(best, (n, f"{n} particles"))
    return best


def check_memory(config: RunConfig, n: int | None = None, key_n: str = "particles.n") -> None:
    """Refuse (ConfigError naming the key) what cannot fit in this machine's memory before anything runs:
    the PDE's transforms at its largest resolution, and the perceptron evaluated at its most points at once
    (units x points, ACTIVATION_ARRAYS arrays at the peak). ``n``: a particle count to check instead of
    particles.n (``attnpde validate --n``), named ``key_n``. The solvers check the rest (snapshots, output
    grid, particles) when they are prepared, also before the archive is made."""
    pde, d = config.pde, config.model.d
    if pde is not None:
        from ..pde import space_for
        space = space_for(d)[1]
        cap, which, _ = _eulerian_cap(config)
        key = f"pde.{which}" if which in pde else "pde.degree"
        _refuse_too_big(key, {f"the PDE's transforms at {which} = {cap}": space.transform_bytes(cap)},
                        f"lower {which}" + ("" if which in pde else f" (default {cap})"))
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


def read_config_text(path: str | Path) -> str:
    """The text of the configuration file ``path``: ConfigError (one line, naming the file) unless it is a
    regular file of at most MAX_CONFIG_BYTES in UTF-8. Nothing else is opened for reading: a FIFO that no
    one writes to, a device such as /dev/zero, a directory or a socket is refused from its ``stat``, and
    the file is opened non-blocking and checked again (it could be replaced in between)."""
    def refuse(why: str) -> ConfigError:
        return ConfigError("", f"{path}: {why}")

    try:
        st = os.stat(path)
    except OSError as e:
        raise refuse(f"cannot read: {e.strerror or e}") from None
    except ValueError as e:            # an embedded NUL in the path
        raise refuse(f"cannot read: {e}") from None

    def kind(mode: int) -> str | None:
        for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                           (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                           (stat.S_ISSOCK, "a socket")):
            if test(mode):
                return what
        return None if stat.S_ISREG(mode) else "not a regular file"

    def check(st) -> None:
        what = kind(st.st_mode)
        if what is not None:
            raise refuse(f"is {what}; give a TOML configuration file")
        if st.st_size > MAX_CONFIG_BYTES:
            raise refuse(f"is {st.st_size} bytes, above the {MAX_CONFIG_BYTES} (1 MiB) a configuration may have "
                         "(an archive? give the .toml configuration)")

    check(st)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise refuse(f"cannot read: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        check(os.fstat(f.fileno()))
        try:
            data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as e:
            raise refuse(f"cannot read: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise refuse(f"is more than {MAX_CONFIG_BYTES} bytes (1 MiB), the most a configuration may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start == 0 or data.startswith(b"\x89HDF"):
            raise refuse("not a UTF-8 TOML file (an archive? give the .toml configuration)") from None
        raise refuse(f"not a UTF-8 TOML file: byte {e.start} ({data[e.start:e.start + 1]!r}) is not UTF-8") from None


def load_config(path: str | Path) -> RunConfig:
    """Read (:func:`read_config_text`), validate and check against this machine's memory
    (:func:`check_memory`) a TOML configuration file."""
    p = Path(path)
    cfg = parse_config(read_config_text(path), str(p))
    if not cfg.name:
        cfg.name = p.stem
    check_memory(cfg)
    return cfg


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan")
    if isinstance(v, str):
        return json_string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def json_string(s: str) -> str:
    import json
    return json.dumps(s)


def dump_toml(raw: dict) -> str:
    """TOML text of a configuration dict (tables of scalars, arrays and sub-tables), e.g. for sweeps."""
    lines: list[str] = []

    def table(d: dict, name: str) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        subs = {k: v for k, v in d.items() if isinstance(v, dict)}
        if name and (scalars or not subs):
            lines.append(f"[{name}]")
        for k, v in scalars.items():
            lines.append(f"{k} = {_toml_value(v)}")
        if scalars or (name and not subs):
            lines.append("")
        for k, v in subs.items():
            table(v, f"{name}.{k}" if name else k)

    table(raw, "")
    return "\n".join(lines).rstrip() + "\n"
