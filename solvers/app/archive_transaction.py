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

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Callable

import h5py
import numpy as np

from ..model import Model
from . import archive_files as files
from .archive_files import ArchiveError, ArchiveFull, Lock
from .archive_reader import is_dimension, read_restart, read_state
from .archive_schema import (CHECKSUMS, COMPRESSED, COMPRESSIONS, FORMAT, FORMAT_VERSION,
                             crc, digest, dims_of,
                             libraries, software_version, to_json)
from .archive_dims import GZIP, _chunk_rows, _fixed_text, _set_attrs, delete, label, now, seal, write_model

#: the whole first chunk HDF5 allocates for each new dataset
SLACK = 1 << 19



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


class ArchiveTransaction:
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
        self._hold = False                                          # a stage's last batch waits for its end
        self._held: dict[str, Any] = {}
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
            self._root: dict[str, Any] = {}
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

    def __enter__(self) -> "ArchiveTransaction":
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

    # --- the sections write their snapshots (ArchiveWriter) ---------------------------------------------
    def _write_pde(self, snaps: list[dict]) -> None:
        raise NotImplementedError

    def _write_particles(self, snaps: list[dict]) -> None:
        raise NotImplementedError

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
