"""PDE <-> particles: distances between rho_t and the empirical measure, atoms matched, concentration.

What the comparison tells and how to read it: docs/numerics.md, "Particles against the PDE".

Notes
-----
:func:`compare` evaluates, at the snapshot times the two runs share (a run configuration with a
[compare] table aligns them: both solvers save at the same times):

- ``w1`` (S^1 only): the exact 1-Wasserstein distance on the circle (arc length), from the CDFs:
  W1 = min_c ∫ |F - G - c| dtheta, F the PDE's CDF (exact from its coefficients), G the particles';
- ``mmd``: the kernel distance MMD^2 = ∬ k d(rho - mu) d(rho - mu) with the positive-definite kernel
  k(x, y) = exp(b (<x,y> - 1)) with b = ``mmd_beta``, computed spectrally: sum_l lambda_l(b) sum_m
  |rho_lm - mu_lm|^2
  (coefficients w.r.t. sigma-orthonormal harmonics, lambda_l the Funk–Hecke multipliers of k);
- ``moment_gap``: max over 1 <= l <= L of |rho_lm - mu_lm| (same normalisation);
- ``cdf_drift`` (S^1 only): max_i |F_t(theta_i(t)) - F_0(theta_i(0))| — the exact flow keeps each
  particle's CDF value, so this measures how far the particles are from characteristics of the PDE
  (nan past the PDE's handoff to its node measure, whose CDF jumps at its atoms);
- ``energy_gap``: |E[rho_t] - E[mu_t]|;
- ``matched_atoms``: at the last common time, the atoms of both measures found by one and the same
  procedure (:func:`common_atoms`), paired one to one (Hungarian assignment on geodesic distance),
  with position error and the masses both measures put within ``atom_radius`` of their own atom.

Past the handoff (``PDEResult.nodes``) the PDE is a node measure: W1 is then exact between two point
sets, and its atoms and cap masses are those of its points; its coefficients are exact (moments, MMD).

Atoms of the two measures are defined identically, so that they can be compared while either is still
partly diffuse: both measures are smoothed by the heat kernel at angular scale ``smoothing`` (multipliers
exp(-mu_l h^2 / 2), mu_l = k^2 on S^1, l(l+1) on S^2; the particles' coefficients are exact sums
over the particles); an atom is a connected component of {smoothed density >= atom_threshold}
(uniform = 1), its position the density-weighted mean direction of the component; its mass is that
of the *unsmoothed* measure within geodesic distance ``atom_radius`` of that position (for the PDE
exact: the CDF on S^1, Funk–Hecke cap multipliers on S^2; for the particles, the sum of their weights).
Single-linkage clusters (The model §5) are not used here: on a partly collapsed cloud they chain through
the diffuse part (they are what the archive's /atoms/particles and the stopping rule use).

:func:`concentration` measures, per snapshot and per solver, the mass within r of the final atoms,
the effective support (measure of the smallest union of cells of a fixed partition carrying 1 - eps
of the mass) and ∫ rho^2 on that partition.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spectral.multipliers import kernel_bandwidth, zonal_multipliers

__all__ = ["terminal_atoms", "Comparison", "ValidationResult", "METRICS", "compare", "common_times", "circle_w1",
           "circle_w1_points", "concentration", "concentration_statement", "common_atoms", "measure_atoms", "smoothed"]


@dataclass
class Comparison:
    """Distances between a PDE run and a particle run at their common times (see the module docstring)."""

    t: np.ndarray
    w1: np.ndarray | None
    mmd: np.ndarray
    moment_gap: np.ndarray
    energy_gap: np.ndarray
    cdf_drift: np.ndarray | None
    matched_atoms: list
    unmatched_pde: list
    unmatched_particles: list
    kernel: str
    moments_degree: int
    options: dict = field(default_factory=dict)
    #: per solver ("pde", "particles"), when computed (``compare(..., with_concentration=True)``): the
    #: :func:`concentration` record at the solver's own final atoms ("final_positions", "final_masses")
    #: and its one-line "statement"
    concentration: dict = field(default_factory=dict)

    def heavy_atoms(self, mass: float) -> tuple[list, list, list]:
        """The atoms of mass >= ``mass``: matched pairs where either side reaches it, and the unmatched
        PDE and particle atoms that reach it. An atom lighter than a mass tolerance cannot be told from
        no atom at that tolerance; this is the part of the matching such a tolerance can judge."""
        pairs = [p for p in self.matched_atoms if max(p["pde_mass"], p["particle_mass"]) >= mass]
        return (pairs, [a for a in self.unmatched_pde if a[1] >= mass],
                [a for a in self.unmatched_particles if a[1] >= mass])

    def summary(self) -> str:
        """The comparison as text: the distances at the last common time, the matched atoms, and the
        concentration statements (what ``attnpde info`` prints)."""
        lines = []
        if len(self.t):
            t = self.t[-1]
            parts = [f"at t = {t:.4g}:"]
            for name, label in (("w1", "W1"), ("mmd", "MMD"), ("moment_gap", "moment gap"),
                                ("energy_gap", "energy gap"), ("cdf_drift", "CDF drift")):
                v = getattr(self, name)
                if v is None:
                    continue
                if name == "cdf_drift" and math.isnan(v[-1]):
                    # not computed there (module docstring): say why rather than print nan
                    parts.append(f"{label} - (PDE past its handoff: its CDF jumps at atoms)")
                else:
                    parts.append(f"{label} {v[-1]:.3e}")
            lines.append("  ".join(parts))
            lines.append(f"kernel {self.kernel}; moments up to degree {self.moments_degree}")
            r = self.options.get("atom_radius", float("nan"))
            h = self.options.get("smoothing", float("nan"))
            # the rule is named: `attnpde info` lists other atoms too (the PDE's node groups, the particles'
            # clusters), which count other mass
            lines.append(f"matched atoms at t = {t:.4g}: {len(self.matched_atoms)} (unmatched: "
                         f"{len(self.unmatched_pde)} PDE, {len(self.unmatched_particles)} particle atom(s)); "
                         f"one rule for both measures: density peaks (smoothed at {h:.3g} rad), each atom's mass "
                         f"the mass within {r:.3g} rad of its peak:")
            for p in self.matched_atoms:
                lines.append(f"    PDE {p['pde_mass']:.4f} vs particles {p['particle_mass']:.4f} (difference "
                             f"{p['mass_difference']:+.4f}), position error {p['position_error']:.2e} rad")
            for kind, unmatched in (("PDE", self.unmatched_pde), ("particle", self.unmatched_particles)):
                for _, m in unmatched:
                    lines.append(f"    {kind} atom {m:.4f} without a partner within {r:.3g} rad")
        for kind in ("pde", "particles"):
            if kind in self.concentration:
                lines.append(f"{kind}: {self.concentration[kind]['statement']}")
        return "\n".join(lines)


#: the distances of a :class:`Comparison` that a convergence study (``attnpde validate``) follows in N
METRICS = ("w1", "mmd", "moment_gap", "energy_gap")


@dataclass
class ValidationResult:
    """A convergence study of the particles to the PDE (:func:`solvers.app.validate.validate`): the
    distances ``distances[metric]`` of shape (nN, nS, T) for the particle counts ``n``, the seeds ``seeds``
    and the common times ``t``; the time ``at`` of the fit, the fitted slopes of log mean distance against
    log N (metric -> slope), the text table, and the archive it was read from (or None)."""

    n: np.ndarray
    seeds: np.ndarray
    t: np.ndarray
    distances: dict
    at: float
    slopes: dict
    table: str
    path: Path | None = None


def common_times(tp: np.ndarray, tq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (i, j) with tp[i] == tq[j] up to 1e-9 relative (max(1, |t|)), j the nearest of the ascending
    times ``tq`` (the earlier of two as near): the times two runs are compared at (``compare``, and the
    configuration's check of a [compare] before either runs)."""
    tp, tq = np.asarray(tp, dtype=float), np.asarray(tq, dtype=float)
    if tp.size == 0 or tq.size == 0:
        return np.zeros(0, dtype=int), np.zeros(0, dtype=int)
    hi = np.clip(np.searchsorted(tq, tp), 0, tq.size - 1)
    lo = np.maximum(hi - 1, 0)
    j = np.where(np.abs(tq[lo] - tp) <= np.abs(tq[hi] - tp), lo, hi)
    i = np.nonzero(np.abs(tq[j] - tp) <= 1e-9 * np.maximum(1.0, np.abs(tp)))[0]
    return i, j[i]


