"""PNG figures of an archived run (matplotlib, non-interactive).

S^1: the density as a space-time image (angle against time, log colour scale) with particle
trajectories over it; the final density against the particles' histogram with atoms and clusters
marked; energy (and the solver's diagnostics) against time.
S^2: maps of the density in the Mollweide (equal-area) projection at several times, with particles
on top and atoms marked; energy against time.
"""
from __future__ import annotations

from pathlib import Path

import math

import numpy as np

from .archive import ArchiveError, load

__all__ = ["plot_archive"]


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _angle(x: np.ndarray) -> np.ndarray:
    return np.arctan2(x[..., 1], x[..., 0])


def _title(run) -> str:
    m = run.model
    p = m.perceptron
    perc = "no perceptron" if p is None else f"{p.activation} perceptron ({p.units} units)"
    att = {"unnormalized": "USA", "normalized": "SA", "none": "no attention"}[m.attention]
    name = run.attrs.get("name", "")
    return f"{name + ': ' if name else ''}S^{m.d - 1}, {att}, beta={m.beta:g}, {m.flow}, nu={m.noise:g}, {perc}"


def _nearest(t_all: np.ndarray, t: float) -> int:
    return int(np.argmin(np.abs(np.asarray(t_all) - t)))


def plot_archive(path: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write the figures of the archive at ``path`` into ``out_dir``; return their paths.

    Raises ArchiveError for a file that is not an archive, or an archive without any snapshot.
    """
    run = load(path)
    from .branch import is_branch_archive, load_branch, plot_branch
    if is_branch_archive(path):
        out = Path(out_dir) if out_dir else Path(path).parent
        out.mkdir(parents=True, exist_ok=True)
        from .branch import _title as branch_title
        return [plot_branch(load_branch(path), out / (Path(path).stem + "_branch.png"),
                            branch_title(run.model, run.attrs.get("name", "")))]
    if not any(r is not None and len(r.t) for r in (run.pde, run.particles)):
        # e.g. a run killed before its first snapshot reached the file: every figure would be empty
        raise ArchiveError(f"{path}: no snapshot recorded (status {run.status or 'unknown'}): nothing to plot")
    out = Path(out_dir) if out_dir else Path(path).with_suffix("").with_name(Path(path).stem + "_plots")
    out.mkdir(parents=True, exist_ok=True)
    files = []
    if run.model.d == 2:
        files += _circle_figures(run, out)
    elif run.model.d == 3:
        files += _sphere_figures(run, out)
    files.append(_energy_figure(run, out))
    if run.comparison is not None:
        files.append(plot_comparison(run.comparison, out / "comparison.png"))
    if run.validation is not None:
        files.append(plot_validation(run.validation, out / "validation.png", _title(run)))
    return files


def plot_comparison(cmp, path: Path) -> Path:
    """Distances between the PDE and the particles against time (log scale), and the concentration
    measures of both solvers (``Comparison.concentration``)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    notes = []
    for name, label in (("w1", "W1"), ("mmd", "MMD"), ("moment_gap", "moment gap"), ("energy_gap", "energy gap"),
                        ("cdf_drift", "CDF drift")):
        v = getattr(cmp, name)
        if v is None:
            continue
        # a log axis: zeros (the CDF drift at t = 0) and nan (undefined) are left out, not clamped to a
        # floor that would stretch the axis over decades holding no data
        shown = np.where(np.isfinite(v) & (v > 0), v, np.nan)
        if np.count_nonzero(np.isfinite(shown)) >= 2:
            ax.semilogy(cmp.t, shown, "o-", ms=3, label=label)
        elif name == "cdf_drift" and np.any(np.isnan(v)):
            notes.append("CDF drift: undefined past the PDE's handoff (its CDF jumps at atoms)")
    if notes:
        ax.text(0.02, 0.02, "\n".join(notes), transform=ax.transAxes, fontsize=7, va="bottom")
    ax.set_xlabel("time t")
    ax.set_title("PDE vs particles", fontsize=10)
    if ax.get_lines():
        ax.legend(fontsize=8)
    ax = axes[1]
    for kind, style in (("pde", "-"), ("particles", "--")):
        con = cmp.concentration.get(kind)
        if con is not None:
            ax.plot(con["t"], con["mass_near_atoms"], style, label=f"{kind}: mass within r of final atoms")
            ax.plot(con["t"], con["effective_support"], style, label=f"{kind}: effective support (95%)")
    ax.set_xlabel("time t")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("concentration", fontsize=10)
    if ax.get_lines():                     # an archive written without the concentration measures has none
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def plot_validation(res, path: Path, title: str = "") -> Path:
    """Distances against N on log axes, fitted slopes, and the N^{-1/2} reference."""
    plt = _plt()
    i = int(np.argmin(np.abs(res.t - res.at)))
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    n = res.n.astype(float)
    for k, v in res.distances.items():
        vals = v[:, :, i]
        mean = vals.mean(axis=1)
        line, = ax.loglog(n, mean, "o-", label=f"{k} (slope {res.slopes[k]:.2f})")
        if vals.shape[1] > 1:
            ax.loglog(np.repeat(n, vals.shape[1]), vals.reshape(-1), ".", color=line.get_color(), alpha=0.35)
        ok = np.isfinite(mean) & (mean > 0)
        if ok.sum() >= 2 and math.isfinite(res.slopes[k]):
            b = np.mean(np.log(mean[ok]) - res.slopes[k] * np.log(n[ok]))
            ax.loglog(n, np.exp(b) * n ** res.slopes[k], ":", color=line.get_color(), lw=1)
    ref = [v[:, :, i].mean(axis=1) for v in res.distances.values()]
    top = np.nanmax([r[0] for r in ref])
    ax.loglog(n, top * 1.5 * (n / n[0]) ** -0.5, "k--", lw=1, label="N^-1/2")
    ax.set_xlabel("number of particles N")
    ax.set_ylabel(f"distance to the PDE at t = {res.at:.3g}")
    ax.set_title(title or "particles -> PDE", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)



# --- S^1 ------------------------------------------------------------------------------------------------
def _circle_figures(run, out: Path) -> list[Path]:
    plt = _plt()
    from matplotlib.colors import LogNorm
    files = []
    pde, part = run.pde, run.particles
    if pde is not None:
        th = _angle(pde.grid)
        order = np.argsort(th)
        fig, ax = plt.subplots(figsize=(9, 6))
        dens = np.clip(pde.density[:, order], 1e-3, None)
        T = pde.t
        if len(T) > 1:
            mesh = ax.pcolormesh(th[order], T, dens, shading="nearest", cmap="magma",
                                 norm=LogNorm(vmin=max(1e-2, dens.min()), vmax=max(dens.max(), 1.1)))
            fig.colorbar(mesh, ax=ax, label="rho (uniform = 1)")
        if part is not None:
            sel = np.linspace(0, part.x.shape[1] - 1, min(120, part.x.shape[1])).astype(int)
            ang = _angle(part.x[:, sel, :])
            tt = part.t
            keep = tt <= T[-1] * 1.0000001 if len(T) > 1 else np.ones_like(tt, bool)
            for j in range(len(sel)):
                a = ang[keep, j]
                jumps = np.abs(np.diff(a)) > np.pi   # break the line where it wraps around
                tj = tt[keep].astype(float)
                a_plot = np.insert(a, np.nonzero(jumps)[0] + 1, np.nan)
                t_plot = np.insert(tj, np.nonzero(jumps)[0] + 1, np.nan)
                ax.plot(a_plot, t_plot, color="cyan", lw=0.4, alpha=0.6)
        if "pde" in run.atoms:
            for pos, mass in zip(*run.atoms["pde"]):
                ax.plot(_angle(pos), T[-1], marker="v", color="lime", ms=4 + 20 * mass, mec="k")
        if pde.t_handoff is not None:
            ax.axhline(pde.t_handoff, color="white", ls="--", lw=0.8)
            ax.annotate("handoff: the Lagrangian continuation above (density: its smoothed series)",
                        (-np.pi + 0.1, pde.t_handoff), color="white", fontsize=7, va="bottom")
        ax.set_xlim(-np.pi, np.pi)
        if len(T) > 1:
            ax.set_ylim(T[0], T[-1])
        ax.set_xlabel("angle theta")
        ax.set_ylabel("time t")
        title = "density over time" + (" with particle trajectories (cyan)" if part is not None else "")
        if len(T) < 6:
            # e.g. the default save_every (the first and last states only): a band is not an evolution
            title += f"\nonly {len(T)} snapshots, each band the nearest one: set [pde] save_every for more"
        ax.set_title(title, fontsize=10)
        fig.suptitle(_title(run), fontsize=10)
        files.append(_save(fig, out / "spacetime.png"))

    fig, ax = plt.subplots(figsize=(9, 5))
    if pde is not None:
        th = _angle(pde.grid)
        order = np.argsort(th)
        ax.semilogy(th[order], np.clip(pde.density[-1, order], 1e-4, None), color="C0",
                    label=f"PDE rho at t = {pde.t[-1]:.4g}")
        if "pde" in run.atoms:
            errs = run.atoms.get("pde:mass_errors")
            for k, (pos, mass) in enumerate(zip(*run.atoms["pde"])):
                ax.axvline(_angle(pos), color="C0", ls=":", lw=1)
                label = f"{mass:.3f}" + ("" if errs is None else f"±{errs[k]:.0e}")
                ax.annotate(label, (_angle(pos), 1.5), color="C0", fontsize=8, rotation=90)
            if pde.t_handoff is not None:
                # the terminal atoms of the continuation: stems of height = mass on a second axis
                pos, mass = run.atoms["pde"]
                ax2 = ax.twinx()
                if len(mass):
                    ax2.stem(_angle(pos), mass, linefmt="C2-", markerfmt="C2o", basefmt=" ")
                ax2.set_ylim(0, 1.05 * max(1.0, float(np.max(mass, initial=0))))
                diffuse = run.atoms.get("pde:attrs", {}).get("diffuse", float("nan"))
                ax2.set_ylabel(f"PDE atom mass (stems; diffuse mass {diffuse:.3f})", color="C2")
    if part is not None:
        i = _nearest(part.t, pde.t[-1]) if pde is not None else -1
        ang = _angle(part.x[i])
        bins = np.linspace(-np.pi, np.pi, 201)
        h, _ = np.histogram(ang, bins=bins, weights=part.w)
        dens = h / np.diff(bins) * 2 * np.pi      # density w.r.t. the uniform probability measure
        ax.stairs(np.clip(dens, 1e-4, None), bins, color="C1", label=f"particles (N = {part.x.shape[1]}) at t = {part.t[i]:.4g}")
        for pos, mass in zip(*_particle_atoms(run, i)):
            ax.plot(_angle(pos), 0.5, marker="^", color="C1", ms=5 + 25 * mass, mec="k", ls="none")
    ax.set_xlim(-np.pi, np.pi)
    ax.set_ylim(1e-3, None)
    ax.set_xlabel("angle theta")
    ax.set_ylabel("density (uniform = 1)")
    ax.legend(fontsize=8)
    ax.set_title("final state: PDE atoms (dotted, masses) and particle atoms at the same time (triangles, size ~ mass)",
                 fontsize=10)
    fig.suptitle(_title(run), fontsize=10)
    files.append(_save(fig, out / "final.png"))
    return files


def _particle_atoms(run, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Atoms of the particles at snapshot i, by the procedure of the comparison (solvers.comparison)."""
    from ..comparison import atom_scales, measure_atoms
    from ..pde import space_for

    radius, h = atom_scales(run.model)
    a = measure_atoms(space_for(run.model.d)[1], x=run.particles.x[i], w=run.particles.w, radius=radius, smoothing=h)
    return a.positions, a.masses


# --- S^2 ------------------------------------------------------------------------------------------------
def _lonlat(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lon = np.arctan2(x[..., 1], x[..., 0])
    lat = np.arcsin(np.clip(x[..., 2], -1, 1))
    return lon, lat


def _sphere_figures(run, out: Path) -> list[Path]:
    from ..comparison import common_times

    plt = _plt()
    from matplotlib.colors import LogNorm
    pde, part = run.pde, run.particles
    if pde is not None:
        times = pde.t
    else:
        times = part.t
    idx = np.unique(np.linspace(0, len(times) - 1, min(4, len(times))).astype(int))
    fig = plt.figure(figsize=(5.2 * len(idx) + 0.8, 3.6))
    grid = fig.add_gridspec(1, len(idx) + 1, width_ratios=[1.0] * len(idx) + [0.03])
    norm, mesh = None, None
    if pde is not None:
        # one colour scale for every panel: the maps are comparable, and a nearly uniform panel (t = 0)
        # does not get a colour bar of its own spanning 1 to 1.1
        lo = max(1e-2, float(np.min(pde.density[idx])))
        norm = LogNorm(vmin=lo, vmax=max(float(np.max(pde.density[idx])), 10 * lo))
    for j, i in enumerate(idx):
        ax = fig.add_subplot(grid[0, j], projection="mollweide")
        t = times[i]
        if pde is not None:
            lon, lat = _lonlat(pde.grid)
            dens = np.clip(pde.density[i], 1e-2, None)
            # the output grid is equiangular in (colatitude, longitude); pcolormesh wants sorted longitude
            order = np.argsort(lon[0])
            mesh = ax.pcolormesh(lon[:, order], lat[:, order], dens[:, order], shading="auto", cmap="magma",
                                 norm=norm)
        title = f"t = {t:.4g}"
        if part is not None:
            k = _nearest(part.t, t)
            plon, plat = _lonlat(part.x[k])
            ax.scatter(plon, plat, s=2, c="cyan", alpha=0.5, lw=0)
            if not len(common_times([t], part.t[k:k + 1])[0]):
                # the particles have no snapshot at t (other save_every, or they stopped earlier): say which
                title += f", particles at t = {part.t[k]:.4g}"
        if i == idx[-1]:
            marks = []
            if pde is not None and "pde" in run.atoms:
                marks.append((run.atoms["pde"], "v", "lime"))
            if part is not None:
                marks.append((_particle_atoms(run, _nearest(part.t, t)), "^", "white"))
            for (apos, amass), mk, col in marks:
                alon, alat = _lonlat(apos)
                ax.scatter(alon, alat, marker=mk, s=30 + 300 * amass, c=col, edgecolors="k")
        nodes = pde is not None and pde.node_measure(i) is not None
        ax.set_title(title + (" (nodes)" if nodes else ""), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.set_xticklabels([])
    if mesh is not None:
        fig.colorbar(mesh, cax=fig.add_subplot(grid[0, -1]), label="rho (uniform = 1)")
    layers = (["PDE density (Mollweide, log scale)"] if pde is not None else []) + \
             (["particles (cyan)"] if part is not None else []) + \
             (["PDE atoms (lime)"] if pde is not None and "pde" in run.atoms else []) + \
             (["particle atoms (white)"] if part is not None else [])
    fig.suptitle(_title(run) + "\n" + ", ".join(layers), fontsize=9)
    return [_save(fig, out / "maps.png")]


# --- energy -----------------------------------------------------------------------------------------------
def _energy_figure(run, out: Path) -> Path:
    plt = _plt()
    pde, part = run.pde, run.particles
    n = 2 if pde is not None else 1
    fig, axes = plt.subplots(1, n, figsize=(6 * n, 4), squeeze=False)
    ax = axes[0, 0]
    if pde is not None:
        ax.plot(pde.t, pde.energy, "o-", ms=3, label="PDE")
    if part is not None and getattr(part, "energy", None) is not None:
        ax.plot(part.t, part.energy, "-", label=f"particles (N = {part.x.shape[1]})")
    ax.set_xlabel("time t")
    ax.set_ylabel("energy E")
    ax.legend(fontsize=8)
    ax.set_title("energy", fontsize=10)
    if pde is not None:
        ax = axes[0, 1]
        ax.semilogy(pde.t, np.maximum(pde.tail, 1e-17), "o-", ms=3, label="spectral tail")
        ax.semilogy(pde.t, pde.density.reshape(len(pde.t), -1).max(axis=1), "s-", ms=3, label="max rho")
        ax.semilogy(pde.t, pde.degree, "^-", ms=3, label="resolution")
        ax.axhline(pde.options.get("tail_max", 1e-3), color="gray", ls=":", lw=1)
        ax.set_xlabel("time t")
        ax.set_title(f"PDE diagnostics — stop: {pde.stop_reason} at t = {pde.t_stop:.4g}", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(_title(run), fontsize=10)
    return _save(fig, out / "energy.png")


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path
