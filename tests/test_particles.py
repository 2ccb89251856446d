"""The particle solver against exact results (The model §3.3, §3.4, §3.6), independent methods (the circle
PDE, the heat kernel, scalar ODEs) and the reference experiments' stopping rule."""
import math

import numpy as np
import pytest
from scipy.integrate import simpson, solve_ivp

from solvers import Model, Perceptron, ParticleResult, simulate_particles, solve_pde
from solvers.interaction import InteractionSums
from solvers.empirical import POINTWISE_CHUNK, measure_velocity
from solvers.particles import cluster_radius, initial_particles


# --- The model §3.4: equiangular particles ------------------------------------------------------------
def equiangular_rhs(beta, n, attention):
    def f(t, r):
        r = r[0]
        if attention == "unnormalized":
            return [2.0 / n * math.exp(beta * r) * (1 - r) * ((n - 1) * r + 1)]
        return [2 * math.exp(beta * r) * (1 - r) * ((n - 1) * r + 1) / (math.exp(beta) + (n - 1) * math.exp(beta * r))]
    return f


@pytest.mark.parametrize("n, d, sums", [(2, 2, "fast"), (3, 3, "nufft"), (4, 6, "direct")])
@pytest.mark.parametrize("attention", ["unnormalized", "normalized"])
@pytest.mark.parametrize("beta, T, dt", [(0.5, 4.0, 0.01), pytest.param(2.5, 4.0, 0.0025, marks=pytest.mark.slow)])
def test_equiangular_particles_follow_the_scalar_ode(n, d, sums, attention, beta, T, dt):
    """n orthonormal vectors stay equiangular; rho(t) solves the ODE of The model §3.4 (unshifted gamma = e^beta).
    Two values of beta, neither 1: at beta = 1 a kernel exp(beta <x, y> - 1) would equal exp(beta (<x, y> - 1)).
    The step keeps RK4's error below the tolerance (at beta = 2.5, dt = 0.01 gives 6e-8)."""
    m = Model(d, beta, "ascent", attention=attention, strength=math.exp(beta) if attention == "unnormalized" else 1.0)
    r = simulate_particles(m, x0=np.eye(d)[:n], t_final=T, integrator="rk4", dt=dt, save_every=0.25, sum=sums)
    assert r.stop_reason == "t_final" and r.sum_method == sums
    ode = solve_ivp(equiangular_rhs(beta, n, attention), (0, T), [0.0], t_eval=r.t, method="DOP853",
                    rtol=1e-13, atol=1e-15)
    gram = np.einsum("tid,tjd->tij", r.x, r.x)
    off = gram[:, ~np.eye(n, dtype=bool)]
    assert np.max(np.abs(off - ode.y[0][:, None])) <= 1e-9
    assert off[-1, 0] > 0.5                                  # the run really moved


# --- The model §3.3: energy monotonicity and the dissipation identity ----------------------------------
@pytest.mark.parametrize("d, N, activation", [(2, 300, "gelu"), (3, 300, "gelu"), (4, 150, "relu")])
@pytest.mark.parametrize("flow", ["ascent", "descent"])
def test_energy_monotone_and_dissipation_identity(d, N, activation, flow):
    m = Model(d, 3.0, flow, perceptron=Perceptron.random(d, d, activation, 1.0, seed=5))
    h = 0.01
    r = simulate_particles(m, n=N, t_final=1.0, dt=h, save_every=h, integrator="rk4", seed=1, record_clusters=False)
    E, D = r.energy, r.dissipation
    dE = np.diff(E) * m.sign
    assert np.all(dE > 0), dE.min()                          # strictly up along ascent, down along descent
    assert np.all(D * m.sign > 0)
    # dE/dt = s sum_i w_i |v_i|^2: integrated (Simpson, O(h^4)) and pointwise (central differences, O(h^2)).
    # With ReLU the drift is only Lipschitz: particles crossing a unit's kink make D(t) non-smooth, and
    # both RK4 and Simpson lose orders there
    total = E[-1] - E[0]
    assert abs(total - simpson(D, x=r.t)) <= (1e-9 if activation == "gelu" else 1e-6) * abs(total)
    rate = (E[2:] - E[:-2]) / (2 * h)
    assert np.max(np.abs(rate - D[1:-1])) <= 1e-4 * np.max(np.abs(D))


# --- fast and direct sums give the same trajectories ------------------------------------------------
@pytest.mark.parametrize("d, beta, attention", [(2, 0.0, "unnormalized"), (2, 50.0, "normalized"),
                                                (3, 4.0, "unnormalized"), (3, 1.0, "normalized")])