def circle_w1(c: np.ndarray, theta: np.ndarray, w: np.ndarray, npoints: int | None = None) -> float:
    """Exact (to quadrature of a smooth CDF) W1 on the unit circle between rho (coefficients c) and
    sum_i w_i delta_{theta_i}: min_c ∫_{-pi}^{pi} |F - G - c| dtheta, in radians.

    F - G is evaluated at the breakpoints (a fine grid and every particle), linear pieces in between:
    |.| is integrated exactly on each piece (with its zero crossing), c is the weighted median.
    """
    from .pde_circle import CircleSpace

    theta = np.mod(np.asarray(theta, dtype=float) + np.pi, 2 * np.pi) - np.pi
    order = np.argsort(theta)
    th, wt = theta[order], np.asarray(w, dtype=float)[order]
    n = npoints or max(8 * np.shape(c)[-1], 1 << 14)
    grid = -np.pi + 2 * np.pi * np.arange(n + 1) / n
    # left and right limits at every particle: G jumps there
    pts = np.concatenate([grid, th])
    kind = np.concatenate([np.zeros(n + 1, int), np.ones(th.size, int)])
    o = np.lexsort((kind, pts))
    pts, kind = pts[o], kind[o]
    F = CircleSpace.cdf(c, pts)
    G_after = np.cumsum(np.where(kind == 1, np.concatenate([np.zeros(n + 1), wt])[o], 0.0))
    G_before = G_after - np.where(kind == 1, np.concatenate([np.zeros(n + 1), wt])[o], 0.0)
    # on [pts[k], pts[k+1]] G is constant = G_after[k]; F is linear to second order
    a = F[:-1] - G_after[:-1]
    b = F[1:] - G_after[:-1]
    h = np.diff(pts)
    mid = 0.5 * (a + b)
    c_opt = _weighted_median(mid, h)
    a, b = a - c_opt, b - c_opt
    same = a * b >= 0
    area = np.where(same, 0.5 * h * np.abs(a + b),
                    0.5 * h * (a * a + b * b) / np.where(same, 1.0, np.abs(a) + np.abs(b)))
    del G_before
    return float(area.sum())


