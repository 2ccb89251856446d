"""Work on large point sets in fixed chunks, a few chunks at a time on threads.

numpy's elementwise operations and FINUFFT's transforms release the GIL, so chunks of points run
concurrently. The chunks depend on the point count (and the chunk size) only, and a point's arithmetic
is the same whatever chunk holds it, so the result is the same bits for any number of threads; a sum
over chunks is the caller's, in chunk order. The thread pools are shared by the whole process (one per
name and size; a forked child makes its own: :func:`shared_pool`, which the archive's compression worker
uses too).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

__all__ = ["chunk_slices", "map_chunks", "shared_pool"]

_POOLS: dict[tuple, ThreadPoolExecutor] = {}


def shared_pool(threads: int, name: str) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` threads named ``name``, made on first use (and again in a forked
    child: a pool's threads do not survive a fork): starting and joining threads at every use would be a
    visible cost of a sub-second run."""
    key = (os.getpid(), int(threads), name)
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(int(threads), thread_name_prefix=name)
    return pool


def chunk_slices(n: int, chunk: int) -> list[slice]:
    """The chunks of ``chunk`` points of n points (one empty chunk for n = 0)."""
    return [slice(s, min(s + chunk, n)) for s in range(0, max(n, 1), chunk)]


def map_chunks(fn: Callable[[int, slice], object], n: int, chunk: int, threads: int,
               name: str = "attnpde-chunks") -> list:
    """[fn(j, slice_j) for the chunks of n points], in chunk order, computed ``threads`` at a time (in the
    calling thread when one thread or one chunk). ``fn`` must not call :func:`map_chunks` with the same
    ``name`` (its pool would wait for itself)."""
    cuts = chunk_slices(n, chunk)
    if threads <= 1 or len(cuts) == 1:
        return [fn(j, c) for j, c in enumerate(cuts)]
    return list(shared_pool(threads, name).map(fn, range(len(cuts)), cuts))
