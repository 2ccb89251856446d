"""Stationary states with noise, their branches in the noise, the phase transitions (solvers.stationary), against
results from outside the code: the thresholds of The model §3.2, the fixed point of §3.5 computed without
spectral multipliers, the Bessel-ratio root of Mun and Rosenzweig, the time-dependent PDE, the particles."""
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import iv, ive

from solvers import Model, Perceptron, simulate_particles, solve_pde
from solvers.branches import Branch, branch_from_uniform, continue_branch
from solvers.stationary import StationaryState, free_energy, stationary_state

sys.path.insert(0, str(Path(__file__).parent))
from test_pde_circle import fixed_point as circle_fixed_point  # noqa: E402
from test_pde_sphere import fixed_point as sphere_fixed_point  # noqa: E402


def lam(d, beta, l):
    """Funk–Hecke multiplier of exp(beta (t - 1)) for the uniform probability measure (The model §2)."""
    return ive(l, beta) if d == 2 else math.sqrt(math.pi / (2 * beta)) * ive(l + 0.5, beta)


def bessel_root(d):
    """Mun–Rosenzweig's beta_*: I_{d/2+1}(beta) / I_{d/2}(beta) = 1/d."""
    return brentq(lambda b: iv(d / 2 + 1, b) / iv(d / 2, b) - 1 / d, 0.1, 20.0, xtol=1e-15)


# --- thresholds (The model §3.2) ----------------------------------------------------------------------------
@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("beta, gamma", [(1.0, 1.0), (6.0, 2.5)])
def test_thresholds_are_the_linear_rates_zeros(d, beta, gamma):
    """nu_l = gamma lambda_l / beta, where r_l = l(l + d - 2)(gamma lambda_l / beta - nu) vanishes, modes 1..4."""
    m = Model(d, beta, "ascent", strength=gamma)
    for l in (1, 2, 3, 4):
        b = branch_from_uniform(m, l, 24, max_points=3)
        exact = gamma * lam(d, beta, l) / beta
        # measured <= 2.4e-15
        assert abs(b.threshold / exact - 1) <= 1e-10, (l, b.threshold, exact)
        assert b.noise.min() >= 0.25 * exact and b.noise.max() <= 1.5 * exact
        if l == 1:
            # Mun and Rosenzweig's linear threshold K_# = beta^{d/2} / (2^{d/2} Gamma(d/2) I_{d/2}(beta)) is the
            # coupling K = gamma e^{-beta} / (2 nu) at nu_1 (docs/noise.md, Conventions)
            k_sharp = beta ** (d / 2) / (2 ** (d / 2) * math.gamma(d / 2) * iv(d / 2, beta))
            assert abs(gamma * math.exp(-beta) / (2 * b.threshold) / k_sharp - 1) <= 1e-12


@pytest.mark.parametrize("d", [2, 3])
def test_uniform_state_eigenvalues_are_the_linear_rates(d):
    beta, nu = 3.0, 0.02
    m = Model(d, beta, "ascent", noise=nu)
    st = stationary_state(m, 12, eigenvalues=200)
    l = np.arange(1, 12 if d == 2 else 13)
    rates = l * (l + d - 2) * (lam(d, beta, l) / beta - nu)
    mult = 2 if d == 2 else 2 * l + 1
    expected = np.sort(np.repeat(rates, mult))[::-1]
    n = min(len(expected), len(st.eigenvalues))
    assert st.symmetry_modes == 0 and st.converged and st.iterations == 0
    # measured 3e-15
    assert np.max(np.abs(st.eigenvalues[:n] - expected[:n])) <= 1e-10
    assert st.stable == (rates.max() < 0) and st.unstable_directions == int(np.sum(np.repeat(rates, mult) > 0))


