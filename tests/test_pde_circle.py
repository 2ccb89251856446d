"""The Fourier PDE solver on S^1 against the exact results of The model §3 and independent computations."""
import math

import numpy as np
import pytest
from scipy.special import ive

from solvers import Model, Perceptron, solve_pde
from solvers.pde_circle import CircleDiscretization

SMOOTH = lambda x: np.exp(1.5 * x[:, 0] + 0.5 * x[:, 1] ** 2)


def circle(n):
    th = 2 * np.pi * np.arange(n) / n
    return np.stack([np.cos(th), np.sin(th)], axis=1)


# --- §3.1 mass -------------------------------------------------------------------------------
# The Eulerian solver itself, to t_final: without noise a ReLU run would stop for resolution (or hand off
# to the node continuation, whose weights sum to 1 by construction) at t ~ 0.06, so the noiseless cases
# take a smooth (tanh) perceptron and no continuation; the noisy ones keep the ReLU.
@pytest.mark.parametrize("attention, activation, noise", [
    ("unnormalized", "tanh", 0.0), ("normalized", "tanh", 0.0),
    ("unnormalized", "relu", 0.3), ("normalized", "relu", 0.3)])
def test_mass_is_conserved_to_round_off(attention, activation, noise):
    p = Perceptron.random(2, 2, activation, 1.0, seed=111)
    m = Model(2, 4.0, "ascent", attention=attention, perceptron=p, noise=noise)
    r = solve_pde(m, 1.5, 64, save_every=0.25, max_degree=512, continuation="none")
    assert r.stop_reason == "t_final" and r.lagrangian is None and len(r.t) == 7
    assert np.max(np.abs(r.mass - 1)) <= 1e-12
    assert np.max(np.abs(r.density.mean(axis=1) - 1)) <= 1e-12     # quadrature of the output grid


# --- §3.2 linear growth rates ------------------------------------------------------------------
def exact_rate(beta, k, flow, attention, nu):
    s = 1.0 if flow == "ascent" else -1.0
    if beta == 0:
        g = 0.5 if k == 1 else 0.0          # lambda_k / beta -> 1/d at k = 1, 0 beyond; lambda_0 -> 1
        ratio = g
    else:
        g = ive(k, beta) / beta
        ratio = ive(k, beta) / (beta * ive(0, beta))
    return k * k * (s * (g if attention == "unnormalized" else ratio) - nu)


@pytest.mark.parametrize("beta", [0.0, 0.5, 5.0, 40.0])
@pytest.mark.parametrize("attention", ["unnormalized", "normalized"])
@pytest.mark.parametrize("flow", ["ascent", "descent"])
@pytest.mark.parametrize("nu", [0.0, 0.3])
def test_linear_growth_rates(beta, attention, flow, nu):
    m = Model(2, beta, flow, attention=attention, noise=nu)
    eps, T = 1e-4, 0.5
    for k in range(1, 9):
        c0 = np.zeros(32, complex)
        c0[0] = 1
        c0[k] = eps / 2                      # rho = 1 + eps cos(k theta)
        r = solve_pde(m, T, 32, initial=c0, rtol=1e-13, atol=1e-16)
        rate = math.log(abs(r.coeffs[-1, k]) / abs(r.coeffs[0, k])) / T
        ex = exact_rate(beta, k, flow, attention, nu)
        assert abs(rate - ex) <= 1e-6 * max(abs(ex), 1.0), (k, rate, ex)


