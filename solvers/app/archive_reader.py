"""Reading an archive back into the result objects, after it proves it is whole.

:func:`load` opens the file under a shared lock (:mod:`.archive_files`), checks what it is (format, version), then
verifies it (:func:`verify`) before reading a number: every restart state against its digest, every dataset
a state covers against the CRC-32 and shape it records (HDF5 checks each chunk's Fletcher-32 as it reads),
every dataset written once against its ``crc32`` attribute, and the model against the one its configuration
describes. What fails is an :class:`~.archive_files.ArchiveDamaged` naming it, in one line. An archive written
before the checksums (no root attribute ``checksums``) is verified where it can be.

A section's rows past its committed restart state (a run killed in the middle of a batch) are not read:
a resume drops them.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..continuation_record import ContinuationRecord, ErrorEstimate, Handoff
from ..model import Model
from ..perceptron import Perceptron
from . import archive_files as files
from .archive_files import ArchiveDamaged, ArchiveError, Lock
from .archive_schema import FORMAT, FORMAT_VERSION, PURE_DIM, crc, digest, made_by


class ArchiveFile(h5py.File):
    """An archive's HDF5 file opened under its lock, which closing it releases."""

    def __init__(self, path: Path, mode: str, lock: Lock) -> None:
        self._archive_lock = lock
        if mode == "r" and not lock.under_own_writer:   # HDF5's locking as the process has it (files.h5open)
            super().__init__(path, "r")
        elif mode == "r":            # a resume checking the archive it holds (its flock would conflict)
            super().__init__(path, "r", locking=False)
        else:
            super().__init__(path, mode, locking=False, libver=files.LIBVER)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._archive_lock.release()


def open_archive(path: str | Path, mode: str = "r") -> h5py.File:
    """Open an attnpde archive as an h5py.File after checking its format (ArchiveError otherwise), under a
    shared lock ("r") or an exclusive one ("r+"): ArchiveInUse while another process writes it."""
    p = Path(path)
    if not p.exists():
        raise ArchiveError(f"{p}: no such file")
    if p.is_dir():
        members = sorted(q.name for q in p.glob("*.h5"))
        raise ArchiveError(f"{p}: a directory, not an archive" + (
            f" (a sweep's folder: its summary.json has the table; each member is an archive, e.g. "
            f"{p / members[0]})" if (p / "summary.json").exists() and members else
            f" (it holds {len(members)} archive(s), e.g. {p / members[0]})" if members else ""))
    lock = Lock(p, exclusive=mode != "r")
    try:
        f = ArchiveFile(p, mode, lock)
    except Exception as e:                        # HDF5's errors come as several kinds
        lock.release()
        raise files.hdf5_error(p, e) from None
    try:
        fmt = f.attrs.get("format")
        if fmt != FORMAT:
            raise ArchiveError(f"{p}: not an attnpde archive (format attribute {fmt!r}, expected {FORMAT!r})")
        version = f.attrs.get("format_version", -1)
        if not isinstance(version, (int, np.integer)):
            raise ArchiveDamaged(f"{p}: damaged archive: its format_version is {version!r}")
        if int(version) > FORMAT_VERSION:
            raise ArchiveError(f"{p}: archive format version {int(version)} is newer than this software reads "
                               f"({FORMAT_VERSION}); upgrade attnpde (it was written by attnpde "
                               f"{attr_text(f.attrs.get('software_version', '?'))})")
        if "model" not in f:
            raise ArchiveDamaged(f"{p}: damaged archive: no /model group")
    except ArchiveError:
        f.close()
        raise
    except Exception as e:
        f.close()
        raise ArchiveDamaged(f"{p}: damaged archive ({one_line(e)})") from None
    return f


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def attr_text(v) -> str:
    return v.decode() if isinstance(v, (bytes, np.bytes_)) else str(v)


def plain(v):
    """An attribute's value as Python reads it (numpy scalars as numbers, bytes as text)."""
    if isinstance(v, (bytes, np.bytes_)):
        return v.decode()
    return v.item() if isinstance(v, np.generic) else v


