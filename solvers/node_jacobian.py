"""The matrices W of the node flow's linearly implicit steps, and their factorisations.

The node flow X -> (v[mu_X](x_i))_i (masses fixed) has the Jacobian of :func:`solvers.atomic.reduced_jacobian`
on the tangent spaces of the nodes: block (i, j) = E_i^T (d v_i / d x_j) E_j, dimension N n, n = d - 1. A
Rosenbrock-W step (ROS34PW2) keeps its order for any W; the stiff modes W leaves out bound its steps as they
bound an explicit method's. Those modes are collective: a node measure's attention is a convolution with a
kernel a few hundred node spacings wide (the dead zone of a ReLU perceptron in descent, where only that
attention acts, crystallises for thousands of time units), so no W built from a few nearest neighbours
holds them. Three W's:

- ``"dense"``: the whole Jacobian, for few nodes (at most ``DENSE_DIMENSIONS`` tangent dimensions);
- ``"grouped"`` (:class:`GroupedJacobian`): each node's own block exact (the perceptron's part and the
  derivative of the attention field at the node, from the measure) plus the attention between nodes with the
  sources aggregated over *cells* of width ``CELL_WIDTH`` / sqrt(beta) (half a kernel width: angular arcs on
  S^1, the cells of a cube sphere on S^2): the source node j of cell H enters as w_j times the block of H's
  centre, so that this part is the product U V^T of rank k n (k the cells holding nodes). Factored by the
  Woodbury identity: N blocks n x n and one dense k n x k n system;
- ``"atoms"``: the atom system's exact Jacobian with its normal part (:func:`atoms_factor`), which RODASP needs.

Every factorisation returns ``solve(b)``: the solution x of (I - g W) x = b for b in ambient coordinates (N, d),
the components along the nodes' normals passed through unchanged (the flow of F(u) = v(u / |u|) keeps |u|),
except for the atom system, whose exact Jacobian of F has a normal part.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import scipy.sparse

from .atomic import _perceptron_term, tangent_frames
from .model import Model

__all__ = ["CELL_WIDTH", "MAX_CELLS", "DENSE_DIMENSIONS", "GroupedJacobian", "cells", "spectral_radius",
           "growth_bound", "tangent_solver", "atoms_factor"]

#: the cells over which the grouped W aggregates its sources are this many kernel widths 1 / sqrt(beta) wide
CELL_WIDTH = 0.5
#: and at most this many (wider cells where more would be needed)
MAX_CELLS = 256
#: node systems of at most this many tangent dimensions take the whole Jacobian as W
DENSE_DIMENSIONS = 96
#: the atom system's W is inverted below this many tangent dimensions (a solver's per-call overhead is larger
#: than the inverse), factored above
INVERT_DIMENSIONS = 64


def cells(x: np.ndarray, width: float) -> np.ndarray:
    """The cell of each unit vector x (N, d), d = 2 or 3, for cells about ``width`` radians wide: on S^1 equal
    arcs of the angle (at most MAX_CELLS), on S^2 the m x m cells of equal angle on each face of the cube (the
    face of the largest coordinate; 6 m^2 <= MAX_CELLS). Integer labels, fixed in space."""
    N, d = x.shape
    if d == 2:
        arcs = int(min(MAX_CELLS, max(1, math.ceil(2.0 * math.pi / width))))
        th = np.arctan2(x[:, 1], x[:, 0])
        return np.minimum(((th + math.pi) * (arcs / (2.0 * math.pi))).astype(np.int64), arcs - 1)
    if d != 3:
        raise ValueError(f"node cells are defined on S^1 and S^2, got d = {d}")
    m = int(min(math.isqrt(MAX_CELLS // 6), max(1, math.ceil(0.5 * math.pi / width))))
    rows = np.arange(N)
    f = np.argmax(np.abs(x), axis=1)
    big = np.abs(x[rows, f])
    face = 2 * f + (x[rows, f] < 0.0)
    other = np.array([[1, 2], [0, 2], [0, 1]])[f]
    a = np.arctan(x[rows, other[:, 0]] / big)
    b = np.arctan(x[rows, other[:, 1]] / big)
    ia = np.minimum(((a * (2.0 / math.pi) + 0.5) * m).astype(np.int64), m - 1)
    ib = np.minimum(((b * (2.0 / math.pi) + 0.5) * m).astype(np.int64), m - 1)
    return (face * m + ia) * m + ib


def _inverse_blocks(M: np.ndarray) -> np.ndarray:
    """Inverses of blocks (N, n, n): closed forms for n = 1 and 2."""
    n = M.shape[1]
    if n == 1:
        return 1.0 / M
    if n == 2:
        a, b, c, d = M[:, 0, 0], M[:, 0, 1], M[:, 1, 0], M[:, 1, 1]
        det = a * d - b * c
        out = np.empty_like(M)
        out[:, 0, 0], out[:, 0, 1], out[:, 1, 0], out[:, 1, 1] = d / det, -b / det, -c / det, a / det
        return out
    return np.linalg.inv(M)


class GroupedJacobian:
    """The grouped W of the node flow at nodes x (N, d) of weights w (module docstring): W = B + U V^T.

    With cells H (centres c_H, the normalised weighted means of their nodes; masses m_H; frames F_H),
    K_iH = K(x_i, c_H), and the sums over the cells standing for the sums over the other nodes in
    :func:`solvers.atomic.reduced_jacobian`'s blocks (its Notes):

        B_i = s [gamma A_i + D_i],   A_i = beta sum_H m_H K_iH (E_i^T c_H)(E_i^T c_H)^T - sum_H m_H K_iH <x_i, c_H> I,
        U_iH = s gamma K_iH [E_i^T F_H + beta (E_i^T c_H)(x_i^T F_H)],   V_jH = w_j F_H^T E_j  (j in H, else 0),

    (USA; SA: U_iH = s K_iH [(E_i^T F_H + beta (E_i^T c_H)(x_i^T F_H)) / Psi_i - beta g_i (x_i^T F_H) / Psi_i^2],
    B_i = s [A_i / Psi_i - beta g_i g_i^T / Psi_i^2 + D_i], Psi_i = sum_H m_H K_iH, g_i = E_i^T sum_H m_H K_iH c_H),
    so that block (i, j) of U V^T, j in H, is w_j U_iH F_H^T E_j: the exact block with x_j moved to c_H.
    ``frames``: the nodes' E (N, d, n)."""

    def __init__(self, model: Model, x: np.ndarray, w: np.ndarray) -> None:
        x = np.asarray(x, dtype=float)
        N, d = x.shape
        n = d - 1
        self.N, self.n, self.sign = N, n, model.sign
        E = self.frames = tangent_frames(x)
        D = _perceptron_term(model, x, E)
        B = np.zeros((N, n, n)) if D is None else D.copy()
        self.U = None
        if model.attention != "none":
            width = CELL_WIDTH / math.sqrt(model.beta) if model.beta > 0 else math.pi
            keep, idx = np.unique(cells(x, min(width, 0.5 * math.pi)), return_inverse=True)
            idx = idx.reshape(-1)
            k = len(keep)
            mass = np.bincount(idx, weights=w, minlength=k)
            c = np.zeros((k, d))
            np.add.at(c, idx, w[:, None] * x)
            c /= np.linalg.norm(c, axis=1, keepdims=True)
            F = tangent_frames(c)
            rows = E.transpose(0, 2, 1).reshape(N * n, d)              # row i n + a: column a of E_i
            cos = x @ c.T                                               # (N, k)
            K = model.kernel(cos)
            Km = K * mass
            Exc = (rows @ c.T).reshape(N, n, k)                         # [i, a, H] = E_i^T c_H
            A = model.beta * np.matmul(Exc * Km[:, None, :], Exc.transpose(0, 2, 1))
            A -= (Km * cos).sum(axis=1)[:, None, None] * np.eye(n)
            # U by the column b of the cells' frames, each (N, n, k) with the cells along the contiguous axis, then
            # interleaved into the layout [(i, a), (H, b)]
            Ks = (model.sign * K)[:, None, :]
            bExc = model.beta * Exc
            if model.attention == "unnormalized":
                Ks = model.strength * Ks
                B += model.strength * A
            else:
                psi = Km.sum(axis=1)
                g = np.einsum("idn,id->in", E, Km @ c)
                bg = (model.beta * g)[:, :, None]
                B += A / psi[:, None, None] - model.beta * np.einsum("in,ip->inp", g, g) / psi[:, None, None] ** 2
            U = np.empty((N, n, k, n))
            for b in range(n):
                Fb = F[:, :, b].T                                       # (d, k): column b of each F_H
                Gb = (rows @ Fb).reshape(N, n, k)                       # E_i^T F_H e_b
                xF = (x @ Fb)[:, None, :]                               # x_i^T F_H e_b
                Gb += bExc * xF
                if model.attention != "unnormalized":
                    Gb /= psi[:, None, None]
                    Gb -= bg * xF / (psi ** 2)[:, None, None]
                Gb *= Ks
                U[:, :, :, b] = Gb
            self.U = U.reshape(N * n, k * n)                            # sign U
            self.V = w[:, None, None] * np.matmul(F[idx].transpose(0, 2, 1), E)     # (N, n, n): w_j F_H^T E_j
            # the sum over the nodes of each cell, as a sparse (k, N) incidence
            self.P = scipy.sparse.csr_matrix((np.ones(N), (idx, np.arange(N))), shape=(k, N))
            self.idx = idx
            self.k = k
        self.B = model.sign * B

    def _VT(self, y: np.ndarray) -> np.ndarray:
        """V^T y for y (N, n, ...): the weighted sum over each cell's nodes, (k n, ...)."""
        t = np.matmul(self.V, y)
        return np.asarray(self.P @ t.reshape(self.N, -1)).reshape((self.k * self.n,) + y.shape[2:])

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """W v for v (N n,)."""
        y = v.reshape(self.N, self.n, 1)
        out = np.matmul(self.B, y).reshape(-1)
        if self.U is not None:
            out += self.U @ self._VT(y)[:, 0]
        return out

    def spectral_radius(self, iterations: int = 16) -> float:
        """An estimate of the spectral radius of W (see :func:`spectral_radius`)."""
        return _radius(self.matvec, self.N * self.n, iterations)

    def solver(self, g: float):
        """``solve(b)`` = x of (I - g E W E^T) x = b (module docstring), by the Woodbury identity:
        (M - g U V^T)^{-1} = M^{-1} + g M^{-1} U S^{-1} V^T M^{-1}, M = I - g B, S = I - g V^T M^{-1} U."""
        N, n, E = self.N, self.n, self.frames
        Minv = _inverse_blocks(np.eye(n) - g * self.B)
        if self.U is not None:
            Y = np.matmul(Minv, self.U.reshape(N, n, -1))                # M^{-1} U, (N, n, k n)
            S = np.eye(self.k * n) - g * self._VT(Y)
            lu = scipy.linalg.lu_factor(S, check_finite=False)

        def solve(b: np.ndarray) -> np.ndarray:
            beta = np.einsum("nd,ndk->nk", b, E)
            alpha = np.matmul(Minv, beta[:, :, None])
            if self.U is not None:
                q = scipy.linalg.lu_solve(lu, self._VT(alpha)[:, 0], check_finite=False)
                alpha += g * np.matmul(Y, q)[:, :, None]
            return b + np.einsum("ndk,nk->nd", E, alpha[:, :, 0] - beta)
        return solve


