"""The spherical-harmonic basis over SHTns against closed forms and independent references."""
import math

import numpy as np
import pytest
from scipy.special import sph_harm_y

from spectral import sphere
from spectral.sphere import SphereBasis

RNG = np.random.default_rng(7)


def random_points(n, seed=3):
    x = np.random.default_rng(seed).standard_normal((n, 3))
    return x / np.linalg.norm(x, axis=1)[:, None]


def smooth(x):
    """A smooth non-polynomial test function of unit vectors (..., 3)."""
    return np.exp(x[..., 0] + 0.5 * x[..., 1] - 0.3 * x[..., 2] * x[..., 0])


def random_real_coefficients(L, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal(sphere.ncoef(L)) + 1j * rng.standard_normal(sphere.ncoef(L))
    _, m = sphere.canonical_degrees(L)
    c[m == 0] = c[m == 0].real
    return c


def reference_field(c, theta, phi):
    """sum_l c_l0 Y_l0 + 2 Re sum_{m>0} c_lm Y_lm with scipy's harmonics (Condon–Shortley phase)."""
    L = sphere.degree_of(c.size)
    out = np.zeros(np.broadcast(theta, phi).shape)
    for l in range(L + 1):
        for m in range(l + 1):
            y = sph_harm_y(l, m, theta, phi)
            out += (1.0 if m == 0 else 2.0) * np.real(c[l * (l + 1) // 2 + m] * y)
    return out


# --- grid ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("L", [4, 7, 16, 31, 63, 64, 255])
def test_grid_is_dealiased_and_weights_are_a_probability(L):
    b = SphereBasis(L)
    assert b.nlat >= max(1.5 * (L + 1), 32) and b.nphi >= 3 * (L + 1)
    assert b.nlat % 2 == 0 and b.nphi % 2 == 0
    assert abs(b.weights.sum() - 1) < 1e-14
    assert np.all(np.diff(b.theta) > 0) and b.theta[0] < np.pi / 2      # north pole first
    X = b.points
    assert X.shape == (b.nlat, b.nphi, 3) and np.allclose(np.linalg.norm(X, axis=-1), 1, atol=1e-15)


def test_timed_initialisation_gives_the_same_transforms():
    """effort != FFTW_ESTIMATE lets SHTns time its variants (sht_gauss); same grid, same results."""
    a, b = SphereBasis(12), SphereBasis(12, effort="FFTW_MEASURE")
    assert (a.nlat, a.nphi) == (b.nlat, b.nphi) and np.array_equal(a.cos_theta, b.cos_theta)
    c = b.from_canonical(random_real_coefficients(12))
    assert np.abs(a.synth(c) - b.synth(c)).max() < 1e-13


def test_quadrature_integrates_polynomials_exactly():
    b = SphereBasis(12)
    x, y, z = np.moveaxis(b.points, -1, 0)
    w = b.weights
    # moments of the uniform probability measure on S^2
    assert abs((w * z * z).sum() - 1 / 3) < 1e-15
    assert abs((w * x ** 4).sum() - 1 / 5) < 1e-15
    assert abs((w * x ** 2 * y ** 2).sum() - 1 / 15) < 1e-15
    assert abs((w * z ** 6).sum() - 1 / 7) < 1e-15
    assert abs((w * x * y ** 3 * z).sum()) < 1e-16


def test_tangents_are_an_orthonormal_frame_oriented_south_and_east():
    b = SphereBasis(8)
    X, et, ep = b.points, b.e_theta, b.e_phi
    for u, v in ((X, et), (X, ep), (et, ep)):
        assert np.abs((u * v).sum(-1)).max() < 1e-15
    assert np.allclose(np.cross(et, ep), X, atol=1e-15)          # (e_theta, e_phi, e_r) is right-handed
    h = 1e-6
    moved = sphere.unit_vectors(b.theta[:, None] + h, b.phi[None, :])
    assert np.allclose((moved - X) / h, et, atol=1e-6)            # d x / d theta = e_theta


# --- scalar transforms --------------------------------------------------------------------------
def test_constant_has_c00_sqrt_4pi():
    b = SphereBasis(10)
    c = b.analys(np.ones(b.shape))
    assert abs(c[0] - math.sqrt(4 * math.pi)) < 1e-14
    assert np.abs(c[1:]).max() < 1e-14
    assert np.allclose(b.synth(c), 1.0, atol=1e-14)


def test_synthesis_matches_scipy_harmonics():
    L = 9
    b = SphereBasis(L)
    c = random_real_coefficients(L)
    f = b.synth(b.from_canonical(c))
    ref = reference_field(c, b.theta[:, None], b.phi[None, :])
    assert np.abs(f - ref).max() < 1e-12 * np.abs(ref).max()
    # and analysis inverts synthesis (orthonormality of the harmonics under the Gauss quadrature)
    assert np.abs(b.to_canonical(b.analys(f)) - c).max() < 1e-13


def test_parseval_and_l2_norm_for_the_probability_measure():
    b = SphereBasis(40)
    f = smooth(b.points)
    c = b.to_canonical(b.analys(f))
    assert abs(sphere.l2_norm(c) - math.sqrt((b.weights * f * f).sum())) < 1e-14


# --- layouts ------------------------------------------------------------------------------------
def test_canonical_layout_is_l_major_and_a_prefix():
    L = 12
    b = SphereBasis(L)
    l, m = sphere.canonical_degrees(L)
    assert np.array_equal(l * (l + 1) // 2 + m, np.arange(sphere.ncoef(L)))
    for i in range(b.nlm):                                   # SHTns's own index function
        assert b.sht.idx(int(b.l[i]), int(b.m[i])) == i
    c = random_real_coefficients(L)
    u = b.from_canonical(c)
    assert np.array_equal(b.to_canonical(u), c)
    for k in range(b.nlm):
        assert c[l == b.l[k]][m[l == b.l[k]] == b.m[k]][0] == u[k]
    # a band-limited function analysed at degree L and 2L: the first is a prefix of the second
    f = b.synth(u)
    big = SphereBasis(2 * L)
    from_big = big.to_canonical(big.analys(sphere.evaluate(c, big.points.reshape(-1, 3)).reshape(big.shape)))
    assert np.abs(from_big[: c.size] - c).max() < 1e-13 and np.abs(from_big[c.size:]).max() < 1e-13
    assert np.array_equal(sphere.resize(c, 2 * L)[: c.size], c) and not np.any(sphere.resize(c, 2 * L)[c.size:])
    x = random_points(50)
    assert np.allclose(sphere.evaluate(sphere.resize(c, 2 * L), x), sphere.evaluate(c, x), atol=1e-13)
    assert np.allclose(f, sphere.evaluate(c, b.points.reshape(-1, 3)).reshape(b.shape), atol=1e-12)
    with pytest.raises(ValueError, match="not a number of coefficients"):
        sphere.degree_of(7)


def test_spectral_tail():
    L = 8                       # degrees 0..8: the top third is l = 6, 7, 8
    c = np.zeros(sphere.ncoef(L), complex)
    c[0] = 3.0
    c[6 * 7 // 2 + 2] = 2.0     # (l, m) = (6, 2): counted twice
    c[5 * 6 // 2] = 1.0         # (5, 0): below the cut
    expected = math.sqrt(8.0 / (9.0 + 8.0 + 1.0))
    assert abs(sphere.spectral_tail(c) - expected) < 1e-15


# --- vector transforms --------------------------------------------------------------------------
def test_gradient_synthesis_against_finite_differences():
    """(v_theta, v_phi) = (d_theta f, d_phi f / sin theta), checked by central differences of f in
    (theta, phi) and by the tangential projection of the Euclidean gradient."""
    b = SphereBasis(40)
    c = b.analys(smooth(b.points))
    vt, vp = b.synth_grad(c)
    th, ph, h = b.theta[:, None], b.phi[None, :], 1e-5
    F = lambda t, p: smooth(sphere.unit_vectors(t, p))
    d_th = (F(th + h, ph) - F(th - h, ph)) / (2 * h)
    d_ph = (F(th, ph + h) - F(th, ph - h)) / (2 * h) / np.sin(th)
    assert np.abs(vt - d_th).max() < 1e-8 and np.abs(vp - d_ph).max() < 1e-8
    x, y, z = np.moveaxis(b.points, -1, 0)
    f = smooth(b.points)
    grad = np.stack([(1 - 0.3 * z) * f, 0.5 * f, -0.3 * x * f], axis=-1)   # Euclidean gradient
    assert np.abs(vt - (grad * b.e_theta).sum(-1)).max() < 1e-12
    assert np.abs(vp - (grad * b.e_phi).sum(-1)).max() < 1e-12


def test_divergence_of_a_tangent_field_has_the_closed_form():
    """div(phi P_x a) = phi (<a, b> - <a, x><b, x> - 2 <a, x>) for phi = exp(<b, x>)."""
    b = SphereBasis(48)
    X = b.points
    a = np.array([0.3, -1.1, 0.7])
    bb = np.array([0.5, 0.2, -0.9])
    phi = np.exp(X @ bb)
    v = phi[..., None] * (a - (X @ a)[..., None] * X)
    vt, vp = (v * b.e_theta).sum(-1), (v * b.e_phi).sum(-1)
    div = b.synth(b.divergence(vt, vp))
    exact = phi * (a @ bb - (X @ a) * (X @ bb) - 2 * (X @ a))
    assert np.abs(div - exact).max() < 1e-11
    # a purely toroidal field e_r x grad g = curl(-g e_r) has no divergence: S = 0 and T = -g
    c = b.analys(phi)
    gt, gp = b.synth_grad(c)
    S, T = b.analys_vector(-gp, gt)
    assert np.abs(S).max() < 1e-12 and np.abs(T[1:] + c[1:]).max() < 1e-12


def test_laplacian_eigenvalues():
    b = SphereBasis(20)
    lap = b.laplacian()
    assert np.array_equal(lap, -(b.l * (b.l + 1)).astype(float))
    # div grad = Laplacian through the transforms
    c = b.analys(smooth(b.points))
    gt, gp = b.synth_grad(c)
    assert np.abs(b.divergence(gt, gp) - lap * c).max() < 1e-12


# --- evaluation at arbitrary points -------------------------------------------------------------
def test_evaluate_at_arbitrary_points_and_poles():
    b = SphereBasis(40)
    c = b.to_canonical(b.analys(smooth(b.points)))
    x = np.concatenate([random_points(2000), [[0, 0, 1.0], [0, 0, -1.0], [1.0, 0, 0]]])
    assert np.abs(sphere.evaluate(c, x) - smooth(x)).max() < 1e-13
    th, ph = np.linspace(0, np.pi, 7), np.linspace(0, 2 * np.pi, 5)
    grid = sphere.evaluate_grid(c, th, ph)
    assert np.abs(grid - smooth(sphere.unit_vectors(th[:, None], ph[None, :]))).max() < 1e-13
    for n in (8, 96):           # 2n = 16 < L folds the orders onto the 16 longitudes
        eq = sphere.evaluate_equiangular(c, n)
        assert eq.shape == (n, 2 * n)
        assert np.abs(eq - smooth(sphere.equiangular_grid(n))).max() < 1e-13


def test_evaluate_matches_scipy_for_random_coefficients():
    c = random_real_coefficients(15, seed=2)
    x = random_points(300)
    th, ph = np.arccos(x[:, 2]), np.arctan2(x[:, 1], x[:, 0])
    assert np.abs(sphere.evaluate(c, x) - reference_field(c, th, ph)).max() < 1e-12


def test_evaluate_at_high_degree_matches_synthesis():
    L = 255
    b = SphereBasis(L)
    c = random_real_coefficients(L, seed=4) / np.sqrt(sphere.ncoef(L))
    f = b.synth(b.from_canonical(c))
    sub = (slice(None, None, 9), slice(None, None, 17))
    assert np.abs(sphere.evaluate(c, b.points[sub].reshape(-1, 3)) - f[sub].ravel()).max() < 1e-11 * np.abs(f).max()


def test_synthesis_keeps_the_polar_terms_above_round_off():
    """Near the poles, high orders contribute little; SHTns skips Pbar_l^m below a threshold there, at
    latitudes rounded to its SIMD width (so the skipped terms differ between CPUs). Against the direct
    evaluation (our own Legendre recurrence) at the 12 latitudes nearest each pole, for orders m >= 32:
    within 1e-14 of max |f|. SHTns's default threshold (1e-10) misses by 9e-13 here."""
    L = 127
    b = SphereBasis(L)
    c = random_real_coefficients(L, seed=4)
    _, m = sphere.canonical_degrees(L)
    c[m < 32] = 0.0
    f = b.synth(b.from_canonical(c))
    rows = np.r_[0:12, b.nlat - 12:b.nlat]
    sub = (rows, slice(None, None, 5))
    direct = sphere.evaluate(c, b.points[sub].reshape(-1, 3))
    assert np.abs(direct).max() > 1e-4 * np.abs(f).max()        # the polar values are not negligible
    assert np.abs(direct - f[sub].ravel()).max() < 1e-14 * np.abs(f).max()


# --- the grid graph -----------------------------------------------------------------------------
def test_grid_graph():
    nlat, nphi = 6, 8
    e = sphere.grid_neighbours(nlat, nphi)
    deg = np.bincount(e.ravel(), minlength=nlat * nphi)
    assert np.all(deg == 8)            # every node: 2 along phi, 3 + 3 in the rings above and below (or across a pole)
    pairs = {tuple(sorted(p)) for p in e.tolist()}
    assert len(pairs) == len(e) and all(a != b for a, b in pairs)
    assert (0, nphi // 2) in pairs and ((nlat - 1) * nphi + 1, (nlat - 1) * nphi + 1 + nphi // 2) in pairs
    assert (0, nphi // 2 + 1) in pairs and (0, nphi // 2 - 1) in pairs     # diagonals through the pole
    assert (0, nphi - 1) in pairs      # periodic in phi
    assert (1, nphi) in pairs and (nphi - 1, nphi) in pairs and (0, nphi + 1) in pairs   # diagonals
    ep = sphere.grid_neighbours(nlat, nphi, pole_nodes=True)
    deg = np.bincount(ep.ravel())
    assert deg[nlat * nphi] == deg[nlat * nphi + 1] == nphi
    assert np.all(deg[:nphi] == 9) and np.all(deg[nphi:-nphi - 2] == 8)


def test_bad_input():
    with pytest.raises(ValueError, match="lmax must be an integer >= 1"):
        SphereBasis(0)
    with pytest.raises(ValueError, match="nlat > L"):
        SphereBasis(10, 10, 64)
    with pytest.raises(ValueError, match="nlat >= 32"):      # SHTns would end the process
        SphereBasis(6, 14, 30)
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        sphere.evaluate(np.zeros(6), np.zeros((4, 2)))
    b = SphereBasis(5)
    with pytest.raises(ValueError, match="expected 21"):
        b.synth(np.zeros(20, complex))


@pytest.mark.parametrize("n, L", [(50, 20), (600, 40), (2000, 48)])
def test_point_coefficients_are_sums_of_scipys_harmonics(n, L):
    """sum_i w_i conj(Y_lm(x_i)) with scipy's orthonormal harmonics (Condon–Shortley phase), through ducc0:
    to 1e-13 of sum w, the poles and a point next to one included; no point, no coefficient."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 3))
    x[:3] = [(0.0, 0.0, 1.0), (0.0, 0.0, -1.0), (1e-9, 0.0, 1.0)]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.uniform(0.1, 1.0, n)
    theta, phi = np.arctan2(np.hypot(x[:, 0], x[:, 1]), x[:, 2]), np.arctan2(x[:, 1], x[:, 0])
    l, m = sphere.canonical_degrees(L)
    ref = np.array([np.vdot(sph_harm_y(li, mi, theta, phi), w) for li, mi in zip(l, m)])
    c = sphere.point_coefficients(x, w, L)
    assert np.abs(c - ref).max() < 1e-13 * w.sum()
    assert not sphere.point_coefficients(x[:0], w[:0], L).any()


def test_legendre_table_is_orthonormal_for_the_area_measure():
    """spectral.sphere.legendre_table: 2 pi ∫ Pbar_l^m Pbar_k^m d cos(theta) = delta_lk (Gauss–Legendre, exact),
    and Pbar_l^m e^{i m phi} is the harmonic SHTns synthesises."""
    from spectral.sphere import SphereBasis, legendre_table
    z, w = np.polynomial.legendre.leggauss(40)
    P = legendre_table(12, z)
    for m in range(13):
        G = 2 * np.pi * np.einsum("li,ki,i->lk", P[m:, m], P[m:, m], w)
        assert np.abs(G - np.eye(13 - m)).max() < 1e-13
    b = SphereBasis(12)
    c = np.zeros(b.nlm, dtype=complex)
    c[np.nonzero((b.l == 5) & (b.m == 3))[0][0]] = 0.5                # f = 2 Re(0.5 Y_53) = Pbar_5^3 cos(3 phi)
    f = b.synth(c)
    expected = legendre_table(12, b.cos_theta)[5, 3][:, None] * np.cos(3 * b.phi)[None, :]
    assert np.abs(f - expected).max() < 1e-13
