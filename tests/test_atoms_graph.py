"""The steepest ascent of the basin rule (``solvers.atoms``) against a plain reference: each node climbs,
one step at a time, to its highest neighbour (ties of rho by the larger node index) until no neighbour is
higher, on the grid graphs the solvers use (the sphere's with its pole nodes, the circle's), with ties
and plateaus. The graphs are shared read-only arrays whose grouped adjacency is kept between calls: the
kept one gives what a fresh one (a writable copy) gives, and it goes when its graph is freed."""
import gc

import numpy as np
import pytest

from solvers import atoms as A
from spectral import sphere


def _climb(rho: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each node's peak by walking up one neighbour at a time (no sorting, no vectorisation)."""
    n = rho.size
    nbrs = [[] for _ in range(n)]
    for a, b in edges.tolist():
        nbrs[a].append(b)
        nbrs[b].append(a)

    def key(i):
        return (rho[i], i)

    roots = np.empty(n, dtype=np.int64)
    for start in range(n):
        i = start
        while True:
            best = max(nbrs[i], key=key, default=i)
            if key(best) <= key(i):
                break
            i = best
        roots[start] = i
    return roots


def _graphs():
    yield "sphere 8 x 16 with poles", sphere.grid_neighbours(8, 16, pole_nodes=True), 8 * 16 + 2
    yield "sphere 6 x 12", sphere.grid_neighbours(6, 12), 6 * 12
    yield "circle 64", A.circle_neighbours(64), 64


@pytest.mark.parametrize("kind", ["random", "ties", "plateau"])
def test_steepest_ascent_is_the_step_by_step_climb(kind):
    rng = np.random.default_rng(7)
    for name, edges, n in _graphs():
        assert not edges.flags.writeable            # shared: nobody may change it
        for _ in range(3):
            if kind == "random":
                rho = rng.standard_normal(n)
            elif kind == "ties":                     # few distinct values: ties everywhere
                rho = rng.integers(0, 3, n).astype(float)
            else:                                    # a flat background with a few peaks
                rho = np.ones(n)
                rho[rng.integers(0, n, 3)] = 2.0
            ref = _climb(rho, edges)
            kept = A._steepest_ascent_roots(rho, edges)         # the kept adjacency (second time round)
            fresh = A._steepest_ascent_roots(rho, edges.copy())   # writable: built for this call only
            assert np.array_equal(kept, ref) and np.array_equal(fresh, ref), name


def test_a_kept_adjacency_goes_with_its_graph():
    edges = np.stack([np.arange(10), (np.arange(10) + 1) % 10], axis=1)
    edges.setflags(write=False)
    before = len(A._ADJACENCIES)
    A._steepest_ascent_roots(np.arange(10.0), edges)
    assert len(A._ADJACENCIES) == before + 1
    A._steepest_ascent_roots(np.arange(10.0), edges.copy())       # a writable graph is not kept
    assert len(A._ADJACENCIES) == before + 1
    del edges
    gc.collect()
    assert len(A._ADJACENCIES) == before
