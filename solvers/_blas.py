"""Temporarily limit the threads of the OpenBLAS library numpy / scipy loaded (Linux; no dependency).

The solvers issue many small matrix products (the perceptron at a few thousand points, the stationary
solver's small systems). Threaded OpenBLAS gains nothing on them, and on a busy machine a second BLAS
thread that waits for a core stalls each call for a scheduler slice (milliseconds for microseconds of
work). The runs therefore hold one BLAS thread. This module finds the OpenBLAS libraries mapped into the process
(the mechanism threadpoolctl uses) and calls their own ``*set_num_threads`` entry points; where none
is found (another BLAS, another OS) it does nothing.
"""
from __future__ import annotations

import ctypes
from contextlib import contextmanager

__all__ = ["blas_threads"]

_PAIRS = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)
_handles: list | None = None


def _find() -> list:
    global _handles
    if _handles is not None:
        return _handles
    found = []
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f
                            if "openblas" in line.lower() and ".so" in line.split()[-1]})
    except OSError:
        paths = []
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
        except OSError:
            continue
        for set_name, get_name in _PAIRS:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                found.append((setter, getter))
                break
    _handles = found
    return found


@contextmanager
def blas_threads(n: int | None):
    """Run the block with at most n OpenBLAS threads (None: leave the setting alone)."""
    handles = _find() if n is not None else []
    old = [get() for _, get in handles]
    try:
        for (setter, _), o in zip(handles, old):
            if o != n:
                setter(int(n))
        yield
    finally:
        for (setter, _), o in zip(handles, old):
            if o != n:
                setter(o)
