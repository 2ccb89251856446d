"""Explicit spectral filters, as multipliers sigma(l / L) applied degree by degree.

Filters are never applied silently: a solver applies one only when asked, and records it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["ExponentialFilter", "make_filter"]


@dataclass(frozen=True)
class ExponentialFilter:
    """sigma(eta) = exp(-alpha eta^order), eta = l / L (Vandeven / Hesthaven exponential filter).

    ``alpha = -log(eps)`` makes the top degree damped to machine epsilon (alpha = 36 for double);
    a larger ``order`` leaves more of the low spectrum untouched.
    """

    alpha: float = 36.0
    order: int = 16

    def __post_init__(self) -> None:
        if not (np.isfinite(self.alpha) and self.alpha > 0):
            raise ValueError(f"filter alpha must be finite and > 0, got {self.alpha!r}")
        if not (int(self.order) == self.order and self.order >= 2 and self.order % 2 == 0):
            raise ValueError(f"filter order must be an even integer >= 2, got {self.order!r}")

    def multipliers(self, degrees: np.ndarray, lmax: int) -> np.ndarray:
        """sigma(l / lmax) for each entry of ``degrees``."""
        eta = np.asarray(degrees, dtype=float) / max(lmax, 1)
        return np.exp(-self.alpha * eta ** self.order)

    def describe(self) -> dict:
        return {"kind": "exponential", **asdict(self)}


def make_filter(spec) -> ExponentialFilter | None:
    """A filter from None, a filter object, or a mapping {"kind": "exponential", "alpha", "order"}."""
    if spec is None or spec is False:
        return None
    if isinstance(spec, ExponentialFilter):
        return spec
    if isinstance(spec, dict):
        opts = dict(spec)
        kind = opts.pop("kind", "exponential")
        if kind != "exponential":
            raise ValueError(f"filter kind must be 'exponential', got {kind!r}")
        unknown = set(opts) - {"alpha", "order"}
        if unknown:
            raise ValueError(f"unknown filter option(s) {sorted(unknown)}; allowed: alpha, order")
        return ExponentialFilter(**opts)
    if spec == "exponential":
        return ExponentialFilter()
    raise ValueError(f"filter must be None, 'exponential' or a mapping with kind='exponential', got {spec!r}")