# --- the fixed point (The model §3.5) ------------------------------------------------------------------------
@pytest.mark.parametrize("flow", ["ascent", "descent"])
def test_circle_state_is_the_picard_fixed_point(flow):
    """Against damped Picard iterations with Psi by direct trapezoidal quadrature of the kernel (no multipliers)."""
    p = Perceptron.random(2, 3, "gelu", 1.5, seed=2)
    m = Model(2, 3.0, flow, perceptron=p, noise=0.8)
    x, rho_fp = circle_fixed_point(m)
    st = stationary_state(m, 64)
    assert st.converged and st.representation == "full"
    # measured 1.1e-15
    assert np.abs(st.at(x) - rho_fp).max() < 1e-12
    assert st.residual < 1e-13 and st.stable


@pytest.mark.parametrize("representation", ["general", "zonal"])
def test_sphere_state_is_the_picard_fixed_point(representation):
    """Against Picard iterations with Psi by Gauss quadrature on a numpy grid (no harmonics); the zonal case with
    a perceptron whose directions are all +-e_z (a zonal potential)."""
    if representation == "general":
        p = Perceptron.random(3, 3, "gelu", 1.5, seed=2)
    else:
        p = Perceptron(np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]]), c=np.array([0.8, -0.3]), activation="gelu")
    m = Model(3, 3.0, "ascent", perceptron=p, noise=0.8)
    x, rho_fp = sphere_fixed_point(m)
    st = stationary_state(m, 24, eigenvalues=0 if representation == "general" else 8)
    assert st.converged and st.representation == representation
    # measured 2e-15
    assert np.abs(st.at(x) - rho_fp).max() < 1e-12


def test_zonal_and_general_representations_agree():
    """A clustered state of the perceptron-free sphere in both representations (the general one by
    Newton–Krylov from the zonal state), and its symmetry zeros: two rotations move a zonal state."""
    beta = 1.5
    m = Model(3, beta, "ascent", noise=0.7 * lam(3, beta, 1) / beta)
    b = branch_from_uniform(m, 1, 24, max_points=40)
    assert b.kind == "supercritical"
    i = b.nearest(m.noise, stable=True)
    assert b.amplitude[i] > 1.0
    z = stationary_state(m, 24, guess=b.coeffs[i])
    g = stationary_state(m, 24, guess=b.coeffs[i], representation="general", eigenvalues=0)
    assert z.representation == "zonal" and g.representation == "general" and z.converged and g.converged
    # the general representation may turn the state by round-off (a rotation is a null direction of its
    # Newton–Krylov steps): compared by the rotation-invariant size of each degree
    amp = lambda st: np.array([st.amplitude(l) for l in range(1, 25)])  # noqa: E731
    assert np.abs(amp(z) - amp(g)).max() < 1e-11
    assert z.stable and z.symmetry_modes == 2 and z.symmetry_residual < 1e-9
    assert abs(z.free_energy - g.free_energy) < 1e-13


# --- the free energy ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("d, degree", [(2, 64), (3, 16)])
def test_free_energy_decreases_along_the_pde(d, degree):
    """F = nu ∫ rho log rho - s E is a Lyapunov function of the noisy PDE (solvers.stationary, Notes): it
    decreases between snapshots, towards the stationary state's F, the gap closing like e^{2 mu_1 t} with
    mu_1 the state's leading eigenvalue (F is quadratic about its minimum)."""
    p = Perceptron.random(d, 2, "gelu", 1.0, seed=5)
    m = Model(d, 3.0, "ascent", perceptron=p, noise=0.3)
    start = (lambda x: np.exp(1.2 * x[:, 0] - 0.4 * x[:, 1])) if d == 2 else (lambda x: np.exp(x[:, 2] + x[:, 0]))
    r = solve_pde(m, 60.0, degree, initial=start, save_every=5.0, rtol=1e-11, atol=1e-14, max_degree=degree)
    assert r.stop_reason == "t_final"
    F = np.array([free_energy(m, c) for c in r.coeffs])
    assert np.all(np.diff(F) < 1e-13) and F[0] - F[-1] > 1e-3          # decreasing, to round-off at the end
    st = stationary_state(m, degree, guess=r.coeffs[-1])
    assert st.stable and st.converged and abs(free_energy(m, st.coeffs) - st.free_energy) < 1e-13
    gap = F - st.free_energy
    assert np.all(gap > -1e-13)
    # the last ratio of gaps still above round-off; measured 0.262 against e^{2 mu_1 5} = 0.261 on S^1
    k = int(np.nonzero(gap > 1e-9)[0][-1])
    ratio = gap[k] / gap[k - 1]
    assert abs(ratio / math.exp(2 * st.eigenvalues[0] * 5.0) - 1) < 0.05, (ratio, st.eigenvalues[0])