def test_fast_and_direct_runs_agree(d, beta, attention):
    series = "fast" if d == 2 else "nufft"           # each manifold's series sums (S^2 has no "fast")
    m = Model(d, beta, "ascent", attention=attention, perceptron=Perceptron.random(d, d, "gelu", 1.0, seed=2))
    runs = [simulate_particles(m, n=400, t_final=0.5, dt=0.05, integrator="rk4", seed=4, sum=s,
                               record_clusters=False) for s in (series, "direct")]
    assert [r.sum_method for r in runs] == [series, "direct"]
    assert np.max(np.abs(runs[0].x[-1] - runs[1].x[-1])) <= 1e-11
    assert runs[0].energy[-1] == pytest.approx(runs[1].energy[-1], rel=1e-11)


# --- the circle inside the sphere: S^2 particles on the equator are S^1 particles ----------------------
@pytest.mark.parametrize("attention", ["unnormalized", pytest.param("normalized", marks=pytest.mark.slow)])
@pytest.mark.parametrize("flow", ["ascent", pytest.param("descent", marks=pytest.mark.slow)])
def test_equatorial_particles_on_the_sphere_are_circle_particles(attention, flow):
    """With every a_k in the plane z = 0, the field at a point of the equator is tangent to it, so
    particles on the equator stay there and follow the S^1 system: two code paths (Bessel sums on S^1,
    spherical-harmonic or direct sums on S^2) must give the same trajectories. Measured <= 2e-14."""
    p2 = Perceptron.random(2, 3, "gelu", 1.0, seed=4, bias_scale=0.3)
    p3 = Perceptron(a=np.hstack([p2.a, np.zeros((3, 1))]), c=p2.c, b=p2.b, activation="gelu")
    m2 = Model(2, 4.0, flow, attention=attention, perceptron=p2)
    m3 = Model(3, 4.0, flow, attention=attention, perceptron=p3)
    r2 = simulate_particles(m2, n=300, t_final=2.0, integrator="rk4", dt=0.01, seed=5, record_clusters=False)
    assert np.abs(r2.x[-1] - r2.x[0]).max() > 1.0                    # the particles really moved
    x3 = np.hstack([r2.x[0], np.zeros((300, 1))])
    for sums in ("nufft", "direct"):
        r3 = simulate_particles(m3, x0=x3, weights=r2.w, t_final=2.0, integrator="rk4", dt=0.01, sum=sums,
                                record_clusters=False)
        assert r3.sum_method == sums
        assert np.abs(r3.x[-1][:, 2]).max() <= 1e-14
        assert np.abs(r3.x[-1][:, :2] - r2.x[-1]).max() <= 1e-12
        assert r3.energy[-1] == pytest.approx(r2.energy[-1], rel=1e-12, abs=1e-14)


# --- The model §3.6: quadrature particles are a spectrally accurate Lagrangian PDE solver ----------------
RHO0 = staticmethod(lambda x: np.exp(0.8 * x[:, 0] + 0.3 * x[:, 1] ** 2 - 0.4 * x[:, 1]))


@pytest.mark.parametrize("attention", ["unnormalized", "normalized"])
def test_quadrature_particles_agree_with_the_circle_pde(attention):
    rho0 = lambda x: np.exp(0.8 * x[:, 0] + 0.3 * x[:, 1] ** 2 - 0.4 * x[:, 1])   # noqa: E731
    m = Model(2, 3.0, "ascent", attention=attention, perceptron=Perceptron.random(2, 2, "gelu", 1.0, seed=3))
    pde = solve_pde(m, 1.0, 64, initial=rho0, rtol=1e-13, atol=1e-15)
    assert pde.stop_reason == "t_final"
    c = pde.coefficients(-1)
    n = 256
    r = simulate_particles(m, n=n, init="quadrature", density=rho0, t_final=1.0, integrator="adaptive",
                           rtol=1e-13, atol=1e-15)
    th = np.arctan2(r.x[-1][:, 1], r.x[-1][:, 0])
    k = np.arange(9)
    moments = (r.w[:, None] * np.exp(-1j * np.outer(th, k))).sum(axis=0)
    assert np.max(np.abs(moments - c[:9])) <= 1e-8
    assert np.max(np.abs(moments[1:])) > 0.1                 # far from uniform
    # the PDE's mass between particle 0 and particle i (counter-clockwise) is i / n: the flow keeps the CDF
    K = len(c)
    kk = np.arange(1, K)
    th0 = th[0]
    arc = np.mod(th - th0, 2 * np.pi)
    e1 = np.exp(1j * np.outer(th0 + arc, kk))
    mass = arc / (2 * np.pi) * c[0].real + (2 * (c[1:] * (e1 - np.exp(1j * kk * th0)) / (2j * np.pi * kk)).real).sum(axis=1)
    order = np.argsort(arc)
    assert np.array_equal(order, np.arange(n))               # particles never cross
    assert np.max(np.abs(mass[order] - np.arange(n) / n)) <= 1e-8


