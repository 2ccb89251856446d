"""``attnpde branch CONFIG``: a branch of stationary states of the noisy PDE into an archive, and its diagram.

The configuration has the [run] and [model] tables of ``attnpde run`` (``model.noise`` is not used: the noise
is the branch's parameter) and a [branch] table::

    [branch]
    mode = 1                    # the Fourier mode k (S^1) or harmonic degree l (S^2) leaving the uniform state
    noise_range = [0.03, 0.08]  # the nu followed (default: 0.25 and 1.5 times the mode's threshold)
    degree = 64                 # resolution of the states to start from (default 64 on S^1, 32 on S^2)
    max_degree = 256            # raised up to this where a state sharpens (default 256 on S^1, 128 on S^2)
    representation = "auto"     # "even" / "full" (S^1), "zonal" / "general" (S^2)
    # step control (solvers.branches.ContinuationOptions): first_step, max_step, min_step,
    # max_points (per side), max_angle, tol, max_corrections, tail_max

The archive is an attnpde archive (root attributes, /model) with a /branch group, netCDF-4 like the others
(named dimensions, CF ``long_name`` / ``units``): per point (dimension ``point``, in the order computed: side
+1 from the threshold, then side -1) ``noise``, ``mu`` (noise / threshold, the continuation's parameter),
``amplitude``, ``projection``, ``free_energy``, ``stable``, ``unstable``, ``side``, ``tail``, ``steps``,
``step``, ``coeffs`` (point, k | mode), ``unknowns`` (point, unknown), ``tangent`` (point, tangent_component);
the located events ``fold_*`` (fold) and ``bifurcation_*`` (bifurcation); attributes ``mode``, ``degree``,
``representation``, ``threshold``, ``kind``, ``normal_form``, ``normal_form_fit`` (JSON), ``transition``
(NaN: none), ``free_energy_uniform``, ``noise_range``, ``options`` (JSON), ``ended`` (JSON: why each side
ended), ``degree_raised`` (JSON: each raise of the degree, after which the group holds the branch followed
again at the new degree), ``points`` (the rows complete), ``complete``. Each point is written (and the file flushed) as
it is computed; ``--resume`` continues the unfinished side from the last point written, with the same numbers as an
uninterrupted run. The diagram (:func:`plot_branch`) is written next to the archive.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

from ..interrupts import graceful_stop
from ..model import Model
from ..branch_spec import BranchSpec, ContinuationOptions
from ..branches import Branch, BranchSetup, prepare_spec, refinement_lines
from .archive import ArchiveError, ArchiveWriter, open_archive, read_model
from ..fields import table_of
from .config import (MODEL, RUN, ConfigError, Table, parse_model,
                     _refuse_too_big, parse_toml, read_config_text)
from .plots_branch import branch_title, plot_branch
from .runner import RunRefused, deferred_interrupt
from .streams import say

__all__ = ["BranchConfig", "parse_branch_config", "load_branch_config", "run_branch", "load_branch",
           "describe_branch", "branch_noise", "plot_branch", "is_branch_archive", "BRANCH_COMMAND"]

#: how the ``command`` attribute of a branch archive begins
BRANCH_COMMAND = "attnpde branch"

#: [branch]: the fields of the spec and of the continuation's options that a file may set (solvers.fields.toml)
BRANCH = table_of(BranchSpec, ContinuationOptions)
SCHEMA = Table({"run": RUN, "model": MODEL, "branch": BRANCH}, required=("model", "branch"))


@dataclass
class BranchConfig:
    """A validated branch configuration: the model (noise unused), the [branch] table as written, its resolved
    spec (``solvers.branch_spec.BranchSpec``), the run's name."""

    text: str
    raw: dict
    model: Model
    branch: dict
    spec: BranchSpec
    name: str = ""


