"""The compiled loops (solvers/_kernels.c) compute exactly the IEEE operations their documentation states, in
its order: the same bits as numpy doing those operations one at a time (numpy's elementwise multiply and add
round each operation once), hence the same bits on every machine. In particular the build must not fuse
a * b + c into one rounding (an FMA, which some CPUs have and others lack)."""
from fractions import Fraction

import numpy as np
import pytest

from solvers import Model, Perceptron
from solvers._compiled import kernels

rng = np.random.default_rng(7)


def _variants() -> list[str]:
    """The loop variants this machine can run (the baseline everywhere, AVX2 and AVX-512 on x86-64 CPUs that
    have them)."""
    mine = kernels.simd()
    out = []
    for name in ("baseline", "avx2", "avx512"):
        try:
            kernels.simd(name)
            out.append(name)
        except ValueError:
            pass
    kernels.simd(mine)
    return out


@pytest.fixture(params=["baseline", "avx2", "avx512"])
def variant(request):
    """The test runs with each variant of the loops this machine has."""
    if request.param not in _variants():
        pytest.skip(f"no {request.param} loops on this machine")
    mine = kernels.simd()
    kernels.simd(request.param)
    yield request.param
    kernels.simd(mine)


def _sequential(w, rows, factor=None):
    acc = w[0] * rows[0]
    for r in range(1, len(w)):
        acc = acc + w[r] * rows[r]
    return acc if factor is None else acc * factor


def _cmul(a, b):
    """(ar br - ai bi, ar bi + ai br) with every operation rounded on its own (float views)."""
    x, y = a.view(float).reshape(-1, 2), b.view(float).reshape(-1, 2)
    out = np.empty_like(x)
    out[:, 0] = x[:, 0] * y[:, 0] - x[:, 1] * y[:, 1]
    out[:, 1] = x[:, 0] * y[:, 1] + x[:, 1] * y[:, 0]
    return out.reshape(-1).view(complex)


@pytest.mark.parametrize("nrows", [1, 2, 7, 8])
@pytest.mark.parametrize("n", [1, 5, 2048, 2051])
def test_weighted_sum_adds_the_rows_in_order(nrows, n, variant):
    w = rng.standard_normal(nrows)
    stack = rng.standard_normal((nrows, n)) * 10.0 ** rng.integers(-8, 8, (nrows, 1))
    factor = rng.uniform(0.5, 1.5, n)
    out = np.full(n, np.nan)
    kernels.weighted_sum(w, stack, out, None)
    np.testing.assert_array_equal(out, _sequential(w, stack))
    kernels.weighted_sum(w, stack, out, factor)
    np.testing.assert_array_equal(out, _sequential(w, stack, factor))


def test_the_build_rounds_every_product_on_its_own(variant):
    """fl(fl(a b) - fl(a b)) = 0, while a fused multiply-add would give the exact a b - fl(a b) != 0."""
    a = 1.0 + 2.0 ** -30
    b = 1.0 + 2.0 ** -29
    p = a * b
    assert Fraction(a) * Fraction(b) != Fraction(p)                # a b is not a double: fl rounds it
    n = 37                                  # the blocks of 16 entries and the tail
    out = np.full(n, np.nan)
    kernels.weighted_sum(np.array([1.0, a]), np.array([[-p] * n, [b] * n]), out, None)
    np.testing.assert_array_equal(out, 0.0)
    c = np.full(n, a + 1j * a)
    d = np.full(n, b - 1j * b)
    kernels.complex_multiply(c, d, res := np.empty(n, complex))
    np.testing.assert_array_equal(res.real, 2.0 * p)
    np.testing.assert_array_equal(res.imag, 0.0)                  # a (-b) + a b, each product rounded alone


def test_complex_multiply_is_the_textbook_product(variant):
    a = rng.standard_normal(1025) + 1j * rng.standard_normal(1025)
    b = rng.standard_normal(1025) + 1j * rng.standard_normal(1025)
    out = np.empty_like(a)
    kernels.complex_multiply(a, b, out)
    np.testing.assert_array_equal(out, _cmul(a, b))
    np.testing.assert_allclose(out, a * b, rtol=1e-15, atol=1e-15)
    kernels.complex_multiply(a, b, a)            # in place
    np.testing.assert_array_equal(a, out)