# --- initial particles ------------------------------------------------------------------------------
def test_quadrature_init_reproduces_moments_exactly():
    # S^2 Gauss grid: weights density x Gauss weight integrate polynomials exactly
    rho = lambda x: 1.0 + 0.5 * x[:, 2] + 0.25 * x[:, 0] * x[:, 1]       # noqa: E731, mass 1
    x, w, _ = initial_particles(3, 2 * 12 ** 2, "quadrature", rho)
    assert w.min() > 0 and w.sum() == pytest.approx(1.0, abs=1e-15)
    # ∫ z rho dsigma = 0.5/3, ∫ (xy)^2 rho ... compare a few moments with exact sphere integrals
    assert w @ x[:, 2] == pytest.approx(0.5 / 3, abs=1e-15)
    assert w @ (x[:, 0] * x[:, 1]) == pytest.approx(0.25 / 15, abs=1e-15)
    assert w @ x[:, 2] ** 2 == pytest.approx(1 / 3, abs=1e-15)
    # S^1 inverse CDF: F(theta_i) = (i + 1/2)/n for rho = 1 + 0.6 cos(theta): F = theta/2pi + 0.6 sin(theta)/2pi
    rho1 = lambda x: 1.0 + 0.6 * x[:, 0]                                 # noqa: E731
    x, w, _ = initial_particles(2, 100, "quadrature", rho1)
    th = np.mod(np.arctan2(x[:, 1], x[:, 0]), 2 * np.pi)
    F = (th + 0.6 * np.sin(th)) / (2 * np.pi)
    assert np.max(np.abs(F - (np.arange(100) + 0.5) / 100)) <= 1e-14
    assert np.all(w == 0.01)


def test_random_and_quasi_uniform_inits():
    # i.i.d. samples of rho = 1 + cos(theta): E[cos] = 1/2, E[sin] = 0 within sampling error
    x, w, _ = initial_particles(2, 40000, "random", lambda x: 1.0 + x[:, 0], seed=3)
    assert abs(x[:, 0].mean() - 0.5) < 4 * 0.5 / math.sqrt(40000)
    assert abs(x[:, 1].mean()) < 4 * 0.6 / math.sqrt(40000)
    x2, _, _ = initial_particles(2, 40000, "random", lambda x: 1.0 + x[:, 0], seed=3)
    assert np.array_equal(x, x2)                                         # seeded
    # uniform on S^4: second moments 1/d
    x, _, _ = initial_particles(5, 20000, "random", seed=1)
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-15)
    assert np.allclose((x.T @ x) / 20000, np.eye(5) / 5, atol=0.02)
    # Fibonacci lattice: centred and isotropic to O(1/n)
    x, _, _ = initial_particles(3, 2000, "quasi-uniform")
    assert np.max(np.abs(x.mean(axis=0))) < 2e-3
    assert np.allclose(x.T @ x / 2000, np.eye(3) / 3, atol=2e-3)
    x, _, _ = initial_particles(2, 8, "quasi-uniform")
    assert np.allclose(np.arctan2(x[:, 1], x[:, 0]) % (2 * np.pi), 2 * np.pi * np.arange(8) / 8)