def _radius(matvec, size: int, iterations: int) -> float:
    if size == 0:
        return 0.0
    v = np.random.default_rng(0).standard_normal(size)       # fixed: the same estimate on every run
    v /= np.linalg.norm(v)
    logs = []
    for _ in range(iterations):
        u = matvec(v)
        norm = float(np.linalg.norm(u))
        if norm == 0.0:
            return 0.0
        logs.append(math.log(norm))
        v = u / norm
    return math.exp(sum(logs[iterations // 2:]) / (iterations - iterations // 2))


def spectral_radius(J: np.ndarray, iterations: int = 16) -> float:
    """An estimate of the spectral radius of J: the mean growth per product of the power method on J over its
    second half of ``iterations`` (Gelfand's |J^k v|^{1/k}, which a complex pair's rotation does not disturb
    as it does the ratio of two successive norms). Not the largest singular value, which bounds it: for a
    non-normal J, such as the node flow's, that bound can lie far above the eigenvalues that decide whether
    explicit steps are stable."""
    return _radius(lambda v: J @ v, J.shape[0], iterations)


def growth_bound(J: np.ndarray, masses: np.ndarray, gradient: bool, allowed: float = 0.0) -> float:
    """The largest real part of the eigenvalues of the atom system's Jacobian J (k n, k n) at atoms of
    ``masses``, or an upper bound of it that is at most ``allowed`` (where that much is all the caller needs).

    A gradient flow's J is M^{-1} times a symmetric matrix (M the masses on each tangent space:
    :mod:`solvers.atomic`, Notes), so its eigenvalues are those of the symmetric S = M^{1/2} J M^{-1/2}: when
    ``allowed`` I - S has a Cholesky factorisation, every eigenvalue is below ``allowed`` (returned as the
    bound); else the largest is computed (``eigvalsh``). Other flows: the general eigenvalues. Gershgorin's
    discs would bound it too, but a lattice of atoms held by their neighbours' repulsion has discs reaching far
    to the right of its stable spectrum."""
    if J.size == 0:
        return 0.0
    if gradient:
        r = np.sqrt(np.repeat(np.asarray(masses, dtype=float), J.shape[0] // len(masses)))
        S = r[:, None] * J / r[None, :]
        S = 0.5 * (S + S.T)
        if allowed > 0.0:
            try:
                np.linalg.cholesky(allowed * np.eye(S.shape[0]) - S)
                return allowed
            except np.linalg.LinAlgError:
                pass
        return float(scipy.linalg.eigvalsh(S, subset_by_index=[S.shape[0] - 1, S.shape[0] - 1],
                                           check_finite=False)[0])
    return float(np.max(np.linalg.eigvals(J).real))


def tangent_solver(J: np.ndarray, E: np.ndarray, g: float):
    """``solve(b)`` = x of (I - g E J E^T) x = b (module docstring) for a dense J (N n, N n)."""
    lu = scipy.linalg.lu_factor(np.eye(J.shape[0]) - g * J, check_finite=False)

    def solve(b: np.ndarray) -> np.ndarray:
        beta = np.einsum("nd,ndk->nk", b, E)
        alpha = scipy.linalg.lu_solve(lu, beta.ravel(), check_finite=False).reshape(beta.shape)
        return b + np.einsum("ndk,nk->nd", E, alpha - beta)
    return solve


def atoms_factor(J: np.ndarray, E: np.ndarray, x: np.ndarray, v: np.ndarray, g: float):
    """``solve(b)`` = x of (I - g DF) x = b for the atom system, DF the exact Jacobian of F(u) = v(u / |u|) at the
    atoms x (unit): its tangent part E J E^T and, since <x, v> = 0 on the sphere, the normal part -x_i <v_i, .>
    of each atom's own block (F ignores the normal direction of its argument). ``v``: the velocity at x."""
    size = J.shape[0]
    if size <= INVERT_DIMENSIONS:
        Minv = np.linalg.inv(np.eye(size) - g * J)

        def inner(r: np.ndarray) -> np.ndarray:
            return Minv @ r
    else:
        lu = scipy.linalg.lu_factor(np.eye(size) - g * J, check_finite=False)

        def inner(r: np.ndarray) -> np.ndarray:
            return scipy.linalg.lu_solve(lu, r, check_finite=False)

    def solve(b: np.ndarray) -> np.ndarray:
        beta = np.einsum("nd,ndk->nk", b, E)
        alpha = np.einsum("ndk,nk->nd", E, inner(beta.ravel()).reshape(beta.shape))
        normal = np.einsum("nd,nd->n", b, x) - g * np.einsum("nd,nd->n", v, alpha)
        return alpha + normal[:, None] * x
    return solve
