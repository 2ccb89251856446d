"""Writing a run into its archive as it goes: plain h5py, ``dset.resize`` and ``dset[n:] = rows``.

A run's snapshots are buffered and written in batches (every ``flush_interval`` seconds, at checkpoints,
at the end of a stage). A batch is a transaction whose commit record is the section's restart state:

1. room for the batch is reserved (``archive_files.reserve``: out of space stops here, the file untouched);
2. its rows are appended, and the restart state's arrays go into the slot (``restart/a`` or ``restart/b``)
   that the committed state does not use; the file is flushed;
3. the state, naming its slot and holding the CRC-32 and shape of every dataset it covers and its own
   digest, is written into the attribute ``restart@state``, in place; the file is flushed again.

A kill at any moment leaves the last committed state whole: before step 3 ends the old state still names
the old slot and the rows it covers, which nothing in steps 1-2 rewrote (rows are only appended, chunks of
compressed datasets hold one row and are written once, and an uncompressed chunk keeps its size and place
when rows are added to it).
Rows past the committed ones are dropped on resume. Every dataset is chunked with HDF5's Fletcher-32
filter, which HDF5 checks on every read; datasets written once carry their CRC-32 as the attribute
``crc32``. The reader (:mod:`.archive_reader`) verifies both.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import time
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

from ..model import Model
from . import archive_files as files
from .archive_files import ArchiveDamaged, ArchiveError, ArchiveFull, Lock
from .archive_reader import SEAL, is_dimension, read_restart, read_results, read_state, text_seal
from .archive_schema import (CHECKSUMS, COMPRESSED, COMPRESSIONS, DIMENSION_NOTES, FORMAT, FORMAT_VERSION,
                             PARTICLE_SERIES, PDE_SERIES, PURE_DIM, STEP_KEYS, cf_attributes, crc, digest, dims_of,
                             libraries, software_version, to_json)

GZIP = dict(compression="gzip", compression_opts=1, shuffle=True)
#: bytes reserved beyond twice a batch's arrays: its metadata (object headers, chunk indexes, attributes) and
#: the whole first chunk HDF5 allocates for each new dataset
SLACK = 1 << 19


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _set_attrs(obj, values: dict, new: bool = False) -> None:
    """``obj.attrs[k] = v`` for every item, in place where the value keeps its type and shape: an attribute
    deleted while a handle to it is open (a frame that holds h5py's, e.g. one Dask's worker profiler
    sampled) is what HDF5 keeps opening under that name, with its old value (a restart state read back
    stale). ``new``: kept for the tests' hooks, which wrap this function."""
    for k, v in values.items():
        a = np.asarray(v)
        if k in obj.attrs:
            old = obj.attrs.get_id(k)
            if old.dtype == a.dtype and old.shape == a.shape:      # (numpy ignores the string's encoding tag)
                obj.attrs.modify(k, v)
                continue
        obj.attrs[k] = v


def seal(obj, values: dict | None = None) -> None:
    """Record the CRC-32 of each text attribute of ``obj`` in its attribute ``text_crc32`` (a fixed-length
    string, held in the object header that HDF5 checksums): HDF5 keeps the characters of a text attribute in
    its global heap, which has no checksum. Called after every change of ``obj``'s text attributes
    (``values``: all of them, when the caller knows them: no reading back)."""
    _set_attrs(obj, {SEAL: _fixed_text(to_json(text_seal(obj, values)))})


