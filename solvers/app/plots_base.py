"""What every figure of attnpde shares: the time axis, readable log axes, atom masses as text, labels kept
inside their panel and apart, the title of a run, saving.

**Time.** One time axis per run (:func:`run_time_axis`), the same in all its figures and all their panels:
from t = 0 to the run's last snapshot, linear when the run's positive snapshot times span at most three
decades (``LOG_SPAN``), else symmetric-logarithmic: a narrow linear strip from t = 0 to the first positive
snapshot (shaded, so that t = 0 is shown apart), logarithmic beyond it, labelled 0 and the powers of ten.

**Masses.** An atom's mass is written to the precision of its error (:func:`mass_text`): the error rounded
to one significant digit (two when it starts with 1), the mass to the same decimal place.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: text a reader must read (atom masses, tick labels, titles of panels), in points
LABEL_SIZE = 10
#: legends and notes, in points (the figure check allows nothing under 8)
NOTE_SIZE = 9
#: a run whose positive snapshot times span a larger ratio (last / first) gets a logarithmic time axis
LOG_SPAN = 1e3
#: width of the linear strip [0, first positive time] of a logarithmic time axis, in decades of the axis
ZERO_STRIP = 0.5
#: figures are written at this resolution (dots per inch)
DPI = 110


def plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot
    return pyplot


def angle(x: np.ndarray) -> np.ndarray:
    return np.arctan2(x[..., 1], x[..., 0])


def title(run) -> str:
    """The run in one line: name, manifold, attention, beta, flow, noise, perceptron."""
    m = run.model
    p = m.perceptron
    perc = "no perceptron" if p is None else f"{p.activation} perceptron ({p.units} units)"
    att = {"unnormalized": "USA", "normalized": "SA", "none": "no attention"}[m.attention]
    name = run.attrs.get("name", "")
    return f"{name + ': ' if name else ''}S^{m.d - 1}, {att}, beta={m.beta:g}, {m.flow}, nu={m.noise:g}, {perc}"


def nearest(t_all: np.ndarray, t: float) -> int:
    return int(np.argmin(np.abs(np.asarray(t_all) - t)))


# --- time ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimeAxis:
    """A run's time axis: ``scale`` "linear" or "symlog" on [0, ``hi``]; ``first`` the first positive time
    (where the symlog axis turns logarithmic)."""

    scale: str
    hi: float
    first: float

    def _scale(self):
        from matplotlib.scale import SymmetricalLogTransform
        return SymmetricalLogTransform(10, self.first, ZERO_STRIP) if self.scale == "symlog" else None

    def forward(self, t) -> np.ndarray:
        """Times as positions along the axis (linear in the drawn coordinate)."""
        t = np.asarray(t, dtype=float)
        tr = self._scale()
        return t.copy() if tr is None else tr.transform(t.reshape(-1, 1)).reshape(t.shape)

    def inverse(self, u) -> np.ndarray:
        u = np.asarray(u, dtype=float)
        tr = self._scale()
        return u.copy() if tr is None else tr.inverted().transform(u.reshape(-1, 1)).reshape(u.shape)


def time_axis(*times) -> TimeAxis:
    """The time axis of snapshot times (arrays; None skipped): symlog where the positive times span more
    than ``LOG_SPAN``, else linear; from 0 to the last time."""
    ts = [np.asarray(t, dtype=float).ravel() for t in times if t is not None and len(t)]
    t = np.concatenate(ts) if ts else np.array([0.0, 1.0])
    pos = t[t > 0]
    hi = float(t.max()) if t.max() > 0 else 1.0
    first = float(pos.min()) if len(pos) else hi
    return TimeAxis("symlog" if len(pos) >= 2 and hi / first > LOG_SPAN else "linear", hi, first)


def run_time_axis(run) -> TimeAxis:
    """The time axis of every figure of ``run``: its PDE's and particles' snapshot times."""
    return time_axis(*[r.t for r in (run.pde, run.particles) if r is not None])


def _number(v: float, _=None) -> str:
    """A tick label: plain where short (0.05, 200), else a power of ten (10^-5, 2x10^6)."""
    if v == 0:
        return "0"
    a = abs(v)
    if 1e-3 <= a < 1e4:
        return f"{v:g}"
    k = int(math.floor(math.log10(a) + 1e-9))
    m = v / 10.0 ** k
    if abs(m - round(m)) < 1e-6 * abs(m):
        m = round(m)
        return f"$10^{{{k}}}$" if m == 1 else f"${m:g}\\times10^{{{k}}}$"
    return f"{v:.1e}"


def apply_time_axis(ax, ta: TimeAxis, axis: str = "x", label: bool = True, shade: bool = True) -> None:
    """Give ``ax`` the run's time axis (module docstring) on its x (or y) axis; ``shade``: shade the linear
    strip of a log axis (not under an image, whose empty cells would show it)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    which = ax.xaxis if axis == "x" else ax.yaxis
    if ta.scale == "symlog":
        (ax.set_xscale if axis == "x" else ax.set_yscale)("symlog", linthresh=ta.first, linscale=ZERO_STRIP)
        lo_k, hi_k = math.ceil(math.log10(ta.first) - 1e-9), math.floor(math.log10(ta.hi) + 1e-9)
        decades = list(range(lo_k, hi_k + 1))
        step = max(1, math.ceil(len(decades) / 6))
        major = [0.0] + [10.0 ** k for k in decades[::-1][::step][::-1]]
        minor = [m * 10.0 ** k for k in range(lo_k - 1, hi_k + 1) for m in range(1, 10)
                 if ta.first <= m * 10.0 ** k <= ta.hi and 10.0 ** k * m not in major]
        which.set_major_locator(FixedLocator(major))
        which.set_minor_locator(FixedLocator(minor))
        which.set_major_formatter(FuncFormatter(_number))
        which.set_minor_formatter(NullFormatter())
        if shade:
            # the strip from t = 0 to the first snapshot, where the axis is linear: shaded, t = 0 shown apart
            span = ax.axvspan if axis == "x" else ax.axhspan
            span(0.0, ta.first, color="0.9", lw=0, zorder=0)
    (ax.set_xlim if axis == "x" else ax.set_ylim)(0.0, ta.hi)
    if label:
        text = "time t" + (f" (log scale from t = {_number(ta.first)}; t = 0 apart)" if ta.scale == "symlog" else "")
        (ax.set_xlabel if axis == "x" else ax.set_ylabel)(text.replace("$", ""))