def is_dimension(ds) -> bool:
    """A netCDF dimension without a variable (an empty placeholder dataset, see archive_schema.DIMENSION_NOTES)."""
    if not isinstance(ds, h5py.Dataset) or not h5py.h5ds.is_scale(ds.id):
        return False
    return PURE_DIM in attr_text(ds.attrs.get("NAME", b""))


def value(ds: h5py.Dataset, rows: int | None = None) -> np.ndarray:
    """The values of ``ds`` (its first ``rows`` rows), checked: HDF5's Fletcher-32 of each chunk read, and the
    CRC-32 a dataset written once carries (attribute crc32)."""
    try:
        v = ds[()] if rows is None else ds[:rows]
    except (OSError, RuntimeError) as e:
        raise ArchiveDamaged(f"{ds.file.filename}: damaged archive: {ds.name} cannot be read ({one_line(e)})") \
            from None
    expected = ds.attrs.get("crc32")
    if rows is None and expected is not None and crc(v) != int(expected):
        raise ArchiveDamaged(f"{ds.file.filename}: damaged archive: {ds.name} does not match its checksum")
    return v


#: the attribute holding the CRC-32 of each text attribute of its object (the writer's ``seal``)
SEAL = "text_crc32"
#: attributes a seal leaves out: HDF5's own (dimension scales), the commit records (checksummed themselves)
_NOT_TEXT = frozenset({"NAME", "CLASS", "DIMENSION_LIST", "REFERENCE_LIST", "state", "results", SEAL})
#: root attributes a user may edit (provenance, shown by info): a change is reported, not refused
ANNOTATIONS = frozenset({"command", "name", "status", "created", "updated", "libraries", "libraries_resumed",
                         "software_version", "software_resumed", "resumed_with", "failure"})


def text_seal(obj, values: dict | None = None) -> dict:
    """{name: CRC-32} of the text attributes of ``obj`` (or of ``values``, its attributes as the writer knows
    them). HDF5 keeps a text's characters in its global heap, which carries no checksum (numbers sit in the
    object header, which does)."""
    values = values if values is not None else {k: obj.attrs.get(k) for k in obj.attrs.keys()}
    return {k: crc(np.frombuffer(attr_text(v).encode(), dtype=np.uint8)) for k, v in sorted(values.items())
            if k not in _NOT_TEXT and isinstance(v, (str, bytes, np.bytes_))}


def _verify_seals(f: h5py.File, path: Path, checked: bool) -> list[str]:
    """Every group's text attributes against its seal: ArchiveDamaged for a changed one, except the root's
    annotations (:data:`ANNOTATIONS`), returned as warnings ("/@command")."""
    warnings: list[str] = []

    def check(obj) -> None:
        if SEAL not in obj.attrs:
            if checked and obj.name in ("/", "/model"):
                raise ArchiveDamaged(f"{path}: damaged archive: {obj.name} carries no checksum of its text attributes")
            return
        recorded = json.loads(attr_text(obj.attrs[SEAL]))
        now = text_seal(obj)
        changed = sorted(k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k))
        serious = [k for k in changed if obj.name != "/" or k not in ANNOTATIONS]
        if serious:
            where = ", ".join(f"/@{k}" if obj.name == "/" else f"{obj.name}@{k}"
                              for k in serious)
            raise ArchiveDamaged(f"{path}: damaged archive: {where}: the text does not match its checksum (edited, "
                                 "or damaged)")
        warnings.extend(f"/@{k}" for k in changed)

    check(f)
    f.visititems(lambda name, obj: check(obj) if isinstance(obj, h5py.Group) else None)
    return warnings


# --- restart states -------------------------------------------------------------------------------------
def read_state(r: h5py.Group) -> dict:
    """The JSON of ``restart@state`` (a fixed- or variable-length string)."""
    return json.loads(attr_text(r.attrs["state"]))