# --- noise: Brownian motion on the sphere -----------------------------------------------------------
@pytest.mark.parametrize("d", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_noise_follows_the_heat_kernel(d):
    """Without drift, E<x(t), x(0)> = exp(-nu (d - 1) t) (first eigenvalue of the Laplacian)."""
    nu, T = 0.5, 1.0
    m = Model(d, 0.0, "ascent", attention="none", noise=nu)
    r = simulate_particles(m, n=100000, t_final=T, dt=0.01, integrator="euler", seed=3, record_clusters=False)
    c = np.einsum("nd,nd->n", r.x[0], r.x[-1]).mean()
    assert abs(c - math.exp(-nu * (d - 1) * T)) < 0.008                  # ~4 sigma + O(dt)
    assert np.allclose(np.linalg.norm(r.x[-1], axis=1), 1.0, atol=1e-14)


# --- integrators --------------------------------------------------------------------------------------
def test_integrator_orders():
    m = Model(3, 2.0, "ascent", perceptron=Perceptron.random(3, 3, "tanh", 1.0, seed=8))
    ref = simulate_particles(m, n=60, t_final=1.0, integrator="adaptive", rtol=1e-13, atol=1e-15, seed=2)
    assert ref.nsteps > 10 and ref.steps["accepted"].sum() == ref.nsteps
    err = {}
    for integ in ("euler", "rk4"):
        for h in (0.02, 0.01):
            r = simulate_particles(m, n=60, t_final=1.0, integrator=integ, dt=h, seed=2)
            err[integ, h] = np.max(np.linalg.norm(r.x[-1] - ref.x[-1], axis=1))
    assert 0.9 < math.log2(err["euler", 0.02] / err["euler", 0.01]) < 1.1
    assert 3.7 < math.log2(err["rk4", 0.02] / err["rk4", 0.01]) < 4.3
    loose = simulate_particles(m, n=60, t_final=1.0, integrator="adaptive", rtol=1e-6, atol=1e-9, seed=2)
    assert np.max(np.linalg.norm(loose.x[-1] - ref.x[-1], axis=1)) < 1e-4
    assert loose.nsteps < ref.nsteps


def test_euler_is_the_reference_scheme():
    """One Euler step is x + dt v(x), normalised, with v from Model.velocity_direct."""
    m = Model(4, 5.0, "descent", perceptron=Perceptron.random(4, 4, "relu", 1.0, seed=111))
    r = simulate_particles(m, n=50, t_final=0.1, dt=0.1, integrator="euler", seed=42)
    x0 = r.x[0]
    y = x0 + 0.1 * m.velocity_direct(x0, x0, r.w)
    assert np.allclose(r.x[-1], y / np.linalg.norm(y, axis=1, keepdims=True), rtol=0, atol=1e-15)


# --- the reference experiments' stopping rule ---------------------------------------------------------
@pytest.mark.parametrize("d, beta, flow, n", [(2, 5.0, "ascent", 200), (4, 10.0, "descent", 100)])
def test_reference_stopping_rule(d, beta, flow, n):
    m = Model(d, beta, flow, perceptron=Perceptron.random(d, d, "relu", 1.0, seed=111))
    r = simulate_particles(m, n=n, integrator="euler", dt=0.1, stop=True, seed=42, max_steps=20000)
    assert r.stop_reason == "converged", r.message
    assert np.allclose(np.diff(r.t), 1.0)                    # a snapshot every 10 steps of 0.1
    assert r.max_drift[-1] <= 5e-4 < r.max_drift[0]
    assert len(set(r.cluster_count[-5:])) == 1 and r.cluster_count[-1] >= 1
    centres, masses = r.clusters(-1, scale=0.5)
    assert len(masses) == r.cluster_count[-1]
    assert masses.sum() == pytest.approx(1.0, abs=1e-12) and np.all(np.diff(masses) <= 0)
    assert np.allclose(np.linalg.norm(centres, axis=1), 1.0)
    # the reported clusters are what their definition says: members within the radius of a neighbour
    radius = cluster_radius(beta, d, 0.5)
    x = r.x[-1]
    close = np.arccos(np.clip(x @ x.T, -1, 1)) <= radius
    from scipy.sparse.csgraph import connected_components
    k, _ = connected_components(close, directed=False)
    assert k == len(masses)
    assert "clusters" in r.summary()


def test_clusters_of_a_known_configuration():
    rng = np.random.default_rng(0)
    d = 3
    c = np.eye(3)
    x0 = np.repeat(c, [10, 20, 30], axis=0) + 1e-3 * rng.standard_normal((60, 3))
    w = np.repeat([1.0, 2.0, 3.0], [10, 20, 30])
    m = Model(d, 25.0, "ascent")
    r = simulate_particles(m, x0=x0, weights=w, t_final=1e-6, dt=1e-6)
    centres, masses = r.clusters(0)
    assert np.allclose(masses, np.array([90, 40, 10]) / 140)
    assert np.allclose(np.abs(centres), c[::-1], atol=1e-3)
    assert cluster_radius(0.0, 3) == pytest.approx(math.pi / 6) and cluster_radius(100.0, 3, 1.0) == 0.1


# --- the scripts ------------------------------------------------------------------------------------------
def _script(name, folder="scripts"):
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_naive_reference_is_the_velocity():
    bench = _script("bench_particles")
    for d, beta in ((2, 25.0), (3, 4.0), (3, 0.0)):
        m = Model(d, beta, "ascent", perceptron=Perceptron.random(d, d, "relu", 1.0, seed=111))
        x, _, _ = initial_particles(d, 300, seed=1)
        w = np.full(300, 1 / 300)
        assert np.allclose(bench.naive_velocity(m, x, w), m.velocity_direct(x, x, w), rtol=0, atol=1e-14)


def test_reference_experiment_script_smoke():
    ref = _script("reference_experiments", "scripts/studies")
    rec = ref.run_one(2, "ascent", 5.0, n=100)
    assert rec["stop_reason"] == "converged" and rec["max_drift"] <= 5e-4
    assert sum(rec["masses"]) == pytest.approx(1.0) and rec["clusters"] == len(rec["masses"])


def test_reference_experiment_script_runs_the_dimensions_asked_or_refuses(capsys):
    # The model §5 lists d = 4, 5, 7, 10, 20, 50; a dimension the script cannot run is refused, not skipped
    ref = _script("reference_experiments", "scripts/studies")
    assert {4, 5, 7, 10, 20, 50} <= set(ref.DIMS)
    for argv in (["--dims", "1"], ["--betas", "0"], ["--betas", "inf"], ["--n", "1"], ["--max-steps", "0"]):
        with pytest.raises(SystemExit) as e:
            ref.main(argv)
        assert e.value.code == 2
    assert ref.main(["--dims", "3", "--betas", "5", "--n", "60", "--max-steps", "50"]) == 0
    assert "S^2 descent" in capsys.readouterr().out


# --- restart, stop reasons ----------------------------------------------------------------------------
@pytest.mark.cpu_dependent
@pytest.mark.parametrize("integrator, noise, stop", [("euler", 0.0, True), ("euler", 0.1, None),
                                                     ("adaptive", 0.0, None), ("rk4", 0.1, None)])
def test_restart_reproduces_the_uninterrupted_run(integrator, noise, stop):
    m = Model(2, 5.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111), noise=noise)
    kw = dict(integrator=integrator, dt=0.1, save_every=1.0, seed=9, t_final=None if stop else 6.0, stop=stop,
              max_steps=3000)
    snaps = []
    full = simulate_particles(m, n=150, callback=snaps.append, **kw)
    mid = snaps[3]["restart"]
    assert mid["t"] == pytest.approx(3.0)
    kw.pop("seed")
    rest = simulate_particles(m, restart=mid, seed=9, **kw)
    assert full.stop_reason == ("converged" if stop else "t_final")
    assert rest.stop_reason == full.stop_reason and rest.t_stop == full.t_stop
    assert np.array_equal(rest.x[-1], full.x[-1])
    assert np.array_equal(rest.energy, full.energy[4:])
    assert np.array_equal(rest.step_stiffness, full.step_stiffness[4:], equal_nan=True)
    assert rest.nsteps == full.nsteps
    with pytest.raises(ValueError, match="other settings"):
        simulate_particles(m, restart=mid, **{**kw, "dt": 0.05})


