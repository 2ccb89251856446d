"""PDE <-> particles: distances between rho_t and the empirical measure, atoms matched, concentration.

:func:`compare` evaluates, at the snapshot times the two runs share (a run configuration with a
[compare] table aligns them: both solvers save at the same times):

- ``w1`` (S^1 only): the exact 1-Wasserstein distance on the circle (arc length), from the CDFs:
  W1 = min_c ∫ |F - G - c| dtheta, F the PDE's CDF (exact from its coefficients), G the particles';
- ``mmd``: the kernel distance MMD^2 = ∬ k d(rho - mu) d(rho - mu) with the positive-definite kernel
  k(x, y) = exp(kappa(<x,y> - 1)), computed spectrally: sum_l lambda_l(kappa) sum_m |rho_lm - mu_lm|^2
  (coefficients w.r.t. sigma-orthonormal harmonics, lambda_l the Funk–Hecke multipliers of k);
- ``moment_gap``: max over 1 <= l <= L of |rho_lm - mu_lm| (same normalisation);
- ``cdf_drift`` (S^1 only): max_i |F_t(theta_i(t)) - F_0(theta_i(0))| — the exact flow keeps each
  particle's CDF value, so this measures how far the particles are from characteristics of the PDE;
- ``energy_gap``: |E[rho_t] - E[mu_t]|;
- ``matched_atoms``: at the last common time, PDE atoms and particle clusters paired one to one
  (Hungarian assignment on geodesic distance), with position error and mass difference.

:func:`concentration` measures, per snapshot and per solver, the mass within r of the final atoms,
the effective support (measure of the smallest union of cells of a fixed partition carrying 1 - eps
of the mass) and ∫ rho^2 on that partition.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from spectral.multipliers import kernel_bandwidth, zonal_multipliers

__all__ = ["Comparison", "compare", "circle_w1", "concentration", "compare_into_archive", "describe_comparison"]


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

    def summary(self) -> str:
        i = -1
        parts = [f"t = {self.t[i]:.4g}:"]
        if self.w1 is not None:
            parts.append(f"W1 {self.w1[i]:.3e}")
        parts += [f"MMD {self.mmd[i]:.3e}", f"moment gap (l <= {self.moments_degree}) {self.moment_gap[i]:.3e}",
                  f"energy gap {self.energy_gap[i]:.3e}"]
        if self.cdf_drift is not None:
            parts.append(f"CDF drift {self.cdf_drift[i]:.3e}")
        lines = ["  ".join(parts)]
        for p in self.matched_atoms:
            lines.append(f"  atom {p['pde_mass']:.4f} <-> cluster {p['particle_mass']:.4f}: position error "
                         f"{p['position_error']:.3e} rad, mass difference {p['mass_difference']:+.4f}")
        if self.unmatched_pde or self.unmatched_particles:
            lines.append(f"  unmatched: {len(self.unmatched_pde)} PDE atom(s), "
                         f"{len(self.unmatched_particles)} cluster(s)")
        return "\n".join(lines)


def _common_times(tp: np.ndarray, tq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (i, j) with tp[i] == tq[j] up to 1e-9 relative."""
    ii, jj = [], []
    for i, t in enumerate(tp):
        j = int(np.argmin(np.abs(tq - t)))
        if abs(tq[j] - t) <= 1e-9 * max(1.0, abs(t)):
            ii.append(i)
            jj.append(j)
    return np.array(ii, dtype=int), np.array(jj, dtype=int)


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
    pairs, un_p, un_q = [], list(range(len(mp))), list(range(len(mq)))
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