def read_restart(g: h5py.Group, with_rows: bool = True) -> dict:
    """The restart state of a section (its last snapshot's, a checkpoint's or an interruption's): the
    attribute ``state`` and the arrays of the slot it names (archives before the slots: of the group).
    ``with_rows``: refinements and grids as tuples, from the group's datasets in archives before the slots,
    without the checksums (False: the state as written)."""
    r = g["restart"]
    out: dict[str, Any] = read_state(r)
    slot = out.pop("slot", None)
    holder = r[slot] if slot else r
    for k, v in holder.items():
        if isinstance(v, h5py.Dataset) and not is_dimension(v):
            out[k] = value(v)
    if not with_rows:
        out["slot"] = slot
        return out
    out.pop("crc", None)
    out.pop("digest", None)
    for key, cast in (("refinements", float), ("grids", int)):
        rows = out[key] if key in out else g[key][()] if key in g else None     # JSON since the slots
        if rows is not None:
            out[key] = [tuple(cast(v) for v in row) for row in rows]
    return out


def read_results(f: h5py.File) -> dict:
    """The root's record of the results written whole (/comparison, /validation): dataset -> [CRC-32,
    shape...], and its digest ({} when there is none)."""
    return json.loads(attr_text(f.attrs["results"])) if "results" in f.attrs else {}


def _committed(g: h5py.Group) -> dict | None:
    """The committed restart state of a section (None if it has none)."""
    r = g.get("restart")
    if not isinstance(r, h5py.Group) or "state" not in r.attrs:
        return None
    return read_state(r)


def verify(f: h5py.File, path: Path) -> tuple[dict, list[str]]:
    """Check everything the archive records about itself (module docstring); ArchiveDamaged names the first
    problem. Returns the values read on the way, by dataset name (so that they are read once), and the root
    attributes that differ from what attnpde wrote without making the archive damaged ("/@command")."""
    checked = "checksums" in f.attrs
    warnings = _verify_seals(f, path, checked)
    cache: dict[str, np.ndarray] = {}
    for section in ("pde", "particles"):
        if isinstance(f.get(section), h5py.Group):
            cache.update(_verify_section(f, section, path, checked))
    _verify_results(f, path)
    # every dataset written once, against its CRC-32 (HDF5 checks each chunk's Fletcher-32 as it reads)
    f.visititems(lambda name, ds: value(ds) if isinstance(ds, h5py.Dataset) and "crc32" in ds.attrs else None)
    _verify_against_config(f, path)
    return cache, warnings


def _verify_section(f: h5py.File, section: str, path: Path, checked: bool) -> dict:
    """A stage's committed restart state: readable, its digest, its slot, and every dataset it covers (rows
    included) against the CRC-32 and shape it records; returns those values."""
    def damaged(what: str) -> ArchiveDamaged:
        return ArchiveDamaged(f"{path}: damaged archive: {what}")

    g = f[section]
    try:
        state = _committed(g)
    except (ValueError, KeyError, OSError, TypeError, UnicodeDecodeError) as e:
        raise damaged(f"/{section}/restart: its state cannot be read ({one_line(e)})") from None
    rows = g["t"].shape[0] if isinstance(g.get("t"), h5py.Dataset) else 0
    if state is None:
        if "restart" not in g and (checked or rows):
            raise damaged(f"/{section}/restart is missing ({rows} snapshot rows without the state that a resume "
                          "continues from)")
        if rows and checked:
            raise damaged(f"/{section} holds {rows} snapshot rows but no restart state")
        return {}
    if "digest" in state:
        if digest(state) != state["digest"]:
            raise damaged(f"/{section}/restart: its state does not match its digest (edited, or damaged)")
    elif checked:
        raise damaged(f"/{section}/restart: its state carries no digest")
    slot = state.get("slot")
    if slot is not None and slot not in g["restart"]:
        raise damaged(f"/{section}/restart/{slot} is missing (the restart state names it)")
    if state.get("crc") is None and checked:
        raise damaged(f"/{section}/restart: its state records no checksums")
    cache = {}
    for name, (expected, *shape) in (state.get("crc") or {}).items():
        ds = f.get(name) if name.startswith("/") else g.get(name)
        where = name if name.startswith("/") else f"/{section}/{name}"
        if not isinstance(ds, h5py.Dataset):
            raise damaged(f"{where} is missing (the restart state of /{section} covers it)")
        if ds.ndim != len(shape) or any(a < b for a, b in zip(ds.shape, shape)):
            raise damaged(f"{where} has shape {ds.shape}; the restart state of /{section} covers {tuple(shape)}")
        try:
            v = ds[tuple(slice(0, s) for s in shape)] if shape else ds[()]
        except (OSError, RuntimeError) as e:
            raise damaged(f"{where} cannot be read ({one_line(e)})") from None
        if crc(v) != expected:
            raise damaged(f"{where} does not match its checksum")
        cache[where.lstrip("/")] = v
    return cache


