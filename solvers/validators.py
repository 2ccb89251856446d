"""Checks of user input, shared by the Python API (the solvers' arguments and options) and the
configuration files (:mod:`solvers.app.config` checks its scalar entries with the same functions and
takes its bounds from the solvers' own constants), so that both accept exactly the same values.

Each function returns the value converted (``float``, ``int``, ``bool``) or raises ValueError naming it:
``"<name> must be a finite number > 0, got 0.0"``. Booleans are never numbers here (``True`` is not 1).
"""
from __future__ import annotations

import math
import reprlib
from typing import Any

import numpy as np

__all__ = ["number", "number_problem", "integer", "flag", "choice", "is_number", "is_integer", "spells_infinity",
           "INFINITY", "UNTIL_CERTIFIED", "shown"]


def is_number(v: Any) -> bool:
    """A real number (Python or numpy), not a bool."""
    return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, float, np.integer, np.floating))


def is_integer(v: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, np.integer))


def _bounds(gt, ge, le) -> str:
    parts = [f"> {gt:g}" if gt is not None else None, f">= {ge:g}" if ge is not None else None,
             f"<= {le:g}" if le is not None else None]
    parts = [p for p in parts if p]
    return (" " + " and ".join(parts)) if parts else ""


#: how an infinite value is written: the same words in the refusals of the Python API and of TOML files
INFINITY = "a bare inf in TOML, math.inf in Python"
#: what an infinite final time means (pde.t_final, ``solve_pde``'s t_final)
UNTIL_CERTIFIED = "until the terminal state is certified"


def shown(v: Any) -> str:
    """repr(v) shortened for a one-line message (a long list or string, a deeply nested array)."""
    r = reprlib.Repr()
    r.maxlist = r.maxtuple = r.maxdict = 8
    r.maxlevel = 3
    r.maxstring = r.maxother = 60
    return r.repr(v)


def spells_infinity(v: Any) -> bool:
    """A string that names infinity ("inf", "infinity", "+Inf", "∞"): what a number should have been."""
    return isinstance(v, str) and v.strip().lower().lstrip("+") in ("inf", "infinity", "∞")


def number_problem(v: Any, *, gt: float | None = None, ge: float | None = None, le: float | None = None,
                   allow_none: bool = False, infinite: str = "", why: str = "") -> str:
    """What a refused number must be and what it was: "must be a number > 0 or infinity (until the terminal
    state is certified; a bare inf in TOML, math.inf in Python), got 'infinity' (a string)".
    ``infinite``: what +inf means where it is allowed (empty: only finite numbers); ``why``: the bounds'
    reason, said with them. Shared by :func:`number` and the configuration files' checks."""
    bounds = _bounds(gt, ge, le) + (f" ({why})" if why else "")
    what = (f"a number{bounds} or infinity ({infinite}; {INFINITY})" if infinite else f"a finite number{bounds}")
    got = shown(v)
    if isinstance(v, str):
        try:
            float(v)
            quoted = True
        except ValueError:
            quoted = False
        # a number in quotes: drop them; infinity in quotes: the spellings are in what it must be
        got += (" (a string; infinity is not allowed here)" if spells_infinity(v) and not infinite else
                " (a string: no quotes)" if quoted and not spells_infinity(v) else " (a string)")
    return f"must be {what}{' or None' if allow_none else ''}, got {got}"


def number(name: str, v: Any, *, gt: float | None = None, ge: float | None = None, le: float | None = None,
           allow_none: bool = False, infinite: str = "") -> float | None:
    """A finite real number within the bounds (``gt``: exclusive, ``ge``/``le``: inclusive); with ``infinite``
    (what it means there) +inf too."""
    if v is None and allow_none:
        return None
    if infinite and is_number(v) and v == math.inf:
        return math.inf
    ok = is_number(v) and math.isfinite(v) and (gt is None or v > gt) and (ge is None or v >= ge) \
        and (le is None or v <= le)
    if not ok:
        raise ValueError(f"{name} " + number_problem(v, gt=gt, ge=ge, le=le, allow_none=allow_none, infinite=infinite))
    return float(v)


def integer(name: str, v: Any, *, ge: int | None = None, allow_none: bool = False) -> int | None:
    """An integer >= ``ge``."""
    if v is None and allow_none:
        return None
    if not is_integer(v) or (ge is not None and v < ge):
        raise ValueError(f"{name} must be an integer{f' >= {ge}' if ge is not None else ''}"
                         f"{' or None' if allow_none else ''}, got {v!r}")
    return int(v)


def flag(name: str, v: Any) -> bool:
    """True or False (not 0, 1 or a string)."""
    if not isinstance(v, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {v!r}")
    return bool(v)


def choice(name: str, v: Any, options: tuple) -> Any:
    """One of ``options``."""
    if isinstance(v, (bool, np.bool_)) or v not in options:
        raise ValueError(f"{name} must be one of {options}, got {v!r}")
    return v


def known_options(where: str, given: dict, options, arguments=()) -> None:
    """TypeError unless every key of ``given`` is one of ``options`` (the options dataclass's fields of the
    function ``where``); the message lists its ``arguments`` too (the named parameters, which a misspelt
    keyword was probably meant for: ``save_evry``) and the closest name."""
    import difflib

    unknown = sorted(set(given) - set(options))
    if unknown:
        names = sorted(set(options) | set(arguments))
        # an argument of ``where`` itself given to the function that checks its options for it (``progress``
        # to prepare_pde, which solve_pde takes and prepare_pde does not) is named as such
        hints = [f"{u!r} is an argument of {where} only" if u in arguments else
                 next((f"{u!r}: did you mean {c!r}?" for c in difflib.get_close_matches(u, names, n=1)), "")
                 for u in unknown]
        hint = "; ".join(h for h in hints if h)
        raise TypeError(f"{where}: unknown option(s) {unknown}" + (f" ({hint})" if hint else "")
                        + f"; its arguments: {sorted(arguments)}; its options: {sorted(options)}")


def named_parameters(function) -> tuple:
    """The names of ``function``'s parameters but its ``**options`` (for :func:`known_options`)."""
    import inspect

    return tuple(n for n, p in inspect.signature(function).parameters.items() if p.kind is not p.VAR_KEYWORD)