def parse_branch_config(text: str, source: str = "<string>") -> BranchConfig:
    """Parse and validate a branch configuration (ConfigError naming the key path), and check it as
    :func:`~solvers.branches.prepare_branch` would (the threshold inside noise_range, the degree holding
    the mode, ...), without following anything."""
    raw = parse_toml(text)
    run_tables = [k for k in ("pde", "particles", "initial", "compare") if isinstance(raw, dict) and k in raw]
    if run_tables:
        # a configuration of the other command: said, rather than "unknown key"
        key = run_tables[0]
        raise ConfigError(key, "is a table of an `attnpde run` configuration (also `sweep`, `validate`): "
                               + ("run it with `attnpde run CONFIG`; " if "branch" not in raw else "remove it; ")
                               + "an `attnpde branch` configuration has [run], [model] and [branch] (docs/noise.md, "
                               "docs/configuration.md)")
    cfg = SCHEMA.check("", raw)
    m = cfg["model"]
    d = m["d"]
    if d not in (2, 3):
        raise ConfigError("model.d", f"branches are computed on the circle (d = 2) and the sphere (d = 3), got {d}")
    model = parse_model(m)
    branch = cfg["branch"]
    if "noise_range" in branch and branch["noise_range"].shape != (2,):
        raise ConfigError("branch.noise_range", f"must be [lo, hi], got {raw['branch']['noise_range']!r}")
    try:
        spec = BranchSpec.resolve(model, **branch)
    except (ValueError, TypeError) as e:
        raise ConfigError("branch", str(e)) from None
    out = BranchConfig(text=text, raw=raw, model=model, branch=branch, spec=spec,
                       name=cfg.get("run", {}).get("name", ""))
    _check_branch_memory(out)
    try:
        prepare_spec(spec)
    except (ValueError, TypeError) as e:
        raise ConfigError("branch", str(e)) from None
    return out


def _check_branch_memory(config: BranchConfig) -> None:
    """ConfigError (naming branch.degree or branch.max_degree, or the perceptron's units) when the problem of
    the branch at the largest degree it may be raised to cannot fit in memory; estimated before
    prepare_branch builds it, from its peaks: S^1 8 M (La + 1) x 4
    bytes for the M-point grid's tables of the La kernel degrees, and the dense Jacobian of 2 La unknowns;
    S^2 'zonal' 8 (L + 1)^2 nlat bytes; S^2 'general' ~370 (L + 1)^2."""
    from spectral import fourier, sphere
    from spectral.multipliers import kernel_bandwidth
    from ..stationary_problems import KERNEL_TOL

    model, b, spec = config.model, config.branch, config.spec
    d = model.d
    key = "branch.max_degree" if "max_degree" in b else "branch.degree"
    # the most the branch may need: its degree raised to the cap
    L = max(spec.degree, spec.options.max_degree)
    if d == 2:
        M = fourier.dealiased_size(L)
        La = min(L - 1, kernel_bandwidth(model.beta, 2, KERNEL_TOL))
        need, points = 32.0 * M * (La + 1) + 32.0 * (2 * La + 2) ** 2, M
        what = f"the tables of {La} kernel modes on the grid of {M} points"
    else:
        nlat, nphi = sphere.dealiased_grid(L)
        if spec.representation == "zonal":
            need, points, what = 8.0 * (L + 1) ** 2 * nlat, nlat, f"the zonal tables at degree {L} ({nlat} latitudes)"
        else:
            need, points, what = 370.0 * (L + 1) ** 2, nlat * nphi, f"the harmonics at degree {L}"
    _refuse_too_big(key, {what: need}, "lower max_degree" if key == "branch.max_degree" else
                    f"set a lower max_degree (the degree the branch is raised to, default {L})")
    p = model.perceptron
    if p is not None:
        from ..perceptron import ACTIVATION_ARRAYS
        arrays = ACTIVATION_ARRAYS[p.activation]
        _refuse_too_big("model.perceptron.units", {f"the perceptron's {p.units} units at the branch's {points} grid "
                                                   f"points ({arrays} arrays of units x points for {p.activation})":
                                                   8.0 * arrays * p.units * points}, "lower units")