@pytest.mark.parametrize("with_factor", [False, True])
@pytest.mark.parametrize("nkern", [0, 1, 2])
def test_load_spectrum_fills_every_row_and_zeroes_the_rest(with_factor, nkern, variant):
    K, ncols, Ka = 100, 151, 37
    c = rng.standard_normal(K) + 1j * rng.standard_normal(K)
    factor = rng.uniform(0.1, 1.0, 2 * K) if with_factor else None
    mult = (rng.standard_normal((nkern, Ka)) + 1j * rng.standard_normal((nkern, Ka))) if nkern else None
    spec = np.full((1 + nkern, ncols), np.nan + 1j * np.nan)       # what a c2r transform leaves: anything
    arg = c.view(float).copy() if with_factor else c
    kernels.load_spectrum(arg, factor, spec, ncols, mult)
    head = c if factor is None else (c.view(float) * factor).view(complex)
    np.testing.assert_array_equal(spec[0, :K], head)
    np.testing.assert_array_equal(spec[0, K:], 0.0)
    for q in range(nkern):
        np.testing.assert_array_equal(spec[q + 1, :Ka], _cmul(head[:Ka].copy(), mult[q]))
        np.testing.assert_array_equal(spec[q + 1, Ka:], 0.0)


@pytest.mark.parametrize("strength", [1.0, 0.7])
@pytest.mark.parametrize("perceptron", [False, True])
def test_affine_flux_is_the_models_drive_times_rho(strength, perceptron, variant):
    """The one definition of w is Model.drive; the compiled flux takes its gain and gives the same bits."""
    model = Model(d=2, beta=3.0, flow="descent", strength=strength,
                  perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=1) if perceptron else None)
    assert model.drive_gain == strength
    M = 3071                                         # not a whole number of SIMD vectors
    rho = rng.uniform(-0.1, 2.0, M)
    G = rng.standard_normal(M)
    drift = rng.standard_normal(M) if perceptron else None
    w = model.drive(G.copy(), None, drift)
    g, out, mm = G.copy(), np.empty(M), np.empty(4)
    kernels.affine_flux(rho, g, model.drive_gain, drift, out, mm)
    np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(out, rho * w)
    np.testing.assert_array_equal(mm, [rho.min(), rho.max(), w.min(), w.max()])
    for where in (5, M - 1):                         # a NaN reaches the diagnostics, as numpy's reductions
        bad = rho.copy()
        bad[where] = np.nan
        kernels.affine_flux(bad, G.copy(), model.drive_gain, drift, out, mm)
        assert np.isnan(mm[:2]).all() and np.isfinite(mm[2:]).all()
    bad = rho.copy()
    bad[[3, M - 2]] = [np.inf, -np.inf]              # infinities are extremes like any other value
    kernels.affine_flux(bad, G.copy(), model.drive_gain, drift, out, mm)
    assert mm[0] == -np.inf and mm[1] == np.inf


def test_a_model_without_an_affine_drive_has_no_gain():
    assert Model(d=2, beta=3.0, flow="descent", attention="normalized").drive_gain is None
    relu = Perceptron.random(2, 2, "relu", 1.0, seed=1)
    assert Model(d=2, beta=3.0, flow="descent", attention="none", perceptron=relu).drive_gain is None