def _point_cdf(theta: np.ndarray, w: np.ndarray, at: np.ndarray) -> np.ndarray:
    """F(a) = sum of the weights at angles <= a, angles in [-pi, pi) (a discrete measure's CDF from -pi)."""
    theta = np.mod(np.asarray(theta, dtype=float) + np.pi, 2 * np.pi) - np.pi
    o = np.argsort(theta)
    cw = np.concatenate([[0.0], np.cumsum(np.asarray(w, dtype=float)[o])])
    return cw[np.searchsorted(theta[o], np.asarray(at, dtype=float), side="right")]


def circle_w1_points(theta_a: np.ndarray, w_a: np.ndarray, theta_b: np.ndarray, w_b: np.ndarray) -> float:
    """Exact W1 on the unit circle between two discrete measures: min_c ∫ |F_a - F_b - c| dtheta, F_a - F_b
    piecewise constant between the points, c the weighted median of its values."""
    pts = np.sort(np.mod(np.concatenate([theta_a, theta_b]) + np.pi, 2 * np.pi) - np.pi)
    edges = np.concatenate([[-np.pi], pts, [np.pi]])
    mid = 0.5 * (edges[:-1] + edges[1:])
    diff = _point_cdf(theta_a, w_a, mid) - _point_cdf(theta_b, w_b, mid)
    h = np.diff(edges)
    return float(np.sum(h * np.abs(diff - _weighted_median(diff, h))))


def _weighted_median(v: np.ndarray, wts: np.ndarray) -> float:
    o = np.argsort(v)
    cw = np.cumsum(wts[o])
    return float(v[o][np.searchsorted(cw, 0.5 * cw[-1])])


