"""Rules a figure must follow to go on a slide as it is, checked on matplotlib's renderer geometry
(tests/test_figures.py holds every figure kind to them; ``scripts/check_figures.py`` checks the figures of
any archive).

Each rule takes a drawn figure (``fig.canvas.draw()``) and returns its violations as strings; :func:`check`
runs them all. Everything is measured in display coordinates (pixels at the figure's dpi): the window
extent of every text that is drawn (tick labels of the ticks inside the view only), the legend's box, the
data points of lines and collections after every transform (scales, projections).

The rules:

- ``overlap``: no two drawn texts' boxes overlap (tick labels, titles, axis labels, annotations, legend
  texts, atom labels), within one figure.
- ``outside``: every text is inside the figure, and every text placed in an axes (``ax.texts``: notes,
  labels, annotations) inside that axes.
- ``small``: no text is smaller than ``MIN_POINTS``.
- ``legend``: no legend's box covers a plotted point or a point of a drawn segment (lines densified every
  ``STEP_PX`` pixels; reference lines such as a handoff's included).
- ``ticks``: every axis that shows tick labels shows at least 3 non-empty ones (an axis whose labels are
  all switched off, a panel sharing its neighbour's axis, is exempt).
- ``empty``: every panel (axes but colour bars) draws at least 2 data points, or an image / mesh.
- ``time``: a time axis (its label starts with "time") is symmetric-logarithmic with t = 0 shown
  (at the axis' start, a tick labelled "0") when the run's positive times span more than three decades,
  linear otherwise; all time axes of a figure show one range.
"""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np

#: the smallest text size allowed (points)
MIN_POINTS = 8.0
#: overlaps and coverings smaller than this (pixels) are round-off of the layout
TOL_PX = 1.0
#: spacing (pixels) of the points sampled along a drawn segment
STEP_PX = 3.0
#: the run's span (last / first positive time) above which time is logarithmic
LOG_SPAN = 1e3

RULES = ("overlap", "outside", "small", "legend", "ticks", "empty", "time")


def _renderer(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _drawn_ticks(axis):
    """The ticks the axis draws: those inside its view interval (matplotlib keeps others unlabelled)."""
    try:
        return list(axis._update_ticks())
    except AttributeError:                      # pragma: no cover - other matplotlib versions
        lo, hi = sorted(axis.get_view_interval())
        return [t for t in axis.get_major_ticks() + axis.get_minor_ticks() if lo <= t.get_loc() <= hi]


def _tick_labels(axis) -> list:
    out = []
    for tick in _drawn_ticks(axis):
        for lab in (tick.label1, tick.label2):
            if lab.get_visible() and lab.get_text().strip():
                out.append(lab)
    return out


def texts(fig) -> list:
    """Every text the figure draws (visible, non-empty, under visible parents), tick labels of drawn ticks only."""
    from matplotlib.axis import Axis
    from matplotlib.text import Text

    found = []

    def walk(artist) -> None:
        if not artist.get_visible():
            return
        if isinstance(artist, Axis):
            found.extend(_tick_labels(artist))
            for t in (artist.label, artist.offsetText):
                if t.get_visible() and t.get_text().strip():
                    found.append(t)
            return
        if isinstance(artist, Text):
            if artist.get_text().strip():
                found.append(artist)
            return
        for child in artist.get_children():
            walk(child)

    walk(fig)
    # a text reached twice (an artist that is a child of two others) counts once
    seen, out = set(), []
    for t in found:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _plain(text: str) -> str:
    """A tick label's text without mathtext markup ("$\\mathdefault{10^{-1}}$" -> "10^{-1}")."""
    import re
    return re.sub(r"\\mathdefault\{(.*)\}", r"\1", text.replace("$", "")).strip()


def _name(t) -> str:
    s = " ".join(t.get_text().split())
    return repr(s if len(s) <= 40 else s[:37] + "...")


def _intersect(a, b, tol: float = TOL_PX) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > tol) and (min(a.y1, b.y1) - max(a.y0, b.y0) > tol)


def _inside(box, outer, tol: float = TOL_PX) -> bool:
    return (box.x0 >= outer.x0 - tol and box.x1 <= outer.x1 + tol and box.y0 >= outer.y0 - tol
            and box.y1 <= outer.y1 + tol)


def overlap(fig, renderer) -> list[str]:
    items = [(t, t.get_window_extent(renderer)) for t in texts(fig)]
    out = []
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            if _intersect(items[i][1], items[j][1]):
                out.append(f"overlap: {_name(items[i][0])} and {_name(items[j][0])}")
    return out


def outside(fig, renderer) -> list[str]:
    out = []
    page = fig.bbox
    for t in texts(fig):
        if not _inside(t.get_window_extent(renderer), page):
            out.append(f"outside: {_name(t)} leaves the figure")
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        box = ax.get_window_extent(renderer)
        for t in ax.texts:
            if t.get_visible() and t.get_text().strip() and not _inside(t.get_window_extent(renderer), box):
                out.append(f"outside: {_name(t)} leaves its axes")
    return out


