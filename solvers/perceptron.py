"""The two-layer perceptron drift of The model §1: activations, potential, tangent drift.

Gradient form (scalar weights c_k):

    V(x) = sum_k c_k Sigma(<a_k, x> + b_k),   Sigma' = sigma,
    grad V(x) = sum_k c_k sigma(<a_k, x> + b_k) P_x a_k.

General form (vector weights w_k, not a gradient, no potential):

    u(x) = P_x sum_k w_k sigma(<a_k, x> + b_k).

Both are P_x applied to sum_k sigma(z_k) W_k with W_k = c_k a_k or w_k, which is how they are
evaluated. P_x y = y - <x, y> x projects onto the tangent space at the unit vector x.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

__all__ = ["ACTIVATIONS", "activation", "activation_derivative", "activation_primitive", "activation_ranges",
           "Perceptron", "tangent_project", "BIAS_MAX", "SCALE_MAX", "ACTIVATION_ARRAYS"]

ACTIVATIONS = ("relu", "gelu", "tanh", "linear")
#: the largest |b_k|: the primitives of relu, gelu and linear grow as z^2 / 2 at z = <a_k, x> + b_k, finite
#: for |z| < 1.3e154; 1e150 keeps them finite with room for the weights
BIAS_MAX = 1e150
#: the largest scale of random weights: c_k = scale N(0, 1) (|N(0, 1)| < 10 but with probability 1e-23)
#: stays finite (1.8e308)
SCALE_MAX = 1e300
#: arrays of (units x points) float64 that evaluating the drift or the potential holds at once at its peak,
#: per activation (the larger of the two; relu 2 and 2, gelu 4 and 5, tanh 2 and 4, linear 2 and 2)
ACTIVATION_ARRAYS = {"relu": 2, "gelu": 5, "tanh": 4, "linear": 2}
_SQRT2 = math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _check_activation(name: str) -> str:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {name!r}")
    return name


def activation(z: np.ndarray, name: str) -> np.ndarray:
    """sigma(z): relu max(z, 0); gelu z Phi(z) (exact, erf form); tanh; linear z."""
    _check_activation(name)
    if name == "relu":
        return np.maximum(z, 0.0)
    if name == "gelu":
        return 0.5 * z * (1.0 + erf(z / _SQRT2))
    if name == "tanh":
        return np.tanh(z)
    return np.asarray(z, dtype=float).copy()


def activation_derivative(z: np.ndarray, name: str) -> np.ndarray:
    """sigma'(z): relu H(z) (1 for z > 0, 0 otherwise: the one-sided value at the kink z = 0, where relu has
    no derivative); gelu Phi(z) + z phi(z); tanh 1 - tanh(z)^2; linear 1."""
    _check_activation(name)
    z = np.asarray(z, dtype=float)
    if name == "relu":
        return (z > 0.0).astype(float)
    if name == "gelu":
        return 0.5 * (1.0 + erf(z / _SQRT2)) + z * _INV_SQRT2PI * np.exp(-0.5 * z * z)
    if name == "tanh":
        return 1.0 - np.tanh(z) ** 2
    return np.ones_like(z)


def activation_primitive(z: np.ndarray, name: str) -> np.ndarray:
    """Sigma(z) with Sigma' = sigma (constants drop out of every velocity).

    relu: max(z,0)^2 / 2; gelu: (z^2 - 1) Phi(z) / 2 + z phi(z) / 2; tanh: log cosh z; linear: z^2 / 2.
    """
    _check_activation(name)
    z = np.asarray(z, dtype=float)
    if name == "relu":
        return 0.5 * np.maximum(z, 0.0) ** 2
    if name == "gelu":
        cdf = 0.5 * (1.0 + erf(z / _SQRT2))
        pdf = _INV_SQRT2PI * np.exp(-0.5 * z * z)
        return 0.5 * (z * z - 1.0) * cdf + 0.5 * z * pdf
    if name == "tanh":
        az = np.abs(z)
        return az + np.log1p(np.exp(-2.0 * az)) - math.log(2.0)
    return 0.5 * z * z


#: the extremes of GeLU's sigma' = Phi + z phi (at z = +-sqrt 2, where sigma'' = phi (2 - z^2) vanishes) and of
#: sigma itself (its minimum, at z = -0.7518), each widened by 1e-12 so that they bound the exact values
_GELU_SLOPE = (-0.12890414518515475 - 1e-12, 1.1289041451851547 + 1e-12)
_GELU_MIN = -0.16997120747990366 - 1e-12
#: sup |sigma''| over the real line (relu away from its kink): gelu phi (2 - z^2) at z = 0, tanh 4 / (3 sqrt 3)
_CURVE = {"relu": 0.0, "gelu": 2.0 / math.sqrt(2.0 * math.pi) + 1e-12, "tanh": 4.0 / (3.0 * math.sqrt(3.0)) + 1e-12,
          "linear": 0.0}


def activation_ranges(name: str, lo: float, hi: float) -> tuple[float, float, float, float]:
    """Bounds over z in [lo, hi] of the activation and its primitive, for the curvature bounds of the potential.

    Returns (slope_up, slope_down, value, primitive): sup max(sigma', 0), sup max(-sigma', 0), sup |sigma|
    and sup |Sigma| over [lo, hi], each an upper bound (exact, or widened by 1e-12). sigma and Sigma are
    monotone on either side of their single minimum (relu, tanh, linear: Sigma at z = 0; gelu: sigma at
    z = -0.7518 and Sigma at 0), so their sups are at the ends or at that minimum.
    """
    _check_activation(name)
    ends = np.array([lo, hi], dtype=float)
    value = float(np.max(np.abs(activation(ends, name))))
    primitive = float(np.max(np.abs(activation_primitive(ends, name))))
    if lo <= 0.0 <= hi:
        primitive = max(primitive, float(abs(activation_primitive(np.zeros(1), name)[0])))
    if name == "relu":
        up, down = (1.0 if hi > 0 else 0.0), 0.0
    elif name == "gelu":
        up, down = _GELU_SLOPE[1], -_GELU_SLOPE[0]
        if lo <= -0.7517915250691811 <= hi:
            value = max(value, -_GELU_MIN)
    elif name == "tanh":
        up, down = 1.0, 0.0
    else:
        up, down = 1.0, 0.0
    return up, down, value * (1.0 + 1e-12), primitive * (1.0 + 1e-12)


def tangent_project(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P_x y = y - <x, y> x row by row, for unit vectors x (n, d) and vectors y (n, d) (any memory layout)."""
    # column products summed in place: faster than einsum for the small d of the circle and the sphere
    d = x.shape[1]
    dot = x[:, 0] * y[:, 0]
    for j in range(1, d):
        dot += x[:, j] * y[:, j]
    if d > 3:
        out = x * dot[:, None]
        np.subtract(y, out, out=out)
        return out
    # for d <= 3 the result is formed column by column, the same products (the same bits): broadcasting
    # <x, y> over rows of length d runs an inner loop of only d per row, which is slower up to d = 3
    out = np.empty((x.shape[0], d))
    for j in range(d):
        col = out[:, j]
        np.multiply(x[:, j], dot, out=col)
        np.subtract(y[:, j], col, out=col)
    return out


