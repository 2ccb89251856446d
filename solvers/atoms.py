"""Atoms: positions and masses of the concentrated pieces of a density or a point cloud.

Densities on a grid (w.r.t. the uniform probability measure, so the uniform state is 1) by
:func:`atoms_from_graph`; weighted points by :func:`clusters`. How the solvers use them:
docs/numerics.md.

Notes
-----
**method="basin"** (the default). Every node climbs to its highest neighbour on the grid graph
(steepest ascent); the nodes that reach the same local maximum form its basin. Two basins touch along
their boundary edges; their *saddle* is the highest of min(rho_a, rho_b) over those edges (the level at
which their super-level sets join). Going through the saddles from the highest down (union-find: the
ToMATo algorithm of Chazal, Guibas, Oudot and Skraba, 2013, with a relative threshold), the lower peak p
of two components is merged into the higher one when its prominence p - saddle is below ``prominence``
x p (default 0.1: the density must fall by 10% of the lower peak's height between two atoms). A merged
component keeps the higher peak and the union of the basins; on S^1 an atom's mass is the mass between
the minima that separate it from the other atoms. The rule is the same on S^1 and S^2, and nothing in
it refers to a direction: values at nodes and the grid graph's edges.

Why persistence: a peak elongated along a direction oblique to the grid (a ridge) is sampled at nodes
whose distance to the crest varies, so its crest shows spurious local maxima whose number and place
depend on the grid. Their dips are a fraction of a per cent of the peak (under half a per cent over the
tests' random ridges), far below the 10% that separates atoms, while the valley between two real atoms
goes down to the background. A sharply peaked density carries all of an approximate Dirac mass in its
basin; mass on a plateau beyond a dip deeper than 10% (a dead zone of the perceptron) belongs to another
component, whose peak is below the threshold.

Peaks, basins and saddles compare density values at a resolution of 2^-36 max |rho| (``_resolved``),
far above a synthesised density's round-off: on a flat region (a uniform background) the nodes tie and
climb by node index, the same on every machine, instead of as round-off happens to tilt them. A plateau
at the uniform level 1 (or any multiple of the resolution) sits mid-step; one within round-off of a
step's edge (a chance of about 1e-4 for an arbitrary level) would still split by round-off.

**The threshold and the shape.** The solvers pass rho smoothed by the heat kernel at a scale h of one or
two wavelengths of the top mode as ``shape``, so that Gibbs oscillations beside a jump are not peaks: the
peaks, basins and merges are those of the shape, but the threshold is tested on rho itself, in each
peak's *core* (the nodes of its component where the shape is within ``CORE``, 10%, of the component's
peak value). The component is an atom when rho, or the shape, reaches the threshold at a node of its
core. Why rho: the smoothing lowers a narrow peak (a Gaussian of width s by s / sqrt(s^2 + h^2) on S^1,
s^2 / (s^2 + h^2) on S^2, about half its height for s one wavelength) while rho holds a resolved peak
exactly, so a threshold tested on the shape would miss resolved peaks and its verdict would depend on
the degree. Why the core, not the whole basin: a basin's rim may run beside a jump, whose Gibbs
overshoot (9% of the jump) is in rho and not in the shape; the core is the top of the smoothed peak, a
few grid spacings around rho's peak for a narrow one. Beside an unresolved jump the test therefore sees
rho's overshoot; for a resolved density it is the test of rho. The structure keeps the shape's
resolution: two resolved peaks closer than about 2.5 sqrt(s^2 + h^2) merge into one atom.

**method="level"**: the connected components of {rho >= threshold}, with the mass inside them (it
misses the tails below the level: use it for very sharp peaks on a background).

**Positions.** An atom's position is the normalised mean direction of its nodes weighted by
(rho_s - l)_+, rho_s the density that decides the structure (``shape``), l = min(threshold, (1 - CORE)
rho_s(peak)): the part of the peak above the threshold, or its core where the threshold cuts less (a
peak within 10% of the threshold, or one the smoothing lowers below it). The weights vanish continuously
at the rim and l is continuous in the peak's height (it is the threshold for every peak above
threshold / (1 - CORE)), so neither the diffuse mass of a basin nor the grid's cut of its boundary moves
the position: a rotated copy of a state gives positions rotated to a small fraction of the grid spacing.

**Particles** (weighted points): two clustering rules at a geodesic radius r (docs/model.md §5):

- ``rule="linkage"``: single-linkage components: two points are linked when their geodesic distance is
  <= r, clusters are the connected components (chains of links may be longer than r).
- ``rule="paper"``: the rule of the main paper's released code (antonioalvarezl/2026-MLP-Attention-Energy,
  ``wgf_circle/analysis.py`` and ``wgf_sphere/analysis_S2.py``). On S^1, *greedy arcs*: sort the angles,
  cut the circle at the largest gap between consecutive angles, walk from the angle after the cut: a
  cluster opens at the first angle not yet taken and takes every following angle a with
  a - (its first angle) <= r. A cluster's arc is therefore <= r, and a chain of points spaced below r
  splits into arcs of length r (linkage keeps it whole). On S^2 (and any d >= 3), connected components of
  {geodesic distance <= r}: the same relation as ``"linkage"``. A cluster's mass is the sum of its weights
  (the released code counts particles: the same for equal weights).
"""
from __future__ import annotations