# --- log axes --------------------------------------------------------------------------------------------------
def readable_log_axis(ax, axis: str = "y") -> None:
    """At least three labelled ticks on a log axis, plain numbers where short: the powers of ten, else 1, 2,
    5 per decade, else every integer multiple; an axis spanning too little for that becomes linear."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter
    which = ax.yaxis if axis == "y" else ax.xaxis
    lo, hi = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
    if not lo > 0 or which.get_scale() != "log":
        return
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for subs in ((1.0,), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)):
        ticks = [m * 10.0 ** k for k in range(k0, k1 + 1) for m in subs if lo <= m * 10.0 ** k <= hi]
        if len(ticks) >= 3:
            break
    else:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("linear")
        which.set_major_locator(MaxNLocator(5))
        return
    if len(ticks) > 7:
        step = math.ceil(len(ticks) / 6)
        ticks = ticks[::-1][::step][::-1]
    which.set_major_locator(FixedLocator(ticks))
    which.set_major_formatter(FuncFormatter(_number))
    which.set_minor_locator(LogLocator(base=10, subs=[2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]))
    which.set_minor_formatter(NullFormatter())


# --- masses ----------------------------------------------------------------------------------------------------
def mass_text(m: float, err: float | None = None) -> str:
    """An atom's mass to its error's precision (module docstring): 0.0005 ± 4e-4 is "0.0005 ± 0.0004",
    0.5602 ± 2.3e-3 "0.560 ± 0.002"; without an error, two significant digits at least and three decimals."""
    if err is None or not np.isfinite(err) or err <= 0:
        places = 3 if m == 0 or abs(m) >= 0.01 else 1 - math.floor(math.log10(abs(m)))
        return f"{m:.{places}f}"
    k = math.floor(math.log10(err))
    lead = err / 10.0 ** k
    places = -k + (1 if round(lead, 6) < 2 else 0)     # a leading 1 keeps a second digit (1.4e-3, not 1e-3)
    e = round(err, places)
    if e == 0:
        e = 10.0 ** -places
    if places > 6:
        return f"{m:.6f} ± {err:.0e}"
    places = max(places, 0)
    return f"{m:.{places}f} ± {e:.{places}f}"


# --- labels ----------------------------------------------------------------------------------------------------
def settle_labels(fig, labels: list, inside: bool = True) -> None:
    """Place the annotations ``labels`` (their text offset, in points, is what moves) in empty space: each is
    moved horizontally into its axes (``inside``), then by the smallest vertical shift that keeps it inside,
    off every other text of the figure (and the labels placed before it) and, where such a place exists, off
    the data its axes draws (lines, points, steps; reference lines across the panel excepted). Labels that find no
    place without data keep the first place without text."""
    if not labels:
        return
    from matplotlib.transforms import Bbox

    from .figure_check import _data_points, texts as drawn_texts
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    scale = 72.0 / fig.dpi
    mine = {id(a) for a in labels}
    obstacles = [t.get_window_extent(r) for t in drawn_texts(fig) if id(t) not in mine]
    data = {}
    for a in labels:
        if a.axes not in data:
            pts = [p for _, p in _data_points(a.axes, data_only=True, joined=True)]
            data[a.axes] = np.concatenate(pts) if pts else np.zeros((0, 2))
    placed: list = []

    def free(bb, boxes) -> bool:
        return not any(min(bb.x1, o.x1) - max(bb.x0, o.x0) > 0.5 and min(bb.y1, o.y1) - max(bb.y0, o.y0) > 0.5
                       for o in boxes)

    def clear(bb, pts) -> bool:
        return not np.any((pts[:, 0] > bb.x0) & (pts[:, 0] < bb.x1) & (pts[:, 1] > bb.y0) & (pts[:, 1] < bb.y1))

    for a in labels:
        b0 = a.get_window_extent(r)
        room = a.axes.get_window_extent(r)
        x0, x1, y0, y1 = room.x0 + 2, room.x1 - 2, room.y0 + 2, room.y1 - 2
        dx = (max(0.0, x0 - b0.x0) - max(0.0, b0.x1 - x1)) if inside else 0.0
        step = max(2.0, 0.5 * b0.height)
        n = int((room.height + b0.height) / step) + 1
        shifts = sorted({0.0} | {k * step * sgn for k in range(1, n + 1) for sgn in (1, -1)}, key=abs)
        chosen = fallback = None
        for dy in shifts:
            bb = Bbox.from_extents(b0.x0 + dx, b0.y0 + dy, b0.x1 + dx, b0.y1 + dy)
            if inside and (bb.y0 < y0 or bb.y1 > y1):
                continue
            if not free(bb, obstacles + placed):
                continue
            if clear(bb, data[a.axes]):
                chosen = (dy, bb)
                break
            if fallback is None:
                fallback = (dy, bb)
        dy, bb = chosen or fallback or (0.0, Bbox.from_extents(b0.x0 + dx, b0.y0, b0.x1 + dx, b0.y1))
        x, y = a.xyann
        a.xyann = (x + dx * scale, y + dy * scale)
        placed.append(bb)


def save(fig, path: Path, labels: list | None = None, tight: bool = True) -> Path:
    """Lay the figure out (tight), settle its ``labels`` (:func:`settle_labels`), write it and close it."""
    if tight:
        fig.tight_layout()
    settle_labels(fig, labels or [])
    fig.savefig(path, dpi=DPI)
    plt().close(fig)
    return path


def legend_below(ax, handles=None, ncol: int = 1, **kw):
    """The axes' legend under its x-axis label, out of the data."""
    kw = dict(kw, handles=handles) if handles is not None else kw
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=ncol, fontsize=NOTE_SIZE,
                     frameon=False, **kw)