def load_branch_config(path: str | Path) -> BranchConfig:
    p = Path(path)
    cfg = parse_branch_config(read_config_text(path), str(p))
    cfg.name = cfg.name or p.stem
    return cfg


# --- the /branch group ----------------------------------------------------------------------------------
_PURE_DIM = "This is a netCDF dimension but not a netCDF variable.         0"
#: per-point datasets: name -> (dtype, long_name, units)
_POINT = {
    "noise": (np.float64, "noise nu of the stationary state", "1"),
    "mu": (np.float64, "noise / threshold: the continuation's parameter", "1"),
    "amplitude": (np.float64, "size of the mode's coefficients: |c_k| (S^1), sqrt(sum_m mult |c_lm|^2) (S^2)", "1"),
    "projection": (np.float64, "the mode's canonical coefficient along the branch (signed)", "1"),
    "free_energy": (np.float64, "free energy F = nu int rho log rho - s E", "1"),
    "stable": (np.int8, "1 if no unstable direction, else 0", "1"),
    "unstable": (np.int32, "unstable directions (Morse index of the state as a critical point of F)", "1"),
    "side": (np.int8, "side of the branch: +1, -1 from the threshold (0: the start)", "1"),
    "tail": (np.float64, "relative spectral tail of the state at the degree", "1"),
    "steps": (np.int32, "Newton steps of the point's correction", "1"),
    "step": (np.float64, "arclength step proposed for the next point", "1"),
}
_EVENTS = {
    "fold": {"noise": "noise at the fold", "amplitude": "amplitude at the fold",
             "free_energy": "free energy at the fold"},
    "bifurcation": {"noise": "noise at the bifurcation", "amplitude": "amplitude at the bifurcation",
                    "free_energy": "free energy at the bifurcation"},
}


def is_branch_archive(path: str | Path) -> bool:
    """Whether the archive at ``path`` holds a /branch group."""
    try:
        with h5py.File(path, "r") as f:
            return "branch" in f
    except OSError:
        return False


def _dim(g: h5py.Group, name: str) -> h5py.Dataset:
    """A netCDF dimension without a variable (as the other groups write them), created once."""
    if name not in g:
        ds = g.create_dataset(name, shape=(0,), maxshape=(None,), dtype="f4", chunks=(1024,))
        ds.make_scale(_PURE_DIM)
    return g[name]


def _cf(ds: h5py.Dataset, long_name: str, units: str | None = "1") -> None:
    ds.attrs["long_name"] = long_name
    if units is not None:
        ds.attrs["units"] = units


