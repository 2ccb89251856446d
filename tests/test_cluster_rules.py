"""The released code's clustering rule (``rule="paper"``) against a direct transcription of that code.

The transcriptions below follow ``wgf_circle/analysis.py::_cluster_sizes`` and
``wgf_sphere/analysis_S2.py::cluster_masses_s2`` of antonioalvarezl/2026-MLP-Attention-Energy line by line
(angles on S^1, points on S^2, a threshold in radians; masses = cluster sizes / n, heaviest first). The
final states are generated here: particle runs of the model (Euler dt = 0.1 with the stopping rule, as
the paper's protocol) and constructed states where the two rules must differ.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

from solvers import Model, Perceptron, simulate_particles
from solvers.atoms import cluster_spread, clusters, greedy_arc_labels
from solvers.particles import cluster_radius

TWO_PI = 2.0 * np.pi


# --- the released code, transcribed ------------------------------------------------------------------
def released_sizes_s1(theta: np.ndarray, threshold: float) -> np.ndarray:
    if theta.size == 0:
        return np.array([], dtype=int)
    if threshold <= 0.0:
        return np.ones(theta.size, dtype=int)
    if threshold >= TWO_PI:
        return np.array([theta.size], dtype=int)
    angles = np.sort(theta % TWO_PI)
    gaps = np.diff(angles)
    wrap_gap = (angles[0] + TWO_PI) - angles[-1]
    gaps = np.concatenate([gaps, [wrap_gap]])
    start_idx = (int(np.argmax(gaps)) + 1) % angles.size
    linear = np.concatenate([angles[start_idx:], angles[:start_idx] + TWO_PI])
    sizes = []
    cluster_start = linear[0]
    count = 1
    for angle in linear[1:]:
        if angle - cluster_start <= threshold:
            count += 1
        else:
            sizes.append(count)
            cluster_start = angle
            count = 1
    sizes.append(count)
    return np.asarray(sizes, dtype=int)


def released_masses_s2(points: np.ndarray, threshold: float) -> np.ndarray:
    n = points.shape[0]
    norms = np.linalg.norm(points, axis=1, keepdims=True)
    points = points / np.where(norms > 0.0, norms, 1.0)
    chord = 2.0 * np.sin(0.5 * threshold)
    neighbors = cKDTree(points).query_ball_point(points, r=chord)
    visited = np.zeros(n, dtype=bool)
    sizes = []
    for idx in range(n):
        if visited[idx]:
            continue
        stack = [idx]
        visited[idx] = True
        size = 0
        while stack:
            current = stack.pop()
            size += 1
            for nbr in neighbors[current]:
                if not visited[nbr]:
                    visited[nbr] = True
                    stack.append(nbr)
        sizes.append(size)
    return np.sort(np.array(sizes, dtype=float) / n)[::-1]


def released_masses(x: np.ndarray, threshold: float) -> np.ndarray:
    if x.shape[1] == 2:
        sizes = released_sizes_s1(np.arctan2(x[:, 1], x[:, 0]), threshold)
        return np.sort(sizes / x.shape[0])[::-1]
    return released_masses_s2(x, threshold)


# --- final states --------------------------------------------------------------------------------------
def _final_state(d: int, beta: float, flow: str, seed: int) -> tuple[np.ndarray, float]:
    model = Model(d=d, beta=beta, flow=flow, perceptron=Perceptron.random(d, d, activation="relu", seed=111))
    r = simulate_particles(model, n=300, init="random", seed=seed, integrator="euler", dt=0.1,
                           stop={"rule": "paper"}, max_steps=3000)
    return r, cluster_radius(beta, d, 0.5)


@pytest.mark.parametrize("d,beta,flow,seed", [(2, 4.0, "ascent", 1), (2, 25.0, "descent", 2),
                                              (3, 9.0, "descent", 3), (3, 4.0, "ascent", 4)])
def test_paper_rule_matches_the_released_code_on_particle_runs(d, beta, flow, seed):
    r, radius = _final_state(d, beta, flow, seed)
    for i in range(len(r.t)):          # every snapshot: early (spread out) and final (clustered) states
        _, masses = r.clusters(i, scale=0.5, rule="paper")
        want = released_masses(r.x[i], radius)
        assert len(masses) == len(want)
        np.testing.assert_allclose(np.sort(masses)[::-1], want, rtol=0, atol=1e-12)
        assert r.cluster_count[i] == len(want)          # the stopping rule counted with the same rule


def test_paper_rule_on_constructed_states():
    rng = np.random.default_rng(5)
    r = 0.1
    # a chain with spacing 0.06 over 1.2 rad: one linkage cluster; greedy arcs of length <= r
    th = np.concatenate([np.arange(0, 1.2, 0.06), rng.uniform(3.0, 3.02, 7), [6.27, 0.01 - TWO_PI]])
    x = np.stack([np.cos(th), np.sin(th)], axis=1)
    w = np.full(len(th), 1.0 / len(th))
    _, m_link, _ = clusters(x, w, r, "linkage")
    _, m_paper, labels = clusters(x, w, r, "paper")
    want = released_masses(x, r)
    np.testing.assert_allclose(m_paper, want, atol=1e-12)
    assert len(m_paper) > len(m_link)                     # linkage chains the arc; the greedy arcs split it
    assert cluster_spread(x, labels) <= r + 1e-12
    # clumps across the cut at 0 / 2 pi stay whole (the walk starts after the largest gap)
    th = np.concatenate([rng.normal(0.0, 0.01, 40), rng.normal(2.0, 0.01, 30)])
    x = np.stack([np.cos(th), np.sin(th)], axis=1)
    _, m, _ = clusters(x, np.full(70, 1 / 70), r, "paper")
    np.testing.assert_allclose(m, [40 / 70, 30 / 70])
    np.testing.assert_allclose(m, released_masses(x, r))
    # on S^2 the rule is components at the geodesic threshold
    y = rng.normal(size=(400, 3)) * [1, 1, 8]
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    _, m, _ = clusters(y, np.full(400, 1 / 400), 0.15, "paper")
    np.testing.assert_allclose(m, released_masses_s2(y, 0.15), atol=1e-12)


def test_greedy_arcs_are_arcs_of_at_most_the_radius():
    rng = np.random.default_rng(0)
    th = rng.uniform(0, TWO_PI, 2000)
    x = np.stack([np.cos(th), np.sin(th)], axis=1)
    labels = greedy_arc_labels(x, 0.3)
    for k in np.unique(labels):
        a = th[labels == k]
        assert cluster_spread(x[labels == k], np.zeros(a.size, int)) <= 0.3 + 1e-12
    assert len(np.unique(labels)) == len(released_sizes_s1(th, 0.3))


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="rule"):
        clusters(np.eye(2), np.ones(2), 0.1, "single")
    with pytest.raises(ValueError, match="rule"):
        simulate_particles(Model(d=2, beta=1.0, flow="ascent"), n=10, t_final=1.0, dt=0.1, stop={"rule": "greedy"})


# --- single linkage on S^1 by angular neighbours -----------------------------------------------------------
def _brute_components(x: np.ndarray, chord: float) -> np.ndarray:
    """Components of {|x_i - x_j| <= chord} from every pair (the definition)."""
    from scipy.sparse.csgraph import connected_components
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    return connected_components(d2 <= chord * chord, directed=False)[1]


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_circle_linkage_and_closest_chord_by_neighbours_match_every_pair():
    """On S^1 single linkage runs along the angular order and the closest chord is a neighbours' chord
    (atoms.circle_neighbour_chords). Against the definition (all pairs) on random clustered sets: clusters
    straddling the angle +-pi, ties, chords exactly at the link chord (left to the general search), a whole
    circle linked, and points off the circle (the general search)."""
    from solvers import atoms, lagrangian

    rng = np.random.default_rng(7)
    by_neighbours = 0
    for trial in range(400):
        n = int(rng.integers(2, 300))
        centres = rng.uniform(-np.pi, np.pi, int(rng.integers(1, 8)))
        if trial % 4 == 0:
            centres[0] = np.pi                                  # a cluster across the cut of arctan2
        th = centres[rng.integers(0, len(centres), n)] + rng.normal(0.0, 10 ** rng.uniform(-5, -1), n)
        if trial % 5 == 0:
            th = np.round(th, 2)                                # coincident points
        tol = 10 ** rng.uniform(-4, 0.3)
        if trial % 7 == 0:
            th[1] = th[0] + tol                                 # a pair at the link distance
        x = np.stack([np.cos(th), np.sin(th)], axis=1)
        if trial % 9 == 0:
            x *= 1.0 + 1e-6 * rng.standard_normal((n, 1))      # off the circle: not by neighbours
        chord = 2.0 * np.sin(min(tol, np.pi) / 2.0) * (1 + 1e-12)
        by_neighbours += atoms._circle_linkage_labels(x, chord) is not None
        assert _same_partition(atoms._linkage_labels(x, chord), _brute_components(x, chord)), trial
        d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
        np.fill_diagonal(d, np.inf)
        low = lagrangian._closest_chord(x)
        assert 0.0 <= d.min() - low <= 5e-15, trial                 # a lower bound, a few ulp below
    assert by_neighbours > 300


def test_circle_linkage_leaves_what_its_order_cannot_see_to_the_general_search():
    """Two sets where the angular order alone misjudges a link, so that the neighbours' method must hand over
    (``atoms._ambiguous``): a point 4.9e-13 off the circle (|x|^2 within the tolerance of 1e-12) between
    two points 2e-14 apart, which every pair links at 1e-13 but neighbours do not; and points 1e-16 apart
    at the angle pi, which share their arctan2 and sort out of order. The partitions are those of every
    pair, and the closest chord on the first is not overestimated (the merge's slack stays a lower bound)."""
    from solvers import atoms, lagrangian

    th = np.array([0.0, 1e-14, 2e-14, 2.0])
    r = np.array([1.0, 1.0 + 4.9e-13, 1.0, 1.0])
    off = np.stack([r * np.cos(th), r * np.sin(th)], axis=1)
    near_pi = np.array([[-1.0, 0.0], [-1.0, 2e-16], [-1.0, 1e-16], [1.0, 0.0]])
    for x, tol in ((off, 1e-13), (near_pi, 1.5e-16)):
        chord = 2.0 * np.sin(tol / 2.0) * (1 + 1e-12)
        assert _same_partition(atoms._linkage_labels(x, chord), _brute_components(x, chord))
    d = np.sqrt(((off[:, None, :] - off[None, :, :]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    assert lagrangian._closest_chord(off) <= d.min()