def _verify_results(f: h5py.File, path: Path) -> None:
    """The root's record of what the archive holds complete: each complete stage (the digest of its last
    restart state) and each result written whole (its datasets)."""
    def damaged(what: str) -> ArchiveDamaged:
        return ArchiveDamaged(f"{path}: damaged archive: {what}")

    try:
        results = read_results(f)
    except (ValueError, TypeError, UnicodeDecodeError) as e:
        raise damaged(f"its record of results cannot be read ({one_line(e)})") from None
    if results and digest(results) != results.get("digest"):
        raise damaged("its record of results does not match its digest (edited, or damaged)")
    for name, entry in results.items():
        if name == "digest":
            continue
        if name.endswith("@state"):                      # a complete stage: its last restart state
            g = f.get(name[:-len("@state")])
            try:
                ok = isinstance(g, h5py.Group) and _committed(g).get("digest") == entry[0]
            except (AttributeError, KeyError, ValueError, TypeError, UnicodeDecodeError, OSError):
                ok = False
            if not ok:
                raise damaged(f"{name[:-len('@state')]} is missing, or not the complete stage the record of results "
                              "names")
            continue
        ds = f.get(name)
        if not isinstance(ds, h5py.Dataset):
            raise damaged(f"{name} is missing (the record of results covers it)")
        if int(ds.attrs.get("crc32", -1)) != entry[0] or list(ds.shape) != list(entry[1:]):
            raise damaged(f"{name} is not the dataset the record of results covers")


def _verify_against_config(f: h5py.File, path: Path) -> None:
    """The model of /model is the one the archive's configuration describes (when it parses)."""
    from .config import ConfigError, parse_config

    text = attr_text(f.attrs.get("config", ""))
    if not text:
        return
    try:
        config = parse_config(text)
    except (ConfigError, ValueError, TypeError):
        return
    diff = model_differences(read_model(f), config.model)
    if diff:
        raise ArchiveDamaged(f"{path}: damaged archive: /model differs from the model its configuration "
                             f"describes ({'; '.join(diff)})")



def model_differences(a: Model, b: Model) -> list[str]:
    """How two models differ ("beta: 2.0 in /model, 1.0 in the configuration")."""
    out = [f"{k}: {getattr(a, k)!r} in /model, {getattr(b, k)!r} in the configuration"
           for k in ("d", "beta", "flow", "attention", "strength", "noise") if getattr(a, k) != getattr(b, k)]
    pa, pb = a.perceptron, b.perceptron
    if (pa is None) != (pb is None):
        out.append("perceptron: " + ("present in /model only" if pb is None else "absent from /model"))
    elif pa is not None:
        da, db = pa.to_dict(), pb.to_dict()
        for k in sorted(set(da) | set(db)):
            same = (np.array_equal(np.asarray(da[k]), np.asarray(db[k])) if k in da and k in db else False)
            if not same:
                out.append(f"perceptron {k} differs")
    return out


# --- model and results ------------------------------------------------------------------------------------
def read_model(f: h5py.File) -> Model:
    g = f["model"]
    a = g.attrs
    perceptron = None
    if "perceptron" in g:
        p = g["perceptron"]
        perceptron = Perceptron(value(p["a"]), c=value(p["c"]) if "c" in p else None,
                                w=value(p["w"]) if "w" in p else None, b=value(p["b"]),
                                activation=attr_text(p.attrs["activation"]))
    return Model(d=int(a["d"]), beta=float(a["beta"]), flow=attr_text(a["flow"]),
                 attention=attr_text(a["attention"]), strength=float(a["strength"]), perceptron=perceptron,
                 noise=float(a["noise"]))