# --- fixed steps beyond their stability bound -------------------------------------------------------------
@pytest.mark.parametrize("integrator, gamma, dt, q", [("euler", 15.0, 0.1, 1.5), ("rk4", 25.0, 0.1, 2.5),
                                                      ("euler", 25.0, 0.05, 1.25)])
def test_step_stiffness_of_a_collapsing_cluster_is_its_linear_contraction_rate(integrator, gamma, dt, q):
    """Pure USA attention of strength gamma, one cluster holding all the mass: near the collapse v_i = gamma
    sum_j w_j e^{beta(<x_i, x_j> - 1)} P_{x_i} x_j ~ gamma (mean - x_i), a contraction at the rate gamma
    (The model §1, to first order in the spread), so the measured h |dv|/|dx| tends to h gamma; below the
    method's bound (Euler 2, RK4 2.785) the run is not flagged."""
    m = Model(2, 1.0, "ascent", strength=gamma)
    r = simulate_particles(m, n=200, t_final=10.0, integrator=integrator, dt=dt, save_every=0.5, seed=4)
    last = r.step_stiffness[np.isfinite(r.step_stiffness)][-1]
    assert last == pytest.approx(q, rel=1e-3)
    assert r.beyond_stability is None and "stability bound" not in r.message
    assert np.isnan(r.step_stiffness[0])            # no step before the first snapshot