def test_noisy_kuramoto_threshold():
    """beta = 0, USA: r_1 = 1/2 - nu. The perturbation grows below nu = 1/2 and decays above."""
    init = lambda x: 1 + 0.05 * x[:, 0]
    grow = solve_pde(Model(2, 0.0, "ascent", noise=0.45), 20.0, 16, initial=init, save_every=5.0)
    decay = solve_pde(Model(2, 0.0, "ascent", noise=0.55), 20.0, 16, initial=init, save_every=5.0)
    a_grow, a_decay = np.abs(grow.coeffs[:, 1]), np.abs(decay.coeffs[:, 1])
    assert np.all(np.diff(a_grow) > 0) and a_grow[-1] > 2 * a_grow[0]      # e^{0.05 * 20} = 2.7
    assert np.all(np.diff(a_decay) < 0) and a_decay[-1] < 0.5 * a_decay[0]  # e^{-0.05 * 20} = 0.37
    # the early rates are the linear ones, up to the cubic saturation at amplitude 0.025
    assert abs(math.log(a_grow[1] / a_grow[0]) / 5.0 - (0.5 - 0.45)) < 2e-3
    assert abs(math.log(a_decay[1] / a_decay[0]) / 5.0 - (0.5 - 0.55)) < 2e-3


def _peaks(f: np.ndarray) -> int:
    """Strict local maxima of a periodic sample."""
    return int(np.sum((f > np.roll(f, 1)) & (f > np.roll(f, -1))))


@pytest.mark.slow
@pytest.mark.parametrize("beta, eps, T", [(4.0, 1e-8, 220.0), (9.0, 1e-12, 380.0)])
def test_fastest_growing_mode_predicts_the_first_clusters(beta, eps, T):
    """§3.2: k* = argmax_k r_k (from scipy's Bessel functions, USA ascent, gamma = 1: k* = 3 at beta = 4,
    4 at beta = 9) is the number of peaks when the perturbation of the uniform state leaves the linear
    regime, and of the atoms of the first metastable state. The data excite modes 1..16 equally (random
    phases); eps is small enough for k* to outgrow its nearest rival: by exp(-(r_k* - r_k) t), a factor
    ~0.07 at beta = 4 (eps 1e-8) and ~0.2 at beta = 9 (eps 1e-12) by the time the peaks are counted.
    Measured: 3 atoms of masses 0.34, 0.33, 0.33; 4 of 0.26, 0.25, 0.25, 0.24."""
    k = np.arange(1, 40)
    kstar = int(k[np.argmax(k * k * ive(k, beta) / beta)])
    phases = np.random.default_rng(7).uniform(0, 2 * np.pi, 16)
    init = lambda x: 1 + eps * sum(np.cos(j * np.arctan2(x[:, 1], x[:, 0]) + phases[j - 1]) for j in range(1, 17))
    r = solve_pde(Model(2, beta, "ascent"), T, 64, initial=init, save_every=2.0, error_estimate=False)
    assert r.stop_reason == "t_final"
    assert _peaks(r.density[0]) > kstar                       # the selection is not in the data
    nonlinear = np.flatnonzero(r.density.max(axis=1) >= 1.5)
    assert nonlinear.size and _peaks(r.density[nonlinear[0]]) == kstar
    atoms = r.atoms()
    assert len(atoms.masses) == kstar
    assert np.all(np.abs(np.asarray(atoms.masses) - 1 / kstar) < 0.2 / kstar) and atoms.diffuse < 0.01


# --- the spectral velocity against direct quadrature of the kernel (two independent methods) ----
@pytest.mark.parametrize("attention", ["unnormalized", "normalized"])
@pytest.mark.parametrize("beta", [0.0, 2.0, 30.0])
def test_grid_velocity_matches_direct_quadrature(attention, beta):
    p = Perceptron.random(2, 3, "tanh", 1.0, seed=1, bias_scale=0.4)
    m = Model(2, beta, "descent", attention=attention, perceptron=p)
    K = 128
    disc = CircleDiscretization(m, K)
    c = CircleDiscretization.space.project(SMOOTH, K)
    c /= c[0]
    rho, v, _ = disc.velocity(c)
    rho, v = rho.copy(), v.copy()
    x = disc.basis.points
    # trapezoidal quadrature on the grid is spectrally accurate for the smooth periodic integrand
    ref = m.velocity_direct(x, x, rho / len(rho))
    ref_theta = np.einsum("nd,nd->n", ref, disc.basis.tangents)
    assert np.allclose(v, ref_theta, rtol=0, atol=1e-11 * max(1.0, np.abs(ref_theta).max()))


