"""The true end: a certified state is one whose forces balance, and a slow state is a stage on the way.

Two atoms in ascent without a perceptron. Atom i moves with the other's attention, x_i' = gamma m_j
e^{beta (<x_i, x_j> - 1)} P_{x_i} x_j, along the great circle through both: each turns toward the other at
gamma m_j e^{beta (cos phi - 1)} sin phi, so their angle obeys

    phi' = -gamma (m_1 + m_2) e^{beta (cos phi - 1)} sin phi,

and they come within the grouping radius r at t(r) = int_r^{phi_0} dphi / (gamma (m_1 + m_2) e^{beta (cos phi - 1)}
sin phi), computed here by quadrature (scipy.integrate.quad). For phi_0 < pi no such pair is stationary: the
one force on each atom is the other's attention, and nothing opposes it. At phi_0 = pi the attention is
exactly normal to the sphere: the pair is balanced, a saddle (tests/test_atomic.py derives its growth e^{-2 beta}).
"""
import math

import numpy as np
import pytest
from scipy.integrate import quad

from solvers import Model, Perceptron, polish_atoms, solve_pde
from solvers.balance import force_scales
from solvers.lagrangian import LagrangianPhase, Nodes
from solvers.pde import space_for
from solvers.terminal import BALANCE_RTOL, CERTIFICATE, certify, group_nodes


def _pair(d: int, phi0: float) -> np.ndarray:
    x = np.zeros((2, d))
    x[0, 0] = 1.0
    x[1, 0], x[1, 1] = math.cos(phi0), math.sin(phi0)
    return x


def _meeting_time(beta: float, gamma: float, phi0: float, r: float) -> float:
    """t(r) of the module docstring, by adaptive quadrature in log-space of the integrand's scale."""
    def f(p):
        return 1.0 / (gamma * math.exp(beta * (math.cos(p) - 1.0)) * math.sin(p))
    return quad(f, r, phi0, limit=500, epsabs=0.0, epsrel=1e-12)[0]


def _run_pair(d, beta, phi0, m1, gamma=1.0, r=1e-3):
    model = Model(d, beta, "ascent", strength=gamma)
    nodes = Nodes(_pair(d, phi0), np.array([m1, 1.0 - m1]), np.array([100, 100]))
    phase = LagrangianPhase(model, space_for(d)[1], nodes, 0.0, 32, 1e-6, 1e-8, 1e-6, 1e-10, certify=True,
                            atom_radius=r)
    stop, message = phase.run(math.inf)
    return model, phase, stop, message


CASES = [(2, 5.0, 2.0, 0.3, 1.0), (3, 10.0, 1.5, 0.7, 2.0)]
SLOW_CASES = [(2, 1.0, 3.0, 0.5, 1.0), (3, 25.0, 2.5, 0.4, 1.0), (2, 50.0, 1.52, 0.5, 1.0),
              (3, 50.0, 1.52, 0.2, 1.0)]


@pytest.mark.parametrize("d, beta, phi0, m1, gamma", CASES + [pytest.param(*c, marks=pytest.mark.slow)
                                                               for c in SLOW_CASES])
def test_two_atoms_in_ascent_are_never_stationary_and_meet_when_their_angle_says(d, beta, phi0, m1, gamma):
    model, phase, stop, message = _run_pair(d, beta, phi0, m1, gamma)
    # never certified: no balanced state lies near the pair (the nearest is the antipodal pair, pi - phi_0 away)
    x, m = _pair(d, phi0), np.array([m1, 1 - m1])
    groups = group_nodes(x, m, np.array([100, 100]), phase.atom_radius)
    cert, why, info = certify(model, groups, phase.atom_radius, 0.0, lambda *a: 0.0, lambda *a: 0.0)
    assert cert is None and "not balanced" in why
    S, dead, underflow = force_scales(model, groups.centres, groups.masses)
    assert np.allclose(info.initial_residuals, S * math.sin(phi0), rtol=1e-12, atol=0)
    # the run meets once, at t(r), and ends in one atom of all the mass, certified
    assert len(phase.merges) == 1 and phase.merges[0][1:] == (2, 1)
    t_meet = phase.merges[0][0]
    expected = _meeting_time(beta, gamma, phi0, phase.atom_radius)
    assert t_meet == pytest.approx(expected, rel=1e-6), (t_meet, expected)
    T = phase.terminal
    assert stop == "stationary" and T is not None and len(T) == 1 and T.verdict == "stable"
    assert T.masses[0] == pytest.approx(1.0, abs=1e-12) and T.t >= t_meet
    assert T.growth == pytest.approx(-gamma, rel=1e-9) and T.neutral == d - 1


