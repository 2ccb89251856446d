"""``attnpde extremum CONFIG [--out ARCHIVE]``: the global extremum of a configuration's model, certified
(:func:`solvers.extremum`), written to the group ``/extremum`` of an archive, with a figure of the first
variation over the sphere.

The configuration's ``[model]`` (and ``[run] name``) is read; its other tables are not. ``--out`` defaults to
the configuration's path with ``.h5``, the archive ``attnpde run`` writes: when that archive exists (an
``attnpde-run`` archive of the same model) the group is added to it, replacing an earlier one, and when it
holds a certified terminal state of the PDE the end is compared with the extremum
(:func:`solvers.compare_end`, group ``/extremum/end``) and drawn beside it. Otherwise a new file of its own
is written (root attribute ``format = "attnpde-extremum"``). The figure goes beside the archive as
``<stem>_extremum.png`` (S^1 and S^2).

Layout::

    /extremum              attrs kind, method, energy, gap, energy_lower, energy_upper (E*'s proven interval),
                           level, lower_phi, max_speed, evaluations, finished, rounds, wall_time, message,
                           software_version, command, created
                           positions (k, d), masses (k), argmin (d), maximisers (n, d) (ascent)
    /extremum/model        the model, as /model of a run archive (read back to re-run it)
    /extremum/continuous   nodes (n, d), weights (n), density (n); attrs mass, description (when present)
    /extremum/end          attrs energy_end, energy_error, energy_gap, energy_gap_lower, energy_gap_upper,
                           matched, is_global, reason, kernel_distance, t (the end's time); pairs (p, 4)
"""
from __future__ import annotations

import datetime
import math
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..landscape import ContinuousPart, Extremum
from ..model import Model
from .config import MODEL, RUN, ConfigError, parse_model, parse_toml, read_config_text

__all__ = ["load_model_config", "run_extremum", "write_extremum", "read_extremum", "EXTREMUM_FORMAT"]

EXTREMUM_FORMAT = "attnpde-extremum"


def load_model_config(path: str | Path) -> tuple[Model, str]:
    """The model of a configuration's [model] table and its [run] name (ConfigError naming the key)."""
    raw = parse_toml(read_config_text(path))
    if "model" not in raw:
        raise ConfigError("model", "missing: the extremum is of the configuration's [model]")
    model = parse_model(MODEL.check("model", raw["model"]))
    run = RUN.check("run", raw.get("run", {}))
    return model, run.get("name", "") or Path(path).stem


