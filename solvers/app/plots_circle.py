"""The figures of a run on S^1: the density over time (``spacetime.png``) and the final state (``final.png``).

Past the PDE's handoff to its node continuation the density is drawn from the node measure itself (each node's
mass over its Voronoi cell), not from its truncated series, whose ringing around isolated nodes looks like
structure.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .plots_base import (LABEL_SIZE, angle, apply_time_axis, legend_right, mark_handoff, mass_text,
                         particle_atoms, pde_atoms, plt, run_time_axis, save, title)

__all__ = ["circle_figures", "spacetime_figure", "final_figure", "node_density"]

#: bins of the node measure on S^1 (space-time image, 1 degree) and of the final-state profiles (2 degrees)
SPACETIME_BINS = 360
PROFILE_BINS = 180


def _circle_bins(n: int) -> np.ndarray:
    return np.linspace(-np.pi, np.pi, n + 1)


def _circle_histogram(x: np.ndarray, w: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """Density (uniform = 1) of the point measure sum w_j delta_{x_j}: its mass in each bin over the bin's
    share of the circle."""
    h, _ = np.histogram(angle(x), bins=bins, weights=w)
    return h / np.diff(bins) * 2 * np.pi


#: how far (rad) a node of one initial node spreads its mass towards an empty neighbourhood (5 degrees)
NODE_REACH = np.radians(5.0)


def node_density(x: np.ndarray, w: np.ndarray, count: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """Density (uniform = 1) on ``bins`` of the density a node measure on S^1 stands for.

    Each node's mass is spread evenly over its Voronoi cell (half way to each neighbour): the nodes start
    as equal-mass quantiles of the density, and their cells give it back. A node that holds several initial
    nodes (an atom, or one forming) keeps its mass within half a bin of itself, and a single node at most
    ``NODE_REACH`` from itself. Binned as it is (mass per bin), a sparse diffuse part would be a speckle of
    single nodes and empty bins.
    """
    th = angle(x)
    o = np.argsort(th)
    th, w, count = th[o], np.asarray(w, dtype=float)[o], np.asarray(count)[o]
    gap = np.diff(np.concatenate([th, [th[0] + 2 * np.pi]]))           # to the next node, around the circle
    left, right = 0.5 * np.roll(gap, 1), 0.5 * gap
    reach = np.where(count > 1, 0.5 * float(np.min(np.diff(bins))), NODE_REACH)
    a, b = th - np.minimum(left, reach), th + np.minimum(right, reach)
    # the cells do not overlap: the spread measure's CDF is piecewise linear through (a_j, M_{j-1}), (b_j, M_j);
    # three turns of the circle cover the cells that wrap around -pi or pi
    cum = np.cumsum(w)
    xs, fs = [], []
    for turn in (-1, 0, 1):
        xs.append(np.column_stack([a, b]).ravel() + 2 * np.pi * turn)
        fs.append(np.column_stack([cum - w, cum]).ravel() + turn * cum[-1])
    F = np.interp(bins, np.concatenate(xs), np.concatenate(fs))
    return np.diff(F) / np.diff(bins) * 2 * np.pi


def _angle_axis(ax) -> None:
    ax.set_xlim(-np.pi, np.pi)
    ax.set_xticks(np.linspace(-np.pi, np.pi, 5))
    ax.set_xticklabels(["\u2212π", "\u2212π/2", "0", "π/2", "π"])
    ax.set_xlabel("angle theta")


def circle_figures(run, out: Path) -> list[Path]:
    files = []
    if run.pde is not None and len(run.pde.t) > 1:
        files.append(spacetime_figure(run, out))
    files.append(final_figure(run, out))
    return files


def spacetime_figure(run, out: Path) -> Path:
    """The PDE's density as an image of angle against time (log colour scale), each snapshot a band reaching
    half way to its neighbours on the run's time axis, t = 0 included; particle trajectories over it."""
    pyplot = plt()
    import matplotlib
    from matplotlib.colors import LogNorm
    pde, part = run.pde, run.particles
    ta = run_time_axis(run)
    T = np.asarray(pde.t, dtype=float)
    u = ta.forward(T)
    edges = ta.inverse(np.concatenate([[u[0]], 0.5 * (u[:-1] + u[1:]), [u[-1]]]))
    th = angle(pde.grid)
    order = np.argsort(th)
    th_sorted = th[order]
    th_edges = np.concatenate([[-np.pi], 0.5 * (th_sorted[:-1] + th_sorted[1:]), [np.pi]])
    bins = _circle_bins(SPACETIME_BINS)
    series = np.ma.masked_all((len(T), th.size))
    binned = np.ma.masked_all((len(T), SPACETIME_BINS))
    for i in range(len(T)):
        nodes = pde.node_measure(int(i))
        if nodes is None:
            series[i] = pde.density[i, order]
        else:
            h = node_density(nodes.x, nodes.w, nodes.count, bins)
            binned[i] = np.ma.masked_equal(h, 0.0)     # an empty bin: no mass, drawn as the background
    # at least 10: the uniform density (1) sits in the middle of the scale, not at its top
    vmax = max(float(np.ma.max(series)) if series.count() else 0.0, float(np.ma.max(binned)) if binned.count() else 0.0,
               10.0)
    lo = 1e-2
    norm = LogNorm(vmin=lo, vmax=vmax)
    cmap = matplotlib.colormaps["magma"]
    fig, ax = pyplot.subplots(figsize=(9.5, 6.4))
    # no mass (an empty bin, a density below the scale) shows as the bottom of the scale
    ax.set_facecolor(cmap(0.0))
    mesh = None
    if series.count():
        mesh = ax.pcolormesh(th_edges, edges, np.ma.clip(series, lo, None), cmap=cmap, norm=norm, shading="flat")
    if binned.count():
        mesh = ax.pcolormesh(bins, edges, np.ma.clip(binned, lo, None), cmap=cmap, norm=norm, shading="flat")
    fig.colorbar(mesh, ax=ax, label="rho (uniform = 1)")
    if part is not None:
        sel = np.linspace(0, part.x.shape[1] - 1, min(120, part.x.shape[1])).astype(int)
        ang = angle(part.x[:, sel, :])
        tt = np.asarray(part.t, dtype=float)
        keep = tt <= ta.hi * 1.0000001
        for j in range(len(sel)):
            a = ang[keep, j]
            jumps = np.abs(np.diff(a)) > np.pi   # break the line where it wraps around
            a_plot = np.insert(a, np.nonzero(jumps)[0] + 1, np.nan)
            t_plot = np.insert(tt[keep], np.nonzero(jumps)[0] + 1, np.nan)
            ax.plot(a_plot, t_plot, color="cyan", lw=0.4, alpha=0.6)
    _angle_axis(ax)
    apply_time_axis(ax, ta, axis="y", shade=False)
    pa = pde_atoms(run)
    if pa is not None:
        for pos in pa[0]:
            ax.plot(angle(pos), edges[-1], marker="v", color="lime", ms=9, mec="k", clip_on=False, ls="none")
    head = "density over time" + (" with particle trajectories (cyan)" if part is not None else "")
    labels: list = []
    th_h = pde.t_handoff
    spectral = np.array([pde.node_measure(int(i)) is None for i in range(len(T))])
    if th_h is not None and spectral.any() and not spectral.all():
        # the line between the last band of the spectral series and the first of the node measure (the handoff
        # itself falls somewhere in between), said in the title: a label on it would sit among the trajectories
        k = int(np.nonzero(~spectral)[0][0])
        mark_handoff(ax, float(edges[k]), axis="y", color="white")
        head += (f"\nbelow the dashed line the spectral series, above it the node measure (the handoff at "
                 f"t = {th_h:.3g})")
    elif th_h is not None:
        head += f"\nthe handoff at t = {th_h:.3g} precedes every band but t = 0's: they are the node measure"
    if len(T) < 6:
        # e.g. the default save_every (the first and last states only): a band is not an evolution
        head += f"\nonly {len(T)} snapshots, each band the nearest one: set [pde] save_every for more"
    ax.set_title(head, fontsize=LABEL_SIZE, pad=12)         # room for the atom markers on the top edge
    fig.suptitle(title(run), fontsize=LABEL_SIZE)
    return save(fig, out / "spacetime.png", labels)