@pytest.mark.parametrize("attention", ["unnormalized", "normalized", "none"])
def test_step_diagnostics_are_those_of_the_grid_fields(attention, check_step_diagnostics):
    # the last stage of a step records min/max rho and max |v| while forming the flux in place; they must be
    # those of rho and of the velocity computed on their own (Model.velocity, another buffer), and recording
    # them must not change the right-hand side
    m = Model(2, 3.0, "ascent", attention=attention, perceptron=Perceptron.random(2, 3, "tanh", 1.0, seed=2))
    K = 96
    disc = CircleDiscretization(m, K)
    c = CircleDiscretization.space.project(SMOOTH, K)
    c /= c[0]
    check_step_diagnostics(disc, c, np.abs)


def test_a_run_with_the_divergence_applied_by_the_stepper_is_the_plain_run(monkeypatch):
    # EulerianPhase hands the stepper the flux and the divergence D (N = D n) so that D is applied where a stage is
    # stored; the run with the stepper given N itself (rhs_scaled -> None) is the same run to round-off,
    # through refinements (a new discretisation, hence a new D) with and without noise
    from solvers.eulerian import EulerianPhase
    p = Perceptron.random(2, 3, "tanh", 1.0, seed=4)
    for noise in (0.0, 0.05):
        m = Model(2, 6.0, "ascent", noise=noise, perceptron=p)
        kw = dict(save_every=0.5, max_degree=256, tail_tol=1e-8, continuation="none")
        calls = []
        whole = CircleDiscretization.rhs
        with monkeypatch.context() as mp:
            mp.setattr(CircleDiscretization, "rhs", lambda self, *a: calls.append(1) or whole(self, *a))
            fast = solve_pde(m, 1.5, 32, **kw)
        # the stages took the factored path: N itself only at the start and after each refinement
        assert len(calls) == 1 + len(fast.refinements) < fast.nsteps
        with monkeypatch.context() as mp:
            mp.setattr(EulerianPhase, "rhs_scaled", lambda self: None)
            plain = solve_pde(m, 1.5, 32, **kw)
        assert fast.refinements and len(fast.refinements) == len(plain.refinements)
        assert np.array_equal(fast.steps["dt"], plain.steps["dt"])
        assert np.abs(fast.coeffs[-1] - plain.coeffs[-1]).max() < 1e-13



def test_a_run_with_stages_in_factored_form_is_the_same_run_bit_for_bit(monkeypatch):
    # with noise the circle's rhs_flux takes a stage as its weighted sum times e^{c h L} and forms the
    # product in the transform's input (CircleDiscretization.factored_stages): the same products as the
    # stepper's, so the same run bit for bit, through refinements, with SA (whose Psi diagnostics read the
    # coefficients) and USA
    p = Perceptron.random(2, 3, "tanh", 1.0, seed=4)
    for attention in ("unnormalized", "normalized"):
        m = Model(2, 6.0, "ascent", attention=attention, noise=0.05, perceptron=p)
        kw = dict(save_every=0.5, max_degree=256, tail_tol=1e-8, continuation="none")
        factored = []
        flux = CircleDiscretization.rhs_flux
        with monkeypatch.context() as mp:
            mp.setattr(CircleDiscretization, "rhs_flux",
                       lambda self, t, c, last=False, factor=None: factored.append(factor is not None)
                       or flux(self, t, c, last, factor))
            fast = solve_pde(m, 1.5, 32, **kw)
        assert sum(factored) == 5 * len(fast.steps["t"])      # DP54: five of the six new stages of each attempt
        with monkeypatch.context() as mp:
            mp.setattr(CircleDiscretization, "factored_stages", False)
            plain = solve_pde(m, 1.5, 32, **kw)
        assert fast.refinements and fast.refinements == plain.refinements
        assert np.array_equal(fast.steps["dt"], plain.steps["dt"])
        assert np.array_equal(fast.coeffs[-1], plain.coeffs[-1])
        assert np.array_equal(fast.min_density, plain.min_density)


