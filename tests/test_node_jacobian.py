"""The grouped W of the node flow (``solvers.node_jacobian.GroupedJacobian``) against the exact reduced Jacobian
(``solvers.atomic.reduced_jacobian``, an independent formula), and its Woodbury factorisation against a dense
solve of the same system."""
import numpy as np
import pytest

from solvers import Model, Perceptron
from solvers.atomic import reduced_jacobian
from solvers.node_jacobian import CELL_WIDTH, GroupedJacobian, cells


def _nodes(d: int, N: int, seed: int):
    rng = np.random.default_rng(seed)
    if d == 2:          # spread out: apart in the 38 arcs of the cells at beta = 9
        th = 2 * np.pi * (np.arange(N) + 0.3 * rng.uniform(size=N)) / N
        x = np.stack([np.cos(th), np.sin(th)], axis=1)
    else:
        x = rng.normal(size=(N, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.uniform(0.5, 1.5, N)
    return x, w / w.sum()


def _dense(W: GroupedJacobian) -> np.ndarray:
    size = W.N * W.n
    return np.stack([W.matvec(e) for e in np.eye(size)], axis=1)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("attention", ["unnormalized", "normalized"])
def test_with_one_node_per_cell_the_grouped_w_is_the_exact_jacobian(d, attention):
    """Each source stands for itself when it is alone in its cell (moved to the cell's centre, which is the
    node): every block of W = B + U V^T is then the exact one."""
    beta = 9.0
    model = Model(d, beta, "descent", attention=attention, perceptron=Perceptron.random(d, d, "relu", 1.0, seed=3))
    x, w = _nodes(d, 12, seed=5)
    assert len(np.unique(cells(x, CELL_WIDTH / np.sqrt(beta)))) == len(x)      # one node per cell
    W = GroupedJacobian(model, x, w)
    J, E = reduced_jacobian(model, x, w)
    assert np.allclose(W.frames, E, rtol=0, atol=1e-15)
    assert np.allclose(_dense(W), J, rtol=1e-12, atol=1e-12 * np.abs(J).max())


@pytest.mark.parametrize("d", [2, 3])
def test_the_woodbury_solve_is_the_dense_solve_of_the_same_w(d):
    """Many nodes per cell (W is then not the Jacobian, but a matrix all the same): solve(b) solves
    (I - g E W E^T) x = b, its tangent part by W and its normal part passed through."""
    model = Model(d, 4.0, "descent", perceptron=Perceptron.random(d, d, "relu", 1.0, seed=3))
    x, w = _nodes(d, 150, seed=7)
    W = GroupedJacobian(model, x, w)
    assert W.k < len(x)
    g = 0.3
    b = np.random.default_rng(1).normal(size=x.shape)
    got = W.solver(g)(b)
    E = W.frames
    beta = np.einsum("nd,ndk->nk", b, E).reshape(-1)
    alpha = np.linalg.solve(np.eye(beta.size) - g * _dense(W), beta).reshape(len(x), d - 1)
    want = b + np.einsum("ndk,nk->nd", E, alpha - beta.reshape(len(x), d - 1))
    assert np.allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())


def test_the_stiffness_estimate_is_the_spectral_radius_not_the_largest_singular_value():
    """A non-normal matrix (eigenvalues -1 and -2, a coupling of 1000: largest singular value ~1000) and a
    rotation scaled by 3 (a complex pair, |lambda| = 3): the estimate is the modulus of the largest eigenvalue."""
    from solvers.node_jacobian import spectral_radius
    J = np.zeros((20, 20))
    J[:10, :10] = np.diag(np.full(10, -2.0))
    J[10:, 10:] = np.diag(np.full(10, -1.0))
    J[:10, 10:] = 1000.0 * np.eye(10)
    assert np.linalg.norm(J, 2) > 900
    assert spectral_radius(J) == pytest.approx(2.0, rel=0.1)
    R = 3.0 * np.array([[np.cos(1.0), -np.sin(1.0)], [np.sin(1.0), np.cos(1.0)]])
    assert spectral_radius(np.kron(np.eye(5), R)) == pytest.approx(3.0, rel=1e-12)