def write_extremum(f: h5py.Group, ext: Extremum, *, command: str = "", end=None, end_t: float | None = None) -> None:
    """Write ``ext`` (and the comparison ``end``, an EndVsExtremum) as the group ``extremum`` of ``f``."""
    from .. import __version__
    from .archive import write_model

    if "extremum" in f:
        del f["extremum"]
    g = f.create_group("extremum")
    lo, hi = ext.bounds
    g.attrs.update({"kind": ext.kind, "method": ext.method, "energy": ext.energy, "gap": ext.gap,
                    "energy_lower": lo, "energy_upper": hi, "level": ext.level, "lower_phi": ext.lower_phi,
                    "max_speed": ext.max_speed, "evaluations": ext.evaluations, "finished": ext.finished,
                    "rounds": ext.rounds, "wall_time": ext.wall, "message": ext.message,
                    "software_version": __version__, "command": command,
                    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
    g.create_dataset("positions", data=np.asarray(ext.positions, dtype=float).reshape(-1, ext.model.d))
    g.create_dataset("masses", data=np.asarray(ext.masses, dtype=float))
    if ext.argmin is not None:
        g.create_dataset("argmin", data=np.asarray(ext.argmin, dtype=float))
    if ext.maximisers is not None:
        g.create_dataset("maximisers", data=np.asarray(ext.maximisers, dtype=float))
    write_model(g, ext.model)
    if ext.continuous is not None:
        c = g.create_group("continuous")
        c.attrs.update({"mass": ext.continuous.mass, "description": ext.continuous.description})
        for k in ("nodes", "weights", "density"):
            c.create_dataset(k, data=np.asarray(getattr(ext.continuous, k), dtype=float))
    if end is not None:
        e = g.create_group("end")
        e.attrs.update({"energy_end": end.energy_end, "energy_error": end.energy_error,
                        "energy_gap": end.energy_gap, "energy_gap_lower": end.energy_gap_bounds[0],
                        "energy_gap_upper": end.energy_gap_bounds[1], "matched": end.matched,
                        "is_global": end.is_global, "reason": end.reason, "kernel_distance": end.kernel_distance,
                        "t": math.nan if end_t is None else float(end_t)})
        e.create_dataset("pairs", data=np.array(end.pairs, dtype=float).reshape(-1, 4))


def read_extremum(path: str | Path) -> tuple[Extremum, dict | None]:
    """The Extremum stored in ``path``'s /extremum and its comparison with the end (the attributes of
    /extremum/end, or None)."""
    from .archive_reader import attr_text, read_model

    with h5py.File(path, "r") as f:
        if "extremum" not in f:
            raise ValueError(f"{path}: no /extremum group (write one with `attnpde extremum CONFIG --out {path}`)")
        g = f["extremum"]
        a = g.attrs
        model = read_model(g)
        cont = None
        if "continuous" in g:
            c = g["continuous"]
            cont = ContinuousPart(mass=float(c.attrs["mass"]), description=attr_text(c.attrs["description"]),
                                  nodes=c["nodes"][()], weights=c["weights"][()], density=c["density"][()])
        ext = Extremum(kind=attr_text(a["kind"]), positions=g["positions"][()], masses=g["masses"][()],
                       energy=float(a["energy"]), gap=float(a["gap"]), method=attr_text(a["method"]), model=model,
                       continuous=cont, level=float(a["level"]), lower_phi=float(a["lower_phi"]),
                       argmin=g["argmin"][()] if "argmin" in g else None,
                       maximisers=g["maximisers"][()] if "maximisers" in g else None,
                       max_speed=float(a["max_speed"]), evaluations=int(a["evaluations"]),
                       finished=bool(a["finished"]), rounds=int(a["rounds"]), wall=float(a["wall_time"]),
                       message=attr_text(a["message"]))
        end = None
        if "end" in g:
            end = {k: (attr_text(v) if isinstance(v, (str, bytes)) else v) for k, v in g["end"].attrs.items()}
            end["pairs"] = g["end"]["pairs"][()]
    return ext, end


def _run_archive_end(out: Path, model: Model):
    """(terminal state or None, its time) of the run archive at ``out``, after checking its model is ``model``
    (ValueError otherwise)."""
    from .archive import load, model_differences

    run = load(out)
    diff = model_differences(run.model, model)
    if diff:
        raise ValueError(f"{out}: the archive's model is not the configuration's ({'; '.join(diff)}): give another "
                         "--out")
    terminal = getattr(run.pde, "terminal", None) if run.pde is not None else None
    return terminal, (None if terminal is None else terminal.t)


def run_extremum(config_path: str | Path, out: str | Path | None = None, *, command: str = "",
                 figure: bool = True) -> tuple[Extremum, Any, Path, Path | None]:
    """Compute the configuration's extremum, write it to ``out`` and draw its figure (module docstring).

    Returns (Extremum, EndVsExtremum or None, the archive's path, the figure's path or None)."""
    from .. import compare_end
    from ..landscape import ExtremumSpec
    from .archive import open_archive
    from .archive_schema import FORMAT

    model, name = load_model_config(config_path)
    out = Path(out) if out is not None else Path(config_path).with_suffix(".h5")
    run_archive = False
    if out.exists():
        with h5py.File(out, "r") as f:
            fmt = f.attrs.get("format", "")
            fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
        if fmt == FORMAT:
            run_archive = True
        elif fmt != EXTREMUM_FORMAT:
            raise ValueError(f"{out}: neither an attnpde run archive nor an extremum file (format {fmt!r}): give "
                             "another --out")
    terminal, t_end = _run_archive_end(out, model) if run_archive else (None, None)
    ext = ExtremumSpec.resolve(model).solve()
    end = None
    if terminal is not None:
        end = compare_end(model, terminal.positions, terminal.masses, terminal.position_errors,
                          terminal.mass_errors, extremum=ext)
    if run_archive:
        with open_archive(out, "r+") as f:
            write_extremum(f, ext, command=command, end=end, end_t=t_end)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        with h5py.File(out, "w") as f:
            f.attrs.update({"format": EXTREMUM_FORMAT, "format_version": 1, "name": name})
            write_extremum(f, ext, command=command)
    fig = None
    if figure and model.d in (2, 3):
        from .plot_extremum import plot_extremum
        fig = plot_extremum(ext, out.with_name(out.stem + "_extremum.png"), end=terminal, title=name)
    return ext, end, out, fig