def _rows(g: h5py.Group, state: dict | None) -> int:
    """The snapshot rows of a section to read (an archive written before the checksums): those its restart
    state covers, all of a complete stage's or of one without a state."""
    n = g["t"].shape[0] if "t" in g else 0
    if not state or "snapshots" not in state or bool(g.attrs.get("complete", False)):
        return n
    return min(n, int(state["snapshots"]))


def _series(g: h5py.Group, section: str, name: str, T: int, cache: dict, fill=None):
    key = f"{section}/{name}"
    if key in cache:
        return cache[key][:T]
    if name not in g:
        return np.zeros(0) if fill is None else np.full(T, fill)
    return value(g[name], T)


def read_pde(g: h5py.Group, model: Model, cache: dict | None = None, all_rows: bool = False):
    """The PDEResult of /pde: the rows its restart state covers (``all_rows``: every row, as the writer reads
    back the run it is finishing)."""
    from ..pde import PDEResult
    cache = cache or {}
    a = g.attrs
    state = _committed(g)
    limit = None if all_rows else state
    T = len(cache["pde/t"]) if "pde/t" in cache else _rows(g, limit)
    def get(k):
        return _series(g, "pde", k, T, cache)
    steps = {}
    if "steps" in g:
        # the steps the committed state covers (all of a complete stage's, also those after its last snapshot)
        n = (int(limit["step_rows"]) if limit and limit.get("step_rows") is not None
             and not bool(a.get("complete", False)) else None)
        steps = {k: (cache[f"pde/steps/{k}"] if f"pde/steps/{k}" in cache else value(v, n))
                 for k, v in g["steps"].items() if isinstance(v, h5py.Dataset) and not is_dimension(v)}
    restart = read_restart(g) if state is not None else None
    nodes, lagrangian = _read_nodes(g, T, restart, limit, cache)
    terminal, plateaus, slow_stages = _read_terminal(g)
    return PDEResult(
        nodes=nodes, lagrangian=lagrangian, terminal=terminal, plateaus=plateaus, slow_stages=slow_stages,
        model=model, t=get("t"), coeffs=get("coeffs"), degree=get("degree"),
        grid=value(g["grid"]) if "grid" in g else None,
        density=get("density"), energy=get("energy"), mass=get("mass"), min_density=get("min_density"),
        tail=get("tail"), dissipation=get("dissipation"), steps=steps,
        refinements=[tuple(r) for r in _record(g, "refinements", cache)] if "refinements" in g else [],
        grids=[tuple(int(v) for v in r) for r in _record(g, "grids", cache)] if "grids" in g else [],
        stop_reason=attr_text(a.get("stop_reason", "")) or "killed",
        message=attr_text(a.get("message", "no end recorded")),
        t_stop=float(a.get("t_stop", get("t")[T - 1] if T else 0.0)),
        nsteps=int(a.get("nsteps", restart["nsteps"] if restart else 0)),
        nrejected=int(a.get("nrejected", restart["nrejected"] if restart else 0)),
        options=json.loads(attr_text(a.get("options", "{}"))), initial=attr_text(a.get("initial", "")),
        wall_time=float(a.get("wall_time", 0.0)), restart=restart)


def _read_terminal(g: h5py.Group) -> tuple:
    """The certified terminal state and the plateaus of /pde (None and [] when absent), parsed by their
    ``from_dict``."""
    from ..terminal import Plateau, Stage, TerminalState
    terminal = None
    if "terminal" in g:
        t = g["terminal"]
        d = {k: plain(v) for k, v in t.attrs.items() if k != SEAL}
        d.update({k: value(v) for k, v in t.items() if isinstance(v, h5py.Dataset) and not is_dimension(v)})
        if int(d.get("check_nodes", -1)) < 0:
            d["check_nodes"] = None
        if int(d.get("is_global", -1)) < 0:
            d["is_global"] = None
        terminal = TerminalState.from_dict(d)
    plateaus = []
    if "plateaus" in g:
        p = {k: value(v) for k, v in g["plateaus"].items() if isinstance(v, h5py.Dataset) and not is_dimension(v)}
        ends = np.concatenate([[0], np.cumsum(p["natoms"])]).astype(int)
        for i in range(len(p["natoms"])):
            rows = slice(ends[i], ends[i + 1])
            plateaus.append(Plateau.from_dict({**{k: plain(p[k][i]) for k in ("t_entered", "t_certified", "energy",
                                                                                 "growth", "kick", "atom", "part")},
                                               **{k: p[k][rows] for k in ("positions", "masses", "direction")}}))
    stages = []
    if "stages" in g:
        p = {k: value(v) for k, v in g["stages"].items() if isinstance(v, h5py.Dataset) and not is_dimension(v)}
        for i in range(len(p["t_entered"])):
            why = p["why"][i]
            stages.append(Stage.from_dict({"kind": "slow", "growth": math.nan, "position": p["position"][i],
                                           "mass": plain(p["atom_mass"][i]),
                                           "why": why.decode() if isinstance(why, bytes) else str(why),
                                           **{k: plain(p[k][i]) for k in ("t_entered", "t_left", "atoms", "atom",
                                                                          "speed", "scale", "t_move")}}))
    return terminal, plateaus, stages