def test_a_slow_pair_is_a_slow_stage_until_it_meets():
    """beta = 50, phi_0 = 1.52: the atoms move at ~1e-20 rad per unit time, far below any absolute speed
    threshold: a slow stage from the first attempt to the meeting, whose atom's speed and force are those of
    the formula (speed = gamma m_j e^{beta (cos phi - 1)} sin phi, force gamma m_j e^{beta (cos phi - 1)})."""
    beta, phi0 = 50.0, 1.52
    model, phase, stop, _ = _run_pair(2, beta, phi0, 0.5)
    assert len(phase.stages) == 1
    st = phase.stages[0]
    force = 0.5 * math.exp(beta * (math.cos(phi0) - 1.0))
    assert st.kind == "slow" and st.t_entered == 0.0 and st.t_left == phase.merges[0][0]
    assert st.scale == pytest.approx(force, rel=1e-12) and st.speed == pytest.approx(force * math.sin(phi0), rel=1e-12)
    assert st.t_move == pytest.approx(phase.atom_radius / st.speed, rel=1e-12)
    assert st.speed < 1e-18 and st.atoms == 2


@pytest.mark.parametrize("d", (2, 3))
def test_the_antipodal_pair_is_balanced_and_certified_unstable(d):
    """At phi = pi the one force on each atom, the other's attention e^{-2 beta} x_j, is normal to the sphere:
    Newton's method confirms the balance (|v| <= 1e-9 of that force) and the state is a saddle, growth
    e^{-2 beta} (the two atoms turning together)."""
    from solvers import atomic_state
    beta = 3.0
    model = Model(d, beta, "ascent")
    x = _pair(d, math.pi)
    y, info = polish_atoms(model, x, [0.5, 0.5], tol=CERTIFICATE, rtol=BALANCE_RTOL)
    assert info.converged and info.iterations >= 1
    assert np.allclose(info.scales, 0.5 * math.exp(-2 * beta), rtol=1e-12)
    assert np.all(info.residuals <= BALANCE_RTOL * info.scales)
    st = atomic_state(model, y, [0.5, 0.5])
    assert st.verdict == "unstable" and st.growth == pytest.approx(math.exp(-2 * beta), rel=1e-9)


def test_a_dead_zone_atom_pulled_by_one_far_atom_is_not_balanced():
    """The state the paper protocol's S1 (ascent, ReLU, seed 111) reached at beta = 15 (t ~ 1.2e3): one atom
    of 0.58 at the perceptron's maximum, one of 0.42 in the dead zone 2.92 rad away, moving at 1.7e-14 (below
    the old absolute certificate, 1e-10). Its one force is the other atom's attention: |v| / S = sin(2.92),
    and no Newton step balances it."""
    p = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    model = Model(2, 15.0, "ascent", perceptron=p)
    x = np.array([[0.159512, -0.98719599], [0.0582737, 0.99830064]])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    m = np.array([0.57983398, 0.42016602])
    S, dead, _ = force_scales(model, x, m)
    assert list(dead) == [False, True]
    v = model.velocity_at_atoms(x, m)
    assert np.linalg.norm(v[1]) < 1e-13 and np.linalg.norm(v[1]) / S[1] == pytest.approx(
        math.sin(math.acos(x[0] @ x[1])), rel=1e-6)
    _, info = polish_atoms(model, x, m, tol=CERTIFICATE, rtol=BALANCE_RTOL, max_iter=12, max_displacement=1.5e-4)
    assert not info.converged