def _end(res) -> str:
    """How a solver's run ended, for a legend: its stop reason, or that no end is recorded."""
    reason = getattr(res, "stop_reason", "") or ""
    return "no end recorded" if reason in ("", "killed") else reason


def final_figure(run, out: Path) -> Path:
    """Densities at each solver's end above (log), the atoms as stems labelled with their masses below;
    legends right of the panels."""
    pyplot = plt()
    pde, part = run.pde, run.particles
    pa = pde_atoms(run)
    pa = pa if pa is not None and len(pa[1]) else None
    pp = particle_atoms(run, -1) if part is not None else None
    pp = pp if pp is not None and len(pp[1]) else None
    if pa is None and pp is None:
        # no atom to show: no atom panel, said in the title
        fig, ax = pyplot.subplots(figsize=(11.0, 4.8))
        axm = None
    else:
        fig, (ax, axm) = pyplot.subplots(2, 1, figsize=(11.0, 7.4), sharex=True,
                                         gridspec_kw={"height_ratios": [3, 2]})
    bins = _circle_bins(PROFILE_BINS)
    times = []
    if pde is not None:
        t_end = float(pde.t[-1])
        nodes = pde.node_measure(-1)
        if nodes is None:
            th = angle(pde.grid)
            order = np.argsort(th)
            ax.semilogy(th[order], np.clip(pde.density[-1, order], 1e-4, None), color="C0",
                        label=f"PDE at t = {t_end:.4g} ({_end(pde)})")
        else:
            h = node_density(nodes.x, nodes.w, nodes.count, bins)
            ax.stairs(np.clip(h, 1e-4, None), bins, color="C0",
                      label=f"PDE at t = {t_end:.4g} ({_end(pde)}):\nnode measure, each node's mass\n"
                            "over its Voronoi cell")
        times.append(("PDE", t_end))
    if part is not None:
        t_p = float(part.t[-1])
        h = _circle_histogram(part.x[-1], part.w, bins)
        ax.stairs(np.clip(h, 1e-4, None), bins, color="C1",
                  label=f"particles (N = {part.x.shape[1]})\nat t = {t_p:.4g} ({_end(part)})")
        times.append(("particles", t_p))
    ax.set_yscale("log")
    ax.set_ylim(1e-3, None)
    ax.set_ylabel(f"density (uniform = 1)\n{360 // PROFILE_BINS}° bins")
    legend_right(ax)
    labels, top = [], 0.0
    if pa is not None:
        pos, mass, errs, what = pa
        ang = angle(pos)
        axm.stem(ang, mass, linefmt="C0-", markerfmt="C0o", basefmt=" ", label=what.replace(": ", ":\n", 1))
        if errs is not None:
            axm.errorbar(ang, mass, yerr=np.asarray(errs), fmt="none", ecolor="C0", capsize=4, lw=1.2)
        for k in range(len(mass)):
            labels.append(_stem_label(axm, ang[k], mass[k], mass_text(mass[k], None if errs is None else errs[k]),
                                      "C0"))
        top = max(top, float(np.max(mass)))
    if pp is not None:
        ppos, pmass, radius = pp
        ang = angle(ppos)
        axm.stem(ang, pmass, linefmt="C1--", markerfmt="C1^", basefmt=" ",
                 label=f"particles: density peaks,\nmass within {radius:.3g} rad\n(as the comparison)")
        labels += [_stem_label(axm, a, m, mass_text(m), "C1") for a, m in zip(ang, pmass)]
        top = max(top, float(np.max(pmass)))
    if axm is not None:
        # room above the stems for their labels, stacked where atoms are close
        axm.set_ylim(0, 1.45 * top)
        legend_right(axm)
        axm.set_ylabel("atom mass")
        _angle_axis(axm)
        ax.tick_params(labelbottom=False)
        ax.set_xlabel("")
    else:
        _angle_axis(ax)
    if len(times) == 2 and times[0][1] != times[1][1]:
        # not the same time: say so (the comparison is made at common times, this is each solver's end)
        head = (f"final states at each solver's own end: PDE at t = {times[0][1]:.4g} ({_end(pde)}), particles at "
                f"t = {times[1][1]:.4g} ({_end(part)})")
    elif len(times) == 2:
        head = f"final state of the PDE and the particles at t = {times[0][1]:.4g}"
    else:
        head = f"final state of the {times[0][0]} at t = {times[0][1]:.4g} ({_end(pde if pde is not None else part)})"
    if axm is None:
        head += "\nno atoms (mass >= 0.01) yet"
    ax.set_title(head, fontsize=LABEL_SIZE)
    fig.suptitle(title(run), fontsize=LABEL_SIZE)
    return save(fig, out / "final.png", labels)


def _stem_label(ax, x: float, m: float, text: str, colour: str):
    """A stem's mass, horizontal, above its top (moved off other labels when the figure is saved)."""
    return ax.annotate(text, (x, m), xytext=(0, 5), textcoords="offset points", ha="center", va="bottom",
                       fontsize=LABEL_SIZE, color=colour)
