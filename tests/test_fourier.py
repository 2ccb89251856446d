"""Fourier basis on S^1: transforms, derivatives, dealiasing, evaluation."""
import numpy as np
import pytest

from spectral import fourier
from spectral.filters import ExponentialFilter, make_filter
from spectral.fourier import FourierBasis


def trig_poly(K, seed=0):
    rng = np.random.default_rng(seed)
    c = (rng.standard_normal(K) + 1j * rng.standard_normal(K)) / (1 + np.arange(K)) ** 2
    c[0] = c[0].real
    return c


def direct(c, theta):
    k = np.arange(len(c))
    return c[0].real + 2 * np.real(np.exp(1j * np.outer(theta, k[1:])) @ c[1:])


def test_grid_is_dealiased_and_fast():
    b = FourierBasis(100)
    assert b.M >= 300 and b.M % 2 == 0
    assert FourierBasis(4096).M == 12288
    with pytest.raises(ValueError):
        FourierBasis(1)
    with pytest.raises(ValueError):
        FourierBasis(64, grid_size=100)


@pytest.mark.cpu_dependent
@pytest.mark.parametrize("K", [1024, 8192])
def test_estimate_plans_do_not_take_a_timed_plan_of_the_same_size(K):
    """FFTW_ESTIMATE planning uses any wisdom a timed planning left in the process; a run after one with
    planner FFTW_MEASURE (a session, a Dask worker) would then take the timed plan. The ESTIMATE
    transform gives the same bits before and after a MEASURE plan of the same size."""
    M = fourier.dealiased_size(K)
    x = np.random.default_rng(K).standard_normal((1, M))

    def forward(effort):
        t = fourier.Transform(M, 1, "forward", effort=effort)
        t.grid[...] = x
        t.execute()
        return t.spec.copy()

    before = forward("FFTW_ESTIMATE")
    timed = forward("FFTW_MEASURE")
    assert np.abs(timed - before).max() < 1e-13 * np.abs(before).max()      # the same transform
    assert np.array_equal(forward("FFTW_ESTIMATE"), before)