import weakref
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

__all__ = ["Atoms", "atoms_from_graph", "circle_neighbours", "circle_neighbour_chords", "circle_closest_chord",
           "single_linkage_clusters", "greedy_arc_labels", "clusters", "cluster_spread", "spread_within",
           "arc_extent", "CLUSTER_RULES", "DEFAULT_PROMINENCE"]

#: the clustering rules of :func:`clusters` (see the module docstring)
CLUSTER_RULES = ("linkage", "paper")

#: relative prominence below which a peak of the basin rule is merged into its higher neighbour
DEFAULT_PROMINENCE = 0.1

#: a peak's core: the nodes of its component where the structure's density is within this fraction of
#: the peak's value; the basin rule tests the threshold on rho there (module docstring)
CORE = 0.1

#: the basin rule compares density values at this resolution relative to max |rho| (:func:`_resolved`)
RESOLUTION = 2.0 ** -36


class Atoms:
    """Positions (k, d) unit vectors and masses (k,), heaviest first. Iterable as (positions, masses)."""

    def __init__(self, positions: np.ndarray, masses: np.ndarray) -> None:
        order = np.argsort(-np.asarray(masses), kind="stable")
        positions = np.asarray(positions, dtype=float)
        self.positions = positions.reshape(len(order), positions.shape[-1] if positions.ndim else 0)[order]
        self.masses = np.asarray(masses, dtype=float)[order]

    def __iter__(self):
        return iter((self.positions, self.masses))

    def __len__(self) -> int:
        return len(self.masses)

    def heavy(self, min_mass: float) -> "Atoms":
        keep = self.masses >= min_mass
        return Atoms(self.positions[keep], self.masses[keep])

    def __repr__(self) -> str:
        rows = ", ".join(f"{m:.4f}@{np.round(p, 4).tolist()}" for p, m in zip(self.positions, self.masses))
        return f"Atoms({len(self)}: {rows})"


@lru_cache(maxsize=8)
def circle_neighbours(n: int) -> np.ndarray:
    """Edges (i, i+1 mod n) of the periodic 1-D grid, shape (n, 2) (one array per n, kept and shared by
    every caller: a read-only view of a read-only array, which no flag can make writeable again)."""
    i = np.arange(n)
    edges = np.stack([i, (i + 1) % n], axis=1)
    edges.setflags(write=False)
    return shared_graph(edges[:])


class _Adjacency(NamedTuple):
    """A graph's edges in both directions, grouped by source node (what the steepest ascent scans)."""
    sources: np.ndarray     # (g,) the source node of each group, increasing
    targets: np.ndarray     # (2e,) the targets, group after group (within a group in the order of the edges)
    starts: np.ndarray      # (g,) where each group begins in ``targets``
    group: np.ndarray       # (2e,) the group of each entry of ``targets``


#: the grids' shared graphs (see shared_graph) by the array's id: a weak reference to it and its
#: adjacency once built. The reference's callback drops the entry while the array is freed, before its
#: id can be reused, so an entry found by id is always that array's. Building the adjacency is most of a
#: steepest ascent's work and memory (its sort, and some ten arrays of 2e entries to allocate and touch):
#: kept, it makes the atoms of a snapshot several times cheaper after the first call of a process.
_ADJACENCIES: dict[int, list] = {}

