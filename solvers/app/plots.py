"""PNG figures of an archived run (matplotlib, non-interactive).

S^1: the density as a space-time image (angle against time, log colour scale) with particle
trajectories over it; the final state: densities above, the atoms as stems labelled with their masses
below; energy and the solvers' diagnostics against time.
S^2: maps of the density in the Mollweide (equal-area) projection at four times, in a 2 x 2 grid, with
particles on top and the atoms marked and labelled with their masses; energy against time.

Time axes are linear, square-root or logarithmic, whichever spreads the motion of the measure most
evenly over the axis (:func:`time_scale`): a run that collapses by t = 40 and then sits still until
t = 1000 is drawn on a log axis. Past the PDE's handoff to its node continuation the density is drawn
from the node measure itself (on S^1 each node's mass over its Voronoi cell, on S^2 a positive kernel),
not from its truncated series, whose ringing around isolated nodes looks like structure; the spectral
solver's diagnostics stop at the handoff. docs/figures.md shows each figure before and after.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .archive import ArchiveError, load

__all__ = ["plot_archive", "plot_comparison", "plot_validation", "time_scale"]

#: the smallest font of the text a reader must read (atom masses, tick labels), in points
LABEL_SIZE = 10
#: positive snapshot times spanning a smaller ratio (last / first) are drawn on a linear axis
DECADE = 10.0
#: bins of the node measure on S^1 (space-time image, 1 degree) and of the final-state profiles (2 degrees)
SPACETIME_BINS = 360
PROFILE_BINS = 180


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


def _outlined(color: str = "white"):
    """Path effects that keep light text readable on any colour of a map (a dark outline)."""
    from matplotlib import patheffects
    return [patheffects.withStroke(linewidth=2.5, foreground="black" if color != "black" else "white")]


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
        files.append(plot_comparison(run.comparison, out / "comparison.png", title=_title(run),
                                     t_handoff=run.pde.t_handoff if run.pde is not None else None,
                                     scale=time_scale(*_motion(run))))
    if run.validation is not None:
        files.append(plot_validation(run.validation, out / "validation.png", _title(run)))
    return files


# --- time axes ---------------------------------------------------------------------------------------------
def _forward(scale: str):
    return {"linear": lambda t: np.asarray(t, dtype=float),
            "sqrt": lambda t: np.sqrt(np.maximum(np.asarray(t, dtype=float), 0.0)),
            "log": lambda t: np.log(np.asarray(t, dtype=float))}[scale]


def _inverse(scale: str):
    return {"linear": lambda u: np.asarray(u, dtype=float), "sqrt": lambda u: np.square(u), "log": np.exp}[scale]


def time_scale(t: np.ndarray, moved: np.ndarray | None = None) -> str:
    """The time axis that shows the dynamics: "linear", "sqrt" or "log".

    Parameters
    ----------
    t : (T,) ascending snapshot times
    moved : (T - 1,) how far the measure moved between consecutive snapshots (default: as far in every
        interval, which picks the axis on which the snapshots are evenly spread)

    Returns
    -------
    str
        "linear" where the positive times span less than a decade (``DECADE``); otherwise the scale on
        which the cumulative motion grows most evenly along the axis (the smallest largest gap between
        the fraction of motion and the fraction of axis, motion before the first positive snapshot
        counting as lost on a log axis), linear on near ties.
    """
    t = np.asarray(t, dtype=float)
    pos = t[t > 0]
    if len(pos) < 3 or pos[-1] / pos[0] < DECADE:
        return "linear"
    moved = np.ones(len(t) - 1) if moved is None else np.abs(np.nan_to_num(np.asarray(moved, dtype=float)))
    if not moved.sum() > 0:
        return "linear"
    done = np.concatenate([[0.0], np.cumsum(moved)]) / moved.sum()
    best, score = "linear", math.inf
    for scale in ("linear", "sqrt", "log"):
        k = int(np.argmax(t > 0)) if scale == "log" else 0
        u = _forward(scale)(t[k:])
        u = (u - u[0]) / (u[-1] - u[0])
        s = float(np.max(np.abs(done[k:] - u)))
        # a clearly better fit only: the plainer axis wins near ties
        if s < score - 0.02:
            best, score = scale, s
    return best


def _apply_time_scale(ax, scale: str, lo: float, hi: float, axis: str = "x") -> None:
    """Give ``ax`` the time axis ``scale`` on [lo, hi] (its label says which scale)."""
    setter = ax.set_xscale if axis == "x" else ax.set_yscale
    if scale == "log":
        setter("log")
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
        # plain numbers at 1, 2, 5 per decade (10^0 and 10^1 alone say little over one or two decades)
        decades = math.log10(hi / lo) if lo > 0 and hi > lo else 0.0
        which = ax.xaxis if axis == "x" else ax.yaxis
        which.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
        which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        which.set_minor_formatter(NullFormatter())
    elif scale == "sqrt":
        setter("function", functions=(_forward("sqrt"), _inverse("sqrt")))
        from matplotlib.ticker import FixedLocator, FuncFormatter
        which = ax.xaxis if axis == "x" else ax.yaxis
        which.set_major_locator(FixedLocator(_sqrt_ticks(lo, hi)))
        which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    if hi > lo:
        (ax.set_xlim if axis == "x" else ax.set_ylim)(lo, hi)
    label = "time t" + {"linear": "", "sqrt": " (square-root scale)", "log": " (log scale)"}[scale]
    (ax.set_xlabel if axis == "x" else ax.set_ylabel)(label)


def _sqrt_ticks(lo: float, hi: float, spacing: float = 0.09) -> list[float]:
    """Ticks of a square-root time axis: 0 and the values 1, 2, 5 x 10^k in [lo, hi], kept where they are at
    least ``spacing`` of the axis apart (evenly spaced values crowd its upper end)."""
    if not hi > lo:
        return [lo]
    top = math.floor(math.log10(hi))
    values = [0.0] + [m * 10.0 ** e for e in range(top - 6, top + 1) for m in (1.0, 2.0, 5.0)]
    f = _forward("sqrt")
    span = float(f(hi) - f(max(lo, 0.0)))
    kept: list[float] = []
    for v in sorted(v for v in values if lo <= v <= hi):
        if not kept or (f(v) - f(kept[-1])) / span >= spacing:
            kept.append(v)
    return kept


def _time_range(t: np.ndarray, scale: str) -> tuple[float, float]:
    """The axis range of the snapshot times ``t`` on ``scale``: from the first positive time on a log axis."""
    t = np.asarray(t, dtype=float)
    shown = t[t > 0] if scale == "log" else t
    return (float(shown[0]), float(shown[-1])) if len(shown) else (0.0, 1.0)


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


def _mark_handoff(ax, t_handoff: float | None, axis: str = "x", text: str = "handoff", color: str = "0.35") -> bool:
    """A dashed line at the PDE's handoff, labelled, if it lies within the axis; True if drawn."""
    if t_handoff is None:
        return False
    lo, hi = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    if not lo <= t_handoff <= hi:
        return False
    import matplotlib.transforms as mtransforms
    if axis == "x":
        ax.axvline(t_handoff, color=color, ls="--", lw=1, label="_handoff")
        tr = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
        ax.text(t_handoff, 0.98, " " + text, transform=tr, color=color, fontsize=8, ha="left", va="top",
                rotation=0)
    else:
        ax.axhline(t_handoff, color=color, ls="--", lw=1, label="_handoff")
        tr = mtransforms.blended_transform_factory(ax.transAxes, ax.transData)
        ax.text(0.99, t_handoff, text, transform=tr, color=color, fontsize=8, ha="right", va="bottom",
                path_effects=_outlined(color))
    return True


