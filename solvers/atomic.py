"""Atomic stationary states: the stability of mu = sum_i m_i delta_{x_i}, and Newton's method for them.

Without noise the stationary states of the model (docs/model.md §1) are atomic: a probability
measure mu = sum_{i=1}^k m_i delta_{x_i} on S^{d-1} is stationary when every atom is at rest,
v[mu](x_i) = 0. Whether such a state is stable under the continuity equation d_t rho + div(rho v[rho]) = 0
is decided here by two linearisations, both from the analytic derivatives of ``Model.velocity``:

(a) the reduced system, the k atoms as a particle system with their masses fixed,
    X = (x_1, ..., x_k) -> V(X) = (v[mu_X](x_1), ..., v[mu_X](x_k)),   mu_X = sum_j m_j delta_{x_j},
    linearised on T_{x_1} x ... x T_{x_k} (dimension k (d-1));
(b) the pull of each atom on nearby mass: the derivative of the field v[mu](x) of the whole measure
    (atom i's own attention included) with respect to the evaluation point x, at x = x_i, on T_{x_i}:
    a test mass placed at x_i + xi moves, to first order, by xi' = J_i xi.

:func:`atomic_state` returns both spectra and the verdict (:class:`AtomicState`); :func:`solvers.balance.polish_atoms`
solves v(x_i) = 0 for all atoms by Newton's method on the reduced system.

Units: positions are unit vectors, tangent displacements are in radians, velocities in radians per
unit time, and every eigenvalue is a rate (1 / unit time): a perturbation along its eigenvector grows
like exp(lambda t).

Notes
-----
**Why two parts.** Perturb mu = sum_i m_i delta_{x_i} within the measures. Moving the atoms rigidly
(each keeps its mass) is a perturbation of the finite particle system: part (a) decides it. Splitting
a small mass eps off atom i and placing it at x_i + xi is another: the split-off mass moves in the field
of mu (its own field is O(eps)), xi' = J_i xi, while the atoms feel it only at O(eps). Part (a) cannot
see this, since in the reduced system an atom carries all its mass; part (b) cannot see the collective
modes of part (a). A state is linearly stable only if both are: this is the classification of the
aggregation-equation literature for sums of Dirac masses with smooth interaction and external
potentials (Fellner & Raoul, and Raoul's workshop abstract below: steady states are then generically
sums of Dirac masses, and local stability has necessary and sufficient conditions of this two-part
kind; Geigant & Stoll, on the circle, separate the two kinds as "peak stability" with respect to the
relative positions of the peaks and with respect to non-localised perturbations).

**The fields.** With c_ij = m_j K(x_i, x_j), K(x, y) = exp(beta(<x, y> - 1)), and for the sums over
j != i (primes) H'_i = sum_{j != i} c_ij x_j, S'_i = sum_{j != i} c_ij x_j x_j^T, Psi'_i = sum_{j != i} c_ij,
G_i = P_i H'_i (P_i = P_{x_i}; the self term m_i P_x x vanishes on the sphere), the perceptron's
unprojected output F(x) = sum_u sigma(<a_u, x> + b_u) W_u (W_u = c_u a_u in the gradient form, w_u in the
general form) and DF(x) = sum_u sigma'(<a_u, x> + b_u) W_u a_u^T (relu: sigma' = H(z), 1 for z > 0 and 0
otherwise, the one-sided value at the kink), the velocity is v = s (gamma G + P F) (USA), s (G / Psi + P F)
(SA), s P F ('none').

**Tangent frames.** At x, E_x (d x (d-1)) holds columns 2..d of the Householder reflection
I - 2 u u^T / |u|^2, u = x + sign(x_1) e_1 (sign(0) = +1): an orthonormal basis of T_x, smooth in x away
from x_1 = 0 and free of cancellation. Every block below is E_i^T (derivative) E_j; eigenvalues do not
depend on the frames, and eigenvectors are returned in ambient coordinates (tangent vectors in R^d).
Every derivative is that of an extension of v off the sphere taken along tangent directions, which
only sees v on the sphere: it is the covariant derivative P_x Dv|_T (the linearisation of the flow at a
stationary point, where the normal part <x, Dv xi> = -<xi, v> vanishes) and, in the reduced system, the
derivative of the chart map u -> E_i^T v_i(X(u)), X(u)_i = (x_i + E_i u_i) / |.|, that Newton's method
needs anywhere.

**(b) Pull.** For a fixed measure, d/dx [P_x H(x)] = P (beta S) - x H^T - <x, H> I with H = sum_j c_j x_j,
S = sum_j c_j x_j x_j^T, and d Psi / dx = beta H^T. In the frame of x = x_i, where the self term
contributes m_i to <x, H> and nothing to E^T S E (E^T x_i = 0):

    A_i = beta E_i^T S'_i E_i - (<x_i, H'_i> + m_i) I,      g_i = E_i^T H'_i = E_i^T G_i,
    USA:  J_i = s [ gamma A_i + D_i ],
    SA:   J_i = s [ A_i / Psi_i - beta g_i g_i^T / Psi_i^2 + D_i ],     Psi_i = m_i + Psi'_i,
    none: J_i = s D_i,          D_i = E_i^T DF(x_i) E_i - <x_i, F(x_i)> I.

**(a) Reduced system.** Atom i is both the evaluation point and a source. Its own term restricted to the
sphere is constant: m_i K(x, x) P_x x = 0 and m_i K(x, x) = m_i for every unit x, so it contributes nothing
to block (i, i) in USA, and only the constant m_i to the normaliser Psi_i in SA. Block (i, i) is then the
derivative of the other atoms' field, computed from the sums over j != i (no cancellation: two
antipodal atoms at beta = 9 keep e^{-18} to full relative precision):

    USA:  J_ii = s [ gamma (beta E_i^T S'_i E_i - <x_i, H'_i> I) + D_i ],
    SA:   J_ii = s [ (beta E_i^T S'_i E_i - <x_i, H'_i> I) / Psi_i - beta g_i g_i^T / Psi_i^2 + D_i ],

and for j != i, with C_ij = E_i^T E_j + beta (E_i^T x_j)(E_j^T x_i)^T (from d/dy [K(x,y) P_x y] =
K P_x (I + beta y x^T)) and d Psi_i / dx_j = beta c_ij x_i^T,

    USA:  J_ij = s gamma c_ij C_ij,
    SA:   J_ij = s c_ij [ C_ij / Psi_i - beta g_i (E_j^T x_i)^T / Psi_i^2 ].

**Gradient flows** (USA or 'none', gradient perceptron or none: ``Model.has_energy``). v_i = s m_i^{-1}
grad_{x_i} E(X) with E the model's energy of mu_X, so J = s M^{-1} Hess E (M = diag(m_i) on each T_{x_i}),
the Riemannian Hessian being symmetric at every X; M^{1/2} J M^{-1/2} is symmetric. It is formed, its
measured asymmetry reported (``asymmetry``: round-off), symmetrised, and diagonalised by ``eigh``: real
eigenvalues, and eigenvectors orthogonal in the mass-weighted inner product sum_i m_i <xi_i, eta_i>. The
pull J_i is the covariant Hessian of s (gamma Phi + V), Phi = sum_j m_j g(<x, x_j>), symmetric as it
stands. Otherwise (SA, general-form perceptron) the general eigensolver is used; eigenvalues may be
complex.

**Symmetries.** A rotation R with R a_u = a_u and R W_u = W_u for every unit of the perceptron (every
rotation without one) maps the field of mu to that of R mu: V(RX) = R V(X). Its Lie algebra
g = {A in so(d) : A a_u = 0, A W_u = 0} (:func:`symmetry_algebra`) gives exact null vectors of the reduced
Jacobian at a stationary state: differentiating at t = 0 along exp(tA) X, J (A x_1, ..., A x_k) = A V(X) = 0.
They span the *neutral* subspace N = {(A x_i)_i : A in g} (rank from the SVD of that map, singular values
above ``NEUTRAL_RTOL`` times the largest; dimension d - 1 for one atom and for two antipodal ones without a
perceptron). The field at a fixed measure has no such symmetry: part (b) has no neutral directions. With
R~ = M^{1/2} N (orthonormal) and Q~ its orthogonal complement, J~ = M^{1/2} J M^{-1/2} satisfies J~ R~ = 0,
so J~ is block-triangular in (R~, Q~) and its other eigenvalues are those of Q~^T J~ Q~ (the dynamics on the
quotient by the symmetry orbits). In the symmetric case Q~ y is itself an eigenvector; otherwise the
eigenvector of J~ is Q~ y + R~ (R~^T J~ Q~ y) / lambda. At a state that is not stationary J~ R~ = A V is
not zero (``neutral_residual`` reports its size) and the quotient is an approximation of that order.

**Classification.** Let scale = max(||J~||_2, max_i ||J_i||_2) and zero_tol = ``zero_rtol`` x scale
(default 1e-9: well above the round-off of the eigenvalues, about 1e-16 x scale for the symmetric case,
more for non-normal SA matrices, and below the rates one resolves by time stepping). The state is
*stable* when every eigenvalue of both parts outside the neutral subspace has real part < -zero_tol;
*unstable* when one has real part > zero_tol; otherwise *marginal* (eigenvalues within zero_tol of the
imaginary axis, listed in ``marginal``: the linearisation does not decide). The neutral subspace is left
out because moving along it gives the same state rotated, which is stable or not with it. The verdict
means what it says only at a stationary state: ``max_speed`` says how close the given positions are
(:func:`solvers.balance.polish_atoms` brings it to a balance of the forces or reports failure).

Input: positions (k, d) of unit length (norms within 1e-12 of 1 are normalised, others refused); masses
(k,) > 0 summing to 1 within 1e-12 (then normalised; the model's measures are probabilities, and a
measure with a diffuse part is not an atomic state), the model without noise (with noise nothing atomic
is stationary). Coincident atoms are not refused: together they are one atom of their summed mass, and
their relative motion is a mode of the reduced system (in USA at the rate -s gamma (m_i + m_j): they merge
in ascent, split in descent).

References
----------
- K. Fellner, G. Raoul, "Stability of stationary states of non-local equations with singular interaction
  potentials", Math. Comput. Modelling 53 (2011) 1436-1450, doi:10.1016/j.mcm.2010.03.021 (local
  non-linear stability of finite sums of Dirac masses under a linear stability condition).
- G. Raoul, "Nonlocal aggregation models", abstract, Kinetic FRG Young Researchers Workshop, CSCAMM,
  University of Maryland, March 2009 (smooth interaction kernel and external potential: steady states
  are generically sums of Dirac masses; necessary and sufficient conditions for local stability).
- E. Geigant, M. Stoll, "Stability of peak solutions of a non-linear transport equation on the circle",
  Electron. J. Differential Equations 2012 (2012), No. 157, 1-41.

Also on the subject: K. Fellner, G. Raoul, "Stable stationary states of non-local interaction equations" (Math. Models
Methods Appl. Sci., 2010), the smooth-potential counterpart of the first reference; G. Raoul, "Non-local
interaction equations: stationary states and stability analysis" (Differential Integral Equations, 2012);
D. Balague, J. A. Carrillo, T. Laurent, G. Raoul, "Dimensionality of local minimizers of the interaction
energy" (Arch. Ration. Mech. Anal., 2013).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from .model import Model
from .perceptron import activation, activation_derivative

__all__ = ["AtomicState", "Mode", "atomic_state", "tangent_frames",
           "reduced_jacobian", "pull_jacobians", "field_jacobian", "symmetry_algebra", "neutral_directions",
           "UNIT_TOL", "MASS_TOL", "NEUTRAL_RTOL", "ZERO_RTOL"]

#: positions whose norm is within this of 1 are normalised; others are refused
UNIT_TOL = 1e-12
#: masses whose sum is within this of 1 are normalised; others are refused
MASS_TOL = 1e-12
#: singular values of the symmetry maps above this fraction of the largest count as directions
NEUTRAL_RTOL = 1e-8
#: eigenvalues within this fraction of the Jacobians' norm of the imaginary axis are marginal
ZERO_RTOL = 1e-9


# ----------------------------------------------------------------------------------------------
# input
# ----------------------------------------------------------------------------------------------
def _checked(model, positions, masses) -> tuple[np.ndarray, np.ndarray]:
    """The positions (k, d), unit, and masses (k,), summing to 1, or ValueError (one line)."""
    if not isinstance(model, Model):
        raise ValueError(f"atomic: model must be a Model, got {type(model).__name__}")
    if model.noise != 0.0:
        raise ValueError(f"atomic: the model has noise {model.noise:g}; atomic states are stationary only "
                         "without noise (use model.replace(noise=0.0))")
    x = np.array(positions, dtype=float)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] != model.d:
        raise ValueError(f"atomic: positions must have shape (k, {model.d}) with k >= 1, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("atomic: positions must be finite")
    norms = np.linalg.norm(x, axis=1)
    worst = float(np.max(np.abs(norms - 1.0)))
    if worst > UNIT_TOL:
        raise ValueError(f"atomic: positions must be unit vectors (|x| within {UNIT_TOL:g} of 1), "
                         f"got |x| - 1 = {worst:.3g}")
    x /= norms[:, None]
    m = np.array(masses, dtype=float)
    if m.shape != (x.shape[0],):
        raise ValueError(f"atomic: masses must have shape ({x.shape[0]},) (one per position), got {m.shape}")
    if not np.all(np.isfinite(m)) or np.any(m <= 0):
        raise ValueError(f"atomic: masses must be finite and > 0, got a minimum of {np.min(m)!r}")
    total = float(m.sum())
    if abs(total - 1.0) > MASS_TOL:
        raise ValueError(f"atomic: masses must sum to 1 (a probability measure; within {MASS_TOL:g}), "
                         f"got a sum of {total!r}")
    return x, m / total


# ----------------------------------------------------------------------------------------------
# frames and the pieces of the field
# ----------------------------------------------------------------------------------------------
def tangent_frames(x: np.ndarray) -> np.ndarray:
    """Orthonormal bases E_i (k, d, d - 1) of the tangent spaces at unit vectors x (k, d): columns 2..d of
    the Householder reflection I - 2 u u^T / |u|^2, u = x + sign(x_1) e_1 (sign(0) = +1)."""
    x = np.asarray(x, dtype=float)
    k, d = x.shape
    u = x.copy()
    u[:, 0] += np.where(x[:, 0] >= 0.0, 1.0, -1.0)       # |u|^2 >= 1: no cancellation
    u2 = np.einsum("kd,kd->k", u, u)
    E = -2.0 * u[:, :, None] * u[:, None, 1:] / u2[:, None, None]
    E[:, 1:, :] += np.eye(d - 1)
    return E


def arc_lengths(a, b) -> np.ndarray:
    """Geodesic distances (rad) between unit vectors a and b, over their last axis (broadcast):
    2 arcsin(|a - b| / 2), accurate for close points where arccos(<a, b>) is not."""
    return 2.0 * np.arcsin(np.minimum(np.linalg.norm(np.asarray(a) - np.asarray(b), axis=-1) / 2.0, 1.0))


def _perceptron_term(model: Model, x: np.ndarray, E: np.ndarray) -> np.ndarray | None:
    """D_i = E_i^T DF(x_i) E_i - <x_i, F(x_i)> I (k, n, n), or None without a perceptron."""
    p = model.perceptron
    if p is None:
        return None
    W = p.a * p.c[:, None] if p.is_gradient else p.w                 # (m, d)
    z = x @ p.a.T + p.b                                               # (k, m)
    F = activation(z, p.activation) @ W                               # (k, d)
    ds = activation_derivative(z, p.activation)                       # (k, m)
    EW = np.einsum("idn,ud->iun", E, W)
    EA = np.einsum("idn,ud->iun", E, p.a)
    D = np.einsum("iun,iu,iup->inp", EW, ds, EA)
    D -= np.einsum("id,id->i", x, F)[:, None, None] * np.eye(x.shape[1] - 1)
    return D


@dataclass
class _Parts:
    """The pieces both Jacobians are built from (module docstring, Notes), in the frames E."""

    E: np.ndarray                 # (k, d, n) frames
    off: np.ndarray | None        # (k, k) c_ij = m_j K_ij, zero diagonal
    Ex: np.ndarray | None         # (k, k, n) E_i^T x_j
    A0: np.ndarray | None         # (k, n, n) beta E^T S' E - <x, H'> I (the other atoms' field gradient)
    g: np.ndarray | None          # (k, n) E_i^T H'_i
    psi: np.ndarray | None        # (k,) m_i + Psi'_i (SA's normaliser at the atoms)
    D: np.ndarray | None          # (k, n, n) the perceptron's term, or None


def _parts(model: Model, x: np.ndarray, m: np.ndarray) -> _Parts:
    E = tangent_frames(x)
    k, d = x.shape
    n = d - 1
    D = _perceptron_term(model, x, E)
    if model.attention == "none":
        return _Parts(E, None, None, None, None, None, D)
    beta = model.beta
    t = x @ x.T
    off = model.kernel(t) * m[None, :]
    np.fill_diagonal(off, 0.0)                       # the self term is handled exactly (Notes)
    # E_i^T x_j for every pair, one product: row i n + a of E.transpose(0, 2, 1) is column a of E_i
    Ex = (E.transpose(0, 2, 1).reshape(k * n, d) @ x.T).reshape(k, n, k).transpose(0, 2, 1)
    H = off @ x                                      # H'_i
    xH = np.einsum("ij,ij->i", off, t)               # <x_i, H'_i>
    # sum_j c_ij (E_i^T x_j)(E_i^T x_j)^T pair by pair (not E_i^T S'_i E_i: the tangent parts of near atoms'
    # x_j x_j^T would cancel), as one batched product
    A0 = beta * np.matmul((off[:, :, None] * Ex).transpose(0, 2, 1), Ex) - xH[:, None, None] * np.eye(n)
    g = np.einsum("idn,id->in", E, H)
    psi = m + off.sum(axis=1)
    return _Parts(E, off, Ex, A0, g, psi, D)


def _pull_from(model: Model, parts: _Parts, m: np.ndarray) -> np.ndarray:
    """Part (b) in the frames, (k, n, n)."""
    k, _, n = parts.E.shape
    J = np.zeros((k, n, n))
    if model.attention == "unnormalized":
        J += model.strength * (parts.A0 - m[:, None, None] * np.eye(n))
    elif model.attention == "normalized":
        J += (parts.A0 - m[:, None, None] * np.eye(n)) / parts.psi[:, None, None]
        J -= model.beta * np.einsum("in,ip->inp", parts.g, parts.g) / parts.psi[:, None, None] ** 2
    if parts.D is not None:
        J += parts.D
    return model.sign * J


def _reduced_from(model: Model, parts: _Parts) -> np.ndarray:
    """Part (a) in the frames, (k (d-1), k (d-1)): block (i, j) at rows i n .. i n + n - 1.

    Formed in that layout directly: with F the (k n, d) rows E_i[:, a] and R the (k n, k) entries E_i^T x_j
    repeated n times along the columns, the blocks C_ij of every pair are F F^T + beta R * R^T (entrywise)."""
    k, d, n = parts.E.shape
    N = k * n
    J = np.zeros((N, N))
    blocks = J.reshape(k, n, k, n)
    idx = np.arange(k)
    if model.attention != "none":
        F = parts.E.transpose(0, 2, 1).reshape(N, d)
        R = np.repeat(parts.Ex.transpose(0, 2, 1).reshape(N, k), n, axis=1)     # [(i, a), (j, b)] = E_i^T x_j [a]
        C = F @ F.T
        C += model.beta * (R * R.T)
        off = np.repeat(np.repeat(parts.off, n, axis=0), n, axis=1)
        if model.attention == "unnormalized":
            np.multiply(model.strength * off, C, out=J)
            blocks[idx, :, idx, :] += model.strength * parts.A0
        else:
            psi = np.repeat(parts.psi, n)[:, None]
            cross = parts.g.reshape(N, 1) * R.T                                   # g_i (E_j^T x_i)^T
            np.multiply(off, C / psi - model.beta * cross / psi ** 2, out=J)
            blocks[idx, :, idx, :] += parts.A0 / parts.psi[:, None, None]
            blocks[idx, :, idx, :] -= (model.beta * np.einsum("in,ip->inp", parts.g, parts.g)
                                       / parts.psi[:, None, None] ** 2)
    if parts.D is not None:
        blocks[idx, :, idx, :] += parts.D
    if model.sign != 1:
        J *= model.sign
    return J


# ----------------------------------------------------------------------------------------------
# the Jacobians (public)
# ----------------------------------------------------------------------------------------------
def reduced_jacobian(model: Model, positions, masses) -> tuple[np.ndarray, np.ndarray]:
    """Part (a): the Jacobian of X -> (v[mu_X](x_i))_i on T_{x_1} x ... x T_{x_k}, masses fixed.

    Returns
    -------
    J : ndarray (k (d-1), k (d-1))
        Block (i, j) = E_i^T (d v_i / d x_j) E_j (rows i (d-1) .. i (d-1) + d - 2), 1 / unit time.
    frames : ndarray (k, d, d-1)
        The frames E_i (:func:`tangent_frames`).
    """
    x, m = _checked(model, positions, masses)
    parts = _parts(model, x, m)
    return _reduced_from(model, parts), parts.E


def pull_jacobians(model: Model, positions, masses) -> tuple[np.ndarray, np.ndarray]:
    """Part (b): E_i^T (d v[mu] / dx at x = x_i) E_i for each atom, mu fixed (its own atom included).

    Returns (J (k, d-1, d-1), frames (k, d, d-1)).
    """
    x, m = _checked(model, positions, masses)
    parts = _parts(model, x, m)
    return _pull_from(model, parts, m), parts.E


def field_jacobian(model: Model, positions, masses, at=None) -> np.ndarray:
    """The covariant derivative P_x Dv[mu](x) P_x (n, d, d) of the field of mu = sum_j m_j delta_{x_j} at
    the unit vectors ``at`` (n, d) (default: the atoms), as a map of R^d that is zero on the normal x.

    For the fixed measure, with c_j = m_j K(x, x_j), H = sum_j c_j x_j, G = P_x H, Psi = sum_j c_j,
    B = beta sum_j c_j (P x_j)(P x_j)^T - <x, H> P and the perceptron's P DF P - <x, F> P:
    USA s [gamma B + ...], SA s [B / Psi - beta G G^T / Psi^2 + ...], 'none' s [...].
    At an atom this is part (b) in ambient form (:func:`pull_jacobians` computes the same with the atom's
    own term separated exactly).
    """
    x, m = _checked(model, positions, masses)
    if at is None:
        y = x
    else:
        y = np.array(at, dtype=float)
        if y.ndim != 2 or y.shape[1] != model.d or not np.all(np.isfinite(y)):
            raise ValueError(f"field_jacobian: at must be finite with shape (n, {model.d}), got {y.shape}")
        norms = np.linalg.norm(y, axis=1)
        if np.max(np.abs(norms - 1.0)) > UNIT_TOL:
            raise ValueError(f"field_jacobian: at must be unit vectors (|x| within {UNIT_TOL:g} of 1)")
        y = y / norms[:, None]
    d = model.d
    P = np.eye(d)[None] - y[:, :, None] * y[:, None, :]
    J = np.zeros((y.shape[0], d, d))
    if model.attention != "none":
        c = model.kernel(y @ x.T) * m[None, :]                # (n, k)
        H = c @ x
        px = x[None, :, :] - (y @ x.T)[:, :, None] * y[:, None, :]      # P_y x_j (n, k, d)
        B = model.beta * np.einsum("aj,ajd,aje->ade", c, px, px)
        B -= np.einsum("ad,ad->a", y, H)[:, None, None] * P
        if model.attention == "unnormalized":
            J += model.strength * B
        else:
            psi = c.sum(axis=1)
            G = H - np.einsum("ad,ad->a", y, H)[:, None] * y
            J += B / psi[:, None, None] - model.beta * np.einsum("ad,ae->ade", G, G) / psi[:, None, None] ** 2
    p = model.perceptron
    if p is not None:
        W = p.a * p.c[:, None] if p.is_gradient else p.w
        z = y @ p.a.T + p.b
        F = activation(z, p.activation) @ W
        DF = np.einsum("ud,au,ue->ade", W, activation_derivative(z, p.activation), p.a)
        J += P @ DF @ P - np.einsum("ad,ad->a", y, F)[:, None, None] * P
    return model.sign * J


# ----------------------------------------------------------------------------------------------
# symmetries
# ----------------------------------------------------------------------------------------------
def symmetry_algebra(model: Model) -> np.ndarray:
    """An orthonormal (Frobenius) basis (r, d, d) of {A in so(d) : A a_u = 0 and A W_u = 0 for every unit u
    with W_u != 0}: the infinitesimal rotations that leave the field equivariant (all of so(d), r = d(d-1)/2,
    without a perceptron; r = 0 for a generic one with at least d - 1 units)."""
    d = model.d
    rotations = []
    for a in range(d):
        for b in range(a + 1, d):
            A = np.zeros((d, d))
            A[b, a], A[a, b] = 1.0 / math.sqrt(2.0), -1.0 / math.sqrt(2.0)
            rotations.append(A)
    basis = np.array(rotations)                               # (d(d-1)/2, d, d)
    p = model.perceptron
    if p is None:
        return basis
    W = p.a * p.c[:, None] if p.is_gradient else p.w
    active = np.linalg.norm(W, axis=1) > 0                    # a unit with zero output weight breaks nothing
    fixed = np.concatenate([p.a[active], W[active]])          # (2 m', d)
    if fixed.shape[0] == 0:
        return basis
    # the linear map coefficients -> (A f)_f, whose null space is the algebra
    M = np.einsum("rde,fe->fdr", basis, fixed).reshape(-1, basis.shape[0])
    _, sv, Vt = np.linalg.svd(M)
    rank = int(np.sum(sv > NEUTRAL_RTOL * max(sv.max(initial=0.0), 1.0)))
    null = Vt[rank:]
    return np.einsum("qr,rde->qde", null, basis)


def neutral_directions(model: Model, x: np.ndarray, E: np.ndarray) -> np.ndarray:
    """An orthonormal basis (k (d-1), r) in the frames of the orbit directions (E_i^T A x_i)_i, A in
    :func:`symmetry_algebra` (rank: singular values above NEUTRAL_RTOL times the largest)."""
    alg = symmetry_algebra(model)
    k, d, n = E.shape
    if alg.shape[0] == 0:
        return np.zeros((k * n, 0))
    N = np.einsum("idn,qde,ie->inq", E, alg, x).reshape(k * n, alg.shape[0])
    U, sv, _ = np.linalg.svd(N, full_matrices=False)
    if sv.size == 0 or sv[0] == 0.0:
        return np.zeros((k * n, 0))
    return U[:, sv > NEUTRAL_RTOL * sv[0]]


# ----------------------------------------------------------------------------------------------
# the state and its classification
# ----------------------------------------------------------------------------------------------
@dataclass
class Mode:
    """One eigen-direction: ``part`` "atoms" (``vector`` (k, d): a tangent displacement of every atom) or
    "pull" (``atom`` the atom's index, ``vector`` (d,): a tangent direction at it), its ``eigenvalue``
    (1 / unit time). Vectors have unit Euclidean norm; a complex eigenvalue has a complex vector whose
    real and imaginary parts span the invariant plane."""

    part: str
    eigenvalue: float | complex
    vector: np.ndarray
    atom: int | None = None


@dataclass
class AtomicState:
    """The classification of mu = sum_i m_i delta_{x_i} (module docstring, Notes).

    Attributes
    ----------
    positions, masses : ndarray (k, d), (k,)
        The atoms (unit vectors; masses summing to 1).
    velocities : ndarray (k, d)
        v[mu](x_i) (``Model.velocity_at_atoms``), radians per unit time.
    max_speed : float
        max_i |v(x_i)|: how far from stationary (the spectra classify a stationary state).
    eigenvalues : ndarray
        Every eigenvalue of parts (a) and (b) outside the neutral subspace, by real part descending
        (float for gradient flows, else complex).
    growth : float
        The largest real part among them (1 / unit time).
    verdict : {"stable", "unstable", "marginal"}
        growth < -zero_tol, > zero_tol, or in between.
    stable : bool
        verdict == "stable": every non-neutral eigenvalue of both parts has real part < -zero_tol.
    marginal : ndarray
        The non-neutral eigenvalues with |real part| <= zero_tol (reported, never hidden).
    zero_tol : float
        ZERO_RTOL (or the caller's zero_rtol) times max(||M^1/2 J M^-1/2||_2, max_i ||J_i||_2).
    neutral : ndarray (r, k, d)
        An orthonormal basis (Euclidean, over all atoms) of the exact symmetry directions left out.
    reduced_eigenvalues : ndarray (k (d-1) - r,)
        Part (a) on the quotient by the neutral subspace, by real part descending.
    reduced_vectors : ndarray (k (d-1) - r, k, d)
        Their eigenvectors (ambient tangent displacements of every atom, unit norm).
    pull_eigenvalues : ndarray (k, d-1)
        Part (b) per atom, by real part descending.
    pull_vectors : ndarray (k, d-1, d)
        Their eigenvectors (unit tangent vectors at each atom).
    unstable_direction : Mode
        The eigenvector of the largest eigenvalue (the least stable direction when the state is stable).
    symmetric : bool
        True when the gradient-flow (symmetric) path was used.
    asymmetry : float
        ||J~ - J~^T||_F / ||J~||_F before symmetrising (gradient flows; round-off), nan otherwise.
    neutral_residual : float
        ||J~ R~||_2 / scale: 0 up to round-off at a stationary state, O(max_speed) elsewhere.
    """

    positions: np.ndarray
    masses: np.ndarray
    velocities: np.ndarray
    max_speed: float
    eigenvalues: np.ndarray
    growth: float
    verdict: str
    stable: bool
    marginal: np.ndarray
    zero_tol: float
    neutral: np.ndarray
    reduced_eigenvalues: np.ndarray
    reduced_vectors: np.ndarray
    pull_eigenvalues: np.ndarray
    pull_vectors: np.ndarray
    unstable_direction: Mode
    symmetric: bool
    asymmetry: float
    neutral_residual: float

    @property
    def n_neutral(self) -> int:
        """The number of neutral (symmetry) directions."""
        return int(self.neutral.shape[0])

    def __repr__(self) -> str:
        lead = self.unstable_direction
        where = "atoms" if lead.part == "atoms" else f"pull of atom {lead.atom}"
        return (f"AtomicState({len(self.masses)} atoms, {self.verdict}: growth {self.growth:.6g} ({where}), "
                f"max |v| {self.max_speed:.3g}, {self.n_neutral} neutral, {len(self.marginal)} marginal)")


def _order(values: np.ndarray) -> np.ndarray:
    """Indices by real part descending (then imaginary part descending)."""
    values = np.asarray(values)
    return np.lexsort((-np.imag(values), -np.real(values)))


def _unit_phase(v: np.ndarray) -> np.ndarray:
    """v / |v| with a fixed sign (or phase): its largest entry real and positive (same dtype)."""
    v = v / np.linalg.norm(v)
    flat = v.reshape(-1)
    j = int(np.argmax(np.abs(flat)))
    return v / (flat[j] / abs(flat[j]))


def _quotient_spectrum(J: np.ndarray, w: np.ndarray, R: np.ndarray, symmetric: bool, zero_tol_of):
    """Eigenvalues and eigenvectors (tangent coordinates) of J on the quotient by span(R).

    J is (n, n) in the frames, w (n,) the mass of the atom each coordinate belongs to, R (n, r) Euclidean
    orthonormal. Returns (values, vectors (n, p), scale, asymmetry, residual)."""
    sq = np.sqrt(w)
    Jt = sq[:, None] * J / sq[None, :]                         # M^1/2 J M^-1/2
    scale = float(np.linalg.norm(Jt, 2)) if Jt.size else 0.0
    asym = math.nan
    if symmetric:
        nrm = float(np.linalg.norm(Jt))
        asym = float(np.linalg.norm(Jt - Jt.T)) / nrm if nrm > 0 else 0.0
        Jt = 0.5 * (Jt + Jt.T)
    n = J.shape[0]
    if R.shape[1]:
        Rt, _ = np.linalg.qr(sq[:, None] * R)                  # the same subspace, weighted-orthonormal
        Qt = scipy.linalg.null_space(Rt.T) if Rt.shape[1] < n else np.zeros((n, 0))
    else:
        Rt, Qt = np.zeros((n, 0)), np.eye(n)
    residual = float(np.linalg.norm(Jt @ Rt, 2)) if Rt.shape[1] else 0.0
    T = Qt.T @ Jt @ Qt
    if symmetric:
        vals, Y = np.linalg.eigh(0.5 * (T + T.T))
        Z = Qt @ Y
    else:
        vals, Y = scipy.linalg.eig(T)
        Z = (Qt @ Y).astype(complex)                          # eig's vectors are real when every value is
        if Rt.shape[1]:
            lift = Rt.T @ Jt @ Z                                # the part of J~ Q~ y along the orbits
            tol = zero_tol_of(scale)
            big = np.abs(vals) > tol
            Z[:, big] += Rt @ (lift[:, big] / vals[big])
    return vals, Z / sq[:, None], scale, asym, residual


def atomic_state(model: Model, positions, masses, *, zero_rtol: float = ZERO_RTOL) -> AtomicState:
    """The stability of the atomic measure mu = sum_i m_i delta_{x_i} (module docstring, Notes).

    Parameters
    ----------
    model : Model
        Any attention (USA, SA, none), any perceptron; no noise.
    positions : array (k, d)
        Unit vectors (norms within 1e-12 of 1 are normalised).
    masses : array (k,)
        > 0, summing to 1 within 1e-12 (normalised).
    zero_rtol : float
        Eigenvalues with |real part| <= zero_rtol x (the Jacobians' 2-norm) are marginal.

    Returns
    -------
    AtomicState
    """
    x, m = _checked(model, positions, masses)
    if not (math.isfinite(zero_rtol) and zero_rtol >= 0):
        raise ValueError(f"atomic_state: zero_rtol must be finite and >= 0, got {zero_rtol!r}")
    k, d = x.shape
    n = d - 1
    vel = model.velocity_at_atoms(x, m)
    max_speed = float(np.sqrt(np.einsum("kd,kd->k", vel, vel).max()))
    parts = _parts(model, x, m)
    E = parts.E
    Ja = _reduced_from(model, parts)
    Jb = _pull_from(model, parts, m)
    symmetric = model.has_energy
    R = neutral_directions(model, x, E)

    pull_scale = max((float(np.linalg.norm(b, 2)) for b in Jb), default=0.0)

    def zero_tol_of(reduced_scale: float) -> float:
        return zero_rtol * max(reduced_scale, pull_scale)

    rvals, rvec, rscale, asym, resid = _quotient_spectrum(Ja, np.repeat(m, n), R, symmetric, zero_tol_of)
    zero_tol = zero_tol_of(rscale)
    order = _order(rvals)
    rvals, rvec = rvals[order], rvec[:, order]
    reduced_vectors = np.empty((len(rvals), k, d), dtype=rvec.dtype)
    for j in range(len(rvals)):
        reduced_vectors[j] = _unit_phase(np.einsum("idn,in->id", E, rvec[:, j].reshape(k, n)))

    pvals = np.empty((k, n), dtype=float if symmetric else complex)
    pvec = np.empty((k, n, d), dtype=float if symmetric else complex)
    for i in range(k):
        if symmetric:
            vals, Y = np.linalg.eigh(0.5 * (Jb[i] + Jb[i].T))
        else:
            vals, Y = scipy.linalg.eig(Jb[i])
        o = _order(vals)
        pvals[i] = vals[o]
        pvec[i] = np.array([_unit_phase(E[i] @ Y[:, j]) for j in o])

    allv = np.concatenate([rvals, pvals.reshape(-1)])
    tags = [("atoms", j) for j in range(len(rvals))] + [("pull", (i, j)) for i in range(k) for j in range(n)]
    order = _order(allv)
    allv = allv[order]
    part, where = tags[order[0]]
    if part == "atoms":
        lead = Mode("atoms", allv[0], reduced_vectors[where])
    else:
        lead = Mode("pull", allv[0], pvec[where[0], where[1]], atom=int(where[0]))
    growth = float(np.real(allv[0]))
    marginal = allv[np.abs(np.real(allv)) <= zero_tol]
    verdict = "unstable" if growth > zero_tol else ("stable" if growth < -zero_tol else "marginal")

    # E_i is an isometry onto T_{x_i}: R's orthonormal columns stay orthonormal in ambient coordinates
    neutral = np.einsum("idn,inr->rid", E, R.reshape(k, n, -1))
    return AtomicState(positions=x, masses=m, velocities=vel, max_speed=max_speed, eigenvalues=allv,
                       growth=growth, verdict=verdict, stable=verdict == "stable", marginal=marginal,
                       zero_tol=float(zero_tol), neutral=neutral, reduced_eigenvalues=rvals,
                       reduced_vectors=reduced_vectors, pull_eigenvalues=pvals, pull_vectors=pvec,
                       unstable_direction=lead, symmetric=symmetric, asymmetry=asym,
                       neutral_residual=resid / max(rscale, pull_scale) if max(rscale, pull_scale) > 0 else 0.0)