#: larger graphs are not kept: 2^23 directed edges (about 10^6 nodes of a sphere grid, L ~ 480) keep
#: ~72 MiB, and at larger degrees the atoms are a small part of a run's time. A process keeps the graphs of
#: grid_neighbours' last two sphere grids and
#: circle_neighbours' last eight circles (their edges cached there in any case), so the adjacencies a
#: long-lived one (a sweep worker) keeps stay under 2 x 72 MiB plus the circles' 24 bytes per node
KEPT_EDGES = 2 ** 23


def shared_graph(edges: np.ndarray) -> np.ndarray:
    """Mark ``edges`` as a graph of this package that never changes and is used again (the arrays that
    circle_neighbours and, through the solvers, spectral.sphere.grid_neighbours keep per grid: read-only
    views of read-only arrays), so that the steepest ascent keeps its adjacency; returns it. Package
    internal: any other edge array, read-only or not, is grouped again at every call, since numpy
    cannot tell that nobody will write into it."""
    key = id(edges)
    if key not in _ADJACENCIES and 2 * len(edges) <= KEPT_EDGES:
        def forget(_, key: int = key) -> None:
            _ADJACENCIES.pop(key, None)
        _ADJACENCIES[key] = [weakref.ref(edges, forget), None]
    return edges


def _adjacency(edges: np.ndarray) -> _Adjacency:
    """The grouped adjacency of ``edges`` (kept for a shared graph, see shared_graph)."""
    kept = _ADJACENCIES.get(id(edges))
    if kept is not None and kept[1] is not None:
        return kept[1]
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    # a stable sort by source: linear after the integer sort, where a lexicographic sort of (rho, index)
    # would be most of an atoms call
    order = np.argsort(src, kind="stable")
    s = src[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    # 32-bit node and entry indices where they fit: half the memory to keep and to gather through
    index = np.int32 if s.size < 2 ** 31 and (s.size == 0 or s[-1] < 2 ** 31) else np.int64
    group = np.repeat(np.arange(starts.size, dtype=index), np.diff(np.r_[starts, s.size]))
    adj = _Adjacency(s[starts].astype(index), dst[order].astype(index), starts.astype(index), group)
    if kept is not None:
        kept[1] = adj
    return adj


def _resolved(rho: np.ndarray) -> np.ndarray:
    """rho rounded to the nearest multiple of q = 2^e RESOLUTION, 2^e <= max |rho| < 2^(e+1): what the
    basin rule compares. A density synthesised from its coefficients carries round-off of about 1e-14
    max |rho|, which differs between machines (SIMD widths, FFT and BLAS kernels); where rho is flat
    (a uniform background, a plateau) round-off alone would decide which way each node climbs, hence
    which atom gets the plateau's mass, and perturbations of 1e-16 could move a large part of it.
    At q ~ 1e-11 max |rho| such nodes are exact ties, broken by the node index on every machine. q
    is a power of two (0.7e-11 to 1.5e-11 max |rho|), so the rounding is exact and a dyadic plateau (the
    uniform density 1) sits at the middle of its step; non-finite values stay as they are, and so does a
    density too small or too large for q and rho / q to be normal numbers."""
    finite = np.isfinite(rho)
    top = float(np.max(np.abs(rho[finite]))) if finite.any() else 0.0
    q = np.ldexp(RESOLUTION, int(np.frexp(top)[1]) - 1) if top > 0.0 else 0.0
    if not (np.finfo(float).tiny <= q and top < np.finfo(float).max / 2):
        return rho
    return np.where(finite, np.rint(rho / q) * q, rho)


def _steepest_ascent_roots(rho: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The local maximum each node reaches by climbing to its highest neighbour (ties of rho broken by
    the node index, so that a plateau climbs to one node)."""
    n = rho.size
    if np.all(np.isfinite(rho)):
        # per source, the neighbour with the largest (rho, index): two segmented maxima over the
        # adjacency grouped by source
        adj = _adjacency(edges)
        vals = rho[adj.targets]
        vmax = np.maximum.reduceat(vals, adj.starts)
        top = vals == vmax[adj.group]
        s_best, d_best = adj.sources, np.maximum.reduceat(np.where(top, adj.targets, -1), adj.starts)
    else:
        # grouped by source, highest target last (NaN sorts last, as the ordering of the finite branch
        # cannot express)
        src = np.concatenate([edges[:, 0], edges[:, 1]])
        dst = np.concatenate([edges[:, 1], edges[:, 0]])
        order = np.lexsort((dst, rho[dst], src))
        last = np.r_[src[order][1:] != src[order][:-1], True]
        s_best, d_best = src[order][last], dst[order][last]
    up = np.arange(n)
    climb = (rho[d_best] > rho[s_best]) | ((rho[d_best] == rho[s_best]) & (d_best > s_best))
    up[s_best[climb]] = d_best[climb]
    # every node's peak by pointer doubling (each pass doubles the length climbed: log of the longest path
    # instead of one pass per step up it; the peaks are the fixed points either way)
    root = up
    while True:
        nxt = root[root]
        if np.array_equal(nxt, root):
            return root
        root = nxt


def _merge_by_prominence(rho: np.ndarray, root: np.ndarray, edges: np.ndarray, prominence: float) -> np.ndarray:
    """Relabel basins (``root``: the peak node of each node's basin) by persistence: a peak whose
    prominence above the saddle to a higher component is below ``prominence`` x its height joins that
    component (see the module docstring). Returns the peak node of each node's merged component."""
    a, b = root[edges[:, 0]], root[edges[:, 1]]
    cross = a != b
    if not cross.any() or prominence <= 0:
        return root
    a, b = np.minimum(a[cross], b[cross]), np.maximum(a[cross], b[cross])
    level = np.minimum(rho[edges[cross, 0]], rho[edges[cross, 1]])
    # the saddle of each pair of basins: the highest crossing edge
    order = np.lexsort((-level, b, a))
    first = np.r_[True, (a[order][1:] != a[order][:-1]) | (b[order][1:] != b[order][:-1])]
    pa, pb, sad = a[order][first], b[order][first], level[order][first]
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        path = []
        while parent.get(x, x) != x:
            path.append(x)
            x = parent[x]
        for p in path:                           # path compression
            parent[p] = x
        return x

    def higher(x: int, y: int) -> bool:          # x's peak above y's (ties by the node index)
        return (rho[x], x) > (rho[y], y)

    for k in np.lexsort((pb, pa, -sad)):         # saddles from the highest down
        x, y = find(int(pa[k])), find(int(pb[k]))
        if x == y:
            continue
        hi, lo = (x, y) if higher(x, y) else (y, x)
        if rho[lo] - sad[k] < prominence * abs(rho[lo]):
            parent[lo] = hi
    peaks = np.unique(root)
    final = np.array([find(int(p)) for p in peaks])
    return final[np.searchsorted(peaks, root)]


def atoms_from_graph(points: np.ndarray, rho: np.ndarray, weights: np.ndarray, edges: np.ndarray,
                     threshold: float = 10.0, method: str = "basin", min_mass: float = 0.0,
                     shape: np.ndarray | None = None, prominence: float = DEFAULT_PROMINENCE) -> Atoms:
    """Atoms of a density sampled on a grid graph.

    Parameters
    ----------
    points : (n, d) unit vectors of the grid nodes
    rho : (n,) density values (w.r.t. the uniform probability measure)
    weights : (n,) quadrature weights, summing to 1
    edges : (e, 2) neighbour pairs of the grid graph
    threshold : density level defining the concentrated pieces (uniform density is 1)
    method : "basin" (steepest-ascent basins of peaks >= threshold) or "level" (super-level components)
    min_mass : drop atoms lighter than this
    shape : (n,) optional density that decides the structure (peaks, basins, level sets, and the
        threshold of the level method) while the masses are those of ``rho`` — e.g. a smoothed copy of
        rho, so that Gibbs oscillations beside a jump are not taken for peaks. The basin method tests
        the threshold on ``rho`` (or ``shape``, where higher) in each peak's core (module docstring)
    prominence : "basin" only: relative prominence below which a peak is merged into its higher
        neighbour (0 keeps every local maximum of the grid)
    """
    if not (isinstance(prominence, (int, float)) and 0 <= prominence < 1):
        raise ValueError(f"prominence must be a number in [0, 1), got {prominence!r}")
    if method not in ("level", "basin"):
        raise ValueError(f"method must be 'level' or 'basin', got {method!r}")
    points = np.asarray(points, dtype=float)
    density = np.asarray(rho, dtype=float)
    mass = density * weights
    rho = density if shape is None else np.asarray(shape, dtype=float)     # the structure from here on
    # the basin rule tests the threshold on the density itself (in each peak's core), the level rule on
    # the structure's density
    if np.all(rho < threshold) and (method == "level" or np.all(density < threshold)):
        # no node reaches the threshold: neither a peak nor a level set does (the common case of a
        # diffuse density, decided without the graph)
        return Atoms(np.zeros((0, points.shape[1])), np.zeros(0))
    n = rho.size
    level = np.full(n, float(threshold))
    if method == "level":
        inside = rho >= threshold
        e = edges[inside[edges[:, 0]] & inside[edges[:, 1]]]
        g = coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n))
        _, labels = connected_components(g, directed=False)
        labels = np.where(inside, labels, -1)
    else:
        resolved = _resolved(rho)
        labels = _merge_by_prominence(resolved, _steepest_ascent_roots(resolved, edges), edges, prominence)
        # a component is an atom when rho or its structure's density reaches the threshold in the
        # peak's core: its nodes within CORE of the structure's peak value (module docstring)
        top = resolved[labels]
        core = resolved >= top - CORE * np.abs(top)
        reached = core & ((density >= threshold) | (rho >= threshold))
        atom = np.bincount(labels, weights=reached, minlength=n) > 0
        labels = np.where(atom[labels], labels, -1)
        # positions from the part of the peak above the threshold, or its core if that is smaller
        level = np.minimum(level, (1.0 - CORE) * rho[np.maximum(labels, 0)])
    comps, label = np.unique(labels, return_inverse=True)
    keep = np.nonzero(comps >= 0)[0]
    ms = np.bincount(label, weights=mass, minlength=len(comps))[keep]
    # the part of each peak above the threshold locates it (module docstring)
    wpos = np.maximum(mass, 0.0) * np.maximum(rho - level, 0.0)
    pos = np.stack([np.bincount(label, weights=wpos * points[:, j], minlength=len(comps))[keep]
                    for j in range(points.shape[1])], axis=1).reshape(len(keep), points.shape[1])
    nrm = np.linalg.norm(pos, axis=1)
    if np.any(nrm == 0):
        # a component symmetric about the centre (zero mean direction): its highest node
        for k in np.nonzero(nrm == 0)[0]:
            sel = np.nonzero(label == keep[k])[0]
            pos[k] = points[sel[np.argmax(rho[sel])]]
            nrm[k] = 1.0
    atoms = Atoms(pos / nrm[:, None], ms)
    return atoms.heavy(min_mass) if min_mass > 0 else atoms


#: points farther than this from the unit circle (| |x|^2 - 1 |) are not clustered by angular order
CIRCLE_NORM_TOL = 1e-12
#: a neighbours' chord within this relative distance of a decision's (the link chord, or one the radial
#: tolerance could shift) is left to the general search, whose arithmetic (cube cliques, squared sums, a
#: k-d tree's sqrt) may round differently
_CIRCLE_MARGIN = 1e-9
#: and within this absolute distance: points closer in angle than a few ulp of pi (4.4e-16) may share their
#: arctan2 and sort out of order, which moves a neighbours' chord by about as much
_CIRCLE_SLACK = 2e-15


def circle_neighbour_chords(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Points of S^1 in angular order and the squared chords between neighbours in that order.

    Returns ``(order, d2, dev)``: ``order`` sorts the angles, ``d2[i] = |x[order[i+1]] - x[order[i]]|^2``
    (the last to the first for i = n - 1), ``dev = max | |x|^2 - 1 |``; None for fewer than two points, for
    d != 2, or when some |x|^2 is farther than ``CIRCLE_NORM_TOL`` from 1.

    Why neighbours suffice: on the unit circle the chord grows with the angle between two points (up to
    pi), so a point's nearest point is one of its two angular neighbours, and two points within a chord c
    are joined by the neighbours along the shorter arc between them, each pair within c. Points off the
    circle by at most r (radially) keep this up to 2 r in each chord; the callers leave chords that close
    to their decision to the general search (O(n log n) here against a k-d tree's build and query)."""
    n = x.shape[0]
    if n < 2 or x.ndim != 2 or x.shape[1] != 2:
        return None
    dev = float(np.max(np.abs(np.einsum("nd,nd->n", x, x) - 1.0)))
    if not dev <= CIRCLE_NORM_TOL:
        return None
    order = np.argsort(np.arctan2(x[:, 1], x[:, 0]), kind="stable")
    xs = x[order]
    diff = np.empty_like(xs)
    np.subtract(xs[1:], xs[:-1], out=diff[:-1])
    np.subtract(xs[0], xs[-1], out=diff[-1])
    return order, np.einsum("nd,nd->n", diff, diff), dev


def _ambiguous(d2: np.ndarray, chord: float, dev: float) -> bool:
    """Whether a neighbours' chord (squared: ``d2``) is within round-off of ``chord`` (relative, and the
    absolute slack of angles that sort out of order), or above it by less than what the radial deviation
    allows (``dev`` bounds | |x|^2 - 1 |, so |x| is within dev / 2 of 1: a pair's chord moves by less
    than 2 dev, and a chain of neighbours can hide a closer pair off the circle)."""
    lo = max(chord * (1.0 - _CIRCLE_MARGIN) - _CIRCLE_SLACK, 0.0)
    hi = chord * (1.0 + _CIRCLE_MARGIN) + 4.0 * dev + _CIRCLE_SLACK
    return bool(np.any((d2 >= lo * lo) & (d2 <= hi * hi)))


def circle_closest_chord(x: np.ndarray, near: tuple | None = None) -> float | None:
    """A lower bound of the smallest chord between two points of S^1, at most 8 dev + 4e-15 below it (dev
    of :func:`circle_neighbour_chords`: ~1e-16 for normalised points): the smallest neighbours' chord, less
    what points off the circle or out of order could hide. None where :func:`circle_neighbour_chords` is.
    ``near``: ``circle_neighbour_chords(x)`` when the caller has it (None: computed here)."""
    near = circle_neighbour_chords(x) if near is None else near
    if near is None:
        return None
    return max(0.0, float(np.sqrt(near[1].min())) - 4.0 * near[2] - _CIRCLE_SLACK)


def _circle_linkage_labels(x: np.ndarray, chord: float, near: tuple | None = None) -> np.ndarray | None:
    """:func:`_linkage_labels` for points of S^1 by their angular order (:func:`circle_neighbour_chords`,
    or ``near`` when the caller has it): a component is a run of neighbours within ``chord``. None where
    the general search must decide (see there)."""
    near = circle_neighbour_chords(x) if near is None else near
    if near is None or chord >= 2.0:
        return None
    order, d2, dev = near
    if _ambiguous(d2, chord, dev):
        return None
    link = d2 <= chord * chord              # link[i]: sorted point i with sorted point i + 1 (the last: the first)
    n = len(order)
    along = np.empty(n, dtype=np.int64)
    along[0] = 0
    np.cumsum(~link[:-1], out=along[1:])
    if link[-1]:
        along[along == along[-1]] = 0       # the run through the last point goes on at the first
    labels = np.empty(n, dtype=np.int64)
    labels[order] = along
    return labels


def _linkage_labels(x: np.ndarray, chord: float, near: tuple | None = None) -> np.ndarray:
    """Connected components of the graph {|x_i - x_j| <= chord} (Euclidean), without listing its edges.

    On S^1 the components are runs of angular neighbours (:func:`_circle_linkage_labels`), unless a
    neighbours' chord is within round-off of ``chord``; otherwise, and for d >= 3:

    Points are binned into cubes of side chord / sqrt(d): a cube's diameter is chord, so each cube is
    a clique and only cube-to-cube links remain. Two occupied cubes can be linked only if their
    centres are within 2 chord; for those candidates the closest pair decides (all pairs for small
    cubes, a k-d tree for large ones). Cost and memory scale with the occupied cubes and their
    neighbours, not with the number of close pairs, which is O(N^2) for collapsed clusters.
    """
    from scipy.spatial import cKDTree

    labels = _circle_linkage_labels(x, chord, near)
    if labels is not None:
        return labels
    n, d = x.shape
    h = chord / np.sqrt(d) * (1.0 - 1e-12)
    idx = np.floor(x / h).astype(np.int64)
    lo = idx.min(axis=0)
    span = idx.max(axis=0) - lo + 1
    if float(np.prod(span.astype(float))) < 2.0 ** 62:
        # one integer key per cube: a 1-D unique is much faster than unique(axis=0)
        key = np.ravel_multi_index((idx - lo).T, tuple(int(v) for v in span))
        ukey, inv = np.unique(key, return_inverse=True)
        cells = np.stack(np.unravel_index(ukey, tuple(int(v) for v in span)), axis=1) + lo
    else:
        cells, inv = np.unique(idx, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    C = cells.shape[0]
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv, minlength=C)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    xs = x[order]
    cand = cKDTree((cells + 0.5) * h).query_pairs(2.0 * chord * (1 + 1e-9), output_type="ndarray")
    r2 = chord * chord
    linked = np.zeros(len(cand), dtype=bool)
    if len(cand):
        a, b = cand[:, 0], cand[:, 1]
        prod = counts[a] * counts[b]
        small = np.nonzero(prod <= 4096)[0]
        # all point pairs of the small candidates, in chunks of ~4M pairs
        csum = np.cumsum(prod[small])
        lo = 0
        while lo < len(small):
            base = csum[lo - 1] if lo else 0
            hi = int(np.searchsorted(csum, base + 4_000_000, side="right"))
            hi = max(hi, lo + 1)
            sel = small[lo:hi]
            p = prod[sel]
            pid = np.repeat(np.arange(len(sel)), p)
            k = np.arange(p.sum()) - np.repeat(np.cumsum(p) - p, p)
            nb = counts[b[sel]][pid]
            i = starts[a[sel]][pid] + k // nb
            j = starts[b[sel]][pid] + k % nb
            close = np.einsum("nd,nd->n", xs[i] - xs[j], xs[i] - xs[j]) <= r2
            linked[sel] = np.logical_or.reduceat(close, np.concatenate([[0], np.cumsum(p)[:-1]]))
            lo = hi
        trees: dict[int, cKDTree] = {}
        for q in np.nonzero(prod > 4096)[0]:
            ca, cb = int(a[q]), int(b[q])
            if counts[ca] < counts[cb]:
                ca, cb = cb, ca                 # query the smaller cube against the larger one's tree
            if ca not in trees:
                trees[ca] = cKDTree(xs[starts[ca]:starts[ca] + counts[ca]])
            dist, _ = trees[ca].query(xs[starts[cb]:starts[cb] + counts[cb]], k=1, distance_upper_bound=chord)
            linked[q] = bool(np.any(dist <= chord))
    e = cand[linked]
    g = coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(C, C))
    _, comp = connected_components(g, directed=False)
    return comp[inv]


def single_linkage_clusters(x: np.ndarray, w: np.ndarray, radius: float, near: tuple | None = None
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Single-linkage clusters of weighted unit vectors at geodesic distance <= radius.

    Returns (centres (k, d), masses (k,), labels (N,)), heaviest cluster first; a centre is the
    normalised weighted mean of its members. Links are chord distances <= 2 sin(radius/2) (the same
    relation as geodesic <= radius on the sphere); components are found on a grid of cubes that
    are cliques of the link graph, so memory stays O(N) even when clusters have collapsed (where the
    number of linked pairs is O(N^2)). ``near``: :func:`circle_neighbour_chords` of x when the caller has
    it (on S^1 the components come from that angular order).
    """
    x = np.asarray(x, dtype=float)
    w = np.asarray(w, dtype=float)
    n = x.shape[0]
    chord = 2.0 * np.sin(min(radius, np.pi) / 2.0) * (1 + 1e-12)
    labels = _linkage_labels(x, chord, near) if n else np.zeros(0, dtype=int)
    return _weighted_clusters(x, w, labels)


def greedy_arc_labels(x: np.ndarray, radius: float) -> np.ndarray:
    """Cluster labels (N,) of points on S^1 by the greedy-arc rule (module docstring, ``rule="paper"``),
    numbered along the circle from the largest gap. A cluster's arc a_last - a_first is <= ``radius``."""
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    if n == 0:
        return np.zeros(0, dtype=int)
    two_pi = 2.0 * np.pi
    theta = np.mod(np.arctan2(x[:, 1], x[:, 0]), two_pi)
    order = np.argsort(theta, kind="stable")
    a = theta[order]
    gaps = np.diff(np.concatenate([a, [a[0] + two_pi]]))
    start = (int(np.argmax(gaps)) + 1) % n
    lin = np.concatenate([a[start:], a[:start] + two_pi])
    # the walk visits clusters, not points: each cluster ends at the last angle <= its first + radius
    ends = []
    i = 0
    while i < n:
        i = int(np.searchsorted(lin, lin[i] + radius, side="right"))
        ends.append(i)
    along = np.repeat(np.arange(len(ends)), np.diff(np.concatenate([[0], ends])))
    labels = np.empty(n, dtype=int)
    labels[np.concatenate([order[start:], order[:start]])] = along
    return labels


def _weighted_clusters(x: np.ndarray, w: np.ndarray, labels: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(centres, masses, labels) of given labels, heaviest first (ties: by first appearance)."""
    _, first, labels = np.unique(labels, return_index=True, return_inverse=True)
    relabel_first = np.empty(len(first), dtype=int)
    relabel_first[np.argsort(first, kind="stable")] = np.arange(len(first))
    labels = relabel_first[labels.reshape(-1)]
    k = len(first)
    masses = np.bincount(labels, weights=w, minlength=k)
    sums = np.zeros((k, x.shape[1]))
    np.add.at(sums, labels, w[:, None] * x)
    nrm = np.linalg.norm(sums, axis=1, keepdims=True)
    centres = np.where(nrm > 0, sums / np.where(nrm > 0, nrm, 1.0), x[np.unique(labels, return_index=True)[1]])
    order = np.argsort(-masses, kind="stable")
    relabel = np.empty(k, dtype=int)
    relabel[order] = np.arange(k)
    return centres[order], masses[order], relabel[labels]


def clusters(x: np.ndarray, w: np.ndarray, radius: float, rule: str = "linkage"
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clusters of weighted unit vectors at geodesic radius ``radius`` by ``rule`` ("linkage" or "paper",
    see the module docstring): (centres (k, d), masses (k,), labels (N,)), heaviest first; a centre is the
    normalised weighted mean of its members."""
    if rule not in CLUSTER_RULES:
        raise ValueError(f"cluster rule must be one of {CLUSTER_RULES}, got {rule!r}")
    x = np.asarray(x, dtype=float)
    if rule == "paper" and x.ndim == 2 and x.shape[1] == 2:
        return _weighted_clusters(x, np.asarray(w, dtype=float), greedy_arc_labels(x, radius))
    return single_linkage_clusters(x, w, radius)


def arc_extent(theta: np.ndarray) -> float:
    """Length (radians) of the shortest arc of the circle that holds every angle ``theta``: 2 pi minus the
    largest gap between neighbouring angles (0 for fewer than two)."""
    theta = np.asarray(theta, dtype=float)
    if theta.size < 2:
        return 0.0
    a = np.sort(np.mod(theta, 2.0 * np.pi))
    return float(2.0 * np.pi - np.diff(np.concatenate([a, [a[0] + 2.0 * np.pi]])).max())


def cluster_spread(x: np.ndarray, labels: np.ndarray) -> float:
    """The largest geodesic diameter (radians) of a cluster: max over clusters of the largest distance
    between two members (the released code's "spread"). On S^1 the arc a cluster spans
    (:func:`arc_extent`); on S^d an exact maximum over pairs, in blocks (O(n_c^2) per cluster)."""
    x = np.asarray(x, dtype=float)
    labels = np.asarray(labels)
    out = 0.0
    for k in np.unique(labels):
        xc = x[labels == k]
        if len(xc) < 2:
            continue
        if x.shape[1] == 2:
            out = max(out, arc_extent(np.arctan2(xc[:, 1], xc[:, 0])))
            continue
        lo = 1.0
        for s in range(0, len(xc), 2048):
            lo = min(lo, float((xc[s:s + 2048] @ xc.T).min()))
        out = max(out, float(np.arccos(np.clip(lo, -1.0, 1.0))))
    return out


def spread_within(x: np.ndarray, labels: np.ndarray, limit: float) -> bool:
    """Whether every cluster's geodesic diameter is <= ``limit`` (radians): ``cluster_spread(x, labels) <=
    limit``, decided first from the distances to one member (r0: the diameter lies in [r0, 2 r0]), so
    that the O(n_c^2) maximum over pairs is computed only for clusters where that does not decide."""
    x = np.asarray(x, dtype=float)
    labels = np.asarray(labels)
    if x.shape[1] == 2:
        return cluster_spread(x, labels) <= limit
    for k in np.unique(labels):
        xc = x[labels == k]
        if len(xc) < 2:
            continue
        r0 = float(np.arccos(np.clip((xc @ xc[0]).min(), -1.0, 1.0)))
        if r0 > limit:
            return False
        if 2.0 * r0 > limit and cluster_spread(xc, np.zeros(len(xc), dtype=int)) > limit:
            return False
    return True