# --- §3.3 dissipation identity -----------------------------------------------------------------
@pytest.mark.parametrize("activation, K, tol", [("gelu", 128, 1e-8), ("relu", 512, 2e-6)])
@pytest.mark.parametrize("flow", ["ascent", "descent"])
def test_dissipation_identity(activation, K, tol, flow):
    """dE/dt = s ∫ rho |v|^2 (USA, gradient perceptron, nu = 0), dE/dt by 4th-order differences.

    ReLU makes rho non-smooth at the dead-zone boundaries, so the discrete identity holds only to
    the spatial accuracy there (measured 3.5e-7 .. 4.5e-7 at K = 512); GeLU holds to ~1e-10. The
    spectral solver throughout: by default the ReLU runs would hand off to the node continuation at
    t ~ 0.01 (their tail passes tail_tol = 1e-4 at K = 512), and the identity would be checked on it."""
    p = Perceptron.random(2, 3, activation, 1.0, seed=5)
    m = Model(2, 3.0, flow, strength=1.2, perceptron=p)
    r = solve_pde(m, 0.4, K, initial=SMOOTH, save_every=0.01, rtol=1e-12, atol=1e-14, max_degree=K,
                  continuation="none")
    assert r.stop_reason == "t_final" and r.lagrangian is None
    E, D, h = r.energy, r.dissipation, 0.01
    dE = (E[:-4] - 8 * E[1:-3] + 8 * E[3:-1] - E[4:]) / (12 * h)
    assert np.all(np.sign(D) == m.sign)
    assert np.max(np.abs(dE - D[2:-2])) <= tol * np.abs(D).max()


# --- §3.5 noisy stationary state ------------------------------------------------------------------
def fixed_point(m, M=256):
    """rho = exp(s (gamma Psi / beta + V) / nu) / Z by damped Picard iteration, with Psi by direct
    trapezoidal quadrature of the kernel: no spectral multipliers, no time stepping."""
    x = circle(M)
    th = np.arctan2(x[:, 1], x[:, 0])
    V = m.perceptron.potential(x)
    Kmat = np.exp(m.beta * (np.cos(th[:, None] - th[None, :]) - 1)) / M
    rho = np.ones(M)
    for _ in range(10000):
        U = m.strength * (Kmat @ rho) / m.beta + V
        new = np.exp(m.sign * (U - U.max()) / m.noise)
        new /= new.mean()
        if np.abs(new - rho).max() < 1e-15:
            break
        rho = 0.5 * rho + 0.5 * new
    return x, new


@pytest.mark.parametrize("flow", ["ascent", "descent"])
def test_noisy_stationary_state_is_the_fixed_point(flow):
    p = Perceptron.random(2, 3, "gelu", 1.5, seed=2)
    m = Model(2, 3.0, flow, perceptron=p, noise=0.8)
    x, rho_fp = fixed_point(m)
    r = solve_pde(m, 40.0, 64, save_every=10.0, rtol=1e-11, atol=1e-14)
    assert r.stop_reason == "t_final"
    assert np.abs(r.at(x) - rho_fp).max() < 1e-8
    assert np.ptp(rho_fp) > 0.3          # a genuinely non-uniform state


# --- spectral convergence ------------------------------------------------------------------------
def test_spectral_convergence_in_K():
    p = Perceptron.random(2, 3, "gelu", 1.0, seed=5)
    m = Model(2, 3.0, "ascent", perceptron=p)
    x = circle(1000)
    fixed = dict(rtol=1e-13, atol=1e-15, tail_tol=1.0, tail_max=1.0)
    ref = solve_pde(m, 1.0, 160, initial=SMOOTH, **fixed).at(x)
    errs = [np.abs(solve_pde(m, 1.0, K, initial=SMOOTH, max_degree=K, **fixed).at(x) - ref).max()
            for K in (16, 32, 48, 64)]
    # measured 1.2e-2, 3.5e-5, 1.0e-7, 2.9e-10: geometric decay, about e^{-0.37 K}
    assert errs[-1] < 1e-9
    ratios = [errs[i] / errs[i + 1] for i in range(3)]
    assert min(ratios) > 100, errs


