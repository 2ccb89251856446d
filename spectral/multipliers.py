"""Funk–Hecke multipliers of the zonal kernel f(t) = exp(beta (t - 1)) on S^{d-1}.

For every spherical harmonic Y_l of degree l on S^{d-1} and the uniform *probability*
measure sigma,

    ∫ exp(beta(<x,y> - 1)) Y_l(y) dsigma(y) = lambda_l Y_l(x),
    lambda_l(beta, d) = Gamma(d/2) (2/beta)^(d/2 - 1) ive(l + d/2 - 1, beta),

with ``ive`` the exponentially scaled modified Bessel function of the first kind.
d = 2 gives lambda_k = ive(k, beta) for the Fourier modes exp(i k theta). For beta > 1 they are
evaluated so (scipy's ive, the prefactor in logs); for 0 < beta <= 1 from the power series of I_nu with
the powers of beta and 2 cancelled by hand, which stays exact to ~1e-15 relative where ive underflows
(beta below ~1e-200: g_1 -> 1/d) and takes only IEEE arithmetic and one libm exp.

This module knows nothing of the model: it only evaluates these multipliers and the
multipliers of the kernel divided by beta (the "potential" multipliers), with their exact
beta -> 0 limits, so that beta = 0 works without a division by zero.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln, ive

__all__ = [
    "MIN_BETA",
    "BETA_MAX",
    "zonal_multipliers",
    "potential_multipliers",
    "kernel_bandwidth",
    "laplacian_eigenvalues",
]


#: the smallest beta > 0: below it g_0 = lambda_0 / beta (~ 1 / beta) overflows, and 0 * g_0 (the gradient
#: of the constant mode) is NaN
MIN_BETA = 1e-300

#: the largest beta: the multipliers are modified Bessel functions ive(nu, beta), whose scipy implementation
#: (AMOS) returns NaN above beta = (2^31 - 1) / 2 = 1.07e9 ("complete loss of significance"); the kernel needs
#: ~8.9 sqrt(beta) = 2.8e5 degrees at 1e9
BETA_MAX = 1e9
BETA_MAX_WHY = ("the kernel's multipliers ive(k, beta) are NaN above (2^31 - 1)/2 = 1.07e9, the range of scipy's "
                "modified Bessel functions (AMOS)")


def _check(beta: float, d: int, lmax: int) -> None:
    if not (isinstance(d, (int, np.integer)) and d >= 2):
        raise ValueError(f"d must be an integer >= 2, got {d!r}")
    if not (np.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be finite and >= 0, got {beta!r}")
    if beta > BETA_MAX:
        raise ValueError(f"beta must be <= {BETA_MAX:g} ({BETA_MAX_WHY}), got {beta!r}")
    if lmax < 0:
        raise ValueError(f"lmax must be >= 0, got {lmax!r}")


# At and below this beta the multipliers come from the power series of I_nu with the powers of beta and 2
# cancelled by hand (_series); above it from scipy's ive. Below beta ~ 1e-200, ive(l + d/2 - 1, beta)
# underflows while beta^(1 - d/2) rescales it (g_1 -> 1/d), and its prefactor in logs loses
# |log prefactor| x 1e-16 (1e-12 at d = 50, beta = 1e-150): the series has neither problem.
_SERIES_BETA = 1.0


def _series(beta: float, d: int, lmax: int, potential: bool) -> np.ndarray:
    """lambda_l (or g_l = lambda_l / beta) for 0 < beta <= _SERIES_BETA.

    With nu = l + d/2 - 1 and I_nu(z) = (z/2)^nu sum_k (z^2/4)^k / (k! Gamma(nu + k + 1)),

        lambda_l = exp(-beta) c_l S_l,   c_l = Gamma(d/2) (beta/2)^l / Gamma(l + d/2),
        S_l = sum_k (beta^2/4)^k / (k! (nu + 1)_k),

    c_l by the recurrence c_l = c_{l-1} beta / (2 (l - 1 + d/2)) (for g_l: c_l / beta, started at
    g's c_1 = 1/d, so that no power of beta underflows). Each term of S_l is at most 1/4 of the one
    before and the k-th at most 1/(4^k k!^2) of the first (beta <= 1), so 24 terms are more than the
    double precision needs."""
    l = np.arange(lmax + 1, dtype=float)
    ratio = beta / (2.0 * (l[1:] - 1.0 + 0.5 * d))          # c_l / c_{l-1}, l >= 1
    c = np.empty(lmax + 1)
    if potential:
        c[0] = 1.0 / beta
        if lmax >= 1:
            c[1] = 1.0 / d
            with np.errstate(under="ignore"):
                c[2:] = np.cumprod(ratio[1:]) / d
    else:
        c[0] = 1.0
        with np.errstate(under="ignore"):
            c[1:] = np.cumprod(ratio)
    nu = l + 0.5 * d - 1.0
    q = 0.25 * beta * beta
    term, total = np.ones(lmax + 1), np.ones(lmax + 1)
    with np.errstate(under="ignore"):
        for k in range(1, 25):
            term = term * q / (k * (nu + k))
            total += term
        return math.exp(-beta) * c * total


def _scaled_bessel(beta: float, d: int, lmax: int, power: float) -> np.ndarray:
    """Gamma(d/2) 2^(d/2-1) beta^(power) ive(l + d/2 - 1, beta), in logs where needed."""
    l = np.arange(lmax + 1, dtype=float)
    nu = l + 0.5 * d - 1.0
    with np.errstate(under="ignore"):
        iv = ive(nu, beta)
    out = np.zeros(lmax + 1)
    pos = iv > 0
    # log form: the prefactor (2/beta)^(d/2-1) can overflow where ive underflows (large d, small beta)
    logpref = gammaln(0.5 * d) + (0.5 * d - 1.0) * math.log(2.0) + power * math.log(beta)
    out[pos] = np.exp(logpref + np.log(iv[pos]))
    return out


def zonal_multipliers(beta: float, d: int, lmax: int) -> np.ndarray:
    """Funk–Hecke multipliers lambda_l(beta, d), l = 0..lmax, of exp(beta(t - 1)).

    Parameters
    ----------
    beta : float
        Inverse temperature, finite and >= 0.
    d : int
        Ambient dimension (the sphere is S^{d-1}); d = 2 is the circle.
    lmax : int
        Largest degree.

    Returns
    -------
    ndarray, shape (lmax + 1,)
        lambda_l in (0, 1]; lambda_0 = E_sigma[exp(beta(t-1))] and lambda_l decreases with l.
        At beta = 0 the kernel is the constant 1: lambda = (1, 0, 0, ...).
    """
    _check(beta, d, lmax)
    if beta == 0.0:
        out = np.zeros(lmax + 1)
        out[0] = 1.0
        return out
    if beta <= _SERIES_BETA:
        return _series(beta, d, lmax, potential=False)
    return _scaled_bessel(beta, d, lmax, power=1.0 - 0.5 * d)


def potential_multipliers(beta: float, d: int, lmax: int) -> np.ndarray:
    """Multipliers g_l of the kernel divided by beta, with the exact beta -> 0 limits.

    For beta > 0, g_l = lambda_l(beta, d) / beta: the multipliers of exp(beta(t-1))/beta, so that
    Phi = Psi / beta has coefficients g_l rho_l and grad Phi = ∫ exp(beta(<x,y>-1)) P_x y drho(y).

    At beta = 0 these are the multipliers of t - 1 (the limit after dropping the constant 1/beta):
    g_0 = -1, g_1 = 1/d, g_l = 0 for l >= 2. For l >= 1 this is the limit lambda_l / beta -> (1/d, 0, ...),
    so gradients are continuous in beta; only the l = 0 entry (which has no gradient) drops 1/beta.
    """
    _check(beta, d, lmax)
    if 0 < beta < MIN_BETA:
        raise ValueError(f"beta must be 0 or >= {MIN_BETA:g} (below, 1/beta overflows), got {beta!r}")
    if beta == 0.0:
        out = np.zeros(lmax + 1)
        out[0] = -1.0
        if lmax >= 1:
            out[1] = 1.0 / d
        return out
    if beta <= _SERIES_BETA:
        return _series(beta, d, lmax, potential=True)
    return _scaled_bessel(beta, d, lmax, power=-0.5 * d)


def kernel_bandwidth(beta: float, d: int, tol: float = 1e-16, lmax_cap: int = 1 << 20) -> int:
    """Smallest degree L with lambda_l <= tol * lambda_0 for every l > L.

    The multipliers decrease monotonically in l, like exp(-l^2 / (2 beta)) for l << beta, so about
    sqrt(2 beta log(1/tol)) degrees carry the kernel to relative accuracy ``tol``.
    """
    _check(beta, d, 0)
    if beta == 0.0:
        return 1
    # the first guess within lmax_cap too: at beta = 1e15 it would be an array of 2.8e8 multipliers
    guess = min(int(math.ceil(math.sqrt(2.0 * max(beta, 1.0) * math.log(1.0 / tol)))) + 8, lmax_cap)
    while True:
        lam = zonal_multipliers(beta, d, guess)
        small = np.nonzero(lam <= tol * lam[0])[0]
        if small.size:
            return max(int(small[0]) - 1, 1)
        if guess >= lmax_cap:
            return lmax_cap
        guess = min(2 * guess, lmax_cap)


def laplacian_eigenvalues(d: int, lmax: int) -> np.ndarray:
    """Eigenvalues -l(l + d - 2), l = 0..lmax, of the Laplace–Beltrami operator on S^{d-1}."""
    l = np.arange(lmax + 1, dtype=float)
    return -l * (l + d - 2.0)
