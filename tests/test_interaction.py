"""Interaction sums Psi, G: direct (any d, numpy and compiled) against the definition and finite differences;
the compiled series (Fourier on S^1, harmonics on S^2) and the NUFFT sums (S^1, S^2: ducc0) against direct;
memory bounds; reproducibility for any thread count; method choice."""
import math
import tracemalloc

import numpy as np
import pytest

from solvers import Model
from solvers.interaction import (DIRECT_CHUNK, NUFFT_CHUNK, NUFFT_EPS_MIN, PAIR_MIN_POINTS, SERIES_CHUNK,
                                 CircleNufftSums, CircleSums, InteractionSums, SphereNufftSums, SphereSums,
                                 circle_bandwidth, compiled_direct_fields, direct_fields, interaction_fields)


def sphere_points(n, d, seed, clustered=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    if clustered:      # half the mass in a tight cap: fields with strong variation and large dynamic range
        x[: n // 2] = x[0] + 0.05 * rng.standard_normal((n // 2, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def weights(n, seed):
    w = np.random.default_rng(seed).uniform(0.2, 1.0, n)
    return w / w.sum()


def rel_errors(psi_f, G_f, psi_d, G_d):
    scale = np.max(np.abs(psi_d))
    return (np.max(np.abs(psi_f - psi_d)) / scale, np.max(np.abs(G_f - G_d)) / scale,
            np.max(np.abs(G_f - G_d)) / np.max(np.abs(G_d)))


# --- direct sums against the definition -------------------------------------------------------
@pytest.mark.parametrize("d", [2, 3, 5])
def test_direct_fields_match_the_pairwise_definition(d):
    x, y = sphere_points(6, d, 1), sphere_points(9, d, 2)
    w = weights(9, 3)
    beta = 2.5
    psi, G = direct_fields(x, y, w, beta)
    for i in range(len(x)):
        k = [wj * math.exp(beta * (x[i] @ yj - 1.0)) for yj, wj in zip(y, w)]
        assert psi[i] == pytest.approx(sum(k), rel=1e-14)
        g = sum(kj * (yj - (x[i] @ yj) * x[i]) for kj, yj in zip(k, y))
        assert np.allclose(G[i], g, rtol=0, atol=1e-15)


@pytest.mark.parametrize("d, beta", [(2, 3.0), (4, 1.5), (7, 6.0)])
def test_G_is_the_spherical_gradient_of_Psi_over_beta(d, beta):
    """beta <G(x), u> = d/ds Psi(exp_x(s u)) at s = 0 for tangent unit u (central differences)."""
    y = sphere_points(40, d, 4)
    w = weights(40, 5)
    x = sphere_points(5, d, 6)
    rng = np.random.default_rng(7)
    u = rng.standard_normal(x.shape)
    u -= np.sum(u * x, axis=1)[:, None] * x
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    _, G = direct_fields(x, y, w, beta)
    h = 1e-4
    plus, _ = direct_fields(np.cos(h) * x + np.sin(h) * u, y, w, beta)
    minus, _ = direct_fields(np.cos(h) * x - np.sin(h) * u, y, w, beta)
    fd = (plus - minus) / (2 * h)
    # central differences: truncation O(h^2) = 1e-8 on values of size 0.1
    assert np.allclose(beta * np.sum(G * u, axis=1), fd, rtol=0, atol=3e-8)


def test_direct_sums_are_memory_bounded():
    """With block_bytes = 1 MiB, N = 4000 self-interaction never holds the N x N = 128 MB matrix; the compiled
    direct sums hold nothing of the kind at all (their output and the contiguous inputs)."""
    y = sphere_points(4000, 3, 8)
    w = weights(4000, 9)
    ref_psi, _ = direct_fields(y[:50], y, w, 2.0)
    for run, limit in ((lambda: direct_fields(y, y, w, 2.0, block_bytes=2 ** 20)[0], 4 * 2 ** 20),
                       (lambda: compiled_direct_fields(y, y, w, 2.0)[0], 4000 * 8 * 5)):
        tracemalloc.start()
        psi = run()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < limit, peak                     # one block plus O(N) outputs; O(N) outputs
        assert np.allclose(psi[:50], ref_psi, rtol=1e-14)


# --- the compiled direct sums against the definition and the numpy sums ---------------------------
@pytest.mark.parametrize("d", [2, 3, 5])
def test_compiled_direct_sums_match_the_pairwise_definition(d):
    """Every pair as written, with math.exp: the compiled exponential and the sums to round-off."""
    x, y = sphere_points(11, d, 1), sphere_points(9, d, 2)
    w = weights(9, 3) - 0.05                                       # some weights negative
    for beta in (0.0, 2.5, 100.0, 1e4):
        psi, G = compiled_direct_fields(x, y, w, beta)
        for i in range(len(x)):
            k = [wj * math.exp(beta * (x[i] @ yj - 1.0)) for yj, wj in zip(y, w)]
            assert psi[i] == pytest.approx(sum(k), rel=1e-14 * (1 + beta), abs=1e-300)
            g = sum(kj * (yj - (x[i] @ yj) * x[i]) for kj, yj in zip(k, y))
            assert np.allclose(G[i], g, rtol=0, atol=1e-15 * (1 + beta) * max(1e-300, max(map(abs, k))))


def test_compiled_exponential_is_within_2_ulp_over_its_range():
    """One source at (1, 0) and points at angle a on S^1: the kernel is exp(beta (cos a - 1)) with its
    argument (x_0 - 1) beta formed exactly as the loop forms it, over [-745, 0] (normal and subnormal results;
    below, 0): within 2 units in the last place of math.exp (a subnormal: of the smallest subnormal)."""
    beta = 373.0
    a = np.linspace(0.0, np.pi, 20011)
    x = np.stack([np.cos(a), np.sin(a)], axis=1)
    psi, _ = compiled_direct_fields(x, np.array([[1.0, 0.0]]), np.ones(1), beta)
    ref = np.array([math.exp((xi - 1.0) * beta) for xi in x[:, 0]])
    assert ref.min() == 0.0 and ref[ref > 0].min() < 2.3e-308                  # the range is covered
    assert np.all(np.abs(psi - ref) <= 2 * np.spacing(ref))


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("beta", [0.0, 0.01, 1.0, 5.0, 25.0, 100.0])
def test_compiled_direct_sums_match_the_numpy_sums(d, beta):
    """Small and odd sizes (the tails of the registers), weights far from uniform, at the sources and at
    other points."""
    for n, m in ((1, 1), (3, 7), (17, 33), (301, 45)):
        y, w = sphere_points(n, d, 80 + n, clustered=n > 3), weights(n, 81) ** 3
        for x in (None, sphere_points(m, d, 82)):
            xe = y if x is None else x
            with np.errstate(invalid="ignore", divide="ignore"):          # G = 0: a single source at x
                e = rel_errors(*compiled_direct_fields(xe, y, w, beta), *direct_fields(xe, y, w, beta))
            assert max(e[:2]) <= 1e-13 * (1 + beta / 10), (n, m, e)


# --- fast sums against direct -------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["fast", "nufft"])
@pytest.mark.parametrize("beta", [0.0, 0.01, 1.0, 5.0, 25.0, 50.0, 100.0])
def test_circle_fast_sums_match_direct(beta, kind):
    y = sphere_points(2000, 2, 10, clustered=True)
    w = weights(2000, 11)
    S = (CircleSums if kind == "fast" else CircleNufftSums)(beta)
    for x in (None, sphere_points(300, 2, 12)):
        psi_f, G_f = S.fields(y, w, x)
        psi_d, G_d = direct_fields(y if x is None else x, y, w, beta)
        e_psi, e_G, e_G_own = rel_errors(psi_f, G_f, psi_d, G_d)
        assert max(e_psi, e_G, e_G_own) <= 1e-10, (beta, e_psi, e_G, e_G_own)


@pytest.mark.parametrize("d", [2, 3])
def test_series_sums_at_their_sources_equal_the_sums_at_the_same_points_given(d):
    """The compiled series evaluated at the sources and at the same points given as x: the same bits, also
    for more points than a chunk and after an evaluation at other points."""
    S = CircleSums(5.0) if d == 2 else SphereSums(5.0)
    for n in (1, 700, SERIES_CHUNK + 3):
        y, w = sphere_points(n, d, 40 + n % 7, clustered=True), weights(n, 41)
        at_sources = S.fields(y, w)
        S.fields(y, w, sphere_points(50, d, 42))
        for u in (S.fields(y, w, y.copy()), S.fields(y, w)):
            assert np.array_equal(u[0], at_sources[0]) and np.array_equal(u[1], at_sources[1]), n


@pytest.mark.parametrize("beta", [0.0, 0.01, 0.5, 1.0, 4.0, 10.0, 25.0, 40.0, 100.0])
def test_sphere_series_sums_match_direct(beta):
    """The harmonic series by recurrences against the direct sums, with sources and evaluation points at and
    near the poles (the harmonics as polynomials in x have no angle to lose there), and small odd sizes."""
    S = SphereSums(beta)
    for n in (1, 7, 2000):
        y = _with_poles(sphere_points(max(n, 8), 3, 16, clustered=True), 17)[:n]
        w = weights(n, 18) ** 2
        for x in (None, _with_poles(sphere_points(300, 3, 19), 20)[: 3 * n]):
            psi_f, G_f = S.fields(y, w, x)
            xe = y if x is None else x
            psi_d, G_d = direct_fields(xe, y, w, beta)
            # tangent to round-off of the gradient it projects (whose scale is Psi's, not G's)
            assert np.max(np.abs(np.einsum("nd,nd->n", G_f, xe))) <= 1e-14 * np.max(psi_d)
            with np.errstate(invalid="ignore", divide="ignore"):          # G = 0: a single source at x
                e_psi, e_G, e_G_own = rel_errors(psi_f, G_f, psi_d, G_d)
            assert max(e_psi, e_G) <= 1e-10, (beta, n, e_psi, e_G)
            if np.max(np.abs(G_d)) > 1e-8 * np.max(psi_d):           # (a single source at x: G = 0)
                assert e_G_own <= 1e-10, (beta, n, e_G_own)


@pytest.mark.cpu_dependent
@pytest.mark.parametrize("d", [2, 3, 5])
def test_compiled_sums_are_the_same_bits_on_any_thread_count(d):
    """Compiled direct sums of more evaluation points than a chunk, and series of more sources than a chunk
    (coefficients of two chunks added in chunk order): one thread and two give the same bits."""
    n = SERIES_CHUNK + 777 if d < 5 else 2 * DIRECT_CHUNK + 5
    y, w = sphere_points(n, d, 90, clustered=True), weights(n, 91)
    beta = 9.0
    if d < 5:
        one, two = ((CircleSums(beta, threads=k) for k in (1, 2)) if d == 2 else
                    (SphereSums(beta, threads=k) for k in (1, 2)))
        a, b = one.fields(y, w), two.fields(y, w)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert max(rel_errors(a[0][:300], a[1][:300], *direct_fields(y[:300], y, w, beta))[:2]) <= 1e-10
    src = y[:40], w[:40]
    a, b = (compiled_direct_fields(y, *src, beta, threads=k) for k in (1, 2))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@pytest.mark.cpu_dependent
@pytest.mark.slow
def test_circle_nufft_sums_are_reproducible_and_follow_sum_tol():
    """The same bits on every call and for any thread count (fixed chunks added in a fixed order;
    a multithreaded type 1 adds in a run-dependent order); a looser sum_tol gives a looser
    transform, still within it of the direct sums."""
    n = 2 * NUFFT_CHUNK + 1000                                    # three chunks
    y, w = sphere_points(n, 2, 13, clustered=True), weights(n, 14)
    x = sphere_points(n, 2, 15)
    one, two = CircleNufftSums(25.0, threads=1), CircleNufftSums(25.0, threads=2)
    for a, b in ((one.fields(y, w), two.fields(y, w)), (two.fields(y, w, x), two.fields(y, w, x))):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    psi_d, G_d = direct_fields(x[:300], y, w, 25.0)
    psi, G = one.fields(y, w, x[:300])
    assert max(rel_errors(psi, G, psi_d, G_d)) <= 1e-10
    y, w = y[:20000], w[:20000] / w[:20000].sum()
    S = CircleNufftSums(25.0)
    loose = CircleNufftSums(25.0, tol=1e-6)
    assert loose.eps == 1e-6 and loose.K < S.K and S.eps == NUFFT_EPS_MIN
    psi_d, G_d = direct_fields(y, y, w, 25.0)
    e = rel_errors(*loose.fields(y, w), psi_d, G_d)
    assert 1e-8 < max(e) <= 1e-5, e


def _with_poles(x, seed):
    """x with its first rows at the poles (also -0.0 components: arctan2(0, -0.0) = pi) and within
    1e-12 .. 1e-6 of them."""
    x = x.copy()
    x[0], x[1], x[2] = (0.0, 0.0, 1.0), (-0.0, 0.0, -1.0), (-0.0, -0.0, 1.0)
    rng = np.random.default_rng(seed)
    for i, r in enumerate((1e-12, 1e-9, 1e-6, 1e-3)):
        a = rng.uniform(0, 2 * np.pi)
        x[3 + i] = (r * np.cos(a), r * np.sin(a), (-1) ** i)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("beta", [0.0, 0.01, 0.5, 1.0, 4.0, 10.0, 25.0, 40.0, 100.0])
def test_sphere_nufft_sums_match_direct(beta):
    """The harmonic sums through ducc0 against the direct sums, with sources and evaluation points at and
    near the poles."""
    y = _with_poles(sphere_points(2000, 3, 16, clustered=True), 17)
    w = weights(2000, 18)
    S = SphereNufftSums(beta)
    assert S.eps == NUFFT_EPS_MIN
    for x in (None, _with_poles(sphere_points(300, 3, 19), 20)):
        psi_f, G_f = S.fields(y, w, x)
        xe = y if x is None else x
        assert np.max(np.abs(np.einsum("nd,nd->n", G_f, xe))) <= 1e-14 * np.max(np.abs(G_f))   # tangent
        e_psi, e_G, e_G_own = rel_errors(psi_f, G_f, *direct_fields(xe, y, w, beta))
        assert max(e_psi, e_G, e_G_own) <= 1e-10, (beta, e_psi, e_G, e_G_own)


@pytest.mark.cpu_dependent
def test_sphere_nufft_sums_are_reproducible_for_any_thread_count():
    """More than one chunk: the same bits for one and two threads, and on every call."""
    one = InteractionSums(3, 4.0, "nufft", nufft_threads=1)
    two = InteractionSums(3, 4.0, "nufft", nufft_threads=2)
    n = 2 * one.nufft.chunk + 5000                                # three chunks
    y, w = sphere_points(n, 3, 21, clustered=True), weights(n, 22)
    x = sphere_points(one.nufft.chunk + 1000, 3, 23)              # two chunks
    a, b, c = one.fields(y, w), two.fields(y, w), two.fields(y, w)
    for u, v in ((a, b), (b, c), (one.fields(y, w, x), two.fields(y, w, x))):
        assert np.array_equal(u[0], v[0]) and np.array_equal(u[1], v[1])
    psi_d, G_d = direct_fields(y[:400], y, w, 4.0)
    assert max(rel_errors(a[0][:400], a[1][:400], psi_d, G_d)) <= 1e-10


@pytest.mark.cpu_dependent
def test_sphere_nufft_sums_of_one_chunk_are_the_same_on_two_threads():
    """One chunk: with two threads its two syntheses (Psi and G) run concurrently. The same bits as one
    thread, at the sources and at other points, in any order of calls, and within 1e-10 of the direct sums."""
    one = InteractionSums(3, 9.0, "nufft", nufft_threads=1)
    two = InteractionSums(3, 9.0, "nufft", nufft_threads=2)
    y, w = _with_poles(sphere_points(3000, 3, 60, clustered=True), 61), weights(3000, 62)
    y2, w2 = sphere_points(2600, 3, 64), weights(2600, 65)
    x = sphere_points(2500, 3, 63)
    assert PAIR_MIN_POINTS <= 2500 and 3000 <= two.nufft.chunk           # one chunk, paired on two threads
    want = {k: one.fields(*a) for k, a in (("src", (y, w)), ("x", (y, w, x)), ("src2", (y2, w2)),
                                           ("x2", (y2, w2, x)))}
    for k, a in (("x", (y, w, x)), ("src", (y, w)), ("src2", (y2, w2)), ("x", (y, w, x)), ("x2", (y2, w2, x)),
                 ("src", (y, w))):
        u = two.fields(*a)
        assert np.array_equal(u[0], want[k][0]) and np.array_equal(u[1], want[k][1]), k
    psi_d, G_d = direct_fields(x, y, w, 9.0)
    assert max(rel_errors(want["x"][0], want["x"][1], psi_d, G_d)) <= 1e-10


@pytest.mark.parametrize("d, beta", [(2, 25.0), (3, 4.0)])
def test_nufft_sums_at_their_sources_equal_the_sums_at_the_same_points_given(d, beta):
    """At the sources (x omitted) the evaluation reuses what the source pass made of the points (S^1: each
    chunk's plan; S^2: the angles); given the same points as x, it makes them again: the same bits either
    way, also after an evaluation at other points and on another thread count."""
    one = InteractionSums(d, beta, "nufft", nufft_threads=1)
    chunk = NUFFT_CHUNK if d == 2 else one.nufft.chunk
    n = chunk + 777                                                  # two chunks
    y, w = sphere_points(n, d, 31, clustered=True), weights(n, 32)
    x = sphere_points(2 * chunk + 5, d, 33)                          # three chunks: one plan more
    at_sources = one.fields(y, w)
    given = one.fields(y, w, y.copy())
    one.fields(y, w, x)
    again = InteractionSums(d, beta, "nufft", nufft_threads=2).fields(y, w)
    for u in (given, one.fields(y, w), again):
        assert np.array_equal(u[0], at_sources[0]) and np.array_equal(u[1], at_sources[1])


def test_nufft_sums_shared_by_two_threads_give_each_its_own_fields():
    """Two threads evaluating one sums object at different point sets at once get what each gets alone
    (no state of an evaluation is kept in the object)."""
    from concurrent.futures import ThreadPoolExecutor
    S = CircleNufftSums(25.0, threads=2)
    sizes = (NUFFT_CHUNK + 100, NUFFT_CHUNK + 2000)                  # two chunks each
    sets = [(sphere_points(n, 2, 40 + i, clustered=i == 0), weights(n, 50 + i)) for i, n in enumerate(sizes)]
    alone = [S.fields(y, w) for y, w in sets]
    with ThreadPoolExecutor(2) as ex:
        together = list(ex.map(lambda i: S.fields(*sets[i % 2]), range(6)))
    for i, (psi, G) in enumerate(together):
        assert np.array_equal(psi, alone[i % 2][0]) and np.array_equal(G, alone[i % 2][1])


def test_sphere_nufft_sums_hold_no_points_by_modes_array():
    """N = 2e5 at beta = 25 (47^2 modes per point would be 0.7 GB complex): the numpy memory of one
    evaluation stays O(N) (outputs, angles, one chunk's temporaries). ducc0's own buffers are per
    call and per grid, outside tracemalloc's view."""
    n = 200_000
    y, w = sphere_points(n, 3, 25), weights(n, 26)
    S = SphereNufftSums(25.0, threads=2)
    S.fields(y[:1000], w[:1000])                                   # plans, pool
    tracemalloc.start()
    S.fields(y, w)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 150 * n, peak          # measured ~100 bytes per point; (points x modes) would be 35 kB


@pytest.mark.cpu_dependent
def test_auto_sums_give_the_same_bits_for_any_thread_count():
    """sum="auto" picks its method without regard to the thread count (the chunks of a pass are costed as
    run two at a time whatever the count), so the fields are the same bits on one and two threads, here where
    the compiled series have one chunk and several, and where the NUFFT is the pick."""
    for d, beta, N in ((2, 5.0, 500), (2, 5.0, 2 * SERIES_CHUNK + 7), (2, 1000.0, 5000), (3, 4.0, 500),
                       (3, 50.0, 5000)):
        y, w = sphere_points(N, d, 70, clustered=True), weights(N, 71)
        one, two = InteractionSums(d, beta, nufft_threads=1), InteractionSums(d, beta, nufft_threads=2)
        assert one.method_for(N) == two.method_for(N) == ("nufft" if N == 5000 else "fast")
        a, b = one.fields(y, w), two.fields(y, w)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_circle_bandwidth_resolves_the_kernel():
    """The truncated Bessel series reproduces exp(beta(cos t - 1)) to round-off (the truncation is
    1e-17 lambda_0; summing O(1) terms costs a few 1e-16, and the reference exp(beta(cos t - 1))
    itself carries beta times the rounding of cos t)."""
    from scipy.special import ive
    t = np.linspace(0, np.pi, 501)
    for beta in (0.3, 7.0, 60.0):
        K = circle_bandwidth(beta)
        k = np.arange(1, K + 1)
        series = ive(0, beta) + 2 * (ive(k, beta)[None, :] * np.cos(np.outer(t, k))).sum(axis=1)
        assert np.max(np.abs(series - np.exp(beta * (np.cos(t) - 1)))) <= 1e-15 + 1e-16 * beta
        assert K <= 8 * math.sqrt(beta) + 12


# --- selection and energy ------------------------------------------------------------------------
def test_method_selection_and_refusals():
    assert InteractionSums(4, 3.0).method_for(10 ** 6) == "direct"       # no series for d >= 4
    assert InteractionSums(2, 25.0).method_for(10 ** 5) == "fast"       # K = 48: the compiled series are cheaper
    assert InteractionSums(2, 1000.0).method_for(10 ** 5) == "nufft"    # K = 284: spreading is cheaper
    assert InteractionSums(3, 4.0).method_for(1000) == "fast"           # the series vs N^2 pairs or transforms
    assert InteractionSums(3, 100.0).method_for(10 ** 5) == "nufft"     # L = 90: 4186 modes a point
    assert InteractionSums(3, 4.0).method_for(30) == "direct"           # few pairs
    assert InteractionSums(2, 25.0).method_for(3) == "direct"
    assert InteractionSums(3, 4.0, "direct").method_for(10 ** 6) == "direct"
    with pytest.raises(ValueError, match="fast sums exist on S\\^1 and S\\^2 only .* not d = 4: use sum='direct'"):
        InteractionSums(4, 1.0, "fast")
    assert InteractionSums(3, 1e5).method_for(10 ** 6) == "direct"        # auto falls back
    with pytest.raises(ValueError, match="S\\^1 and S\\^2 only"):
        InteractionSums(4, 1.0, "nufft")
    for method in ("nufft", "fast"):
        with pytest.raises(ValueError, match=f"{method} sums on S\\^2 need degree .* use method='direct'"):
            InteractionSums(3, 1e5, method)
    with pytest.raises(ValueError, match="sum method"):
        InteractionSums(2, 1.0, "nfft")
    with pytest.raises(ValueError, match="shape"):
        interaction_fields(np.ones((3, 2)), np.ones(3), 1.0, x=np.ones((2, 3)))


@pytest.mark.parametrize("d, beta", [(2, 0.0), (2, 8.0), (3, 0.0), (3, 3.0), (5, 2.0)])
def test_pair_term_matches_model_energy_direct(d, beta):
    """InteractionSums.pair (from Psi) against the independent double sum of Model.energy_direct."""
    y = sphere_points(500, d, 16, clustered=True)
    w = weights(500, 17)
    m = Model(d, beta, "ascent")
    S = InteractionSums(d, beta)
    assert m.energy(S.pair(y, w), 0.0) == pytest.approx(m.energy_direct(y, w), rel=1e-12, abs=1e-14)
