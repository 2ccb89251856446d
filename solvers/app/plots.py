"""PNG figures of an archived run (matplotlib, non-interactive): :func:`plot_archive` draws every figure of
an archive, each kind in its own module.

- S^1 (:mod:`.plots_circle`): the density as a space-time image with particle trajectories
  (``spacetime.png``); the final state, densities above and the atoms as stems labelled with their masses
  below (``final.png``).
- S^2 (:mod:`.plots_sphere`): Mollweide maps of the density at four times, particles on top, the atoms and
  the particles' clusters labelled with their masses (``maps.png``).
- Both (:mod:`.plots_energy`): the energy against time with its plateaus and certified end, and the solvers'
  diagnostics (``energy.png``).
- Here: PDE against particles (``comparison.png``), the particles' convergence study (``validation.png``);
  a branch archive's bifurcation diagram is :mod:`.plots_branch`'s, a sweep's figure :mod:`.sweep`'s.

Every figure follows the rules of :mod:`.figure_check` (no overlapping text, legends out of the data,
three labelled ticks per axis, no empty panel) and shares the run's time axis (:mod:`.plots_base`: linear
where the run spans at most three decades, else logarithmic with t = 0 shown apart). docs/figures.md shows
each kind.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .archive import ArchiveError, load
from .plots_base import (LABEL_SIZE, NOTE_SIZE, TimeAxis, apply_time_axis, legend_right, mark_handoff, plt,
                         readable_log_axis, run_time_axis, save, time_axis, title)

__all__ = ["plot_archive", "plot_comparison", "plot_validation", "run_time_axis", "time_axis"]


def plot_archive(path: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write the figures of the archive at ``path`` into ``out_dir``; return their paths.

    Raises ArchiveError for a file that is not an archive, or an archive without any snapshot.
    """
    run = load(path)
    from .branch import is_branch_archive, load_branch
    if is_branch_archive(path):
        from .plots_branch import branch_title, plot_branch
        out = Path(out_dir) if out_dir else Path(path).parent
        out.mkdir(parents=True, exist_ok=True)
        return [plot_branch(load_branch(path), out / (Path(path).stem + "_branch.png"),
                            branch_title(run.model, run.attrs.get("name", "")))]
    if not any(r is not None and len(r.t) for r in (run.pde, run.particles)):
        # e.g. a run killed before its first snapshot reached the file: every figure would be empty
        raise ArchiveError(f"{path}: no snapshot recorded (status {run.status or 'unknown'}): nothing to plot")
    out = Path(out_dir) if out_dir else Path(path).with_suffix("").with_name(Path(path).stem + "_plots")
    out.mkdir(parents=True, exist_ok=True)
    files = []
    if run.model.d == 2:
        from .plots_circle import circle_figures
        files += circle_figures(run, out)
    elif run.model.d == 3:
        from .plots_sphere import sphere_figures
        files += sphere_figures(run, out)
    from .plots_energy import energy_figure
    files.append(energy_figure(run, out))
    if run.comparison is not None:
        files.append(plot_comparison(run.comparison, out / "comparison.png", title=title(run),
                                     t_handoff=run.pde.t_handoff if run.pde is not None else None,
                                     time=run_time_axis(run)))
    if run.validation is not None:
        files.append(plot_validation(run.validation, out / "validation.png", title(run)))
    return files