# --- concentration from uniform data ---------------------------------------------------------------
@pytest.mark.parametrize("beta", [1.0, 25.0])
def test_relu_ascent_from_uniform_concentrates(beta):
    p = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    m = Model(2, beta, "ascent", perceptron=p)
    # ReLU makes rho jump at the dead-zone boundaries, so the Fourier tail decays only like
    # J / (2 pi sqrt(K)): the run accepts a tail of 1e-2 at K = 2048 (same atom as K = 8192 at 1e-3)
    r = solve_pde(m, 10.0, 128, save_every=0.5, max_degree=2048, tail_max=1e-2, continuation="none")
    assert r.stop_reason in ("t_final", "resolution")
    assert np.all(np.isfinite(r.coeffs)) and np.all(np.isfinite(r.density))
    assert len(r.refinements) >= 2 and r.degree[-1] == 2048 and np.all(np.diff(r.degree) >= 0)
    assert r.density.max(axis=1)[-1] > 100          # concentrated
    assert np.all(r.tail[:-1] <= 1e-2)              # every kept snapshot was within tolerance
    positions, masses = r.atoms()
    assert len(masses) >= 1 and masses[0] > 0.3
    # the atom sits where V is largest within the perceptron's active region
    th = np.linspace(-np.pi, np.pi, 20000, endpoint=False)
    xs = np.stack([np.cos(th), np.sin(th)], 1)
    target = xs[np.argmax(p.potential(xs))]
    assert np.arccos(np.clip(positions[0] @ target, -1, 1)) < 0.05
    # energy increases along ascent
    assert np.all(np.diff(r.energy) > -1e-10)


@pytest.mark.parametrize("beta", [100.0, 200.0])
def test_sa_large_beta_detects_loss_of_accuracy(beta):
    """Two antipodal atoms: Psi between them is ~exp(-beta), beyond double precision of its series."""
    p = Perceptron.random(2, 2, "gelu", 1.0, seed=111)
    m = Model(2, beta, "descent", attention="normalized", perceptron=p)
    r = solve_pde(m, 30.0, 64, save_every=1.0, max_degree=1024, tail_max=1e-2, continuation="none")
    assert r.stop_reason == "resolution" and "SA" in r.message
    assert np.all(np.isfinite(r.density)) and np.all(np.isfinite(r.energy))
    assert len(r.atoms().masses) == 2


# --- run control ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_refinement_is_an_exact_re_representation():
    p = Perceptron.random(2, 2, "gelu", 1.0, seed=111)
    m = Model(2, 9.0, "ascent", perceptron=p)
    # the Eulerian solver throughout (by default the run hands off at t ~ 0.9, past max_degree, and the
    # check compared the node continuation), and steps accurate enough that their error (1e-8 relative at
    # the default rtol) does not fill the tolerance: what is left is the refinement's
    kw = dict(save_every=0.5, max_degree=256, rtol=1e-10, continuation="none")
    a = solve_pde(m, 1.0, 32, tail_tol=1e-9, **kw)
    assert a.stop_reason == "t_final" and a.lagrangian is None
    assert a.refinements and a.refinements[0][1:] == (32, 64)
    b = solve_pde(m, 1.0, 256, tail_tol=1.0, tail_max=1.0, **kw)
    x = circle(512)
    # the run that refined agrees with the run at full resolution from the start
    assert np.abs(a.at(x) - b.at(x)).max() < 1e-8 * np.abs(b.at(x)).max()