def _argmax_potential(p, n=200_000):
    """The maximiser of V on the circle: a dense grid, then golden-section refinement (independent of the
    solvers' Newton)."""
    th = np.linspace(-math.pi, math.pi, n, endpoint=False)
    V = p.potential(np.stack([np.cos(th), np.sin(th)], axis=1))
    i = int(np.argmax(V))
    lo, hi = th[i] - 2 * math.pi / n, th[i] + 2 * math.pi / n
    g = (math.sqrt(5) - 1) / 2
    f = lambda t: float(p.potential(np.array([[math.cos(t), math.sin(t)]]))[0])  # noqa: E731
    for _ in range(80):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if f(a) > f(b):
            hi = b
        else:
            lo = a
    return 0.5 * (lo + hi)


@pytest.mark.slow
@pytest.mark.parametrize("beta", (15.0, 25.0, 35.0, 50.0))
def test_s1_ends_in_one_atom_at_the_perceptrons_maximum(beta):
    """The paper protocol's S1 (circle, ascent, ReLU, 2 units, seed 111) from uniform, t_final = inf: the
    dead-zone mass, pulled across the zone through e^{-beta (1 - cos theta)}, joins the main atom at last;
    the end is one atom of mass 1 at argmax V (the global maximiser of the energy, the main paper's
    Prop. 3.7), certified stable, reached after slow stages whose times the result gives."""
    p = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    model = Model(2, beta, "ascent", perceptron=p)
    r = solve_pde(model, math.inf, 128)
    T = r.terminal
    assert r.stop_reason == "stationary" and T is not None and T.verdict == "stable" and len(T) == 1
    assert T.masses[0] == pytest.approx(1.0, abs=1e-12)
    theta = math.atan2(T.positions[0, 1], T.positions[0, 0])
    # the atom alone feels only the perceptron: it sits at V's maximum (to the balance, 1e-10 / |V''|)
    assert abs(theta - _argmax_potential(p)) < 1e-8
    slow = [s for s in r.stages if s.kind == "slow"]
    assert slow and all(math.isfinite(s.t_left) for s in slow) and slow[-1].t_left <= T.t
    assert T.t > 1e6 and f"certified at t = {T.t:.6g}" in r.summary()
    assert T.mass_errors is not None and T.mass_errors[0] < 1e-3


@pytest.mark.slow
def test_the_sphere_end_does_not_depend_on_the_output_schedule():
    """Sphere, descent, ReLU (3 units, seed 111), beta = 9, t_final = inf, with snapshots every 5 and without:
    steps land on other times, so the runs differ at the step error, yet they end in the same atoms (the
    light one of 5e-4 included) within their error bars, with the same verdict."""
    model = Model(3, 9.0, "descent", perceptron=Perceptron.random(3, 3, "relu", 1.0, seed=111))
    a = solve_pde(model, math.inf, 32, save_every=5.0).terminal
    b = solve_pde(model, math.inf, 32).terminal
    assert a is not None and b is not None and a.verdict == b.verdict == "stable" and len(a) == len(b) == 3
    for i in range(len(a)):
        j = int(np.argmin(np.linalg.norm(b.positions - a.positions[i], axis=1)))
        angle = math.acos(min(1.0, float(a.positions[i] @ b.positions[j])))
        assert angle <= a.position_errors[i] + b.position_errors[j] + 1e-6, (i, angle)
        assert abs(a.masses[i] - b.masses[j]) <= a.mass_errors[i] + b.mass_errors[j], i
    assert min(a.masses) < 1e-3 and np.all(a.displacement <= 4e-3) and np.all(b.displacement <= 4e-3)
