"""The steepest ascent of the basin rule (``solvers.atoms``) against a plain reference: each node climbs,
one step at a time, to its highest neighbour (ties of rho by the larger node index) until no neighbour is
higher, on the grid graphs the solvers use (the sphere's with its pole nodes, the circle's) and on a
general graph (isolated nodes, repeated edges, 32-bit indices), with ties and plateaus. The solvers' grid
graphs are shared immutable arrays whose grouped adjacency is kept between calls: the kept one gives
what a fresh one gives, it is kept for those arrays only, and it goes when its graph is freed."""
import gc
import weakref

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


def _general_graph(rng) -> tuple[np.ndarray, int]:
    """60 nodes, the last five without edges, some edges repeated, 32-bit indices."""
    e = rng.integers(0, 55, (90, 2))
    e = e[e[:, 0] != e[:, 1]]
    return np.concatenate([e, e[:10]]).astype(np.int32), 60


def _graphs(rng):
    yield "sphere 8 x 16 with poles", sphere.grid_neighbours(8, 16, pole_nodes=True), 8 * 16 + 2
    yield "sphere 6 x 12", sphere.grid_neighbours(6, 12), 6 * 12
    yield "circle 64", A.circle_neighbours(64), 64
    yield ("general", *_general_graph(rng))


@pytest.mark.parametrize("kind", ["random", "ties", "plateau"])
def test_steepest_ascent_is_the_step_by_step_climb(kind):
    rng = np.random.default_rng(7)
    for name, edges, n in _graphs(rng):
        for _ in range(3):
            if kind == "random":
                rho = rng.standard_normal(n)
            elif kind == "ties":                     # few distinct values: ties everywhere
                rho = rng.integers(0, 3, n).astype(float)
            else:                                    # a flat background with a few peaks
                rho = np.ones(n)
                rho[rng.integers(0, n, 3)] = 2.0
            ref = _climb(rho, edges)
            shared = A._steepest_ascent_roots(rho, A.shared_graph(edges) if name != "general" else edges)
            fresh = A._steepest_ascent_roots(rho, np.array(edges))   # a writable copy: built for this call
            assert np.array_equal(shared, ref) and np.array_equal(fresh, ref), name


def test_the_adjacency_is_kept_for_the_shared_grid_graphs_only_and_goes_with_them():
    rho = np.arange(10.0)
    shared = A.shared_graph(sphere.grid_neighbours(6, 12))      # as the sphere's atoms pass it
    with pytest.raises(ValueError):                  # no flag makes it writeable again
        shared.setflags(write=True)
    A._steepest_ascent_roots(np.zeros(72), shared)
    assert A._ADJACENCIES[id(shared)][1] is not None

    ring = np.stack([np.arange(10), (np.arange(10) + 1) % 10], axis=1)
    readonly = ring.copy()                           # read-only, but its flag can be set back
    readonly.setflags(write=False)
    for edges in (ring, readonly, readonly[:]):      # anything not marked shared: built at every call
        A._steepest_ascent_roots(rho, edges)
        assert id(edges) not in A._ADJACENCIES

    # two shared graphs of the same shape, different edges: each its own adjacency
    other = np.stack([np.arange(10), (np.arange(10) + 3) % 10], axis=1)
    for g in (ring, other):
        g.setflags(write=False)
    a, b = A.shared_graph(ring[:]), A.shared_graph(other[:])
    down = rho[::-1].copy()
    ra, rb = A._steepest_ascent_roots(down, a), A._steepest_ascent_roots(down, b)
    assert np.array_equal(ra, _climb(down, ring)) and np.array_equal(rb, _climb(down, other))
    assert np.array_equal(A._steepest_ascent_roots(down, a), ra)                   # kept, still right
    key = id(a)
    assert A._ADJACENCIES[key][1] is not None and A._ADJACENCIES[id(b)][1] is not None
    del a, ra
    gc.collect()
    assert key not in A._ADJACENCIES                 # gone with its graph


def test_a_long_lived_process_keeps_the_adjacencies_of_two_sphere_grids_at_most():
    """A sweep worker runs member after member in one process: the sphere's kept grid graphs (and with
    them their adjacencies) are those of the last two grids only."""
    from solvers.pde_sphere import SphereSpace, _basis

    peaks = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, -0.6, -0.8]])

    def density(x):                                   # peaks of height ~100: atoms found by the ascent
        return 100.0 * np.exp(10.0 * (x @ peaks.T - 1.0)).sum(axis=-1)

    graphs = []
    for L in (7, 11, 15, 19):
        atoms = SphereSpace.atoms(SphereSpace.project(density, L))
        assert len(atoms.masses) >= 1, L
        b = _basis(L)
        edges = sphere.grid_neighbours(b.nlat, b.nphi, pole_nodes=True)     # the one the atoms used
        assert A._ADJACENCIES[id(edges)][1] is not None, L
        graphs.append(weakref.ref(edges))
        del edges
    gc.collect()
    assert [g() is None for g in graphs] == [True, True, False, False]
    # the entries of the freed graphs went with them
    assert all(ref() is not None for ref, _ in A._ADJACENCIES.values())
