"""HDF5 archives of runs: self-describing, appended as the run goes, resumable.

Layout (format ``attnpde-run``, version 2: version 1 plus named dimensions; both are read)::

    /                      attrs: format, format_version, software_version, created, updated, status,
                           config (the TOML text), command (the command line), name, libraries
                           (the numerical libraries' versions and the CPU: what a run's round-off
                           depends on), libraries_resumed (those of a resume that ran with others),
                           software_resumed (the attnpde version of a resume by another version),
                           resumed_with (the [run] settings each resume changed: checkpoint_interval,
                           flush_interval)
    /model                 attrs: d, beta, flow, attention, strength, noise
    /model/perceptron      datasets a, b, c | w; attrs activation, form   (absent without perceptron)
    /pde                   t (T) [dimension scale "t"], coeffs (T, n) complex (canonical layout, exact
                           restart state), degree (T), density (T, grid...), grid (grid..., d),
                           energy, mass, min_density, tail, dissipation (T),
                           steps/{t, dt, error, accepted} (every attempted step), refinements (R, 3),
                           grids (G, 1 + grid dims: degree, M on S^1 or nlat, nphi on S^2 — the
                           computational grid of every degree used),
                           restart/ (the state a resume continues from: attr ``state`` and the
                           arrays of the slot a/ or b/ it names, see below);
                           attrs: stop_reason ("" while running), message, t_stop, nsteps, nrejected,
                           options (JSON), initial, wall_time, complete
    /particles             t (T) [scale], x (T, N, d), w (N), energy, max_drift, dissipation,
                           step_stiffness (the fixed steps' h |dv|/|dx|, solvers.particles),
                           n_clusters (T), restart/ (x, w in slot a/ or b/ + attr state: time, RNG
                           state, step counts, stopping-rule window, settings); attrs: options (JSON: the
                           simulate_particles arguments), initial, stop_reason, message, t_stop,
                           nsteps, nrejected, sum_method, wall_time, complete
    /atoms/pde, /atoms/particles     positions (k, d), masses (k); node groups (past a handoff) also
                           counts, extents, mass_errors, position_errors; attrs: kind, diffuse, radius, ...
    /comparison            distances against time (filled by the comparison layer)

Per-snapshot datasets are chunked (several snapshots per ~256 KiB chunk). Every axis of every dataset
has a named dimension (netCDF-4's HDF5 dimension scales, see "named dimensions" below), so that xarray
and netCDF tools read each group. Compression (gzip level 1 with byte shuffling) applies to
``compression="density"`` (default: the output-grid density, which shrinks by about 27%), ``"all"``
(also coefficients and particle positions, which shrink by only ~19% and ~6% for ten times the write
cost — measured), or ``"none"``. A chunk of a compressed per-snapshot dataset (the density; the particle
positions under ``"all"``) whose rows have all arrived is compressed in a worker thread while the run goes
on, into the bytes HDF5's filters would make, and written as it is (``_Deflater``).
Snapshots are buffered and written in batches: a batch is written, then the restart state matching
its last row (with the number of rows it corresponds to), then the file is flushed. A batch goes out
as soon as ``flush_interval`` seconds (default 1 s; 0 writes every snapshot) have passed since the
previous one, and always when a stage ends or is interrupted. A checkpoint (every
``checkpoint_interval`` of the run layer) writes the pending batch and then the state of the current
step the same way; an interruption writes that of the step it stopped after. A restart state's arrays go
into the slot (``restart/a``, ``restart/b``) the current state does not use, and its attribute, naming
the slot, last (:meth:`ArchiveWriter._write_restart`): a killed run therefore leaves a readable archive
whose last restart state is whole, whatever the moment of the kill; rows written after it are dropped on
resume.
Batches that fall due during a stage are written behind the computation: one background thread writes
and flushes a batch while the solver goes on (h5py releases the GIL inside HDF5, so the gzip and the
I/O run on another core), one batch at a time. Every other use of the file (``ArchiveWriter.f``) first
waits for that batch, and re-raises what it raised: the file is only ever used by one thread at a time,
and an error in a background write stops the run when the next batch falls due (or the stage ends), as
a write in the foreground would have. A batch due at the end of a stage is written in the foreground.
"""
from __future__ import annotations

import datetime as _dt
import fnmatch
import functools
import json
import math
import threading
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable

import h5py
import numpy as np

from .._chunks import shared_pool
from ..model import Model
from ..perceptron import Perceptron

__all__ = ["ArchiveError", "ArchiveWriter", "RunArchive", "load", "made_by", "open_archive", "write_comparison",
           "read_comparison",
           "write_validation", "read_validation",
           "FORMAT", "FORMAT_VERSION"]

FORMAT = "attnpde-run"
FORMAT_VERSION = 3      # 3: restart arrays in two slots (restart/a, restart/b); 2: named dimensions
COMPRESSIONS = ("density", "all", "none")
_COMPRESSION = dict(compression="gzip", compression_opts=1, shuffle=True)

# fields appended once per snapshot, per section
PDE_SERIES = ("energy", "mass", "min_density", "tail", "dissipation")
STEP_KEYS = ("t", "dt", "error", "accepted")
PARTICLE_SERIES = ("energy", "max_drift", "dissipation", "step_stiffness")


class ArchiveError(ValueError):
    """A file that is not a readable attnpde archive (foreign, damaged, or of another format version)."""


def software_version() -> str:
    """attnpde's version (``solvers.__version__``): an archive's ``software_version``. A version changes
    when this package's own numerical choices change a run's round-off (a resume by another version says
    so, as for other libraries)."""
    from .. import __version__
    return __version__


@functools.lru_cache(maxsize=1)
def libraries() -> str:
    """The versions of the libraries a run's numbers go through, and the CPU ("numpy 2.4.6, scipy ...;
    x86_64 Intel(R) Xeon(R) ..."). The grids, plans and sizes are fixed by the configuration; the
    round-off is not: it depends on these (their SIMD kernels order sums differently), so an archive
    says which ones made it. Read from the modules the package has already imported (no metadata scan:
    this is written with every archive)."""
    import platform

    import ducc0
    import finufft
    import pyfftw
    import scipy

    from spectral.sphere import shtns
    mods = [("numpy", np), ("scipy", scipy), ("pyfftw", pyfftw), ("shtns", shtns), ("finufft", finufft),
            ("ducc0", ducc0), ("h5py", h5py)]
    text = ", ".join(f"{name} {getattr(m, '__version__', '?')}" for name, m in mods)
    text += f", HDF5 {h5py.version.hdf5_version}"
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{text}; {platform.machine()} {cpu or platform.processor()}".rstrip()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _json(obj: Any) -> str:
    def default(o):
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, (np.integer,)):
            return int(o)
        if isinstance(o, (np.floating,)):
            return float(o)
        return repr(o)
    return json.dumps(obj, default=default, sort_keys=True)


# --- low-level appends ------------------------------------------------------------------------------
# Appends extend a dataset and write the new rows as one hyperslab through h5py's low-level API, on
# dataset handles the writer keeps open between batches (``handles``: name -> Dataset, one dict per
# group). The high-level path (``name in group``, ``group[name]``, ``ds.resize``, ``ds[n:] = rows``)
# costs about 0.3 ms per dataset and batch, which for the dozen per-snapshot series of a PDE run was
# most of the archive's write time (measured); this one about 0.05 ms. Same datasets, same bytes.
# Datasets are created the same way (``_create``: ~25 us against ~150 us for ``create_dataset``, whose
# property list and type it reproduces: chunks, byte shuffling and gzip, no time stamps).
_GZIP_LEVEL = _COMPRESSION["compression_opts"]


@functools.lru_cache(maxsize=64)
def _dcpl(chunks: tuple, compress: bool) -> h5py.h5p.PropDCID:
    """The creation property list of a chunked dataset (as ``create_dataset`` makes it)."""
    p = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    p.set_chunk(chunks)
    if compress:
        p.set_shuffle()
        p.set_deflate(_GZIP_LEVEL)
    p.set_obj_track_times(False)
    return p


def _h5type(dtype: np.dtype) -> h5py.h5t.TypeID:
    # h5py's special dtypes (enums, strings) differ from plain ones only in metadata, which numpy's dtype
    # equality ignores: those are never cached
    return h5py.h5t.py_create(dtype, logical=True) if dtype.metadata else _plain_h5type(dtype)


@functools.lru_cache(maxsize=32)
def _plain_h5type(dtype: np.dtype) -> h5py.h5t.TypeID:
    return h5py.h5t.py_create(dtype, logical=True)


def _create(group: h5py.Group, name: str, shape: tuple, chunks: tuple, dtype, *, compress: bool = False,
            grow: bool = False, data: np.ndarray | None = None) -> h5py.Dataset:
    """A new chunked dataset of ``shape`` (first axis unlimited; every axis when ``grow``); ``data``: its
    values (C-contiguous, of ``shape`` and ``dtype``), written whole (a dataset created at its size and
    written at once: 73 us against 115 us for one created empty, extended, then written, measured)."""
    dtype = np.dtype(dtype)
    maxshape = (h5py.h5s.UNLIMITED,) * len(shape) if grow else (h5py.h5s.UNLIMITED,) + tuple(shape[1:])
    dsid = h5py.h5d.create(group.id, name.encode(), _h5type(dtype), h5py.h5s.create_simple(tuple(shape), maxshape),
                           dcpl=_dcpl(tuple(chunks), bool(compress)))
    if data is not None and data.size:
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data)
    return h5py.Dataset(dsid)