# --- comparison, validation ----------------------------------------------------------------------------------
def plot_comparison(cmp, path: Path, title: str = "", t_handoff: float | None = None, scale: str | None = None) -> Path:
    """Distances between the PDE and the particles against time (log scale), and the concentration
    measures of both solvers (``Comparison.concentration``); the PDE's handoff marked where it falls.

    Parameters
    ----------
    cmp : Comparison
    path : the PNG to write
    title : the run's title (the figure's heading)
    t_handoff : the PDE's handoff time, or None
    scale : the time axis ("linear", "sqrt", "log"; :func:`time_scale`), that of the run's other figures;
        default: chosen from the concentration measures (or the common times)
    """
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
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
        ax.text(0.02, 0.02, "\n".join(notes), transform=ax.transAxes, fontsize=8, va="bottom")
    series = [cmp.concentration[k] for k in ("pde", "particles") if k in cmp.concentration]
    if scale is None and series:
        longest = max(series, key=lambda c: c["t"][-1])
        scale = time_scale(longest["t"], np.abs(np.diff(longest["mass_near_atoms"]))
                           + np.abs(np.diff(longest["effective_support"])))
    scale = scale or time_scale(cmp.t)
    _apply_time_scale(ax, scale, *_time_range(cmp.t, scale))
    ax.set_ylabel("distance")
    _plain_log_labels(ax)
    ax.set_title(f"PDE vs particles at their {len(cmp.t)} common times", fontsize=10)
    _mark_handoff(ax, t_handoff)
    if ax.get_lines():
        ax.legend(fontsize=8)
    ax = axes[1]
    r = cmp.options.get("atom_radius")
    within = f"within {r:.3g} rad" if r is not None else "within r"
    for kind, style in (("pde", "-"), ("particles", "--")):
        con = cmp.concentration.get(kind)
        if con is not None:
            name = "PDE" if kind == "pde" else kind
            ax.plot(con["t"], con["mass_near_atoms"], style, color="C0",
                    label=f"{name}: mass {within} of its final atoms")
            ax.plot(con["t"], con["effective_support"], style, color="C1", label=f"{name}: effective support (95%)")
    if series:
        longest = max(series, key=lambda c: c["t"][-1])
        _apply_time_scale(ax, scale, *_time_range(longest["t"], scale))
    else:
        ax.set_xlabel("time t")
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("fraction of the mass / of the sphere")
    ax.set_title("concentration", fontsize=10)
    _mark_handoff(ax, t_handoff)
    if ax.get_lines():                     # an archive written without the concentration measures has none
        # the curves start and end at 0 and 1: the middle of the right side is free
        ax.legend(fontsize=8, loc="center right")
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_validation(res, path: Path, title: str = "") -> Path:
    """Distances against N on log axes, fitted slopes, and the N^{-1/2} reference."""
    plt = _plt()
    i = int(np.argmin(np.abs(res.t - res.at)))
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
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
    seeds = len(res.seeds)
    ax.set_title((title + "\n" if title else "") + f"particles -> PDE: mean over {seeds} seed(s) (dots: each seed; "
                 "dotted: fit)", fontsize=9)
    # the lines fall to the lower right; the legend goes where they are not
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


