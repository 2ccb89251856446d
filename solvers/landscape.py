"""The global extremum of the energy over all probability measures on S^{d-1}, with a proven certificate.

E[mu] = (gamma / 2) ∬ g(<x, y>) dmu dmu + ∫ V dmu, g(t) = exp(beta (t - 1)) / beta (docs/model.md §1; USA
attention, a gradient perceptron or none, no noise). Descent minimises E, ascent maximises it (the main
paper, Prop. 3.7). :func:`extremum` returns an :class:`Extremum`: the measure, its energy, and ``gap``, a
proven bound on |E(result) - E*| with E* the extremum over all of P(S^{d-1}).

Ascent (Prop. 3.7 (i)). g(t) <= g(1) on [-1, 1] and ∫ V dmu <= max V, so for every mu

    E[mu] <= gamma g(1) / 2 + max V,

with equality exactly for the Diracs at the maximisers of V (the pair term is g(1) only when <x, y> = 1
mu x mu-almost everywhere). So E* = gamma g(1) / 2 + max V, and a Dirac at x^ has E* - E(delta_x^) =
max V - V(x^) <= U - V(x^) for any proven upper bound U on max V. Two routes give U:

- "grid": the branch and bound of :mod:`solvers.landscape_bound` on f = -V, with the curvature bound of
  ``Perceptron.curvature_bounds`` (any d, every activation; the cost grows with d), x^ from Newton's
  method at the best cells;
- "relu-qp" (the main paper §3.3): for ReLU without biases, max V is the largest of 2^m quadratic programs
  over the regions of constant active set, solved through their KKT points (:mod:`solvers.landscape_relu`),
  in any d.

Without a perceptron every Dirac is a maximiser: E* = gamma g(1) / 2 (gamma / (2 beta)).

Descent (Prop. 3.7 (ii)). The kernel is positive definite (its Funk-Hecke multipliers lambda_l are > 0),
so E is strictly convex on P(S^{d-1}) and has one minimiser (at beta = 0, g = t - 1 is only positive
semi-definite on signed measures of mass 0: E is convex, the minimiser need not be unique, and what follows
holds as it stands). With the first variation

    Phi_mu(x) = gamma ∫ g(<x, y>) dmu(y) + V(x),

E[nu] - E[mu] = ∫ Phi_mu d(nu - mu) + (gamma / 2) ∬ g d(nu - mu) d(nu - mu) >= ∫ Phi_mu d(nu - mu) for
every nu, so

    E[mu] - E* <= ∫ Phi_mu dmu - min_x Phi_mu(x) =: gap(mu),

and, at nu = mu* (the minimiser), (gamma / 2) ||mu - mu*||_g^2 = E* - E[mu] - ∫ Phi_mu d(mu* - mu) <= gap(mu):
a small gap also bounds the distance from the minimiser in the kernel's norm. The minimum of Phi over the
whole sphere is proven by the branch and bound of :mod:`solvers.landscape_bound` from Phi and grad Phi at
the cells' centres and a curvature bound along unit-speed great circles x(s): with t = <x(s), y>, t'' = -t,
t'^2 <= 1 - t^2 and beta >= 0,

    d^2/ds^2 g(t) = exp(beta (t - 1)) (beta t'^2 - t) >= -t exp(beta (t - 1)) >= -1

(g = t - 1 at beta = 0 gives -t >= -1 too), so Phi'' >= -gamma + (the lower curvature bound of V,
``Perceptron.curvature_bounds``), independent of beta. Near the minima a second-order bound takes over:
the Hessian at the centre and a bound on the third derivative (:func:`kernel_third_bound`,
``Perceptron.third_derivative_bound``), used only in cells that cross no ReLU kink (where V'' jumps). The
round-off of every evaluation is bounded explicitly (:func:`_round_off`) and subtracted.

mu is found as atoms (:mod:`solvers.landscape_descent`): an exchange method on a grid (the quadratic
program of the masses on the grid's points, growing its support where Phi is lowest), then Newton's method
on the energy of positions and masses together (:func:`solvers.landscape_descent.slide`; atoms that meet
merge, atoms whose mass vanishes leave), then Newton's method on the optimality conditions (Phi constant on
the support, zero gradient), then the certificate; a certificate that finds Phi below the level somewhere
adds those points and goes round again. The minimiser is atomic where the main paper's Theorems 3.1-3.3 say
stationary measures are (on S^1 with ReLU always; generically otherwise), but not always: on S^2 a ReLU
unit with c_k < 0 whose active cap meets no other unit makes V = c_k <a_k, x>^2 / 2 there, invariant under
the rotations about a_k, and when more mass than |c_k| / gamma gathers there a Dirac at a_k is unstable
(its own kernel's curvature -gamma m beats V'' = |c_k|): the minimiser is then a ring around a_k
(``Perceptron.random(3, 3, "relu", 1.0, seed=111)`` at beta >= 35). A polygon of a few atoms on the ring
comes within 1e-12 of its energy (n equally spaced atoms differ from the ring only in the angular Fourier
modes of order n and its multiples, and the kernel's decay faster than exponentially), and the gap
certifies exactly that. Without a perceptron the minimiser is the
uniform measure sigma (Prop. 3.7 (ii): the only rotation-invariant probability measure), E* = gamma
lambda_0 / (2 beta), and Phi_sigma = gamma lambda_0 / beta is constant by Funk-Hecke: the gap is 0, and the
result is a continuous part.

Refused: normalised attention (SA has no energy in this metric), general-form perceptrons (no potential),
noise (the flow then descends E + nu ∫ rho log rho, another functional), and in descent a linear activation
(V quadratic: the minimiser can have a density, main paper Remark 5.5) or a perceptron invariant under a
continuous group of rotations (the minimiser is invariant too, hence not atomic).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ._blas import blas_threads
from .atomic import arc_lengths, field_jacobian, symmetry_algebra
from .landscape_bound import certified_minimum, cube_sphere_points, newton_minimum
from .landscape_descent import exchange, merge_atoms, newton_atoms, qp_data, simplex_qp, slide
from .model import Model

__all__ = ["Extremum", "ExtremumSpec", "ContinuousPart", "extremum", "ROUTES", "TARGET_GAP"]

ROUTES = ("auto", "grid", "relu-qp")
#: the gap the descent's loop aims at (absolute; the energies are O(1) above gamma g(1) / 2)
TARGET_GAP = 1e-12
#: the certificate's refinement tolerance (module landscape_bound: the bound is within this of the value found)
CERT_TOL = 2e-14
#: rounds of (exchange, Newton, certificate) at most
MAX_ROUNDS = 12
#: the first grid's points at most (the exchange's pool and the certificate's first cells)
MAX_GRID = 60_000
#: atoms closer than this (radians) are one atom (the kernel's width 1/sqrt(beta) is >= 3e-5 for beta <= 1e9)
COINCIDE = 1e-6


@dataclass(frozen=True)
class ContinuousPart:
    """A continuous part of the extremum: ``mass`` times a density w.r.t. sigma, given at quadrature
    ``nodes`` (n, d) with ``weights`` (n,) (summing to 1: ∫ f dsigma ~ sum weights f(nodes)) as ``density``
    values (n,); ``description`` says what it is exactly (e.g. "uniform")."""

    mass: float
    description: str
    nodes: np.ndarray
    weights: np.ndarray
    density: np.ndarray


@dataclass(frozen=True)
class Extremum:
    """The global extremum of the energy (module docstring).

    kind : "minimum" (descent) or "maximum" (ascent).
    positions, masses : atoms (k, d) and masses (k,) (summing, with the continuous part, to 1).
    continuous : the continuous part, or None.
    energy : E of the result (``Model.energy_direct`` for atoms; gamma lambda_0 / (2 beta) for the uniform
        measure), in floating point (relative round-off ~1e-15).
    gap : proven bound on |E(result) - E*| for the exact energy of the result, E* the extremum over all
        probability measures.
    method : the route ("uniform", "any Dirac", "any measure", "grid", "relu-qp", "exchange+newton+grid").
    level : descent: Phi (the first variation, constant included) averaged over the result; ascent: the
        proven upper bound on max V.
    lower_phi : descent: the proven lower bound on min Phi over the sphere (constant included); ascent: nan.
    argmin : descent: where the certificate found Phi smallest; ascent: the maximiser of V used.
    maximisers : ascent: the maximisers of V found (n, d) (all within ``gap`` of max V).
    max_speed : the largest |v| (``Model.velocity_direct``) at the atoms (0 at a stationary state).
    evaluations : cells evaluated by the certificate(s).
    finished : False when the certificate's budget ran out (the gap is proven but loose).
    rounds : descent rounds of exchange, Newton, certificate.
    wall : seconds.
    message : one line on how it went.
    """

    kind: str
    positions: np.ndarray
    masses: np.ndarray
    energy: float
    gap: float
    method: str
    model: Model
    continuous: ContinuousPart | None = None
    level: float = math.nan
    lower_phi: float = math.nan
    argmin: np.ndarray | None = None
    maximisers: np.ndarray | None = None
    max_speed: float = 0.0
    evaluations: int = 0
    finished: bool = True
    rounds: int = 0
    wall: float = 0.0
    message: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def bounds(self) -> tuple[float, float]:
        """The proven interval holding E*: [energy - gap, energy] (minimum), [energy, energy + gap] (maximum),
        up to the round-off of ``energy``."""
        if self.kind == "minimum":
            return self.energy - self.gap, self.energy
        return self.energy, self.energy + self.gap

    def summary(self) -> str:
        lines = [f"extremum ({self.kind}) on S^{self.model.d - 1}: beta={self.model.beta:g} flow={self.model.flow}, "
                 f"method {self.method}",
                 f"  E* = {self.energy:.15g}, gap {self.gap:.3g} (proven: E* in [{self.bounds[0]:.15g}, "
                 f"{self.bounds[1]:.15g}])",
                 f"  {len(self.masses)} atom(s)" + (f" + continuous part of mass {self.continuous.mass:g} "
                                                     f"({self.continuous.description})" if self.continuous else ""),
                 f"  max |v| at the atoms {self.max_speed:.3g}; {self.evaluations} certificate cells; "
                 f"{self.wall:.2f} s" + ("" if self.finished else "; certificate budget exhausted")]
        for x, m in zip(self.positions, self.masses):
            lines.append(f"    mass {m:.12f} at {np.array2string(x, precision=10, separator=', ')}")
        if self.message:
            lines.append(f"  {self.message}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------
def _check(model: Model, route: str) -> None:
    if not isinstance(model, Model):
        raise ValueError(f"extremum: model must be a Model, got {type(model).__name__}")
    if model.attention == "normalized":
        raise ValueError("extremum: normalised attention (SA) is not supported: its flow is not the gradient "
                         "flow of the energy in the Wasserstein metric (use attention='unnormalized')")
    p = model.perceptron
    if p is not None and not p.is_gradient:
        raise ValueError("extremum: a general-form perceptron (vector weights w) has no potential, so no energy "
                         "to extremise: not supported")
    if model.noise != 0.0:
        raise ValueError(f"extremum: noise {model.noise:g} > 0 is not supported: with noise the flow descends "
                         "E + nu ∫ rho log rho, not the energy E")
    if route not in ROUTES:
        raise ValueError(f"extremum: route must be one of {ROUTES}, got {route!r}")
    if route == "relu-qp" and (p is None or p.activation != "relu" or np.any(p.b != 0.0)):
        raise ValueError("extremum: route 'relu-qp' (the main paper §3.3) needs a ReLU perceptron without biases")
    if route == "relu-qp" and model.flow == "descent":
        raise ValueError("extremum: route 'relu-qp' is the ascent's (maxima of V); descent uses the exchange "
                         "method")
    if model.flow == "descent" and p is not None and model.attention != "none" and np.any(p.c != 0.0):
        if p.activation == "linear":
            raise ValueError("extremum: descent with a linear activation is not supported: V is a quadratic "
                             "polynomial and the minimiser can have a density (main paper, Remark 5.5), "
                             "which atoms do not represent")
        if len(symmetry_algebra(model)):
            raise ValueError("extremum: descent with a perceptron invariant under a continuous group of rotations "
                             "(its directions span fewer than d - 1 dimensions) is not supported: the minimiser "
                             "is invariant too (Prop. 3.7 (ii)), so not atomic")


def _pair_top(model: Model) -> float:
    """gamma g(1) / 2: the pair term of a Dirac (0 without attention)."""
    if model.attention == "none":
        return 0.0
    return 0.5 * model.strength * float(model.energy_kernel(np.ones(1))[0])


def _no_potential(model: Model) -> bool:
    return model.perceptron is None or not np.any(model.perceptron.c != 0.0)


# ----------------------------------------------------------------------------------------------
# the extreme of V (ascent; descent without attention)
# ----------------------------------------------------------------------------------------------
def _potential_extreme(model: Model, sign: float, route: str, spacing: float | None) -> dict:
    """max V (sign +1) or min V (sign -1) with a maximiser (minimiser) and a proven bound."""
    p = model.perceptron
    d = model.d
    out: dict[str, Any] = {"evaluations": 0, "finished": True}
    methods = []
    candidates = []
    upper = math.inf                          # proven upper bound on max (sign V)
    qp_ok = sign > 0 and p.activation == "relu" and not np.any(p.b != 0.0)
    if route in ("relu-qp",) or (route == "auto" and qp_ok):
        from .landscape_relu import relu_maximum
        qp = relu_maximum(p)
        candidates.append(qp.maximisers)
        upper = min(upper, qp.upper)
        methods.append("relu-qp")
        out["programs"] = qp.programs
    if route == "grid" or (route == "auto" and not qp_ok):
        lo, hi = p.curvature_bounds()
        kappa = hi if sign > 0 else -lo                     # f = -sign V: f'' >= -kappa
        spacing = spacing or _coarsest(d, 0.1)
        none = model.replace(attention="none", flow="ascent")

        def hess(x):
            return -sign * field_jacobian(none, x[:1], np.ones(1), at=x)

        def fgh(x):
            return -sign * p.potential(x), -sign * p.drift(x), hess(x)

        def fg(x):
            return -sign * p.potential(x), -sign * p.drift(x)

        grid = cube_sphere_points(d, spacing)
        vals = -sign * p.potential(grid)
        start = grid[np.argsort(vals)[:min(32, len(grid))]]
        xs, _ = newton_minimum(fgh, start)
        candidates.append(xs)
        cand = np.concatenate(candidates)
        cert = certified_minimum(fg, d, kappa, tol=CERT_TOL * max(1.0, p.magnitude()), spacing=spacing,
                                 error=_round_off(none, 0), candidates=cand, hessian=hess,
                                 third=p.third_derivative_bound(), smooth=_kink_free(model))
        upper = min(upper, -cert.lower)
        candidates.append(cert.argmin[None, :])
        out["evaluations"], out["finished"] = cert.evaluations, cert.finished
        methods.append("grid")
    cand = np.concatenate(candidates)
    vals = sign * p.potential(cand)
    best = int(np.argmax(vals))
    out["x"] = cand[best] / np.linalg.norm(cand[best])
    out["value"] = float(sign * p.potential(out["x"][None, :])[0])         # sign V at x, evaluated once more
    out["upper"] = max(upper, out["value"])
    near = vals >= out["upper"] - (out["upper"] - out["value"]) * 2.0 - 1e-15
    keep: list = []
    for x in cand[near][np.argsort(-vals[near])]:
        x = x / np.linalg.norm(x)
        if all(np.linalg.norm(x - y) > 1e-7 for y in keep):
            keep.append(x)
    out["maximisers"] = np.array(keep)
    out["method"] = "+".join(methods)
    return out


def _dirac_result(model, kind, x, pe, t0, message) -> Extremum:
    x = np.asarray(x, dtype=float)[None, :]
    w = np.ones(1)
    energy = model.energy_direct(x, w)
    gap = max(0.0, pe["upper"] - pe["value"])
    v = model.velocity_direct(x, x, w)
    return Extremum(kind=kind, positions=x, masses=w, energy=energy, gap=gap, method=pe["method"], model=model,
                    level=pe["upper"] if kind == "maximum" else -pe["upper"], argmin=x[0],
                    maximisers=pe["maximisers"], max_speed=float(np.linalg.norm(v)),
                    evaluations=pe["evaluations"], finished=pe["finished"], wall=time.perf_counter() - t0,
                    message=message, extra={k: pe[k] for k in ("programs",) if k in pe})


# ----------------------------------------------------------------------------------------------
# descent with attention
# ----------------------------------------------------------------------------------------------
def _uniform_part(d: int) -> ContinuousPart:
    """sigma on a quadrature grid: equispaced on S^1 (exact for trigonometric degree < 64), Gauss-Legendre in
    cos(theta) x equispaced in phi on S^2 (exact to degree 63); for d > 3 no nodes."""
    if d == 2:
        th = 2.0 * np.pi * np.arange(64) / 64
        nodes = np.stack([np.cos(th), np.sin(th)], axis=1)
        weights = np.full(64, 1.0 / 64)
    elif d == 3:
        z, wz = np.polynomial.legendre.leggauss(32)
        ph = 2.0 * np.pi * np.arange(64) / 64
        Z, P = np.meshgrid(z, ph, indexing="ij")
        s = np.sqrt(1.0 - Z ** 2)
        nodes = np.stack([s * np.cos(P), s * np.sin(P), Z], axis=-1).reshape(-1, 3)
        weights = (wz[:, None] / 2.0 / 64 * np.ones((1, 64))).reshape(-1)
    else:
        nodes, weights = np.zeros((0, d)), np.zeros(0)
    return ContinuousPart(mass=1.0, description="uniform: density 1 w.r.t. sigma", nodes=nodes, weights=weights,
                          density=np.ones(len(weights)))


def _coarsest(d: int, spacing: float) -> float:
    """``spacing``, widened so that the first grid has at most ``MAX_GRID`` points (2 d n0^{d-1}): in d >= 4
    the branch and bound starts coarser and refines where it must."""
    n0 = math.ceil(2.0 / spacing)
    cap = max(1, int((MAX_GRID / (2 * d)) ** (1.0 / (d - 1))))
    return spacing if n0 <= cap else 2.0 / cap


def _descent_spacing(model: Model) -> float:
    width = 1.0 / math.sqrt(max(model.beta, 1e-300))
    if model.d == 2:
        return min(0.05, 0.25 * width)
    return _coarsest(model.d, min(0.1, 0.5 * width))


def kernel_third_bound(model: Model) -> float:
    """M with |d^3/ds^3 gamma g(<x(s), y>)| <= M along unit-speed great circles (any y): with K =
    exp(beta (t - 1)), t''' = -t', h''' = K t' (beta^2 t'^2 - 3 beta t - 1), bounded by beta^2 + 3 beta + 1
    (|t'| <= 1, K <= 1); for t >= 0 also, with u = 1 - t, t'^2 <= 2u and v = beta u, by
    sqrt(2 / beta) (2 beta max_v e^{-v} v^{3/2} + (3 beta + 1) max_v e^{-v} v^{1/2}), the maxima
    (3 / (2e))^{3/2} = 0.40991 and (1 / (2e))^{1/2} = 0.42888; for t < 0 by e^{-beta} (beta^2 + 3 beta + 1).
    At beta = 0, g = t - 1: |t'| <= 1."""
    if model.attention == "none":
        return 0.0
    b = model.beta
    if b == 0.0:
        return model.strength
    crude = b * b + 3.0 * b + 1.0
    fine = max(math.sqrt(2.0 / b) * (2.0 * 0.40992 * b + 0.42889 * (3.0 * b + 1.0)), math.exp(-b) * crude)
    return model.strength * min(crude, fine) * (1.0 + 1e-12)


def _round_off(model: Model, k: int) -> tuple[float, float, float]:
    """Bounds (f, |grad f|, |Hess f|) on the round-off of Phi (less its constant) at one point, for k atoms:
    sums of k kernel terms (|g - g(1)| <= 2, |K P y| <= 1, |beta K| <= beta) and m perceptron terms (bounded
    by ``Perceptron.magnitude`` and the curvature bounds), each with a few roundings (dot products of length
    d, exp, the normalisation of x), by the n u bound on sums in any order, widened fourfold."""
    u = np.finfo(float).eps / 2.0
    d = model.d
    gamma = model.strength if model.attention != "none" else 0.0
    p = model.perceptron
    mag = p.magnitude() if p is not None else 0.0
    curv = max(abs(c) for c in p.curvature_bounds()) if p is not None else 0.0
    m = p.units if p is not None else 0
    nk, nm = k + 2 * d + 6, m + 2 * d + 6
    return (4.0 * u * (3.0 * gamma * nk + nm * mag), 4.0 * u * (3.0 * gamma * nk + nm * mag),
            4.0 * u * (3.0 * gamma * (model.beta + 2.0) * nk + nm * (mag + curv)))


def _kink_free(model: Model) -> Callable | None:
    """For ReLU: a test of which cells (centres x, radii r) cross no kink <a_k, x> + b_k = 0 of a unit with
    c_k != 0 (the angle from a_k to x differs from arccos(-b_k) by more than r); None for smooth activations."""
    p = model.perceptron
    if p is None or p.activation != "relu":
        return None
    units = [(a, math.acos(-b)) for a, b, c in zip(p.a, p.b, p.c) if c != 0.0 and abs(b) <= 1.0]

    def smooth(x: np.ndarray, r: np.ndarray) -> np.ndarray:
        ok = np.ones(len(x), bool)
        for a, theta in units:
            angle = arc_lengths(x, a)
            ok &= np.abs(angle - theta) > r * (1.0 + 1e-9) + 1e-12
        return ok

    return smooth


def _certify_phi(model: Model, x: np.ndarray, w: np.ndarray, *, spacing: float, tol: float,
                 collect_below: float | None):
    """The certificate of min Phi_mu over the sphere for mu = sum w_i delta_{x_i} (module docstring)."""
    p = model.perceptron
    gamma = model.strength
    lo, _ = p.curvature_bounds()
    kappa = gamma - lo
    third = kernel_third_bound(model) + p.third_derivative_bound()
    err = _round_off(model, len(x))
    chunk = max(256, 4_000_000 // (len(x) * model.d * model.d))

    def fg(y):
        return model.first_variation_direct(y, x, w)

    def hess(y):
        return model.sign * np.concatenate([field_jacobian(model, x, w, at=y[s:s + chunk])
                                            for s in range(0, len(y), chunk)])

    return certified_minimum(fg, model.d, kappa, tol=tol, spacing=spacing, error=err, candidates=x,
                             collect_below=collect_below, hessian=hess, third=third, smooth=_kink_free(model)), err


def _settle(model: Model, x: np.ndarray, w: np.ndarray, scale: float):
    """slide, then Newton's polish; an atom whose mass the polish drives below 0 is dropped and the masses
    re-solved. Returns (x, w, NewtonAtoms of the last polish)."""
    nt = None
    for _ in range(20):
        x, w, _ = slide(model, x, w, tol=1e-13 * scale)
        nt = newton_atoms(model, x, w, tol=1e-14 * scale)
        if nt.dropped is None:
            x, w = nt.x, nt.w / nt.w.sum()
            if len(x) > 1:
                # two atoms that met hold one atom's mass between them, in a direction Newton leaves alone
                xm, wm = merge_atoms(x, w, COINCIDE)
                if len(xm) < len(x):
                    nt = newton_atoms(model, xm, wm, tol=1e-14 * scale)
                    x, w = nt.x, nt.w / nt.w.sum()
            return x, w, nt
        keep = np.ones(len(x), bool)
        keep[nt.dropped] = False
        A, v = qp_data(model, x[keep])
        ws = simplex_qp(A, v, w[keep])
        x, w = x[keep][ws > 0], ws[ws > 0] / ws[ws > 0].sum()
    return x, w, nt


def _descent(model: Model, spacing: float | None, target: float, t0: float) -> Extremum:
    p = model.perceptron
    d = model.d
    spacing = spacing or _descent_spacing(model)
    pool = cube_sphere_points(d, spacing)
    x = pool[[int(np.argmin(p.potential(pool)))]]
    w = np.ones(1)
    scale = model.strength + p.magnitude()
    x, w, _ = exchange(model, pool, x, w, tol=1e-14 * scale, radius=2.5 * spacing)
    cert, nt, err = None, None, None
    evaluations, rounds = 0, 0
    notes = []
    for rounds in range(1, MAX_ROUNDS + 1):
        x, w, nt = _settle(model, x, w, scale)
        phi_x, _ = model.first_variation_direct(x, x, w)
        lam = float(w @ phi_x)
        cert, err = _certify_phi(model, x, w, spacing=spacing, tol=CERT_TOL * scale,
                                 collect_below=lam - max(1e3 * CERT_TOL * scale, 1e-11 * scale))
        evaluations += cert.evaluations
        gap = lam - cert.lower + err[0]
        if gap <= target or len(cert.below) == 0 or rounds == MAX_ROUNDS:
            break
        # the certificate found Phi below the level: those points join the support and the masses re-solve
        order = np.argsort(cert.below_f)
        new: list = []
        for y in cert.below[order]:
            if all(np.linalg.norm(y - z) > 0.25 * spacing for z in new):
                new.append(y)
            if len(new) >= 16:
                break
        xs = np.concatenate([x, np.array(new)])
        A, v = qp_data(model, xs)
        ws = simplex_qp(A, v, np.concatenate([w, np.zeros(len(new))]))
        x, w = xs[ws > 0], ws[ws > 0] / ws[ws > 0].sum()
        notes.append(f"{lam - cert.upper:.2g}")
    phi_x, _ = model.first_variation_direct(x, x, w)
    lam = float(w @ phi_x)
    gap = max(0.0, lam - cert.lower + err[0])
    energy = model.energy_direct(x, w)
    v = model.velocity_direct(x, x, w)
    const = 2.0 * _pair_top(model)                                # gamma g(1): Phi's constant
    polish = "" if nt is None else (f"Newton residual {nt.residual:.2g}" if nt.converged
                                    else f"Newton not converged (residual {nt.residual:.2g})")
    message = (f"{len(x)} atoms after {rounds} round(s)"
               + (f" (the certificate found Phi below the level by {', '.join(notes)} and added points)"
                  if notes else "") + f"; {polish}; gap {gap:.3g}" + ("" if gap <= target else f" > target {target:g}"))
    return Extremum(kind="minimum", positions=x, masses=w, energy=energy, gap=gap,
                    method="exchange+newton+grid", model=model, level=lam + const,
                    lower_phi=cert.lower + const, argmin=cert.argmin,
                    max_speed=float(np.max(np.linalg.norm(v, axis=1))), evaluations=evaluations,
                    finished=cert.finished, rounds=rounds, wall=time.perf_counter() - t0, message=message)


# ----------------------------------------------------------------------------------------------
# the entry point
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExtremumSpec:
    """One search for the global extremum (:func:`extremum`), checked (:meth:`resolve`): the model, the route of
    the ascent's max V, the grid's first spacing (None: from beta) and the descent's target gap."""

    model: Model
    route: str = "auto"
    spacing: float | None = None
    target: float = TARGET_GAP

    @classmethod
    def resolve(cls, model: Model, route: str = "auto", spacing: float | None = None,
                target: float = TARGET_GAP) -> "ExtremumSpec":
        """The spec of ``extremum(model, route=, spacing=, target=)``; ValueError for what it does not cover."""
        _check(model, route)
        return cls(model=model, route=route, spacing=spacing, target=float(target))

    def solve(self) -> Extremum:
        """The extremum (:func:`extremum`)."""
        t0 = time.perf_counter()
        # small dense matrices only (Hessians of a few hundred unknowns): a second BLAS thread gains nothing and
        # on a busy machine stalls each call
        with blas_threads(1):
            return _extremum(self.model, self.route, self.spacing, self.target, t0)


def extremum(model: Model, *, route: str = "auto", spacing: float | None = None,
             target: float = TARGET_GAP) -> Extremum:
    """The global extremum of the energy of ``model`` over all probability measures (module docstring).

    Parameters
    ----------
    model : Model
        USA (or no) attention, a gradient-form perceptron or none, no noise; any d >= 2 (the grid routes cost
        more with d: S^1 and S^2 are their home; ReLU ascent has the §3.3 route in any d).
    route : {"auto", "grid", "relu-qp"}
        Ascent: how max V is proven ("auto": the §3.3 quadratic programs for ReLU without biases, exact in
        any d; otherwise the grid).
    spacing : float, optional
        The grid's first spacing (radians; default from beta: a quarter of the kernel width 1/sqrt(beta) on
        S^1, a half on S^2, at most 0.05 / 0.1).
    target : float
        Descent: rounds of exchange, Newton and certificate continue until the gap is below this (or
        ``MAX_ROUNDS``).

    Returns
    -------
    Extremum
    """
    return ExtremumSpec.resolve(model, route, spacing, target).solve()


def _extremum(model: Model, route: str, spacing: float | None, target: float, t0: float) -> Extremum:
    d = model.d
    kind = "minimum" if model.flow == "descent" else "maximum"
    top = _pair_top(model)
    if model.flow == "ascent" or model.attention == "none":
        if _no_potential(model):
            if model.flow == "descent":                       # attention 'none', E = 0: every measure
                return Extremum(kind=kind, positions=np.eye(d)[:1], masses=np.ones(1), energy=0.0, gap=0.0,
                                method="any measure", model=model, wall=time.perf_counter() - t0,
                                message="E = 0 for every measure (no attention, no potential)")
            x = np.eye(d)[:1]
            return Extremum(kind=kind, positions=x, masses=np.ones(1), energy=model.energy_direct(x, np.ones(1)),
                            gap=0.0, method="any Dirac", model=model, level=0.0, argmin=x[0],
                            wall=time.perf_counter() - t0,
                            message="no potential: every Dirac is a maximiser, E* = gamma g(1) / 2")
        sign = 1.0 if model.flow == "ascent" else -1.0
        pe = _potential_extreme(model, sign, route, spacing)
        what = "max" if sign > 0 else "min"
        msg = (f"E* = {'gamma g(1) / 2 + ' if top else ''}{what} V; {what} V = {sign * pe['value']:.15g}, "
               f"{len(pe['maximisers'])} {what}imiser(s) found")
        return _dirac_result(model, kind, pe["x"], pe, t0, msg)
    if _no_potential(model):
        g0 = float(model.energy_multipliers(0)[0])
        energy = 0.5 * model.strength * g0
        part = _uniform_part(d)
        return Extremum(kind=kind, positions=np.zeros((0, d)), masses=np.zeros(0), energy=energy, gap=0.0,
                        method="uniform", model=model, continuous=part, level=model.strength * g0,
                        lower_phi=model.strength * g0, wall=time.perf_counter() - t0,
                        message="no potential: the minimiser is sigma (Prop. 3.7 (ii)), E* = gamma lambda_0 / (2 beta)")
    return _descent(model, spacing, target, t0)
