"""What every section of an archive writes alike: datasets written once (``put``, with their CRC-32), the text
attributes' seal, the netCDF dimensions and CF attributes of the datasets (``label``), and the model."""
from __future__ import annotations

import datetime as _dt

import h5py
import numpy as np

from ..model import Model
from .archive_reader import SEAL, text_seal
from .archive_schema import DIMENSION_NOTES, PURE_DIM, cf_attributes, crc, dims_of, to_json

GZIP = dict(compression="gzip", compression_opts=1, shuffle=True)


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


def _fixed_text(text: str, least: int = 4096):
    """A text attribute's value as a fixed-length string, stored in the object header (checksummed by HDF5,
    and rewritten in place by one write while its length class is unchanged), padded with spaces to a power
    of two of at least ``least`` bytes; a variable-length string when it would not fit there (64 KiB)."""
    raw = text.encode()
    if len(raw) >= 60000:
        return text
    size = max(least, 1 << (len(raw) - 1).bit_length())
    return np.array(raw.ljust(size), dtype=h5py.string_dtype("utf-8", size))


def _grid_coordinates(g: h5py.Group, grid: np.ndarray) -> list:
    """theta (radians) of the S^1 output grid; lat, lon (degrees) of the S^2 one."""
    if grid.ndim == 2:                                   # S^1: (M, 2)
        return [put(g, "theta", np.mod(np.arctan2(grid[:, 1], grid[:, 0]), 2.0 * np.pi))]
    return [put(g, "lat", np.degrees(np.arcsin(np.clip(grid[:, 0, 2], -1.0, 1.0)))),        # S^2: (nlat, nlon, 3)
            put(g, "lon", np.mod(np.degrees(np.arctan2(grid[0, :, 1], grid[0, :, 0])), 360.0))]