# --- the kind of the bifurcation: Mun and Rosenzweig's dichotomy -----------------------------------------------
def _switch(d, degree, lo, hi, tol):
    """The beta where the computed mode-1 branch's kind changes, by bisection on branches."""
    kind = lambda beta: branch_from_uniform(Model(d, beta, "ascent"), 1, degree, max_points=10).kind  # noqa: E731
    k_lo, k_hi = kind(lo), kind(hi)
    assert (k_lo, k_hi) == ("supercritical", "subcritical")
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if kind(mid) == k_lo else (lo, mid)
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("d, degree, bracket", [(2, 64, (2.0, 3.0)), (3, 32, (1.5, 2.5))])
def test_kind_switches_at_the_bessel_ratio_root(d, degree, bracket):
    """Supercritical below beta_*, subcritical above it, beta_* the root of I_{d/2+1}/I_{d/2} = 1/d (S^1:
    2.44692, S^2: 1.81615). Measured with the bisection to 1e-7: 2.1e-7 (S^1), 4.4e-8 (S^2) off."""
    found = _switch(d, degree, *bracket, tol=1e-5)
    assert abs(found - bessel_root(d)) < 1e-4


def test_kind_of_mode_2_on_the_circle_switches_where_lambda_4_is_half_lambda_2():
    """The mode-k pitchfork on S^1 couples k to 2k as mode 1 couples 1 to 2: its kind changes where
    I_{2k}(beta) / I_k(beta) = 1/2 (8.96678 for k = 2). Measured with the bisection to 1e-6: 1.3e-6 off."""
    root = brentq(lambda b: iv(4, b) / iv(2, b) - 0.5, 1.0, 30.0, xtol=1e-14)
    kind = lambda beta: branch_from_uniform(Model(2, beta, "ascent"), 2, 96, max_points=10).kind  # noqa: E731
    lo, hi = 0.9 * root, 1.1 * root
    assert (kind(lo), kind(hi)) == ("supercritical", "subcritical")
    while hi - lo > 1e-4:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if kind(mid) == "supercritical" else (lo, mid)
    assert abs(0.5 * (lo + hi) - root) < 2e-4


@pytest.mark.parametrize("d, degree", [(2, 64), (3, 48)])
def test_subcritical_branch_has_a_fold_and_an_earlier_transition(d, degree):
    """beta = 3 > beta_* on both manifolds: the branch bends back into nu > nu_1 (where the uniform state is
    linearly stable), folds at nu_f, and its upper, stable part takes over as the free-energy minimiser at
    nu_t in (nu_1, nu_f): the transition comes before the threshold as nu decreases."""
    beta = 3.0
    m = Model(d, beta, "ascent")
    # at its own degree (max_degree = degree): the PDE's eigenvalues at the fold below are dense in it
    b = branch_from_uniform(m, 1, degree, noise_range=(0.5 * lam(d, beta, 1) / beta, 0.07), max_points=150,
                            max_degree=degree)
    assert b.kind == "subcritical" and b.normal_form > 0
    assert len(b.folds) == 1
    nu_c, nu_f, nu_t = b.threshold, b.folds[0]["nu"], b.transition
    assert nu_c < nu_t < nu_f
    # the uniform state is linearly stable at nu_t (its mode-1 rate < 0) and no longer the minimiser there
    assert (d - 1) * (lam(d, beta, 1) / beta - nu_t) < 0
    i = b.nearest(nu_t, stable=True)
    st = stationary_state(m.replace(noise=nu_t), degree, guess=b.coeffs[i])
    assert st.stable and abs(st.free_energy - b.free_energy_uniform) < 1e-10
    # the fold is where the stable and the unstable states meet: one eigenvalue of the PDE crosses zero
    fold = b.state(b.nearest(nu_f))
    assert abs(fold.noise - nu_f) < 2e-3 * nu_f


