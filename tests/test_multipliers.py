"""Funk–Hecke multipliers against direct quadrature (The model §2) and their limits."""
import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import eval_gegenbauer, ive

from spectral.multipliers import kernel_bandwidth, laplacian_eigenvalues, potential_multipliers, zonal_multipliers


def funk_hecke_quadrature(beta, d, l):
    """lambda_l = ∫_{-1}^1 f(t) P_l(t) w(t) dt / ∫ w, with P_l the Gegenbauer polynomial normalised to
    P_l(1) = 1 and w(t) = (1 - t^2)^{(d-3)/2}: the classical Funk–Hecke formula, written independently."""
    a = (d - 2) / 2.0
    if d == 2:
        P = lambda t: math.cos(l * math.acos(max(-1.0, min(1.0, t))))
    else:
        P = lambda t: eval_gegenbauer(l, a, t) / eval_gegenbauer(l, a, 1.0)
    # t = cos(theta): w(t) dt = sin(theta)^(d-2) d theta, a smooth integrand
    w = lambda th: math.sin(th) ** (d - 2)
    num = quad(lambda th: math.exp(beta * (math.cos(th) - 1)) * P(math.cos(th)) * w(th), 0, math.pi,
               limit=200, epsabs=1e-13, epsrel=1e-12)[0]
    den = quad(w, 0, math.pi, limit=200, epsabs=1e-13, epsrel=1e-12)[0]
    return num / den


@pytest.mark.parametrize("d", [2, 3, 4, 7])
@pytest.mark.parametrize("beta", [0.3, 2.0, 9.0])
def test_multipliers_match_funk_hecke_quadrature(d, beta):
    lam = zonal_multipliers(beta, d, 8)
    for l in range(9):
        ref = funk_hecke_quadrature(beta, d, l)
        assert abs(lam[l] - ref) <= 1e-10 * lam[0], (d, beta, l, lam[l], ref)


def test_circle_and_sphere_closed_forms():
    beta = 3.7
    # exp(log ive) (multipliers.py) carries |log ive| eps of round-off, 1.3e-15 at l = 8-10: 1e-14 as for d = 3
    assert np.allclose(zonal_multipliers(beta, 2, 10), ive(np.arange(11), beta), rtol=1e-14, atol=0)
    l = np.arange(11)
    assert np.allclose(zonal_multipliers(beta, 3, 10), np.sqrt(np.pi / (2 * beta)) * ive(l + 0.5, beta),
                       rtol=1e-14, atol=0)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_beta_to_zero_limits(d):
    g0 = potential_multipliers(0.0, d, 5)
    assert g0[1] == 1.0 / d and np.all(g0[2:] == 0) and g0[0] == -1.0
    for beta in [1e-4, 1e-7]:
        g = potential_multipliers(beta, d, 5)
        assert abs(g[1] - 1.0 / d) < 10 * beta
        assert np.all(np.abs(g[2:]) < 10 * beta)
        lam = zonal_multipliers(beta, d, 5)
        assert abs((lam[0] - 1) / beta - g0[0]) < 10 * beta   # lambda_0 = 1 - beta + O(beta^2)
    assert np.array_equal(zonal_multipliers(0.0, d, 3), [1, 0, 0, 0])


@pytest.mark.parametrize("d", [2, 3, 5, 50])
def test_small_beta_asymptotics_where_ive_underflows(d):
    # lambda_l ~ Gamma(d/2) (beta/2)^l / Gamma(l + d/2) as beta -> 0, so g_l / beta^(l-1) -> 1/d (l = 1) and
    # 1/(d(d+2)) (l = 2); below beta ~ 1e-200 scipy's ive(l + d/2 - 1, beta) underflows while g_1 does not
    for beta in [1e-150, 1e-200, 1e-250, 1e-300]:
        g = potential_multipliers(beta, d, 3)
        assert g[1] == pytest.approx(1.0 / d, rel=1e-13)
        if beta >= 1e-250:
            assert g[2] / beta == pytest.approx(1.0 / (d * (d + 2)), rel=1e-12)
        assert np.all(np.isfinite(g * np.arange(4)))           # g_0 ~ 1/beta, times k = 0 in the gradients
        assert zonal_multipliers(beta, d, 3)[0] == pytest.approx(1.0, rel=1e-15)
    for beta in [1e-310, 5e-324]:                 # 1/beta overflows: refused, not NaN gradients
        with pytest.raises(ValueError, match="beta must be 0 or >= 1e-300"):
            potential_multipliers(beta, d, 3)


@pytest.mark.parametrize("d", [2, 3, 5, 10, 50])
def test_series_below_beta_one_agrees_with_ive(d):
    # two independent evaluations where both hold: the series (beta <= 1) and scipy's ive with its prefactor
    from spectral.multipliers import _scaled_bessel
    for beta in [1e-3, 0.05, 0.5, 1.0]:
        for potential, power in [(False, 1.0 - 0.5 * d), (True, -0.5 * d)]:
            got = (potential_multipliers if potential else zonal_multipliers)(beta, d, 40)
            ref = _scaled_bessel(beta, d, 40, power)
            keep = ref > 1e-16 * ref[0]
            assert np.allclose(got[keep], ref[keep], rtol=1e-12, atol=0)


@pytest.mark.parametrize("d", [2, 3])
def test_large_beta_is_finite_and_decaying(d):
    for beta in [50.0, 200.0, 1000.0]:
        lam = zonal_multipliers(beta, d, 4000)
        assert np.all(np.isfinite(lam)) and np.all(lam >= 0)
        assert np.all(np.diff(lam) <= 0)
        # Gaussian decay lambda_l / lambda_0 ~ exp(-l(l+d-2) / (2 beta)) for l << beta
        l = 5
        assert abs(math.log(lam[l] / lam[0]) + l * (l + d - 2) / (2 * beta)) < 0.2 * l * (l + d - 2) / (2 * beta)


def test_bandwidth_matches_spec_estimates():
    # The model §2: about 14 modes at beta = 1, 44 at 25, 115 at 200 resolve the kernel to 1e-14 on the circle
    for beta, ref in [(1.0, 14), (25.0, 44), (200.0, 115)]:
        L = kernel_bandwidth(beta, 2, 1e-14)
        assert abs(L - ref) <= 3, (beta, L)


def test_laplacian():
    assert np.array_equal(laplacian_eigenvalues(2, 3), [0, -1, -4, -9])
    assert np.array_equal(laplacian_eigenvalues(3, 3), [0, -2, -6, -12])


def test_bad_input():
    with pytest.raises(ValueError, match="beta"):
        zonal_multipliers(-1.0, 2, 3)
    with pytest.raises(ValueError, match="beta"):
        zonal_multipliers(float("nan"), 2, 3)
    with pytest.raises(ValueError, match="d must"):
        zonal_multipliers(1.0, 1, 3)