class Perceptron:
    """Two-layer perceptron with m units on R^d (The model §1).

    Parameters
    ----------
    a : array_like, shape (m, d)
        Directions a_k; each must be finite and non-zero, and is normalised to unit length.
    c : array_like, shape (m,), optional
        Scalar output weights: the gradient form, drift grad V.
    w : array_like, shape (m, d), optional
        Vector output weights: the general form, drift P_x sum_k w_k sigma(.). Exactly one of c, w.
    b : array_like, shape (m,), optional
        Biases b_k (default 0).
    activation : {"relu", "gelu", "tanh", "linear"}
    """

    def __init__(self, a, c=None, w=None, b=None, activation: str = "relu") -> None:
        a = np.array(a, dtype=float, ndmin=2)
        if a.ndim != 2:
            raise ValueError(f"Perceptron: a must have shape (units, d), got shape {a.shape}")
        m, d = a.shape
        if m < 1:
            raise ValueError("Perceptron: a must hold at least one direction (units >= 1)")
        if not np.all(np.isfinite(a)):
            raise ValueError("Perceptron: every direction a_k must be finite")
        top = np.max(np.abs(a), axis=1)
        if np.any(top == 0):
            bad = int(np.nonzero(top == 0)[0][0])
            raise ValueError(f"Perceptron: direction a_{bad} is zero; directions must be non-zero")
        if (c is None) == (w is None):
            raise ValueError("Perceptron: give exactly one of c (scalar weights, gradient form) "
                             "or w (vector weights, general form)")
        self.activation = _check_activation(activation)
        # rows already of unit length (to round-off) are kept bit for bit: normalising is idempotent,
        # so a perceptron read back from an archive is the one that was written. A row whose squares
        # overflow ([1e308, 1e308]) or underflow ([1e-320, 0]) is divided by its largest entry first
        extreme = (top > 1e100) | (top < 1e-100)
        with np.errstate(over="ignore", under="ignore"):
            norms = np.linalg.norm(a, axis=1)
        unit = ~extreme & (np.abs(norms - 1.0) <= 4 * np.finfo(float).eps)
        self.a = a / np.where(unit | extreme, 1.0, norms)[:, None]
        if np.any(extreme):
            self.a[extreme] /= top[extreme, None]
            self.a[extreme] /= np.linalg.norm(self.a[extreme], axis=1)[:, None]
        if c is not None:
            c = np.array(c, dtype=float).reshape(-1)
            if c.shape != (m,) or not np.all(np.isfinite(c)):
                raise ValueError(f"Perceptron: c must be {m} finite numbers (one per unit), got shape {c.shape}")
            self.c, self.w = c, None
            self._W = c[:, None] * self.a
        else:
            w = np.array(w, dtype=float, ndmin=2)
            if w.shape != (m, d) or not np.all(np.isfinite(w)):
                raise ValueError(f"Perceptron: w must be finite with shape ({m}, {d}), got shape {w.shape}")
            self.c, self.w = None, w
            self._W = w
        if b is None:
            b = np.zeros(m)
        b = np.array(b, dtype=float).reshape(-1)
        if b.shape != (m,) or not np.all(np.isfinite(b)):
            raise ValueError(f"Perceptron: b must be {m} finite numbers (one per unit), got shape {b.shape}")
        if np.any(np.abs(b) > BIAS_MAX):
            bad = int(np.argmax(np.abs(b)))
            raise ValueError(f"Perceptron: every bias must be within +-{BIAS_MAX:g} (the activations' primitives "
                             f"grow as z^2/2 at z = <a_k, x> + b_k, finite below 1.3e154), got b_{bad} = {b[bad]:.3g}")
        self.b = b
        for arr in (self.a, self.b, self._W) + ((self.c,) if self.c is not None else (self.w,)):
            arr.setflags(write=False)

    # --- construction ----------------------------------------------------------------------------
    @classmethod
    def random(cls, d: int, units: int | None = None, activation: str = "relu", scale: float = 1.0,
               seed: int = 0, *, general: bool = False, bias_scale: float = 0.0) -> "Perceptron":
        """Random weights: a_k i.i.d. uniform on S^{d-1}, c_k ~ N(0, scale^2) (or w_k ~ N(0, scale^2 I_d)
        when ``general``), b_k ~ N(0, bias_scale^2). ``units`` defaults to d (the reference experiments)."""
        if not (isinstance(d, (int, np.integer)) and d >= 2):
            raise ValueError(f"Perceptron.random: d must be an integer >= 2, got {d!r}")
        units = d if units is None else units
        if not (isinstance(units, (int, np.integer)) and units >= 1):
            raise ValueError(f"Perceptron.random: units must be an integer >= 1, got {units!r}")
        if not (np.isfinite(scale) and 0 < scale <= SCALE_MAX):
            raise ValueError(f"Perceptron.random: scale must be finite, > 0 and <= {SCALE_MAX:g} (the weights "
                             f"scale N(0, 1) stay finite), got {scale!r}")
        if not (np.isfinite(bias_scale) and 0 <= bias_scale <= BIAS_MAX / 10):
            raise ValueError(f"Perceptron.random: bias_scale must be finite, >= 0 and <= {BIAS_MAX / 10:g} (ten "
                             f"standard deviations within the biases' bound {BIAS_MAX:g}), got {bias_scale!r}")
        rng = np.random.default_rng(seed)
        a = rng.standard_normal((units, d))
        while np.any(np.linalg.norm(a, axis=1) == 0):  # probability zero, but never divide by 0
            a = rng.standard_normal((units, d))
        if general:
            w = scale * rng.standard_normal((units, d))
            c = None
        else:
            c = scale * rng.standard_normal(units)
            w = None
        b = bias_scale * rng.standard_normal(units) if bias_scale > 0 else None
        return cls(a, c=c, w=w, b=b, activation=activation)

    # --- properties ------------------------------------------------------------------------------
    @property
    def d(self) -> int:
        return self.a.shape[1]

    @property
    def units(self) -> int:
        return self.a.shape[0]

    @property
    def is_gradient(self) -> bool:
        """True for the gradient form (scalar weights c): the drift is grad V."""
        return self.c is not None

    def rotated(self, R: np.ndarray) -> "Perceptron":
        """The perceptron with every direction (and vector weight) rotated by the orthogonal R."""
        R = np.asarray(R, dtype=float)
        if self.is_gradient:
            return Perceptron(self.a @ R.T, c=self.c, b=self.b, activation=self.activation)
        return Perceptron(self.a @ R.T, w=self.w @ R.T, b=self.b, activation=self.activation)

    def to_dict(self) -> dict:
        """Every parameter, as plain arrays and strings (for archives and configurations)."""
        out = {"a": np.array(self.a), "b": np.array(self.b), "activation": self.activation,
               "form": "gradient" if self.is_gradient else "general"}
        if self.is_gradient:
            out["c"] = np.array(self.c)
        else:
            out["w"] = np.array(self.w)
        return out

    # --- evaluation ------------------------------------------------------------------------------
    def _preactivation(self, x: np.ndarray) -> np.ndarray:
        """<a_k, x_i> + b_k as an (m, n) array: units along the first axis, so that the biases are added
        along whole rows (an (n, m) layout adds them in inner loops of length m, slow for few units)."""
        x = np.asarray(x, dtype=float)
        if x.ndim != 2 or x.shape[1] != self.d:
            raise ValueError(f"points must have shape (n, {self.d}), got {x.shape}")
        z = self.a @ x.T
        z += self.b[:, None]
        return z

    def potential(self, x: np.ndarray) -> np.ndarray:
        """V(x) = sum_k c_k Sigma(<a_k, x> + b_k) at unit vectors x (n, d). Gradient form only."""
        if not self.is_gradient:
            raise ValueError("the general-form perceptron (vector weights w) has no potential")
        return self.c @ activation_primitive(self._preactivation(x), self.activation)

    def unit_forces(self, x: np.ndarray) -> np.ndarray:
        """|sigma(<a_k, x_i> + b_k)| |W_k| (n, m): the size of each unit's term of the drift at unit vectors x
        before its tangent projection (W_k = c_k a_k in the gradient form, w_k in the general form). Zero
        exactly where a ReLU unit is off."""
        mag = np.abs(activation(self._preactivation(x), self.activation))
        return (mag * np.linalg.norm(self._W, axis=1)[:, None]).T

    def curvature_bounds(self) -> tuple[float, float]:
        """(lo, hi) with lo <= d^2/ds^2 V(x(s)) <= hi along every unit-speed great circle x(s) of S^{d-1}.

        Along x(s) = x cos s + u sin s (u a unit tangent at x), p_k = <a_k, x(s)> has p_k'' = -p_k and
        p_k'^2 <= 1 - p_k^2 (|a_k| = 1), so with z_k = p_k + b_k

            d^2/ds^2 Sigma(z_k) = sigma'(z_k) p_k'^2 - sigma(z_k) p_k
                                in [-(slope_down + value), slope_up + value]

        over z_k in [b_k - 1, b_k + 1] (:func:`activation_ranges`); V'' sums c_k times these. relu's V is C^1
        with a bounded, piecewise continuous V'', so the bound holds almost everywhere and Taylor's formula
        with integral remainder applies. Gradient form only.
        """
        if not self.is_gradient:
            raise ValueError("the general-form perceptron (vector weights w) has no potential")
        lo = hi = 0.0
        for c, b in zip(self.c, self.b):
            up, down, value, _ = activation_ranges(self.activation, b - 1.0, b + 1.0)
            top, bottom = up + value, -(down + value)
            lo += min(c * top, c * bottom)
            hi += max(c * top, c * bottom)
        return float(lo), float(hi)

    def third_derivative_bound(self) -> float:
        """M with |d^3/ds^3 V(x(s))| <= M along every unit-speed great circle (for relu: along pieces that cross
        no kink <a_k, x> + b_k = 0). With the notation of :meth:`curvature_bounds`,

            d^3/ds^3 Sigma(z_k) = sigma''(z_k) p_k'^3 - 3 sigma'(z_k) p_k' p_k - sigma(z_k) p_k',

        bounded by sup |sigma''| + 3 sup |sigma'| + sup |sigma| over z_k in [b_k - 1, b_k + 1]. Gradient form
        only."""
        if not self.is_gradient:
            raise ValueError("the general-form perceptron (vector weights w) has no potential")
        total = 0.0
        for c, b in zip(self.c, self.b):
            up, down, value, _ = activation_ranges(self.activation, b - 1.0, b + 1.0)
            total += abs(c) * (_CURVE[self.activation] + 3.0 * max(up, down) + value)
        return float(total)

    def magnitude(self) -> float:
        """sum_k |c_k| (sup |Sigma| + sup |sigma|) over z_k in [b_k - 1, b_k + 1]: a bound on |V| + |grad V|
        on the sphere, the scale of the round-off of their evaluation. Gradient form only."""
        if not self.is_gradient:
            raise ValueError("the general-form perceptron (vector weights w) has no potential")
        total = 0.0
        for c, b in zip(self.c, self.b):
            _, _, value, primitive = activation_ranges(self.activation, b - 1.0, b + 1.0)
            total += abs(c) * (value + primitive)
        return float(total)

    def drift(self, x: np.ndarray) -> np.ndarray:
        """The tangent drift at unit vectors x (n, d): grad V (gradient form) or u (general form)."""
        x = np.asarray(x, dtype=float)
        # (d, n) from the (m, n) activations, viewed as (n, d): its columns are contiguous rows
        vec = (self._W.T @ activation(self._preactivation(x), self.activation)).T
        return tangent_project(x, vec)

    def __repr__(self) -> str:
        form = "gradient" if self.is_gradient else "general"
        return f"Perceptron(d={self.d}, units={self.units}, activation={self.activation!r}, form={form!r})"