# --- comparison, validation ----------------------------------------------------------------------------------
def plot_comparison(cmp, path: Path, title: str = "", t_handoff: float | None = None,
                    time: TimeAxis | None = None) -> Path:
    """Distances between the PDE and the particles against time (log scale) above, the concentration measures
    of both solvers (``Comparison.concentration``) below, on one time axis; the PDE's handoff marked where it
    falls; legends right of the panels.

    Parameters
    ----------
    cmp : Comparison
    path : the PNG to write
    title : the run's title (the figure's heading)
    t_handoff : the PDE's handoff time, or None
    time : the run's time axis (:func:`run_time_axis`), that of its other figures; default: from the
        comparison's times and those of its concentration measures
    """
    pyplot = plt()
    fig, (ax, axc) = pyplot.subplots(2, 1, figsize=(10.5, 7.6), sharex=True)
    series = [cmp.concentration[k] for k in ("pde", "particles") if k in cmp.concentration]
    ta = time or time_axis(cmp.t, *[c["t"] for c in series])
    labels: list = []
    notes: list = []
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
            notes.append("CDF drift: undefined past the PDE's handoff\n(its CDF jumps at atoms)")
    apply_time_axis(axc, ta)
    ax.set_ylabel("distance")
    readable_log_axis(ax)
    ax.set_title(f"PDE vs particles at their {len(cmp.t)} common times", fontsize=LABEL_SIZE)
    mark_handoff(ax, t_handoff, labels=labels)
    if ax.get_lines():
        from matplotlib.lines import Line2D
        handles = ax.get_legend_handles_labels()[0]
        # a note is an entry without a mark, out of the data like the legend
        legend_right(ax, handles + [Line2D([], [], ls="none", label=note) for note in notes])
    r = cmp.options.get("atom_radius")
    within = f"within {r:.3g} rad" if r is not None else "within r"
    for kind, style in (("pde", "-"), ("particles", "--")):
        con = cmp.concentration.get(kind)
        if con is not None:
            name = "PDE" if kind == "pde" else kind
            axc.plot(con["t"], con["mass_near_atoms"], style, color="C0",
                     label=f"{name}: mass {within}\nof its final atoms")
            axc.plot(con["t"], con["effective_support"], style, color="C1",
                     label=f"{name}: effective support (95%)")
    axc.set_ylim(-0.02, 1.02)
    axc.set_ylabel("fraction of the mass\n/ of the sphere")
    axc.set_title("concentration", fontsize=LABEL_SIZE)
    mark_handoff(axc, t_handoff, labels=labels)
    if axc.get_lines():                     # an archive written without the concentration measures has none
        legend_right(axc)
    else:
        axc.text(0.5, 0.5, "no concentration measures in this archive", transform=axc.transAxes, ha="center",
                 fontsize=LABEL_SIZE, color="0.4")
    if title:
        fig.suptitle(title, fontsize=LABEL_SIZE)
    return save(fig, path, labels)


def plot_validation(res, path: Path, title: str = "") -> Path:
    """Distances against N on log axes, fitted slopes, and the N^{-1/2} reference; the legend right of the
    data."""
    pyplot = plt()
    i = int(np.argmin(np.abs(res.t - res.at)))
    fig, ax = pyplot.subplots(figsize=(9.0, 4.8))
    n = res.n.astype(float)
    names = {"w1": "W1", "mmd": "MMD", "moment_gap": "moment gap", "energy_gap": "energy gap"}
    for k, v in res.distances.items():
        vals = v[:, :, i]
        mean = vals.mean(axis=1)
        line, = ax.loglog(n, mean, "o-", label=f"{names.get(k, k)} (slope {res.slopes[k]:.2f})")
        if vals.shape[1] > 1:
            ax.loglog(np.repeat(n, vals.shape[1]), vals.reshape(-1), ".", color=line.get_color(), alpha=0.35)
        ok = np.isfinite(mean) & (mean > 0)
        if ok.sum() >= 2 and math.isfinite(res.slopes[k]):
            b = np.mean(np.log(mean[ok]) - res.slopes[k] * np.log(n[ok]))
            ax.loglog(n, np.exp(b) * n ** res.slopes[k], ":", color=line.get_color(), lw=1)
    ref = [v[:, :, i].mean(axis=1) for v in res.distances.values()]
    top = np.nanmax([r[0] for r in ref])
    ax.loglog(n, top * 1.5 * (n / n[0]) ** -0.5, "k--", lw=1, label="slope -1/2 (reference)")
    ax.set_xlabel("number of particles N")
    ax.set_ylabel(f"distance to the PDE at t = {res.at:.3g}")
    readable_log_axis(ax, "x")
    readable_log_axis(ax, "y")
    seeds = len(res.seeds)
    ax.set_title((title + "\n" if title else "") + f"particles -> PDE: mean over {seeds} seed(s) (dots: each seed; "
                 "dotted: fit)", fontsize=NOTE_SIZE)
    legend_right(ax)
    ax.grid(alpha=0.3, which="both")
    return save(fig, path)