def _geodesic(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return np.arccos(np.clip(p @ q.T, -1.0, 1.0))


def match_atoms(pde_atoms, clusters, tol: float) -> tuple[list, list, list]:
    """Pair PDE atoms with particle clusters one to one (minimal total geodesic distance)."""
    from scipy.optimize import linear_sum_assignment

    (P, mp), (Q, mq) = pde_atoms, clusters
    pairs: list[dict[str, Any]] = []
    un_p, un_q = list(range(len(mp))), list(range(len(mq)))
    if len(mp) and len(mq):
        D = _geodesic(np.asarray(P), np.asarray(Q))
        rows, cols = linear_sum_assignment(D)
        for i, j in zip(rows, cols):
            if D[i, j] <= tol:
                pairs.append({"pde_position": np.asarray(P[i]), "particle_position": np.asarray(Q[j]),
                              "position_error": float(D[i, j]), "pde_mass": float(mp[i]),
                              "particle_mass": float(mq[j]), "mass_difference": float(mq[j] - mp[i])})
                un_p.remove(i)
                un_q.remove(j)
    pairs.sort(key=lambda p: -p["pde_mass"])
    return pairs, [(np.asarray(P[i]), float(mp[i])) for i in un_p], [(np.asarray(Q[j]), float(mq[j])) for j in un_q]


def terminal_atoms(atoms, x: np.ndarray, w: np.ndarray, cluster_radius: float, *, cap: float = 0.05,
                   min_mass: float = 0.01) -> dict:
    """The PDE's terminal atoms (``PDEResult.atoms()`` past the continuation) against a particle state
    (x, w) at its own end (converged, or wherever it stopped): terminal states, not forming pieces.

    Returns a dict: "cap_masses" — for each atom of mass >= ``min_mass``, the particle mass within
    ``cap`` radians of it (what the particles put where the PDE has the atom); "outside" — (centre, mass)
    of the single-linkage clusters at ``cluster_radius`` of the particles outside every such cap, of mass
    >= ``min_mass``: the particles' atoms that the PDE does not have (or mass it keeps diffuse);
    "pairs", "unmatched_pde", "unmatched_particles" — :func:`match_atoms` of the PDE's atoms with the
    clusters of all the particles (paired within ``cap``). A cluster of all the particles can chain two
    PDE atoms through a few stray particles and then matches neither, so "outside" is the measure of a
    different atomic state, not "unmatched_particles".
    """
    from .atoms import single_linkage_clusters

    x, w = np.asarray(x), np.asarray(w)
    keep = atoms.masses >= min_mass
    P, m = atoms.positions[keep], atoms.masses[keep]
    centres, cmass, _ = single_linkage_clusters(x, w, cluster_radius)
    heavy = cmass >= min_mass
    pairs, un_p, un_q = match_atoms((P, m), (centres[heavy], cmass[heavy]), cap)
    away = np.all(x @ P.T < math.cos(cap), axis=1) if len(P) else np.ones(len(x), bool)
    outside = []
    if away.any():
        oc, om, _ = single_linkage_clusters(x[away], w[away], cluster_radius)
        outside = [(np.asarray(c), float(q)) for c, q in zip(oc, om) if q >= min_mass]
    return {"cap_masses": _particle_cap_mass(x, w, P, cap).tolist(), "pde_masses": m.tolist(), "outside": outside,
            "pairs": pairs, "unmatched_pde": un_p, "unmatched_particles": un_q}


def compare(pde, particles, *, moments: int = 8, mmd_beta: float = 4.0, atom_threshold: float = 10.0,
            atom_radius: float | None = None, smoothing: float | None = None, min_mass: float = 0.01,
            cluster_scale: float = 0.5, with_concentration: bool = False) -> Comparison:
    """Compare a PDEResult and a ParticleResult of the same model at their common snapshot times.

    Parameters
    ----------
    moments : largest degree L of the moment gap
    mmd_beta : b of the MMD kernel exp(b (<x,y> - 1))
    atom_threshold : density level (uniform = 1) of the smoothed measures that makes an atom
    atom_radius : radius (rad) of the cap whose mass is an atom's mass, and largest position error of a
        matched pair; default min(cluster radius min(cluster_scale / sqrt(beta), pi / (2 d)), 0.1)
    smoothing : heat-kernel scale h (rad) of the atom detection; default atom_radius / 4
    min_mass : atoms whose cap mass is below this are left out (in either measure)
    with_concentration : also measure each solver's concentration over all its snapshots, around its own
        final atoms found by the same procedure (``Comparison.concentration``)
    """
    from .pde import space_for

    model = pde.model
    if particles.x.shape[-1] != model.d:
        raise ValueError("the PDE and the particles live on spheres of different dimensions")
    space = space_for(model.d)[1]
    ip, iq = common_times(pde.t, particles.t)
    if ip.size == 0:
        raise ValueError("the PDE and particle runs share no snapshot time: save both at the same times "
                         "(same save_every, and a particle dt that divides it)")
    Lk = kernel_bandwidth(mmd_beta, model.d, 1e-16) if mmd_beta > 0 else 1
    lam = zonal_multipliers(mmd_beta, model.d, Lk)
    T = ip.size
    w1 = np.full(T, np.nan) if space.has_cdf else None
    cdf_drift = np.full(T, np.nan) if space.has_cdf else None
    mmd, mgap, egap = np.empty(T), np.empty(T), np.empty(T)
    w = np.asarray(particles.w, dtype=float)
    F0 = None
    # past the handoff the PDE is a node measure: its coefficients are exact (moments, MMD), but its
    # CDF, cap masses and atoms are those of its points, not of its truncated series
    nodes = {int(i): pde.node_measure(int(i)) for i in ip} if getattr(pde, "nodes", None) else {}
    def angle(p):
        return np.arctan2(p[:, 1], p[:, 0])
    if space.has_cdf and nodes.get(int(ip[0])) is None:
        F0 = space.cdf(pde.coefficients(int(ip[0])), angle(particles.x[iq[0]]))
    for n, (i, j) in enumerate(zip(ip, iq)):
        c = pde.coefficients(int(i))
        x = particles.x[j]
        L = space.degree_holding(max(Lk, moments))
        nc = space.ncoef(L)
        cp = np.zeros(nc, dtype=complex)
        cp[: min(nc, c.size)] = c[: min(nc, c.size)]
        cq = space.particle_coefficients(x, w, L)
        diff = cp - cq
        ldeg = space.harmonic_degree(L)
        mult = space.multiplicity(L)
        scale = math.sqrt(space.sigma_factor)                    # -> sigma-orthonormal coefficients
        lam_i = np.where(ldeg <= Lk, lam[np.minimum(ldeg, Lk)], 0.0)
        mmd[n] = math.sqrt(max(float(np.sum(lam_i * mult * np.abs(diff) ** 2) * space.sigma_factor), 0.0))
        low = (ldeg >= 1) & (ldeg <= moments)
        mgap[n] = float(np.abs(diff[low]).max() * scale) if low.any() else 0.0
        e_p = float(particles.energy[j]) if particles.energy is not None else np.nan
        egap[n] = abs(float(pde.energy[i]) - e_p)
        if space.has_cdf:
            th = angle(x)
            node = nodes.get(int(i))
            if node is None:
                w1[n] = circle_w1(c, th, w)
                cdf_drift[n] = float(np.abs(_wrap01(space.cdf(c, th) - F0)).max())
            else:
                # the CDF drift stays nan: the CDF of a measure with atoms jumps at them, so its value at
                # a particle 1e-7 rad beside an atom says nothing about the flow
                w1[n] = circle_w1_points(angle(node.x), node.w, th, w)
    radius, h = atom_scales(model, atom_radius, smoothing, cluster_scale)
    last = nodes.get(int(ip[-1]))
    if last is None:
        pa, qa = common_atoms(space, pde.coefficients(int(ip[-1])), particles.x[iq[-1]], w,
                              threshold=atom_threshold, radius=radius, smoothing=h, min_mass=min_mass)
    else:
        kw: dict[str, Any] = dict(degree=int(pde.degree[int(ip[-1])]), threshold=atom_threshold, radius=radius,
                                  smoothing=h, min_mass=min_mass)
        pa = measure_atoms(space, x=last.x, w=last.w, **kw)
        qa = measure_atoms(space, x=particles.x[iq[-1]], w=w, **kw)
    pairs, up, uq = match_atoms((pa.positions, pa.masses), (qa.positions, qa.masses), radius)
    conc = {}
    if with_concentration:
        akw = dict(threshold=atom_threshold, radius=radius, smoothing=h, min_mass=min_mass)
        conc = {kind: _concentration_at_final_atoms(space, res, kind, akw)
                for kind, res in (("pde", pde), ("particles", particles)) if len(res.t)}
    return Comparison(concentration=conc, t=np.asarray(pde.t)[ip], w1=w1, mmd=mmd, moment_gap=mgap, energy_gap=egap,
                      cdf_drift=cdf_drift, matched_atoms=pairs, unmatched_pde=up, unmatched_particles=uq,
                      kernel=f"exp(mmd_beta (<x,y> - 1)), mmd_beta = {mmd_beta:g}", moments_degree=moments,
                      options={"moments": moments, "mmd_beta": mmd_beta, "atom_threshold": atom_threshold,
                               "atom_radius": radius, "smoothing": h, "min_mass": min_mass,
                               "cluster_scale": cluster_scale})


def _concentration_at_final_atoms(space, res, kind: str, akw: dict) -> dict:
    """:func:`concentration` of one solver's run around its own final atoms (found like the compared ones),
    with those atoms and the one-line statement."""
    if kind == "particles":
        final = measure_atoms(space, x=res.x[-1], w=res.w, **akw)
    elif res.node_measure(-1) is not None:
        n = res.node_measure(-1)
        final = measure_atoms(space, x=n.x, w=n.w, degree=int(res.degree[-1]), **akw)
    else:
        final = measure_atoms(space, coeffs=res.coefficients(len(res.t) - 1), **akw)
    radius = akw["radius"]
    con = concentration(res, final.positions, radius, kind=kind)
    con.update(final_positions=np.asarray(final.positions).reshape(-1, space.d),
               final_masses=np.asarray(final.masses, dtype=float),
               statement=concentration_statement(con["t"], con["mass_near_atoms"], len(final.masses), radius))
    return con


def atom_scales(model, atom_radius: float | None = None, smoothing: float | None = None,
                cluster_scale: float = 0.5, check: bool = True) -> tuple[float, float]:
    """The (atom_radius, smoothing) of :func:`compare` with their defaults filled in; ValueError unless both are
    finite and > 0 (``check``)."""
    from .particles import cluster_radius

    radius = min(cluster_radius(model.beta, model.d, cluster_scale), 0.1) if atom_radius is None else float(atom_radius)
    h = radius / 4.0 if smoothing is None else float(smoothing)
    if check and (not (radius > 0 and math.isfinite(radius)) or not (h > 0 and math.isfinite(h))):
        raise ValueError(f"atom_radius and smoothing must be finite and > 0, got {radius!r}, {h!r}")
    return radius, h


def smoothed(space, c: np.ndarray, h: float) -> np.ndarray:
    """Coefficients of the heat-kernel smoothing of a measure at angular scale h: c * exp(-mu h^2 / 2),
    mu = k^2 on S^1 and l(l+1) on S^2 (the Laplace–Beltrami eigenvalues; the kernel is the heat kernel
    at time h^2 / 2, whose angular spread is about h)."""
    return space.heat_smooth(c, h)


def _particle_cap_mass(x: np.ndarray, w: np.ndarray, p: np.ndarray, r: float) -> np.ndarray:
    cos_r = math.cos(min(r, np.pi))
    return np.array([float(w[x @ q >= cos_r].sum()) for q in np.asarray(p).reshape(-1, x.shape[1])])


def measure_atoms(space, *, coeffs: np.ndarray | None = None, x: np.ndarray | None = None,
                  w: np.ndarray | None = None, degree: int | None = None, threshold: float = 10.0,
                  radius: float = 0.1, smoothing: float = 0.025, min_mass: float = 0.01):
    """Atoms of one measure — a PDE density (``coeffs``) or weighted particles (``x``, ``w``) — by the
    procedure of the module docstring: smoothing at scale ``smoothing`` with coefficients up to the
    degree where its multiplier falls below e^-32 (at most ``degree``, default the PDE's own or 512
    on S^1, 255 on S^2 for particles), components of {smoothed >= threshold}, mass within ``radius``
    of each position; atoms lighter than ``min_mass`` dropped. Returns :class:`~solvers.atoms.Atoms`."""
    from .atoms import Atoms

    cut = int(math.ceil(8.0 / smoothing)) + 1     # exp(-mu h^2 / 2) < e^-32 beyond mu = 64 / h^2
    if coeffs is not None:
        c = np.asarray(coeffs)
        D = min(space.degree_of(c.size), cut if degree is None else min(cut, degree))
        cs = smoothed(space, np.array(c[:space.ncoef(D)]), smoothing)
        def mass_of(P):
            return space.cap_mass(c, P, radius)
    else:
        x = np.asarray(x, dtype=float)
        w = np.asarray(w, dtype=float)
        D = min(cut, degree if degree is not None else space.default_particle_degree)
        cs = smoothed(space, space.particle_coefficients(x, w, D), smoothing)
        def mass_of(P):
            return _particle_cap_mass(x, w, P, radius)
    lv = space.atoms(cs, threshold=threshold, method="level", smoothing=None)
    masses = mass_of(lv.positions)
    keep = masses >= min_mass
    return Atoms(lv.positions[keep], masses[keep])


def common_atoms(space, c: np.ndarray, x: np.ndarray, w: np.ndarray, *, threshold: float = 10.0,
                 radius: float = 0.1, smoothing: float = 0.025, min_mass: float = 0.01):
    """Atoms of the PDE density (coefficients c) and of the particles (x, w) by :func:`measure_atoms`,
    both smoothed to the same degree (the PDE's, capped where the smoothing makes the rest negligible).
    Returns (pde Atoms, particle Atoms)."""
    D = space.degree_of(np.asarray(c).size)
    kw = dict(degree=D, threshold=threshold, radius=radius, smoothing=smoothing, min_mass=min_mass)
    return measure_atoms(space, coeffs=c, **kw), measure_atoms(space, x=x, w=w, **kw)


def _wrap01(d: np.ndarray) -> np.ndarray:
    """CDF differences modulo 1 into [-1/2, 1/2] (the CDF is defined up to the origin on the circle)."""
    return d - np.round(d)


# --- concentration ---------------------------------------------------------------------------------------
def _measures(cell_mass: np.ndarray, cell_area: np.ndarray, eps: float) -> tuple[float, float]:
    o = np.argsort(-cell_mass / cell_area)
    cm = np.cumsum(cell_mass[o])
    k = int(np.searchsorted(cm, (1 - eps) * cm[-1])) + 1
    support = float(cell_area[o][:k].sum())
    l2 = float(np.sum(cell_mass ** 2 / cell_area))
    return support, l2


def concentration(result, atoms_positions: np.ndarray, radius: float, *, kind: str, eps: float = 0.05,
                  cells: int = 512) -> dict:
    """Per snapshot: mass within ``radius`` of the given atoms, effective support, ∫ rho^2 (on cells).

    ``kind`` is "pde" (a PDEResult; masses by quadrature of rho from its coefficients, or past the handoff
    those of its node measure) or "particles".
    The effective support is the measure (fraction of S^{d-1}) of the fewest cells of a fixed partition
    into ``cells`` cells that carry 1 - eps of the mass; ∫ rho^2 is that of the cell-averaged density.
    """
    from .pde import space_for

    d = result.model.d if kind == "pde" else result.x.shape[-1]
    space = space_for(d)[1]
    centres, area = space.partition(cells)
    ncell = centres.shape[0]
    A = np.asarray(atoms_positions, dtype=float).reshape(-1, d)
    T = len(result.t)
    near, support, l2 = np.empty(T), np.empty(T), np.empty(T)
    for i in range(T):
        nodes = result.node_measure(i) if kind == "pde" else None
        if nodes is not None:                   # past the handoff: the node measure itself
            pts, mass = nodes.x, nodes.w
        elif kind == "pde":
            pts, wts, rho = result.space.quadrature(result.coefficients(i))
            mass = rho * wts
        else:
            pts, mass = result.x[i], np.asarray(result.w, dtype=float)
        if A.size:
            dist = _geodesic(pts, A).min(axis=1)
            near[i] = float(mass[dist <= radius].sum())
        else:
            near[i] = 0.0
        cell_mass = np.bincount(space.cell_index(pts, cells), weights=mass, minlength=ncell)
        support[i], l2[i] = _measures(np.maximum(cell_mass, 0.0), area, eps)
    return {"t": np.asarray(result.t), "mass_near_atoms": near, "effective_support": support, "l2": l2,
            "radius": radius, "eps": eps, "cells": ncell}


def concentration_statement(t: np.ndarray, near: np.ndarray, n_atoms: int, radius: float) -> str:
    """Whether and when a run concentrated, from its mass near the final atoms."""
    if n_atoms == 0 or len(t) == 0:
        return "did not concentrate: no atom at the end"
    final = near[-1]
    k = int(np.argmax(near >= 0.9 * final)) if final > 0 else len(t) - 1
    verdict = "concentrated" if final >= 0.5 else "partly concentrated"
    return (f"{verdict}: {100 * final:.1f}% of the mass within {radius:.3g} rad of {n_atoms} atom(s) at t = "
            f"{t[-1]:.4g}; 90% of that by t = {t[k]:.4g}")


# --- archive glue -------------------------------------------------------------------------------------