@pytest.mark.parametrize("integrator, gamma", [("euler", 25.0), ("rk4", 35.0)])
def test_fixed_steps_beyond_the_stability_bound_are_reported(integrator, gamma, tmp_path):
    """h gamma above the bound (Euler 2.5 > 2, RK4 3.5 > 2.785): the run still ends at t_final, and its
    message, summary, archive and `attnpde info` say the step went beyond the bound, from when. The main
    paper's S1 setup (Euler, dt = 0.1, its perceptron, beta = 25) measures ~0.3 and is not flagged."""
    m = Model(2, 1.0, "ascent", strength=gamma)
    r = simulate_particles(m, n=200, t_final=10.0, integrator=integrator, dt=0.1, save_every=1.0, seed=4)
    assert r.stop_reason == "t_final" and r.beyond_stability is not None
    assert np.nanmax(r.step_stiffness) > r.stability_bound
    assert f"beyond the stability bound of {integrator!r}" in r.message and "lower dt" in r.message
    assert "BEYOND" in r.summary()
    # the archive keeps the series; `attnpde info` reads it back
    from solvers.app.archive import load
    from solvers.app.config import parse_config
    from solvers.app.info import describe
    from solvers.app.runner import run_config
    path = tmp_path / "a.h5"
    run_config(parse_config(f'[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\nstrength = {gamma}\n[particles]\n'
                            f'n = 200\nseed = 4\nintegrator = "{integrator}"\ndt = 0.1\nt_final = 10.0\n'
                            'save_every = 1.0\n'), path, progress=False, log=lambda s: None)
    back = load(path).particles
    assert np.array_equal(back.step_stiffness, r.step_stiffness, equal_nan=True)
    assert back.beyond_stability == r.beyond_stability and "BEYOND it from the step to t = " in describe(path)
    paper = simulate_particles(Model(2, 25.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111)),
                               n=300, t_final=20.0, integrator="euler", dt=0.1, save_every=1.0, seed=42)
    assert 0.1 < np.nanmax(paper.step_stiffness) < 0.5 and paper.beyond_stability is None
    # noise: not measured (its increment dominates the displacement)
    noisy = simulate_particles(Model(2, 1.0, "ascent", strength=gamma, noise=0.01), n=50, t_final=1.0,
                               integrator=integrator, dt=0.1, seed=4)
    assert np.all(np.isnan(noisy.step_stiffness)) and noisy.beyond_stability is None


@pytest.mark.cpu_dependent
def test_a_restart_between_snapshots_keeps_the_step_stiffness():
    """The velocity at the end of a fixed step is evaluated with the step (the next step's first stage), so a
    state kept between snapshots (a checkpoint's, an interruption's) carries the steps measured since the
    last snapshot: its restart records the same series as the uninterrupted run."""
    from solvers.particles import prepare_particles
    m = Model(2, 1.0, "ascent", strength=25.0)
    kw = dict(n=100, t_final=3.0, integrator="euler", dt=0.1, save_every=1.0, seed=2)
    kept = []
    full = prepare_particles(m, **kw).run(checkpoint=kept.append, checkpoint_every=1e-9)
    mid = next(c["restart"] for c in kept if 1.5 < c["restart"]["t"] < 1.7)
    assert mid["last_snapshot_t"] == 1.0
    rest = simulate_particles(m, restart=mid, **{k: v for k, v in kw.items() if k != "n"})
    assert np.array_equal(rest.x[-1], full.x[-1])
    assert np.array_equal(rest.step_stiffness, full.step_stiffness[2:]) and np.isfinite(full.step_stiffness[2])
    # the first step beyond the bound came before the restart: the continued run reports it, alike everywhere
    assert full.beyond_stability < mid["t"] and rest.beyond_stability == full.beyond_stability
    assert f"first at t = {full.beyond_stability:.6g}" in rest.message
    assert f"BEYOND it from the step to t = {full.beyond_stability:.6g}" in rest.summary()


def test_interrupt_non_finite_and_max_steps():
    m = Model(2, 1.0, "ascent")

    def boom(info):
        if info["nsteps"] == 3:
            raise KeyboardInterrupt
    r = simulate_particles(m, n=20, t_final=1.0, dt=0.01, progress=boom)
    assert r.stop_reason == "interrupted" and r.t_stop == pytest.approx(0.03)
    assert isinstance(r, ParticleResult) and len(r.t) == 1
    huge = Model(2, 1.0, "ascent", strength=1e308)
    r = simulate_particles(huge, n=20, t_final=1.0, dt=0.5, seed=1)
    assert r.stop_reason == "non-finite"
    # a fixed-step run that max_steps cannot finish is refused up front (100 steps needed) ...
    with pytest.raises(ValueError, match="100 steps of the fixed-step integrator 'rk4' exceed max_steps = 7"):
        simulate_particles(m, n=20, t_final=1.0, dt=0.01, max_steps=7)
    # ... an adaptive one, whose step count is not known in advance, stops on it
    r = simulate_particles(m, n=20, t_final=1.0, integrator="adaptive", dt=0.01, dt_max=0.01, max_steps=7)
    assert r.stop_reason == "max_steps" and r.nsteps == 7 and r.t[-1] == pytest.approx(0.07)


# --- bad input ----------------------------------------------------------------------------------------
M2 = Model(2, 1.0, "ascent")
M4 = Model(4, 1.0, "ascent")