def _chunk_rows(row_shape: tuple, itemsize: int) -> int:
    """Rows per chunk of an uncompressed per-snapshot dataset: about 64 KiB per chunk, and at most 1024 rows
    (HDF5 allocates a chunk whole: a series of scalars takes 8 KiB, not 64, until it grows)."""
    row = itemsize * int(np.prod(row_shape, dtype=np.int64))
    return int(min(1024, max(1, (1 << 16) // max(row, 1))))


def put(g: h5py.Group, name: str, value, **kw) -> h5py.Dataset:
    """A dataset written once: ``value`` whole, chunked with Fletcher-32, its CRC-32 as attribute crc32."""
    value = np.asarray(value)
    if name in g:
        delete(g, name)
    if value.ndim == 0:
        ds = g.create_dataset(name, data=value, track_times=False, **kw)
    else:
        chunks = tuple(max(1, s) for s in value.shape)
        ds = g.create_dataset(name, data=value, chunks=chunks, maxshape=(None,) * value.ndim, fletcher32=True,
                              track_times=False, **kw)
    ds.attrs["crc32"] = np.uint32(crc(value))
    return ds


def delete(g: h5py.Group, name: str) -> None:
    """Delete a dataset after detaching it from its dimension scales (a scale's back-reference to a deleted
    dataset breaks netCDF readers)."""
    ds = g[name]
    if isinstance(ds, h5py.Dataset) and ds.ndim and not h5py.h5ds.is_scale(ds.id):
        for axis in range(ds.ndim):
            for scale in list(ds.dims[axis].values()):
                ds.dims[axis].detach_scale(scale)
    del g[name]


# --- named dimensions -----------------------------------------------------------------------------------
def _scale(g: h5py.Group, name: str, get) -> h5py.Dataset:
    """The dimension scale ``name`` of group ``g``: its coordinate variable, else a placeholder dimension."""
    ds = get(g, name)
    if ds is not None:
        if not h5py.h5ds.is_scale(ds.id):
            ds.make_scale(name)
            ds.attrs.update(cf_attributes(g.name.strip("/"), name))
        return ds
    ds = g.create_dataset(name, shape=(0,), maxshape=(None,), dtype="f4", chunks=(1024,), track_times=False)
    ds.make_scale(PURE_DIM + "%10d" % 0)
    ds.attrs["long_name"] = f"dimension '{name}': {DIMENSION_NOTES.get(name, name)}"
    ds.attrs["comment"] = ("a netCDF dimension without a coordinate variable: this placeholder holds no data; "
                           "the dimension's length is that of the variables that use it")
    return ds


def label(g: h5py.Group, path: str, d: int, names, get=None) -> None:
    """Named dimensions and CF attributes for the datasets ``names`` of group ``g`` (at ``path``) that have
    none yet; a 1-D dataset named after its dimension becomes that dimension's coordinate. ``get(g, name)``:
    the dataset (a writer's cache of h5py's Dataset objects, which are costly to make)."""
    get = get or (lambda group, key: group.get(key))
    scales: dict[str, h5py.Dataset] = {}
    for name in names:
        ds = get(g, name)
        if not isinstance(ds, h5py.Dataset) or ds.ndim == 0 or h5py.h5ds.is_scale(ds.id):
            continue
        dims = dims_of(path, name, ds.ndim, d)
        if ds.ndim == 1 and dims[0] == name:
            ds.make_scale(name)
            ds.attrs.update(cf_attributes(path, name))
            continue
        if h5py.h5ds.get_num_scales(ds.id, 0):
            continue
        for axis, dim in enumerate(dims):
            if dim not in scales:
                scales[dim] = _scale(g, dim, get)
            ds.dims[axis].attach_scale(scales[dim])
        ds.attrs.update(cf_attributes(path, name))
        if path == "pde" and name == "coeffs" and d == 3:
            ds.attrs["coordinates"] = "l m"


def write_model(f: h5py.File, model: Model) -> None:
    g = f.require_group("model")
    g.attrs.update({k: getattr(model, k) for k in ("d", "beta", "flow", "attention", "strength", "noise")})
    seal(g)
    if model.perceptron is not None:
        p = g.require_group("perceptron")
        info = model.perceptron.to_dict()
        for k in ("a", "b", "c", "w"):
            if k in info:
                put(p, k, np.asarray(info[k], dtype=float))
        p.attrs.update({"activation": info["activation"], "form": info["form"]})
        seal(p)


def _kept_after_snapshot(result) -> bool:
    """Whether ``result`` (a PDE or particle result) ended interrupted with the state of a step after its
    last snapshot (``solvers.interrupts``): that state, not the last snapshot's, is where a resume continues."""
    r = result.restart
    return (result.stop_reason == "interrupted" and r is not None and r.get("last_snapshot_t") is not None
            and r["t"] > r["last_snapshot_t"])


def _stack(rows: list, dtype) -> np.ndarray:
    """Snapshots' arrays as one block (k, ...), zero-padded to the widest (a refinement within a batch)."""
    rows = [np.asarray(r, dtype=dtype) for r in rows]
    width = tuple(max(r.shape[i] for r in rows) for i in range(rows[0].ndim))
    return np.stack(rows) if all(r.shape == width for r in rows) else _padded(rows, width, dtype)


def _padded(blocks: list, width: tuple, dtype) -> np.ndarray:
    """Rows (or blocks of rows) zero-padded to ``width``, one after another."""
    blocks = [b if b.ndim == len(width) + 1 else b[None] for b in map(np.asarray, blocks)]
    out = np.zeros((sum(len(b) for b in blocks),) + width, dtype=dtype)
    n = 0
    for b in blocks:
        out[(slice(n, n + len(b)),) + tuple(slice(0, k) for k in b.shape[1:])] = b
        n += len(b)
    return out


def _nbytes(obj) -> int:
    """The bytes of the arrays in a snapshot or restart state (what a batch adds at most, uncompressed)."""
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return 8 * len(obj)
    return 8


class ArchiveWriter:
    """Writes one run into an HDF5 archive as it goes (module docstring; the layout: ``archive.__doc__``).

    Parameters
    ----------
    path : archive path
    mode : "create" (a new file; the caller decides about overwriting) or "resume" (an existing archive)
    config_text, name, command, model : written at creation
    flush_interval : seconds between batches of snapshots (0: every snapshot)
    compression : "none" (nothing compressed), "density" or "all"
    lock : the archive's lock, when the caller took it already (``archive_files.Lock``, exclusive)

    ``f`` is the open ``h5py.File``. A write that fails abandons the file as its last commit left it and
    raises (:class:`~.archive_files.ArchiveFull` when out of space); the status can still be recorded afterwards.
    """

    def __init__(self, path: str | Path, mode: str, *, config_text: str = "", name: str = "", command: str = "",
                 model: Model | None = None, flush_interval: float = 1.0, compression: str = "none",
                 lock: Lock | None = None) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
        if mode not in ("create", "resume"):
            raise ValueError(f"mode must be 'create' or 'resume', got {mode!r}")
        self.path = Path(path)
        self.flush_interval = float(flush_interval)
        self._pending: dict[str, list] = {"pde": [], "particles": []}
        self._crc: dict[str, dict] = {"pde": {}, "particles": {}}   # relpath -> [crc32, *shape] of the rows
        self._kept_after = {"pde": False, "particles": False}       # restart state newer than the last snapshot
        self._step_rows0 = 0                                          # rows of /pde/steps before this run's
        self._labeled: set[str] = set()
        self._datasets: dict[str, h5py.Dataset] = {}               # h5py Dataset objects by path (see _get)
        self.failure: BaseException | None = None
        self._committed_t: dict[str, float] = {}
        self._state: dict[str, dict] = {}                          # the committed restart state, per section
        self._hold, self._held = False, {}                          # a stage's last batch waits for its end
        self.status_written = "running"                            # the status the file holds
        self._last_flush = time.perf_counter()
        existed = self.path.exists()
        self.lock = lock or Lock(self.path, exclusive=True, create=mode == "create")
        try:
            if mode == "create":
                self._create(config_text, name, command, model, compression)
            else:
                compression = self._reopen(command)
        except BaseException:
            if getattr(self, "f", None) is not None and self.failure is None:
                self.f.close()
            if mode == "create" and not existed:
                self.path.unlink(missing_ok=True)          # a file this call created and could not fill
            self.lock.release()
            raise
        self.compress = COMPRESSED[compression]
        self.d = model.d if model is not None else int(self.f["model"].attrs["d"]) if "model" in self.f else 0
        if self.labels and "model/perceptron" in self.f:
            with self._writing(0):
                self._label_group(self.f["model/perceptron"], "model/perceptron")

    def _create(self, config_text: str, name: str, command: str, model: Model | None, compression: str) -> None:
        """A new file: the root's attributes (the provenance), the model; flushed."""
        files.reserve(self.lock, None, SLACK)        # room first: a --force on a full disk leaves the file as it was
        self.f = files.h5open(self.path, "w")
        with self._writing(0):
            self._root = {}
            self._set_root({"format": FORMAT, "format_version": FORMAT_VERSION, "checksums": CHECKSUMS,
                            "software_version": software_version(), "created": now(), "config": config_text,
                            "command": command, "name": name, "compression": compression, "libraries": libraries(),
                            "status": "running", "updated": now()})
            if model is not None:
                write_model(self.f, model)
            self._flush()
        self.labels, self.resumed, self.checksums = True, False, True

    def _reopen(self, command: str) -> str:
        """An existing archive to resume: counted as resumed, status running; returns its compression."""
        self.f = files.h5open(self.path, "r+")
        a = self.f.attrs
        # an archive of format 1 stays as it was written (no dimensions half-way through a file)
        self.labels = int(a.get("format_version", 1)) >= 2
        self.checksums = "checksums" in a
        self.resumed = True
        with self._writing(0):
            self._root = {k: a.get(k) for k in a.keys()}
            self._set_root({"resumed": int(a.get("resumed", 0)) + 1, "command": command or str(a.get("command", "")),
                            "status": "running", "updated": now()})
            self._flush()
        return str(a.get("compression", "density"))

    # --- failures ---------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _writing(self, nbytes: int):
        """Reserve room for ``nbytes``, then write. Any failure inside abandons the file as the last flush
        left it (``archive_files.abandon``) and raises: ArchiveFull with the device and the space needed."""
        if self.failure is not None:
            raise ArchiveError(f"{self.path}: the archive was abandoned after a failed write ({self.failure})")
        try:
            files.reserve(self.lock, self.f, 2 * int(nbytes) + SLACK)
            yield
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise                  # interrupts are held around writes (runner.deferred_interrupt)
            self.failure = e
            files.abandon(self.f)
            err = files.is_no_space(e)
            if err and not isinstance(e, ArchiveFull):
                raise ArchiveFull(err, files.full_message(self.path, err, 2 * int(nbytes) + SLACK)) from None
            raise

    def committed_t(self, section: str) -> float | None:
        """The time of the section's last committed restart state (None if it has none)."""
        return self._committed_t.get(section)

    def _after_failure(self, attrs: dict) -> bool:
        """Record ``attrs`` at the root of an abandoned archive, if there is room: the file is opened again
        (as the last flush left it) and written only after a reservation; returns whether it was."""
        try:
            with files.h5open(self.path, "r+") as f:
                files.reserve(self.lock, f, 1 << 16)
                f.attrs.update(attrs)
                seal(f)
                f.flush()
            return True
        except Exception:                                   # the status stays the last one
            return False

    def _flush(self) -> None:
        """Flush the file, after making room for what the flush may still allocate (its metadata). The raw data
        reaches the file as it is written (no chunk cache, ``archive_files.h5open``), so a full disk meets a
        write, and then the file is still as its last flush left it; a flush that failed halfway would not
        leave it so."""
        files.reserve(self.lock, self.f, SLACK)
        self.f.flush()

    def _set_root(self, attrs: dict) -> None:
        """Attributes of the root, then its seal (from the root's attributes as this writer knows them)."""
        self.f.attrs.update(attrs)
        self._root.update(attrs)
        seal(self.f, self._root)

    # --- status -------------------------------------------------------------------------------------
    def set_status(self, status: str) -> bool:
        """Set the root's status (and ``updated``); flushed. Returns whether it was written (after a failed
        write, only if there is room)."""
        if self.failure is not None:
            written = self._after_failure({"status": status, "updated": now()})
        else:
            with self._writing(0):
                self._set_root({"status": status, "updated": now()})
                self._flush()
            written = True
        if written:
            self.status_written = status
        return written

    def annotate(self, **attrs) -> None:
        """Attributes of the archive's root (str, numbers, bools); after a failed write, if there is room."""
        if self.failure is not None:
            self._after_failure(attrs)
            return
        with self._writing(0):
            self._set_root(attrs)

    def close(self) -> None:
        """Write what is buffered and close the file (which is closed even when a write fails)."""
        try:
            if self.failure is None and self.f.id.valid:
                self.write_pending()
        finally:
            if self.failure is None and self.f.id.valid:
                self.f.close()
            self.lock.release()

    def __enter__(self) -> "ArchiveWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- batches ------------------------------------------------------------------------------------
    def _due(self) -> bool:
        return time.perf_counter() - self._last_flush >= self.flush_interval

    def write_due(self) -> bool:
        """Whether the next snapshot will be written (with the batch it completes), not only buffered."""
        return self._due()

    def write_pending(self, flush: bool = True) -> None:
        """Write every buffered snapshot with its restart state (a committed batch)."""
        self._write_batch()

    def _write_batch(self) -> None:
        pending, self._pending = self._pending, {"pde": [], "particles": []}
        if pending["pde"] or pending["particles"]:
            with self._writing(sum(_nbytes(s) for snaps in pending.values() for s in snaps)):
                if pending["pde"]:
                    self._write_pde(pending["pde"])
                if pending["particles"]:
                    self._write_particles(pending["particles"])
        self._last_flush = time.perf_counter()

    def _buffer(self, section: str, snap: dict) -> None:
        pending = self._pending[section]
        if pending:
            # a batch writes the restart state of its last snapshot only: the one before lets go of its own
            pending[-1] = {k: v for k, v in pending[-1].items() if k != "restart"}
        pending.append(snap)
        if self._due():
            self._write_batch()

    def _checkpoint(self, section: str, write: Callable[[], None], state: dict) -> None:
        """The pending snapshots, then ``write()`` (a restart state newer than the last snapshot)."""
        self._write_batch()
        with self._writing(_nbytes(state)):
            write()
        self._kept_after[section] = True
        self._last_flush = time.perf_counter()

    # --- appending ------------------------------------------------------------------------------------
    def _append(self, g: h5py.Group, section: str, name: str, block: np.ndarray, *, compress: bool = False,
                grow: bool = False) -> h5py.Dataset:
        """Append the rows of ``block`` (k, ...) to dataset ``name`` of ``g``, created on first use: chunked with
        Fletcher-32 (gzip'd, one row per chunk, with ``compress``), its first axis unlimited (every axis with
        ``grow``: wider rows widen it, its earlier rows padded with zeros). The CRC-32 of its rows is kept for
        the commit."""
        block = np.ascontiguousarray(block)
        ds = self._get(g, name)
        if ds is None:                              # created holding the block (one call instead of three)
            width = block.shape[1:]
            rows = 1 if compress and width else _chunk_rows(width, block.dtype.itemsize)
            ds = g.create_dataset(name, data=block, chunks=tuple(max(1, c) for c in (rows,) + width),
                                  maxshape=(None,) * block.ndim if grow else (None,) + width, fletcher32=True,
                                  track_times=False, **(GZIP if compress and width else {}))
            self._datasets[ds.name] = ds
            self._crc[section][ds.name[len(f"/{section}/"):]] = [crc(block), *ds.shape]
            return ds
        n, key = ds.shape[0], ds.name[len(f"/{section}/"):]
        width = tuple(max(a, b) for a, b in zip(block.shape[1:], ds.shape[1:]))
        if block.shape[1:] != width:
            block = _padded([block], width, ds.dtype)
        widened = width != ds.shape[1:]
        if len(block):
            ds.resize((n + len(block),) + width)
            ds[n:] = block
        if widened or key not in self._crc[section]:
            value = crc(ds[()]) if n else crc(block)          # earlier rows are zero-padded too: read back
        else:
            value = crc(block, self._crc[section][key][0])
        self._crc[section][key] = [value, *ds.shape]
        return ds

    def _grow_to(self, g, section, name, rows: np.ndarray) -> bool:
        """Dataset ``name`` holds the first rows of the record ``rows`` (a record that only grows, such as
        the refinements): append the others. Whether it is new or grew."""
        ds = g.get(name)
        have = 0 if ds is None else ds.shape[0]
        if ds is not None and have >= len(rows):
            return False
        self._append(g, section, name, rows[have:])
        return True

    def _get(self, g: h5py.Group, name: str):
        """Dataset ``name`` of ``g`` (None if absent), from the writer's cache of Dataset objects."""
        key = f"{g.name}/{name}"
        ds = self._datasets.get(key)
        if ds is None or not ds.id.valid:
            ds = g.get(name)
            if isinstance(ds, h5py.Dataset):
                self._datasets[key] = ds
        return ds

    def _label_group(self, g: h5py.Group, path: str) -> None:
        """Named dimensions for every dataset of group ``g`` (at ``path``)."""
        if self.labels and self.d:
            self._labeled.add(path)
            label(g, path, self.d, list(g.keys()), self._get)

    def _label(self, g: h5py.Group, path: str, new=()) -> None:
        """Named dimensions for a group that grows batch by batch: all its datasets the first time, then
        those named in ``new`` (created since)."""
        if path not in self._labeled:
            self._label_group(g, path)
        elif new and self.labels and self.d:
            label(g, path, self.d, new, self._get)

    # --- the commit -----------------------------------------------------------------------------------
    def _commit(self, section: str, restart: dict) -> None:
        """Write a restart state as the section's commit record (module docstring, steps 2-3): its arrays
        into the free slot, a flush, then the state naming that slot, with the CRC-32 of every dataset it
        covers and its digest, and a flush."""
        if self._hold:                        # the stage's end commits it, once (pde_finish)
            self._held[section] = restart
            return
        r = self.f[section].require_group("restart")
        previous = self._state.get(section)
        if previous is None:
            previous = read_state(r) if "state" in r.attrs else {}
        slot = "b" if previous.get("slot") == "a" else "a"
        sg = r.require_group(slot)
        arrays = {k: np.asarray(v) for k, v in restart.items() if isinstance(v, np.ndarray) and v.ndim >= 1}
        # datasets of the restart group are deleted below: no stale Dataset objects of it (the series' stay)
        self._datasets = {k: v for k, v in self._datasets.items() if not k.startswith(r.name + "/")}
        for k in [k for k in sg if k not in arrays and not is_dimension(sg[k])]:     # of an earlier phase
            delete(sg, k)
        # and the placeholder dimensions no array of this state uses: what a slot holds never depends on the
        # states written into it before (how many the wall clock let through)
        used = {dim for k, v in arrays.items() for dim in dims_of(f"{section}/restart/{slot}", k, v.ndim, self.d)}
        for k in [k for k in sg if k not in used and k not in arrays]:
            del sg[k]
        sums = {k: v for k, v in self._crc[section].items() if not k.startswith("restart/")}
        for k, v in arrays.items():
            ds = sg.get(k)
            if ds is None or ds.dtype != v.dtype or ds.ndim != v.ndim:
                if ds is not None:
                    delete(sg, k)
                ds = sg.create_dataset(k, data=v, maxshape=(None,) * v.ndim, fletcher32=True, track_times=False,
                                       chunks=tuple(max(1, s) for s in v.shape) if v.size < (1 << 17) else True)
            else:
                ds.resize(v.shape)
                ds[...] = v
            sums[f"restart/{slot}/{k}"] = [crc(v), *v.shape]
        self._label(sg, f"{section}/restart/{slot}", list(arrays))
        self._flush()                        # the rows and the slot first: the state below names them
        state = {k: v for k, v in restart.items() if k not in arrays}
        state.update(slot=slot, crc=sums)
        state = json.loads(to_json(state))    # as it will be read back (numpy scalars made plain)
        state["digest"] = digest(state)
        _set_attrs(r, {"state": _fixed_text(to_json(state))})
        if previous and "slot" not in previous:              # an archive from before the slots: its arrays
            for k in [k for k in r if isinstance(r[k], h5py.Dataset)]:
                delete(r, k)
        self._flush()
        self._state[section] = state
        self._committed_t[section] = float(state["t"])

    # --- PDE ------------------------------------------------------------------------------------------
    def pde_begin(self, grid: np.ndarray, options: dict, initial: str) -> None:
        """Open /pde: the output grid, the options as the run resolved them (``PDERun.resolved_options``)."""
        self._begin_stage("pde", "grid", grid, options, initial, options_note=PDE_OPTIONS_NOTE)
        self._step_rows0 = 0

    def _begin_stage(self, name: str, key: str, data: np.ndarray, options: dict, initial: str, **attrs) -> None:
        """Open the group of a stage (afresh: a stage without a committed state holds no rows): its fixed
        dataset ``key``, settings, initial data, and an empty restart group (a stage without one has lost it)."""
        data = np.asarray(data, dtype=float)
        with self._writing(data.nbytes * 2):
            if name in self.f:
                del self.f[name]
                self._datasets.clear()
            g = self.f.create_group(name)
            self._crc[name] = {}
            self._state.pop(name, None)
            self._cover(name, put(g, key, data))
            if name == "pde" and self.labels:
                for ds in _grid_coordinates(g, data):
                    self._cover(name, ds)
            g.create_group("restart")
            g.attrs.update({"options": to_json(options), "initial": initial, "complete": False, "stop_reason": "",
                            **attrs})
            seal(g)
            self._labeled = {p for p in self._labeled if not p.startswith(name)}
            self._flush()                     # the stage on the disk, before its first batch

    def pde_snapshot(self, snap: dict) -> None:
        """Buffer one snapshot (the dict a solve_pde callback receives); write the batch when due."""
        self._buffer("pde", snap)

    def pde_checkpoint(self, cp: dict) -> None:
        """Write the state a run kept between snapshots (``PDERun.run``'s checkpoint: {"restart", "steps"})
        as its restart state, after the snapshots buffered before it and with the steps since."""
        def write() -> None:
            step_rows = self._write_steps({k: cp["steps"][k] for k in STEP_KEYS})
            self._pde_restart(self.f["pde"], dict(cp["restart"]), step_rows, [], 0)
        self._checkpoint("pde", write, cp["restart"])

    def _write_pde(self, snaps: list[dict]) -> None:
        g = self.f["pde"]
        def column(key, dtype):
            return np.array([s[key] for s in snaps], dtype=dtype)
        t = self._append(g, "pde", "t", column("t", float))
        coeffs = self._append(g, "pde", "coeffs", _stack([s["coeffs"] for s in snaps], complex),
                              compress="coeffs" in self.compress, grow=True)
        if self.labels:
            self._mode_coordinates(g, coeffs.shape[1])
        self._append(g, "pde", "degree", column("degree", np.int64))
        self._append(g, "pde", "density", _stack([s["density"] for s in snaps], float),
                     compress="density" in self.compress)
        for k in PDE_SERIES:
            self._append(g, "pde", k, column(k, float))
        step_rows = self._write_steps({k: [v for s in snaps for v in s.get("steps", {}).get(k, ())]
                                       for k in STEP_KEYS})
        lag = [(i, s) for i, s in enumerate(snaps) if s.get("nodes") is not None]
        self._pde_restart(g, dict(snaps[-1]["restart"]), step_rows, lag, t.shape[0] - len(snaps))
        self._kept_after["pde"] = False

    def _write_steps(self, columns: dict) -> int:
        """Append the attempted steps (STEP_KEYS -> iterable of values) to /pde/steps; returns its rows."""
        st = self.f["pde"].require_group("steps")
        for k, dt in zip(STEP_KEYS, (float, float, float, bool)):
            self._append(st, "pde", k, np.fromiter(columns[k], dtype=dt))
        self._label(st, "pde/steps")
        return st["t"].shape[0]

    def _mode_coordinates(self, g: h5py.Group, width: int) -> None:
        """Coordinates of the coefficient axis of /pde, grown to ``width``: k on S^1; l and m on S^2."""
        if self.d == 2:
            cols = {"k": np.arange(width)}
        else:
            from spectral.sphere import canonical_degrees, degree_of
            l, m = canonical_degrees(degree_of(width))
            cols = {"l": l, "m": m}
        for name, values in cols.items():
            self._grow_to(g, "pde", name, np.asarray(values, dtype=np.int64))

    def _pde_restart(self, g: h5py.Group, restart: dict, step_rows: int, lag: list, first_row: int) -> None:
        """Commit the restart state (a snapshot's, or one kept after it) with the rows it continues after: the
        snapshots, ``step_rows`` steps, the node measures (``lag``: the Lagrangian snapshots just appended,
        the first at row ``first_row``); its refinements and grids, which /pde's datasets show."""
        restart["refinements"] = [list(map(float, r)) for r in restart.get("refinements", [])]
        restart["grids"] = [list(map(int, r)) for r in restart.get("grids", [])]
        new = [k for k, rows in (("refinements", np.array(restart["refinements"], dtype=float).reshape(-1, 3)),
                                 ("grids", np.array(restart["grids"], dtype=np.int64)))
               if (rows.size or k == "refinements") and self._grow_to(g, "pde", k, rows)]
        if lag:
            restart.update(self._write_nodes(g, first_row, lag, restart))
        elif "lagrangian" in g and "t" in g["lagrangian"]:
            restart.update(lag_rows=int(g["lagrangian/t"].shape[0]), lag_points=int(g["lagrangian/w"].shape[0]))
        restart["snapshots"] = g["t"].shape[0]
        restart["step_rows"] = step_rows
        self._label(g, "pde", new)
        self._commit("pde", restart)

    def _write_nodes(self, g: h5py.Group, first_row: int, lag: list, restart: dict) -> dict:
        """Append the node measures of Lagrangian snapshots to /pde/lagrangian (one ragged array, archive_schema.RAGGED:
        per snapshot its row in /pde, time, node count and max drift; the nodes of all snapshots one after
        another in x, w, count), with the handoff record and the merges. Returns the row counts the restart
        state covers."""
        lg = g.require_group("lagrangian")
        handoff = to_json(restart["handoff"])
        if lg.attrs.get("handoff") != handoff:
            lg.attrs.update({"handoff": handoff, "layout": RAGGED_NOTE})
            seal(lg)
        self._grow_to(lg, "pde", "merges", np.array(restart.get("merges", []), dtype=float).reshape(-1, 3))
        nodes = [s["nodes"] for _, s in lag]
        self._append(lg, "pde", "t", np.array([s["t"] for _, s in lag], dtype=float))
        self._append(lg, "pde", "snapshot", np.array([first_row + i for i, _ in lag], dtype=np.int64))
        self._append(lg, "pde", "node_count", np.array([len(n["w"]) for n in nodes], dtype=np.int64))
        self._append(lg, "pde", "max_drift", np.array([n["max_drift"] for n in nodes], dtype=float))
        for k, dt in (("x", float), ("w", float), ("count", np.int64)):
            self._append(lg, "pde", k, np.concatenate([np.asarray(n[k], dtype=dt) for n in nodes]))
        self._label(lg, "pde/lagrangian", ["merges"])
        return {"lag_rows": int(lg["t"].shape[0]), "lag_points": int(lg["w"].shape[0])}

    def _finish_restart(self, section: str, result, write: Callable[[dict], None]) -> None:
        """The restart state a stage ends with: ``write(result.restart)`` when it is the state of the step an
        interruption stopped after, or when a checkpoint wrote a newer one than the last snapshot's of a
        complete stage (that one again, as a run without checkpoints leaves); a complete stage's in slot a,
        covering everything the stage wrote (:meth:`_settle_restart`)."""
        complete = result.stop_reason != "interrupted"
        self._hold = False
        held = self._held.pop(section, None)
        if _kept_after_snapshot(result) or (complete and self._kept_after[section] and result.restart is not None):
            write(dict(result.restart))
        elif held is not None:
            self._commit(section, held)
        self._kept_after[section] = False
        if complete:
            self._settle_restart(section)

    def _settle_restart(self, section: str) -> None:
        """A complete stage keeps its restart state in slot a only, whatever the number of states written
        before (which the wall clock decides), so that its archive does not depend on timing, and that state
        covers every row the stage wrote (steps after its last snapshot included): the committed state is
        committed again when it is in slot b or rows came after it, then b goes."""
        g = self.f[section]
        if "restart" not in g or "state" not in g["restart"].attrs:
            return
        r = g["restart"]
        committed = self._state.get(section) or read_state(r)
        covered = {k: v for k, v in (committed.get("crc") or {}).items() if not k.startswith("restart/")}
        if committed.get("slot") == "b" or covered != self._crc[section]:
            state = read_restart(g, with_rows=False)
            for k in ("slot", "crc", "digest"):
                state.pop(k, None)
            self._commit(section, state)
            if self._state[section].get("slot") == "b":
                self._commit(section, state)
        if "b" in r:
            del r["b"]
            self._datasets.clear()
            self._labeled.discard(f"{section}/restart/b")

    def _finish_stage(self, name: str, result) -> h5py.Group:
        """How the stage ended: its stop reason and message, the time and steps it reached, and the wall time
        added to that of the runs it resumed (the caller flushes)."""
        g = self.f[name]
        g.attrs.update({"stop_reason": result.stop_reason, "message": result.message, "t_stop": result.t_stop,
                        "nsteps": result.nsteps, "nrejected": result.nrejected,
                        "wall_time": float(g.attrs.get("wall_time", 0.0)) + float(result.wall_time),
                        "complete": result.stop_reason != "interrupted"})
        seal(g)
        return g

    def _last_batch(self) -> None:
        """Write a stage's last batch, its commit held back for the stage's end (``_hold``): the end's own
        commit covers both."""
        self._hold = True
        try:
            self._write_batch()
        except BaseException:
            self._hold, self._held = False, {}
            raise

    def pde_finish(self, result) -> None:
        """Record how the PDE run ended, and its atoms; for a run an interruption stopped between
        snapshots, the state it kept there (with the steps since its last snapshot). A complete stage's
        last commit covers everything it wrote, its atoms included (the commit of its last batch waits for
        them: one commit instead of two); then it is marked complete."""
        self._last_batch()
        check = (result.lagrangian or {}).get("check")
        with self._writing(_nbytes(result.restart or {}) + _nbytes(check or {})):
            g = self.f["pde"]
            sent = (g["steps/t"].shape[0] if "steps" in g else 0) - self._step_rows0    # this run's steps written
            if len(result.steps["t"]) > sent:
                # the steps after the last snapshot or checkpoint (a stop without a snapshot: max_steps, ...)
                self._write_steps({k: result.steps[k][sent:] for k in STEP_KEYS})
            if result.lagrangian is not None:
                # the node steps of the whole run (the restart state holds those of its last snapshot)
                g.attrs.update({"node_nsteps": int(result.lagrangian["node_nsteps"]),
                                "node_nrejected": int(result.lagrangian["node_nrejected"])})
            if check is not None:
                c = g.require_group("lagrangian").require_group("check")
                for k in ("x", "w", "count"):
                    self._cover("pde", put(c, k, np.asarray(check[k])))
                self._label_group(c, "pde/lagrangian/check")
                c.attrs.update({k: check[k] for k in ("t", "initial_nodes", "nsteps", "stop_reason", "wall_time")})
                seal(c)
            self._write_terminal(g, result)
            cut_check = bool((result.lagrangian or {}).get("check_interrupted"))
            if (result.stop_reason != "interrupted" or cut_check) and "t" in g and g["t"].shape[0]:
                # a resumed result holds only what came after its restart: its atoms come from the whole
                # archived run, read back; a run written from its start has them in memory
                from .archive_reader import read_model, read_pde
                whole = (result if not self.resumed and len(result.t) == g["t"].shape[0]
                         else read_pde(g, read_model(self.f), all_rows=True))
                # the rerun cut: the solution's atoms, without error bars until a resume runs the rerun again
                self.write_atoms("pde", whole.atoms(), **({"error_estimate": "interrupted"} if cut_check else {}))
            self._finish_restart("pde", result, lambda r: self._pde_restart(
                g, r, self._step_rows0 + r["step_log"], [], 0))
            self._flush()                    # what the stage holds, then that it is complete
            self._finish_stage("pde", result)
            self._record_stage("pde", result)

    def _write_terminal(self, g: h5py.Group, result) -> None:
        """/pde/terminal (the certified state: arrays as datasets, scalars as attributes), /pde/plateaus (a
        ragged table: natoms per plateau, their atoms one plateau after another) and /pde/stages (the slow
        stages, one row each), each replaced whole and covered by the stage's last commit."""
        for name in ("terminal", "plateaus", "stages"):
            if name in g:
                del g[name]
                self._datasets.clear()
                self._crc["pde"] = {k: v for k, v in self._crc["pde"].items() if not k.startswith(f"/pde/{name}/")}
        term = getattr(result, "terminal", None)
        if term is not None:
            t = g.create_group("terminal")
            ev = np.asarray(term.eigenvalues)
            arrays = {k: getattr(term, k) for k in term._ARRAYS}
            arrays["eigenvalues"] = ev.real
            if np.iscomplexobj(ev):
                arrays["eigenvalues_imag"] = ev.imag
            for k, v in arrays.items():
                if v is not None:
                    v = np.asarray(v)
                    self._cover("pde", put(t, k, v.astype(np.int8) if v.dtype == bool else v))
            t.attrs.update({"t": term.t, "max_speed": term.max_speed, "stable": bool(term.stable),
                            "verdict": term.verdict, "growth": term.growth, "neutral": int(term.neutral),
                            "energy": term.energy, "check_nodes": -1 if term.check_nodes is None else term.check_nodes,
                            "newton_steps": int(term.newton_steps),
                            "energy_gap": math.nan if term.energy_gap is None else term.energy_gap,
                            "is_global": -1 if term.is_global is None else int(term.is_global),
                            "extremum_energy": math.nan if term.extremum_energy is None else term.extremum_energy,
                            "extremum_kind": term.extremum_kind, "global_note": term.global_note})
            seal(t)
            self._label_group(t, "pde/terminal")
        plateaus = getattr(result, "plateaus", None) or []
        if plateaus:
            p = g.create_group("plateaus")
            columns = {k: np.array([getattr(q, k) for q in plateaus], dtype=float)
                       for k in ("t_entered", "t_certified", "energy", "growth", "kick")}
            columns.update(atom=np.array([q.atom for q in plateaus], dtype=np.int64),
                           part=np.array([q.part for q in plateaus], dtype="S16"),
                           natoms=np.array([len(q.masses) for q in plateaus], dtype=np.int64),
                           **{k: np.concatenate([np.asarray(getattr(q, k)) for q in plateaus])
                              for k in ("positions", "masses", "direction")})
            for k, v in columns.items():
                self._cover("pde", put(p, k, v))
            self._label_group(p, "pde/plateaus")
        stages = getattr(result, "slow_stages", None) or []
        if stages:
            p = g.create_group("stages")
            columns = {k: np.array([getattr(q, k) for q in stages], dtype=float)
                       for k in ("t_entered", "t_left", "speed", "scale", "t_move")}
            columns["atom_mass"] = np.array([q.mass for q in stages], dtype=float)
            columns.update(atoms=np.array([q.atoms for q in stages], dtype=np.int64),
                           atom=np.array([q.atom for q in stages], dtype=np.int64),
                           position=np.array([q.position for q in stages], dtype=float),
                           why=np.array([q.why.encode() for q in stages], dtype=h5py.string_dtype()))
            for k, v in columns.items():
                self._cover("pde", put(p, k, v))
            self._label_group(p, "pde/stages")

    def _record_results(self, prefix: str, entries: dict) -> None:
        """The root's ``results``: what the archive holds complete (a stage: the digest of its last restart
        state; a result written whole, /comparison or /validation: the CRC-32 and shape of its datasets), with
        its digest, written in place after a flush, so that a reader finds any of them missing if it goes."""
        self._flush()
        record = {k: v for k, v in read_results(self.f).items() if not k.startswith(prefix) and k != "digest"}
        record.update(entries)
        record["digest"] = digest(record)
        _set_attrs(self.f, {"results": _fixed_text(to_json(record))})
        self._flush()

    def _record_stage(self, section: str, result) -> None:
        """A complete stage in the root's ``results`` (the digest of its last restart state); flushed."""
        if result.stop_reason == "interrupted" or "state" not in self.f[f"{section}/restart"].attrs:
            self._flush()
            return
        digest = read_state(self.f[f"{section}/restart"])["digest"]
        self._record_results(f"/{section}@", {f"/{section}@state": [digest]})

    def _cover(self, section: str, ds: h5py.Dataset) -> None:
        """Count a dataset written once (outside the per-snapshot series) in the section's next commit, by its
        path from the root, so that a reader finds it missing if it goes."""
        self._crc[section][ds.name] = [int(ds.attrs["crc32"]), *ds.shape]

    # --- particles ----------------------------------------------------------------------------------
    def particles_begin(self, w: np.ndarray, settings: dict, initial: str) -> None:
        """Open /particles: the weights and the run's settings (``simulate_particles`` arguments: n, init,
        seed, integrator, dt, t_final, save_every, stop, and the options)."""
        self._begin_stage("particles", "w", np.asarray(w, dtype=float), settings, initial)

    def particles_snapshot(self, snap: dict) -> None:
        """Buffer one particle snapshot; write the batch when due."""
        self._buffer("particles", snap)

    def particles_checkpoint(self, cp: dict) -> None:
        """Write the state a particle run kept between snapshots as its restart state (after the snapshots
        buffered before it)."""
        self._checkpoint("particles", lambda: self._particles_restart(self.f["particles"], dict(cp["restart"])),
                         cp["restart"])

    def _write_particles(self, snaps: list[dict]) -> None:
        g = self.f["particles"]
        before = g["t"].shape[0] if "t" in g else 0
        self._append(g, "particles", "t", np.array([s["t"] for s in snaps], dtype=float))
        self._append(g, "particles", "x", _stack([s["x"] for s in snaps], float), compress="x" in self.compress)
        for k in PARTICLE_SERIES:
            # a series this version records and the archive's earlier rows (a resumed older archive) do not:
            # NaN for those rows, so that every series keeps the rows of t
            head = [np.nan] * before if before and k not in g else []
            self._append(g, "particles", k, np.array(head + [s.get(k, np.nan) for s in snaps], dtype=float))
        counts = np.array([s.get("cluster_count", -1) for s in snaps], dtype=np.int64)
        self._append(g, "particles", "n_clusters", counts)
        self._particles_restart(g, dict(snaps[-1]["restart"]))
        self._kept_after["particles"] = False

    def _particles_restart(self, g: h5py.Group, restart: dict) -> None:
        """Commit the restart state (a snapshot's, or one kept after it), after the snapshots written so far."""
        self._label(g, "particles")
        self._commit("particles", {**restart, "snapshots": g["t"].shape[0]})

    def particles_finish(self, result) -> None:
        """Record how the particle run ended, and its clusters at the end (the stopping rule's scale and
        rule; scale 0.5 and single linkage without one); for a run an interruption stopped between
        snapshots, the state it kept there."""
        self._last_batch()
        with self._writing(_nbytes(result.restart or {})):
            g = self.f["particles"]
            over = getattr(result, "beyond_stability", None)
            g.attrs.update({"sum_method": result.sum_method,
                            "beyond_stability": math.nan if over is None else float(over)})
            if result.stop_reason != "interrupted" and len(result.t):
                scale, rule = result.cluster_rule
                centres, masses = result.clusters(-1, scale=scale, rule=rule)
                self.write_atoms("particles", centres, masses, scale=scale, rule=rule)
            self._finish_restart("particles", result, lambda r: self._particles_restart(g, r))
            self._flush()
            self._finish_stage("particles", result)
            self._record_stage("particles", result)

    # --- shared -------------------------------------------------------------------------------------
    def write_atoms(self, which: str, atoms, masses: np.ndarray | None = None, **attrs) -> None:
        """/atoms/<which>: ``atoms`` an Atoms (a NodeAtoms adds counts, errors and the diffuse mass), or
        positions with ``masses``; rewritten whole (a resumed run's atoms replace the old ones)."""
        from ..lagrangian import NodeAtoms
        parent = self.f.require_group("atoms")
        if which in parent:
            del parent[which]
            self._datasets.clear()
        g = parent.create_group(which)
        positions = atoms.positions if masses is None else atoms
        masses = atoms.masses if masses is None else masses
        values = {"positions": np.asarray(positions, dtype=float).reshape(len(masses), -1) if len(masses) else
                  np.zeros((0, self.d or 2)), "masses": np.asarray(masses, dtype=float)}
        if isinstance(atoms, NodeAtoms):
            attrs.update(kind="node groups", diffuse=atoms.diffuse, radius=atoms.radius, dust=atoms.dust,
                         dust_groups=atoms.dust_groups)
            values.update(counts=atoms.counts, extents=atoms.extents)
            if atoms.mass_errors is not None:
                values.update(mass_errors=atoms.mass_errors, position_errors=atoms.position_errors)
                attrs.update(diffuse_error=atoms.diffuse_error, check_nodes=atoms.check_nodes)
        self._crc[which] = {k: v for k, v in self._crc[which].items() if not k.startswith(g.name + "/")}
        for k, v in values.items():
            self._cover(which, put(g, k, v))
        g.attrs.update(attrs)
        seal(g)
        self._label_group(g, f"atoms/{which}")

    def truncate_to_restart(self, section: str) -> dict | None:
        """Drop rows written after the last committed restart state; return that state (None if the section
        has none, in which case it holds no rows: ``runner.check_resumable`` refused the others)."""
        g = self.f.get(section)
        if g is None:
            return None
        if "restart" not in g or "state" not in g["restart"].attrs:
            return None
        state = read_state(g["restart"])
        self._state[section] = state
        self._datasets.clear()
        with self._writing(0):
            sums = state.get("crc")
            if sums is not None:
                _truncate_to_sums(g, sums)
            else:                           # an archive from before the checksums: by the counts it names
                _truncate_by_counts(g, state)
                sums = _sums_of(g)
            self._crc[section] = {k: v for k, v in sums.items() if not k.startswith("restart/")
                                  and (k if k.startswith("/") else f"{section}/{k}") in self.f}
            self._labeled.clear()
            if section == "pde":
                self._step_rows0 = int(state.get("step_rows", 0))
            self._flush()
        self._committed_t[section] = float(state["t"])
        return read_restart(g)


PDE_OPTIONS_NOTE = ("options: every option as the run used it, a default replaced by its value; null: dt0 "
                    "(computed from the initial state: the first step, steps/dt[0]) and atom_radius (a tenth of the "
                    "handoff nodes' spacing: lagrangian@handoff) when not given, dt_max, handoff_at, filter: none, "
                    "and the continuation's options (handoff_degree, nodes, node_rtol, node_atol) in a run without it")
RAGGED_NOTE = ("x, w and count hold the node measures of all node snapshots one after another (CF contiguous "
               "ragged array): node snapshot i, at time t[i] and row snapshot[i] of /pde, is rows "
               "sum(node_count[:i]) .. sum(node_count[:i+1]) - 1")


def _fixed_text(text: str, least: int = 4096):
    """A text attribute's value as a fixed-length string, stored in the object header (checksummed by HDF5,
    and rewritten in place by one write while its length class is unchanged), padded with spaces to a power
    of two of at least ``least`` bytes; a variable-length string when it would not fit there (64 KiB)."""
    raw = text.encode()
    if len(raw) >= 60000:
        return text
    size = max(least, 1 << (len(raw) - 1).bit_length())
    return np.array(raw.ljust(size), dtype=h5py.string_dtype("utf-8", size))


def _truncate_to_sums(g: h5py.Group, sums: dict) -> None:
    """Cut every dataset the committed state covers back to the shape it records; delete the per-snapshot
    datasets it does not cover (created after it)."""
    for path, value in sums.items():
        if path.startswith(("restart/", "/", "lagrangian/check")):        # not rows: written whole
            continue
        ds = g[path]
        shape = tuple(value[1:])
        if ds.shape != shape:
            ds.resize(shape)
    covered = set(sums)
    for path in _series(g):
        if path not in covered:
            parent, _, name = path.rpartition("/")
            delete(g[parent] if parent else g, name)
    if "lagrangian" in g and "check" in g["lagrangian"]:
        del g["lagrangian/check"]
    if "lagrangian" in g and not any(p.startswith("lagrangian/") for p in covered):
        del g["lagrangian"]              # the handoff came after the committed state


def _series(g: h5py.Group) -> list[str]:
    """The paths (relative to ``g``) of the datasets a commit covers: every dataset outside restart/ and
    lagrangian/check that is no placeholder dimension and was not written once (no crc32 attribute)."""
    out = []

    def visit(name, obj):
        if (isinstance(obj, h5py.Dataset) and not name.startswith(("restart/", "lagrangian/check"))
                and "crc32" not in obj.attrs and not is_dimension(obj)):
            out.append(name)
    g.visititems(visit)
    return out


def _truncate_by_counts(g: h5py.Group, state: dict) -> None:
    """Cut an archive written before the checksums to the rows its restart state names."""
    n = int(state["snapshots"])
    for name, ds in list(g.items()):
        if isinstance(ds, h5py.Dataset) and ds.maxshape and ds.maxshape[0] is None and _along_time(ds) \
                and ds.shape[0] > n:
            ds.resize(n, axis=0)
    if "steps" in g and "step_rows" in state:
        for ds in g["steps"].values():
            if isinstance(ds, h5py.Dataset) and not is_dimension(ds) and ds.shape[0] > int(state["step_rows"]):
                ds.resize(int(state["step_rows"]), axis=0)
    if "lagrangian" in g:
        lg = g["lagrangian"]
        if "lag_rows" not in state:              # the handoff came after the last complete restart state
            del g["lagrangian"]
        else:
            for names, k in ((("t", "snapshot", "node_count", "max_drift"), "lag_rows"), (("x", "w", "count"),
                                                                                        "lag_points")):
                for name in names:
                    if name in lg and lg[name].shape[0] > int(state[k]):
                        lg[name].resize(int(state[k]), axis=0)
            if "check" in lg:
                del lg["check"]


def _along_time(ds: h5py.Dataset) -> bool:
    """Whether the first axis of ``ds`` runs along its group's snapshots: t itself, a dataset whose first
    dimension is t, or one with no dimension (format 1)."""
    if h5py.h5ds.is_scale(ds.id):
        return ds.name.rsplit("/", 1)[-1] == "t"
    scales = list(ds.dims[0].values()) if ds.ndim else []
    return not scales or scales[0].name.rsplit("/", 1)[-1] == "t"


def _sums_of(g: h5py.Group) -> dict:
    """The CRC-32 and shape of every per-snapshot dataset of ``g`` as it is (an older archive, resumed)."""
    out = {}
    for path in _series(g):
        ds = g[path]
        if ds.maxshape and ds.maxshape[0] is None:
            out[path] = [crc(ds[()]), *ds.shape]
    return out


def _grid_coordinates(g: h5py.Group, grid: np.ndarray) -> list:
    """theta (radians) of the S^1 output grid; lat, lon (degrees) of the S^2 one."""
    if grid.ndim == 2:                                   # S^1: (M, 2)
        return [put(g, "theta", np.mod(np.arctan2(grid[:, 1], grid[:, 0]), 2.0 * np.pi))]
    return [put(g, "lat", np.degrees(np.arcsin(np.clip(grid[:, 0, 2], -1.0, 1.0)))),        # S^2: (nlat, nlon, 3)
            put(g, "lon", np.mod(np.degrees(np.arctan2(grid[0, :, 1], grid[0, :, 0])), 360.0))]


# --- results written whole --------------------------------------------------------------------------------
def write_comparison(writer: ArchiveWriter, cmp, d: int) -> None:
    """/comparison: the distances against its time axis, the matched atoms, the options, and each solver's
    concentration (``Comparison.concentration``) in concentration_<kind>/."""
    with writer._writing(1 << 20):
        if "comparison" in writer.f:                   # a new comparison replaces the old one whole
            del writer.f["comparison"]
            writer._datasets.clear()
        g = writer.f.create_group("comparison")
        put(g, "t", cmp.t)
        for name in ("w1", "mmd", "moment_gap", "energy_gap", "cdf_drift"):
            v = getattr(cmp, name)
            if v is not None:
                put(g, name, v)
        pairs = cmp.matched_atoms
        put(g, "matched_pde_positions", np.array([p["pde_position"] for p in pairs]).reshape(-1, d))
        put(g, "matched_particle_positions", np.array([p["particle_position"] for p in pairs]).reshape(-1, d))
        for key in ("position_error", "pde_mass", "particle_mass"):
            put(g, f"matched_{key}", np.array([p[key] for p in pairs], dtype=float))
        for which in ("pde", "particles"):
            un = getattr(cmp, f"unmatched_{which}")
            put(g, f"unmatched_{which}_positions", np.array([a[0] for a in un]).reshape(-1, d))
            put(g, f"unmatched_{which}_masses", np.array([a[1] for a in un], dtype=float))
        g.attrs.update({"kernel": cmp.kernel, "moments_degree": cmp.moments_degree,
                        "unmatched_pde": len(cmp.unmatched_pde), "unmatched_particles": len(cmp.unmatched_particles),
                        **{f"option_{k}": v for k, v in cmp.options.items()}})
        seal(g)
        for kind, con in cmp.concentration.items():
            cg = g.require_group(f"concentration_{kind}")
            for k in ("t", "mass_near_atoms", "effective_support", "l2", "final_positions", "final_masses"):
                put(cg, {"final_positions": "final_atom_positions", "final_masses": "final_atom_masses"}.get(k, k),
                    np.asarray(con[k]))
            cg.attrs.update({k: con[k] for k in ("radius", "eps", "cells", "statement")})
            seal(cg)
            writer._label_group(cg, f"comparison/concentration_{kind}")
        writer._label_group(g, "comparison")
        _cover_results(writer, g)


def write_validation(writer: ArchiveWriter, res, results: list[dict], compare_opts: dict, pde) -> None:
    """/validation: the distances (N, seed, t) of a validation study, its wall times and stop reasons,
    the fitted slopes, the comparison options and the PDE's end."""
    with writer._writing(sum(v.nbytes for v in res.distances.values())):
        if "validation" in writer.f:
            del writer.f["validation"]
            writer._datasets.clear()
        g = writer.f.create_group("validation")
        put(g, "n", np.asarray(res.n))
        put(g, "seed", np.asarray(res.seeds))
        put(g, "t", res.t)
        for k, v in res.distances.items():
            put(g, k, v)
        by = {(r["n"], r["seed"]): r for r in results}
        put(g, "wall", np.array([[by[(n, s)]["wall"] for s in res.seeds] for n in res.n]))
        put(g, "stop_reason", np.array([[by[(n, s)]["stop_reason"] for s in res.seeds] for n in res.n], dtype="S16"))
        g.attrs.update({"at": res.at, "slopes": json.dumps(res.slopes), "compare": json.dumps(compare_opts),
                        "table": res.table, "pde_stop_reason": pde.stop_reason, "pde_t_stop": float(pde.t_stop)})
        seal(g)
        writer._label_group(g, "validation")
        _cover_results(writer, g)


def _cover_results(writer: ArchiveWriter, g: h5py.Group) -> None:
    """Record the datasets of a result written whole (/comparison, /validation) in the root's ``results``."""
    entries = {}
    g.visititems(lambda name, ds: entries.__setitem__(ds.name, [int(ds.attrs["crc32"]), *ds.shape])
                 if isinstance(ds, h5py.Dataset) and "crc32" in ds.attrs else None)
    writer._record_results(g.name + "/", entries)


__all__ = ["ArchiveWriter", "write_comparison", "write_validation", "write_model", "read_restart",
           "ArchiveDamaged", "ArchiveFull"]