def small(fig, renderer) -> list[str]:
    return [f"small: {_name(t)} is {t.get_fontsize():g} pt" for t in texts(fig) if t.get_fontsize() < MIN_POINTS]


def _densify(xy: np.ndarray, joined: bool) -> np.ndarray:
    """Display points of a drawn polyline: its vertices, and with ``joined`` points every STEP_PX along each
    segment between finite vertices."""
    xy = np.asarray(xy, dtype=float).reshape(-1, 2)
    if not joined or len(xy) < 2:
        return xy[np.all(np.isfinite(xy), axis=1)]
    pts = [xy[np.all(np.isfinite(xy), axis=1)]]
    a, b = xy[:-1], xy[1:]
    ok = np.all(np.isfinite(a), axis=1) & np.all(np.isfinite(b), axis=1)
    for p, q in zip(a[ok], b[ok]):
        n = int(min(2000, np.hypot(*(q - p)) // STEP_PX))
        if n > 0:
            s = np.linspace(0.0, 1.0, n + 2)[1:-1, None]
            pts.append(p + s * (q - p))
    return np.concatenate(pts)


def _data_points(ax, data_only: bool = False, joined: bool | None = None):
    """(label, display points) of what the axes plots: lines (densified: ``joined``, by default unless
    ``data_only``), scatter offsets, line collections (stems, error bars), step patches; ``data_only``: in
    data coordinates only (not reference lines drawn in axes coordinates across the panel)."""
    joined = not data_only if joined is None else joined
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.patches import StepPatch

    box = ax.get_window_extent()
    for line in ax.get_lines():
        if not line.get_visible() or (data_only and line.get_transform() != ax.transData):
            continue
        try:
            # the drawn path (with its steps, for a drawstyle "steps-*")
            xy = line.get_transform().transform(line.get_path().vertices)
        except ValueError:
            continue
        pts = _densify(xy, joined and line.get_linestyle() not in ("None", "none", "", " "))
        if line.get_clip_on():
            pts = pts[_within(pts, box)]
        yield line.get_label(), pts
    for coll in ax.collections:
        if not coll.get_visible():
            continue
        if isinstance(coll, PathCollection):
            if data_only and coll.get_offset_transform() != ax.transData:
                continue
            off = np.asarray(coll.get_offsets(), dtype=float).reshape(-1, 2)
            pts = coll.get_offset_transform().transform(off)
            pts = pts[np.all(np.isfinite(pts), axis=1)]
        elif isinstance(coll, LineCollection):
            if data_only and coll.get_transform() != ax.transData:
                continue
            tr = coll.get_transform()
            segs = [_densify(tr.transform(np.asarray(s, dtype=float)), joined) for s in coll.get_segments()
                    if len(s)]
            pts = np.concatenate(segs) if segs else np.zeros((0, 2))
        else:
            continue
        if coll.get_clip_on():
            pts = pts[_within(pts, box)]
        yield coll.get_label(), pts
    for patch in ax.patches:
        if isinstance(patch, StepPatch) and patch.get_visible():
            # the drawn outline: the steps' tops and the vertical edges between them
            xy = patch.get_transform().transform(patch.get_path().vertices)
            pts = _densify(xy, joined)
            yield patch.get_label(), pts[_within(pts, box)]


def _within(pts: np.ndarray, box, tol: float = 0.5) -> np.ndarray:
    return ((pts[:, 0] >= box.x0 - tol) & (pts[:, 0] <= box.x1 + tol) & (pts[:, 1] >= box.y0 - tol)
            & (pts[:, 1] <= box.y1 + tol))


def _legends(fig) -> list:
    out = list(fig.legends)
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None and leg.get_visible():
            out.append(leg)
    return out


def legend(fig, renderer) -> list[str]:
    out = []
    for leg in _legends(fig):
        b = leg.get_window_extent(renderer)
        x0, x1, y0, y1 = b.x0 + TOL_PX, b.x1 - TOL_PX, b.y0 + TOL_PX, b.y1 - TOL_PX
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            for label, pts in _data_points(ax):
                hit = (pts[:, 0] > x0) & (pts[:, 0] < x1) & (pts[:, 1] > y0) & (pts[:, 1] < y1)
                if hit.any():
                    what = label if label and not label.startswith("_") else "an unlabelled curve"
                    out.append(f"legend: the legend at ({b.x0:.0f}, {b.y0:.0f}) covers {hit.sum()} point(s) of "
                               f"{what!r}")
    return out


def _panels(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible() and ax.axison and not hasattr(ax, "_colorbar")
            and ax.get_label() != "<colorbar>"]


def ticks(fig, renderer) -> list[str]:
    out = []
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if not axis.get_visible():
                continue
            drawn = _drawn_ticks(axis)
            on = [lab for t in drawn for lab in (t.label1, t.label2) if lab.get_visible()]
            majors = set(id(t) for t in axis.get_major_ticks())
            if not any(lab.get_visible() for t in drawn if id(t) in majors for lab in (t.label1, t.label2)):
                continue                       # labels switched off: a panel sharing its neighbour's axis
            labelled = {lab.get_text().strip() for lab in on if lab.get_text().strip()}
            if len(labelled) < 3:
                title = ax.get_title() or ax.get_ylabel() or ax.get_xlabel() or ax.get_label()
                out.append(f"ticks: the {name} axis of {title!r} has {len(labelled)} labelled tick(s) "
                           f"{sorted(labelled)}")
    return out


def empty(fig, renderer) -> list[str]:
    from matplotlib.collections import PolyCollection, QuadMesh
    from matplotlib.image import AxesImage

    out = []
    for ax in _panels(fig):
        if ax.images or any(isinstance(c, (QuadMesh, AxesImage, PolyCollection)) for c in ax.collections):
            continue
        count = sum(len(pts) for _, pts in _data_points(ax, data_only=True))
        if count < 2:
            title = ax.get_title() or ax.get_ylabel() or ax.get_label()
            out.append(f"empty: the panel {title!r} draws {count} data point(s)")
    return out


def _time_axes(fig) -> list:
    found = []
    for ax in _panels(fig):
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if axis.label.get_text().strip().lower().startswith("time"):
                found.append((ax, name, axis))
    return found


def time_axes(fig, renderer, span: tuple[float, float] | None) -> list[str]:
    """``span``: (first positive time, last time) of the run the figure draws (None: not checked)."""
    found = _time_axes(fig)
    out: list = []
    if span is None or not found:
        return out
    lo, hi = span
    long_run = lo > 0 and hi / lo > LOG_SPAN
    ranges = []
    for ax, name, axis in found:
        scale = axis.get_scale()
        view = sorted(axis.get_view_interval())
        ranges.append(view)
        if long_run:
            zero = any(_plain(t.label1.get_text()) in ("0", "0.0") and t.label1.get_visible() and t.get_loc() == 0
                       for t in _drawn_ticks(axis))
            if scale != "symlog" or view[0] > 0 or not zero:
                out.append(f"time: the run spans {math.log10(hi / lo):.1f} decades but its {name} time axis is "
                           f"{scale} from {view[0]:g}" + ("" if zero else " without t = 0 labelled"))
        elif scale != "linear":
            out.append(f"time: the run spans {math.log10(hi / lo) if lo > 0 else 0:.1f} decades (<= 3) but its "
                       f"{name} time axis is {scale}")
    if len(ranges) > 1:
        a = np.array(ranges)
        width = max(float(np.max(a[:, 1]) - np.min(a[:, 0])), 1e-300)
        if np.max(np.ptp(a, axis=0)) > 1e-6 * width:
            shown = [tuple(float(f'{v:.4g}') for v in r) for r in ranges]
            out.append(f"time: the time axes show different ranges {shown}")
    return out


@contextlib.contextmanager
def captured():
    """A context in which ``Figure.savefig`` records the figure (by file name, into the dict it yields)
    instead of writing it, and ``pyplot.close`` leaves it drawable: the figures as the plotting code made
    them, to check."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    got: dict = {}
    saved, closed = Figure.savefig, plt.close
    Figure.savefig = lambda self, fname, *a, **k: got.__setitem__(Path(fname).name, self)
    plt.close = lambda *a, **k: None
    try:
        yield got
    finally:
        Figure.savefig, plt.close = saved, closed


def check(fig, span: tuple[float, float] | None = None, rules=RULES) -> list[str]:
    """Every violation of ``rules`` by the figure (drawn here), as one string each."""
    renderer = _renderer(fig)
    out = []
    for rule in rules:
        if rule == "time":
            out += time_axes(fig, renderer, span)
        else:
            out += {"overlap": overlap, "outside": outside, "small": small, "legend": legend, "ticks": ticks,
                    "empty": empty}[rule](fig, renderer)
    return out


def broken_rules(violations: list[str]) -> list[str]:
    """The rules named in ``violations``, each once, in RULES order."""
    named = {v.split(":", 1)[0] for v in violations}
    return [r for r in RULES if r in named]


def span_of(*times) -> tuple[float, float]:
    """(first positive time, last time) over the arrays of snapshot times given (None entries skipped)."""
    ts = np.concatenate([np.asarray(t, dtype=float).ravel() for t in times if t is not None])
    pos = ts[ts > 0]
    return (float(pos.min()) if len(pos) else 0.0, float(ts.max()))