@pytest.mark.parametrize("kwargs, match", [
    (dict(n=5, x0=np.eye(2), t_final=1.0), "conflicts with x0"),
    (dict(x0=np.ones((3, 3)), t_final=1.0), "shape \\(N, 2\\)"),
    (dict(x0=np.array([[1.0, 0.0], [0.0, 0.0]]), t_final=1.0), "row 1 is zero"),
    (dict(x0=np.array([[1.0, np.nan]]), t_final=1.0), "finite"),
    (dict(x0=np.eye(2), init="quadrature", t_final=1.0), "conflict"),
    (dict(x0=np.eye(2), density=lambda x: x[:, 0] ** 2, t_final=1.0), "conflict"),
    (dict(n=3, weights=[1.0, -1.0, 1.0], t_final=1.0), "weights must be finite and > 0"),
    (dict(n=3, weights=[1.0, 1.0], t_final=1.0), "one value per particle"),
    (dict(n=4, init="quadrature", weights=np.ones(4), t_final=1.0), "sets the weights"),
    (dict(n=3, init="sobol", t_final=1.0), "init must be one of"),
    (dict(n=3, integrator="leapfrog", t_final=1.0), "integrator must be one of"),
    (dict(n=3, dt=0.0, t_final=1.0), "dt must be"),
    (dict(n=3, dt=-1.0, t_final=1.0), "dt must be"),
    (dict(n=3, t_final=float("inf")), "t_final must be"),
    (dict(n=3), "give t_final"),
    (dict(t_final=1.0), "number of particles"),
    (dict(n=3, init="quasi-uniform", density=lambda x: 1 + x[:, 0], t_final=1.0), "uniform particles only"),
    (dict(n=3, t_final=1.0, stop={"window": 0}), "window"),
    (dict(n=3, t_final=1.0, stop={"tol": 1}), "unknown field"),
    (dict(n=3, t_final=1.0, sum="nfft"), "option sum"),
    (dict(n=3, t_final=1.0, density=lambda x: -np.ones(len(x))), "density must be >= 0"),
    (dict(n=3, t_final=1.0, density=lambda x: np.ones(2)), "one value per point"),
])
def test_bad_input_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        simulate_particles(M2, **kwargs)


def test_bad_input_other_dimensions_and_options():
    with pytest.raises(ValueError, match="not d = 4"):
        simulate_particles(M4, n=10, init="quasi-uniform", t_final=1.0)
    with pytest.raises(ValueError, match="not d = 4"):
        simulate_particles(M4, n=10, init="quadrature", t_final=1.0)
    with pytest.raises(ValueError, match="n must be 2 nlat\\^2"):
        simulate_particles(Model(3, 1.0, "ascent"), n=100, init="quadrature", t_final=1.0)
    with pytest.raises(ValueError, match="fast sums exist on S\\^1 and S\\^2 only"):
        simulate_particles(M4, n=10, t_final=1.0, sum="fast")
    with pytest.raises(ValueError, match="adaptive"):
        simulate_particles(Model(2, 1.0, "ascent", noise=0.1), n=10, t_final=1.0, integrator="adaptive")
    with pytest.raises(TypeError, match="unknown option"):
        simulate_particles(M2, n=10, t_final=1.0, rtoll=1e-3)
    with pytest.raises(TypeError, match="Model"):
        simulate_particles("model", n=10, t_final=1.0)
    with pytest.raises(ValueError, match="restart carries"):
        simulate_particles(M2, n=10, t_final=1.0, restart={"x": np.eye(2), "w": np.ones(2) / 2, "t": 0.0})