def test_bad_arrays_are_refused(variant):
    x = np.zeros((3, 8))
    with pytest.raises(ValueError, match="len\\(w\\) rows"):
        kernels.weighted_sum(np.ones(2), x, np.empty(8), None)
    with pytest.raises(ValueError, match="float64"):
        kernels.weighted_sum(np.ones(3, np.float32), x, np.empty(8), None)
    with pytest.raises((ValueError, BufferError)):
        kernels.weighted_sum(np.ones(3), np.zeros((8, 3)).T, np.empty(8), None)    # not C-contiguous
    with pytest.raises((ValueError, BufferError)):
        kernels.complex_multiply(np.ones(4, complex), np.ones(4, complex), np.empty(8, complex)[::2])
    with pytest.raises(ValueError, match="differ"):
        kernels.complex_multiply(np.ones(4, complex), np.ones(3, complex), np.empty(4, complex))
    with pytest.raises(ValueError):
        kernels.load_spectrum(np.ones(10, complex), None, np.empty((2, 8), complex), 8, None)
    with pytest.raises(ValueError, match="at least one row"):
        kernels.load_spectrum(np.ones(10, complex), None, np.empty((0, 64), complex), 64, None)
    with pytest.raises(ValueError, match="complex128"):             # floats are not read as pairs
        kernels.complex_multiply(np.ones(4), np.ones(2, complex), np.empty(2, complex))
    with pytest.raises(ValueError, match="float64"):
        kernels.affine_flux(np.ones(5, complex), np.ones(5), 1.0, None, np.empty(5), None)
    with pytest.raises(ValueError, match="native byte order"):
        kernels.weighted_sum(np.ones(3), x.astype(x.dtype.newbyteorder()), np.empty(8), None)
    spec = np.empty((1, 8), complex)
    kernels.load_spectrum(np.ones(3, complex), None, spec, np.int64(8), None)        # any integer
    np.testing.assert_array_equal(spec[0], [1, 1, 1, 0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="4"):
        kernels.affine_flux(np.ones(5), np.ones(5), 1.0, None, np.empty(5), np.empty(3))
    with pytest.raises(TypeError):
        kernels.affine_flux(np.ones(5), np.ones(5), 1.0, None, np.empty(5))
    with pytest.raises((TypeError, BufferError)):
        kernels.weighted_sum(np.ones(3), x, np.ones(8).tobytes(), None)             # read-only out


@pytest.mark.cpu_dependent
def test_the_variants_give_the_same_bits_and_so_does_a_whole_run():
    """The loops for a wider instruction set only do more entries at a time: a stage's sums, products and
    fluxes, and a whole S^1 PDE run (1100 DP54 steps through them), are the same bits with every variant
    this machine has (the FFTs are the same plans in both runs)."""
    from solvers import solve_pde
    names = _variants()
    mine = kernels.simd()
    if len(names) < 2:
        pytest.skip("one variant of the loops on this machine")
    w = rng.standard_normal(7)
    stack = rng.standard_normal((7, 2053))
    factor = rng.uniform(0.5, 1.5, 2053)
    a = rng.standard_normal(1031) + 1j * rng.standard_normal(1031)
    b = rng.standard_normal(1031) + 1j * rng.standard_normal(1031)
    model = Model(d=2, beta=4.0, flow="descent", noise=0.02, strength=0.7,
                  perceptron=Perceptron.random(2, 2, "tanh", 1.0, seed=3))
    results = []
    for name in names:
        kernels.simd(name)
        ws, cm = np.empty(2053), np.empty_like(a)
        kernels.weighted_sum(w, stack, ws, factor)
        kernels.complex_multiply(a, b, cm)
        r = solve_pde(model, 10.0, 256, max_degree=256)
        results.append((ws, cm, r.coefficients(-1), r.nsteps))
    kernels.simd(mine)
    for other in results[1:]:
        for x, y in zip(results[0], other):
            np.testing.assert_array_equal(x, y)


def _unit(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_the_sum_loops_give_the_same_bits_in_every_variant():
    """The interaction sums' loops hold 2, 4 or 8 points a register by variant, and keep 8 partial sums of
    their coefficients whatever the width: direct sums (d = 2, 3, 6), the S^1 and S^2 series (coefficients and
    evaluation), and the S^2 angles and tangent vectors are the same bits with every variant this machine has,
    for point counts that fill no whole register (tails) and that fill several."""
    from solvers.interaction import CircleSums, SphereSums
    names = _variants()
    mine = kernels.simd()
    if len(names) < 2:
        pytest.skip("one variant of the loops on this machine")
    results = []
    for name in names:
        kernels.simd(name)
        out = []
        for n in (1, 5, 13, 37, 1000):
            w = np.random.default_rng(n).uniform(-0.2, 1.0, n)
            for d in (2, 3, 6):
                x, y = _unit(n + 3, d, n), _unit(n, d, n + 1)
                psi, G = np.empty(n + 3), np.empty((n + 3, d))
                kernels.direct_sums(x, y, w, 7.0, psi, G)
                out += [psi, G]
            for S, d in ((CircleSums(25.0), 2), (SphereSums(25.0), 3)):
                out += [S.coefficients(_unit(n, d, n + 2), w), *S.fields(_unit(n, d, n + 2), w, _unit(n + 5, d, n))]
            x = _unit(n, 3, n + 4)
            loc, G = np.empty((n, 2)), np.empty((n, 3))
            kernels.sphere_angles(x, loc)
            kernels.sphere_tangent(np.random.default_rng(n).standard_normal((2, n)), x, G)
            out += [loc, G]
        results.append(out)
    kernels.simd(mine)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


def test_the_sphere_angles_are_the_arctangents():
    """theta = atan2(sin theta, x_2), phi = atan2(x_1, x_0) mod 2 pi within 2 units in the last place of
    numpy's, in ducc0's ranges; phi = 0 at the poles (also for -0.0 components, where atan2 would give pi)."""
    x = _unit(20000, 3, 9)
    x[:4] = [(0.0, 0.0, 1.0), (-0.0, 0.0, -1.0), (-0.0, -0.0, 1.0), (-1.0, -0.0, 0.0)]
    loc = np.empty((len(x), 2))
    kernels.sphere_angles(x, loc)
    s = np.sqrt(x[:, 0] * x[:, 0] + x[:, 1] * x[:, 1])
    theta, phi = np.arctan2(s, x[:, 2]), np.mod(np.arctan2(x[:, 1], x[:, 0]), 2 * np.pi)
    phi[s == 0] = 0.0
    phi[3] = np.pi                                   # atan2(-0, -1) = -pi; the angle pi is in the range
    assert np.all(np.abs(loc[:, 0] - theta) <= 2 * np.spacing(theta))
    assert np.all(np.abs(loc[:, 1] - phi) <= 2 * np.spacing(np.maximum(phi, np.pi / 4)))
    assert loc[:, 0].min() >= 0 and loc[:, 0].max() <= np.pi and loc[:, 1].min() >= 0 and loc[:, 1].max() < 2 * np.pi
    np.testing.assert_array_equal(loc[:3], [[0.0, 0.0], [np.pi, 0.0], [0.0, 0.0]])


def test_bad_arrays_of_the_sum_loops_are_refused():
    x, w = _unit(5, 3, 1), np.ones(5)
    with pytest.raises(ValueError, match="direct_sums"):
        kernels.direct_sums(x, x, np.ones(4), 1.0, np.empty(5), np.empty((5, 3)))
    with pytest.raises(ValueError, match="circle_coefficients"):
        kernels.circle_coefficients(x, w, np.empty(4, complex))          # (N, 3) points on S^1
    with pytest.raises(ValueError, match="sphere_coefficients"):
        kernels.sphere_coefficients(x, w, np.zeros((4, 6)), np.ones(3), np.empty(5, complex))   # L = 2: 6 modes
    with pytest.raises(ValueError, match="complex128"):
        kernels.circle_coefficients(_unit(5, 2, 1), w, np.empty(8))
    with pytest.raises(ValueError, match="sphere_tangent"):
        kernels.sphere_tangent(np.empty((3, 5)), x, np.empty((5, 3)))


def test_an_install_without_the_compiled_loops_says_how_to_build_them(monkeypatch):
    """No silent numpy fallback (it would round differently): importing the solvers without the extension
    fails with the command that builds it."""
    import importlib
    import sys

    import solvers
    monkeypatch.setitem(sys.modules, "solvers._kernels", None)        # as if the .so were absent
    monkeypatch.delattr(solvers, "_kernels")
    monkeypatch.delitem(sys.modules, "solvers._compiled")
    with pytest.raises(ImportError, match="scripts/setup"):
        importlib.import_module("solvers._compiled")