# --- atoms ---------------------------------------------------------------------------------------------------
def _pde_atoms(run):
    """The PDE's atoms as the figures label them: (positions, masses, mass errors or None, what they are).
    The certified terminal atoms where the run has them (``PDEResult.terminal``), else the archive's
    /atoms/pde (node groups past the handoff, basins of the density before)."""
    pde = run.pde
    terminal = getattr(pde, "terminal", None) if pde is not None else None
    if terminal is not None:
        return (np.asarray(terminal.positions), np.asarray(terminal.masses), terminal.mass_errors,
                f"PDE: certified terminal atoms ({terminal.verdict})")
    if pde is None or "pde" not in run.atoms:
        return None
    pos, mass = run.atoms["pde"]
    kind = run.atoms.get("pde:attrs", {}).get("kind")
    return (np.asarray(pos), np.asarray(mass), run.atoms.get("pde:mass_errors"),
            "PDE: atoms (node groups)" if kind == "node groups" else "PDE: atoms (basins of the density)")


def _particle_atoms(run, i: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Atoms of the particles at snapshot i by the procedure and settings of the comparison
    (solvers.comparison: density peaks, the mass within ``radius`` of each): (positions, masses, radius)."""
    from ..comparison import atom_scales, measure_atoms
    from ..pde import space_for

    opts = run.comparison.options if run.comparison is not None else {}
    radius, h = atom_scales(run.model, opts.get("atom_radius"), opts.get("smoothing"), opts.get("cluster_scale", 0.5))
    a = measure_atoms(space_for(run.model.d)[1], x=run.particles.x[i], w=run.particles.w, radius=radius, smoothing=h,
                      threshold=opts.get("atom_threshold", 10.0), min_mass=opts.get("min_mass", 0.01))
    return a.positions, a.masses, radius


def _mass_text(m: float, err=None) -> str:
    if err is None or not np.isfinite(err):
        return f"{m:.3f}"
    return f"{m:.3f} ± {err:.0e}".replace("e-0", "e-")


def _label_atoms(ax, items: list, gap: float) -> int:
    """Horizontal mass labels over stems: ``items`` are (x, top, text, colour); labels of atoms closer than
    ``gap`` (x units) are stacked rather than drawn over each other. Returns the deepest stack."""
    items = sorted(items, key=lambda it: it[0])
    groups: list[list] = []
    for it in items:
        if groups and it[0] - groups[-1][0][0] < gap:
            groups[-1].append(it)
        else:
            groups.append([it])
    for g in groups:
        top = max(it[1] for it in g)
        for k, (x, _, text, colour) in enumerate(g):
            ax.annotate(text, (x, top), xytext=(0, 4 + 1.45 * LABEL_SIZE * k), textcoords="offset points",
                        ha="center", va="bottom", fontsize=LABEL_SIZE, color=colour, rotation=0)
    return max((len(g) for g in groups), default=0)


# --- S^1 -------------------------------------------------------------------------------------------------------
def _circle_bins(n: int) -> np.ndarray:
    return np.linspace(-np.pi, np.pi, n + 1)


def _circle_histogram(x: np.ndarray, w: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """Density (uniform = 1) of the point measure sum w_j delta_{x_j}: its mass in each bin over the bin's
    share of the circle."""
    h, _ = np.histogram(_angle(x), bins=bins, weights=w)
    return h / np.diff(bins) * 2 * np.pi


#: how far (rad) a node of one initial node spreads its mass towards an empty neighbourhood (5 degrees)
NODE_REACH = np.radians(5.0)


def _node_density(x: np.ndarray, w: np.ndarray, count: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """Density (uniform = 1) on ``bins`` of the density a node measure on S^1 stands for.

    Each node's mass is spread evenly over its Voronoi cell (half way to each neighbour): the nodes start
    as equal-mass quantiles of the density, and their cells give it back. A node that holds several initial
    nodes (an atom, or one forming) keeps its mass within half a bin of itself, and a single node at most
    ``NODE_REACH`` from itself. Binned as it is (mass per bin), a sparse diffuse part would be a speckle of
    single nodes and empty bins.
    """
    th = _angle(x)
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


def _circle_figures(run, out: Path) -> list[Path]:
    files = []
    if run.pde is not None and len(run.pde.t) > 1:
        files.append(_spacetime_figure(run, out))
    files.append(_final_figure(run, out))
    return files


def _spacetime_figure(run, out: Path) -> Path:
    plt = _plt()
    from matplotlib.colors import LogNorm
    pde, part = run.pde, run.particles
    T = np.asarray(pde.t, dtype=float)
    scale = time_scale(*_motion(run))
    rows = np.nonzero(T > 0)[0] if scale == "log" else np.arange(len(T))
    f, finv = _forward(scale), _inverse(scale)
    u = f(T[rows])
    # each snapshot a band reaching half way to its neighbours on the drawn axis
    edges = finv(np.concatenate([[u[0]], 0.5 * (u[:-1] + u[1:]), [u[-1]]]))
    th = _angle(pde.grid)
    order = np.argsort(th)
    th_sorted = th[order]
    th_edges = np.concatenate([[-np.pi], 0.5 * (th_sorted[:-1] + th_sorted[1:]), [np.pi]])
    bins = _circle_bins(SPACETIME_BINS)
    series = np.ma.masked_all((len(rows), th.size))
    binned = np.ma.masked_all((len(rows), SPACETIME_BINS))
    for r, i in enumerate(rows):
        nodes = pde.node_measure(int(i))
        if nodes is None:
            series[r] = pde.density[i, order]
        else:
            h = _node_density(nodes.x, nodes.w, nodes.count, bins)
            binned[r] = np.ma.masked_equal(h, 0.0)     # an empty bin: no mass, drawn as the background
    # at least 10: the uniform density (1) sits in the middle of the scale, not at its top
    vmax = max(float(np.ma.max(series)) if series.count() else 0.0, float(np.ma.max(binned)) if binned.count() else 0.0,
               10.0)
    lo = 1e-2
    norm = LogNorm(vmin=lo, vmax=vmax)
    import matplotlib
    cmap = matplotlib.colormaps["magma"]
    fig, ax = plt.subplots(figsize=(9, 6))
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
        ang = _angle(part.x[:, sel, :])
        tt = np.asarray(part.t, dtype=float)
        keep = (tt <= T[-1] * 1.0000001) & ((tt > 0) if scale == "log" else True)
        for j in range(len(sel)):
            a = ang[keep, j]
            jumps = np.abs(np.diff(a)) > np.pi   # break the line where it wraps around
            a_plot = np.insert(a, np.nonzero(jumps)[0] + 1, np.nan)
            t_plot = np.insert(tt[keep], np.nonzero(jumps)[0] + 1, np.nan)
            ax.plot(a_plot, t_plot, color="cyan", lw=0.4, alpha=0.6)
    _angle_axis(ax)
    _apply_time_scale(ax, scale, float(edges[0]), float(edges[-1]), axis="y")
    pa = _pde_atoms(run)
    if pa is not None:
        for pos in pa[0]:
            ax.plot(_angle(pos), edges[-1], marker="v", color="lime", ms=9, mec="k", clip_on=False, ls="none")
    title = "density over time" + (" with particle trajectories (cyan)" if part is not None else "")
    th_h = pde.t_handoff
    if th_h is not None:
        shown = "spectral series below, node measure above"
        if not _mark_handoff(ax, th_h, axis="y", text=f"handoff t = {th_h:.3g}: {shown}", color="white"):
            title += f"\nhandoff at t = {th_h:.3g}, before the first band: every band is the node measure"
    if len(T) < 6:
        # e.g. the default save_every (the first and last states only): a band is not an evolution
        title += f"\nonly {len(T)} snapshots, each band the nearest one: set [pde] save_every for more"
    ax.set_title(title, fontsize=10, pad=12)         # room for the atom markers on the top edge
    fig.suptitle(_title(run), fontsize=10)
    return _save(fig, out / "spacetime.png")


def _end(res) -> str:
    """How a solver's run ended, for a legend: its stop reason, or that no end is recorded."""
    reason = getattr(res, "stop_reason", "") or ""
    return "no end recorded" if reason in ("", "killed") else reason


def _final_figure(run, out: Path) -> Path:
    """Densities at each solver's end above (log), the atoms as stems labelled with their masses below."""
    plt = _plt()
    pde, part = run.pde, run.particles
    fig, (ax, axm) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    bins = _circle_bins(PROFILE_BINS)
    times = []
    if pde is not None:
        t_end = float(pde.t[-1])
        nodes = pde.node_measure(-1)
        if nodes is None:
            th = _angle(pde.grid)
            order = np.argsort(th)
            ax.semilogy(th[order], np.clip(pde.density[-1, order], 1e-4, None), color="C0",
                        label=f"PDE density at t = {t_end:.4g} ({_end(pde)})")
        else:
            h = _node_density(nodes.x, nodes.w, nodes.count, bins)
            ax.stairs(np.clip(h, 1e-4, None), bins, color="C0",
                      label=f"PDE node measure at t = {t_end:.4g} ({_end(pde)}), {360 // PROFILE_BINS}° bins, "
                            "each node's mass spread over its Voronoi cell")
        times.append(("PDE", t_end))
    if part is not None:
        t_p = float(part.t[-1])
        h = _circle_histogram(part.x[-1], part.w, bins)
        ax.stairs(np.clip(h, 1e-4, None), bins, color="C1",
                  label=f"particles (N = {part.x.shape[1]}) at t = {t_p:.4g} ({_end(part)}), "
                        f"{360 // PROFILE_BINS}° bins")
        times.append(("particles", t_p))
    ax.set_yscale("log")
    ax.set_ylim(1e-3, None)
    ax.set_ylabel("density (uniform = 1)")
    ax.legend(fontsize=9, loc="best")
    items, top = [], 0.0
    pa = _pde_atoms(run)
    if pa is not None and len(pa[1]):
        pos, mass, errs, what = pa
        ang = _angle(pos)
        ml, sl, bl = axm.stem(ang, mass, linefmt="C0-", markerfmt="C0o", basefmt=" ", label=what)
        if errs is not None:
            axm.errorbar(ang, mass, yerr=np.asarray(errs), fmt="none", ecolor="C0", capsize=4, lw=1.2)
        for k in range(len(mass)):
            items.append((ang[k], mass[k], _mass_text(mass[k], None if errs is None else errs[k]), "C0"))
        top = max(top, float(np.max(mass)))
    if part is not None:
        ppos, pmass, radius = _particle_atoms(run, -1)
        if len(pmass):
            ang = _angle(ppos)
            axm.stem(ang, pmass, linefmt="C1--", markerfmt="C1^", basefmt=" ",
                     label=f"particles: density peaks, mass within {radius:.3g} rad (as the comparison)")
            items += [(a, m, _mass_text(m), "C1") for a, m in zip(ang, pmass)]
            top = max(top, float(np.max(pmass)))
    depth = _label_atoms(axm, items, gap=0.9)
    if items:
        # room above the stems for the stacked labels (about 0.13 of the axis each)
        axm.set_ylim(0, top / max(0.3, 1.0 - 0.14 * depth - 0.12))
        axm.legend(fontsize=9, loc="upper left")
    else:
        axm.set_ylim(0, 1)
        axm.text(0.5, 0.5, "no atoms", transform=axm.transAxes, ha="center", fontsize=LABEL_SIZE, color="0.4")
    axm.set_ylabel("atom mass")
    _angle_axis(axm)
    ax.tick_params(labelbottom=False)
    ax.set_xlabel("")
    if len(times) == 2 and times[0][1] != times[1][1]:
        # not the same time: say so (the comparison is made at common times, this is each solver's end)
        head = (f"final states at each solver's own end: PDE at t = {times[0][1]:.4g} ({_end(pde)}), particles at "
                f"t = {times[1][1]:.4g} ({_end(part)})")
    elif len(times) == 2:
        head = f"final state of the PDE and the particles at t = {times[0][1]:.4g}"
    else:
        head = f"final state of the {times[0][0]} at t = {times[0][1]:.4g} ({_end(pde if pde is not None else part)})"
    ax.set_title(head, fontsize=10)
    fig.suptitle(_title(run), fontsize=10)
    return _save(fig, out / "final.png")


# --- S^2 -------------------------------------------------------------------------------------------------------
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
    """Labelled longitude (on the equator, outlined to read on any colour) and latitude (beside the map)."""
    ax.grid(True, alpha=0.35, color="0.6")
    ax.set_xticks(np.radians([-120, -60, 0, 60, 120]))
    ax.set_xticklabels(["120°W", "60°W", "0°", "60°E", "120°E"], fontsize=8, color="white",
                       path_effects=_outlined("white"))
    ax.set_yticks(np.radians([-60, -30, 0, 30, 60]))
    ax.set_yticklabels(["60°S", "30°S", "0°", "30°N", "60°N"], fontsize=8)


def _sphere_figures(run, out: Path) -> list[Path]:
    from ..comparison import common_times

    plt = _plt()
    import matplotlib
    from matplotlib.colors import LogNorm
    from matplotlib.lines import Line2D
    pde, part = run.pde, run.particles
    times, moved = _motion(run)
    idx = _panel_times(times, moved)
    ncol = 2 if len(idx) > 1 else 1
    nrow = int(math.ceil(len(idx) / ncol))
    # a Mollweide map is twice as wide as high: rows of 2.75 in under panels 5 in wide, with their titles
    height = 2.75 * nrow + 1.3
    fig = plt.figure(figsize=(5.0 * ncol + 1.0, height))
    grid = fig.add_gridspec(nrow, ncol, left=0.06, right=0.87, top=1 - 0.75 / height, bottom=0.55 / height,
                            hspace=0.18, wspace=0.1)
    cmap = matplotlib.colormaps["magma"]
    norm, mesh = None, None
    lo = 1e-2
    fields = [None] * len(idx)
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
    pa = _pde_atoms(run)
    if pa is not None and not len(pa[1]):
        pa = None                                  # no atom: none to mark, nor to name in the legend
    for j, i in enumerate(idx):
        ax = fig.add_subplot(grid[j // ncol, j % ncol], projection="mollweide")
        ax.set_facecolor(cmap(0.0))
        t = times[i]
        note = ""
        if pde is not None:
            mesh = ax.pcolormesh(lon[:, order], lat[:, order], np.clip(fields[j], lo, None)[:, order], shading="auto",
                                 cmap=cmap, norm=norm)
            if pde.node_measure(int(i)) is not None:
                note = " (nodes)"
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
            if pa is not None:
                marks.append((pa[0], pa[1], pa[2], "v", "lime", 110))
            if part is not None:
                ppos, pmass, _ = _particle_atoms(run, _nearest(part.t, t))
                marks.append((ppos, pmass, None, "^", "white", 45))
            for n_mark, (apos, amass, aerr, mk, col, size) in enumerate(marks):
                alon, alat = _lonlat(np.asarray(apos).reshape(-1, 3))
                # the particles' smaller marker over the PDE's: a matched pair shows both
                ax.scatter(alon, alat, marker=mk, s=size, c=col, edgecolors="k", zorder=5 + n_mark)
                for k, (a, b, m) in enumerate(zip(alon, alat, amass)):
                    text = _mass_text(m, None if aerr is None else aerr[k])
                    # the PDE's mass right of its atom, the particles' left: a matched pair stays readable
                    ax.annotate(text, (a, b), xytext=(8 if n_mark == 0 else -8, 0), textcoords="offset points",
                                ha="left" if n_mark == 0 else "right", va="center", fontsize=LABEL_SIZE, color=col,
                                zorder=7, bbox=dict(boxstyle="round,pad=0.15", fc="black", alpha=0.6, lw=0))
        ax.set_title(title + note, fontsize=LABEL_SIZE)
        _sphere_axes(ax)
    if mesh is not None:
        fig.colorbar(mesh, cax=fig.add_axes([0.9, 0.2, 0.018, 0.6]), label="rho (uniform = 1)")
    handles = []
    if part is not None:
        handles.append(Line2D([], [], ls="none", marker="o", ms=4, color="cyan", label="particles"))
    if pa is not None:
        handles.append(Line2D([], [], ls="none", marker="v", ms=9, mfc="lime", mec="k",
                              label=pa[3].replace("PDE: ", "PDE ") + ": mass right"))
    if part is not None:
        handles.append(Line2D([], [], ls="none", marker="^", ms=9, mfc="white", mec="k",
                              label="particle atoms (as the comparison): mass left"))
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9, frameon=False,
                   title="atoms at the last time shown", title_fontsize=9)
    what = ("PDE density, log scale (panels marked nodes: the node measure past the handoff, drawn with a "
            f"{np.degrees(NODE_KERNEL):g}° kernel)") if pde is not None else "particles"
    fig.suptitle(_title(run) + "\nMollweide maps: " + what, fontsize=9)
    return [_save(fig, out / "maps.png", tight=False)]


# --- energy -----------------------------------------------------------------------------------------------
def _to_the_end(run) -> bool:
    """Whether the PDE ran with t_final = inf (until its terminal state is certified)."""
    from .config import ConfigError, parse_config
    try:
        cfg = parse_config(run.config_text)
        return cfg.pde is not None and math.isinf(float(cfg.pde["t_final"]))
    except (ConfigError, KeyError, TypeError, ValueError):
        return bool(getattr(run.pde, "plateaus", None)) or getattr(run.pde, "terminal", None) is not None


def _energy_figure(run, out: Path) -> Path:
    """Energy against time (plateaus and the certified end marked); the spectral solver's diagnostics up to
    the handoff, the node continuation's after it."""
    plt = _plt()
    pde, part = run.pde, run.particles
    handoff = pde.t_handoff if pde is not None else None
    ncol = 1 + (pde is not None) + (handoff is not None)
    fig = plt.figure(figsize=(5.2 + 4.2 * (ncol - 1), 6.4))
    grid = fig.add_gridspec(2, ncol, width_ratios=[1.25] + [1.0] * (ncol - 1))
    ax = fig.add_subplot(grid[:, 0])
    t_all, moved = _motion(run)
    scale = "log" if pde is not None and _to_the_end(run) else time_scale(t_all, moved)
    lo, hi = _time_range(t_all, scale)
    if part is not None and len(part.t):
        lo_p, hi_p = _time_range(part.t, scale)
        lo, hi = min(lo, lo_p), max(hi, hi_p)
    # a log axis has no t = 0: the initial energy is left out rather than joined to the axis' edge
    shown = (lambda t: np.asarray(t) > 0) if scale == "log" else (lambda t: np.ones(len(t), bool))
    if pde is not None:
        k = shown(pde.t)
        ax.plot(pde.t[k], pde.energy[k], "o-", ms=3, label="PDE")
    if part is not None and getattr(part, "energy", None) is not None:
        k = shown(part.t)
        ax.plot(part.t[k], part.energy[k], "-", label=f"particles (N = {part.x.shape[1]})")
    _apply_time_scale(ax, scale, lo, hi)
    ax.set_ylabel("energy E")
    for k, pl in enumerate(getattr(pde, "plateaus", None) or []):
        ax.axvspan(pl.t_entered, pl.t_certified, color="C2", alpha=0.2, lw=0,
                   label="plateau: entered -> certified" if k == 0 else None)
        ax.hlines(pl.energy, pl.t_entered, pl.t_certified, color="C2", lw=2)
        ax.annotate(f"plateau {k + 1}: E = {pl.energy:.4f}\n{len(pl.masses)} atoms, growth {pl.growth:.3g}",
                    (pl.t_entered, pl.energy), xytext=(0, -6), textcoords="offset points", ha="left", va="top",
                    fontsize=8, color="C2")
    terminal = getattr(pde, "terminal", None) if pde is not None else None
    if terminal is not None:
        ax.plot([terminal.t], [terminal.energy], "*", color="C3", ms=14, mec="k", zorder=5, clip_on=False,
                label=f"certified end t = {terminal.t:.4g}: {len(terminal.masses)} atom(s), {terminal.verdict}")
    _mark_handoff(ax, handoff)
    ax.legend(fontsize=8, loc="best")
    ax.set_title("energy", fontsize=10)
    if pde is not None:
        _spectral_panels(fig, grid, pde, handoff)
    if handoff is not None:
        _continuation_panels(fig, grid, pde, handoff, scale, terminal)
    fig.suptitle(_title(run), fontsize=10)
    return _save(fig, out / "energy.png")


def _plain_log_labels(ax) -> None:
    """Tick labels of a log y axis as plain numbers ("2", "5") where it spans under two decades, where
    matplotlib would label the minor ticks as 2x10^0, 5x10^0; a linear axis where it spans under a factor 3."""
    from matplotlib.ticker import FuncFormatter
    lo, hi = ax.get_ylim()
    if lo > 0 and hi / lo < 3:
        # within a factor of 3 a log axis may hold no tick at all (1.3 to 1.5): a linear one reads better
        ax.set_yscale("linear")
        ax.relim()
        ax.autoscale_view()
    elif lo > 0 and hi / lo < 100:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        # of the minor ticks only 2 and 5 (x 10^k) are labelled: all eight crowd the axis
        ax.yaxis.set_minor_formatter(FuncFormatter(
            lambda v, _: f"{v:g}" if v > 0 and round(v / 10.0 ** math.floor(math.log10(v)), 6) in (2.0, 5.0) else ""))


def _spectral_panels(fig, grid, pde, handoff: float | None) -> None:
    """The spectral tail (with its thresholds and the refinements) and max rho, up to the handoff only:
    past it the series is the smoothed node measure, whose tail and maximum say nothing about accuracy."""
    t = np.asarray(pde.t, dtype=float)
    keep = np.array([pde.node_measure(int(i)) is None for i in range(len(t))])
    end = handoff if handoff is not None else float(t[-1])
    ts = t[keep]
    scale = time_scale(ts)
    a1 = fig.add_subplot(grid[0, 1])
    a2 = fig.add_subplot(grid[1, 1], sharex=a1)
    a1.semilogy(ts, np.maximum(pde.tail[keep], 1e-17), "o-", ms=3, color="C0")
    a1.axhline(pde.options.get("tail_max", 1e-3), color="0.4", ls=":", lw=1)
    a1.text(0.01, pde.options.get("tail_max", 1e-3), " tail_max", transform=a1.get_yaxis_transform(), ha="left",
            va="top", fontsize=8, color="0.3")
    a1.set_ylabel("spectral tail")
    a2.semilogy(ts, pde.density.reshape(len(t), -1)[keep].max(axis=1), "s-", ms=3, color="C1")
    a2.set_ylabel("max rho (uniform = 1)")
    _plain_log_labels(a2)
    lo = ts[ts > 0][0] if scale == "log" else 0.0
    _apply_time_scale(a2, scale, lo, end if end > lo else lo + 1.0)
    a1.tick_params(labelbottom=False)
    unit = "K" if pde.model.d == 2 else "L"
    for k, (tr, _, new) in enumerate(pde.refinements):
        if tr <= end:
            for a in (a1, a2):
                a.axvline(tr, color="0.6", ls=":", lw=1)
            # staggered: refinements come in quick succession
            a1.annotate(f"{unit}={int(new)}", (tr, 0.0), xycoords=a1.get_xaxis_transform(),
                        xytext=(2, 3 + 10 * (k % 3)), textcoords="offset points", ha="left", va="bottom", fontsize=8,
                        color="0.3")
    if handoff is not None:
        for a in (a1, a2):
            a.axvline(handoff, color="0.35", ls="--", lw=1)
        a2.annotate("handoff", (handoff, 0.02), xycoords=a2.get_xaxis_transform(), xytext=(-2, 0),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8, color="0.3")
    if keep.sum() < 3 and handoff is not None:
        # the spectral phase fell between two snapshots: say so, rather than leave two near-empty panels
        later = t[~keep][0] if (~keep).any() else end
        a2.text(0.5, 0.5, f"the spectral phase ended at t = {handoff:.3g},\nbefore the snapshot at t = {later:.4g}:\n"
                "only its first snapshot is recorded", transform=a2.transAxes, ha="center", va="center", fontsize=9,
                color="0.3")
    span = f"t = 0 .. {end:.3g} (handoff)" if handoff is not None else f"t = 0 .. {end:.4g}"
    a1.set_title(f"spectral solver, {span}: {int(keep.sum())} snapshot(s)", fontsize=10)


def _continuation_panels(fig, grid, pde, handoff: float, scale: str, terminal) -> None:
    """The node continuation from the handoff: the largest node speed and the number of nodes."""
    t = np.asarray(pde.t, dtype=float)
    idx = [i for i in range(len(t)) if pde.nodes and pde.nodes[i] is not None]
    tn = t[idx]
    speed = np.array([float(pde.nodes[i]["max_drift"]) for i in idx])
    count = np.array([len(pde.nodes[i]["w"]) for i in idx])
    a1 = fig.add_subplot(grid[0, 2])
    a2 = fig.add_subplot(grid[1, 2], sharex=a1)
    shown = speed > 0
    a1.semilogy(tn[shown], speed[shown], "o-", ms=3, color="C4")
    if terminal is not None:
        from ..terminal import CERTIFICATE
        a1.axhline(CERTIFICATE, color="C3", ls=":", lw=1)
        a1.text(0.01, CERTIFICATE, " certificate", transform=a1.get_yaxis_transform(), ha="left", va="bottom",
                fontsize=8, color="C3")
        a1.plot([terminal.t], [max(terminal.max_speed, CERTIFICATE)], "*", color="C3", ms=12, mec="k", clip_on=False)
    for pl in getattr(pde, "plateaus", None) or []:
        for a in (a1, a2):
            a.axvspan(pl.t_entered, pl.t_certified, color="C2", alpha=0.2, lw=0)
    a1.set_ylabel("max |v| over the nodes")
    _plain_log_labels(a1)
    a2.plot(tn, count, "-", drawstyle="steps-post", color="C5")
    a2.set_ylabel("nodes")
    a2.set_ylim(0, None)
    if len(tn):
        lo = max(float(tn[0]), 1e-300) if scale == "log" else float(handoff)
        _apply_time_scale(a2, scale, lo, float(tn[-1]) if tn[-1] > lo else lo * 2 + 1)
    a1.tick_params(labelbottom=False)
    a1.set_title(f"node continuation from the handoff at t = {handoff:.3g}", fontsize=10)


def _save(fig, path: Path, tight: bool = True) -> Path:
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight" if not tight else None)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path
