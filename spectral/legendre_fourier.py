"""Exact Fourier series in theta of the fully normalised associated Legendre functions.

With Pbar_lm the fully normalised associated Legendre functions of the unit sphere (no Condon–Shortley
phase; Y_lm = Pbar_lm(cos theta) e^{i m phi} orthonormal on S^2, i.e. ∫_0^pi Pbar_lm(cos t)^2 sin t dt
= 1 / (2 pi)), Pbar_lm(cos theta) = (sin theta)^m q_{l-m}(cos theta) with q a polynomial of degree l - m
and parity l - m. Taking sin theta *signed*, so that theta runs over the whole circle [0, 2 pi) (the
"doubled sphere"), this is a trigonometric polynomial of degree l in theta:

    Pbar_lm(cos theta) = sum_{p=0}^{l} alpha^{lm}_p cos(p theta)   (m even; an even function of theta),
    Pbar_lm(cos theta) = sum_{p=1}^{l} alpha^{lm}_p sin(p theta)   (m odd;  an odd function of theta),

with alpha^{lm}_p = 0 unless p = l (mod 2). Likewise, for m >= 1,

    Pbar_lm(cos theta) / sin theta = (sin theta)^{m-1} q_{l-m}(cos theta)

is a trigonometric polynomial of degree l - 1 of parity m - 1 (cosine series for m odd, sine series for
m even); it is what the azimuthal component of a gradient, (1 / sin theta) d/dphi, needs, and it is
bounded at the poles.

The coefficients are computed exactly (to rounding): the functions are sampled by the standard
three-term recurrence (in l at fixed m, from the sectoral seeds Pbar_mm) on n = 2L + 2 equispaced
angles theta_k = 2 pi k / n, and a real FFT of the samples gives every coefficient of degree <= L
without aliasing (n > 2 L). Cost O(L^3) once; the coefficients are dimensionless, like Pbar.

This module knows nothing of the model.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["legendre_samples", "legendre_fourier", "fourier_series", "point_sums", "point_sum_inputs"]


def _check_degree(L) -> int:
    if not (isinstance(L, (int, np.integer)) and L >= 0):
        raise ValueError(f"degree L must be an integer >= 0, got {L!r}")
    return int(L)


def legendre_samples(L: int, theta: np.ndarray, *, over_sin: bool = False) -> list[np.ndarray]:
    """Pbar_lm(cos theta) (or Pbar_lm(cos theta) / sin theta) with sin theta signed, any real theta.

    Parameters
    ----------
    L : int
        Largest degree.
    theta : (n,) array
        Angles (radians); values outside [0, pi] use the signed sin theta (the doubled sphere).
    over_sin : bool
        If True, return Pbar_lm / sin theta for m >= 1 (a polynomial in cos theta and sin theta,
        computed without a division) and zeros for m = 0.

    Returns
    -------
    list of L + 1 arrays; entry m has shape (L + 1 - m, n), row l - m holding degree l.
    """
    return list(_samples_by_order(_check_degree(L), np.asarray(theta, dtype=float).reshape(-1), over_sin))


def _samples_by_order(L: int, theta: np.ndarray, over_sin: bool):
    """The arrays of :func:`legendre_samples`, one order m at a time (a generator: O(L n) memory)."""
    z, s = np.cos(theta), np.sin(theta)
    sectoral = np.full(theta.shape, 1.0 / math.sqrt(4.0 * math.pi))       # Pbar_00
    for m in range(L + 1):
        P = np.zeros((L + 1 - m, theta.size))
        if m >= 1:
            c = math.sqrt((2.0 * m + 1.0) / (2.0 * m))
            seed = c * sectoral                 # Pbar_mm / sin theta
            sectoral = seed * s                 # Pbar_mm
        if over_sin and m == 0:
            yield P
            continue
        P[0] = seed if over_sin else sectoral
        if L > m:
            P[1] = math.sqrt(2.0 * m + 3.0) * z * P[0]
        for l in range(m + 2, L + 1):
            a = math.sqrt((4.0 * l * l - 1.0) / (l * l - m * m))
            b = math.sqrt(((l - 1.0) ** 2 - m * m) / (4.0 * (l - 1.0) ** 2 - 1.0))
            P[l - m] = a * (z * P[l - m - 1] - b * P[l - m - 2])
        yield P


def legendre_fourier(L: int, *, over_sin: bool = False) -> list[np.ndarray]:
    """The real Fourier coefficients alpha^{lm}_p of Pbar_lm(cos theta) (or of Pbar_lm / sin theta).

    Parameters
    ----------
    L : int
        Largest degree.
    over_sin : bool
        If True, the coefficients of Pbar_lm(cos theta) / sin theta (m >= 1; zeros for m = 0).

    Returns
    -------
    list of L + 1 arrays; entry m has shape (L + 1 - m, L + 1): row l - m, column p = 0..L, with

        f_lm(theta) = sum_p alpha[m][l - m, p] * (cos(p theta) if kind(m) == "cos" else sin(p theta)),

    kind(m) = "cos" for m even and "sin" for m odd; with ``over_sin`` the other way round
    (see :func:`fourier_series`). Exact to rounding: samples on 2L + 2 equispaced angles, real FFT.
    """
    L = _check_degree(L)
    n = 2 * L + 2
    theta = 2.0 * np.pi * np.arange(n) / n
    out = []
    for m, P in enumerate(_samples_by_order(L, theta, over_sin)):
        F = np.fft.rfft(P, axis=1)[:, : L + 1] / n          # sum_k f(theta_k) e^{-i p theta_k} / n
        if _is_cosine(m, over_sin):
            alpha = 2.0 * F.real
            alpha[:, 0] = F[:, 0].real
        else:
            alpha = -2.0 * F.imag
            alpha[:, 0] = 0.0
        out.append(alpha)
    return out


def point_sum_inputs(F: np.ndarray, L: int) -> np.ndarray:
    """The vectors that the coefficients alpha of order m multiply in :func:`point_sums`, one row per order:
    U[m, p] = (F(-p, m) + F(p, m)) / 2 for m even (F(0, m) at p = 0), i (F(p, m) - F(-p, m)) / 2 for m odd,
    p = 0..L (shape (L + 1, L + 1); F indexed [k + L, q + L])."""
    pos, neg = F[L:, L:].T, F[L::-1, L:].T               # [m, p]: F(p, m), F(-p, m)
    even = np.arange(L + 1) % 2 == 0
    U = np.where(even[:, None], 0.5 * (pos + neg), 0.5j * (pos - neg))
    U[even, 0] = pos[even, 0]
    return U


def point_sums(F: np.ndarray, alpha: list[np.ndarray]) -> list[np.ndarray]:
    """sum_i w_i Pbar_lm(cos theta_i) e^{-i m phi_i} for m = 0..L from the type-1 transform of the points
    on the doubled sphere, F(k, q) = sum_i w_i e^{-i(k theta_i + q phi_i)} (shape (2L + 1, 2L + 1), index
    [k + L, q + L]), and the coefficients ``alpha`` of :func:`legendre_fourier` (L): entry m is (L + 1 - m,),
    degrees l = m..L. With Pbar_lm(cos theta) = sum_p alpha_p cos(p theta) (m even) the sum is sum_p alpha_p
    (F(-p, m) + F(p, m)) / 2 (alpha_0 F(0, m) at p = 0); with sin(p theta) (m odd), sum_p alpha_p i (F(p, m) -
    F(-p, m)) / 2 (:func:`point_sum_inputs`). O(L^3)."""
    L = len(alpha) - 1
    U = point_sum_inputs(F, L)
    # each row copied to a new array: the BLAS product's rounding depends on the vector's alignment, and a
    # row of U is aligned otherwise (1-ulp differences in some sums without the copy, measured)
    return [alpha[m] @ U[m].copy() for m in range(L + 1)]


def _is_cosine(m: int, over_sin: bool) -> bool:
    return (m % 2 == 0) != (over_sin and m >= 1)


def fourier_series(alpha: list[np.ndarray], m: int, theta: np.ndarray, *, over_sin: bool = False) -> np.ndarray:
    """Evaluate the series of :func:`legendre_fourier` for order m at angles theta: (L + 1 - m, n)."""
    theta = np.asarray(theta, dtype=float).reshape(-1)
    p = np.arange(alpha[m].shape[1])
    trig = np.cos if _is_cosine(m, over_sin) else np.sin
    return alpha[m] @ trig(np.outer(p, theta))