def _chunk_rows(row_shape: tuple, itemsize: int, limit: int = 1024) -> int:
    """Rows per chunk of a per-snapshot dataset: about 256 KiB per chunk (few I/O operations per batch,
    cheap reads of single snapshots)."""
    row_bytes = itemsize * int(np.prod(row_shape, dtype=np.int64))
    return int(min(limit, max(1, (1 << 18) // max(row_bytes, 1))))


def _has(group: h5py.Group, name: str) -> bool:
    """Whether ``group`` holds a link ``name`` (a plain name, no path): ``name in group`` without the
    high-level wrapper (~2 us against ~25 us, measured)."""
    return name.encode() in group.id


def _subgroup(parent: h5py.Group, name: str) -> tuple[h5py.Group, bool]:
    """``parent.require_group(name)`` (a plain name) through the low-level API, and whether it was created."""
    key = name.encode()
    if key in parent.id:
        return h5py.Group(h5py.h5g.open(parent.id, key)), False
    return h5py.Group(h5py.h5g.create(parent.id, key)), True


def _dataset(group: h5py.Group, name: str, handles: dict | None) -> h5py.Dataset | None:
    """The dataset ``name`` of ``group`` (None if absent), from ``handles`` when it holds it."""
    ds = handles.get(name) if handles is not None else None
    if ds is not None and ds.id.valid:
        return ds
    key = name.encode()
    if key not in group.id:
        return None
    ds = h5py.Dataset(h5py.h5d.open(group.id, key))
    if handles is not None:
        handles[name] = ds
    return ds


def _write_block(ds: h5py.Dataset, n: int, block: np.ndarray) -> None:
    """Write ``block`` (k, ...) into rows n .. n+k of ``ds`` (already extended to hold them)."""
    if block.shape[0] == 0:
        return
    block = np.ascontiguousarray(block, dtype=ds.dtype)
    fspace = ds.id.get_space()
    fspace.select_hyperslab((n,) + (0,) * (block.ndim - 1), block.shape)
    ds.id.write(h5py.h5s.create_simple(block.shape), fspace, block)


def _append_rows(group: h5py.Group, name: str, rows: list, *, compress: bool = False, dtype=None,
                 grow: bool = False, handles: dict | None = None, deflated: "_Deflated | None" = None
                 ) -> h5py.Dataset:
    """Append several rows (arrays of equal shape, or of growing shape when ``grow``) in one resize.
    ``deflated``: chunks of these rows already compressed (:class:`_Deflater`), written as they are."""
    rows = [np.asarray(r, dtype=dtype) for r in rows]
    shape = tuple(max(r.shape[i] for r in rows) for i in range(rows[0].ndim))
    ds = _dataset(group, name, handles)
    if ds is None:
        chunks = (_chunk_rows(shape, rows[0].dtype.itemsize),) + shape if shape else (1024,)
        whole = deflated is None and all(r.shape == shape for r in rows)
        ds = _create(group, name, (len(rows) if whole else 0,) + shape, chunks, rows[0].dtype,
                     compress=compress and bool(shape), grow=grow,
                     data=(np.stack(rows) if shape else np.array(rows)) if whole else None)
        if handles is not None:
            handles[name] = ds
        if whole:
            return ds
    old = ds.id.shape
    n = old[0]
    width = tuple(max(a, b) for a, b in zip(shape, old[1:]))
    ds.id.set_extent((n + len(rows),) + width)
    if all(r.shape == width for r in rows):
        done = deflated.write(ds, n, rows) if deflated is not None else ()
        start = 0
        for i, j in list(done) + [(len(rows), len(rows))]:       # the rows between the chunks written
            if i > start:
                _write_block(ds, n + start, np.stack(rows[start:i]) if shape else np.array(rows[start:i]))
            start = j
    else:
        block = np.zeros((len(rows),) + width, dtype=ds.dtype)
        for i, r in enumerate(rows):
            block[(i,) + tuple(slice(0, k) for k in r.shape)] = r
        _write_block(ds, n, block)
    return ds


def _extend(group: h5py.Group, name: str, values, dtype=None, handles: dict | None = None) -> h5py.Dataset:
    """Append several scalars to a 1-D resizable dataset."""
    values = np.ascontiguousarray(np.asarray(values, dtype=dtype).reshape(-1))
    ds = _dataset(group, name, handles)
    if ds is None:
        ds = _create(group, name, values.shape, (4096,), values.dtype if values.size else (dtype or float), data=values)
        if handles is not None:
            handles[name] = ds
        return ds
    n = ds.id.shape[0]
    if values.size:
        ds.id.set_extent((n + values.size,))
        _write_block(ds, n, values)
    return ds


def _extend_block(group: h5py.Group, name: str, block: np.ndarray, handles: dict | None = None) -> h5py.Dataset:
    """Append the rows of ``block`` (k, ...) to a dataset resizable along its first axis."""
    block = np.ascontiguousarray(block)
    ds = _dataset(group, name, handles)
    if ds is None:
        chunks = (_chunk_rows(block.shape[1:], block.dtype.itemsize, 1 << 16),) + block.shape[1:]
        ds = _create(group, name, block.shape, chunks, block.dtype, data=block)
        if handles is not None:
            handles[name] = ds
        return ds
    n = ds.id.shape[0]
    if block.shape[0]:
        ds.id.set_extent((n + block.shape[0],) + block.shape[1:])
        _write_block(ds, n, block)
    return ds


# --- chunks compressed off the run's thread ------------------------------------------------------------
# gzip is most of a batch's cost (the density of a 101-snapshot S^1 run: 7 of the writer's ~25 ms, in the
# flush that ends the run). zlib releases the GIL, so a chunk whose rows have all arrived is compressed in a
# worker thread while the run goes on, into exactly the bytes HDF5's pipeline would store (byte shuffle, then
# zlib at the same level: the filters the dataset declares, so every reader decodes it as usual), and the
# batch writes it with H5Dwrite_chunk. A chunk is only ever written so when its rows all belong to the batch
# and its first row lands on a chunk boundary of the dataset (checked against the file when the batch is
# written); every other row goes through HDF5 as before.
def _deflate(block: np.ndarray) -> bytes:
    """HDF5's shuffle + deflate of one chunk (C-contiguous float64): byte k of every element for k = 0..7,
    then zlib. Both steps release the GIL."""
    planes = block.view(np.uint8).reshape(-1, block.itemsize).T
    return zlib.compress(np.ascontiguousarray(planes), _GZIP_LEVEL)


class _Deflated:
    """The chunks of one batch's rows of one dataset compressed in advance: (row in the batch, Future, the
    chunk's first and last row arrays)."""

    def __init__(self, nrows: int, chunks: list) -> None:
        self.nrows, self.chunks = nrows, chunks

    def write(self, ds: h5py.Dataset, n: int, rows: list) -> list:
        """Write the chunks that hold rows n .. n+len(rows) of ``ds`` exactly: a chunk is taken only if its
        first row lands on a chunk boundary of the file and its first and last rows are the very arrays of
        the batch at its place (so a miscount anywhere can only cost the advance, never place rows wrongly);
        if its compression failed, HDF5 writes its rows. Returns their (start, stop) rows in the batch, in
        order (the caller writes the others)."""
        if not self.chunks or not _deflatable(ds, self.nrows):
            return []
        done = []
        for i, fut, first, last in self.chunks:
            j = i + self.nrows
            if (n + i) % self.nrows or j > len(rows) or rows[i] is not first or rows[j - 1] is not last:
                continue
            try:
                data = fut.result()
            except Exception:                  # noqa: BLE001 — the rows are written the ordinary way
                continue
            ds.id.write_direct_chunk((n + i,) + (0,) * (len(ds.id.shape) - 1), data)
            done.append((i, j))
        return done


def _deflatable(ds: h5py.Dataset, nrows: int) -> bool:
    """Whether the chunks of ``ds`` are those :func:`_deflate` makes: ``nrows`` whole rows of float64, byte
    shuffling then gzip at our level, and no other filter."""
    if ds.dtype != np.float64 or not ds.chunks or ds.chunks[0] != nrows or ds.chunks[1:] != ds.id.shape[1:]:
        return False
    p = ds.id.get_create_plist()
    return [p.get_filter(i)[:3][0::2] for i in range(p.get_nfilters())] == [
        (h5py.h5z.FILTER_SHUFFLE, (8,)), (h5py.h5z.FILTER_DEFLATE, (_GZIP_LEVEL,))]


class _Deflater:
    """Compresses, in a worker thread, the chunks of a compressed per-snapshot dataset (module docstring)
    as the snapshots arrive: ``add`` per snapshot, ``take`` when the snapshots go to a batch.

    ``rows[section]`` is the row in the file of the section's next snapshot (None: unknown, then nothing is
    compressed in advance); ``nrows[(section, key)]`` the dataset's rows per chunk (None: not created yet,
    those :func:`_chunk_rows` gives). ``add`` is told the snapshot's index in the writer's buffer; a chunk
    keeps its first and last row arrays, which the batch checks (:meth:`_Deflated.write`)."""

    KEYS = {"pde": ("density",), "particles": ("x",)}

    def __init__(self, compress: set) -> None:
        self.keys = {s: tuple(k for k in ks if k in compress) for s, ks in self.KEYS.items()}
        self.rows: dict = {}
        self.nrows: dict = {}
        self._open: dict = {}               # (section, key) -> (first row in the batch, rows so far) of a chunk
        self._done: dict = {}               # (section, key) -> [(row in the batch, Future, first, last)]

    def start(self, section: str, group: h5py.Group | None, rows: int) -> None:
        """The section's next snapshot is row ``rows`` of ``group`` (which may hold its datasets already)."""
        self.take(section)
        self.rows[section] = rows
        for key in self.keys[section]:
            ds = group.get(key) if group is not None else None
            self.nrows[(section, key)] = (ds.chunks[0] if ds.chunks and _deflatable(ds, ds.chunks[0]) else 0) \
                if isinstance(ds, h5py.Dataset) else None

    def add(self, section: str, snap: dict, i: int) -> None:
        """The snapshot ``snap``, index ``i`` in the buffer of its section."""
        row = self.rows.get(section)
        if row is None:
            return
        self.rows[section] = row + 1
        for key in self.keys[section]:
            value = snap.get(key)
            if value is None:
                continue
            value = np.asarray(value, dtype=float)       # the batch's np.asarray: the same object
            k = (section, key)
            if self.nrows.get(k) is None:
                self.nrows[k] = _chunk_rows(value.shape, value.itemsize)
            nrows = self.nrows[k]
            if not nrows:
                continue
            if row % nrows == 0:
                self._open[k] = (i, [])
            first, got = self._open.get(k, (None, None))
            if got is None:
                continue
            if got and got[0].shape != value.shape:
                self._open.pop(k)
                continue
            got.append(value)
            if len(got) == nrows:
                self._open.pop(k)
                # one worker thread compresses for every writer of the process; the rows are stacked here:
                # in the worker that Python-level step would hold the GIL
                worker = shared_pool(1, "attnpde-deflate")
                self._done.setdefault(k, []).append((first, worker.submit(_deflate, np.stack(got)), got[0], got[-1]))

    def take(self, section: str) -> dict:
        """The chunks compressed for the snapshots added since the last take: key -> _Deflated. A chunk
        still open is dropped (its rows are written by HDF5)."""
        out = {}
        for key in self.keys[section]:
            k = (section, key)
            self._open.pop(k, None)
            chunks = self._done.pop(k, [])
            if chunks:
                out[key] = _Deflated(self.nrows[k], chunks)
        return out

    def shutdown(self) -> None:
        """Forget the chunks not taken; their compression ends in the shared worker (nothing is cancelled:
        a batch still being written, after a second Ctrl-C in close, may wait for a chunk)."""
        self._open.clear()
        self._done.clear()


def _replace(group: h5py.Group, name: str, value, **kw) -> h5py.h5d.DatasetID | None:
    """Dataset ``name`` of ``group`` (re)written whole with ``value`` (``create_dataset(name, data=value,
    **kw)``; a numeric array without options through the low-level API, the same dataset, whose id is
    returned)."""
    if _has(group, name):
        _delete(group, name)
    return _put(group, name, value, **kw)


def _rewrite(group: h5py.Group, name: str, value: np.ndarray, handles: dict) -> bool:
    """Dataset ``name`` of ``group`` written whole with ``value`` unless it has that shape already (a record
    that only grows, such as the refinements); whether it was (re)written."""
    ds = _dataset(group, name, handles)
    if ds is not None and ds.shape == value.shape:
        return False
    handles[name] = h5py.Dataset(_replace(group, name, value))
    return True


def _put(group: h5py.Group, name: str, value, **kw) -> h5py.h5d.DatasetID | None:
    """A new dataset ``name`` of ``group`` (which has none of that name) written whole with ``value``:
    :func:`_replace` without the lookup."""
    if kw or not isinstance(value, np.ndarray) or value.dtype.kind not in "biufc":
        group.create_dataset(name, data=value, **kw)
        return None
    value = value if value.flags.c_contiguous else value.copy()         # (ascontiguousarray makes 0-d 1-d)
    space = h5py.h5s.create_simple(value.shape) if value.ndim else _SCALAR
    dsid = h5py.h5d.create(group.id, name.encode(), _h5type(value.dtype), space, dcpl=_contiguous())
    if value.size:
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, value)
    return dsid


@functools.lru_cache(maxsize=1)
def _contiguous() -> h5py.h5p.PropDCID:
    """The creation property list of ``create_dataset(name, data=...)``: contiguous, no time stamps."""
    p = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    p.set_obj_track_times(False)
    return p


def _truncate(group: h5py.Group, n: int, names) -> None:
    for name in names:
        if name in group and group[name].shape[0] > n:
            group[name].resize(n, axis=0)


# --- named dimensions (the netCDF-4 / xarray view) ----------------------------------------------------
# Every axis of every dataset is attached to an HDF5 dimension scale in its own group, which is how netCDF-4
# (and so h5netcdf / xarray / ncdump) names dimensions. A dimension with a coordinate (t, k, theta, lat, lon,
# n, seed) is the coordinate variable itself; one without (particle, component, node, ...) is netCDF's
# "dimension but not a variable": an empty unlimited dataset, whose size readers take from the variables
# attached to it (so it never needs resizing). Scales live in the group of the datasets they label, so a
# group can be deleted whole; a single dataset is detached before it is deleted (``_delete``), because a
# scale's back-references to a deleted dataset would break readers.
_PURE_DIM = b"This is a netCDF dimension but not a netCDF variable."

# dimensions by group and dataset name (fnmatch patterns; "*" is the default of a group); MODE and GRID
# stand for the coefficient and output-grid axes of the manifold (_MODE, _GRID)
_DIMS = {
    "pde": {"coeffs": ("t", "MODE"), "density": ("t", "GRID"), "grid": ("GRID", "component"),
            "refinements": ("refinement", "refinement_field"), "grids": ("grid_record", "grid_field"),
            "l": ("mode",), "m": ("mode",), "k": ("k",), "theta": ("theta",), "lat": ("lat",), "lon": ("lon",),
            "*": ("t",)},
    "pde/steps": {"*": ("step",)},
    "pde/lagrangian": {"x": ("node", "component"), "w": ("node",), "count": ("node",),
                       "merges": ("merge", "merge_field"), "*": ("t",)},
    "pde/lagrangian/check": {"x": ("node", "component"), "*": ("node",)},
    "pde/terminal": {"positions": ("atom", "component"), "eigenvalues*": ("eigenvalue",), "*": ("atom",)},
    "pde/plateaus": {"positions": ("plateau_atom", "component"), "direction": ("plateau_atom", "component"),
                     "masses": ("plateau_atom",), "*": ("plateau",)},
    "pde/restart*": {"coeffs": ("coeff",), "handoff_coeffs": ("handoff_coeff",), "x": ("node", "component"),
                     "w": ("node",), "count": ("node",)},
    "particles": {"x": ("t", "particle", "component"), "w": ("particle",), "*": ("t",)},
    "particles/restart*": {"x": ("particle", "component"), "*": ("particle",)},
    "atoms/*": {"positions": ("atom", "component"), "*": ("atom",)},
    "comparison": {"matched_*_positions": ("match", "component"), "matched_*": ("match",),
                   "unmatched_pde_positions": ("unmatched_pde", "component"), "unmatched_pde_*": ("unmatched_pde",),
                   "unmatched_particles_positions": ("unmatched_particles", "component"),
                   "unmatched_particles_*": ("unmatched_particles",), "*": ("t",)},
    "comparison/concentration_*": {"final_atom_positions": ("atom", "component"), "final_atom_masses": ("atom",),
                                   "*": ("t",)},
    "validation": {"n": ("n",), "seed": ("seed",), "t": ("t",), "wall": ("n", "seed"),
                   "stop_reason": ("n", "seed"), "*": ("n", "seed", "t")},
    "model/perceptron": {"a": ("unit", "component"), "w": ("unit", "component"), "*": ("unit",)},
}
_MODE = {2: ("k",), 3: ("mode",)}
_GRID = {2: ("theta",), 3: ("lat", "lon")}

# CF-style attributes (units "1": dimensionless; time is the depth of the Transformer, in layers)
_CF = {
    "t": dict(long_name="time (depth, in layers)", units="1"),
    "k": dict(long_name="Fourier wavenumber (c_k, k >= 0; c_{-k} = conj(c_k))", units="1"),
    "l": dict(long_name="spherical-harmonic degree", units="1"),
    "m": dict(long_name="spherical-harmonic order (m >= 0; orthonormal harmonics, area measure)", units="1"),
    "theta": dict(long_name="angle on the circle", units="radian"),
    "lat": dict(standard_name="latitude", long_name="latitude", units="degrees_north"),
    "lon": dict(standard_name="longitude", long_name="longitude", units="degrees_east"),
    "coeffs": dict(long_name="spectral coefficients of rho (canonical layout)", units="1"),
    "density": dict(long_name="density of rho with respect to the uniform probability measure", units="1"),
    "grid": dict(long_name="output grid points (unit vectors)", units="1"),
    "degree": dict(long_name="resolution (Fourier modes K on S^1, harmonic degree L on S^2)", units="1"),
    "energy": dict(long_name="energy of the gradient flow", units="1"),
    "mass": dict(long_name="total mass", units="1"),
    "min_density": dict(long_name="minimum of the density on the computational grid", units="1"),
    "tail": dict(long_name="relative spectral tail", units="1"),
    "dissipation": dict(long_name="energy dissipation rate", units="1"),
    "max_drift": dict(long_name="largest speed of the points (particles, or the continuation's nodes)", units="1"),
    "step_stiffness": dict(long_name="largest h |dv|/|dx| of the fixed steps since the previous snapshot "
                                     "(above the integrator's stability bound: beyond it)", units="1"),
    "x": dict(long_name="positions (unit vectors)", units="1"),
    "w": dict(long_name="weights", units="1"),
    "count": dict(long_name="initial nodes merged into each node", units="1"),
    "node_count": dict(long_name="nodes of each snapshot (CF contiguous ragged array)", sample_dimension="node"),
    "snapshot": dict(long_name="row in /pde of each node snapshot", units="1"),
    "merges": dict(long_name="merge steps of the nodes (t, nodes before, nodes after)", units="1"),
    "refinements": dict(long_name="refinements of the resolution (t, old degree, new degree)", units="1"),
    "grids": dict(long_name="computational grid of each degree used (degree, grid sizes)", units="1"),
    "dt": dict(long_name="attempted step size", units="1"),
    "error": dict(long_name="scaled error estimate of the attempted step (<= 1: accepted)", units="1"),
    "accepted": dict(long_name="whether the attempted step was accepted"),
    "n_clusters": dict(long_name="clusters of the particles (-1: not counted)", units="1"),
    "positions": dict(long_name="atom positions (unit vectors)", units="1"),
    "masses": dict(long_name="atom masses", units="1"),
    "counts": dict(long_name="nodes in each atom", units="1"),
    "extents": dict(long_name="largest distance of an atom's nodes from its position", units="radian"),
    "mass_errors": dict(long_name="error estimate of the atom masses (rerun at twice the nodes)", units="1"),
    "position_errors": dict(long_name="error estimate of the atom positions (rerun at twice the nodes)",
                            units="radian"),
    "handoff_coeffs": dict(long_name="spectral coefficients of the handoff state (canonical layout)", units="1"),
    # /pde/terminal and /pde/plateaus (solvers.terminal)
    "displacement": dict(long_name="how far polishing moved each atom", units="radian"),
    "eigenvalues": dict(long_name="non-neutral eigenvalues of the linearisation (real parts; > 0: unstable)",
                        units="1"),
    "eigenvalues_imag": dict(long_name="imaginary parts of the eigenvalues", units="1"),
    "t_entered": dict(long_name="time the flow entered the plateau (energy within 1e-3 of its drop)", units="1"),
    "t_certified": dict(long_name="time the plateau was certified", units="1"),
    "growth": dict(long_name="largest growth rate of the plateau's linearisation", units="1"),
    "atom": dict(long_name="the atom of a pull instability (-1: the atoms as a system)", units="1"),
    "kick": dict(long_name="the perturbation along the unstable direction", units="radian"),
    "part": dict(long_name="where the instability is: atoms (the reduced system) or pull (one atom's)"),
    "natoms": dict(long_name="atoms of each plateau (CF contiguous ragged array)", sample_dimension="plateau_atom"),
    "direction": dict(long_name="unstable direction (tangent displacement of each atom)", units="radian"),
    # /comparison and its concentration_* (solvers.comparison)
    "w1": dict(long_name="1-Wasserstein distance between the PDE and the particles (arc length)", units="radian"),
    "mmd": dict(long_name="kernel distance (MMD) between the PDE and the particles", units="1"),
    "moment_gap": dict(long_name="largest gap between the PDE's and the particles' coefficients", units="1"),
    "energy_gap": dict(long_name="|energy of the PDE - energy of the particles|", units="1"),
    "cdf_drift": dict(long_name="largest change of the particles' CDF values (0 on characteristics)", units="1"),
    "matched_pde_positions": dict(long_name="PDE atoms matched to particle atoms (unit vectors)", units="1"),
    "matched_particle_positions": dict(long_name="particle atoms matched to PDE atoms (unit vectors)", units="1"),
    "matched_pde_mass": dict(long_name="PDE mass within atom_radius of its matched atom", units="1"),
    "matched_particle_mass": dict(long_name="particle mass within atom_radius of its matched atom", units="1"),
    "matched_position_error": dict(long_name="distance between matched atoms", units="radian"),
    "unmatched_pde_positions": dict(long_name="PDE atoms without a particle atom (unit vectors)", units="1"),
    "unmatched_pde_masses": dict(long_name="masses of the PDE atoms without a particle atom", units="1"),
    "unmatched_particles_positions": dict(long_name="particle atoms without a PDE atom (unit vectors)", units="1"),
    "unmatched_particles_masses": dict(long_name="masses of the particle atoms without a PDE atom", units="1"),
    "mass_near_atoms": dict(long_name="mass within the atom radius of the final atoms", units="1"),
    "effective_support": dict(long_name="measure of the smallest union of cells holding 1 - eps of the mass",
                              units="1"),
    "l2": dict(long_name="integral of rho^2 over the cells of a fixed partition", units="1"),
    "final_atom_positions": dict(long_name="atoms at the last common time (unit vectors)", units="1"),
    "final_atom_masses": dict(long_name="masses of the atoms at the last common time", units="1"),
    # /validation
    "n": dict(long_name="particle count N", units="1"),
    "seed": dict(long_name="seed of the particles' initial sample", units="1"),
    "wall": dict(long_name="wall time of the particle run", units="s"),
    "stop_reason": dict(long_name="stop reason of the particle run"),
    # /model/perceptron (w: the vector output weights of the general form, "weights" above)
    "a": dict(long_name="unit directions a_k of the perceptron", units="1"),
    "b": dict(long_name="biases b_k of the perceptron", units="1"),
    "c": dict(long_name="scalar output weights c_k of the perceptron (gradient form)", units="1"),
}


# Labelling goes through h5py's low-level API (a pure dimension, an attribute: ~15-25 us instead of
# ~60-80 us through the high-level wrappers, measured): a run labels some 30 datasets and writes some 60
# attributes once, which on a sub-second run is otherwise a visible part of the archive's cost.
_F4 = h5py.h5t.IEEE_F32LE
_STR = h5py.h5t.py_create(h5py.string_dtype("utf-8"), logical=True)
_STR_ARRAY = h5py.string_dtype("utf-8")
# the memory type of a str attribute's value (a numpy object array, converted by h5py), and the one
# scalar dataspace every attribute shares (passing both saves h5py deriving them per attribute)
_OBJECT = h5py.h5t.py_create(np.dtype(object))
_SCALAR = h5py.h5s.create(h5py.h5s.SCALAR)


def _scale(g: h5py.Group, name: str) -> h5py.h5d.DatasetID:
    """The dimension scale ``name`` of group ``g``: its dataset of that name (a coordinate variable), else a
    new pure dimension (see above)."""
    key = name.encode()
    if key in g.id:
        dsid = h5py.h5d.open(g.id, key)
        if not h5py.h5ds.is_scale(dsid):
            h5py.h5ds.set_scale(dsid, key)
            _cf(dsid, name)
        return dsid
    dsid = h5py.h5d.create(g.id, key, _F4, h5py.h5s.create_simple((0,), (h5py.h5s.UNLIMITED,)),
                           dcpl=_dcpl((1024,), False))
    h5py.h5ds.set_scale(dsid, _PURE_DIM + b"%10d" % 0)
    return dsid


def _is_dimension(ds: h5py.Dataset) -> bool:
    """A pure dimension (written for netCDF readers; holds no data)."""
    name = ds.attrs.get("NAME", b"") if h5py.h5ds.is_scale(ds.id) else b""
    return _PURE_DIM in (name.encode() if isinstance(name, str) else name)


def _data(g: h5py.Group) -> dict:
    """The datasets of ``g`` that hold data (its pure dimensions left out)."""
    return {k: v for k, v in g.items() if isinstance(v, h5py.Dataset) and not _is_dimension(v)}


@functools.lru_cache(maxsize=512)
def _dims_of(path: str, name: str, ndim: int, d: int) -> tuple:
    table = next((v for k, v in _DIMS.items() if fnmatch.fnmatchcase(path, k)), {})
    dims = next((v for k, v in table.items() if k != "*" and fnmatch.fnmatchcase(name, k)), table.get("*"))
    dims = sum(((_MODE[d] if x == "MODE" else _GRID[d] if x == "GRID" else (x,)) for x in dims or ()), ())
    if len(dims) != ndim:                   # a dataset the table does not know: named after itself
        dims = tuple(f"{name}_{i}" for i in range(ndim))
    return dims


def _label(g: h5py.Group, path: str, d: int, names) -> None:
    """Attach named dimensions (and CF attributes) to the datasets ``names`` of group ``g`` (at ``path``)
    that have none yet."""
    scales: dict = {}
    for name in names:
        try:
            dsid = h5py.h5d.open(g.id, name.encode())
        except KeyError:                            # a subgroup, or gone
            continue
        rank = dsid.rank
        if rank == 0 or h5py.h5ds.is_scale(dsid):
            continue
        dims = _dims_of(path, name, rank, d)
        if rank == 1 and dims[0] == name:                   # a coordinate variable
            h5py.h5ds.set_scale(dsid, name.encode())
            _cf(dsid, name)
            continue
        if h5py.h5ds.get_num_scales(dsid, 0):
            continue
        for axis, dim in enumerate(dims):
            if dim not in scales:
                scales[dim] = _scale(g, dim)
            h5py.h5ds.attach_scale(dsid, scales[dim], axis)
        _cf(dsid, name)
        if path == "pde" and name == "coeffs" and d == 3:
            _attr(dsid, "coordinates", "l m")


def _attr(oid, key: str, value, new: bool = False) -> None:
    """Attribute ``key`` of the object ``oid`` (a low-level id) as ``attrs[key] = value`` writes it: a str
    as a variable-length UTF-8 string, a number or bool as its numpy scalar. ``new``: the object has no
    attribute of that name yet (skips the lookup; an existing one is still replaced)."""
    if isinstance(value, str):
        tid, mtype, data = _STR, _OBJECT, np.array(value, dtype=_STR_ARRAY)
    else:
        data = np.asarray(value)
        tid = mtype = _h5type(data.dtype)
    k = key.encode()
    if new:
        try:
            h5py.h5a.create(oid, k, tid, _SCALAR).write(data, mtype=mtype)
            return
        except OSError:                     # it existed after all: replaced below (a real failure raises again)
            pass
    if h5py.h5a.exists(oid, k):
        # rewritten in place when it can be: an attribute deleted while a handle to it is still open (a
        # frame that holds h5py's, e.g. one Dask's worker profiler sampled) is what HDF5 keeps opening
        # under that name afterwards, with its old value (the restart slot: a state read back stale)
        attr = h5py.h5a.open(oid, k)
        if attr.get_space().get_simple_extent_type() == h5py.h5s.SCALAR and attr.get_type() == tid:
            attr.write(data, mtype=mtype)
            return
        del attr
        h5py.h5a.delete(oid, k)
    h5py.h5a.create(oid, k, tid, _SCALAR).write(data, mtype=mtype)


def _cf(dsid: h5py.h5d.DatasetID, name: str) -> None:
    # only ever called on a dataset that is being labelled for the first time: it has no CF attribute yet
    for k, v in _CF.get(name, {}).items():
        _attr(dsid, k, v, new=True)


def _set_attrs(obj, values: dict, new: bool = False) -> None:
    """``obj.attrs[k] = v`` for every item: a str, number or bool through :func:`_attr` (the same attribute,
    see above; ``new``: ``obj`` was just created), any other value through h5py."""
    oid = obj.id
    for k, v in values.items():
        if isinstance(v, (str, bool, int, float, np.bool_, np.integer, np.floating)):
            _attr(oid, k, v, new)
        else:
            obj.attrs[k] = v


def _delete(g: h5py.Group, name: str) -> None:
    """Delete a dataset after detaching it from its dimension scales."""
    ds = g[name]
    if isinstance(ds, h5py.Dataset) and ds.ndim and not h5py.h5ds.is_scale(ds.id):
        for axis in range(ds.ndim):
            for scale in list(ds.dims[axis].values()):
                h5py.h5ds.detach_scale(ds.id, scale.id, axis)
    del g[name]


def _along_time(ds: h5py.Dataset) -> bool:
    """Whether the first axis of ``ds`` runs along its group's snapshots (what a truncation to the last
    restart state cuts): t itself, a dataset whose first dimension is t, or one with no dimension (v1)."""
    if h5py.h5ds.is_scale(ds.id):
        return ds.name.rsplit("/", 1)[-1] == "t"
    scales = list(ds.dims[0].values()) if ds.ndim else []
    return not scales or scales[0].name.rsplit("/", 1)[-1] == "t"


def _mode_coordinates(g: h5py.Group, d: int, width: int, handles: dict | None = None) -> None:
    """Coordinates of the coefficient axis of /pde, grown to ``width``: k on S^1; l and m on S^2."""
    if d == 2:
        cols = {"k": np.arange(width)}
    else:
        from spectral.sphere import canonical_degrees, degree_of
        l, m = canonical_degrees(degree_of(width))
        cols = {"l": l, "m": m}
    for name, values in cols.items():
        ds = _dataset(g, name, handles)
        if ds is None:
            ds = _create(g, name, (0,), (4096,), np.int64)
            if handles is not None:
                handles[name] = ds
        n = ds.id.shape[0]
        if width > n:
            ds.id.set_extent((width,))
            _write_block(ds, n, values[n:width])


def _grid_coordinates(g: h5py.Group, grid: np.ndarray) -> None:
    """theta (radians) of the S^1 output grid; lat, lon (degrees) of the S^2 one."""
    grid = np.asarray(grid, dtype=float)
    if grid.ndim == 2:                                   # S^1: (M, 2)
        _put(g, "theta", np.mod(np.arctan2(grid[:, 1], grid[:, 0]), 2.0 * np.pi))
    else:                                                # S^2: (nlat, nlon, 3)
        _put(g, "lat", np.degrees(np.arcsin(np.clip(grid[:, 0, 2], -1.0, 1.0))))
        _put(g, "lon", np.mod(np.degrees(np.arctan2(grid[0, :, 1], grid[0, :, 0])), 360.0))


# --- model <-> HDF5 ---------------------------------------------------------------------------------
def write_model(f: h5py.File, model: Model) -> None:
    g, new = _subgroup(f, "model")
    _set_attrs(g, {k: getattr(model, k) for k in ("d", "beta", "flow", "attention", "strength", "noise")}, new)
    if model.perceptron is not None:
        p, new = _subgroup(g, "perceptron")
        info = model.perceptron.to_dict()
        for k in ("a", "b", "c", "w"):
            if k in info:
                _replace(p, k, info[k])
        _set_attrs(p, {"activation": info["activation"], "form": info["form"]}, new)


def read_model(f: h5py.File) -> Model:
    g = f["model"]
    a = g.attrs
    perceptron = None
    if "perceptron" in g:
        p = g["perceptron"]
        perceptron = Perceptron(p["a"][()], c=p["c"][()] if "c" in p else None, w=p["w"][()] if "w" in p else None,
                                b=p["b"][()], activation=str(p.attrs["activation"]))
    return Model(d=int(a["d"]), beta=float(a["beta"]), flow=str(a["flow"]), attention=str(a["attention"]),
                 strength=float(a["strength"]), perceptron=perceptron, noise=float(a["noise"]))


# --- the writer ------------------------------------------------------------------------------------
class _WriteBehind:
    """One background thread for the writer's batches (module docstring): at most one batch in flight;
    :meth:`wait` blocks until it is written and re-raises its exception."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future | None = None
        self._local = threading.local()

    def submit(self, job) -> None:
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnpde-archive")
        self._future = self._pool.submit(self._run, job)

    def _run(self, job) -> None:
        self._local.inside = True
        try:
            job()
        finally:
            self._local.inside = False

    def inside(self) -> bool:
        """Whether the caller is the background thread (which uses the file without waiting for itself)."""
        return getattr(self._local, "inside", False)

    def wait(self) -> None:
        fut = self._future
        if fut is None:
            return
        try:
            fut.result()
        finally:
            # a KeyboardInterrupt while waiting leaves the batch in flight: the next wait waits again
            if fut.done():
                self._future = None

    def shutdown(self) -> None:
        try:
            self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None


def _kept_after_snapshot(result) -> bool:
    """Whether ``result`` (a PDE or particle result) ended interrupted with the state of a step after its
    last snapshot (``solvers.interrupts``): that state, not the last snapshot's, is where a resume continues."""
    r = result.restart
    return (result.stop_reason == "interrupted" and r is not None and r.get("last_snapshot_t") is not None
            and r["t"] > r["last_snapshot_t"])


class ArchiveWriter:
    """Writes one run into an HDF5 archive as it goes (see the module docstring for the layout).

    Parameters
    ----------
    path : archive path
    mode : "create" (a new file; the caller decides about overwriting) or "resume" (an existing archive)
    config_text, name, command, model : written at creation
    flush_interval : seconds between batches of snapshots (0: every snapshot)
    compression : "density", "all" or "none" (module docstring)

    ``f`` is the open ``h5py.File``; using it waits for a batch being written in the background.
    """

    def __init__(self, path: str | Path, mode: str, *, config_text: str = "", name: str = "", command: str = "",
                 model: Model | None = None, flush_interval: float = 1.0, compression: str = "density") -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
        self.path = Path(path)
        self.flush_interval = float(flush_interval)
        self.compress = {"none": set(), "density": {"density"}, "all": {"density", "coeffs", "x"}}[compression]
        self._pending: dict[str, list] = {"pde": [], "particles": []}
        self._step_rows0 = 0                           # rows of /pde/steps before this run's
        self._kept_after = {"pde": False, "particles": False}   # restart state newer than the last snapshot
        self._slots_declared = False                   # format_version says restart slots (_write_restart)
        self._groups: dict[str, h5py.Group] = {}      # open groups of the per-snapshot writes
        self._handles: dict[str, dict] = {}           # per group: open dataset handles (see _dataset)
        self._labeled: set[str] = set()               # groups whose datasets have named dimensions
        self._last_flush = time.perf_counter()
        self._behind = _WriteBehind()
        if mode == "create":
            self._f = h5py.File(self.path, "w")
            _set_attrs(self.f, {"format": FORMAT, "format_version": FORMAT_VERSION,
                                "software_version": software_version(), "created": _now(), "config": config_text,
                                "command": command, "name": name, "compression": compression,
                                "libraries": libraries(), "status": "running", "updated": _now()}, new=True)
            if model is not None:
                write_model(self.f, model)
            self.labels = True
            self.resumed = False
            self.f.flush()                  # set_status("running"): its attributes are written above
        elif mode == "resume":
            self._f = _open(self.path, "r+")
            # an archive of format 1 stays as it was written (no dimensions half-way through a file)
            self.labels = int(self.f.attrs.get("format_version", 1)) >= 2
            self.resumed = True
            self.compress = {"none": set(), "density": {"density"}, "all": {"density", "coeffs", "x"}}[
                str(self.f.attrs.get("compression", "density"))]
            _set_attrs(self.f, {"resumed": int(self.f.attrs.get("resumed", 0)) + 1,
                                "command": command or str(self.f.attrs.get("command", ""))})
            self.set_status("running")
        else:
            raise ValueError(f"mode must be 'create' or 'resume', got {mode!r}")
        self._deflater = _Deflater(self.compress)
        self.d = model.d if model is not None else int(self.f["model"].attrs["d"]) if "model" in self.f else 0
        if self.labels and "model/perceptron" in self.f:
            self._label_group(self.f["model/perceptron"], "model/perceptron")

    @property
    def f(self) -> h5py.File:
        """The open file, once no batch is being written in the background (see the module docstring)."""
        if not self._behind.inside():
            self._behind.wait()
        return self._f

    def _label_group(self, g: h5py.Group, path: str) -> None:
        """Named dimensions for every dataset of group ``g`` (at ``path``): a group written whole, or the
        first batch of one that grows."""
        if self.labels and self.d:
            self._labeled.add(path)
            _label(g, path, self.d, list(g.keys()))

    def _label(self, g: h5py.Group, path: str, new=()) -> None:
        """Named dimensions for a group that grows batch by batch: all its datasets the first time, then
        those named in ``new`` (created or replaced since)."""
        if path not in self._labeled:
            self._label_group(g, path)
        elif new and self.labels and self.d:
            _label(g, path, self.d, new)

    # --- status -------------------------------------------------------------------------------------
    def set_status(self, status: str) -> None:
        _set_attrs(self.f, {"status": status, "updated": _now()})
        self.f.flush()

    def annotate(self, **attrs) -> None:
        """Attributes of the archive's root (str, numbers, bools; an existing one is rewritten in place)."""
        _set_attrs(self.f, attrs)

    def close(self) -> None:
        """Write what is buffered and close the file (which is closed even when a write fails)."""
        try:
            self._behind.shutdown()
            if self._f.id.valid:
                self.write_pending()
        finally:
            self._deflater.shutdown()
            if self._f.id.valid:
                self._f.close()

    def _due(self) -> bool:
        return time.perf_counter() - self._last_flush >= self.flush_interval

    def write_due(self) -> bool:
        """Whether the next snapshot will be written (with the batch it completes), not only buffered."""
        return self._due()

    def write_pending(self, flush: bool = True) -> None:
        """Write every buffered snapshot with its restart state, then flush the file (unless the caller
        flushes right after), in the foreground."""
        self._behind.wait()
        self._write_batch(flush)

    def _write_behind(self) -> None:
        """Hand the buffered snapshots to the background thread (``submit`` waits for the batch before)."""
        pending = self._pending
        self._pending = {"pde": [], "particles": []}
        deflated = {s: self._deflater.take(s) for s in pending}
        self._behind.submit(lambda: self._write_batch(True, pending, deflated))
        self._last_flush = time.perf_counter()

    def _write_batch(self, flush: bool, pending: dict | None = None, deflated: dict | None = None) -> None:
        """Write the snapshots of ``pending`` (default: the buffer, emptied) with their restart states and
        flush; the time of the batch is set by the caller. ``deflated``: the chunks of their rows
        compressed in advance (section -> key -> _Deflated; default: those of the buffer)."""
        if pending is None:
            pending, self._pending = self._pending, {"pde": [], "particles": []}
            deflated = {s: self._deflater.take(s) for s in pending}
        deflated = deflated or {}
        wrote = False
        if pending["pde"]:
            self._write_pde(pending["pde"], deflated.get("pde", {}))
            wrote = True
        if pending["particles"]:
            self._write_particles(pending["particles"], deflated.get("particles", {}))
            wrote = True
        if wrote:
            _set_attrs(self.f, {"updated": _now()})
            if flush:
                self.f.flush()
        self._last_flush = time.perf_counter()

    def __enter__(self) -> "ArchiveWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- PDE ------------------------------------------------------------------------------------------
    def pde_begin(self, grid: np.ndarray, options: dict, initial: str) -> None:
        self._begin_stage("pde", "grid", grid, options, initial)
        self._step_rows0 = 0

    def _begin_stage(self, name: str, key: str, data: np.ndarray, options: dict, initial: str) -> None:
        """Open the group of a stage: its fixed dataset ``key`` (written once), settings, initial data."""
        g, new = _subgroup(self.f, name)
        self._deflater.start(name, None if new else g, g["t"].shape[0] if not new and _has(g, "t") else 0)
        if new or not _has(g, key):
            _put(g, key, np.asarray(data))
            if name == "pde" and self.labels:
                _grid_coordinates(g, data)
        attrs = {"options": _json(options), "initial": initial, "complete": False}
        if new or "stop_reason" not in g.attrs:
            attrs["stop_reason"] = ""
        _set_attrs(g, attrs, new)
        # no flush here: the stage's first batch flushes (with a restart state: before it, a resume starts
        # the stage afresh, whether or not this group reached the disk)

    def pde_snapshot(self, snap: dict) -> None:
        """Buffer one snapshot (the dict a solve_pde callback receives); write the batch when due."""
        self._buffer("pde", snap)
        if self._due():
            self._write_behind()

    def pde_checkpoint(self, cp: dict) -> None:
        """Write the state a run kept between snapshots (``PDERun.run``'s checkpoint: {"restart", "steps"})
        as its restart state, after the snapshots buffered before it and with the steps since; flush."""
        def write() -> None:
            g, h = self._group("pde")
            step_rows = self._write_steps({k: cp["steps"][k] for k in STEP_KEYS})
            self._write_pde_restart(g, h, dict(cp["restart"]), step_rows, [], 0)
        self._checkpoint("pde", write)

    def particles_checkpoint(self, cp: dict) -> None:
        """Write the state a particle run kept between snapshots as its restart state (after the snapshots
        buffered before it); flush."""
        self._checkpoint("particles", lambda: self._write_particles_restart(self.f["particles"], dict(cp["restart"])))

    def _checkpoint(self, section: str, write: Callable[[], None]) -> None:
        """The pending snapshots, then ``write()`` (a restart state newer than the last snapshot); flush."""
        self.write_pending(flush=False)
        write()
        self._kept_after[section] = True
        self.f.flush()
        self._last_flush = time.perf_counter()

    def _buffer(self, section: str, snap: dict) -> None:
        pending = self._pending[section]
        if pending:
            # a batch writes the restart state of its last snapshot only: the one before lets go of its own
            # (a copy of the state each, which a run of many snapshots would otherwise hold until the batch)
            pending[-1] = {k: v for k, v in pending[-1].items() if k != "restart"}
        pending.append(snap)
        self._deflater.add(section, snap, len(pending) - 1)

    def _group(self, path: str) -> tuple[h5py.Group, dict]:
        """An open group of the per-snapshot writes, and its dict of open dataset handles."""
        g = self._groups.get(path)
        if g is None or not g.id.valid:
            parent, _, name = path.rpartition("/")
            g = self._groups[path] = _subgroup(self._group(parent)[0] if parent else self.f, name)[0]
            self._handles[path] = {}
        return g, self._handles[path]

    def _write_pde(self, snaps: list[dict], deflated: dict) -> None:
        g, h = self._group("pde")
        t = _append_rows(g, "t", [s["t"] for s in snaps], dtype=float, handles=h)
        coeffs = _append_rows(g, "coeffs", [s["coeffs"] for s in snaps], compress="coeffs" in self.compress,
                              dtype=complex, grow=True, handles=h)
        if self.labels:
            _mode_coordinates(g, self.d, coeffs.id.shape[1], h)
        _append_rows(g, "degree", [s["degree"] for s in snaps], dtype=np.int64, handles=h)
        _append_rows(g, "density", [s["density"] for s in snaps], compress="density" in self.compress, dtype=float,
                     handles=h, deflated=deflated.get("density"))
        for k in PDE_SERIES:
            _append_rows(g, k, [s[k] for s in snaps], dtype=float, handles=h)
        # one array from the snapshots' lists of steps (an array per snapshot costs 3x more, measured)
        step_rows = self._write_steps({k: [v for s in snaps for v in s.get("steps", {}).get(k, ())]
                                       for k in STEP_KEYS})
        lag = [(i, s) for i, s in enumerate(snaps) if s.get("nodes") is not None]
        self._write_pde_restart(g, h, dict(snaps[-1]["restart"]), step_rows, lag, t.id.shape[0] - len(snaps))
        self._kept_after["pde"] = False

    def _write_steps(self, columns: dict) -> int:
        """Append the attempted steps (STEP_KEYS -> iterable of values) to /pde/steps; returns its rows."""
        st, sh = self._group("pde/steps")
        step_rows = 0
        for k, dt in zip(STEP_KEYS, (float, float, float, bool)):
            ds = _extend(st, k, np.fromiter(columns[k], dtype=dt), dtype=dt, handles=sh)
            if k == "t":
                step_rows = ds.id.shape[0]
        self._label(st, "pde/steps")
        return step_rows

    def _write_pde_restart(self, g: h5py.Group, h: dict, restart: dict, step_rows: int, lag: list,
                           first_row: int) -> None:
        """The restart state (a snapshot's, or the one an interruption kept after it) with the rows it
        continues after: the snapshots, ``step_rows`` steps, the node measures (``lag``: the Lagrangian
        snapshots just appended, the first at row ``first_row``); its refinements and grids."""
        # the state keeps its refinements and grids (JSON, written with it at once); /pde's datasets show them
        restart["refinements"] = [list(map(float, r)) for r in restart.get("refinements", [])]
        restart["grids"] = [list(map(int, r)) for r in restart.get("grids", [])]
        refinements = np.array(restart["refinements"], dtype=float).reshape(-1, 3)
        new = []
        if _rewrite(g, "refinements", refinements, h):
            new.append("refinements")
        grids = np.array(restart["grids"], dtype=np.int64)
        if grids.size and _rewrite(g, "grids", grids, h):
            new.append("grids")
        if lag:
            restart.update(self._write_nodes(g, first_row, lag, restart))
        elif _has(g, "lagrangian"):
            restart.update(lag_rows=int(g["lagrangian/t"].shape[0]), lag_points=int(g["lagrangian/w"].shape[0]))
        restart["snapshots"] = _dataset(g, "t", h).id.shape[0]
        restart["step_rows"] = step_rows
        self._label(g, "pde", new)
        self._write_restart("pde", restart)

    def _write_restart(self, section: str, restart: dict) -> None:
        """Write a restart state into /<section>/restart so that a kill at any moment leaves a whole one.

        Every array of the state is a dataset (the coefficients; after the handoff also the nodes and the
        handoff state; the particles), the rest JSON in the attribute ``state``. The arrays go into the one
        of the two slots ``restart/a``, ``restart/b`` that the current state does not use, and the state,
        naming its slot, is written last: a process killed before that (kill -9 inside the write, before
        or during the flush of its arrays) leaves the previous state and its slot untouched, where one
        set of datasets rewritten in place could be left holding the new state's arrays under the old
        state's scalars (a resume to other numbers, seen)."""
        if self.labels and not self._slots_declared:
            # a version-2 archive being resumed: from now on only a reader that knows the slots reads it
            if int(self.f.attrs.get("format_version", 1)) < FORMAT_VERSION:
                _set_attrs(self.f, {"format_version": FORMAT_VERSION})
            self._slots_declared = True
        r, _ = self._group(f"{section}/restart")
        previous = json.loads(r.attrs["state"]) if "state" in r.attrs else {}
        slot = "b" if previous.get("slot") == "a" else "a"
        sg, sh = self._group(f"{section}/restart/{slot}")
        arrays = {k: np.asarray(v) for k, v in restart.items() if isinstance(v, np.ndarray) and v.ndim >= 1}
        scalars = {k: v for k, v in restart.items() if k not in arrays}
        replaced = []
        for k in [k for k in _data(sg) if k not in arrays]:      # arrays of an earlier phase
            sh.pop(k, None)
            _delete(sg, k)
            replaced.append(k)
        for k, v in arrays.items():
            ds = _dataset(sg, k, sh)
            if ds is None or ds.dtype != v.dtype or ds.ndim != v.ndim:
                if ds is not None:
                    sh.pop(k, None)
                    _delete(sg, k)
                replaced.append(k)
                sh[k] = sg.create_dataset(k, data=v, maxshape=(None,) * v.ndim, chunks=True)
            else:
                ds.id.set_extent(v.shape)
                _write_block(ds, 0, v)
        self._label(sg, f"{section}/restart/{slot}", replaced)
        _set_attrs(r, {"state": _json({**scalars, "slot": slot})})
        for k in _data(r):                   # an archive written before the slots: its arrays are now stale
            self._handles.get(f"{section}/restart", {}).pop(k, None)
            _delete(r, k)

    def _write_nodes(self, g: h5py.Group, first_row: int, lag: list, restart: dict) -> dict:
        """Append the node measures of Lagrangian snapshots to /pde/lagrangian (ragged, as CF's contiguous
        ragged arrays: per snapshot its row in /pde, its time, node count and max drift; the nodes of all
        snapshots one after another in x, w, count), with the handoff record and the merges. Returns the
        row counts that the restart state remembers (rows written after them are dropped on resume)."""
        lg, lh = self._group("pde/lagrangian")
        _set_attrs(lg, {"handoff": _json(restart["handoff"])})
        merges = np.array(restart.get("merges", []), dtype=float).reshape(-1, 3)
        new = []
        if _rewrite(lg, "merges", merges, lh):
            new.append("merges")
        nodes = [s["nodes"] for _, s in lag]
        _extend(lg, "t", [s["t"] for _, s in lag], dtype=float, handles=lh)
        _extend(lg, "snapshot", [first_row + i for i, _ in lag], dtype=np.int64, handles=lh)
        _extend(lg, "node_count", [len(n["w"]) for n in nodes], dtype=np.int64, handles=lh)
        _extend(lg, "max_drift", [n["max_drift"] for n in nodes], dtype=float, handles=lh)
        _extend_block(lg, "x", np.concatenate([n["x"] for n in nodes]), handles=lh)
        _extend_block(lg, "w", np.concatenate([n["w"] for n in nodes]), handles=lh)
        _extend_block(lg, "count", np.concatenate([n["count"] for n in nodes]).astype(np.int64), handles=lh)
        self._label(lg, "pde/lagrangian", new)
        return {"lag_rows": int(lg["t"].shape[0]), "lag_points": int(lg["w"].shape[0])}


    def _finish_restart(self, section: str, result, write: Callable[[dict], None]) -> None:
        """The restart state a stage ends with: ``write(result.restart)`` when it is the state of the step an
        interruption stopped after, or when a checkpoint wrote a newer one than the last snapshot's of a
        complete stage (that one again, as a run without checkpoints leaves); a complete stage's in slot a."""
        complete = result.stop_reason != "interrupted"
        if _kept_after_snapshot(result) or (complete and self._kept_after[section] and result.restart is not None):
            write(dict(result.restart))
        self._kept_after[section] = False
        if complete:
            self._settle_restart(section)

    def _settle_restart(self, section: str) -> None:
        """A complete stage keeps its restart state in slot a only, whatever the number of states written
        before (which the wall clock decides: batches, checkpoints), so that its archive does not depend on
        timing: a state in slot b is written again into a (the usual order: a, then the attribute), then b
        goes."""
        g = self.f[section]
        if "restart" not in g or "state" not in g["restart"].attrs:
            return
        r = g["restart"]
        if json.loads(r.attrs["state"]).get("slot") == "b":
            self._write_restart(section, read_restart(g, with_rows=False))
        if "b" in r:
            path = f"{section}/restart/b"
            self._groups.pop(path, None)
            self._handles.pop(path, None)
            self._labeled.discard(path)
            del r["b"]

    def _finish_stage(self, name: str, result) -> "h5py.Group":
        """Write what is pending, then how the stage ended: its stop reason and message, the time and steps
        it reached, and the wall time added to that of the runs it resumed (the caller flushes)."""
        self.write_pending(flush=False)
        g = self.f[name]
        _set_attrs(g, {"stop_reason": result.stop_reason, "message": result.message, "t_stop": result.t_stop,
                       "nsteps": result.nsteps, "nrejected": result.nrejected,
                       "wall_time": float(g.attrs.get("wall_time", 0.0)) + float(result.wall_time),
                       "complete": result.stop_reason != "interrupted"})
        return g

    def pde_finish(self, result) -> None:
        """Record how the PDE run ended, and its atoms; for a run an interruption stopped between
        snapshots, the state it kept there (with the steps since its last snapshot)."""
        g = self._finish_stage("pde", result)
        sent = (g["steps/t"].shape[0] if "steps" in g else 0) - self._step_rows0    # this run's steps written
        if len(result.steps["t"]) > sent:
            # the steps after the last snapshot or checkpoint (a stop without a snapshot: max_steps, ...)
            self._write_steps({k: result.steps[k][sent:] for k in STEP_KEYS})
        self._finish_restart("pde", result, lambda r: self._write_pde_restart(
            g, self._group("pde")[1], r, self._step_rows0 + r["step_log"], [], 0))
        if result.lagrangian is not None:
            # the node steps of the whole run (the restart state holds those of its last snapshot)
            _set_attrs(g, {"node_nsteps": int(result.lagrangian["node_nsteps"]),
                           "node_nrejected": int(result.lagrangian["node_nrejected"])})
        check = (result.lagrangian or {}).get("check")
        if check is not None:
            c = g.require_group("lagrangian").require_group("check")
            for k in ("x", "w", "count"):
                _replace(c, k, np.asarray(check[k]))
            self._label_group(c, "pde/lagrangian/check")
            _set_attrs(c, {k: check[k] for k in ("t", "initial_nodes", "nsteps", "stop_reason", "wall_time")})
        self._write_terminal(g, result)
        cut_check = bool((result.lagrangian or {}).get("check_interrupted"))
        if (result.stop_reason != "interrupted" or cut_check) and _has(g, "t") and g["t"].shape[0]:
            # a resumed result holds only what came after its restart: its atoms come from the whole
            # archived run, read back; a run written from its start has them in memory
            whole = result if not self.resumed and len(result.t) == g["t"].shape[0] else _read_pde(g, read_model(self.f))
            # the rerun cut: the solution's atoms, without error bars until a resume runs the rerun again
            self.write_atoms("pde", whole.atoms(), **({"error_estimate": "interrupted"} if cut_check else {}))
        self.f.flush()

    def _write_terminal(self, g: h5py.Group, result) -> None:
        """/pde/terminal (the certified state) and /pde/plateaus (a ragged table: natoms per plateau, their
        atoms one plateau after another), each replaced whole."""
        for name in ("terminal", "plateaus"):
            if name in g:
                del g[name]
        term = getattr(result, "terminal", None)
        if term is not None:
            t = g.create_group("terminal")
            ev = np.asarray(term.eigenvalues)
            arrays = {"positions": term.positions, "masses": term.masses, "counts": term.counts,
                      "extents": term.extents, "displacement": term.displacement, "eigenvalues": ev.real,
                      "mass_errors": term.mass_errors, "position_errors": term.position_errors}
            if np.iscomplexobj(ev):
                arrays["eigenvalues_imag"] = ev.imag
            for k, v in arrays.items():
                if v is not None:
                    t.create_dataset(k, data=np.asarray(v))
            self._label_group(t, "pde/terminal")
            _set_attrs(t, {"t": term.t, "max_speed": term.max_speed, "stable": bool(term.stable),
                           "verdict": term.verdict, "growth": term.growth, "neutral": int(term.neutral),
                           "energy": term.energy, "check_nodes": -1 if term.check_nodes is None else term.check_nodes,
                           "dust_unstable": int(term.dust_unstable)})
        plateaus = getattr(result, "plateaus", None) or []
        if plateaus:
            p = g.create_group("plateaus")
            for k in ("t_entered", "t_certified", "energy", "growth", "kick"):
                p.create_dataset(k, data=np.array([getattr(q, k) for q in plateaus], dtype=float))
            p.create_dataset("atom", data=np.array([q.atom for q in plateaus], dtype=np.int64))
            p.create_dataset("part", data=np.array([q.part for q in plateaus], dtype=object), dtype=_STR_ARRAY)
            p.create_dataset("natoms", data=np.array([len(q.masses) for q in plateaus], dtype=np.int64))
            for k in ("positions", "masses", "direction"):
                p.create_dataset(k, data=np.concatenate([np.asarray(getattr(q, k)) for q in plateaus]))
            self._label_group(p, "pde/plateaus")

    # --- particles ----------------------------------------------------------------------------------
    def particles_begin(self, w: np.ndarray, settings: dict, initial: str) -> None:
        """Open /particles: the weights and the run's settings (``simulate_particles`` arguments: n, init,
        seed, integrator, dt, t_final, save_every, stop, and the options)."""
        self._begin_stage("particles", "w", np.asarray(w, dtype=float), settings, initial)

    def particles_snapshot(self, snap: dict) -> None:
        """Buffer one particle snapshot; write the batch when due."""
        self._buffer("particles", snap)
        if self._due():
            self._write_behind()

    def _write_particles(self, snaps: list[dict], deflated: dict) -> None:
        g = self.f["particles"]
        before = g["t"].shape[0] if _has(g, "t") else 0
        _append_rows(g, "t", [s["t"] for s in snaps], dtype=float)
        _append_rows(g, "x", [s["x"] for s in snaps], compress="x" in self.compress, dtype=float,
                     deflated=deflated.get("x"))
        for k in PARTICLE_SERIES:
            # a series this version records and the archive's earlier rows (a resumed older archive) do not:
            # NaN for those rows, so that every series keeps the rows of t
            head = [np.nan] * before if before and not _has(g, k) else []
            _append_rows(g, k, head + [s.get(k, np.nan) for s in snaps], dtype=float)
        _append_rows(g, "n_clusters", [s.get("cluster_count", -1) for s in snaps], dtype=np.int64)
        self._write_particles_restart(g, dict(snaps[-1]["restart"]))
        self._kept_after["particles"] = False

    def _write_particles_restart(self, g: h5py.Group, restart: dict) -> None:
        """The restart state (a snapshot's, or the one an interruption kept after it), after the snapshots
        written so far."""
        self._label(g, "particles")
        self._write_restart("particles", {**restart, "snapshots": g["t"].shape[0]})

    def particles_finish(self, result) -> None:
        """Record how the particle run ended, and its clusters at the end (the stopping rule's scale and
        rule; scale 0.5 and single linkage without one); for a run an interruption stopped between
        snapshots, the state it kept there."""
        g = self._finish_stage("particles", result)
        self._finish_restart("particles", result, lambda r: self._write_particles_restart(g, r))
        over = getattr(result, "beyond_stability", None)
        _set_attrs(g, {"sum_method": result.sum_method, "beyond_stability": math.nan if over is None else float(over)})
        if result.stop_reason != "interrupted" and len(result.t):
            scale, rule = result.cluster_rule
            centres, masses = result.clusters(-1, scale=scale, rule=rule)
            self.write_atoms("particles", centres, masses, scale=scale, rule=rule)
        self.f.flush()

    # --- shared -------------------------------------------------------------------------------------
    def write_atoms(self, which: str, atoms, masses: np.ndarray | None = None, **attrs) -> None:
        """/atoms/<which>: ``atoms`` an Atoms (a NodeAtoms adds counts, errors and the diffuse mass), or
        positions with ``masses``."""
        from ..lagrangian import NodeAtoms
        parent = _subgroup(self.f, "atoms")[0]
        if _has(parent, which):               # rewritten whole (a resumed run's atoms replace the old ones)
            del parent[which]
        g = _subgroup(parent, which)[0]
        positions = atoms.positions if masses is None else atoms
        masses = atoms.masses if masses is None else masses
        _put(g, "positions", np.asarray(positions, dtype=float))
        _put(g, "masses", np.asarray(masses, dtype=float))
        if isinstance(atoms, NodeAtoms):
            attrs.update(kind="node groups", diffuse=atoms.diffuse, radius=atoms.radius, dust=atoms.dust,
                         dust_groups=atoms.dust_groups)
            _put(g, "counts", atoms.counts)
            _put(g, "extents", atoms.extents)
            if atoms.mass_errors is not None:
                _put(g, "mass_errors", atoms.mass_errors)
                _put(g, "position_errors", atoms.position_errors)
                attrs.update(diffuse_error=atoms.diffuse_error, check_nodes=atoms.check_nodes)
        _set_attrs(g, attrs, new=True)
        self._label_group(g, f"atoms/{which}")

    def truncate_to_restart(self, section: str) -> dict | None:
        """Drop rows written after the last complete restart state; return that state (None if none)."""
        if section not in self.f or "restart" not in self.f[section]:
            return None
        g = self.f[section]
        r = g["restart"]
        state = json.loads(r.attrs["state"])
        n = int(state["snapshots"])
        names = [k for k, v in _data(g).items() if v.maxshape and v.maxshape[0] is None and _along_time(v)]
        _truncate(g, n, names)
        if "steps" in g and "step_rows" in state:
            _truncate(g["steps"], int(state["step_rows"]), list(_data(g["steps"])))
        if "lagrangian" in g:
            lg = g["lagrangian"]
            if "lag_rows" not in state:          # the handoff came after the last complete restart state
                del g["lagrangian"]
            else:
                _truncate(lg, int(state["lag_rows"]), ("t", "snapshot", "node_count", "max_drift"))
                _truncate(lg, int(state["lag_points"]), ("x", "w", "count"))
                if "check" in lg:
                    del lg["check"]
        self._groups.clear()
        self._handles.clear()
        self._labeled.clear()
        self._deflater.start(section, g, g["t"].shape[0] if "t" in g else 0)
        if section == "pde":
            self._step_rows0 = int(state.get("step_rows", 0))
        self.f.flush()
        return read_restart(g)


def write_comparison(writer: ArchiveWriter, cmp, d: int) -> None:
    """/comparison: the distances against its time axis, the matched atoms, the options, and each solver's
    concentration (``Comparison.concentration``) in concentration_<kind>/."""
    if "comparison" in writer.f:                   # a new comparison replaces the old one whole
        del writer.f["comparison"]
    g = writer.f.create_group("comparison")
    _replace(g, "t", cmp.t)
    for name in ("w1", "mmd", "moment_gap", "energy_gap", "cdf_drift"):
        v = getattr(cmp, name)
        if v is not None:
            _replace(g, name, v)
    pairs = cmp.matched_atoms
    _replace(g, "matched_pde_positions", np.array([p["pde_position"] for p in pairs]).reshape(-1, d))
    _replace(g, "matched_particle_positions", np.array([p["particle_position"] for p in pairs]).reshape(-1, d))
    for key in ("position_error", "pde_mass", "particle_mass"):
        _replace(g, f"matched_{key}", np.array([p[key] for p in pairs], dtype=float))
    for which in ("pde", "particles"):
        un = getattr(cmp, f"unmatched_{which}")
        _replace(g, f"unmatched_{which}_positions", np.array([a[0] for a in un]).reshape(-1, d))
        _replace(g, f"unmatched_{which}_masses", np.array([a[1] for a in un], dtype=float))
    _set_attrs(g, {"kernel": cmp.kernel, "moments_degree": cmp.moments_degree,
                   "unmatched_pde": len(cmp.unmatched_pde), "unmatched_particles": len(cmp.unmatched_particles),
                   **{f"option_{k}": v for k, v in cmp.options.items()}})
    for kind, con in cmp.concentration.items():
        cg = g.require_group(f"concentration_{kind}")
        for k in ("t", "mass_near_atoms", "effective_support", "l2", "final_positions", "final_masses"):
            _replace(cg, {"final_positions": "final_atom_positions", "final_masses": "final_atom_masses"}.get(k, k),
                     np.asarray(con[k]))
        _set_attrs(cg, {k: con[k] for k in ("radius", "eps", "cells", "statement")})
        writer._label_group(cg, f"comparison/concentration_{kind}")
    writer._label_group(g, "comparison")
    writer.f.flush()


def read_comparison(g: h5py.Group):
    """The :class:`~solvers.comparison.Comparison` that :func:`write_comparison` wrote to ``g``."""
    from ..comparison import Comparison

    get = lambda k: g[k][()] if k in g else None                          # noqa: E731
    n = len(get("matched_position_error") if "matched_position_error" in g else [])
    pairs = []
    for i in range(n):
        a, b = float(g["matched_pde_mass"][i]), float(g["matched_particle_mass"][i])
        pairs.append({"pde_position": g["matched_pde_positions"][i], "particle_position": g["matched_particle_positions"][i],
                      "position_error": float(g["matched_position_error"][i]), "pde_mass": a, "particle_mass": b,
                      "mass_difference": b - a})
    unmatched = {}
    for which in ("pde", "particles"):
        if f"unmatched_{which}_masses" in g:
            unmatched[which] = [(p, float(m)) for p, m in zip(g[f"unmatched_{which}_positions"][()],
                                                              g[f"unmatched_{which}_masses"][()])]
        else:                      # written before the unmatched atoms were kept: their count only
            unmatched[which] = [(None, float("nan"))] * int(g.attrs.get(f"unmatched_{which}", 0))
    conc = {}
    for kind in ("pde", "particles"):
        if f"concentration_{kind}" in g:
            cg = g[f"concentration_{kind}"]
            con = {k: cg[k][()] for k in ("t", "mass_near_atoms", "effective_support", "l2") if k in cg}
            con["final_positions"] = cg["final_atom_positions"][()] if "final_atom_positions" in cg else None
            con["final_masses"] = cg["final_atom_masses"][()] if "final_atom_masses" in cg else None
            con.update({k: (v.item() if isinstance(v, np.generic) else v) for k, v in cg.attrs.items()})
            conc[kind] = con
    options = {k[len("option_"):]: (v.item() if isinstance(v, np.generic) else v)
               for k, v in g.attrs.items() if k.startswith("option_")}
    return Comparison(t=get("t"), w1=get("w1"), mmd=get("mmd"), moment_gap=get("moment_gap"),
                      energy_gap=get("energy_gap"), cdf_drift=get("cdf_drift"), matched_atoms=pairs,
                      unmatched_pde=unmatched["pde"], unmatched_particles=unmatched["particles"],
                      kernel=str(g.attrs.get("kernel", "")), moments_degree=int(g.attrs.get("moments_degree", 0)),
                      options=options, concentration=conc)


def write_validation(writer: ArchiveWriter, res, results: list[dict], compare_opts: dict, pde) -> None:
    """/validation: the distances (N, seed, t) of a validation study, its wall times and stop reasons,
    the fitted slopes, the comparison options and the PDE's end."""
    if "validation" in writer.f:
        del writer.f["validation"]
    g = writer.f.create_group("validation")
    _replace(g, "n", np.asarray(res.n))
    _replace(g, "seed", np.asarray(res.seeds))
    _replace(g, "t", res.t)
    for k, v in res.distances.items():
        _replace(g, k, v)
    by = {(r["n"], r["seed"]): r for r in results}
    _replace(g, "wall", np.array([[by[(n, s)]["wall"] for s in res.seeds] for n in res.n]))
    _replace(g, "stop_reason", np.array([[by[(n, s)]["stop_reason"] for s in res.seeds] for n in res.n], dtype="S16"))
    _set_attrs(g, {"at": res.at, "slopes": json.dumps(res.slopes), "compare": json.dumps(compare_opts),
                   "table": res.table, "pde_stop_reason": pde.stop_reason, "pde_t_stop": float(pde.t_stop)})
    writer._label_group(g, "validation")


def read_validation(g: h5py.Group, path: Path | None = None):
    """The :class:`~solvers.comparison.ValidationResult` that :func:`write_validation` wrote to ``g``."""
    from ..comparison import METRICS, ValidationResult

    dist = {k: g[k][()] for k in METRICS if k in g}
    return ValidationResult(n=g["n"][()], seeds=g["seed"][()], t=g["t"][()], distances=dist,
                            at=float(g.attrs["at"]), slopes=json.loads(g.attrs["slopes"]),
                            table=str(g.attrs["table"]), path=path)


def read_restart(g: h5py.Group, with_rows: bool = True) -> dict:
    """The restart state of a section (its last snapshot's, a checkpoint's or an interruption's): the
    attribute ``state`` and the arrays of the slot it names (archives before the slots: of the group).
    ``with_rows``: refinements and grids as tuples, from the group's datasets in archives before the slots
    (False: the state as written)."""
    r = g["restart"]
    out: dict[str, Any] = json.loads(r.attrs["state"])
    slot = out.pop("slot", None)
    for k, v in _data(r[slot] if slot else r).items():
        out[k] = v[()]
    if not with_rows:
        return out
    for key, cast in (("refinements", float), ("grids", int)):
        rows = out[key] if key in out else g[key][()] if key in g else None     # JSON since the slots
        if rows is not None:
            out[key] = [tuple(cast(v) for v in row) for row in rows]
    return out


# --- reading ------------------------------------------------------------------------------------------
def _open(path: str | Path, mode: str = "r") -> h5py.File:
    p = Path(path)
    if not p.exists():
        raise ArchiveError(f"{p}: no such file")
    if p.is_dir():
        members = sorted(q.name for q in p.glob("*.h5"))
        raise ArchiveError(f"{p}: a directory, not an archive" + (
            f" (a sweep's folder: its summary.json has the table; each member is an archive, e.g. "
            f"{p / members[0]})" if (p / "summary.json").exists() and members else
            f" (it holds {len(members)} archive(s), e.g. {p / members[0]})" if members else ""))
    try:
        f = h5py.File(p, mode)
    except OSError as e:
        # HDF5's message can span lines (its error stack): the one line a command prints keeps it whole
        raise ArchiveError(f"{p}: not a readable HDF5 file ({' '.join(str(e).split())})") from None
    fmt = f.attrs.get("format")
    if fmt != FORMAT:
        f.close()
        raise ArchiveError(f"{p}: not an attnpde archive (format attribute {fmt!r}, expected {FORMAT!r})")
    version = int(f.attrs.get("format_version", -1))
    if version > FORMAT_VERSION:
        f.close()
        raise ArchiveError(f"{p}: archive format version {version} is newer than this software reads "
                           f"({FORMAT_VERSION}); upgrade attnpde")
    if "model" not in f:
        f.close()
        raise ArchiveError(f"{p}: damaged archive: no /model group")
    return f


def open_archive(path: str | Path, mode: str = "r") -> h5py.File:
    """Open an attnpde archive as an h5py.File after checking its format (ArchiveError otherwise)."""
    return _open(path, mode)


def _read_pde(g: h5py.Group, model: Model):
    from ..pde import PDEResult
    a = g.attrs
    T = g["t"].shape[0] if "t" in g else 0
    get = lambda k: g[k][:T] if k in g else np.zeros(0)
    steps = {k: v[()] for k, v in _data(g["steps"]).items()} if "steps" in g else {}
    restart = read_restart(g) if "restart" in g and "state" in g["restart"].attrs else None
    nodes, lagrangian = _read_nodes(g, T, restart)
    terminal, plateaus = _read_terminal(g)
    return PDEResult(
        nodes=nodes, lagrangian=lagrangian, terminal=terminal, plateaus=plateaus,
        model=model, t=get("t"), coeffs=get("coeffs"), degree=get("degree"), grid=g["grid"][()] if "grid" in g else None,
        density=get("density"), energy=get("energy"), mass=get("mass"), min_density=get("min_density"),
        tail=get("tail"), dissipation=get("dissipation"), steps=steps,
        refinements=[tuple(r) for r in g["refinements"][()]] if "refinements" in g else [],
        grids=[tuple(int(v) for v in r) for r in g["grids"][()]] if "grids" in g else [],
        stop_reason=str(a.get("stop_reason", "")) or "killed", message=str(a.get("message", "no end recorded")),
        t_stop=float(a.get("t_stop", g["t"][T - 1] if T else 0.0)), nsteps=int(a.get("nsteps", restart["nsteps"] if restart else 0)),
        nrejected=int(a.get("nrejected", restart["nrejected"] if restart else 0)),
        options=json.loads(a.get("options", "{}")), initial=str(a.get("initial", "")),
        wall_time=float(a.get("wall_time", 0.0)), restart=restart)


def _read_terminal(g: h5py.Group) -> tuple:
    """The certified terminal state and the plateaus of /pde (None and [] when absent)."""
    from ..terminal import Plateau, TerminalState
    terminal = None
    if "terminal" in g:
        t = g["terminal"]
        get = lambda k: t[k][()] if k in t else None  # noqa: E731
        ev = get("eigenvalues")
        if "eigenvalues_imag" in t:
            ev = ev + 1j * get("eigenvalues_imag")
        a = t.attrs
        terminal = TerminalState(float(a["t"]), get("positions"), get("masses"), get("counts"), get("extents"),
                                 get("displacement"), float(a["max_speed"]), bool(a["stable"]), str(a["verdict"]),
                                 float(a["growth"]), ev, int(a["neutral"]), float(a["energy"]), get("mass_errors"),
                                 get("position_errors"), None if int(a["check_nodes"]) < 0 else int(a["check_nodes"]),
                                 int(a.get("dust_unstable", 0)))
    plateaus = []
    if "plateaus" in g:
        p = g["plateaus"]
        n = p["natoms"][()]
        ends = np.concatenate([[0], np.cumsum(n)])
        part = [v.decode() if isinstance(v, bytes) else str(v) for v in p["part"][()]]
        for i in range(len(n)):
            sl = slice(int(ends[i]), int(ends[i + 1]))
            plateaus.append(Plateau(float(p["t_entered"][i]), float(p["t_certified"][i]), float(p["energy"][i]),
                                    float(p["growth"][i]), part[i], int(p["atom"][i]), p["direction"][sl],
                                    float(p["kick"][i]), p["positions"][sl], p["masses"][sl]))
    return terminal, plateaus


def _read_nodes(g: h5py.Group, T: int, restart: dict | None) -> tuple[list, dict | None]:
    """Per snapshot the node measure (None for Eulerian ones), and the Lagrangian record, of /pde
    (``restart``: its restart state, which holds that record for a run stopped in the node phase before
    its first node snapshot)."""
    state = restart or {}
    steps = {k: int(g.attrs.get(k, state.get(k, 0))) for k in ("node_nsteps", "node_nrejected")}
    log = state.get("diffuse_log") or []
    if len(log) == 2 and log[1][0] > log[0][0]:
        steps["diffuse_rate"] = (float(log[1][1]), (float(log[0][1]) - float(log[1][1])) / (log[1][0] - log[0][0]))
    if "lagrangian" not in g or "t" not in g["lagrangian"]:
        if state.get("phase") != "lagrangian" or not state.get("handoff"):
            return [None] * T, None
        return [None] * T, {"handoff": state["handoff"], "check": None,
                            "merges": np.array(state.get("merges", []), dtype=float).reshape(-1, 3), **steps}
    lg = g["lagrangian"]
    nodes: list = [None] * T
    rows, counts, drift = lg["snapshot"][()], lg["node_count"][()], lg["max_drift"][()]
    x, w, count = lg["x"][()], lg["w"][()], lg["count"][()]
    start = 0
    for row, n, dmax in zip(rows, counts, drift):
        if row < T:
            nodes[int(row)] = {"x": x[start:start + n], "w": w[start:start + n], "count": count[start:start + n],
                               "max_drift": float(dmax)}
        start += int(n)
    check = None
    if "check" in lg:
        c = lg["check"]
        check = {k: c[k][()] for k in ("x", "w", "count")}
        check.update({k: (v.item() if isinstance(v, np.generic) else v) for k, v in c.attrs.items()})
    lag = {"handoff": json.loads(lg.attrs["handoff"]), "merges": lg["merges"][()] if "merges" in lg else np.zeros((0, 3)),
           "check": check, **steps}
    return nodes, lag


def _read_particles(g: h5py.Group, model: Model):
    from ..particles import STABILITY_BOUND, ParticleOptions, ParticleResult
    a = g.attrs
    T = g["t"].shape[0]
    restart = read_restart(g) if "restart" in g and "state" in g["restart"].attrs else None
    settings = json.loads(a.get("options", "{}"))
    get = lambda k: g[k][:T] if k in g else np.full(T, np.nan)
    option_names = {f.name for f in fields(ParticleOptions)}
    # the fixed steps' stiffness: absent before it was recorded; the first step beyond the bound as the run
    # recorded it at its end, else (a run still going, killed) the first snapshot whose steps went beyond
    q = g["step_stiffness"][:T] if "step_stiffness" in g else None
    bound = STABILITY_BOUND.get(str(settings.get("integrator", "rk4")))
    over = float(a["beyond_stability"]) if "beyond_stability" in a else math.nan
    if math.isnan(over) and "beyond_stability" not in a and q is not None and bound is not None:
        hit = np.flatnonzero(q > bound)
        over = float(g["t"][hit[0]]) if hit.size else math.nan
    over = None if math.isnan(over) else over
    return ParticleResult(
        model=model, t=g["t"][()], x=g["x"][:T], w=g["w"][()], energy=get("energy"), max_drift=get("max_drift"),
        dissipation=get("dissipation"), cluster_count=g["n_clusters"][:T] if "n_clusters" in g else np.full(T, -1),
        stop_reason=str(a.get("stop_reason", "")) or "killed", message=str(a.get("message", "no end recorded")),
        t_stop=float(a.get("t_stop", g["t"][T - 1] if T else 0.0)),
        nsteps=int(a.get("nsteps", restart["nsteps"] if restart else 0)),
        nrejected=int(a.get("nrejected", restart["nrejected"] if restart else 0)),
        integrator=str(settings.get("integrator", "rk4")), dt=settings.get("dt"), seed=settings.get("seed", 0),
        stop=settings.get("stop"), options={k: v for k, v in settings.items() if k in option_names},
        sum_method=str(a.get("sum_method", "")), initial=str(a.get("initial", "")),
        wall_time=float(a.get("wall_time", 0.0)), steps=None, restart=restart,
        step_stiffness=q, stability_bound=bound, beyond_stability=over)


#: how the ``command`` attribute of a sweep's member and of a validate study begins (the command line as
#: typed, or these alone when called from Python): what :func:`made_by` reads
SWEEP_COMMAND, VALIDATE_COMMAND = "attnpde sweep", "attnpde validate"


def made_by(command: str) -> str:
    """Which command wrote an archive, from its ``command`` attribute: "sweep" (a member of ``attnpde sweep``,
    which resumes it with ``sweep --resume``), "validate" (a study that does not resume), or "run"
    (``attnpde run``, or ``run_config`` from Python, resumed by ``run --resume``)."""
    if command.startswith(SWEEP_COMMAND):
        return "sweep"
    if command.startswith(VALIDATE_COMMAND):
        return "validate"
    return "run"


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

    @property
    def config_text(self) -> str:
        return str(self.attrs.get("config", ""))

    @property
    def status(self) -> str:
        return str(self.attrs.get("status", ""))

    @property
    def made_by(self) -> str:
        """"run", "sweep" or "validate": :func:`made_by` of the archive's command."""
        return made_by(str(self.attrs.get("command", "")))


def load(path: str | Path) -> RunArchive:
    """Read a whole archive into objects: ``Model``, ``PDEResult``, ``ParticleResult``, comparison."""
    with _open(path) as f:
        try:
            model = read_model(f)
            pde = _read_pde(f["pde"], model) if "pde" in f and "t" in f["pde"] else None
            particles = None
            if "particles" in f and "t" in f["particles"]:
                particles = _read_particles(f["particles"], model)
            comparison = read_comparison(f["comparison"]) if "comparison" in f and "t" in f["comparison"] else None
            validation = read_validation(f["validation"], Path(path)) if "validation" in f else None
            atoms = {}
            if "atoms" in f:
                for k, g in f["atoms"].items():
                    atoms[k] = (g["positions"][()], g["masses"][()])
                    # what a node-group record adds (counts, error estimates, attrs: diffuse mass, radius)
                    for extra in ("counts", "extents", "mass_errors", "position_errors"):
                        if extra in g:
                            atoms[f"{k}:{extra}"] = g[extra][()]
                    if len(g.attrs):
                        atoms[f"{k}:attrs"] = {a: (v.item() if isinstance(v, np.generic) else v) for a, v in g.attrs.items()}
            attrs = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in f.attrs.items()}
        except (KeyError, ValueError, OSError) as e:
            raise ArchiveError(f"{path}: damaged archive ({e})") from None
    return RunArchive(path=Path(path), attrs=attrs, model=model, pde=pde, particles=particles,
                      comparison=comparison, atoms=atoms, validation=validation)
