"""The maps of a run on S^2 (``maps.png``): the density in the Mollweide (equal-area) projection at four times,
in a 2 x 2 grid, particles on top; in the last panel the PDE's atoms and the particles' clusters, each labelled
with its mass (to its error's precision). Longitudes are labelled under each map, latitudes beside it, so that
no label sits on the map among the atoms'.

Past the PDE's handoff the nodes are drawn with a positive 2.5-degree kernel: the truncated series rings
around isolated nodes.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .plots_base import (LABEL_SIZE, NOTE_SIZE, mass_text, nearest, particle_atoms, pde_atoms, plt,
                         save, title)

__all__ = ["sphere_figures", "MAP_PROJECTION"]

#: the most particle clusters labelled (the heaviest): more are a cloud, not yet clustered
MAX_CLUSTER_LABELS = 12
#: the projection of the maps: Mollweide with its longitudes labelled under the map (registered on first use)
MAP_PROJECTION = "attnpde_mollweide"


def _register_projection() -> None:
    """Mollweide axes whose longitude labels sit under the map, at each longitude's place on the equator,
    instead of on the equator itself (where the atoms' labels are)."""
    from matplotlib.projections import get_projection_names, register_projection
    from matplotlib.projections.geo import MollweideAxes
    from matplotlib.transforms import Affine2D, blended_transform_factory

    if MAP_PROJECTION in get_projection_names():
        return

    class LabelledMollweide(MollweideAxes):
        name = MAP_PROJECTION

        def _set_lim_and_transforms(self):
            super()._set_lim_and_transforms()
            # x: the longitude's position on the equator; y: the bottom of the axes, 4 points under it
            below = blended_transform_factory(Affine2D().scale(1, 0) + self.transData, self.transAxes)
            self._xaxis_text1_transform = below + Affine2D().translate(0, -4)

        def get_xaxis_text1_transform(self, pad):
            return self._xaxis_text1_transform, "top", "center"

    register_projection(LabelledMollweide)


def _lonlat(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lon = np.arctan2(x[..., 1], x[..., 0])
    lat = np.arcsin(np.clip(x[..., 2], -1, 1))
    return lon, lat


#: width (rad) of the positive kernel that draws the node measure on S^2 (2.5 degrees: about the spacing of
#: 8192 nodes spread evenly)
NODE_KERNEL = np.radians(2.5)


def _sphere_node_density(x: np.ndarray, w: np.ndarray, grid: np.ndarray, width: float = NODE_KERNEL) -> np.ndarray:
    """Density (uniform = 1) on ``grid`` (..., 3) of a node measure on S^2 smoothed by a positive kernel, the
    von Mises-Fisher density of concentration 1 / width^2, cut at 4 widths.

    A positive kernel, unlike the truncated series, does not ring: a lone node is a small faint spot,
    not a pattern of rings. Binned on cells instead, an atom near a pole is a sliver across the map.
    """
    from scipy.spatial import cKDTree

    pts = grid.reshape(-1, 3)
    kappa = 1.0 / width ** 2
    reach = 2.0 * math.sin(2.0 * width)                 # the chord of 4 widths
    pairs = cKDTree(x).sparse_distance_matrix(cKDTree(pts), reach, output_type="coo_matrix")
    cos = 1.0 - 0.5 * pairs.data ** 2
    # kappa e^{kappa (cos - 1)} 2 / (1 - e^{-2 kappa}): the density w.r.t. the uniform probability measure
    k = 2.0 * kappa * np.exp(kappa * (cos - 1.0)) / -np.expm1(-2.0 * kappa)
    dens = np.bincount(pairs.col, weights=np.asarray(w)[pairs.row] * k, minlength=len(pts))
    return dens.reshape(grid.shape[:-1])


def _motion(run) -> tuple[np.ndarray, np.ndarray]:
    """The snapshot times of the run's main series (the PDE's, else the particles') and how far the
    measure moved between consecutive ones: the change of its coefficients up to degree 4 (exact past the
    handoff too: those of the node measure)."""
    from ..pde import space_for

    space = space_for(run.model.d)[1]
    n = space.ncoef(4)
    if run.pde is not None and len(run.pde.t):
        t, c = run.pde.t, np.asarray(run.pde.coeffs)[:, 1:n]
    else:
        p = run.particles
        t = p.t
        c = np.array([space.particle_coefficients(x, p.w, 4)[1:n] for x in p.x])
    return np.asarray(t, dtype=float), np.linalg.norm(np.diff(c, axis=0), axis=1)


def _panel_times(t: np.ndarray, moved: np.ndarray, n: int = 4) -> np.ndarray:
    """Indices of ``n`` snapshots that show the dynamics: the first, the last, and those where the
    cumulative motion first reaches 1/2 and 9/10 (distinct, ascending)."""
    if len(t) <= n:
        return np.arange(len(t))
    done = np.concatenate([[0.0], np.cumsum(moved)])
    done = done / done[-1] if done[-1] > 0 else np.linspace(0, 1, len(t))
    pick = {0, len(t) - 1}
    for q in (0.5, 0.9, 0.25, 0.75, 0.97):
        if len(pick) == n:
            break
        pick.add(int(np.argmax(done >= q)))
    rest = [i for i in np.linspace(0, len(t) - 1, 2 * n).astype(int) if i not in pick]
    while len(pick) < n and rest:
        pick.add(rest.pop(0))
    return np.array(sorted(pick))


def _sphere_axes(ax) -> None:
    """Labelled longitude (under the map) and latitude (beside it), every 60 and 30 degrees."""
    ax.grid(True, alpha=0.35, color="0.6")
    ax.set_xticks(np.radians([-120, -60, 0, 60, 120]))
    ax.set_xticklabels(["120°W", "60°W", "0°", "60°E", "120°E"], fontsize=NOTE_SIZE)
    ax.set_yticks(np.radians([-60, -30, 0, 30, 60]))
    ax.set_yticklabels(["60°S", "30°S", "0°", "30°N", "60°N"], fontsize=NOTE_SIZE)


def _particle_marks(run, k: int):
    """The particles' atoms at snapshot k as the maps label them: (positions, masses, what). At their end,
    the clusters the run recorded (every one, the lightest included); elsewhere the comparison's atoms."""
    part = run.particles
    if k == len(part.t) - 1 and "particles" in run.atoms:
        pos, mass = run.atoms["particles"]
        rule = run.atoms.get("particles:attrs", {}).get("rule", "linkage")
        pos, mass = np.asarray(pos).reshape(-1, 3), np.asarray(mass)
        what = f"particle clusters at t = {part.t[k]:.4g} ({'single linkage' if rule == 'linkage' else 'paper rule'})"
        if len(mass) > MAX_CLUSTER_LABELS:
            # a cloud not yet clustered: its heaviest clusters only, the others said
            keep = np.argsort(mass)[::-1][:MAX_CLUSTER_LABELS]
            what += f", the {MAX_CLUSTER_LABELS} heaviest of {len(mass)}"
            pos, mass = pos[keep], mass[keep]
        return pos, mass, what
    pos, mass, _ = particle_atoms(run, k)
    return np.asarray(pos).reshape(-1, 3), np.asarray(mass), "particle atoms (as the comparison)"


def sphere_figures(run, out: Path) -> list[Path]:
    from ..comparison import common_times

    _register_projection()
    pyplot = plt()
    import matplotlib
    from matplotlib.colors import LogNorm
    from matplotlib.lines import Line2D
    pde, part = run.pde, run.particles
    times, moved = _motion(run)
    idx = _panel_times(times, moved)
    ncol = 2 if len(idx) > 1 else 1
    nrow = int(math.ceil(len(idx) / ncol))
    # a Mollweide map is twice as wide as high: rows of 3 in under panels 5.4 in wide, with their titles
    height = 3.0 * nrow + 1.6
    fig = pyplot.figure(figsize=(5.4 * ncol + 1.2, height))
    grid = fig.add_gridspec(nrow, ncol, left=0.06, right=0.87, top=1 - 0.85 / height, bottom=1.0 / height,
                            hspace=0.32, wspace=0.12)
    cmap = matplotlib.colormaps["magma"]
    norm, mesh = None, None
    lo = 1e-2
    fields: list = [None] * len(idx)
    if pde is not None:
        lon, lat = _lonlat(pde.grid)
        order = np.argsort(lon[0])   # the output grid is equiangular; pcolormesh wants sorted longitude
        for j, i in enumerate(idx):
            nodes = pde.node_measure(int(i))
            fields[j] = (pde.density[i] if nodes is None else _sphere_node_density(nodes.x, nodes.w, pde.grid))
        # one colour scale for every panel: the maps are comparable, and a nearly uniform panel (t = 0)
        # does not get a colour bar of its own spanning 1 to 1.1
        # at least 10: the uniform density (1) sits in the middle of the scale, not at its top
        norm = LogNorm(vmin=lo, vmax=max([float(np.max(f)) for f in fields] + [10.0]))
    pa = pde_atoms(run)
    if pa is not None and not len(pa[1]):
        pa = None                                  # no atom: none to mark, nor to name in the legend
    labels, what_particles = [], None
    for j, i in enumerate(idx):
        ax = fig.add_subplot(grid[j // ncol, j % ncol], projection=MAP_PROJECTION)
        ax.set_facecolor(cmap(0.0))
        t = times[i]
        note = ""
        if pde is not None:
            mesh = ax.pcolormesh(lon[:, order], lat[:, order], np.clip(fields[j], lo, None)[:, order], shading="auto",
                                 cmap=cmap, norm=norm)
            if pde.node_measure(int(i)) is not None:
                note = " (nodes)"
        head = f"t = {t:.4g}"
        if part is not None:
            k = nearest(part.t, t)
            plon, plat = _lonlat(part.x[k])
            ax.scatter(plon, plat, s=2, c="cyan", alpha=0.5, lw=0)
            if not len(common_times(np.array([t]), part.t[k:k + 1])[0]):
                # the particles have no snapshot at t (other save_every, or they stopped earlier): say which
                head += f", particles at t = {part.t[k]:.4g}"
        if i == idx[-1]:
            marks = []
            if pa is not None:
                marks.append((pa[0], pa[1], pa[2], "v", "lime", 110))
            if part is not None:
                ppos, pmass, what_particles = _particle_marks(run, nearest(part.t, t))
                if len(pmass):
                    marks.append((ppos, pmass, None, "^", "white", 45))
            for n_mark, (apos, amass, aerr, mk, col, size) in enumerate(marks):
                alon, alat = _lonlat(np.asarray(apos).reshape(-1, 3))
                # the particles' smaller marker over the PDE's: a matched pair shows both
                ax.scatter(alon, alat, marker=mk, s=size, c=col, edgecolors="k", zorder=5 + n_mark)
                for k, (a, b, m) in enumerate(zip(alon, alat, amass)):
                    text = mass_text(m, None if aerr is None else aerr[k])
                    # the PDE's mass right of its atom, the particles' left: a matched pair stays readable
                    labels.append(ax.annotate(
                        text, (a, b), xytext=(8 if n_mark == 0 else -8, 0), textcoords="offset points",
                        ha="left" if n_mark == 0 else "right", va="center", fontsize=LABEL_SIZE, color=col, zorder=7,
                        bbox=dict(boxstyle="round,pad=0.15", fc="black", alpha=0.6, lw=0)))
        ax.set_title(head + note, fontsize=LABEL_SIZE)
        _sphere_axes(ax)
    if mesh is not None:
        fig.colorbar(mesh, cax=fig.add_axes([0.9, 0.2, 0.018, 0.6]), label="rho (uniform = 1)")
    handles = []
    if part is not None:
        handles.append(Line2D([], [], ls="none", marker="o", ms=4, color="cyan", label="particles"))
    if pa is not None:
        handles.append(Line2D([], [], ls="none", marker="v", ms=9, mfc="lime", mec="k",
                              label=pa[3].replace("PDE: ", "PDE ") + ": mass right"))
    if what_particles is not None:
        handles.append(Line2D([], [], ls="none", marker="^", ms=9, mfc="white", mec="k",
                              label=what_particles + ": mass left"))
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 2), fontsize=NOTE_SIZE,
                   frameon=False, title="atoms at the last time shown", title_fontsize=NOTE_SIZE,
                   bbox_to_anchor=(0.5, 0.0))
    what = ("PDE density, log scale (panels marked nodes: the node measure past the handoff, drawn with a "
            f"{np.degrees(NODE_KERNEL):g}° kernel)") if pde is not None else "particles"
    fig.suptitle(title(run) + "\nMollweide maps: " + what, fontsize=NOTE_SIZE)
    return [save(fig, out / "maps.png", labels, tight=False)]
