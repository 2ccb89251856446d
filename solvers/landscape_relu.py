"""The maximum of a ReLU perceptron's potential on S^{d-1} as a finite family of quadratic programs (the main
paper §3.3), in any dimension.

Without biases, V(x) = sum_k c_k max(<a_k, x>, 0)^2 / 2. On the closed region

    R_I = {x : <a_k, x> >= 0 for k in I, <a_k, x> <= 0 for k not in I}

every unit outside I is off and every unit in I is on (or at its kink, where its term is 0 either way), so
V = x^T Q_I x / 2 with Q_I = sum_{k in I} c_k a_k a_k^T, and

    max_{S^{d-1}} V = max_I max {x^T Q_I x / 2 : |x| = 1, x in R_I},

one sphere-constrained quadratic program per active set I (2^m of them). Each is solved by its KKT points.
A maximiser x* of V has J = {k : <a_k, x*> = 0} and I = {k : <a_k, x*> > 0}; near x*, within the subspace
N_J = {x : <a_k, x> = 0, k in J}, the other signs are strict, so x* is a critical point of x^T Q_I x on
the unit sphere of N_J: an eigenvector of the compression of Q_I to N_J (the units in J contribute 0 there,
so I and J can be taken disjoint: 3^m pairs). Conversely every such eigenvector that satisfies the signs of
R_I has V = its eigenvalue / 2. The candidates are therefore

    for every disjoint I, J with N_J != {0}: the eigenvectors of B^T Q_I B (B an orthonormal basis of N_J),
    with the signs of R_I (within ``feasibility``),

and the largest eigenvalue / 2 among them is max V. A multiple eigenvalue has an eigenspace rather than two
eigenvectors: its intersection with the cone R_I is searched by linear programs (maximise +-each coordinate
of a point of the eigenspace in the cone, within a box). The number of programs is 3^m eigenproblems of size
at most d: the route is for a few units, in any d.

What the paper's cases give (its (i)-(iii) re-derived, the tests' closed forms):

(i) collinear a_k = s_k a (|a| = 1, s_k != 0; with unit directions the s_k^2 go into c_k): V = t^2 A_+ / 2
    for t = <a, x> >= 0 and t^2 A_- / 2 for t <= 0, A_+- = sum over s_k of that sign of c_k s_k^2. So
    max V = max(A_+, A_-, 0) / 2, at x = a (A_+ largest and > 0), -a (A_-), and on {<a, x> = 0} when both
    are <= 0.
(ii) orthonormal a_k = e_k (k = 1..m <= d): V = sum_k c_k max(x_k, 0)^2 / 2 <= max(max_k c_k, 0) / 2, with
    equality at e_k for c_k the largest (if > 0), and otherwise wherever x_k <= 0 for every c_k < 0.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.optimize import linprog

from .perceptron import Perceptron

__all__ = ["ReluMaximum", "relu_maximum", "MAX_UNITS"]

#: the route's cost is 3^m small eigenproblems: refused above this many units
MAX_UNITS = 12
#: the sign conditions of R_I are checked within this times |x| (= 1)
FEASIBILITY = 1e-8
#: eigenvalues within this times the largest |eigenvalue| are one multiple eigenvalue (further apart, eigh's
#: eigenvectors are within eps / 1e-6 ~ 1e-10 of the exact ones, well inside FEASIBILITY)
MULTIPLE_RTOL = 1e-6


@dataclass(frozen=True)
class ReluMaximum:
    """max V on S^{d-1} for a ReLU perceptron without biases (module docstring).

    value : the largest candidate value V(x) at a maximiser (evaluated by ``Perceptron.potential``).
    upper : the largest candidate eigenvalue / 2 plus the eigensolver's error bound: an upper bound on max V
        (the enumeration is exhaustive; the bound covers the floating-point eigenvalues and the feasibility
        tolerance).
    maximisers : (n, d) the candidates with V within ``upper - value`` of the largest (duplicates removed).
    programs : number of (I, J) pairs solved.
    """

    value: float
    upper: float
    maximisers: np.ndarray
    programs: int


def _cone_point(E: np.ndarray, G: np.ndarray) -> np.ndarray | None:
    """A unit x = E alpha with G x >= 0 (rows of G), or None when only x = 0 satisfies it."""
    p = E.shape[1]
    A_ub = -(G @ E) if len(G) else None
    b_ub = np.zeros(len(G)) if len(G) else None
    for j in range(p):
        for s in (1.0, -1.0):
            c = np.zeros(p)
            c[j] = -s
            res = linprog(c, A_ub=A_ub, b_ub=b_ub, bounds=[(-1.0, 1.0)] * p, method="highs")
            if res.status == 0 and -res.fun > 1e-9:
                x = E @ res.x
                return x / np.linalg.norm(x)
    return None


def relu_maximum(perceptron: Perceptron, feasibility: float = FEASIBILITY) -> ReluMaximum:
    """The §3.3 route: max V over S^{d-1} by the 3^m quadratic programs' KKT points (module docstring).

    Raises ValueError unless the perceptron is a gradient-form ReLU without biases and m <= ``MAX_UNITS``.
    """
    p = perceptron
    if p.activation != "relu" or not p.is_gradient:
        raise ValueError("relu_maximum: the §3.3 quadratic programs need a gradient-form ReLU perceptron, got "
                         f"{p!r}")
    if np.any(p.b != 0.0):
        raise ValueError("relu_maximum: the §3.3 quadratic programs need zero biases (with biases V is not a "
                         "quadratic form on the regions)")
    m, d = p.a.shape
    if m > MAX_UNITS:
        raise ValueError(f"relu_maximum: {m} units mean 3^{m} quadratic programs; at most {MAX_UNITS} units")
    a, c = p.a, p.c
    cands, bounds = [], []
    programs = 0
    scale = float(np.sum(np.abs(c)))
    for labels in itertools.product((0, 1, 2), repeat=m):     # 0 off, 1 on (I), 2 on the hyperplane (J)
        lab = np.array(labels)
        I, J = lab == 1, lab == 2
        if J.any():
            B = scipy.linalg.null_space(a[J])
            if B.shape[1] == 0:
                continue
        else:
            B = np.eye(d)
        programs += 1
        Q = (a[I].T * c[I]) @ a[I]
        lam, vec = np.linalg.eigh(B.T @ Q @ B)
        signs = np.where(I, 1.0, -1.0)[~J]                   # <a_k, x> s_k >= 0 for k not in J
        G = signs[:, None] * a[~J]
        tol = MULTIPLE_RTOL * max(float(np.max(np.abs(lam))), scale, 1e-300)
        start = 0
        while start < len(lam):
            stop = start + 1
            while stop < len(lam) and lam[stop] - lam[start] <= tol:
                stop += 1
            E = B @ vec[:, start:stop]
            if stop - start == 1:
                for x in (E[:, 0], -E[:, 0]):
                    if np.all(G @ x >= -feasibility):
                        cands.append(x / np.linalg.norm(x))
                        bounds.append(0.5 * float(lam[start]))
            else:
                x = _cone_point(E, G)
                if x is not None:
                    cands.append(x)
                    bounds.append(0.5 * float(lam[stop - 1]))
            start = stop
    X = np.array(cands)
    values = p.potential(X)
    best = int(np.argmax(values))
    # eigh is backward stable: each eigenvalue within a few d eps ||Q|| <= d eps sum |c_k|; a candidate taken
    # within the feasibility tolerance is at most that far from the cone, where V moves by |grad V| <= sum |c_k|
    err = 16.0 * d * np.finfo(float).eps * scale + feasibility ** 2 * scale
    upper = max(float(np.max(bounds)), float(values[best])) + err
    near = values >= values[best] - (upper - values[best]) - 1e-300
    keep: list = []
    for x in X[near][np.argsort(-values[near])]:
        if all(np.linalg.norm(x - y) > 1e-8 for y in keep):
            keep.append(x)
    return ReluMaximum(value=float(values[best]), upper=upper, maximisers=np.array(keep), programs=programs)