def _record(g: h5py.Group, name: str, cache: dict) -> np.ndarray:
    """A record of /pde that grows (the refinements, the grids): the rows the committed state covers."""
    return cache[f"pde/{name}"] if f"pde/{name}" in cache else value(g[name])


def _read_nodes(g: h5py.Group, T: int, restart: dict | None, state: dict | None, cache: dict
                ) -> tuple[list, ContinuationRecord | None]:
    """Per snapshot the node measure (None for Eulerian ones), and the Lagrangian record, of /pde
    (``restart``: its restart state, which holds that record for a run stopped in the node phase before
    its first node snapshot)."""
    state = state or {}
    steps: dict[str, Any] = {k: int(g.attrs.get(k, (restart or {}).get(k, 0))) for k in ("node_nsteps",
                                                                                        "node_nrejected")}
    from ..lagrangian import diffuse_rate_of
    rate = diffuse_rate_of((restart or {}).get("diffuse_log") or [])
    if rate is not None:
        steps["diffuse_rate"] = rate
    if "lagrangian" not in g or "t" not in g["lagrangian"]:
        if (restart or {}).get("phase") != "lagrangian" or not restart.get("handoff"):
            return [None] * T, None
        return [None] * T, ContinuationRecord.from_dict({"handoff": restart["handoff"],
                                                         "merges": restart.get("merges", []), **steps})
    lg = g["lagrangian"]
    n, m = state.get("lag_rows"), state.get("lag_points")
    def get(k, rows):
        return cache[f"pde/lagrangian/{k}"] if f"pde/lagrangian/{k}" in cache else value(lg[k], rows)
    rows, counts, drift = get("snapshot", n), get("node_count", n), get("max_drift", n)
    x, w, count = get("x", m), get("w", m), get("count", m)
    nodes: list = [None] * T
    start = 0
    for row, k, dmax in zip(rows, counts, drift):
        if row < T:
            nodes[int(row)] = {"x": x[start:start + k], "w": w[start:start + k], "count": count[start:start + k],
                               "max_drift": float(dmax)}
        start += int(k)
    check = None
    if "check" in lg:
        c = lg["check"]
        check = ErrorEstimate.from_dict({**{k: value(c[k]) for k in ("x", "w", "count")},
                                         **{k: plain(v) for k, v in c.attrs.items() if k != SEAL}})
    handoff = json.loads(attr_text(lg.attrs["handoff"]))
    if restart is not None and restart.get("handoff") is not None and restart["handoff"] != handoff:
        raise ArchiveDamaged(f"{g.file.filename}: damaged archive: /pde/lagrangian@handoff differs from the "
                             "handoff its restart state records")
    merges = get("merges", None) if "merges" in lg else np.zeros((0, 3))
    return nodes, ContinuationRecord(handoff=Handoff.from_dict(handoff), merges=merges, check=check, **steps)