@pytest.mark.cpu_dependent
def test_restart_reproduces_the_uninterrupted_run():
    p = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    m = Model(2, 2.0, "ascent", perceptron=p, noise=0.05)
    states = []
    full = solve_pde(m, 1.0, 64, save_every=0.25, max_degree=512,
                     callback=lambda snap: states.append(snap["restart"]))
    mid = states[2]
    assert mid["t"] == 0.5
    rest = solve_pde(m, 1.0, 64, save_every=0.25, max_degree=512, restart=mid)
    assert np.array_equal(rest.t, full.t[3:])
    assert np.abs(rest.coeffs[-1] - full.coeffs[-1]).max() <= 1e-12
    assert rest.nsteps == full.nsteps


def test_keyboard_interrupt_stops_cleanly():
    m = Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "gelu", 1.0, seed=1))
    seen = []

    def cb(snap):
        seen.append(snap["t"])
        if len(seen) == 3:
            raise KeyboardInterrupt

    r = solve_pde(m, 5.0, 32, save_every=0.5, callback=cb)
    assert r.stop_reason == "interrupted"
    assert list(r.t) == seen and r.restart["t"] == seen[-1]


def test_max_steps_and_filter_are_reported():
    m = Model(2, 1.0, "ascent", perceptron=Perceptron.random(2, 2, "gelu", 1.0, seed=1))
    # a budget below the CFL bound of the first step is refused before any step (30 steps at least) ...
    with pytest.raises(ValueError, match="t_final = 5 needs more than max_steps = 7 steps"):
        solve_pde(m, 5.0, 32, max_steps=7)
    # ... one above it runs into it (the run takes 1117 steps)
    r = solve_pde(m, 5.0, 32, max_steps=100, continuation="none")
    assert r.stop_reason == "max_steps" and r.nsteps == 100 and r.t_stop < 5
    f = solve_pde(m, 0.5, 32, filter={"kind": "exponential", "alpha": 36, "order": 16})
    assert f.options["filter"] == {"kind": "exponential", "alpha": 36, "order": 16}
    assert solve_pde(m, 0.5, 32).options["filter"] is None


def test_at_and_density_agree():
    m = Model(2, 2.0, "ascent", perceptron=Perceptron.random(2, 2, "gelu", 1.0, seed=1))
    r = solve_pde(m, 1.0, 64, initial=SMOOTH, save_every=0.5)
    for i in range(len(r.t)):
        assert np.allclose(r.at(r.grid, i), r.density[i], atol=1e-12)
    assert r.grid.shape == (1024, 2) and r.density.shape == (3, 1024)


def test_atoms_of_a_known_density():
    # two narrow von Mises bumps of masses 0.7 and 0.3 on a background of mass 0 (up to 1e-12)
    kap = 400.0
    mu1, mu2 = np.array([1.0, 0.0]), np.array([0.0, -1.0])
    f = lambda x: 0.7 * np.exp(kap * (x @ mu1 - 1)) / ive(0, kap) + 0.3 * np.exp(kap * (x @ mu2 - 1)) / ive(0, kap)
    m = Model(2, 1.0, "ascent")
    r = solve_pde(m, 1e-9, 512, initial=f, tail_tol=1e-12)
    pos, mass = r.atoms(0, threshold=5.0)                    # basins: the whole mass of each bump
    assert len(mass) == 2
    assert np.allclose(mass, [0.7, 0.3], atol=1e-9)
    assert np.allclose(pos, [mu1, mu2], atol=1e-9)
    # level sets at rho >= 5 miss the tails: compare with the exact mass of {rho >= 5} of each bump,
    # up to the grid's resolution of the level-set boundary (2 nodes of density ~5, h = 2 pi / 2048)
    from scipy.integrate import quad
    pos_l, mass_l = r.atoms(0, threshold=5.0, method="level")
    for mk, ml in zip((0.7, 0.3), mass_l):
        thc = math.acos(1 + math.log(5 * ive(0, kap) / mk) / kap)
        exact = quad(lambda t: mk * math.exp(kap * (math.cos(t) - 1)) / ive(0, kap) / (2 * math.pi), -thc, thc)[0]
        assert abs(ml - exact) < 2 * 5 * (2 * math.pi / 2048) / (2 * math.pi)
    # the peaks stand at mk / ive(0, kap): ~35.1 and ~15.0. A threshold between them keeps the higher bump
    # only; one above both finds no atom (an empty (0, 2) set, as a diffuse density gives)
    peaks = np.array([0.7, 0.3]) / ive(0, kap)
    for method in ("basin", "level"):
        pos, mass = r.atoms(0, threshold=peaks.mean(), method=method)
        assert len(mass) == 1 and np.allclose(pos, [mu1], atol=1e-6), method
        pos, mass = r.atoms(0, threshold=1.01 * peaks.max(), method=method)
        assert pos.shape == (0, 2) and mass.shape == (0,), method