def _new_group(f: h5py.File, d: int, degree: int, n: int) -> h5py.Group:
    """The empty /branch group: its per-point datasets (growing along ``point``) and coordinates."""
    g = f.create_group("branch")
    point = _dim(g, "point")
    for name, (dtype, long_name, units) in _POINT.items():
        ds = g.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype, chunks=(256,))
        ds.dims[0].attach_scale(point)
        _cf(ds, long_name, units)
    if d == 2:
        k = g.create_dataset("k", data=np.arange(degree, dtype=np.int64))
        k.make_scale("k")
        _cf(k, "Fourier wavenumber (c_k, k >= 0; c_{-k} = conj(c_k))")
        mode_dim, width = k, degree
    else:
        from spectral.sphere import canonical_degrees, ncoef
        mode_dim, width = _dim(g, "mode"), ncoef(degree)
        l, m = canonical_degrees(degree)
        for name, values, what in (("l", l, "spherical-harmonic degree"),
                                   ("m", m, "spherical-harmonic order (m >= 0; orthonormal harmonics, area measure)")):
            ds = g.create_dataset(name, data=np.asarray(values, dtype=np.int64))
            ds.dims[0].attach_scale(mode_dim)
            _cf(ds, what)
    # gzip: a zonal state's coefficients are zeros but for m = 0 (7 MB for 200 points at L = 64 without it)
    c = g.create_dataset("coeffs", shape=(0, width), maxshape=(None, width), dtype=np.complex128,
                         chunks=(max(1, 4096 // width), width), compression="gzip", compression_opts=1, shuffle=True)
    c.dims[0].attach_scale(point)
    c.dims[1].attach_scale(mode_dim)
    _cf(c, "spectral coefficients of rho (canonical layout)")
    if d == 3:
        c.attrs["coordinates"] = "l m"
    for name, dim, width_, long_name in (("unknowns", "unknown", n, "reduced unknowns x: orthonormal coordinates of "
                                                                      "rho in the kernel's degrees"),
                                         ("tangent", "tangent_component", n + 1, "unit tangent of the branch in "
                                                                                 "(x, mu)")):
        ds = g.create_dataset(name, shape=(0, width_), maxshape=(None, width_), dtype=np.float64,
                              chunks=(max(1, 8192 // width_), width_))
        ds.dims[0].attach_scale(point)
        ds.dims[1].attach_scale(_dim(g, dim))
        _cf(ds, long_name)
    g.attrs["points"] = 0
    g.attrs["complete"] = False
    return g


def _open_group(f: h5py.File, d: int, setup: BranchSetup, degree: int, unknowns: int, threshold: float,
                raised: list) -> h5py.Group:
    """The empty /branch group of a branch at ``degree`` (``unknowns`` per point, the mode's ``threshold`` at
    that degree) with the attributes of ``setup``, and the raises of the degree before it (``degree_raised``,
    JSON)."""
    g = _new_group(f, d, degree, unknowns)
    g.attrs.update({"mode": setup.mode, "degree": degree, "representation": setup.representation,
                    "threshold": threshold, "noise_range": np.array(setup.noise_range),
                    "options": json.dumps(setup.options.to_dict()), "ended": "{}", "nu_ref": threshold,
                    "degree_raised": json.dumps(raised)})
    return g


def _append(g: h5py.Group, rec: dict) -> None:
    """One point as a row of every per-point dataset, then the count of complete rows (a kill mid-row leaves
    ``points`` at the rows before it)."""
    i = int(g.attrs["points"])
    values = {"noise": rec["nu"], "mu": rec["mu"], "amplitude": rec["amplitude"], "projection": rec["projection"],
              "free_energy": rec["free_energy"], "stable": int(rec["stable"]), "unstable": rec["unstable"],
              "side": rec["side"], "tail": rec["tail"], "steps": rec["steps"], "step": rec["h"],
              "coeffs": rec["coeffs"], "unknowns": rec["x"], "tangent": rec["t"]}
    for name, v in values.items():
        ds = g[name]
        if ds.shape[0] < i + 1:
            ds.resize(i + 1, axis=0)
        ds[i] = v
    g.attrs["points"] = i + 1


def _read_points(g: h5py.Group) -> list[dict]:
    """The complete rows as the points a resume continues from."""
    n = int(g.attrs["points"])
    cols = {k: g[k][:n] for k in ("side", "unknowns", "mu", "tangent", "step", "steps")}
    return [{"side": int(cols["side"][i]), "x": cols["unknowns"][i], "mu": float(cols["mu"][i]),
             "t": cols["tangent"][i], "h": float(cols["step"][i]), "steps": int(cols["steps"][i])} for i in range(n)]


def _write_events(g: h5py.Group, branch: Branch) -> None:
    for kind, items in (("fold", branch.folds), ("bifurcation", branch.bifurcations)):
        dim = _dim(g, kind)
        for field_, long_name in _EVENTS[kind].items():
            name = f"{kind}_{field_}"
            if name in g:
                del g[name]
            key = {"noise": "nu"}.get(field_, field_)
            ds = g.create_dataset(name, data=np.array([e[key] for e in items], dtype=np.float64))
            ds.dims[0].attach_scale(dim)
            _cf(ds, long_name)
        if kind == "bifurcation":
            for field_, long_name in (("kind", "kind of bifurcation: branch point or symmetry-breaking"),
                                      ("block", "invariant block of S whose eigenvalue crosses zero")):
                name = f"bifurcation_{field_}"
                if name in g:
                    del g[name]
                ds = g.create_dataset(name, data=np.array([e[field_] for e in items], dtype=object),
                                      dtype=h5py.string_dtype())
                ds.dims[0].attach_scale(dim)
                _cf(ds, long_name, None)
    def nan(v):
        return math.nan if v is None else float(v)
    g.attrs.update({"kind": branch.kind, "normal_form": nan(branch.normal_form),
                    "normal_form_fit": json.dumps(branch.normal_form_fit), "transition": nan(branch.transition),
                    "free_energy_uniform": nan(branch.free_energy_uniform), "wall_time": float(branch.wall_time),
                    "complete": True})


@dataclass
class BranchOutcome:
    path: Path
    status: str                 # "finished" or "interrupted"
    branch: Branch | None
    figure: Path | None = None


def _check_resumable(path: Path, config: BranchConfig) -> tuple[list[dict], dict, int, list]:
    """(the points written, the sides ended, the archive's degree, the raises of the degree before it) of the
    unfinished branch archive ``path`` of ``config``; RunRefused (or ArchiveError) when it cannot be resumed."""
    if not path.exists():
        raise RunRefused(f"{path}: no archive to resume (run without --resume to start)")
    with open_archive(path) as f:
        status = str(f.attrs.get("status", ""))
        text = str(f.attrs.get("config", ""))
        if "branch" not in f:
            raise RunRefused(f"{path}: not an archive of `attnpde branch` (no /branch group)")
        if status == "finished":
            raise RunRefused(f"{path}: the branch is already finished; nothing to resume "
                             "(use --force to compute it again)")
        g = f["branch"]
        points, ended = _read_points(g), json.loads(g.attrs.get("ended", "{}"))
        degree, raised = int(g.attrs["degree"]), json.loads(g.attrs.get("degree_raised", "[]"))
    try:
        archived = parse_toml(text)
    except ConfigError:
        raise ArchiveError(f"{path}: damaged archive: its configuration does not parse") from None
    def strip(raw):
        return {k: v for k, v in raw.items() if k != "run"}
    if strip(archived) != strip(config.raw):
        raise RunRefused(f"{path}: was made with a different [model] or [branch] table; use --force to start over")
    return points, ended, degree, raised


def run_branch(config: BranchConfig, out: str | Path, *, resume: bool = False, force: bool = False,
               command: str = BRANCH_COMMAND, log: Callable[[str], None] | None = None,
               figure: bool = True) -> BranchOutcome:
    """Follow the configuration's branch into the archive ``out`` (module docstring): refused (RunRefused)
    before anything is written when the archive exists without ``force`` / ``resume``, or differs."""
    out = Path(out)
    log = log or say
    restart = None
    if resume:
        points, ended, degree, raised = _check_resumable(out, config)
        # the points written are of the archive's degree, raised on the way or not
        setup = prepare_spec(config.spec.at_degree(degree))
        restart = {"points": points, "ended": {int(k): tuple(v) for k, v in ended.items()}, "raised": raised}
        writer = ArchiveWriter(out, "resume", command=command)
        log(f"[branch] resuming from {len(points)} points" + (f" at degree {degree}" if raised else ""))
    else:
        setup = prepare_spec(config.spec)
        if out.exists() and not force:
            raise RunRefused(f"{out} exists; use --force to overwrite it or --resume to continue it")
        out.parent.mkdir(parents=True, exist_ok=True)
        writer = ArchiveWriter(out, "create", config_text=config.text, name=config.name, command=command,
                               model=config.model)
    try:
        f = writer.f
        if "branch" not in f:
            _open_group(f, config.model.d, setup, setup.degree, setup.unknowns, setup.threshold, [])
            f.flush()
        state = {"g": f["branch"]}
        ended = json.loads(state["g"].attrs.get("ended", "{}"))

        def write(rec: dict) -> None:
            with deferred_interrupt():
                g = state["g"]
                if rec.get("event") == "degree":
                    # the branch starts again at the new degree: the points of the old one are dropped
                    raised = json.loads(g.attrs.get("degree_raised", "[]")) + [
                        {k: rec[k] for k in ("from", "to", "nu", "tail", "tail_max")}]
                    del f["branch"]
                    state["g"] = _open_group(f, config.model.d, setup, rec["to"], rec["unknowns"], rec["threshold"],
                                             raised)
                    ended.clear()
                    log(f"[branch] {refinement_lines(raised[-1:])[0]}")
                elif "event" in rec:
                    ended[str(rec["side"])] = [rec["reason"], rec["message"]]
                    g.attrs["ended"] = json.dumps(ended)
                    log(f"[branch] side {rec['side']:+d} ended: {rec['reason']} — {rec['message']}")
                else:
                    _append(g, rec)
                f.flush()

        with graceful_stop() as request:
            branch = setup.run(callback=write, restart=restart, stop_request=lambda: bool(request))
        if any(reason == "interrupted" for reason, _ in branch.stop.values()):
            writer.set_status("interrupted")
            return BranchOutcome(out, "interrupted", branch)
        with deferred_interrupt():
            _write_events(state["g"], branch)
            writer.set_status("finished")
    except KeyboardInterrupt:
        writer.set_status("interrupted")
        return BranchOutcome(out, "interrupted", None)
    finally:
        writer.close()
    png = plot_branch(branch, out.with_name(out.stem + "_branch.png"), branch_title(config.model, config.name)) \
        if figure else None
    return BranchOutcome(out, "finished", branch, png)


# --- reading back ---------------------------------------------------------------------------------------
def load_branch(path: str | Path) -> Branch:
    """The :class:`~solvers.branches.Branch` of an archive's /branch group (its events as written; the
    points in the branch's order along the curve, as :func:`branch_from_uniform` returns them)."""
    with open_archive(path) as f:
        if "branch" not in f:
            raise ArchiveError(f"{path}: no /branch group (not an archive of `attnpde branch`)")
        model = read_model(f)
        g = f["branch"]
        a = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in g.attrs.items()}
        n = int(a["points"])
        cols = {k: g[k][:n] for k in list(_POINT) + ["coeffs", "unknowns", "tangent"]}
        events = {}
        for kind in ("fold", "bifurcation"):
            items = []
            if f"{kind}_noise" in g:
                for i in range(g[f"{kind}_noise"].shape[0]):
                    e: dict = {"nu": float(g[f"{kind}_noise"][i]), "amplitude": float(g[f"{kind}_amplitude"][i]),
                         "free_energy": float(g[f"{kind}_free_energy"][i])}
                    if kind == "bifurcation":
                        e["kind"] = g["bifurcation_kind"][i].decode() if isinstance(g["bifurcation_kind"][i], bytes) \
                            else str(g["bifurcation_kind"][i])
                        b = g["bifurcation_block"][i]
                        e["block"] = b.decode() if isinstance(b, bytes) else str(b)
                    items.append(e)
            events[kind] = items
    # the curve's order: side -1 reversed, the start, side +1 (rows are side +1 first, as computed)
    side = cols["side"]
    plus = np.nonzero(side > 0)[0]
    minus = np.nonzero(side < 0)[0]
    symmetric = a.get("kind") != "imperfect" and len(plus) > 0
    order = np.concatenate([minus[1:][::-1], plus[:1], plus[1:]]).astype(int) if symmetric else np.arange(n)
    if symmetric:
        cols["side"] = cols["side"].copy()
        cols["side"][plus[0]] = 0                     # the start: the uniform state at the threshold
    def nanless(v):
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)
    ended = {int(k): tuple(v) for k, v in json.loads(a.get("ended", "{}")).items()}
    return Branch(model=model, mode=int(a["mode"]), degree=int(a["degree"]), representation=str(a["representation"]),
                  noise=cols["noise"][order], amplitude=cols["amplitude"][order],
                  projection=cols["projection"][order], free_energy=cols["free_energy"][order],
                  stable=cols["stable"][order].astype(bool), unstable=cols["unstable"][order].astype(int),
                  side=cols["side"][order].astype(int), tail=cols["tail"][order], coeffs=cols["coeffs"][order],
                  unknowns=cols["unknowns"][order], tangents=cols["tangent"][order],
                  threshold=nanless(a.get("threshold")), kind=str(a.get("kind", "")),
                  normal_form=nanless(a.get("normal_form")), normal_form_fit=json.loads(a.get("normal_form_fit", "{}")),
                  folds=events["fold"], bifurcations=events["bifurcation"], transition=nanless(a.get("transition")),
                  free_energy_uniform=nanless(a.get("free_energy_uniform")),
                  noise_range=tuple(float(v) for v in a["noise_range"]), nu_ref=float(a["nu_ref"]),
                  options=json.loads(a.get("options", "{}")), stop=ended, wall_time=float(a.get("wall_time", 0.0)),
                  refinements=json.loads(a.get("degree_raised", "[]")))


def branch_noise(path: str | Path) -> str | None:
    """What `attnpde info` says of the noise of a branch archive's model (its parameter: the range followed),
    None for another archive."""
    if not is_branch_archive(path):
        return None
    with open_archive(path) as f:
        lo, hi = (float(v) for v in f["branch"].attrs["noise_range"])
    return f"noise: the branch's parameter, nu in [{lo:.6g}, {hi:.6g}]"


def describe_branch(path: str | Path) -> list[str]:
    """The lines `attnpde info` prints for an archive's /branch group (none without one)."""
    if not is_branch_archive(path):
        return []
    with open_archive(path) as f:
        complete = bool(f["branch"].attrs.get("complete", False))
    b = load_branch(path)
    lines = [f"branch: mode {b.mode} ({b.representation}, degree {b.degree}), {len(b.noise)} points, nu in "
             f"[{np.min(b.noise):.6g}, {np.max(b.noise):.6g}] of noise_range [{b.noise_range[0]:.6g}, "
             f"{b.noise_range[1]:.6g}]" if len(b.noise) else f"branch: mode {b.mode}: no point written"]
    lines += [f"  {line}" for line in refinement_lines(b.refinements, b.options.get("max_degree"))]
    if b.threshold is not None:
        lines.append(f"  threshold nu = {b.threshold:.12g}" + (f"; kind: {b.kind}" if b.kind else "")
                     + (f" (normal form {b.normal_form:+.6g})" if b.normal_form is not None else ""))
    if not complete:
        lines.append("  not complete: the folds, bifurcations and transition are located when the branch ends")
    for e in b.folds:
        lines.append(f"  fold at nu = {e['nu']:.10g}, amplitude {e['amplitude']:.6g}")
    for e in b.bifurcations:
        lines.append(f"  {e['kind']} ({e['block']}) at nu = {e['nu']:.10g}, amplitude {e['amplitude']:.6g}")
    if complete and b.free_energy_uniform is not None:
        lines.append("  transition: " + ("none on the computed branch" if b.transition is None else
                                         f"nu = {b.transition:.10g} (the uniform state's F = "
                                         f"{b.free_energy_uniform:.10g} crossed)"))
    if len(b.noise):
        lines.append(f"  stable points {int(np.sum(b.stable))} of {len(b.noise)}; largest amplitude "
                     f"{np.max(b.amplitude):.6g}; largest tail {np.max(b.tail):.1e}")
    for side, (reason, msg) in sorted(b.stop.items()):
        lines.append(f"  side {side:+d} ended: {reason} — {msg}")
    return lines