def read_particles(g: h5py.Group, model: Model, cache: dict | None = None):
    from ..particle_run import STABILITY_BOUND
    from ..particles import ParticleOptions, ParticleResult
    cache = cache or {}
    a = g.attrs
    state = _committed(g)
    T = len(cache["particles/t"]) if "particles/t" in cache else _rows(g, state)
    restart = read_restart(g) if state is not None else None
    settings = json.loads(attr_text(a.get("options", "{}")))
    def get(k):
        return _series(g, "particles", k, T, cache, fill=np.nan)
    option_names = {f.name for f in fields(ParticleOptions)}
    # the fixed steps' stiffness: absent before it was recorded; the first step beyond the bound as the run
    # recorded it at its end, else (a run still going, killed) the first snapshot whose steps went beyond
    q = get("step_stiffness") if "step_stiffness" in g else None
    bound = STABILITY_BOUND.get(str(settings.get("integrator", "rk4")))
    over = float(a["beyond_stability"]) if "beyond_stability" in a else math.nan
    t = get("t")
    if math.isnan(over) and "beyond_stability" not in a and q is not None and bound is not None:
        hit = np.flatnonzero(q > bound)
        over = float(t[hit[0]]) if hit.size else math.nan
    over = None if math.isnan(over) else over
    return ParticleResult(
        model=model, t=t, x=get("x"), w=value(g["w"]), energy=get("energy"), max_drift=get("max_drift"),
        dissipation=get("dissipation"),
        cluster_count=_series(g, "particles", "n_clusters", T, cache, fill=-1).astype(np.int64, copy=False)
        if "n_clusters" in g else np.full(T, -1),
        stop_reason=attr_text(a.get("stop_reason", "")) or "killed",
        message=attr_text(a.get("message", "no end recorded")),
        t_stop=float(a.get("t_stop", t[T - 1] if T else 0.0)),
        nsteps=int(a.get("nsteps", restart["nsteps"] if restart else 0)),
        nrejected=int(a.get("nrejected", restart["nrejected"] if restart else 0)),
        integrator=str(settings.get("integrator", "rk4")), dt=settings.get("dt"), seed=settings.get("seed", 0),
        stop=settings.get("stop"), options={k: v for k, v in settings.items() if k in option_names},
        sum_method=attr_text(a.get("sum_method", "")), initial=attr_text(a.get("initial", "")),
        wall_time=float(a.get("wall_time", 0.0)), steps=None, restart=restart,
        step_stiffness=q, stability_bound=bound, beyond_stability=over)


def read_comparison(g: h5py.Group):
    """The :class:`~solvers.comparison.Comparison` that ``write_comparison`` wrote to ``g``."""
    from ..comparison import Comparison

    def get(k):
        return value(g[k]) if k in g else None
    pairs = []
    if "matched_position_error" in g:
        err, a, b = get("matched_position_error"), get("matched_pde_mass"), get("matched_particle_mass")
        pp, qp = get("matched_pde_positions"), get("matched_particle_positions")
        for i in range(len(err)):
            pairs.append({"pde_position": pp[i], "particle_position": qp[i], "position_error": float(err[i]),
                          "pde_mass": float(a[i]), "particle_mass": float(b[i]),
                          "mass_difference": float(b[i]) - float(a[i])})
    unmatched = {}
    for which in ("pde", "particles"):
        if f"unmatched_{which}_masses" in g:
            unmatched[which] = [(p, float(m)) for p, m in zip(get(f"unmatched_{which}_positions"),
                                                              get(f"unmatched_{which}_masses"))]
        else:                      # written before the unmatched atoms were kept: their count only
            unmatched[which] = [(None, float("nan"))] * int(g.attrs.get(f"unmatched_{which}", 0))
    conc = {}
    for kind in ("pde", "particles"):
        if f"concentration_{kind}" in g:
            cg = g[f"concentration_{kind}"]
            con = {k: value(cg[k]) for k in ("t", "mass_near_atoms", "effective_support", "l2") if k in cg}
            con["final_positions"] = value(cg["final_atom_positions"]) if "final_atom_positions" in cg else None
            con["final_masses"] = value(cg["final_atom_masses"]) if "final_atom_masses" in cg else None
            con.update({k: plain(v) for k, v in cg.attrs.items() if k not in ("crc32", SEAL)})
            conc[kind] = con
    options = {k[len("option_"):]: plain(v) for k, v in g.attrs.items() if k.startswith("option_")}
    return Comparison(t=get("t"), w1=get("w1"), mmd=get("mmd"), moment_gap=get("moment_gap"),
                      energy_gap=get("energy_gap"), cdf_drift=get("cdf_drift"), matched_atoms=pairs,
                      unmatched_pde=unmatched["pde"], unmatched_particles=unmatched["particles"],
                      kernel=attr_text(g.attrs.get("kernel", "")), moments_degree=int(g.attrs.get("moments_degree", 0)),
                      options=options, concentration=conc)


