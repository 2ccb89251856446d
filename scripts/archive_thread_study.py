#!/usr/bin/env python3
"""Study (not the package's writer): would an archive written by a background thread that makes HDF5's C
calls without the GIL meet the 1.05x target on the short S^1 run?

Why. The archive of the bench's short S^1 run (K = 1024 to t = 10, 101 snapshots, ~0.15 s) costs
1.09x-1.11x on every machine so far (README "Performance"). On the run's thread, libhdf5, h5py's Cython
layer and the kernel alone add about as much as the 5% allowance (PERFORMANCE.md, twelfth session), so
no writer that makes those calls on the run's thread can meet it. A background thread making them through
h5py does not help either: h5py holds the GIL in every call, and the run waits for it. ctypes releases
the GIL for every foreign call, so a thread calling libhdf5 through ctypes runs beside the integration on
the other core.

What is measured. The plain run (``solve_pde`` with its snapshots in memory) against the same run
with this writer:

- a thread, started with the run, creates the file and every object (groups, datasets, named dimensions,
  CF attributes) in one burst;
- the run's snapshot callback copies each snapshot, and hands the thread a batch every ``--batch``
  snapshots;
- the thread appends the batch's rows, and compresses the density's whole chunks itself (HDF5's
  shuffle + deflate (``_deflate`` below, the writer's until it became plain h5py), written with
  ``H5Dwrite_chunk``; zlib releases
  the GIL too);
- after the run, the last rows, the step log, the restart coefficients, the stage's attributes, the
  flush and the close, while the run's thread waits.

Every repeat alternates the two runs. The script reports the min / min ratio, the median of the paired
ratios, and the time the run's thread waits after the integration.

The file has the layout of the real archive: 43 objects and 138 attributes (the real one: 43 and 139),
the same named dimensions and 28 attachments, the same data (2.5 MB). Attribute values of text are
placeholders of similar length. It has none of the runner's work: the configuration, the progress, the
atoms and the restart state's contents. The read-back at the end checks that h5py sees the snapshots'
coefficients, times and density exactly, with their named dimensions.

    .venv/bin/python scripts/archive_thread_study.py [--repeats 15] [--batch 25]

Linux only: the libraries are the libhdf5 and libhdf5_hl that h5py has loaded, found in
/proc/self/maps. The HDF5 of an h5py wheel is not thread-safe: h5py serialises its own calls with one
process-wide lock (``h5py._objects.phil``). The thread holds that lock through each burst (``--no-lock``
measures without it), so an h5py call made meanwhile by any other thread waits for the burst to end
instead of entering HDF5 beside it; the script checks that such a call does wait, and returns. The
results on the machines of PERFORMANCE.md's twelfth and thirteenth sessions are there.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

import h5py  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runs  # noqa: E402

import zlib  # noqa: E402

from solvers import solve_pde  # noqa: E402
from solvers.app.archive_schema import PURE_DIM as _PURE_DIM  # noqa: E402  (the real writer's names)

#: the compression level of the archive's gzip filter
_GZIP_LEVEL = 1


def _deflate(block: np.ndarray) -> bytes:
    """HDF5's shuffle + deflate of one chunk (C-contiguous float64): byte k of every element for k = 0..7,
    then zlib (the archive writer's own worker did this until the writer became plain h5py)."""
    planes = block.view(np.uint8).reshape(-1, block.itemsize).T
    return zlib.compress(np.ascontiguousarray(planes), _GZIP_LEVEL)


def _loaded(name: str) -> str:
    """The path of the shared library ``name``-*.so that this process has mapped (h5py's own)."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            base = os.path.basename(path)
            if base.startswith(name) and ".so" in base and base[len(name)] in "-.":
                return path
    raise RuntimeError(f"{name} is not loaded (is h5py imported?)")


H = ctypes.CDLL(_loaded("libhdf5"))
HL = ctypes.CDLL(_loaded("libhdf5_hl"))
hid_t, herr_t, hsize_t = ctypes.c_int64, ctypes.c_int, ctypes.c_uint64


def _fn(lib, name, res, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)
    return f


_p = ctypes.POINTER(hsize_t)
H.H5open()
_g = lambda n: hid_t.in_dll(H, n).value  # noqa: E731
F64, F32, I64 = _g("H5T_IEEE_F64LE_g"), _g("H5T_IEEE_F32LE_g"), _g("H5T_STD_I64LE_g")
NATIVE_D, NATIVE_I64, C_S1 = _g("H5T_NATIVE_DOUBLE_g"), _g("H5T_NATIVE_LLONG_g"), _g("H5T_C_S1_g")
DATASET_CREATE = _g("H5P_CLS_DATASET_CREATE_ID_g")
Fcreate = _fn(H, "H5Fcreate", hid_t, ctypes.c_char_p, ctypes.c_uint, hid_t, hid_t)
Fflush = _fn(H, "H5Fflush", herr_t, hid_t, ctypes.c_int)
Fclose = _fn(H, "H5Fclose", herr_t, hid_t)
Gcreate = _fn(H, "H5Gcreate2", hid_t, hid_t, ctypes.c_char_p, hid_t, hid_t, hid_t)
Gclose = _fn(H, "H5Gclose", herr_t, hid_t)
Screate_simple = _fn(H, "H5Screate_simple", hid_t, ctypes.c_int, _p, _p)
Screate = _fn(H, "H5Screate", hid_t, ctypes.c_int)
Sclose = _fn(H, "H5Sclose", herr_t, hid_t)
Sselect_hyperslab = _fn(H, "H5Sselect_hyperslab", herr_t, hid_t, ctypes.c_int, _p, _p, _p, _p)
Pcreate = _fn(H, "H5Pcreate", hid_t, hid_t)
Pclose = _fn(H, "H5Pclose", herr_t, hid_t)
Pset_chunk = _fn(H, "H5Pset_chunk", herr_t, hid_t, ctypes.c_int, _p)
Pset_shuffle = _fn(H, "H5Pset_shuffle", herr_t, hid_t)
Pset_deflate = _fn(H, "H5Pset_deflate", herr_t, hid_t, ctypes.c_uint)
Pset_obj_track_times = _fn(H, "H5Pset_obj_track_times", herr_t, hid_t, ctypes.c_bool)
Dcreate = _fn(H, "H5Dcreate2", hid_t, hid_t, ctypes.c_char_p, hid_t, hid_t, hid_t, hid_t, hid_t)
Dwrite = _fn(H, "H5Dwrite", herr_t, hid_t, hid_t, hid_t, hid_t, hid_t, ctypes.c_void_p)
Dset_extent = _fn(H, "H5Dset_extent", herr_t, hid_t, _p)
Dget_space = _fn(H, "H5Dget_space", hid_t, hid_t)
Dwrite_chunk = _fn(H, "H5Dwrite_chunk", herr_t, hid_t, hid_t, ctypes.c_uint32, _p, ctypes.c_size_t, ctypes.c_void_p)
Dclose = _fn(H, "H5Dclose", herr_t, hid_t)
Acreate = _fn(H, "H5Acreate2", hid_t, hid_t, ctypes.c_char_p, hid_t, hid_t, hid_t, hid_t)
Awrite = _fn(H, "H5Awrite", herr_t, hid_t, hid_t, ctypes.c_void_p)
Aclose = _fn(H, "H5Aclose", herr_t, hid_t)
Tcopy = _fn(H, "H5Tcopy", hid_t, hid_t)
Tset_size = _fn(H, "H5Tset_size", herr_t, hid_t, ctypes.c_size_t)
Tset_cset = _fn(H, "H5Tset_cset", herr_t, hid_t, ctypes.c_int)
Tcreate = _fn(H, "H5Tcreate", hid_t, ctypes.c_int, ctypes.c_size_t)
Tinsert = _fn(H, "H5Tinsert", herr_t, hid_t, ctypes.c_char_p, ctypes.c_size_t, hid_t)
DSset_scale = _fn(HL, "H5DSset_scale", herr_t, hid_t, ctypes.c_char_p)
DSattach_scale = _fn(HL, "H5DSattach_scale", herr_t, hid_t, hid_t, ctypes.c_uint)

UNLIMITED = 2 ** 64 - 1
H5F_ACC_TRUNC, H5S_SCALAR, H5S_SELECT_SET, H5T_COMPOUND, H5T_CSET_UTF8 = 2, 0, 0, 6, 1
STR = Tcopy(C_S1)                         # variable-length UTF-8, as h5py writes a str attribute
Tset_size(STR, ctypes.c_size_t(-1).value)
Tset_cset(STR, H5T_CSET_UTF8)
COMPLEX = Tcreate(H5T_COMPOUND, 16)       # h5py's complex128: fields r, i
Tinsert(COMPLEX, b"r", 0, F64)
Tinsert(COMPLEX, b"i", 8, F64)
SCALAR = Screate(H5S_SCALAR)
PURE_DIM = _PURE_DIM.encode() + b"%10d" % 0     # as the real writer names a pure dimension


def _dims(t) -> ctypes.Array:
    return (hsize_t * len(t))(*t)


def _ok(r: int, what: str) -> int:
    if r < 0:
        raise RuntimeError(f"HDF5 call failed: {what}")
    return r


class Writer:
    """The archive's objects and rows, every HDF5 call through ctypes (see the module docstring)."""

    def __init__(self, path: str, M: int = 1024, K: int = 1024) -> None:
        self.path, self.M, self.K = path, M, K
        self.open: list[tuple] = []               # (close function, id), closed in reverse at the end

    def _keep(self, close, oid: int) -> int:
        self.open.append((close, oid))
        return oid

    def attr(self, oid: int, key: str, value) -> None:
        if isinstance(value, str):
            buf = (ctypes.c_char_p * 1)(value.encode())
            a = _ok(Acreate(oid, key.encode(), STR, SCALAR, 0, 0), key)
            _ok(Awrite(a, STR, buf), key)
        else:
            v = np.asarray(value, dtype=float if isinstance(value, float) else np.int64)
            a = _ok(Acreate(oid, key.encode(), F64 if v.dtype == float else I64, SCALAR, 0, 0), key)
            _ok(Awrite(a, NATIVE_D if v.dtype == float else NATIVE_I64, v.ctypes.data), key)
        Aclose(a)

    def group(self, loc: int, name: str) -> int:
        return self._keep(Gclose, _ok(Gcreate(loc, name.encode(), 0, 0, 0), name))

    def dataset(self, loc: int, name: str, shape: tuple, ftype: int, chunks: tuple | None = None,
                deflate: bool = False, data: np.ndarray | None = None, mtype: int | None = None) -> int:
        maxshape = (UNLIMITED,) + tuple(shape[1:]) if chunks else shape
        space = Screate_simple(len(shape), _dims(shape), _dims(maxshape))
        dcpl = Pcreate(DATASET_CREATE)
        if chunks:
            Pset_chunk(dcpl, len(chunks), _dims(chunks))
            if deflate:
                Pset_shuffle(dcpl)
                Pset_deflate(dcpl, _GZIP_LEVEL)
        Pset_obj_track_times(dcpl, False)
        d = self._keep(Dclose, _ok(Dcreate(loc, name.encode(), ftype, space, 0, dcpl, 0), name))
        Pclose(dcpl)
        Sclose(space)
        if data is not None and data.size:
            _ok(Dwrite(d, mtype or ftype, 0, 0, 0, np.ascontiguousarray(data).ctypes.data), name)
        return d

    def dimension(self, loc: int, name: str) -> int:
        d = self.dataset(loc, name, (0,), F32, chunks=(1024,))
        DSset_scale(d, PURE_DIM)
        return d

    def coordinate(self, d: int, name: str, long_name: str, units: str) -> int:
        DSset_scale(d, name.encode())
        self.cf(d, long_name, units)
        return d

    def cf(self, d: int, long_name: str, units: str | None = "1") -> None:
        self.attr(d, "long_name", long_name)
        if units is not None:
            self.attr(d, "units", units)

    def labelled(self, loc, name, shape, ftype, scales, chunks=None, deflate=False, data=None, mtype=None,
                 units: str | None = "1") -> int:
        d = self.dataset(loc, name, shape, ftype, chunks, deflate, data, mtype)
        for axis, s in enumerate(scales):
            DSattach_scale(d, s, axis)
        self.cf(d, name, units)
        return d

    # --- the bursts ---------------------------------------------------------------------------------
    def structure(self) -> None:
        """The file and every object of the archive, with named dimensions and CF attributes."""
        f = self.f = _ok(Fcreate(self.path.encode(), H5F_ACC_TRUNC, 0, 0), self.path)
        for k in ("command", "compression", "created", "format", "libraries", "name", "software_version",
                  "status", "updated"):
            self.attr(f, k, "x" * 24)
        self.attr(f, "config", "x" * 600)
        self.attr(f, "format_version", 3)
        ap = self.group(self.group(f, "atoms"), "pde")
        atom, comp = self.dimension(ap, "atom"), self.dimension(ap, "component")
        self.labelled(ap, "masses", (0,), F64, (atom,), chunks=(1024,))
        self.labelled(ap, "positions", (0, 2), F64, (atom, comp), chunks=(1024, 2))
        mo = self.group(f, "model")
        for k, v in (("attention", "usa"), ("beta", 4.0), ("d", 2), ("flow", "descent"), ("noise", 0.02),
                     ("strength", 1.0)):
            self.attr(mo, k, v)
        pe = self.group(mo, "perceptron")
        self.attr(pe, "activation", "tanh")
        self.attr(pe, "form", "gradient")
        unit, pcomp = self.dimension(pe, "unit"), self.dimension(pe, "component")
        self.labelled(pe, "a", (2, 2), F64, (unit, pcomp), data=np.ones((2, 2)))
        self.labelled(pe, "b", (2,), F64, (unit,), data=np.ones(2))
        self.labelled(pe, "c", (2,), F64, (unit,), data=np.ones(2))
        pd = self.pd = self.group(f, "pde")
        self.t = self.coordinate(self.dataset(pd, "t", (0,), F64, chunks=(1024,)), "t", "time", "1")
        k = self.coordinate(self.dataset(pd, "k", (self.K,), I64, chunks=(4096,), data=np.arange(self.K),
                                         mtype=NATIVE_I64), "k", "wavenumber", "1")
        theta = self.coordinate(self.dataset(pd, "theta", (self.M,), F64,
                                             data=2 * np.pi * np.arange(self.M) / self.M), "theta", "angle", "rad")
        self.dimension(pd, "component")
        gfield, grecord, ref, rfield = (self.dimension(pd, n) for n in
                                        ("grid_field", "grid_record", "refinement", "refinement_field"))
        self.labelled(pd, "grid", (self.M, 2), F64, (theta, gfield), data=np.ones((self.M, 2)))
        self.labelled(pd, "grids", (1, 2), I64, (grecord, gfield), data=np.ones((1, 2), dtype=np.int64),
                      mtype=NATIVE_I64)
        self.labelled(pd, "refinements", (0, 3), F64, (ref, rfield), chunks=(1024, 3))
        self.coeffs = self.labelled(pd, "coeffs", (0, self.K), COMPLEX, (self.t, k), chunks=(16, self.K))
        self.density = self.labelled(pd, "density", (0, self.M), F64, (self.t, theta), chunks=(32, self.M),
                                     deflate=True)
        self.series = {n: self.labelled(pd, n, (0,), I64 if n == "degree" else F64, (self.t,), chunks=(1024,))
                       for n in ("degree", "dissipation", "energy", "mass", "min_density", "tail")}
        st = self.group(pd, "steps")
        step = self.dimension(st, "step")
        self.steps = {n: self.labelled(st, n, (0,), F64, (step,), chunks=(4096,), units=None if n == "accepted"
                                       else "1") for n in ("accepted", "dt", "error", "t")}
        self.restart = self.group(pd, "restart")
        ra = self.group(self.restart, "a")
        self.restart_c = self.labelled(ra, "coeffs", (0,), COMPLEX, (self.dimension(ra, "coeff"),), chunks=(512,))
        self.rows_done = self.density_done = 0
        self.density_rows: list = []
        Fflush(f, 0)

    def append(self, d: int, n0: int, block: np.ndarray, mtype: int) -> None:
        """Rows n0 .. n0 + len(block) of d (extended to hold them)."""
        block = np.ascontiguousarray(block)
        _ok(Dset_extent(d, _dims((n0 + block.shape[0],) + block.shape[1:])), "extent")
        fspace = Dget_space(d)
        Sselect_hyperslab(fspace, H5S_SELECT_SET, _dims((n0,) + (0,) * (block.ndim - 1)), None,
                          _dims(block.shape), None)
        mspace = Screate_simple(block.ndim, _dims(block.shape), None)
        _ok(Dwrite(d, mtype, mspace, fspace, 0, block.ctypes.data), "rows")
        Sclose(mspace)
        Sclose(fspace)

    def batch(self, rows: list, last: bool) -> None:
        """The snapshots ``rows``; the density's whole chunks compressed here, the last partial one by HDF5."""
        n0 = self.rows_done
        self.append(self.coeffs, n0, np.stack([r["coeffs"] for r in rows]), COMPLEX)
        self.append(self.t, n0, np.array([r["t"] for r in rows]), NATIVE_D)
        for n, d in self.series.items():
            integer = n == "degree"
            self.append(d, n0, np.array([r[n] for r in rows], dtype=np.int64 if integer else float),
                        NATIVE_I64 if integer else NATIVE_D)
        self.density_rows += [r["density"] for r in rows]
        _ok(Dset_extent(self.density, _dims((n0 + len(rows), self.M))), "extent")
        while len(self.density_rows) >= 32 or (last and self.density_rows):
            block = np.stack(self.density_rows[:32])
            del self.density_rows[:32]
            if block.shape[0] == 32:           # shuffled and deflated as the real writer's worker does
                z = _deflate(block)
                _ok(Dwrite_chunk(self.density, 0, 0, _dims((self.density_done, 0)), len(z), z), "chunk")
            else:
                self.append(self.density, self.density_done, block, NATIVE_D)
            self.density_done += block.shape[0]
        self.rows_done += len(rows)

    def finish(self, steps: dict, last_coeffs: np.ndarray) -> None:
        """The step log, the restart coefficients, the stage's attributes, the flush and the close."""
        for n, d in self.steps.items():
            self.append(d, 0, np.asarray(steps[n], dtype=float), NATIVE_D)
        self.append(self.restart_c, 0, last_coeffs, COMPLEX)
        self.attr(self.restart, "state", "y" * 400)
        for k in ("complete", "initial", "message", "nrejected", "nsteps", "options", "stop_reason", "t_stop",
                  "wall_time"):
            self.attr(self.pd, k, "z" * 40)
        Fflush(self.f, 0)
        for close, oid in reversed(self.open):
            close(oid)
        Fclose(self.f)


def _thread(w: Writer, q: queue.SimpleQueue, lock) -> None:
    with lock:
        w.structure()
    while True:
        rows, end = q.get()
        with lock:                  # held through the burst, released while the thread waits for the next
            if rows:
                w.batch(rows, last=end is not None)
            if end is not None:
                w.finish(*end)
                return


def _h5py_waits(tmp: str) -> tuple[bool, float]:
    """Whether an h5py call made by the main thread while the writer thread is inside its first burst
    (holding ``phil``) returns only after that burst, and how long the call took (ms)."""
    inside, order = threading.Event(), []
    w = Writer(f"{tmp}/excl.h5")

    def burst() -> None:
        with h5py._objects.phil:
            inside.set()
            w.structure()
            w.finish({n: np.zeros(1) for n in ("accepted", "dt", "error", "t")}, np.zeros(1, complex))
            order.append("burst")

    th = threading.Thread(target=burst)
    th.start()
    inside.wait()
    t0 = time.perf_counter()
    with h5py.File(f"{tmp}/other.h5", "w") as f:
        f.attrs["x"] = 1
    order.append("h5py")
    took = time.perf_counter() - t0
    th.join()
    return order == ["burst", "h5py"], 1e3 * took


SERIES = ("degree", "energy", "mass", "min_density", "tail", "dissipation")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--batch", type=int, default=25, help="snapshots per batch handed to the thread")
    ap.add_argument("--no-lock", action="store_true", help="write without holding h5py's lock (phil)")
    args = ap.parse_args()
    lock = contextlib.nullcontext() if args.no_lock else h5py._objects.phil
    model = bench_runs._model(2)
    run = dict(t_final=10.0, degree=1024, max_degree=1024, save_every=0.1)

    def plain() -> float:
        t0 = time.perf_counter()
        solve_pde(model, **run)
        return time.perf_counter() - t0

    def archived(path: str) -> tuple[float, float, list]:
        w, q, buf, kept = Writer(path), queue.SimpleQueue(), [], []
        t0 = time.perf_counter()
        th = threading.Thread(target=_thread, args=(w, q, lock))
        th.start()

        def snapshot(row: dict) -> None:
            buf.append({"t": row["t"], "coeffs": row["coeffs"].copy(), "density": row["density"].copy(),
                        **{k: row[k] for k in SERIES}})
            if len(buf) >= args.batch:
                kept.extend(buf)
                q.put((buf[:], None))
                buf.clear()

        r = solve_pde(model, **run, callback=snapshot)
        t1 = time.perf_counter()
        kept.extend(buf)
        n = r.nsteps
        steps = {"accepted": np.ones(n), "dt": np.full(n, 10.0 / n), "error": np.zeros(n),
                 "t": np.linspace(0, 10.0, n)}
        q.put((buf[:], (steps, r.coefficients(-1))))
        th.join()
        t2 = time.perf_counter()
        return t2 - t0, t2 - t1, kept

    with tempfile.TemporaryDirectory() as tmp:
        plain()
        archived(f"{tmp}/warm.h5")
        p, a, wait = [], [], []
        for i in range(args.repeats):
            for kind in (("plain", "archived") if i % 2 == 0 else ("archived", "plain")):
                if kind == "plain":
                    p.append(plain())
                else:
                    t, tw, kept = archived(f"{tmp}/a{i}.h5")
                    a.append(t)
                    wait.append(tw)
        print(f"batches of {args.batch}, {'without' if args.no_lock else 'holding'} h5py's lock: "
              f"plain {min(p) * 1e3:.1f} ms, archived {min(a) * 1e3:.1f} ms; min / min "
              f"{min(a) / min(p):.3f}, median of paired ratios {statistics.median(x / y for x, y in zip(a, p)):.3f}, "
              f"extra {statistics.median(x - y for x, y in zip(a, p)) * 1e3:+.1f} ms (paired median); the run's "
              f"thread waits {statistics.median(wait) * 1e3:.1f} ms after the integration")
        # read back: the snapshots exactly, with their named dimensions
        with h5py.File(f"{tmp}/a{args.repeats - 1}.h5", "r") as f:
            objects = []
            f.visit(objects.append)
            same = (np.array_equal(f["pde/coeffs"][()], np.stack([k["coeffs"] for k in kept]))
                    and np.array_equal(f["pde/density"][()], np.stack([k["density"] for k in kept]))
                    and np.array_equal(f["pde/t"][()], [k["t"] for k in kept]))
            names = [dim[0].name for dim in f["pde/density"].dims]
            print(f"read back: {len(objects)} objects; coefficients, density and times equal to the snapshots: "
                  f"{same}; density's dimensions {names}")
        waited, took = _h5py_waits(tmp)
        print(f"an h5py call from the main thread during a burst waited for it and returned: {waited} "
              f"({took:.1f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