@pytest.mark.parametrize("d, sums", [(2, "nufft"), (3, "nufft")])
def test_velocity_by_chunks_is_the_velocity_of_its_definition(d, sums):
    """measure_velocity forms the drift and Model.velocity chunk by chunk on the sums' threads: the same
    bits for one and two threads, and Model.velocity(G, Psi, drift) of the whole point set to round-off
    (the pointwise arithmetic is that of the definition)."""
    n = 2 * POINTWISE_CHUNK + 321                                    # three chunks
    rng = np.random.default_rng(41)
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.uniform(0.5, 1.0, n)
    w /= w.sum()
    model = Model(d, 9.0, "descent", perceptron=Perceptron.random(d, 3, "gelu", 1.0, seed=42))
    v1, psi1 = measure_velocity(model, InteractionSums(d, 9.0, sums, nufft_threads=1), x, w)
    v2, psi2 = measure_velocity(model, InteractionSums(d, 9.0, sums, nufft_threads=2), x, w)
    assert np.array_equal(v1, v2) and np.array_equal(psi1, psi2)
    psi, G = InteractionSums(d, 9.0, sums, nufft_threads=1).fields(x, w)
    ref = model.velocity(G, psi[:, None], model.drift(x))
    assert np.array_equal(psi1, psi)
    assert np.max(np.abs(v1 - ref)) <= 1e-14 * np.max(np.abs(ref))


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("kappa", [0.5, 10.0, 1000.0])
def test_von_mises_fisher_samples_follow_the_law(d, kappa):
    """Wood's sampler against the law itself: <x, mu> has density proportional to
    exp(kappa w) (1 - w^2)^((d - 3)/2) on [-1, 1] (Kolmogorov–Smirnov against its CDF, by quadrature), mean
    A_d(kappa) = I_{d/2}(kappa) / I_{d/2 - 1}(kappa), and the part orthogonal to mu averages to 0. Also what
    a new user's first d = 5 config needed: kappa = 1000 drawn at once (rejection: ~7e8 proposals)."""
    from scipy import stats
    from scipy.integrate import quad
    from scipy.special import ive

    from solvers.model import VonMisesFisher

    mu = np.arange(1.0, d + 1.0)
    law = VonMisesFisher(mu, kappa)
    x, w8, desc = initial_particles(d, 20000, density=law, seed=7)
    assert "Wood" in desc and np.allclose(w8, 1 / 20000)
    assert np.abs(np.linalg.norm(x, axis=1) - 1).max() < 1e-14
    w = x @ law.mu
    # log density of w, shifted by kappa so that exp stays finite at kappa = 1000
    dens = lambda s: math.exp(kappa * (s - 1.0)) * (1.0 - s * s) ** ((d - 3) / 2.0)  # noqa: E731
    lo = -1.0 if kappa < 100 else 1.0 - 60.0 / kappa                 # below: mass < e^-60
    pts = [1.0 - 10.0 / kappa] if kappa >= 100 else None
    total = quad(dens, lo, 1.0, points=pts, limit=200)[0]
    cdf = np.vectorize(lambda s: 0.0 if s <= lo else quad(dens, lo, min(s, 1.0), limit=200)[0] / total)
    sub = np.sort(w)[::40]                                          # 500 samples: the CDF by quadrature each
    assert stats.kstest(sub, cdf).pvalue > 1e-3
    mean = ive(d / 2, kappa) / ive(d / 2 - 1, kappa)
    assert abs(w.mean() - mean) <= 5 * w.std() / math.sqrt(len(w))
    ortho = x - np.outer(w, law.mu)
    assert np.abs(ortho.mean(axis=0)).max() <= 5 * math.sqrt((1 - np.mean(w * w)) / d / len(w)) + 1e-12


@pytest.mark.parametrize("d", [2, 3, 5])
def test_von_mises_fisher_samples_at_extreme_concentrations(d):
    """kappa -> infinity: 1 - <x, mu> has mean (d - 1) / (2 kappa) (the Bessel ratio's expansion), kept at
    kappa = 1e8; at kappa = 1e300 every sample is mu to round-off (the acceptance test, written in 1 - w,
    no longer meets log(0) and loops); kappa = 0 is uniform."""
    from solvers.model import VonMisesFisher

    rng = np.random.default_rng(5)
    law = VonMisesFisher(-np.eye(d)[-1], 1e8)                 # mu = -e_d: the reflection of a full vector
    x = law.sample(rng, 20000)
    gap = 1.0 - x @ law.mu
    assert abs(gap.mean() / ((d - 1) / 2e8) - 1.0) <= 5 * gap.std() / gap.mean() / math.sqrt(len(gap)) + 1e-6
    x = VonMisesFisher(np.ones(d), 1e300).sample(rng, 1000)
    assert np.all(np.isfinite(x)) and np.abs(x - np.ones(d) / math.sqrt(d)).max() <= 1e-15
    w = VonMisesFisher(np.ones(d), 0.0).sample(rng, 20000) @ (np.ones(d) / math.sqrt(d))
    assert abs(w.mean()) <= 5 * w.std() / math.sqrt(len(w))


def test_an_unseeded_run_records_the_seed_it_drew():
    """seed=None draws a seed from the system's entropy and records it: the run repeats from its result
    (it recorded None, and the draw was lost); a seed that is no integer >= 0 is refused."""
    m = Model(3, 1.0, "ascent", noise=0.1)
    r = simulate_particles(m, 20, t_final=0.2, seed=None, save_every=0.1)
    assert isinstance(r.seed, int) and r.seed >= 0
    again = simulate_particles(m, 20, t_final=0.2, seed=r.seed, save_every=0.1)
    assert np.array_equal(r.x, again.x)
    for bad in (-1, 1.5, "3"):
        with pytest.raises(ValueError, match="seed must be an integer >= 0 or None"):
            simulate_particles(m, 20, t_final=0.2, seed=bad)