def test_fold_converges_with_the_degree():
    """The fold of the beta = 3 branch on S^1 at K = 32, 64, 128 modes: spectral convergence."""
    m = Model(2, 3.0, "ascent")
    # max_degree = K: each branch at its own degree (the default raises K = 32 to 64 where the states sharpen)
    branches = [branch_from_uniform(m, 1, K, noise_range=(0.05, 0.07), max_points=60, max_degree=K) for K in (32, 64, 128)]
    assert [b.degree for b in branches] == [32, 64, 128]
    folds = [b.folds[0]["nu"] for b in branches]
    # measured |diff| ~1e-16
    assert abs(folds[1] - folds[2]) < 1e-12 and abs(folds[0] - folds[2]) < 1e-10


def test_a_branch_raises_its_degree_where_its_states_sharpen_and_says_so():
    """S^2, beta = 3, from L = 8: the states sharpen along the subcritical branch, their tail passes tail_max at
    L = 8 and then at 16, and the branch is followed again at 16 and 32. Its points are those of the branch
    computed at 32 from the start (the same numbers: one discretisation), every one resolved; with max_degree
    = 8 the side stops there, "resolution", naming max_degree."""
    m = Model(3, 3.0, "ascent")
    kw = dict(noise_range=(0.03, 0.045), max_points=25)
    b = branch_from_uniform(m, 1, 8, **kw)
    assert b.degree == 32 and [(r["from"], r["to"]) for r in b.refinements] == [(8, 16), (16, 32)]
    assert all(r["tail"] > r["tail_max"] == 1e-8 for r in b.refinements)
    assert np.max(b.tail) <= 1e-8 and b.options["max_degree"] == 128
    direct = branch_from_uniform(m, 1, 32, **kw)
    for key in ("noise", "amplitude", "free_energy", "coeffs", "stable"):
        np.testing.assert_array_equal(getattr(b, key), getattr(direct, key), err_msg=key)
    assert "degree raised 8 -> 16 (of max_degree 128): at nu = " in b.summary()
    capped = branch_from_uniform(m, 1, 8, max_degree=8, **kw)
    assert capped.degree == 8 and not capped.refinements
    assert {reason for reason, _ in capped.stop.values()} == {"resolution"}
    assert all("(max_degree: raise it to go on)" in msg for _, msg in capped.stop.values())
    with pytest.raises(ValueError, match="max_degree 8 must be >= degree 16"):
        branch_from_uniform(m, 1, 16, max_degree=8, **kw)


def test_the_sphere_branch_from_defaults_reaches_its_fold_and_transition():
    """The issue's case: on S^2 at beta = 3 the default degree 32 no longer resolves the branch just before its
    fold; raised to 64 it reaches the fold and the transition of docs/noise.md (L = 64)."""
    b = branch_from_uniform(Model(3, 3.0, "ascent"))
    assert b.degree == 64 and [(r["from"], r["to"]) for r in b.refinements] == [(32, 64)]
    assert [f["nu"] for f in b.folds] == pytest.approx([0.0411991975], rel=1e-8)
    assert b.transition == pytest.approx(0.0403544434, rel=1e-8)
    assert "resolution" not in {reason for reason, _ in b.stop.values()}


def test_transcritical_mode_on_the_sphere():
    """l = 2 on S^2: no symmetry maps Y_20 to -Y_20, the branch crosses the threshold (a1 != 0)."""
    b = branch_from_uniform(Model(3, 3.0, "ascent"), 2, 32, max_points=20)
    assert b.kind == "transcritical"
    first = b.normal_form_fit["first"]
    assert np.sign(first[1]) != np.sign(first[-1])


# --- the time-dependent PDE and the particles ----------------------------------------------------------------
def _side_state(b: Branch, m: Model, nu: float, degree: int, side: int = 1) -> StationaryState:
    i = int(np.argmin(np.where(b.side == side, np.abs(b.noise - nu), np.inf)))
    return stationary_state(m.replace(noise=nu), degree, guess=b.coeffs[i])


