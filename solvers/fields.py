"""The checks of typed input fields, and the TOML tables they make: one declaration per setting.

A dataclass of settings (``PDEOptions``, ``ParticleOptions``, ``StopRule``, the specs) declares each field a
configuration file may set with its check in the field's metadata (:func:`toml`); :func:`table_of` builds the
table of a configuration file from those fields, so that the file's keys, their bounds and their refusals are the
dataclass's. Every refusal is a :class:`ConfigError` naming the key path (``pde.degree``) and what is allowed, in
one line.
"""
from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .spaces import MIN_DEGREE
from .validators import is_integer, is_number, number_problem, shown, spells_infinity

__all__ = ["ConfigError", "Num", "Int", "Choice", "Str", "Array", "Table", "toml", "table_of", "POS", "NONNEG",
           "DEGREE", "DEGREE_MAX", "DEGREE_WHY", "ANGLE", "ANGLE_MIN", "ANGLE_WHY", "INT64_MIN", "INT64_MAX",
           "NAME_MAX_BYTES", "json_string"]


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
            raise ConfigError(path, f"must be a number{self._range()}, got {shown(v)} ({type(v).__name__}){hint}")
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
            raise ConfigError(path, f"must be an integer{self._range()}, got {shown(v)} ({type(v).__name__})")
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
            raise ConfigError(path, f"must be one of {', '.join(repr(o) for o in self.options)}, got {shown(v)}")
        return v


@dataclass(frozen=True)
class Str:
    """A string; ``name``: a name (no control character, no '/', at most NAME_MAX_BYTES in UTF-8), else
    free text without NUL or control characters but tab and line breaks (it is kept in an HDF5 attribute,
    whose strings end at a NUL)."""

    name: bool = False

    def check(self, path: str, v: Any) -> str:
        if not isinstance(v, str):
            raise ConfigError(path, f"must be a string, got {shown(v)}")
        allowed = "" if self.name else "\t\n\r"
        bad = next((c for c in v if c not in allowed and unicodedata.category(c) in _CONTROL), None)
        if bad is not None:
            what = "NUL" if bad == "\0" else f"the control character U+{ord(bad):04X}"
            where = "a name" if self.name else "text kept in the archive's attributes (tab and line breaks are allowed)"
            raise ConfigError(path, f"contains {what}, not allowed in {where}; got {shown(v)}")
        if self.name:
            if "/" in v:
                raise ConfigError(path, f"must not contain '/' (a sweep names its archives <name>_beta<beta>.h5 "
                                        f"in its directory), got {shown(v)}")
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
            raise ConfigError(path, f"must be {what}, got {shown(v)}")
        rows = v if self.ndim == 2 else [v]
        width = None
        for row in rows:
            if not isinstance(row, list) or not row:
                raise ConfigError(path, f"must be {what}, got {shown(v)}")
            if width is not None and len(row) != width:
                raise ConfigError(path, f"rows must all have the same length, got {shown([len(r) for r in rows])}")
            width = len(row)
            for x in row:
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                    raise ConfigError(path, f"must be {what} (finite), got an entry {shown(x)}")
        return np.array(v, dtype=float)


@dataclass(frozen=True)
class Table:
    fields: dict
    required: tuple = ()

    def check(self, path: str, v: Any) -> dict:
        if not isinstance(v, dict):
            # the hint only where it holds: a table without required keys takes its defaults when empty
            raise ConfigError(path, f"must be a table, got {shown(v)}" + (
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


def json_string(s: str) -> str:
    return json.dumps(s)


def toml(check: Any) -> dict:
    """The metadata of a dataclass field that a configuration file may set: its check (``Num``, ``Int``, ...)."""
    return {"toml": check}


def table_of(*classes, required: tuple = (), extra: dict | None = None) -> Table:
    """The TOML table of the fields of ``classes`` that carry a check (:func:`toml`), in their order, with the
    checks of ``extra`` added (keys that are no field, or that check differently in a file)."""
    checks = {f.name: f.metadata["toml"] for cls in classes for f in fields(cls) if "toml" in f.metadata}
    return Table({**checks, **(extra or {})}, required=required)
