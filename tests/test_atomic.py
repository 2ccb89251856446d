"""Atomic stationary states (solvers.atomic): the analytic Jacobians against finite differences, exact spectra
of symmetric configurations, the linearisation against the node flow, Newton's polishing, refusals.

Notation of the exact values: USA with gamma = 1, kernel K(x, y) = exp(beta(<x, y> - 1)), s = +1 ascent,
-1 descent. Frames and eigenvectors are compared through frame-free quantities only (eigenvalues, ambient
vectors), and every tolerance allows for round-off on any CPU and thread count.
"""
import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from solvers import AtomicState, Model, Perceptron, atomic_state, polish_atoms
from solvers.atomic import (field_jacobian, neutral_directions, pull_jacobians, reduced_jacobian,
                            symmetry_algebra, tangent_frames)
from solvers.interaction import InteractionSums
from solvers.lagrangian import LagrangianPhase, Nodes
from solvers.perceptron import ACTIVATIONS, activation, activation_derivative


def unit(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def generic_direction(d):
    """A unit vector with no zero coordinate (the frames are then not aligned with the axes)."""
    e = np.arange(1.0, d + 1.0) * np.array([1.0, -1.0] * d)[:d]
    return e / np.linalg.norm(e)


def antipodal(d):
    e = generic_direction(d)
    return np.array([e, -e]), np.array([0.5, 0.5])


def triangle(d, phase=0.3):
    """Three atoms at 120 degrees on the great circle of the first two coordinates."""
    th = phase + 2.0 * np.pi * np.arange(3) / 3.0
    x = np.zeros((3, d))
    x[:, 0], x[:, 1] = np.cos(th), np.sin(th)
    return x, np.full(3, 1.0 / 3.0)


def rel(a, b):
    return abs(a - b) / abs(b)


# ----------------------------------------------------------------------------------------------
# derivatives against central finite differences
# ----------------------------------------------------------------------------------------------
def test_activation_derivative_is_the_derivative_of_activation():
    """sigma' of every activation against a central difference (h = 1e-6: error O(h^2) ~ 1e-12), at points
    away from relu's kink; relu's one-sided value at the kink is H(0) = 0."""
    z = np.linspace(-3.0, 3.0, 61) + 0.0137
    h = 1e-6
    for name in ACTIVATIONS:
        fd = (activation(z + h, name) - activation(z - h, name)) / (2 * h)
        assert np.allclose(activation_derivative(z, name), fd, rtol=0, atol=1e-8), name
    assert activation_derivative(np.array([0.0, 1e-300, -1e-300]), "relu").tolist() == [0.0, 1.0, 0.0]


def _models(d):
    """Every attention, flow and perceptron kind: none; gradient and general form, each activation (with
    biases, so that no unit is symmetric about the origin)."""
    out = []
    kinds = [None] + [(form, act) for form in ("gradient", "general") for act in ACTIVATIONS]
    for attention in ("unnormalized", "normalized", "none"):
        for j, kind in enumerate(kinds):
            if attention == "none" and kind is None:
                continue
            p = None if kind is None else Perceptron.random(d, 3, kind[1], 1.0, seed=10 * d + j,
                                                            general=kind[0] == "general", bias_scale=0.4)
            flow = ("ascent", "descent")[j % 2]
            strength = 1.0 if attention == "normalized" else 1.7
            out.append(pytest.param(Model(d, 2.5, flow, attention, strength=strength, perceptron=p),
                                    id=f"d{d}-{attention}-{flow}-{'none' if kind is None else '-'.join(kind)}"))
    return out


def _points_off_kinks(model, n, seed):
    """n random unit vectors none of whose preactivations is within 1e-3 of 0 (relu's kink lies farther
    than the finite-difference steps: the derivative exists along them)."""
    for s in range(seed, seed + 100):
        x = unit(n, model.d, s)
        p = model.perceptron
        if p is None or np.min(np.abs(x @ p.a.T + p.b)) > 1e-3:
            return x
    raise AssertionError("no points off the kinks")


def _moved(x, j, direction, h):
    y = x.copy()
    y[j] = y[j] + h * direction
    y[j] /= np.linalg.norm(y[j])
    return y


@pytest.mark.parametrize("model", [m for d in (2, 3, 4) for m in _models(d)])
def test_reduced_jacobian_against_finite_differences(model):
    """Part (a): column (j, q) of J is E^T d/dh [v at all atoms] when atom j moves to (x_j + h E_j e_q) / |.|
    (the chart of the docstring; any state, stationary or not). Central differences, h = 1e-5: truncation
    O(h^2 |v'''|) ~ 1e-9, round-off ~ 1e-16 / h ~ 1e-11; agreement to 1e-7 relative to max |J|."""
    x = _points_off_kinks(model, 4, 3)
    m = np.array([0.1, 0.2, 0.3, 0.4])
    J, E = reduced_jacobian(model, x, m)
    k, d, n = E.shape
    h = 1e-5
    fd = np.empty_like(J)
    for j in range(k):
        for q in range(n):
            vp = model.velocity_direct(*(2 * [_moved(x, j, E[j][:, q], h)]), m)
            vm = model.velocity_direct(*(2 * [_moved(x, j, E[j][:, q], -h)]), m)
            fd[:, j * n + q] = np.einsum("idn,id->in", E, (vp - vm) / (2 * h)).reshape(-1)
    assert np.abs(J - fd).max() <= 1e-7 * max(1.0, np.abs(J).max())


@pytest.mark.parametrize("model", [m for d in (2, 3, 4) for m in _models(d)])
def test_field_jacobian_and_pull_against_finite_differences(model):
    """Part (b): the covariant derivative P_y Dv[mu](y) at points y of the sphere (the atoms themselves and
    free points) against P_y (v[mu](y + h xi) - v[mu](y - h xi)) / 2h along tangent xi (the normal part,
    -<xi, v> y, is what P_y removes); and pull_jacobians (self term separated exactly) equals
    E^T field_jacobian E at the atoms to round-off."""
    x = _points_off_kinks(model, 3, 5)
    m = np.array([0.2, 0.3, 0.5])
    free = _points_off_kinks(model, 2, 40)
    at = np.vstack([x, free])
    Jf = field_jacobian(model, x, m, at=at)
    E = tangent_frames(at)
    h = 1e-5
    for a in range(at.shape[0]):
        P = np.eye(model.d) - np.outer(at[a], at[a])
        for q in range(model.d - 1):
            xi = E[a][:, q]
            plus = _moved(at[a:a + 1], 0, xi, h)
            minus = _moved(at[a:a + 1], 0, xi, -h)
            fd = P @ ((model.velocity_direct(plus, x, m) - model.velocity_direct(minus, x, m))[0] / (2 * h))
            assert np.abs(Jf[a] @ xi - fd).max() <= 1e-7 * max(1.0, np.abs(Jf[a]).max())
        assert np.abs(Jf[a] @ at[a]).max() <= 1e-14 and np.abs(at[a] @ Jf[a]).max() <= 1e-13   # tangent map
    Jb, Eb = pull_jacobians(model, x, m)
    assert np.abs(np.einsum("idn,ide,iep->inp", Eb, Jf[:3], Eb) - Jb).max() <= 1e-13 * max(1.0, np.abs(Jb).max())


def test_tangent_frames_are_orthonormal_bases_of_the_tangent_spaces():
    for d in (2, 3, 4, 7):
        x = np.vstack([unit(50, d, d), np.eye(d), -np.eye(d)])
        E = tangent_frames(x)
        assert E.shape == (x.shape[0], d, d - 1)
        assert np.abs(np.einsum("kdn,kdp->knp", E, E) - np.eye(d - 1)).max() <= 1e-15 * 8
        assert np.abs(np.einsum("kdn,kd->kn", E, x)).max() <= 1e-15 * 8


# ----------------------------------------------------------------------------------------------
# exact spectra
# ----------------------------------------------------------------------------------------------
BETAS = (0.5, 2.0, 5.0, 9.0)


@pytest.mark.parametrize("d", (2, 3))
@pytest.mark.parametrize("beta", BETAS)
def test_antipodal_pair_ascent(d, beta):
    """Two antipodal atoms x_1 = e = -x_2 of mass 1/2, USA, ascent.

    Stationary: v_1 = (1/2) K_12 P_e(-e) = 0. Reduced system, K_12 = e^{-2 beta}, in the frames (the tangent
    spaces at e and -e are the same, e-perp): block (1,1) = -<x_1, H'_1> I = -(1/2) e^{-2 beta} <e, -e> I
    = +(1/2) e^{-2 beta} I (the other atom's field gradient; the self term contributes nothing), block (1,2)
    = (1/2) e^{-2 beta} (I + beta (P e)(P e)^T) = (1/2) e^{-2 beta} I. The symmetric mode (xi, xi) has the
    eigenvalue e^{-2 beta} (d - 1 of them), the antisymmetric (xi, -xi) = (A e, A(-e)) is a rotation:
    neutral, d - 1 of them. Pull at x_1: -<x_1, H_1> I with H_1 = (1/2) e - (1/2) e^{-2 beta} e:
    -(1/2)(1 - e^{-2 beta}). Growth e^{-2 beta} > 0 from the atoms: unstable, however small."""
    x, m = antipodal(d)
    st = atomic_state(Model(d, beta, "ascent"), x, m)
    q = math.exp(-2.0 * beta)
    assert isinstance(st, AtomicState)
    assert st.max_speed <= 1e-15
    assert st.verdict == "unstable" and not st.stable
    assert rel(st.growth, q) <= 1e-12
    assert st.n_neutral == d - 1 and st.neutral.shape == (d - 1, 2, d)
    assert st.reduced_eigenvalues.shape == (d - 1,)
    assert np.all(np.abs(st.reduced_eigenvalues - q) <= 1e-12 * q)
    assert st.pull_eigenvalues.shape == (2, d - 1)
    assert np.all(np.abs(st.pull_eigenvalues + 0.5 * (1.0 - q)) <= 1e-12 * 0.5 * (1.0 - q))
    assert st.eigenvalues.dtype == float and st.symmetric and st.asymmetry <= 1e-15
    assert st.marginal.size == 0 and st.neutral_residual <= 1e-15
    lead = st.unstable_direction
    assert lead.part == "atoms" and lead.atom is None and lead.vector.shape == (2, d)
    # the symmetric mode: both atoms displaced by the same tangent vector, of total length 1
    assert np.abs(lead.vector[0] - lead.vector[1]).max() <= 1e-14
    assert abs(np.linalg.norm(lead.vector) - 1.0) <= 1e-14 and abs(lead.vector[0] @ x[0]) <= 1e-15
    # the neutral directions are the rotation images (xi, -xi), orthonormal over both atoms
    N = st.neutral.reshape(d - 1, 2 * d)
    assert np.abs(N @ N.T - np.eye(d - 1)).max() <= 1e-14
    assert np.abs(st.neutral[:, 0] + st.neutral[:, 1]).max() <= 1e-14


@pytest.mark.parametrize("d", (2, 3))
@pytest.mark.parametrize("beta", BETAS)
def test_antipodal_pair_descent(d, beta):
    """The same pair in descent: every Jacobian changes sign (s = -1). Reduced: -e^{-2 beta} (stable modes);
    pull: +(1/2)(1 - e^{-2 beta}): each atom repels the mass near it. Growth (1 - e^{-2 beta}) / 2 from the
    pull, which the two-particle system alone would not show."""
    x, m = antipodal(d)
    st = atomic_state(Model(d, beta, "descent"), x, m)
    q = math.exp(-2.0 * beta)
    assert st.verdict == "unstable"
    assert rel(st.growth, 0.5 * (1.0 - q)) <= 1e-12
    assert np.all(np.abs(st.reduced_eigenvalues + q) <= 1e-12 * q)
    lead = st.unstable_direction
    assert lead.part == "pull" and lead.atom in (0, 1) and lead.vector.shape == (d,)
    assert abs(lead.vector @ x[lead.atom]) <= 1e-15 and abs(np.linalg.norm(lead.vector) - 1.0) <= 1e-14


@pytest.mark.parametrize("d", (2, 3, 4))
@pytest.mark.parametrize("flow", ("ascent", "descent"))
def test_one_atom(d, flow):
    """One atom of mass 1: the reduced system is the atom alone, whose self term vanishes: J = 0, and every
    direction of T_x is a rotation A x (the orbit of one point has dimension d - 1): all neutral, no reduced
    eigenvalue. Pull: -s <x, H> I = -s I (H = x). Ascent: stable, growth -1; descent: growth +1."""
    x = generic_direction(d)[None]
    st = atomic_state(Model(d, 3.0, flow), x, [1.0])
    s = 1.0 if flow == "ascent" else -1.0
    assert st.n_neutral == d - 1 and st.reduced_eigenvalues.size == 0
    assert np.all(np.abs(st.pull_eigenvalues + s) <= 1e-15)
    assert st.growth == pytest.approx(-s, rel=1e-15)
    assert st.verdict == ("stable" if s > 0 else "unstable") and st.stable == (s > 0)
    assert st.unstable_direction.part == "pull" and st.unstable_direction.atom == 0


@pytest.mark.parametrize("d", (2, 3))
@pytest.mark.parametrize("beta", BETAS)
def test_equilateral_triangle(d, beta):
    """Three atoms of mass 1/3 at 120 degrees on a great circle, USA, ascent; cos = -1/2, sin^2 = 3/4.

    In-plane (angles theta_i): v_i = (1/3) sum_j f(theta_j - theta_i), f(phi) = e^{beta(cos phi - 1)} sin phi,
    f'(phi) = e^{beta(cos phi - 1)}(cos phi - beta sin^2 phi), f'(+-2pi/3) = -q' with
    q' = e^{-3 beta / 2}(1/2 + 3 beta / 4). J = (q'/3)(3 I - 1 1^T): the rotation (1, 1, 1) is neutral, the two
    others have eigenvalue q := q'. Out of plane (d = 3, displacements eps_i n): P_{x_i} x_j . n = eps_j -
    <x_i, x_j> eps_i and K is unchanged to first order: J = (kappa / 3) 1 1^T, kappa = e^{-3 beta / 2}:
    eigenvalue kappa for (1, 1, 1) (the atoms lifted together), 0 on its complement (the two in-plane-axis
    rotations: neutral). Pull at an atom: in plane -(1/3) f'(0) - (2/3) f'(2pi/3) = (2q - 1)/3, normal
    -(1/3)(1 - 2 kappa/2) = (kappa - 1)/3. Neutral: 1 on S^1, 3 = dim so(3) on S^2."""
    x, m = triangle(d)
    st = atomic_state(Model(d, beta, "ascent"), x, m)
    q = math.exp(-1.5 * beta) * (0.5 + 0.75 * beta)
    kappa = math.exp(-1.5 * beta)
    expected_reduced = sorted([q, q] + ([kappa] if d == 3 else []), reverse=True)
    expected_pull = sorted([(2 * q - 1) / 3] + ([(kappa - 1) / 3] if d == 3 else []), reverse=True)
    assert st.max_speed <= 1e-15
    assert st.n_neutral == (1 if d == 2 else 3)
    assert np.all(np.abs(st.reduced_eigenvalues - expected_reduced) <= 1e-12 * np.abs(expected_reduced))
    for i in range(3):
        assert np.all(np.abs(st.pull_eigenvalues[i] - expected_pull) <= 1e-12 * np.abs(expected_pull))
    assert rel(st.growth, max(expected_reduced)) <= 1e-12 and st.verdict == "unstable"
    # at a stationary state the neutral directions are null vectors of the whole reduced Jacobian, and its
    # spectrum is the quotient's plus as many zeros
    J, E = reduced_jacobian(Model(d, beta, "ascent"), x, m)
    N = np.einsum("rid,idn->rin", st.neutral, E).reshape(st.n_neutral, -1)
    assert np.abs(J @ N.T).max() <= 1e-15
    full = np.sort(np.linalg.eigvals(J).real)[::-1]
    assert np.allclose(full, sorted(list(expected_reduced) + [0.0] * st.n_neutral, reverse=True),
                       rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("d", (2, 3))
@pytest.mark.parametrize("beta", BETAS)
def test_antipodal_pair_normalized_attention(d, beta):
    """SA, the antipodal pair: Psi_1 = m_1 + m_2 K_12 = (1 + e^{-2 beta}) / 2 (the self term enters only the
    normaliser), G_1 = 0 so the g g^T terms vanish. Reduced: blocks (1/2) e^{-2 beta} I / Psi_1 on and off the
    diagonal: symmetric mode 2 e^{-2 beta} / (1 + e^{-2 beta}) = 1 - tanh(beta). Pull: (-<x, H_1>) / Psi_1 =
    -(1 - e^{-2 beta}) / (1 + e^{-2 beta}) = -tanh(beta). SA is not a gradient flow here: the general
    eigensolver (complex output), real values to round-off."""
    x, m = antipodal(d)
    st = atomic_state(Model(d, beta, "ascent", "normalized"), x, m)
    q = math.exp(-2.0 * beta)
    up = 2.0 * q / (1.0 + q)
    assert not st.symmetric and np.iscomplexobj(st.eigenvalues) and math.isnan(st.asymmetry)
    assert st.n_neutral == d - 1
    assert np.all(np.abs(st.reduced_eigenvalues - up) <= 1e-12 * up)
    assert np.all(np.abs(st.pull_eigenvalues + math.tanh(beta)) <= 1e-12 * math.tanh(beta))
    assert rel(st.growth, up) <= 1e-12 and st.verdict == "unstable"


def test_residual_symmetry_of_a_perceptron():
    """S^2, one tanh unit a = e_3, b = -0.3, c = -1 (gradient form: V = -log cosh(x_3 - 0.3)), USA, ascent,
    one atom on the ring x_3 = 0.3 where tanh(z) = 0: F = 0, so the atom is at rest (its own attention is
    zero). Rotations about e_3 keep the perceptron: the ring direction A x is neutral (symmetry_algebra has
    dimension 1). DF = c tanh'(0) a a^T = -a a^T, and E^T a a^T E has eigenvalues |P_x a|^2 = 1 - 0.09 = 0.91
    (across the ring) and 0 (along it). Reduced: {-0.91, 0 neutral}; pull: -1 (the atom's attention) + {-0.91,
    0} = {-1.91, -1}. Growth -0.91: stable, 1 neutral, 0 marginal."""
    p = Perceptron([[0.0, 0.0, 1.0]], c=[-1.0], b=[-0.3], activation="tanh")
    model = Model(3, 4.0, "ascent", perceptron=p)
    assert symmetry_algebra(model).shape == (1, 3, 3)
    r = math.sqrt(0.91)
    x = np.array([[r * math.cos(0.7), r * math.sin(0.7), 0.3]])
    st = atomic_state(model, x, [1.0])
    assert st.max_speed <= 1e-15
    assert st.n_neutral == 1 and abs(st.neutral[0, 0] @ np.array([0.0, 0.0, 1.0])) <= 1e-15
    assert np.allclose(st.reduced_eigenvalues, [-0.91], rtol=1e-13)
    assert np.allclose(st.pull_eigenvalues[0], [-1.0, -1.91], rtol=1e-13)
    assert np.allclose(st.eigenvalues, [-0.91, -1.0, -1.91], rtol=1e-13)
    assert st.verdict == "stable" and st.marginal.size == 0


def test_a_generic_perceptron_leaves_no_neutral_direction_and_none_attention_can_be_marginal():
    """A random perceptron with d units has no rotation fixing every a_u (symmetry_algebra empty), so nothing
    is left out. With attention 'none' and the same ring unit as above, the field does not depend on the
    measure: along the ring nothing pulls a test mass back (pull eigenvalue 0, beside -0.91): marginal,
    reported in ``marginal`` and not stable."""
    for d in (2, 3, 4):
        p = Perceptron.random(d, d, "gelu", 1.0, seed=d)
        model = Model(d, 2.0, "ascent", perceptron=p)
        assert symmetry_algebra(model).shape == (0, d, d)
        x = unit(3, d, 1)
        assert neutral_directions(model, x, tangent_frames(x)).shape == (3 * (d - 1), 0)
        assert atomic_state(model, x, [0.2, 0.3, 0.5]).n_neutral == 0
    p = Perceptron([[0.0, 0.0, 1.0]], c=[-1.0], b=[-0.3], activation="tanh")
    r = math.sqrt(0.91)
    st = atomic_state(Model(3, 4.0, "ascent", "none", perceptron=p), [[r, 0.0, 0.3]], [1.0])
    assert st.verdict == "marginal" and not st.stable
    assert st.marginal.size == 1 and abs(st.marginal[0]) <= 1e-15
    assert np.allclose(st.pull_eigenvalues[0], [0.0, -0.91], rtol=1e-13, atol=1e-15)


# ----------------------------------------------------------------------------------------------
# the linearisation against the flow
# ----------------------------------------------------------------------------------------------
def _rest(model, n, seed, t_final=300.0, drift_tol=1e-9):
    """n equal nodes from random positions carried by the package's node flow (LagrangianPhase, direct sums)
    until max |v| <= drift_tol, merging nodes within 1e-6: the atoms (positions, masses) it ends with."""
    sums = None if model.attention == "none" else InteractionSums(model.d, model.beta, "direct")
    nodes = Nodes(unit(n, model.d, seed), np.full(n, 1.0 / n), np.ones(n, dtype=np.int64))
    phase = LagrangianPhase(model=model, space=None, nodes=nodes, t=0.0, degree=0, rtol=1e-10, atol=1e-12,
                            merge_tol=1e-6, drift_tol=drift_tol, sums=sums)
    stop, why = phase.run(t_final)
    assert stop == "stationary", why
    return phase.nodes.x.copy(), phase.nodes.w / phase.nodes.w.sum()


def _trajectory(model, x, m, t_end):
    """The k-atom ODE x_i' = v[mu_X](x_i) (Model.velocity_direct; the field extended off the sphere by
    v(x / |x|), whose flow keeps |x|) by DOP853 at rtol 1e-12, atol 1e-14: positions at t_end."""
    k, d = x.shape

    def rhs(t, u):
        X = u.reshape(k, d)
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        return model.velocity_direct(X, X, m).reshape(-1)

    sol = solve_ivp(rhs, (0.0, t_end), x.reshape(-1), method="DOP853", rtol=1e-12, atol=1e-14)
    assert sol.success
    X = sol.y[:, -1].reshape(k, d)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _window(lam):
    """A time over which a perturbation of 1e-7 stays linear and measurable: growth by 1e3 (to 1e-4), or
    decay by e^3; at most 0.9 pi / |Im lambda| (the phase of e^{lambda t} stays on the principal branch)."""
    T = math.log(1e3) / lam.real if lam.real > 0 else 3.0 / abs(lam.real)
    if lam.imag != 0.0:
        T = min(T, 0.9 * math.pi / abs(lam.imag))
    return T


def _measured(delta0, deltaT, z, T):
    """The rate lambda from a perturbation delta(t) = eps Re(e^{lambda t} z): its coordinates (a, b) on
    (Re z, Im z) give e^{lambda t} = (a - i b) / eps (for a real lambda, log |delta(T)| / |delta(0)| / T gives
    the same); also how far delta(T) is from that plane (relative)."""
    basis = np.stack([np.real(z).reshape(-1)] + ([np.imag(z).reshape(-1)] if np.iscomplexobj(z) else []), 1)
    out = []
    for delta in (delta0, deltaT):
        c, *_ = np.linalg.lstsq(basis, delta.reshape(-1), rcond=None)
        off = np.linalg.norm(delta.reshape(-1) - basis @ c) / np.linalg.norm(delta)
        out.append((complex(c[0], -c[1] if c.size > 1 else 0.0), off))
    (w0, _), (wT, off) = out
    if not np.iscomplexobj(z) or np.all(np.imag(z) == 0):
        return math.log(np.linalg.norm(deltaT) / np.linalg.norm(delta0)) / T, off
    return np.log(wT / w0) / T, off


def _check_linearisation(model, x, m):
    """Every eigen-direction of both parts, perturbed by 1e-7 and flowed: the rate measured from the
    perturbation's coordinates matches the eigenvalue to 1e-3 relative (real and imaginary parts), and the
    perturbation stays on its eigen-direction (within 1e-3). Part (a): the atoms moved along the eigenvector,
    against the unperturbed atoms flowed alike. Part (b): a test node of mass 1e-12 (the atoms keep
    1 - 1e-12) at x_i + 1e-7 xi, its offset from atom i."""
    st = atomic_state(model, x, m)
    eps, tiny = 1e-7, 1e-12
    k = len(st.masses)
    measured = []
    for lam, z in zip(st.reduced_eigenvalues, st.reduced_vectors):
        lam = complex(lam)
        T = _window(lam)
        X0 = st.positions + eps * np.real(z)
        X0 /= np.linalg.norm(X0, axis=1, keepdims=True)
        delta0 = X0 - st.positions
        deltaT = _trajectory(model, X0, st.masses, T) - _trajectory(model, st.positions, st.masses, T)
        measured.append(("atoms", lam) + _measured(delta0, deltaT, z, T))
    for i in range(k):
        for lam, xi in zip(st.pull_eigenvalues[i], st.pull_vectors[i]):
            lam = complex(lam)
            T = _window(lam)
            y = st.positions[i] + eps * np.real(xi)
            X0 = np.vstack([st.positions, y / np.linalg.norm(y)])
            mass = np.append(st.masses * (1.0 - tiny), tiny)
            XT = _trajectory(model, X0, mass, T)
            measured.append(("pull", lam) + _measured(X0[k] - X0[i], XT[k] - XT[i], xi, T))
    assert len(measured) == k * (model.d - 1) - st.n_neutral + k * (model.d - 1)
    for part, lam, got, off in measured:
        assert abs(got - lam) <= 1e-3 * abs(lam), (part, lam, got)
        assert off <= 1e-3, (part, lam, off)
    return st


def test_linearisation_matches_the_flow_at_exact_unstable_states():
    """The antipodal pair at beta = 0.5: USA ascent on S^2 (the atoms' mode grows at e^{-1}, the pull decays at
    (1 - e^{-1})/2), USA descent on S^1 (the pull grows), SA ascent on S^2 (growth 1 - tanh(1/2))."""
    for d, flow, attention in ((3, "ascent", "unnormalized"), (2, "descent", "unnormalized"),
                               (3, "ascent", "normalized")):
        x, m = antipodal(d)
        st = _check_linearisation(Model(d, 0.5, flow, attention), x, m)
        assert st.verdict == "unstable"


def test_linearisation_matches_the_flow_at_a_stable_perceptron_state():
    """S^2, beta = 9, USA ascent, a gelu perceptron with 4 units (biases): 16 nodes carried to rest by the
    node flow end on 3 atoms; polished to max |v| <= 1e-10; stable, no neutral direction (the perceptron has
    no symmetry), 6 + 6 eigen-directions each checked against the flow."""
    model = Model(3, 9.0, "ascent", perceptron=Perceptron.random(3, 4, "gelu", 2.0, seed=5, bias_scale=0.5))
    x, m = _rest(model, 16, 15)
    assert len(m) == 3
    x, info = polish_atoms(model, x, m)
    assert info.converged and info.max_speed <= 1e-10 and info.max_displacement <= 1e-6
    st = _check_linearisation(model, x, m)
    assert st.verdict == "stable" and st.n_neutral == 0 and st.symmetric


def test_linearisation_matches_the_flow_with_complex_eigenvalues():
    """S^2, beta = 4, SA ascent, a general-form tanh perceptron: no gradient structure, the spectrum has
    complex pairs (the perturbation turns as it decays); rates and frequencies both checked."""
    p = Perceptron.random(3, 4, "tanh", 1.0, seed=3, bias_scale=0.5, general=True)
    model = Model(3, 4.0, "ascent", "normalized", perceptron=p)
    x, m = _rest(model, 16, 13)
    x, info = polish_atoms(model, x, m)
    assert info.converged
    st = _check_linearisation(model, x, m)
    assert st.verdict == "stable" and not st.symmetric
    assert np.max(np.abs(st.eigenvalues.imag)) > 0.1


# ----------------------------------------------------------------------------------------------
# polishing
# ----------------------------------------------------------------------------------------------
def _perturbed(x, size, seed):
    """Each atom moved by a random tangent vector of length `size`."""
    E = tangent_frames(x)
    u = np.random.default_rng(seed).standard_normal((x.shape[0], x.shape[1] - 1))
    u *= size / np.linalg.norm(u, axis=1, keepdims=True)
    y = x + np.einsum("idn,in->id", E, u)
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def _angles(x):
    """Pairwise geodesic distances, 2 atan2(|x - y|, |x + y|): accurate near 0 and near pi (arccos of the
    cosine loses half the digits at both ends)."""
    diff = np.linalg.norm(x[:, None] - x[None], axis=2)
    total = np.linalg.norm(x[:, None] + x[None], axis=2)
    return 2.0 * np.arctan2(diff, total)


@pytest.mark.parametrize("d", (2, 3))
@pytest.mark.parametrize("flow", ("ascent", "descent"))
def test_polish_recovers_the_pair_and_the_triangle(d, flow):
    """From the exact states with each atom moved by 1e-3: Newton converges to max |v| <= 1e-10, onto the
    same kind of state (two atoms: v_1 = (1/2) K_12 P_{x_1} x_2 = 0 forces antipodes; three equal atoms near
    the triangle: pairwise angles 2 pi / 3), each atom within 3e-3 of where it started (it need not undo
    the rotational part of the perturbation: rotations are left out of the steps)."""
    model = Model(d, 2.0, flow)
    for (x, m), kind in ((antipodal(d), "pair"), (triangle(d), "triangle")):
        start = _perturbed(x, 1e-3, 7)
        y, info = polish_atoms(model, start, m)
        assert info.converged and info.max_speed <= 1e-10, info.message
        assert info.iterations <= 10 and info.max_displacement <= 3e-3
        assert info.speeds[0] == info.initial_max_speed > 1e-7 and info.speeds[-1] == info.max_speed
        assert np.allclose(info.displacement, 2 * np.arcsin(np.linalg.norm(y - start, axis=1) / 2), rtol=1e-12)
        off = np.abs(_angles(y) - (np.pi if kind == "pair" else 2 * np.pi / 3) * (1 - np.eye(len(m)))).max()
        assert off <= 1e-8, (kind, off)


def test_polish_after_the_flow_on_the_sphere_with_a_perceptron():
    """S^2, beta = 4, USA ascent, a tanh perceptron: the node flow stopped early (max |v| <= 1e-4) leaves
    atoms close to rest; Newton certifies them (max |v| <= 1e-10) in a few steps, no atom moving further
    than the early stop's distance to rest (speed / |rate| ~ 1e-4), and the state is stable."""
    model = Model(3, 4.0, "ascent", perceptron=Perceptron.random(3, 4, "tanh", 2.0, seed=1, bias_scale=0.5))
    x, m = _rest(model, 12, 11, drift_tol=1e-4)
    assert len(m) >= 2
    y, info = polish_atoms(model, x, m)
    assert info.converged and info.max_speed <= 1e-10 and info.iterations <= 8
    assert info.initial_max_speed <= 1e-4 and info.max_displacement <= 1e-3
    st = atomic_state(model, y, m)
    assert st.stable and st.max_speed <= 1e-10
    # already stationary: Newton's method still runs (a zero step proves nothing), and moves nothing beyond
    # round-off, the forces balanced to that of their own size
    z, again = polish_atoms(model, y, m)
    assert again.converged and again.iterations == 1 and again.max_displacement <= 1e-14
    assert np.all(again.residuals <= 1e-12 * again.scales)


def test_polish_reports_failure_without_raising():
    """S^1, the general-form perceptron a_1 = e_1, w_1 = e_2, a_2 = e_2, w_2 = -e_1, linear activation:
    u(x) = P_x (x_1 e_2 - x_2 e_1) = A x with A the rotation generator (A x is tangent), |u| = 1 everywhere.
    With USA attention added, sum_i m_i <v_i, A x_i> = sum_i m_i |A x_i|^2 + sum_ij m_i m_j K_ij <x_j, A x_i>
    = 1 + 0 (K symmetric, <x_j, A x_i> antisymmetric): max |v| >= 1 at every configuration, no stationary
    state exists. Newton must stop and say so, with max |v| >= 1; max_iter = 0 reports the start."""
    p = Perceptron([[1.0, 0.0], [0.0, 1.0]], w=[[0.0, 1.0], [-1.0, 0.0]], activation="linear")
    model = Model(2, 1.0, "ascent", perceptron=p)
    x, m = unit(3, 2, 2), np.array([0.5, 0.3, 0.2])
    y, info = polish_atoms(model, x, m, max_iter=30)
    assert not info.converged and info.max_speed >= 1.0 - 1e-12 and info.message
    assert info.iterations <= 30 and len(info.speeds) == info.iterations + 1
    assert np.allclose(np.linalg.norm(y, axis=1), 1.0, rtol=0, atol=1e-15)
    y0, info0 = polish_atoms(model, x, m, max_iter=0)
    assert not info0.converged and info0.iterations == 0 and "not balanced in 0" in info0.message
    assert np.array_equal(y0, x / np.linalg.norm(x, axis=1, keepdims=True))


# ----------------------------------------------------------------------------------------------
# refusals
# ----------------------------------------------------------------------------------------------
MODEL = Model(3, 2.0, "ascent")
GOOD_X = unit(2, 3, 0)


@pytest.mark.parametrize("args, match", [
    ((MODEL, GOOD_X[:, :2], [0.5, 0.5]), r"positions must have shape \(k, 3\)"),
    ((MODEL, GOOD_X[0], [1.0]), r"positions must have shape \(k, 3\)"),
    ((MODEL, np.zeros((0, 3)), []), r"positions must have shape \(k, 3\) with k >= 1"),
    ((MODEL, GOOD_X * (1 + 1e-9), [0.5, 0.5]), "positions must be unit vectors"),
    ((MODEL, np.array([[np.nan, 0, 1.0], [0, 0, 1.0]]), [0.5, 0.5]), "positions must be finite"),
    ((MODEL, GOOD_X, [1.0]), r"masses must have shape \(2,\)"),
    ((MODEL, GOOD_X, [1.5, -0.5]), "masses must be finite and > 0"),
    ((MODEL, GOOD_X, [0.0, 1.0]), "masses must be finite and > 0"),
    ((MODEL, GOOD_X, [0.5, 0.6]), "masses must sum to 1"),
    ((MODEL.replace(noise=0.1), GOOD_X, [0.5, 0.5]), "without noise"),
    (("model", GOOD_X, [0.5, 0.5]), "model must be a Model"),
])
def test_bad_input_is_refused_in_one_line(args, match):
    for fn in (atomic_state, polish_atoms):
        with pytest.raises(ValueError, match=match) as err:
            fn(*args)
        assert "\n" not in str(err.value)


def test_near_unit_positions_and_masses_are_normalised():
    """Within 1e-12 of unit length and of total mass 1: accepted and normalised (SA and 'none' accepted)."""
    x = GOOD_X * (1 + 5e-13)
    for attention in ("unnormalized", "normalized"):
        st = atomic_state(MODEL.replace(attention=attention), x, [0.5, 0.5 - 5e-13])
        assert np.allclose(np.linalg.norm(st.positions, axis=1), 1.0, rtol=0, atol=4.5e-16)
        assert abs(st.masses.sum() - 1.0) <= 2e-16
    p = Perceptron.random(3, 3, "tanh", 1.0, seed=0)
    assert atomic_state(Model(3, 2.0, "descent", "none", perceptron=p), x, [0.5, 0.5]).n_neutral == 0
    with pytest.raises(ValueError, match="tol must be finite and > 0"):
        polish_atoms(MODEL, GOOD_X, [0.5, 0.5], tol=0.0)