def compare(pde, particles, *, moments: int = 8, mmd_beta: float = 4.0, atom_threshold: float = 10.0,
            cluster_scale: float = 0.5, atom_tol: float | None = None, min_mass: float = 0.01) -> Comparison:
    """Compare a PDEResult and a ParticleResult of the same model at their common snapshot times.

    Parameters
    ----------
    moments : largest degree L of the moment gap
    mmd_beta : kappa of the MMD kernel exp(kappa(<x,y> - 1))
    atom_threshold, cluster_scale : how atoms (PDE) and clusters (particles) are found
    atom_tol : largest geodesic distance of a matched pair (default: the cluster radius
        min(scale / sqrt(beta), pi / (2 d)))
    min_mass : atoms and clusters lighter than this are left out of the matching
    """
    from .pde import space_for

    model = pde.model
    if particles.x.shape[-1] != model.d:
        raise ValueError("the PDE and the particles live on spheres of different dimensions")
    space = space_for(model.d)[1]
    ip, iq = _common_times(np.asarray(pde.t), np.asarray(particles.t))
    if ip.size == 0:
        raise ValueError("the PDE and particle runs share no snapshot time: save both at the same times "
                         "(same save_every, and a particle dt that divides it)")
    Lk = kernel_bandwidth(mmd_beta, model.d, 1e-16) if mmd_beta > 0 else 1
    lam = zonal_multipliers(mmd_beta, model.d, Lk)
    T = ip.size
    w1 = np.full(T, np.nan) if model.d == 2 else None
    cdf_drift = np.full(T, np.nan) if model.d == 2 else None
    mmd, mgap, egap = np.empty(T), np.empty(T), np.empty(T)
    w = np.asarray(particles.w, dtype=float)
    F0 = None
    if model.d == 2:
        th0 = np.arctan2(particles.x[iq[0], :, 1], particles.x[iq[0], :, 0])
        F0 = space.cdf(pde.coefficients(int(ip[0])), th0)
    for n, (i, j) in enumerate(zip(ip, iq)):
        c = pde.coefficients(int(i))
        x = particles.x[j]
        L = _space_degree(space, max(Lk, moments))
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
        if model.d == 2:
            th = np.arctan2(x[:, 1], x[:, 0])
            w1[n] = circle_w1(c, th, w)
            cdf_drift[n] = float(np.abs(_wrap01(space.cdf(c, th) - F0)).max())
    radius = min(cluster_scale / math.sqrt(model.beta), math.pi / (2 * model.d)) if model.beta > 0 \
        else math.pi / (2 * model.d)
    tol = radius if atom_tol is None else atom_tol
    pa = pde.atoms(int(ip[-1]), threshold=atom_threshold)
    pa = pa.heavy(min_mass) if hasattr(pa, "heavy") else pa
    cent, cm = particles.clusters(int(iq[-1]), scale=cluster_scale)
    keep = cm >= min_mass
    pairs, up, uq = match_atoms((pa.positions, pa.masses), (cent[keep], cm[keep]), tol)
    return Comparison(t=np.asarray(pde.t)[ip], w1=w1, mmd=mmd, moment_gap=mgap, energy_gap=egap,
                      cdf_drift=cdf_drift, matched_atoms=pairs, unmatched_pde=up, unmatched_particles=uq,
                      kernel=f"exp(kappa(<x,y> - 1)), kappa = {mmd_beta:g}", moments_degree=moments,
                      options={"moments": moments, "mmd_beta": mmd_beta, "atom_threshold": atom_threshold,
                               "cluster_scale": cluster_scale, "atom_tol": tol, "min_mass": min_mass})


def _space_degree(space, D: int) -> int:
    """The resolution parameter of ``space`` that holds every harmonic degree <= D
    (the circle counts modes 0..K-1, the sphere degrees 0..L)."""
    return D + 1 if space.d == 2 else D


def _wrap01(d: np.ndarray) -> np.ndarray:
    """CDF differences modulo 1 into [-1/2, 1/2] (the CDF is defined up to the origin on the circle)."""
    return d - np.round(d)


