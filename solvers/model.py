"""The model: attention (USA / SA / none) plus a perceptron drift on S^{d-1} (docs/model.md §1).

:class:`Model` holds the parameters and defines, once for every solver, the velocity field and the
energy of a measure; :class:`VonMisesFisher` is an initial density with an exact sampler.

Notes
-----
Every solver describes the measure it evolves through two fields, evaluated at points x:

    Psi(x) = ∫ exp(beta(<x,y> - 1)) dmu(y)                 (kernel sum, > 0)
    G(x)   = ∫ exp(beta(<x,y> - 1)) P_x y dmu(y) = grad Psi / beta   (tangent, finite at beta = 0)

and :meth:`Model.velocity` turns them into the velocity field — the one definition both the PDE and
the particle solver use:

    USA:  v = s (gamma G + grad V)
    SA:   v = s (G / Psi + grad V)
    none: v = s grad V

(s = +1 ascent, -1 descent; grad V is the perceptron drift, or u in the general form).
The energy is defined likewise once, from the pair integral A = ∬ g(<x,y>) dmu dmu with
g(t) = exp(beta(t-1)) / beta (g(t) = t - 1 at beta = 0) and the potential integral P = ∫ V dmu:

    E = (gamma / 2) A + P     (USA; SA reports the same with gamma = 1; 'none' reports P).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spectral.multipliers import BETA_MAX, BETA_MAX_WHY, MIN_BETA, potential_multipliers, zonal_multipliers
from . import validators as check
from .perceptron import Perceptron, tangent_project

__all__ = ["Model", "FLOWS", "ATTENTIONS", "VonMisesFisher", "unit_vector", "BETA_MAX", "KAPPA_MAX"]

FLOWS = ("ascent", "descent")
ATTENTIONS = ("unnormalized", "normalized", "none")

#: the largest von Mises-Fisher concentration: Wood's sampler works with b ~ (d - 1) / (4 kappa), a normal double
#: (with all its digits) only for kappa below ~1e307; the density exp(kappa (<x, mu> - 1)) is finite for any
#: such kappa (1e300 is far beyond any resolution: its width 1/sqrt(kappa) = 1e-150 rad)
KAPPA_MAX = 1e300
KAPPA_MAX_WHY = ("Wood's sampler keeps the digits of b ~ (d - 1)/(4 kappa) while it is a normal double, "
                 "up to ~1e307")


def unit_vector(v) -> np.ndarray:
    """v / |v| without overflow or underflow (entries up to 1.8e308, down to 5e-324): scaled by its largest
    absolute entry first, so that the direction of [1e308, 1e308] is (1, 1)/sqrt 2 (its norm overflows)
    and that of [1e-320, 1e-320] too (its squares underflow). v must be finite and non-zero."""
    v = np.asarray(v, dtype=float)
    top = np.max(np.abs(v), axis=-1, keepdims=True)
    u = v / top
    return u / np.linalg.norm(u, axis=-1, keepdims=True)


def density_values(density, x: np.ndarray, name: str = "density") -> np.ndarray:
    """Values (n,) of a density callable at the unit vectors x (n, d), checked: one finite value >= 0
    per point (returned as an array of any shape with n entries and at most 2 dimensions)."""
    vals = np.asarray(density(x), dtype=float)
    if vals.size != x.shape[0] or vals.ndim > 2:
        raise ValueError(f"{name} must return one value per point ({x.shape[0]}), got shape {np.shape(vals)}")
    vals = vals.reshape(-1)
    if not np.all(np.isfinite(vals)):
        raise ValueError(f"{name} returned non-finite values")
    if vals.min() < 0:
        raise ValueError(f"{name} must be >= 0, got a minimum of {vals.min():.3g}")
    return vals


class VonMisesFisher:
    """The von Mises–Fisher density rho(x) = exp(kappa (<x, mu> - 1)) w.r.t. sigma on S^{d-1}
    (unnormalised, 1 at its mode ``mu``), callable on unit vectors (n, d) like any initial density, with an
    exact sampler (:meth:`sample`), so that i.i.d. particles of a concentrated one cost O(n) instead of a
    rejection against sigma, whose proposals grow like kappa^{(d-1)/2}.

    Parameters
    ----------
    mu : array (d,)
        The mode (any non-zero vector; normalised).
    kappa : float
        Concentration, >= 0 (0: uniform).
    """

    def __init__(self, mu, kappa: float) -> None:
        mu = np.asarray(mu, dtype=float).reshape(-1)
        if mu.size < 2 or not np.all(np.isfinite(mu)) or not np.any(mu != 0):
            raise ValueError(f"VonMisesFisher: mu must be a finite non-zero vector of >= 2 entries, got {mu}")
        if not check.is_number(kappa) or not (math.isfinite(kappa) and 0 <= kappa <= KAPPA_MAX):
            raise ValueError(f"VonMisesFisher: kappa must be a finite number >= 0 and <= {KAPPA_MAX:g} "
                             f"({KAPPA_MAX_WHY}), got {kappa!r}")
        self.mu, self.kappa, self.d = unit_vector(mu), float(kappa), mu.size

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.exp(self.kappa * (np.asarray(x) @ self.mu - 1.0))

    def __repr__(self) -> str:
        return f"VonMisesFisher(mu={self.mu.tolist()}, kappa={self.kappa:g})"

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n i.i.d. unit vectors (n, d) of density rho * sigma (normalised), by Wood's algorithm (Wood 1994,
        "Simulation of the von Mises Fisher distribution"): w = <x, mu> by rejection from a Beta proposal
        (acceptance above 0.6 for every kappa and d), then a uniform direction orthogonal to mu."""
        d, k = self.d, self.kappa
        q = d - 1.0
        # b = (-2 kappa + sqrt(4 kappa^2 + q^2)) / q, written without the cancellation at large kappa; the
        # acceptance test kappa (w - x0) + q log((1 - x0 w) / (1 - x0^2)) >= log u with x0 = (1 - b) / (1 + b)
        # is written in 1 - x0 and 1 - w, which keep their digits when both round to 1 (kappa up to 1e300)
        r = (q / 2.0) / k if k > q / 2.0 else None
        b = q / (2.0 * k + math.hypot(2.0 * k, q)) if r is None else r / (1.0 + math.hypot(1.0, r))
        x0 = (1.0 - b) / (1.0 + b)
        one_minus_x0 = 2.0 * b / (1.0 + b)
        log_1_x0sq = math.log(4.0 * b) - 2.0 * math.log1p(b)            # log(1 - x0^2)
        w, one_minus_w, have = np.empty(n), np.empty(n), 0
        while have < n:
            m = max(64, int(1.7 * (n - have)))
            z = rng.beta(q / 2.0, q / 2.0, m)
            den = 1.0 - (1.0 - b) * z
            wc = (1.0 - (1.0 + b) * z) / den
            omw = 2.0 * b * z / den                                        # 1 - w
            lhs = k * (one_minus_x0 - omw) + q * (np.log(one_minus_x0 + x0 * omw) - log_1_x0sq)
            ok = lhs >= np.log(rng.uniform(size=m))
            take = min(int(ok.sum()), n - have)
            w[have:have + take] = wc[ok][:take]
            one_minus_w[have:have + take] = omw[ok][:take]
            have += take
        v = rng.standard_normal((n, d - 1))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        x = np.concatenate([np.sqrt(one_minus_w * (1.0 + w))[:, None] * v, w[:, None]], axis=1)
        # the Householder reflection that maps e_d to mu (the orthogonal part is uniform: either orientation)
        u = np.zeros(d)
        u[-1] = 1.0
        u -= self.mu
        if np.linalg.norm(u) > 1e-15:
            x -= np.outer(x @ u, 2.0 * u / (u @ u))
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def _number(name: str, value) -> float:
    # a real number, as the configuration's check wants it (validators.is_number): no bool, and no string,
    # which float() would have turned into a number here while the configuration refused it
    if not check.is_number(value):
        raise ValueError(f"Model: {name} must be a number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Model:
    """Parameters of the mean-field model (The model §1).

    Parameters
    ----------
    d : int
        Ambient dimension, >= 2 (tokens live on S^{d-1}; 2 is the circle, 3 the sphere).
    beta : float
        Inverse temperature, finite and >= 0.
    flow : {"ascent", "descent"}
        Sign s = +1 / -1 of the whole velocity field.
    attention : {"unnormalized", "normalized", "none"}
        USA, SA (softmax-normalised), or no attention (perceptron drift only).
    strength : float
        Attention strength gamma > 0 (USA only; SA has no strength and requires 1.0).
    perceptron : Perceptron, optional
        The drift; its dimension must equal d.
    noise : float
        Diffusion coefficient nu >= 0 (the PDE gains nu Laplacian rho; particles a Brownian motion).
    """

    d: int
    beta: float
    flow: str
    attention: str = "unnormalized"
    strength: float = 1.0
    perceptron: Perceptron | None = None
    noise: float = 0.0
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check.integer("Model: d", self.d, ge=2)
        object.__setattr__(self, "d", int(self.d))
        beta = _number("beta", self.beta)
        if not (math.isfinite(beta) and beta >= 0):
            raise ValueError(f"Model: beta must be finite and >= 0, got {self.beta!r}")
        if beta > BETA_MAX:
            raise ValueError(f"Model: beta must be <= {BETA_MAX:g} ({BETA_MAX_WHY}), got {self.beta!r}")
        if 0 < beta < MIN_BETA:
            raise ValueError(f"Model: beta must be 0 or >= {MIN_BETA:g} (below, 1/beta overflows: use beta = 0 "
                             f"for the limit), got {self.beta!r}")
        object.__setattr__(self, "beta", beta)
        if self.flow not in FLOWS:
            raise ValueError(f"Model: flow must be one of {FLOWS}, got {self.flow!r}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"Model: attention must be one of {ATTENTIONS}, got {self.attention!r}")
        strength = _number("strength", self.strength)
        if not (math.isfinite(strength) and strength > 0):
            raise ValueError(f"Model: strength must be finite and > 0, got {self.strength!r}")

        if self.attention == "normalized" and strength != 1.0:
            raise ValueError("Model: strength plays no role with attention='normalized' (SA); "
                             f"it must be 1.0, got {self.strength!r}")
        object.__setattr__(self, "strength", strength)
        noise = _number("noise", self.noise)
        if not (math.isfinite(noise) and noise >= 0):
            raise ValueError(f"Model: noise must be finite and >= 0, got {self.noise!r}")
        object.__setattr__(self, "noise", noise)
        if self.perceptron is not None:
            if not isinstance(self.perceptron, Perceptron):
                raise ValueError("Model: perceptron must be a Perceptron or None, got "
                                 f"{type(self.perceptron).__name__}")
            if self.perceptron.d != self.d:
                raise ValueError(f"Model: perceptron dimension {self.perceptron.d} does not match d = {self.d}")

    # --- signs and coefficients -------------------------------------------------------------------
    @property
    def sign(self) -> float:
        """s = +1 for ascent, -1 for descent."""
        return 1.0 if self.flow == "ascent" else -1.0

    @property
    def attention_coefficient(self) -> float:
        """Factor multiplying G (USA) or G / Psi (SA) in the velocity: s gamma, s, or 0 (none)."""
        if self.attention == "none":
            return 0.0
        if self.attention == "normalized":
            return self.sign
        return self.sign * self.strength

    @property
    def drift_coefficient(self) -> float:
        """Factor multiplying the perceptron drift in the velocity: s."""
        return self.sign

    @property
    def normalized(self) -> bool:
        return self.attention == "normalized"

    @property
    def has_energy(self) -> bool:
        """True when the flow is a Wasserstein gradient flow of E in the flat metric (The model §1):
        unnormalised or no attention, gradient-form or no perceptron."""
        return self.attention != "normalized" and (self.perceptron is None or self.perceptron.is_gradient)

    # --- the velocity field (the single definition used by every solver) ---------------------------
    def velocity(self, G: np.ndarray, psi: np.ndarray | float | None, drift: np.ndarray | None,
                 out: np.ndarray | None = None) -> np.ndarray:
        """Velocity from the attention fields and the perceptron drift at the same points.

        Parameters
        ----------
        G : ndarray
            ∫ exp(beta(<x,y>-1)) P_x y dmu(y) at the points (any shape; components or vectors).
        psi : ndarray or float or None
            ∫ exp(beta(<x,y>-1)) dmu(y), broadcastable against G (only used by SA).
        drift : ndarray or None
            Perceptron drift at the points, same shape as G, or None.
        out : ndarray, optional
            Float array of G's shape to hold the result (a solver's buffer, reused on every call): G
            itself (every operation is elementwise), or an array not overlapping G, psi or drift;
            default a new array.

        Returns
        -------
        ndarray
            v = s (gamma G + drift) for USA, s (G / psi + drift) for SA, s drift for 'none':
            s times :meth:`drive`.
        """
        out = self.drive(G, psi, drift, out)
        if self.sign != 1.0:
            np.negative(out, out=out)
        return out

    def drive(self, G: np.ndarray, psi: np.ndarray | float | None, drift: np.ndarray | None,
              out: np.ndarray | None = None) -> np.ndarray:
        """The velocity without the flow's sign: w = gamma G + drift (USA), G / psi + drift (SA), drift
        ('none'), so that v = s w (:meth:`velocity`; arguments as there).

        s = +-1, so s w is exact and a linear operation applied to w then multiplied by s gives the
        values it gives applied to v: the spectral solvers form the flux rho w and put s into the
        divergence's multipliers, one pass over the grid fewer than forming v.
        """
        if out is None:
            out = np.empty(np.shape(G), dtype=np.result_type(G, float))
        if self.attention == "none":
            if drift is None:
                out[...] = 0.0
            else:
                out[...] = drift
            return out
        if self.attention == "normalized":
            np.divide(G, psi, out=out)
        elif self.strength != 1.0:
            np.multiply(G, self.strength, out=out)
        elif drift is not None:
            return np.add(G, drift, out=out)
        else:
            out[...] = G
        if drift is not None:
            out += drift
        return out

    @property
    def drive_gain(self) -> float | None:
        """gamma when :meth:`drive` is affine in G, w = gamma G + drift (USA: the strength), else None (SA
        divides by Psi; 'none' has no G). A solver that forms w in compiled code (``affine_flux`` of
        ``solvers._compiled``: gamma G, then + drift, as :meth:`drive` does) takes gamma from here."""
        return self.strength if self.attention == "unnormalized" else None

    def drift(self, x: np.ndarray) -> np.ndarray | None:
        """Perceptron drift at unit vectors x (n, d), or None without a perceptron."""
        return None if self.perceptron is None else self.perceptron.drift(x)

    def potential(self, x: np.ndarray) -> np.ndarray:
        """Perceptron potential V at unit vectors x (n, d); zero without a perceptron.

        Raises for a general-form perceptron, which has no potential.
        """
        x = np.asarray(x, dtype=float)
        if self.perceptron is None:
            return np.zeros(x.shape[0])
        return self.perceptron.potential(x)

    # --- the kernel and its multipliers -------------------------------------------------------------
    def kernel(self, t: np.ndarray) -> np.ndarray:
        """The attention kernel exp(beta (t - 1)) of the cosine t = <x, y>."""
        return np.exp(self.beta * (np.asarray(t, dtype=float) - 1.0))

    def energy_kernel(self, t: np.ndarray, relative: bool = False) -> np.ndarray:
        """g(t) = exp(beta (t-1)) / beta for beta > 0, t - 1 at beta = 0 (the pair term of E).

        ``relative``: g(t) - g(1) = expm1(beta (t - 1)) / beta (t - 1 at beta = 0), without the cancellation
        of the constant 1 / beta: in [-2, 0], and on probability measures the same energy less gamma g(1) / 2.
        """
        t = np.asarray(t, dtype=float)
        if self.beta == 0.0:
            return t - 1.0
        if relative:
            return np.expm1(self.beta * (t - 1.0)) / self.beta
        return np.exp(self.beta * (t - 1.0)) / self.beta

    def kernel_multipliers(self, lmax: int) -> np.ndarray:
        """Funk–Hecke multipliers lambda_l of the kernel on S^{d-1}, l = 0..lmax (cached)."""
        key = ("lambda", lmax)
        if key not in self._cache:
            self._cache[key] = zonal_multipliers(self.beta, self.d, lmax)
        return self._cache[key]

    def energy_multipliers(self, lmax: int) -> np.ndarray:
        """Funk–Hecke multipliers of g (the energy kernel): lambda_l / beta, or the beta = 0 limits.

        For l >= 1 these are also the multipliers taking rho to Phi with grad Phi = G."""
        key = ("g", lmax)
        if key not in self._cache:
            self._cache[key] = potential_multipliers(self.beta, self.d, lmax)
        return self._cache[key]

    # --- energy ----------------------------------------------------------------------------------
    def energy(self, pair: float, potential: float) -> float:
        """E = (gamma/2) A + P from A = ∬ g(<x,y>) dmu dmu and P = ∫ V dmu (The model §1).

        With SA the same expression is reported with gamma = 1; with no attention, E = P.
        """
        if self.attention == "none":
            return float(potential)
        gamma = 1.0 if self.normalized else self.strength
        return float(0.5 * gamma * pair + potential)

    # --- direct evaluation against a weighted point set (reference; O(n N)) ------------------------
    def fields_direct(self, x: np.ndarray, y: np.ndarray, w: np.ndarray,
                      block: int = 2048) -> tuple[np.ndarray, np.ndarray]:
        """Psi(x) and G(x) for mu = sum_j w_j delta_{y_j}, by blocked direct summation.

        Memory is bounded by ``block`` x len(y) entries; cost is O(len(x) len(y) d).
        """
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        w = np.asarray(w, dtype=float)
        psi = np.empty(x.shape[0])
        Gy = np.empty_like(x)
        for s in range(0, x.shape[0], block):
            K = self.kernel(x[s:s + block] @ y.T) * w
            psi[s:s + block] = K.sum(axis=1)
            Gy[s:s + block] = K @ y
        return psi, tangent_project(x, Gy)

    def velocity_direct(self, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        """v[mu](x) for mu = sum_j w_j delta_{y_j}, by direct summation (the reference)."""
        if self.attention == "none":
            G, psi = np.zeros_like(np.asarray(x, dtype=float)), None
        else:
            psi, G = self.fields_direct(x, y, w)
            psi = psi[:, None]
        return self.velocity(G, psi, self.drift(x))

    def velocity_at_atoms(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        """v[mu](x_i) at the atoms of mu = sum_j w_j delta_{x_j} themselves, by direct summation with each
        atom's own term exact (P_x x = 0, K(x, x) = 1): summed, it would add round-off of its own size, which
        can be far larger than the forces between atoms far apart."""
        x = np.asarray(x, dtype=float)
        w = np.asarray(w, dtype=float)
        if self.attention == "none":
            return self.velocity(np.zeros_like(x), None, self.drift(x))
        K = self.kernel(x @ x.T) * w
        np.fill_diagonal(K, 0.0)
        psi = (K.sum(axis=1) + w)[:, None]
        return self.velocity(tangent_project(x, K @ x), psi, self.drift(x))

    def first_variation_direct(self, x: np.ndarray, y: np.ndarray, w: np.ndarray,
                               block: int = 2048) -> tuple[np.ndarray, np.ndarray]:
        """The first variation of E at mu = sum_j w_j delta_{y_j} and its gradient, at unit vectors x (n, d).

        Phi_mu(x) = dE/dmu (x) = gamma ∫ g(<x, y>) dmu(y) + V(x) (USA; V alone with attention 'none'), so that
        E(nu) - E(mu) = ∫ Phi_mu d(nu - mu) + (gamma/2) ∬ g d(nu - mu) d(nu - mu) and the velocity is
        v = s grad Phi_mu. Returned less its constant part gamma g(1) mu(S) (:meth:`energy_kernel` with
        ``relative``), which keeps its digits at small beta (g(1) = 1/beta).

        Returns
        -------
        phi : ndarray (n,)
            Phi_mu(x) - gamma g(1) sum_j w_j.
        grad : ndarray (n, d)
            The tangent gradient gamma G + grad V (G as in :meth:`fields_direct`).
        """
        if not self.has_energy:
            raise ValueError("the first variation exists for a gradient flow only (USA or no attention, "
                             "gradient-form or no perceptron)")
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        w = np.asarray(w, dtype=float)
        phi = self.potential(x) if self.perceptron is not None else np.zeros(x.shape[0])
        grad = np.zeros_like(x) if self.perceptron is None else self.perceptron.drift(x)
        if self.attention == "none":
            return phi, grad
        gamma = self.strength
        Gy = np.empty_like(x)
        for s in range(0, x.shape[0], block):
            t = x[s:s + block] @ y.T
            phi[s:s + block] += gamma * (self.energy_kernel(t, relative=True) @ w)
            Gy[s:s + block] = (self.kernel(t) * w) @ y
        grad += gamma * tangent_project(x, Gy)
        return phi, grad

    def energy_direct(self, y: np.ndarray, w: np.ndarray, block: int = 2048) -> float:
        """E of mu = sum_j w_j delta_{y_j} by direct summation of the pair term."""
        y = np.asarray(y, dtype=float)
        w = np.asarray(w, dtype=float)
        pair = 0.0
        if self.attention != "none":
            for s in range(0, y.shape[0], block):
                pair += float(w[s:s + block] @ (self.energy_kernel(y[s:s + block] @ y.T) @ w))
        pot = float(w @ self.potential(y)) if self.perceptron is not None and self.perceptron.is_gradient else 0.0
        return self.energy(pair, pot)

    # --- description -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Every parameter (perceptron weights as arrays), for archives."""
        out = {"d": self.d, "beta": self.beta, "flow": self.flow, "attention": self.attention,
               "strength": self.strength, "noise": self.noise}
        out["perceptron"] = None if self.perceptron is None else self.perceptron.to_dict()
        return out

    def replace(self, **changes) -> "Model":
        """A copy with some parameters changed (validated again)."""
        params: dict[str, Any] = {"d": self.d, "beta": self.beta, "flow": self.flow, "attention": self.attention,
                  "strength": self.strength, "perceptron": self.perceptron, "noise": self.noise}
        params.update(changes)
        return Model(**params)