@pytest.mark.parametrize("call, match", [
    (lambda m: solve_pde(m, -1.0, 32), r"t_final must be a number > 0 or infinity .*, got -1.0"),
    (lambda m: solve_pde(m, float("nan"), 32), r"t_final must be a number > 0 or infinity .*, got nan"),
    (lambda m: solve_pde(m, float("inf"), 32, continuation="none"), "t_final = inf runs until the terminal"),
    (lambda m: solve_pde(m, 1.0, 1), "degree must be an integer >= 4"),
    (lambda m: solve_pde(m, 1.0, 64, max_degree=32), "degree 64 exceeds max_degree 32"),
    (lambda m: solve_pde(m, 1.0, 32, save_every=0.0), "save_every must be"),
    (lambda m: solve_pde(m, 1.0, 32, initial="gaussian"), "initial must be 'uniform'"),
    (lambda m: solve_pde(m, 1.0, 32, initial=lambda x: x[:, 0]), "initial density must be >= 0"),
    (lambda m: solve_pde(m, 1.0, 32, initial=lambda x: np.full(len(x), np.nan)), "non-finite"),
    (lambda m: solve_pde(m, 1.0, 32, initial=np.array([2.0, 0.1])), "mass 1"),
    (lambda m: solve_pde(m, 1.0, 4, initial=np.ones(8)), "more than the 4"),
    (lambda m: solve_pde(m, 1.0, 32, rtol=-1), "option rtol must be"),
    (lambda m: solve_pde(m, 1.0, 32, method="Euler"), "option method"),
    (lambda m: solve_pde(m, 1.0, 32, tail_tol=1e-2, tail_max=1e-3), "tail_max"),
])
def test_bad_input_is_refused(call, match):
    m = Model(2, 1.0, "ascent")
    with pytest.raises(ValueError, match=match):
        call(m)


def test_unknown_option_and_dimension():
    with pytest.raises(TypeError, match="unknown option"):
        solve_pde(Model(2, 1.0, "ascent"), 1.0, 32, rtool=1e-3)
    # a misspelt argument (not an option) is named with its closest match
    with pytest.raises(TypeError, match="'save_evry': did you mean 'save_every'"):
        solve_pde(Model(2, 1.0, "ascent"), 1.0, 32, save_evry=0.5)
    with pytest.raises(ValueError, match="circle .d = 2. and the sphere .d = 3."):
        solve_pde(Model(4, 1.0, "ascent"), 1.0, 32)