def test_pde_converges_to_the_supercritical_branch_state():
    """Below a supercritical threshold (S^1, beta = 1), solve_pde from 1 + 0.01 cos(theta) ends at the branch's
    stable state (the side of positive c_1)."""
    m = Model(2, 1.0, "ascent")
    b = branch_from_uniform(m, 1, 64, max_points=60)
    assert b.kind == "supercritical"
    nu = 0.6 * b.threshold
    st = _side_state(b, m, nu, 64)
    assert st.stable and st.converged
    r = solve_pde(m.replace(noise=nu), 250.0, 64, initial=lambda x: 1 + 0.01 * x[:, 0], rtol=1e-12, atol=1e-15,
                  max_degree=64)
    assert r.stop_reason == "t_final"
    # measured 6e-14
    assert np.abs(r.coeffs[-1] - st.coeffs).max() < 1e-8


@pytest.mark.slow
def test_sphere_pde_converges_to_the_supercritical_branch_state():
    m = Model(3, 1.0, "ascent")
    b = branch_from_uniform(m, 1, 32, max_points=60)
    nu = 0.6 * b.threshold
    st = _side_state(b, m, nu, 40)
    assert st.stable and st.tail < 1e-10
    r = solve_pde(m.replace(noise=nu), 160.0, 40, initial=lambda x: 1 + 0.01 * x[:, 2], rtol=1e-11, atol=1e-15,
                  max_degree=40)
    assert r.stop_reason == "t_final"
    assert np.abs(r.coeffs[-1] - st.coeffs).max() < 1e-8


def test_both_stable_states_of_the_bistable_window_persist():
    """S^1, beta = 3 (subcritical): at nu in (nu_1, nu_f) the upper state and the uniform state are both stable.
    The PDE started at the upper state stays there; started near uniform, the perturbation decays at the
    linear rate r_1 = gamma lambda_1 / beta - nu < 0 of §3.2."""
    m = Model(2, 3.0, "ascent")
    b = branch_from_uniform(m, 1, 64, noise_range=(0.05, 0.07), max_points=80)
    nu_c, nu_f = b.threshold, b.folds[0]["nu"]
    nu = nu_c + 0.5 * (nu_f - nu_c)
    upper = [i for i in range(len(b.noise)) if b.stable[i] and b.side[i] == 1 and b.amplitude[i] > 0.3]
    st = stationary_state(m.replace(noise=nu), 64, guess=b.coeffs[min(upper, key=lambda i: abs(b.noise[i] - nu))])
    assert st.stable and st.amplitude(1) > 0.3
    mn = m.replace(noise=nu)
    r = solve_pde(mn, 100.0, 64, initial=st.coeffs, rtol=1e-12, atol=1e-15, max_degree=64)
    assert np.abs(r.coeffs[-1] - st.coeffs).max() < 1e-8
    eps, T = 1e-4, 400.0
    r = solve_pde(mn, T, 32, initial=lambda x: 1 + 2 * eps * x[:, 0], rtol=1e-12, atol=1e-16, max_degree=32)
    rate = lam(2, 3.0, 1) / 3.0 - nu
    assert rate < 0
    # c_1 = eps at t = 0; measured relative miss 2e-8 (nonlinear terms O(eps^2))
    assert abs(r.coeffs[-1][1].real / (eps * math.exp(rate * T)) - 1) < 1e-4


