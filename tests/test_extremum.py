"""The global extremum of the energy (solvers.landscape): exact results (uniform minimiser, Diracs of Prop. 3.7,
the closed forms of the main paper §3.3 re-derived), two independent routes for the ReLU maximum, and
independent checks of the descent certificate: the first variation sampled, random measures' energies, the
flow started from the minimiser, and a certified flow end above it."""
import math

import numpy as np
import pytest

from solvers import Model, Perceptron, atomic_state, compare_end, extremum, simulate_particles
from solvers.landscape_bound import certified_minimum
from solvers.landscape_bound import _initial_cells, _radii, _to_points
from spectral.multipliers import zonal_multipliers


def _unit(rng, d):
    v = rng.standard_normal(d)
    return v / np.linalg.norm(v)


def _random_measures(rng, d, count, atoms):
    """Random probability measures: atoms uniform on the sphere, Dirichlet masses."""
    out = []
    for _ in range(count):
        x = rng.standard_normal((atoms, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out.append((x, rng.dirichlet(np.ones(atoms))))
    return out


# --- the certificate's geometry ------------------------------------------------------------------------
@pytest.mark.parametrize("d", [2, 3, 4])
def test_the_cells_cover_the_sphere_and_their_radii_bound_their_points(d):
    """Every point of the sphere lies in some first-level cell (its largest coordinate picks the face), and
    every point of a cell is within the cell's radius of its centre."""
    rng = np.random.default_rng(d)
    n0 = 5
    axis, sign, u, h = _initial_cells(d, n0)
    x = _to_points(axis, sign, u)
    r = _radii(axis, sign, u, x, h)
    for _ in range(200):
        cell = rng.integers(len(u))
        v = u[cell] + h * rng.uniform(-1, 1, d - 1)
        p = _to_points(axis[cell:cell + 1], sign[cell:cell + 1], v[None, :])[0]
        assert 2 * np.arcsin(np.linalg.norm(p - x[cell]) / 2) <= r[cell]
    pts = rng.standard_normal((500, d))
    pts /= np.linalg.norm(pts, axis=1, keepdims=True)
    for p in pts:
        a = int(np.argmax(np.abs(p)))
        q = p / abs(p[a])
        v = np.delete(q, a)
        inside = ((axis == a) & (sign == np.sign(p[a])) & np.all(np.abs(u - v) <= h + 1e-15, axis=1))
        assert inside.any()


@pytest.mark.parametrize("d", [2, 3])
def test_the_certified_minimum_of_a_linear_function_is_minus_one(d):
    """f(x) = <a, x> on the sphere: min -1 exactly (at -a); f'' = -<a, x(s)> >= -1 along great circles."""
    a = _unit(np.random.default_rng(1), d)

    def fg(x):
        f = x @ a
        return f, a[None, :] - f[:, None] * x

    res = certified_minimum(fg, d, 1.0, tol=1e-13, spacing=0.2, error=(1e-15, 1e-15, 0.0))
    assert res.finished
    assert res.lower <= -1.0 <= res.upper + 1e-15
    assert res.upper - res.lower <= 1e-12
    assert np.linalg.norm(res.argmin + a) < 1e-5


# --- the bounds on derivatives along great circles --------------------------------------------------------
@pytest.mark.parametrize("activation", ["relu", "gelu", "tanh"])
def test_sampled_second_and_third_derivatives_of_V_lie_within_the_bounds(activation):
    """Finite differences of V along random unit-speed great circles stay within Perceptron.curvature_bounds
    and third_derivative_bound (relu away from its kinks, where V'' jumps)."""
    rng = np.random.default_rng(7)
    p = Perceptron.random(3, 4, activation, 1.0, seed=3, bias_scale=0.3)
    lo, hi = p.curvature_bounds()
    m3 = p.third_derivative_bound()
    h = 1e-3
    for _ in range(400):
        x = _unit(rng, 3)
        u = rng.standard_normal(3)
        u -= (u @ x) * x
        u /= np.linalg.norm(u)
        s = np.arange(-2, 3) * h
        pts = np.cos(s)[:, None] * x + np.sin(s)[:, None] * u
        v = p.potential(pts)
        second = (v[1] - 2 * v[2] + v[3]) / h ** 2
        third = (v[4] - 2 * v[3] + 2 * v[1] - v[0]) / (2 * h ** 3)
        z = pts @ p.a.T + p.b
        kink = activation == "relu" and np.any(np.sign(z.min(axis=0)) != np.sign(z.max(axis=0)))
        if not kink:
            assert lo - 1e-5 <= second <= hi + 1e-5
            assert abs(third) <= m3 + 1e-2


def test_the_kernel_curvature_is_at_least_minus_one_and_its_third_derivative_bounded():
    """d^2/ds^2 g(<x(s), y>) >= -1 for every beta (the descent certificate's kappa), and |d^3/ds^3| within
    kernel_third_bound: finite differences of Model.energy_kernel along great circles, y at every distance
    (the extremes sit within 1/sqrt(beta) of the circle)."""
    from solvers.landscape import kernel_third_bound
    rng = np.random.default_rng(2)
    h = 1e-3
    for beta in (0.0, 0.01, 1.0, 9.0, 50.0, 400.0):
        model = Model(3, beta, "descent")
        m3 = kernel_third_bound(model)
        worst2, worst3 = np.inf, 0.0
        for _ in range(300):
            x = _unit(rng, 3)
            u = rng.standard_normal(3)
            u -= (u @ x) * x
            u /= np.linalg.norm(u)
            y = x + rng.uniform(0, 3 / math.sqrt(max(beta, 1.0))) * _unit(rng, 3)
            y = y / np.linalg.norm(y) if rng.uniform() < 0.8 else _unit(rng, 3)
            s = np.arange(-2, 3) * h
            g = model.energy_kernel((np.cos(s)[:, None] * x + np.sin(s)[:, None] * u) @ y)
            worst2 = min(worst2, (g[1] - 2 * g[2] + g[3]) / h ** 2)
            worst3 = max(worst3, abs(g[4] - 2 * g[3] + 2 * g[1] - g[0]) / (2 * h ** 3))
        assert worst2 >= -1 - 1e-4
        assert worst3 <= m3 * (1 + 1e-3) + 1e-3


@pytest.mark.parametrize("d,activation", [(2, "relu"), (3, "gelu")])
def test_the_first_variation_is_the_derivative_of_the_energy(d, activation):
    """E(nu) - E(mu) = ∫ Phi_mu d(nu - mu) + (gamma / 2) ∬ g d(nu - mu)^2 exactly (E quadratic), with E from
    Model.energy_direct; grad Phi is s times the velocity and the derivative of Phi along great circles."""
    rng = np.random.default_rng(3)
    model = Model(d, 4.0, "descent", strength=1.3, perceptron=Perceptron.random(d, d, activation, 1.0, seed=2))
    (x, w), (y, u) = _random_measures(rng, d, 2, 5)
    phi, grad = model.first_variation_direct(np.concatenate([x, y]), x, w)
    const = model.strength * float(model.energy_kernel(np.ones(1))[0]) * w.sum()
    X, W = np.concatenate([y, x]), np.concatenate([u, -w])
    quad = 0.5 * model.strength * W @ model.energy_kernel(X @ X.T, relative=True) @ W
    lhs = model.energy_direct(y, u) - model.energy_direct(x, w)
    rhs = u @ (phi[5:] + const) - w @ (phi[:5] + const) + quad
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-14)
    np.testing.assert_allclose(model.sign * grad[:5], model.velocity_direct(x, x, w), atol=1e-15)
    t = rng.standard_normal((5, d))
    t -= np.einsum("id,id->i", t, y)[:, None] * y
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    h = 1e-6
    fd = (model.first_variation_direct(np.cos(h) * y + np.sin(h) * t, x, w)[0]
          - model.first_variation_direct(np.cos(h) * y - np.sin(h) * t, x, w)[0]) / (2 * h)
    np.testing.assert_allclose(fd, np.einsum("id,id->i", grad[5:], t), atol=1e-8)


# --- exact results ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("beta", [0.0, 0.5, 9.0])
def test_descent_without_perceptron_is_the_uniform_measure(d, beta):
    """E* = gamma lambda_0 / (2 beta) (Funk-Hecke), gap 0; the continuous part's quadrature reproduces E*,
    and random measures lie above it."""
    gamma = 1.7
    model = Model(d, beta, "descent", strength=gamma)
    e = extremum(model)
    exact = 0.5 * gamma * (zonal_multipliers(beta, d, 0)[0] / beta if beta > 0 else -1.0)
    assert e.kind == "minimum" and e.method == "uniform" and e.gap == 0.0
    assert e.energy == pytest.approx(exact, rel=1e-14, abs=1e-15)
    c = e.continuous
    assert c is not None and c.mass == 1.0 and np.sum(c.weights) == pytest.approx(1.0, rel=1e-14)
    assert model.energy_direct(c.nodes, c.weights * c.density) == pytest.approx(exact, rel=1e-12, abs=1e-13)
    for x, w in _random_measures(np.random.default_rng(0), d, 20, 6):
        assert model.energy_direct(x, w) >= e.energy - 1e-13


@pytest.mark.parametrize("d", [2, 3, 5])
def test_ascent_without_perceptron_is_any_dirac(d):
    """E* = gamma g(1) / 2 = gamma / (2 beta), and no measure exceeds it."""
    model = Model(d, 3.0, "ascent", strength=2.0)
    e = extremum(model)
    assert e.kind == "maximum" and e.gap == 0.0 and len(e.masses) == 1
    assert e.energy == pytest.approx(2.0 / (2 * 3.0), rel=1e-15)
    for x, w in _random_measures(np.random.default_rng(1), d, 20, 4):
        assert model.energy_direct(x, w) <= e.energy + 1e-15


@pytest.mark.parametrize("d,route", [(2, "grid"), (2, "relu-qp"), (3, "grid"), (3, "relu-qp"), (5, "relu-qp")])
def test_one_relu_unit_in_ascent_is_a_dirac_at_its_direction(d, route):
    a = _unit(np.random.default_rng(d), d)
    beta, gamma, c = 2.0, 1.5, 0.8
    model = Model(d, beta, "ascent", strength=gamma, perceptron=Perceptron([a], c=[c]))
    e = extremum(model, route=route)
    assert e.gap <= 1e-12
    assert e.energy == pytest.approx(gamma / (2 * beta) + c / 2, abs=1e-13)
    assert np.linalg.norm(e.positions[0] - a) < 1e-6


def _collinear_cases(a):
    """(directions, weights, max V, maximiser or None: the maximisers are the x with <a, x> = 0): §3.3 (i)
    with unit directions s_k a, A_+- = sum of c_k over s_k = +-1, max V = max(A_+, A_-, 0) / 2."""
    return [([a, -a], [1.3, 0.5], 0.65, a),
            ([a, -a], [0.3, 1.1], 0.55, -a),
            ([a, a], [0.8, -0.3], 0.25, a),
            ([a, -a], [-0.7, -0.2], 0.0, None)]


@pytest.mark.parametrize("d", [2, 3, 5])
def test_the_collinear_two_unit_maxima_of_section_3_3_i(d):
    a = _unit(np.random.default_rng(10 + d), d)
    beta = 1.0
    for dirs, c, vmax, xstar in _collinear_cases(a):
        model = Model(d, beta, "ascent", perceptron=Perceptron(dirs, c=c))
        e = extremum(model)                                   # ReLU without biases: the §3.3 route
        assert e.method == "relu-qp"
        assert e.gap <= 1e-12
        assert e.bounds[0] - 1e-15 <= 1 / (2 * beta) + vmax <= e.bounds[1] + 1e-15
        x = e.positions[0]
        if xstar is not None:
            assert np.linalg.norm(x - xstar) < 1e-8
        else:
            assert abs(x @ a) < 1e-8
        if d <= 3 and xstar is not None:               # the branch and bound agrees with the closed form
            g = extremum(model, route="grid")
            assert g.gap <= 1e-12 and g.bounds[0] - 1e-15 <= 1 / (2 * beta) + vmax <= g.bounds[1] + 1e-15


@pytest.mark.parametrize("d", [2, 3, 5])
def test_the_diagonal_two_unit_maxima_of_section_3_3_ii(d):
    """a_k = e_k: max V = max(max_k c_k, 0) / 2, at e_k of the largest c_k (> 0), else where x_k <= 0 for every
    c_k < 0."""
    E = np.eye(d)
    for c, vmax, k in (([0.4, 1.2], 0.6, 1), ([0.9, -0.5], 0.45, 0), ([-0.5, -1.0], 0.0, None)):
        model = Model(d, 2.0, "ascent", strength=3.0, perceptron=Perceptron(E[:2], c=c))
        e = extremum(model)
        assert e.gap <= 1e-12
        assert e.bounds[0] - 1e-15 <= 3.0 / 4.0 + vmax <= e.bounds[1] + 1e-15
        x = e.positions[0]
        if k is not None:
            assert np.linalg.norm(x - E[k]) < 1e-8
        else:
            assert x[0] <= 1e-9 and x[1] <= 1e-9


@pytest.mark.parametrize("d", [2, 3])
def test_the_grid_and_the_quadratic_programs_agree_on_random_relu_perceptrons(d):
    for seed in range(3):
        p = Perceptron.random(d, 3, "relu", 1.0, seed=seed)
        model = Model(d, 4.0, "ascent", perceptron=p)
        grid, qp = extremum(model, route="grid"), extremum(model, route="relu-qp")
        assert grid.method == "grid" and qp.method == "relu-qp"
        assert grid.gap <= 1e-12 and qp.gap <= 1e-12
        assert abs(grid.energy - qp.energy) <= grid.gap + qp.gap + 1e-15
        for e in (grid, qp):
            for x, w in _random_measures(np.random.default_rng(seed), d, 10, 3):
                assert model.energy_direct(x, w) <= e.bounds[1] + 1e-15


# --- descent with a perceptron: the certificate checked independently --------------------------------------
DESCENT = [(2, "relu", 5.0), (2, "relu", 9.0), (2, "gelu", 5.0), (2, "gelu", 9.0),
           (3, "relu", 5.0), (3, "relu", 9.0), (3, "gelu", 5.0), (3, "gelu", 9.0)]


@pytest.mark.parametrize("d,activation,beta", DESCENT)
def test_the_descent_minimum_is_certified_and_survives_independent_checks(d, activation, beta):
    model = Model(d, beta, "descent", perceptron=Perceptron.random(d, d, activation, 1.0, seed=111))
    e = extremum(model)
    assert e.kind == "minimum" and e.gap <= 1e-12
    x, w = e.positions, e.masses
    assert np.all(w > 0) and abs(w.sum() - 1) < 1e-14
    # the first variation, sampled: never below the proven minimum, and equal to the level on the support
    rng = np.random.default_rng(0)
    y = rng.standard_normal((20000, d))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    const = model.strength / beta
    phi_y = model.first_variation_direct(y, x, w)[0] + const
    phi_x = model.first_variation_direct(x, x, w)[0] + const
    assert phi_y.min() >= e.lower_phi - 1e-15
    assert np.max(np.abs(phi_x - e.level)) < 1e-12
    # random measures, and perturbations of the minimiser: E(nu) >= E* - gap + (gamma/2) ||nu - mu||_g^2
    for xn, wn in _random_measures(rng, d, 20, 5):
        assert model.energy_direct(xn, wn) >= e.energy - e.gap
    for eps in (1e-2, 1e-4):
        xn = x + eps * rng.standard_normal(x.shape)
        xn /= np.linalg.norm(xn, axis=1, keepdims=True)
        wn = w * np.exp(eps * rng.standard_normal(len(w)))
        wn /= wn.sum()
        X, W = np.concatenate([xn, x]), np.concatenate([wn, -w])
        dist2 = W @ model.energy_kernel(X @ X.T, relative=True) @ W
        assert model.energy_direct(xn, wn) >= e.energy - e.gap + 0.5 * model.strength * dist2 - 1e-15
    # the minimiser is a stationary state of the flow, and not unstable
    assert np.max(np.linalg.norm(model.velocity_direct(x, x, w), axis=1)) < 1e-12
    assert atomic_state(model, x, w).verdict in ("stable", "marginal")


@pytest.mark.parametrize("d,activation", [(2, "relu"), (3, "gelu")])
def test_a_particle_flow_started_at_the_minimiser_stays_there(d, activation):
    model = Model(d, 5.0, "descent", perceptron=Perceptron.random(d, d, activation, 1.0, seed=111))
    e = extremum(model)
    r = simulate_particles(model, x0=e.positions, weights=e.masses, t_final=5.0, integrator="rk4", dt=0.05)
    moved = 2 * np.arcsin(np.linalg.norm(r.x[-1] - e.positions, axis=1) / 2)
    assert moved.max() < 1e-10


def test_the_minimum_on_the_sphere_at_large_beta_is_certified_although_it_is_a_ring():
    """S^2, ReLU descent, beta = 50: the mass gathers around a_3 where V = c_3 <a_3, x>^2 / 2 is locally
    rotation-invariant and a Dirac is unstable (|c_3| < gamma): the minimiser is a ring, which a polygon of
    atoms matches within the certified gap."""
    p = Perceptron.random(3, 3, "relu", 1.0, seed=111)
    model = Model(3, 50.0, "descent", perceptron=p)
    e = extremum(model)
    assert e.gap <= 1e-12 and len(e.masses) >= 3
    a3 = p.a[2]
    angles = np.arccos(np.clip(e.positions @ a3, -1, 1))
    assert np.ptp(angles) < 1e-4 and angles.min() > 1e-3         # all on one circle around a_3


# --- the comparison with a flow's end -----------------------------------------------------------------------
def test_the_extremum_compared_with_itself_is_global_and_a_moved_end_is_not():
    model = Model(2, 5.0, "descent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    e = extremum(model)
    same = compare_end(model, e.positions, e.masses, extremum=e)
    assert same.is_global and same.matched
    assert abs(same.energy_gap) <= 1e-15 and same.kernel_distance < 1e-7
    w = e.masses.copy()
    w[0] += 0.01
    w[1] -= 0.01
    moved = compare_end(model, e.positions, w, extremum=e)
    assert not moved.is_global and moved.energy_gap > 1e-6
    # within error bars that cover the move, the energy gap is within the end's energy error
    covered = compare_end(model, e.positions, w, mass_errors=np.full(len(w), 0.011), extremum=e)
    assert covered.energy_gap <= covered.energy_error and covered.is_global


def test_an_ascent_end_of_two_atoms_is_below_the_maximum_by_the_pair_energy():
    """Two atoms 0.58 / 0.42 (S1's marginal end at large beta) against the Dirac: E* - E(end) > 0."""
    p = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    model = Model(2, 15.0, "ascent", perceptron=p)
    e = extremum(model)
    x = np.array([e.positions[0], [-1.0, 0.0]])
    c = compare_end(model, x, [0.58, 0.42], extremum=e)
    assert c.kind == "maximum" and not c.is_global and c.energy_gap > 0.01


# --- refusals -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,route,what", [
    (dict(attention="normalized"), "auto", "normalised attention"),
    (dict(noise=0.1), "auto", "noise"),
    (dict(perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=1, general=True)), "auto", "general-form"),
    (dict(flow="descent", perceptron=Perceptron.random(2, 2, "linear", 1.0, seed=1)), "auto", "linear"),
    (dict(flow="ascent", perceptron=Perceptron.random(2, 2, "gelu", 1.0, seed=1)), "relu-qp", "ReLU"),
    (dict(flow="ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=1, bias_scale=0.5)), "relu-qp",
     "without biases"),
])
def test_refusals_name_what_is_unsupported(kwargs, route, what):
    params = dict(d=2, beta=1.0, flow="ascent")
    params.update(kwargs)
    with pytest.raises(ValueError, match=what):
        extremum(Model(**params), route=route)