@pytest.mark.cpu_dependent
def test_estimate_plans_from_kept_estimate_wisdom_are_the_plans_of_a_fresh_planner():
    """Planning with FFTW_ESTIMATE keeps the wisdom earlier ESTIMATE plans left (forgetting it cost ~6 ms per
    plan): every transform made that way, in any order after others, gives the bits of the same transform
    planned by a planner without wisdom (sizes of K = 8 .. 8192, 1-3 rows, both directions)."""
    import random

    import pyfftw
    sizes = sorted({fourier.dealiased_size(K) for K in (8, 17, 100, 128, 300, 1024, 2048, 8192)})
    cases = [(M, rows, d) for M in sizes for rows in (1, 2, 3) for d in ("forward", "backward")]
    rng = np.random.default_rng(7)
    data = {c: rng.standard_normal((c[1], c[0] + 2)) for c in cases}

    def transform(M, rows, d):
        t = fourier.Transform(M, rows, d)
        x = data[(M, rows, d)]
        if d == "forward":
            t.grid[...] = x[:, :M]
        else:
            t.spec[...] = x[:, : M // 2 + 1] + 1j * x[:, 1: M // 2 + 2]
        t.execute()
        return (t.spec if d == "forward" else t.grid).copy()

    fresh = {}
    for c in cases:
        pyfftw.forget_wisdom()
        fresh[c] = transform(*c)
    random.Random(3).shuffle(cases)
    fourier.Transform(64, 1, "forward", effort="FFTW_MEASURE")      # timed wisdom: forgotten by the next plan
    for c in cases:
        assert np.array_equal(transform(*c), fresh[c]), c


def test_round_trip_and_synthesis():
    b = FourierBasis(64)
    c = trig_poly(64)
    f = b.to_grid(c)
    assert np.allclose(f, direct(c, b.theta), atol=1e-13)
    assert np.allclose(b.from_grid(f), c, atol=1e-15)
    # plans are reused: the same object, and repeated calls give identical results
    p = b.plan(1, "backward")
    assert b.plan(1, "backward") is p
    assert np.array_equal(b.to_grid(c), f)


def test_product_is_dealiased_exactly():
    K = 32
    b = FourierBasis(K)
    c1, c2 = trig_poly(K, 1), trig_poly(K, 2)
    prod = b.from_grid(b.to_grid(c1) * b.to_grid(c2))
    # exact product coefficients by convolution of the two-sided sequences
    full = lambda c: np.concatenate([np.conj(c[:0:-1]), c])
    conv = np.convolve(full(c1), full(c2))
    mid = len(conv) // 2
    assert np.allclose(prod, conv[mid:mid + K], atol=1e-15)


def test_derivative_and_evaluation():
    b = FourierBasis(48)
    c = trig_poly(48, 3)
    th = np.random.default_rng(4).uniform(0, 2 * np.pi, 37)
    h = 1e-6
    fd = (fourier.evaluate(c, th + h) - fourier.evaluate(c, th - h)) / (2 * h)
    assert np.allclose(fourier.evaluate(b.derivative(c), th), fd, atol=1e-7)
    assert np.allclose(fourier.evaluate(c, th), direct(c, th), atol=1e-13)
    # interpolation onto a coarser and a finer equispaced grid is exact
    for n in (17, 64, 500):
        grid = 2 * np.pi * np.arange(n) / n
        assert np.allclose(fourier.interpolate(c, n), direct(c, grid), atol=1e-13)


def test_tail_norm_resize():
    c = np.zeros(30, complex)
    c[0] = 1
    c[25] = 1e-3
    assert abs(fourier.spectral_tail(c) - np.sqrt(2e-6 / (1 + 2e-6))) < 1e-15
    assert abs(fourier.l2_norm(c) - np.sqrt(1 + 2e-6)) < 1e-15
    big = fourier.resize(c, 60)
    assert big.shape == (60,) and np.array_equal(big[:30], c) and not big[30:].any()


def test_norm_and_tail_are_parseval_sums():
    """l2_norm and spectral_tail (sums over float views, the step control's) against Parseval written out:
    ||f||^2 = |c_0|^2 + 2 sum_{k>=1} |c_k|^2, checked on the grid too; any layout of the input."""
    rng = np.random.default_rng(5)
    K = 257
    c = (rng.standard_normal(K) + 1j * rng.standard_normal(K)) * np.exp(-0.02 * np.arange(K))
    c[0] = c[0].real
    b = FourierBasis(K)
    on_grid = np.sqrt(np.mean(b.to_grid(c) ** 2))
    parseval = np.sqrt(abs(c[0]) ** 2 + 2 * np.sum(np.abs(c[1:]) ** 2))
    assert abs(on_grid - parseval) < 1e-13 * parseval
    cut = int(np.floor(2 * K / 3))
    tail = np.sqrt(2 * np.sum(np.abs(c[cut:]) ** 2)) / parseval
    strided = np.empty(2 * K, complex)[::2]
    strided[...] = c
    for x in (c, strided, list(c)):
        assert abs(fourier.l2_norm(x) - parseval) < 1e-14 * parseval
        assert abs(fourier.spectral_tail(x) - tail) < 1e-14 * tail
        assert abs(fourier.spectral_tail(x, norm=parseval) - tail) < 1e-14 * tail
    assert abs(fourier.spectral_tail(c, fraction=1.0) - 1.0) < 1e-15      # the whole spectrum
    with pytest.raises(ValueError, match="1-D"):
        fourier.l2_norm(np.ones((2, 3), complex))


def test_filter():
    f = ExponentialFilter(alpha=36.0, order=8)
    m = f.multipliers(np.arange(101), 100)
    assert m[0] == 1 and abs(m[-1] - np.exp(-36)) < 1e-25 and np.all(np.diff(m) <= 0)
    assert make_filter(None) is None
    assert make_filter({"kind": "exponential", "alpha": 10, "order": 4}) == ExponentialFilter(10, 4)
    with pytest.raises(ValueError, match="order"):
        ExponentialFilter(order=3)
    with pytest.raises(ValueError, match="unknown filter option"):
        make_filter({"kind": "exponential", "strength": 1})


@pytest.mark.parametrize("n, K", [(1, 5), (3, 200), (300, 100), (632, 1024), (4096, 1024), (20000, 33)])
def test_point_coefficients_are_the_direct_sums_on_both_paths(n, K):
    """sum_i w_i exp(-i k theta_i) (the coefficients of a weighted point measure) by the recurrence (n K <=
    2^16) or a type-1 NUFFT (above): both agree with the sums of exp formed directly, to 1e-13 of sum w,
    and are the adjoint of ``series`` (<series(a), w> = <a, point_coefficients(w)>)."""
    rng = np.random.default_rng(n + K)
    theta = rng.uniform(-np.pi, np.pi, n)
    theta[0] = np.pi                                 # the ends of the range
    w = rng.uniform(0.1, 1.0, n)
    direct = np.exp(-1j * np.outer(np.arange(K), theta)) @ w
    c = fourier.point_coefficients(theta, w, K)
    assert c.shape == (K,) and np.abs(c - direct).max() < 1e-13 * w.sum()
    a = rng.standard_normal(K) + 1j * rng.standard_normal(K)
    assert np.vdot(fourier.series(a, theta), w) == pytest.approx(np.vdot(a, c), rel=1e-12)
    assert np.array_equal(fourier.point_coefficients(theta, w, K), c)          # the same bits every call