@pytest.mark.slow
def test_particles_sample_the_stable_state():
    """N = 10^5 noisy particles (S^1, beta = 1, nu = 0.6 nu_1) from 1 + 0.5 cos(theta) to t = 70 sample the stable
    state: the sizes |c_k| of their first Fourier coefficients (rotation-invariant: the state is stationary in
    every rotation and the noise moves the cluster's centre) are the state's to within 3 N^{-1/2}. The particle
    solver's Strang splitting (noise h/2, drift, noise h/2) has an invariant measure O(dt^2) from the SDE's; a
    Lie splitting (drift, then the whole noise) was O(dt) off: |c_2| 0.014 too small at dt = 0.1, against
    N^{-1/2} = 0.0032."""
    m = Model(2, 1.0, "ascent")
    b = branch_from_uniform(m, 1, 64, max_points=60)
    nu = 0.6 * b.threshold
    st = _side_state(b, m, nu, 64)
    N, dt = 100_000, 0.1
    res = simulate_particles(m.replace(noise=nu), N, t_final=70.0, density=lambda x: 1 + 0.5 * x[:, 0], seed=3,
                             integrator="rk4", dt=dt, save_every=70.0)
    theta = np.arctan2(res.x[-1][:, 1], res.x[-1][:, 0])
    k = np.arange(1, 6)
    c = np.exp(-1j * np.outer(k, theta)).mean(axis=1)
    err = np.abs(np.abs(c) - np.abs(st.coeffs[1:6]))
    assert np.max(err) < 3.0 / math.sqrt(N), err


# --- continuation through any state, branch points, perceptron ------------------------------------------
def test_continue_branch_retraces_the_branch_and_reaches_the_uniform_state():
    """From a state of the mode-2 branch (beta = 10, subcritical) the continuation finds the fold and the
    return to the uniform state at the mode's threshold (a turning point in nu at amplitude 0)."""
    m = Model(2, 10.0, "ascent")
    b = branch_from_uniform(m, 2, 64, max_points=60)
    st = b.state(b.nearest(0.95 * b.threshold))
    assert st.unstable_directions >= 2 and int(np.sum(st.eigenvalues > 0)) == st.unstable_directions
    cb = continue_branch(st, (0.9 * b.threshold, 1.01 * b.fold_noise[0]), max_points=80)
    found = sorted(f["nu"] for f in cb.folds)
    assert any(abs(f - b.threshold) < 1e-8 * b.threshold for f in found)
    assert any(abs(f - b.fold_noise[0]) < 1e-9 * b.fold_noise[0] for f in found)