def test_descent_with_a_rotation_invariant_perceptron_on_the_sphere_is_refused():
    model = Model(3, 1.0, "descent", perceptron=Perceptron([[0.0, 0.0, 1.0]], c=[1.0]))
    with pytest.raises(ValueError, match="rotations"):
        extremum(model)


# --- slow: a certified flow end of the same model lies above the minimum ---------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("d,activation,beta,degree", [(2, "relu", 5.0, 128), (2, "gelu", 5.0, 128),
                                                      (3, "relu", 9.0, 32)])
def test_a_certified_flow_end_lies_above_the_minimum(d, activation, beta, degree):
    from solvers import solve_pde
    model = Model(d, beta, "descent", perceptron=Perceptron.random(d, d, activation, 1.0, seed=111))
    r = solve_pde(model, math.inf, degree)
    T = r.terminal
    assert T is not None
    e = extremum(model)
    assert model.energy_direct(T.positions, T.masses) >= e.energy - e.gap
    c = compare_end(model, T.positions, T.masses, T.position_errors, T.mass_errors, extremum=e)
    assert c.energy_gap_bounds[1] >= 0 and c.energy_gap >= -e.gap


@pytest.mark.slow
def test_the_circle_descent_at_beta_50_is_certified():
    model = Model(2, 50.0, "descent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    e = extremum(model)
    assert e.gap <= 1e-12 and len(e.masses) >= 10
    assert np.max(np.linalg.norm(model.velocity_direct(e.positions, e.positions, e.masses), axis=1)) < 1e-12