# --- concentration ---------------------------------------------------------------------------------------
def _partition(d: int, n: int):
    """Cell centres (m, d) and cell measures (m,) of a fixed partition of S^{d-1} into about n cells."""
    if d == 2:
        th = -np.pi + 2 * np.pi * (np.arange(n) + 0.5) / n
        return np.stack([np.cos(th), np.sin(th)], 1), np.full(n, 1.0 / n)
    # S^2: equal-area bands in z, equal longitudes per band
    nb = max(2, int(round(math.sqrt(n / 2))))
    z_edges = np.linspace(-1, 1, nb + 1)
    nphi = 2 * nb
    zc = 0.5 * (z_edges[1:] + z_edges[:-1])
    phi = 2 * np.pi * (np.arange(nphi) + 0.5) / nphi
    Z, P = np.meshgrid(zc, phi, indexing="ij")
    r = np.sqrt(1 - Z ** 2)
    pts = np.stack([r * np.cos(P), r * np.sin(P), Z], -1).reshape(-1, 3)
    return pts, np.full(pts.shape[0], 1.0 / pts.shape[0])


def _cell_index(d: int, n: int, x: np.ndarray) -> np.ndarray:
    if d == 2:
        th = np.arctan2(x[:, 1], x[:, 0])
        return np.minimum(((th + np.pi) / (2 * np.pi) * n).astype(int), n - 1)
    nb = max(2, int(round(math.sqrt(n / 2))))
    nphi = 2 * nb
    b = np.minimum(((np.clip(x[:, 2], -1, 1) + 1) / 2 * nb).astype(int), nb - 1)
    ph = np.mod(np.arctan2(x[:, 1], x[:, 0]), 2 * np.pi)
    k = np.minimum((ph / (2 * np.pi) * nphi).astype(int), nphi - 1)
    return b * nphi + k


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

    ``kind`` is "pde" (a PDEResult; masses by quadrature of rho from its coefficients) or "particles".
    The effective support is the measure (fraction of S^{d-1}) of the fewest cells of a fixed partition
    into ``cells`` cells that carry 1 - eps of the mass; ∫ rho^2 is that of the cell-averaged density.
    """
    d = result.model.d if kind == "pde" else result.x.shape[-1]
    centres, area = _partition(d, cells)
    ncell = centres.shape[0]
    A = np.asarray(atoms_positions, dtype=float).reshape(-1, d)
    T = len(result.t)
    near, support, l2 = np.empty(T), np.empty(T), np.empty(T)
    for i in range(T):
        if kind == "pde":
            pts, wts, rho = result.space.quadrature(result.coefficients(i))
            mass = rho * wts
        else:
            pts, mass = result.x[i], np.asarray(result.w, dtype=float)
        if A.size:
            dist = _geodesic(pts, A).min(axis=1)
            near[i] = float(mass[dist <= radius].sum())
        else:
            near[i] = 0.0
        cell_mass = np.bincount(_cell_index(d, cells, pts), weights=mass, minlength=ncell)
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
def compare_into_archive(writer, config) -> Comparison:
    """Compare the archived PDE and particle runs of ``config`` and write /comparison."""
    from .archive import _replace, load
    writer.write_pending()
    writer.f.flush()
    run = load(writer.path)
    opts = dict(config.compare or {})
    cmp = compare(run.pde, run.particles, moments=opts.get("moments", 8), mmd_beta=opts.get("mmd_beta", 4.0),
                  atom_threshold=opts.get("atom_threshold", 10.0), cluster_scale=opts.get("cluster_scale", 0.5),
                  atom_tol=opts.get("atom_tol"))
    g = writer.f.require_group("comparison")
    _replace(g, "t", cmp.t)
    g["t"].make_scale("t")
    for name in ("w1", "mmd", "moment_gap", "energy_gap", "cdf_drift"):
        v = getattr(cmp, name)
        if v is not None:
            _replace(g, name, v)
            g[name].dims[0].attach_scale(g["t"])
    pairs = cmp.matched_atoms
    _replace(g, "matched_pde_positions", np.array([p["pde_position"] for p in pairs]).reshape(-1, config.model.d))
    _replace(g, "matched_particle_positions",
             np.array([p["particle_position"] for p in pairs]).reshape(-1, config.model.d))
    _replace(g, "matched_position_error", np.array([p["position_error"] for p in pairs], dtype=float))
    _replace(g, "matched_pde_mass", np.array([p["pde_mass"] for p in pairs], dtype=float))
    _replace(g, "matched_particle_mass", np.array([p["particle_mass"] for p in pairs], dtype=float))
    g.attrs["kernel"] = cmp.kernel
    g.attrs["moments_degree"] = cmp.moments_degree
    g.attrs["unmatched_pde"] = len(cmp.unmatched_pde)
    g.attrs["unmatched_particles"] = len(cmp.unmatched_particles)
    for k, v in cmp.options.items():
        g.attrs[f"option_{k}"] = v
    # concentration of both solvers around their own final atoms
    radius = cmp.options["atom_tol"]
    for kind, res, atoms in (("pde", run.pde, run.atoms.get("pde")), ("particles", run.particles,
                                                                      run.atoms.get("particles"))):
        if res is None or atoms is None:
            continue
        heavy = atoms[0][atoms[1] >= 0.01]
        con = concentration(res, heavy, radius, kind=kind)
        cg = g.require_group(f"concentration_{kind}")
        _replace(cg, "t", con["t"])
        for k in ("mass_near_atoms", "effective_support", "l2"):
            _replace(cg, k, con[k])
        cg.attrs["radius"] = radius
        cg.attrs["eps"] = con["eps"]
        cg.attrs["cells"] = con["cells"]
        cg.attrs["statement"] = concentration_statement(con["t"], con["mass_near_atoms"], len(heavy), radius)
    writer.f.flush()
    return cmp


def describe_comparison(run) -> list[str]:
    """Lines for ``attnpde info`` about the comparison and the concentration of each solver."""
    c = run.comparison
    out = ["comparison (PDE vs particles):"]
    t = c.get("t")
    if t is not None and len(t):
        parts = [f"at t = {t[-1]:.4g}:"]
        for k, label in (("w1", "W1"), ("mmd", "MMD"), ("moment_gap", "moment gap"), ("energy_gap", "energy gap"),
                         ("cdf_drift", "CDF drift")):
            if k in c:
                parts.append(f"{label} {c[k][-1]:.3e}")
        out.append("  " + "  ".join(parts))
        out.append(f"  kernel {c.get('attr:kernel', '')}; moments up to degree {c.get('attr:moments_degree', '')}")
    pe, pm, qm = c.get("matched_position_error"), c.get("matched_pde_mass"), c.get("matched_particle_mass")
    if pe is not None:
        out.append(f"  matched atoms: {len(pe)} (unmatched: {c.get('attr:unmatched_pde', 0)} PDE atom(s), "
                   f"{c.get('attr:unmatched_particles', 0)} cluster(s))")
        for e, a, b in zip(pe, pm, qm):
            out.append(f"      PDE {a:.4f} vs particles {b:.4f} (difference {b - a:+.4f}), position error {e:.2e} rad")
    import h5py
    from .archive import open_archive
    with open_archive(run.path) as f:
        for kind in ("pde", "particles"):
            name = f"comparison/concentration_{kind}"
            if name in f:
                out.append(f"  {kind}: {f[name].attrs['statement']}")
    del h5py
    return out


def plot_comparison(run, out) -> list:
    """Distances against time (log scale) and the concentration measures of both solvers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from .archive import open_archive

    c = run.comparison
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    for k, label in (("w1", "W1"), ("mmd", "MMD"), ("moment_gap", "moment gap"), ("energy_gap", "energy gap"),
                     ("cdf_drift", "CDF drift")):
        if k in c:
            ax.semilogy(c["t"], np.maximum(c[k], 1e-17), "o-", ms=3, label=label)
    ax.set_xlabel("time t")
    ax.set_title("PDE vs particles", fontsize=10)
    ax.legend(fontsize=8)
    ax = axes[1]
    with open_archive(run.path) as f:
        for kind, style in (("pde", "-"), ("particles", "--")):
            name = f"comparison/concentration_{kind}"
            if name in f:
                g = f[name]
                ax.plot(g["t"][()], g["mass_near_atoms"][()], style, label=f"{kind}: mass within r of final atoms")
                ax.plot(g["t"][()], g["effective_support"][()], style, label=f"{kind}: effective support (95%)")
    ax.set_xlabel("time t")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("concentration", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "comparison.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