def legend_right(ax, handles=None, **kw):
    """The axes' legend right of it, out of the data."""
    kw = dict(kw, handles=handles) if handles is not None else kw
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=NOTE_SIZE, frameon=False,
                     borderaxespad=0.0, **kw)


# --- atoms -----------------------------------------------------------------------------------------------------
def pde_atoms(run):
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


def particle_atoms(run, i: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Atoms of the particles at snapshot i by the procedure and settings of the comparison
    (solvers.comparison: density peaks, the mass within ``radius`` of each): (positions, masses, radius)."""
    from ..comparison import atom_scales, measure_atoms
    from ..pde import space_for

    opts = run.comparison.options if run.comparison is not None else {}
    radius, h = atom_scales(run.model, opts.get("atom_radius"), opts.get("smoothing"), opts.get("cluster_scale", 0.5))
    a = measure_atoms(space_for(run.model.d)[1], x=run.particles.x[i], w=run.particles.w, radius=radius, smoothing=h,
                      threshold=opts.get("atom_threshold", 10.0), min_mass=opts.get("min_mass", 0.01))
    return a.positions, a.masses, radius


def mark_handoff(ax, t_handoff: float | None, axis: str = "x", text: str = "handoff", color: str = "0.35",
                 labels: list | None = None) -> bool:
    """A dashed line at the PDE's handoff if it lies within the axis, True if drawn; a vertical one (time on x)
    labelled ``text`` (the label appended to ``labels`` for :func:`settle_labels`, which slides it along the
    line off the data)."""
    if t_handoff is None:
        return False
    lo, hi = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    if not lo <= t_handoff <= hi:
        return False
    import matplotlib.transforms as mtransforms
    if axis == "x":
        ax.axvline(t_handoff, color=color, ls="--", lw=1, label="_handoff")
        tr = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
        a = ax.annotate(text, (t_handoff, 1.0), xycoords=tr, xytext=(3, -3), textcoords="offset points", color=color,
                        fontsize=NOTE_SIZE, ha="left", va="top")
    else:
        # unlabelled: the caller says what it is (a label on a horizontal line cannot move off data along it)
        ax.axhline(t_handoff, color=color, ls="--", lw=1, label="_handoff")
        return True
    if labels is not None:
        labels.append(a)
    return True