def read_validation(g: h5py.Group, path: Path | None = None):
    """The :class:`~solvers.comparison.ValidationResult` that ``write_validation`` wrote to ``g``."""
    from ..comparison import METRICS, ValidationResult

    dist = {k: value(g[k]) for k in METRICS if k in g}
    return ValidationResult(n=value(g["n"]), seeds=value(g["seed"]), t=value(g["t"]), distances=dist,
                            at=float(g.attrs["at"]), slopes=json.loads(attr_text(g.attrs["slopes"])),
                            table=attr_text(g.attrs["table"]), path=path)


@dataclass
class RunArchive:
    """A run read back from its archive: model, results of each solver, comparison, provenance."""

    path: Path
    attrs: dict
    model: Model
    pde: Any
    particles: Any
    comparison: Any          # a solvers.comparison.Comparison, or None
    atoms: dict
    validation: Any = None   # a solvers.comparison.ValidationResult, or None
    warnings: list = field(default_factory=list)     # root attributes changed since attnpde wrote them

    @property
    def config_text(self) -> str:
        return str(self.attrs.get("config", ""))

    @property
    def status(self) -> str:
        return str(self.attrs.get("status", ""))

    @property
    def made_by(self) -> str:
        """"run", "sweep" or "validate": :func:`~.archive_schema.made_by` of the archive's command."""
        return made_by(str(self.attrs.get("command", "")))


def read_archive(f: h5py.File, path: Path) -> RunArchive:
    """Everything an open archive holds, verified (module docstring)."""
    cache, warnings = verify(f, path)
    model = read_model(f)
    pde = read_pde(f["pde"], model, cache) if "pde" in f and "t" in f["pde"] else None
    particles = None
    if "particles" in f and "t" in f["particles"]:
        particles = read_particles(f["particles"], model, cache)
    comparison = read_comparison(f["comparison"]) if "comparison" in f and "t" in f["comparison"] else None
    validation = read_validation(f["validation"], path) if "validation" in f else None
    atoms: dict[str, Any] = {}
    if "atoms" in f:
        for k, g in f["atoms"].items():
            atoms[k] = (value(g["positions"]), value(g["masses"]))
            # what a node-group record adds (counts, error estimates, attrs: diffuse mass, radius)
            for extra in ("counts", "extents", "mass_errors", "position_errors"):
                if extra in g:
                    atoms[f"{k}:{extra}"] = value(g[extra])
            if len(g.attrs):
                atoms[f"{k}:attrs"] = {a: plain(v) for a, v in g.attrs.items() if a != SEAL}
    attrs = {k: plain(v) for k, v in f.attrs.items() if k not in (SEAL, "results")}
    return RunArchive(path=path, attrs=attrs, model=model, pde=pde, particles=particles,
                      comparison=comparison, atoms=atoms, validation=validation, warnings=warnings)


def load(path: str | Path) -> RunArchive:
    """Read a whole archive into objects: ``Model``, ``PDEResult``, ``ParticleResult``, comparison. An archive
    that fails a check, or whose content cannot be read, raises ArchiveDamaged (one line)."""
    path = Path(path)
    with open_archive(path) as f:
        try:
            return read_archive(f, path)
        except ArchiveError:
            raise
        except Exception as e:                    # whatever a damaged file makes the reading do
            raise ArchiveDamaged(f"{path}: damaged archive ({type(e).__name__}: {one_line(e)})") from None


__all__ = ["ArchiveFile", "RunArchive", "load", "open_archive", "read_archive", "read_model", "read_pde",
           "read_particles", "read_comparison", "read_validation", "read_restart", "read_state", "verify", "text_seal",
           "model_differences", "value"]