def test_branch_switching_at_a_symmetry_breaking_branch_point():
    """V = 0.05 cos^2(theta) / 2 (a linear unit along e_x) is even and pi-periodic: the states continued from
    large nu have the period pi (two bumps, c_1 = 0). Where the cos(theta) direction becomes unstable on that
    branch (an eigenvalue of S through zero, no fold) continue_branch finds the branch point and switches to the
    branch that breaks the period (c_1 != 0): a supercritical pitchfork, stable below the point where the
    period-pi states are unstable. Every point of both is the stationary state Newton finds from it."""
    p = Perceptron(np.array([[1.0, 0.0]]), c=np.array([0.05]), activation="linear")
    m = Model(2, 3.0, "ascent", perceptron=p, noise=0.15)
    s = stationary_state(m, 64)
    assert s.representation == "even" and s.stable and abs(s.coeffs[1]) < 1e-14
    b = continue_branch(s, (0.03, 0.2), max_points=80)
    assert [x["kind"] for x in b.bifurcations] == ["branch point"] and len(b.children) == 1
    bp = b.bifurcations[0]
    assert abs(bp["spectra"]["main"][0]) < 1e-9          # S singular there, without a fold
    assert np.all(np.abs(b.coeffs[:, 1]) < 1e-13)        # the parent keeps the period pi ...
    below = b.noise < bp["nu"] * (1 - 1e-6)
    assert np.all(~b.stable[below]) and np.all(b.stable[b.noise > bp["nu"] * (1 + 1e-6)])
    child = b.children[0]
    assert np.max(child.noise) <= bp["nu"] * (1 + 1e-9)  # ... the child leaves it towards smaller nu
    far = child.noise < 0.9 * bp["nu"]
    assert np.all(np.abs(child.coeffs[far, 1]) > 1e-3) and np.all(child.stable[far])
    for i in (0, len(child.noise) // 3, len(child.noise) - 1):
        st = stationary_state(m.replace(noise=float(child.noise[i])), 64, guess=child.coeffs[i])
        assert np.abs(st.coeffs - child.coeffs[i]).max() < 1e-12 and st.iterations <= 1


def test_index_from_S_is_the_count_of_positive_pde_eigenvalues():
    """Sylvester: the unstable directions counted on S are the positive eigenvalues of the linearised PDE, on
    both parts of a subcritical branch and for a mode-2 state (S^2 zonal, the orders m >= 1 counted twice)."""
    for d, degree, mode in ((2, 48, 1), (3, 24, 1), (3, 24, 2)):
        # at its own degree (max_degree = degree): the PDE's dense eigenvalues grow fast with it
        b = branch_from_uniform(Model(d, 3.0, "ascent"), mode, degree, max_points=30, max_degree=degree)
        for i in np.linspace(0, len(b.noise) - 1, 5).astype(int):
            st = b.state(int(i), eigenvalues=60)
            if st.tail > 1e-10 or np.min(np.abs(st.eigenvalues)) < 1e-9:
                continue
            assert st.unstable_directions == int(np.sum(st.eigenvalues > 0)) == b.unstable[i], (d, mode, i)


def test_imperfect_branch_with_a_perceptron():
    """A perceptron breaks the symmetry: the branch continued from the near-uniform state at the largest nu
    is imperfect, and each of its points is the stationary state Newton finds at that nu from it."""
    p = Perceptron.random(2, 2, "gelu", 0.05, seed=3)
    m = Model(2, 3.0, "ascent", perceptron=p)
    b = branch_from_uniform(m, 1, 64, noise_range=(0.03, 0.1), max_points=60)
    assert b.kind == "imperfect" and b.free_energy_uniform is None and b.transition is None
    assert abs(b.threshold / (lam(2, 3.0, 1) / 3.0) - 1) < 1e-12
    for i in (0, len(b.noise) // 2, len(b.noise) - 1):
        st = stationary_state(m.replace(noise=float(b.noise[i])), 64, guess=b.coeffs[i])
        assert np.abs(st.coeffs - b.coeffs[i]).max() < 1e-10


# --- refusals -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, message", [
    (lambda: branch_from_uniform(Model(2, 3.0, "ascent"), 1, 64, noise_range=(-0.1, 0.2)), "0 < lo < hi"),
    (lambda: branch_from_uniform(Model(2, 3.0, "ascent"), 1, 64, noise_range=(0.2, 0.1)), "0 < lo < hi"),
    (lambda: branch_from_uniform(Model(2, 3.0, "ascent"), 0, 64), "mode must be an integer >= 1"),
    (lambda: branch_from_uniform(Model(2, 3.0, "ascent"), 6, 6), "cannot represent mode 6"),
    (lambda: branch_from_uniform(Model(3, 3.0, "ascent"), 5, 4), "cannot represent mode 5"),
    (lambda: branch_from_uniform(Model(2, 3.0, "descent"), 1, 64), "in descent"),
    (lambda: branch_from_uniform(Model(2, 3.0, "ascent"), 1, 64, noise_range=(0.1, 0.2)), "must contain the threshold"),
    (lambda: branch_from_uniform(Model(2, 0.5, "ascent"), 60, 128), "beyond the kernel's bandwidth"),
    (lambda: branch_from_uniform(Model(2, 3.0, "ascent"), 1, 64, max_step=-1.0), "max_step"),
    (lambda: stationary_state(Model(2, 3.0, "ascent"), 64), "needs noise > 0"),
    (lambda: stationary_state(Model(2, 3.0, "ascent", attention="normalized", noise=0.1), 64), "unnormalized"),
    (lambda: stationary_state(Model(2, 3.0, "ascent", noise=0.1,
                                    perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=1, general=True)), 64),
     "general-form perceptron"),
    (lambda: stationary_state(Model(4, 3.0, "ascent", noise=0.1), 64), r"circle \(d = 2\) and the sphere"),
    (lambda: stationary_state(Model(2, 3.0, "ascent", noise=0.1), 3), "degree must be an integer >= 4"),
    (lambda: stationary_state(Model(2, 3.0, "ascent", noise=0.1), 16, representation="zonal"), "'even' or 'full'"),
])
def test_refusals(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_unknown_continuation_option_is_named():
    with pytest.raises(TypeError, match="max_stepp"):
        branch_from_uniform(Model(2, 3.0, "ascent"), 1, 64, max_stepp=0.1)