@pytest.mark.cpu_dependent
def test_a_narrow_peak_the_smoothing_lowers_below_the_threshold_is_an_atom():
    """0.6 and 0.4 von Mises bumps (kappa = 400, peaks 30 and 20 > threshold 10) at K = 128: the default
    smoothing (4 pi / K, wider than the bumps) lowers the 20 peak to about 9, below the threshold, but the
    threshold is tested on rho in the peak's core, so both are atoms, with their masses (before, the 0.4
    was no atom: 'outside their basins 0.4000'); the summary says nothing is outside them."""
    kap = 400.0
    mu1, mu2 = np.array([1.0, 0.0]), np.array([math.cos(2.0), math.sin(2.0)])
    f = lambda x: 0.6 * np.exp(kap * (x @ mu1 - 1)) + 0.4 * np.exp(kap * (x @ mu2 - 1))  # noqa: E731
    r = solve_pde(Model(2, 1.0, "ascent"), 1e-9, 128, initial=f, continuation="none")
    assert r.tail[0] < 1e-4
    c = r.coefficients(0)
    smoothed = r.space.evaluate(r.space.heat_smooth(c, r.space.smoothing_scale(128)), mu2[None])[0]
    assert smoothed < 10 < r.space.evaluate(c, mu2[None])[0]
    at = r.atoms()
    assert np.allclose(at.masses, [0.6, 0.4], atol=1e-6) and np.allclose(at.positions, [mu1, mu2], atol=1e-4)
    line = next(line for line in r.summary().splitlines() if "atoms (rho >= 10)" in line)
    assert line.endswith("outside their basins 0.0000"), line
    assert np.allclose(r.atoms(smoothing=None).masses, [0.6, 0.4], atol=1e-6)


@pytest.mark.parametrize("K", [64, 128, 512])
def test_every_resolved_peak_above_the_threshold_is_an_atom(K):
    """Single von Mises peaks of widths 1-3 grid spacings 2 pi / K (resolved: the top coefficient is below
    1e-8 of the first) and heights 12-100 over a uniform background, alone and with a second peak 0.7 as
    high 2 rad away: every peak is an atom carrying at least its bump's mass, at its centre (to 5% of the
    node spacing). The default smoothing lowers the narrowest to 0.45 of their height (below the threshold
    up to heights ~22)."""
    from solvers.pde_circle import CircleSpace
    th0 = 0.4
    for width in (1.0, 1.5, 2.0, 3.0):
        s = width * 2 * math.pi / K
        kap = 1 / s ** 2
        for height in (12.0, 15.0, 20.0, 40.0, 100.0):
            for pair in (False, True):
                bumps = [(th0, height)] + ([(th0 + 2.0, 0.7 * height)] if pair else [])
                m = [h * ive(0, kap) for _, h in bumps]               # mass of a bump of peak h
                bg = 1.0 - sum(m)
                if bg < 0.05:
                    continue
                f = lambda x: bg + sum(mk * np.exp(kap * (x @ np.array([math.cos(t), math.sin(t)]) - 1))
                                       / ive(0, kap) for mk, (t, _) in zip(m, bumps))    # noqa: E731
                c = CircleSpace.project(f, K)
                assert abs(c[-1]) < 1e-8 * abs(c[0])
                at = CircleSpace.atoms(c)
                expect = [(t, mk) for mk, (t, h) in zip(m, bumps) if h + bg >= 10.0]
                case = (K, width, height, pair, at)
                assert len(at) == len(expect), case
                for t, mk in expect:
                    u = np.array([math.cos(t), math.sin(t)])
                    k = int(np.argmax(at.positions @ u))
                    # within 5% of the spacing of the 4 K nodes
                    assert math.acos(min(1.0, float(at.positions[k] @ u))) < 0.05 * 2 * np.pi / (4 * K), case
                    assert at.masses[k] >= mk - 1e-9, case


def test_gibbs_ripples_beside_a_high_jump_are_no_atoms():
    """A one-sided spike (a jump of 500 at 1.3, then e^{-(theta - 1.3)/0.01}) at K = 128: its Gibbs ripples
    on the empty side reach ~20, above the threshold, and are separate local maxima of rho (rho itself,
    smoothing=None, gives three atoms); the structure from the smoothed density keeps them in the spike's
    basin: one atom."""
    from solvers.pde_circle import CircleSpace

    def f(x):
        d = np.mod(np.arctan2(x[:, 1], x[:, 0]) - 1.3, 2 * math.pi)
        return 0.05 + 500.0 * np.where(d < 1.0, np.exp(-d / 0.01), 0.0)
    c = CircleSpace.project(f, 128)
    c = c / c[0]
    assert len(CircleSpace.atoms(c, smoothing=None)) >= 3
    at = CircleSpace.atoms(c)
    assert len(at) == 1 and at.masses[0] > 0.9
