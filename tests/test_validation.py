"""Particles -> PDE: quadrature particles follow the PDE until it loses resolution, i.i.d. particles
converge like N^{-1/2}, atoms of both solvers match, and the ``attnpde validate`` command."""
import math
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from solvers import Model, Perceptron, compare, simulate_particles, solve_pde
from solvers.comparison import common_atoms
from solvers.app.config import initial_density
from solvers.pde_circle import CircleSpace
from solvers.pde_sphere import SphereSpace
from solvers.app.archive import load
from solvers.app.validate import fit_slope

ROOT = Path(__file__).resolve().parents[1]


# --- cap masses: exact against closed forms ------------------------------------------------------------
def test_cap_mass_is_exact_for_closed_forms():
    # S^1: rho = 1 + 2a cos(theta - phi) (c_1 = a e^{-i phi}); mass of the arc |theta - p| <= r is
    # (2r + 4a sin(r) cos(p - phi)) / (2 pi)
    a, phi = 0.3, 0.7
    c = np.zeros(8, dtype=complex)
    c[0], c[1] = 1.0, a * np.exp(-1j * phi)
    for p_ang in (0.0, 2.9, -3.1):
        p = np.array([[math.cos(p_ang), math.sin(p_ang)]])
        for r in (0.05, 1.0, 3.0):
            exact = (2 * r + 4 * a * math.sin(r) * math.cos(p_ang - phi)) / (2 * math.pi)
            assert abs(CircleSpace.cap_mass(c, p, r)[0] - exact) < 1e-14
    # S^2: rho = 1 + b z (c_10 = b sqrt(4 pi / 3)); cap of radius r about the pole z = +-1:
    # (1/2) ∫_{cos r}^1 (1 +- b t) dt
    b = 0.6
    c = np.zeros(SphereSpace.ncoef(4), dtype=complex)
    c[0] = math.sqrt(4 * math.pi)
    deg = SphereSpace.harmonic_degree(4)
    c[np.nonzero(deg == 1)[0][0]] = b * math.sqrt(4 * math.pi / 3)     # canonical (l=1, m=0) first
    for sgn in (1.0, -1.0):
        p = np.array([[0.0, 0.0, sgn]])
        for r in (0.05, 1.0, 3.0):
            z0 = math.cos(r)
            exact = 0.5 * ((1 - z0) + sgn * b * (1 - z0 * z0) / 2)
            assert abs(SphereSpace.cap_mass(c, p, r)[0] - exact) < 1e-14


# --- quadrature particles (The model §3.6) ----------------------------------------------------------------------
@pytest.mark.slow
def test_quadrature_particles_follow_the_circle_pde_until_it_loses_resolution():
    """While the PDE's spectral tail is small, N = 16384 quadrature particles agree with it in every
    Fourier mode to 1e-9 (MMD 1e-10); once it runs at its maximal resolution with a growing tail, the
    high modes part — and the PDE says so (stop_reason "resolution")."""
    model = Model(2, 4.0, "ascent", perceptron=Perceptron.random(2, 2, "gelu", 1.0, seed=111))
    pde = solve_pde(model, 8.0, 32, save_every=0.25, max_degree=512, tail_tol=1e-12, tail_max=1e-3,
                    rtol=1e-10, atol=1e-12, continuation="none")
    assert pde.stop_reason == "resolution"
    t_end = math.floor(pde.t_stop / 0.25) * 0.25
    parts = simulate_particles(model, 16384, t_final=t_end, init="quadrature", integrator="rk4", dt=0.0025,
                               save_every=0.25)
    cmp = compare(pde, parts, moments=511)
    tail = np.array([pde.tail[int(np.argmin(np.abs(pde.t - t)))] for t in cmp.t])
    resolved = tail <= 1e-8
    assert resolved.sum() >= 4 and (~resolved).any()
    assert cmp.moment_gap[resolved].max() < 1e-9
    assert cmp.mmd[resolved].max() < 1e-10
    assert cmp.moment_gap[-1] > 100 * cmp.moment_gap[resolved].max()     # lost with the resolution
    # W1 of N point masses to a density cannot be small: it stays at its floor pi / (2N)
    assert np.allclose(cmp.w1[1:], math.pi / (2 * 16384), rtol=1e-3)


@pytest.mark.parametrize("attention", ["unnormalized", "normalized"])
def test_quadrature_particles_follow_the_sphere_pde(attention):
    """The Eulerian S^2 solver throughout (no node continuation, which would be the particles' own method):
    measured gaps 1.6e-11 (USA) and 4.4e-11 (SA) at t = 0.5."""
    model = Model(3, 2.0, "ascent", attention=attention,
                  perceptron=Perceptron.random(3, 3, "gelu", 1.0, seed=111))
    pde = solve_pde(model, 0.5, 15, save_every=0.25, max_degree=31, tail_tol=1e-12, tail_max=1e-3,
                    rtol=1e-10, atol=1e-12, continuation="none")
    assert pde.stop_reason == "t_final" and pde.lagrangian is None
    parts = simulate_particles(model, 4050, t_final=0.5, init="quadrature", integrator="rk4", dt=0.01,
                               save_every=0.25)
    cmp = compare(pde, parts, moments=8)
    assert cmp.t.size == 3
    assert cmp.moment_gap.max() < 1e-9 and cmp.mmd.max() < 1e-9
    assert cmp.energy_gap.max() < 1e-9


# --- i.i.d. particles: N^{-1/2} ---------------------------------------------------------------------------
# Attention strong enough, and the time long enough, that the particles' attention matters at the largest N:
# its effect on rho_t must exceed the sampling error there, or particles without attention would fit the
# slope as well (at gamma = 1, t = 0.5 they did). On S^1 the MMD between the PDE with and without attention is
# 0.060 at t = 1 (0.0072 at gamma = 1, t = 0.5), against a sampling MMD of ~0.008 at N = 10^4. Particles with
# 0, 0.5 or 0.8 times their attention field fail the slope on S^1 and S^2 (MMD slopes -0.06 to -0.37).
STRENGTH, T_IID = 4.0, 1.0


@pytest.mark.slow
@pytest.mark.parametrize("d, ns, seeds", [(2, (100, 1000, 10000), 8), (3, (100, 400, 1600, 6400), 6)])
def test_iid_particles_converge_like_inverse_sqrt_n(d, ns, seeds):
    mu = [1.0, 0.0] if d == 2 else [0.0, 0.0, 1.0]
    rho0 = initial_density({"kind": "von_mises", "mu": mu, "kappa": 1.0}, d)
    model = Model(d, 4.0, "ascent", strength=STRENGTH, perceptron=Perceptron.random(d, d, "gelu", 1.0, seed=111))
    pde = solve_pde(model, T_IID, 32 if d == 2 else 15, initial=rho0, save_every=T_IID)
    assert pde.stop_reason == "t_final" and pde.lagrangian is None      # resolved: K 32 -> 512, L 15 -> 120
    dist = {k: [] for k in ("mmd", "moment_gap", "w1")}
    for n in ns:
        per = {k: [] for k in dist}
        for s in range(seeds):
            p = simulate_particles(model, n, t_final=T_IID, density=rho0, seed=100 + s, integrator="rk4", dt=0.05,
                                   save_every=T_IID)
            c = compare(pde, p)
            for k in per:
                v = getattr(c, k)
                if v is not None:
                    per[k].append(v[-1])
        for k in dist:
            dist[k].append(np.mean(per[k]) if per[k] else np.nan)
    for k in ("mmd", "moment_gap") + (("w1",) if d == 2 else ()):
        slope = fit_slope(np.array(ns), np.array(dist[k]))
        assert -0.6 <= slope <= -0.4, (k, slope, dist[k])


# --- atoms of both solvers ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_atoms_of_pde_and_particles_match_in_circle_ascent():
    """ReLU ascent from uniform data (beta = 4): the PDE concentrates until it loses resolution; the
    particles, run to the same time, hold the same atoms: same count, positions within the PDE's grid
    spacing, masses within 0.02."""
    model = Model(2, 4.0, "ascent", perceptron=Perceptron.random(2, 2, "relu", 1.0, seed=111))
    pde = solve_pde(model, 10.0, 128, save_every=0.25, max_degree=2048, tail_max=1e-2, continuation="none")
    assert pde.stop_reason == "resolution"
    t_end = math.floor(pde.t_stop / 0.25) * 0.25
    parts = simulate_particles(model, 20000, t_final=t_end, integrator="rk4", dt=0.01, save_every=0.25, seed=3)
    cmp = compare(pde, parts)
    pa, qa = common_atoms(CircleSpace, pde.coefficients(int(np.argmin(np.abs(pde.t - t_end)))), parts.x[-1],
                          parts.w, radius=cmp.options["atom_radius"], smoothing=cmp.options["smoothing"])
    assert len(pa) >= 1 and len(pa) == len(qa) == len(cmp.matched_atoms)
    assert not cmp.unmatched_pde and not cmp.unmatched_particles
    spacing = 2 * math.pi / int(pde.degree[-1])
    for pair in cmp.matched_atoms:
        assert pair["position_error"] <= spacing
        assert abs(pair["mass_difference"]) <= 0.02
        assert pair["pde_mass"] > 0.2                                # a real atom, not background


@pytest.mark.slow
def test_atoms_of_pde_and_particles_match_in_circle_descent_with_explicit_filter():
    """ReLU descent (beta = 1): mass piles up against the dead-zone boundaries, behind a jump of the
    density. With the explicit exponential filter (recorded in the result) the PDE follows the piles
    until they are narrower than its grid; the particles hold the same two atoms, and the same mass
    stays in the dead zone (every unit inactive: no perceptron drift there)."""
    filt = {"kind": "exponential", "alpha": 36.0, "order": 16}
    perceptron = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    model = Model(2, 1.0, "descent", perceptron=perceptron)
    pde = solve_pde(model, 10.0, 128, save_every=0.25, max_degree=2048, tail_max=1e-2, positivity_tol=0.1,
                    filter=filt, continuation="none")
    assert pde.options["filter"]["order"] == 16
    assert pde.stop_reason in ("positivity", "resolution") and pde.t_stop > 2.0
    t_end = math.floor(pde.t_stop / 0.25) * 0.25
    parts = simulate_particles(model, 20000, t_final=t_end, integrator="rk4", dt=0.01, save_every=0.25, seed=3)
    cmp = compare(pde, parts)
    assert len(cmp.matched_atoms) == 2 and not cmp.unmatched_pde and not cmp.unmatched_particles
    spacing = 2 * math.pi / int(pde.degree[-1])
    for pair in cmp.matched_atoms:
        assert pair["position_error"] <= spacing
        assert abs(pair["mass_difference"]) <= 0.02
        assert pair["pde_mass"] > 0.2
    i = int(np.argmin(np.abs(pde.t - t_end)))
    pts, wts, rho = CircleSpace.quadrature(pde.coefficients(i))
    dead = lambda x: np.all(x @ perceptron.a.T <= 0.0, axis=1)    # noqa: E731
    assert abs(float((rho * wts)[dead(pts)].sum()) - float(parts.w[dead(parts.x[-1])].sum())) < 0.02


@pytest.mark.slow
def test_atoms_of_pde_and_particles_match_in_sphere_descent():
    """ReLU descent on S^2 (beta = 1): the filtered PDE runs to its cap (L = 255) at t ~ 2, when its two
    atoms are forming; the particles (N = 2e4) hold the same two, within the PDE grid spacing pi/(L+1)
    and 0.02 in mass. Pieces lighter than the mass tolerance (sampling-noise events at the detection
    threshold) are not required to have a partner."""
    filt = {"kind": "exponential", "alpha": 36.0, "order": 16}
    model = Model(3, 1.0, "descent", perceptron=Perceptron.random(3, 3, "relu", 1.0, seed=111))
    pde = solve_pde(model, 10.0, 31, save_every=0.25, max_degree=255, tail_max=1e-2, positivity_tol=0.1,
                    filter=filt, continuation="none")
    assert pde.stop_reason in ("positivity", "resolution") and pde.t_stop > 1.5
    t_end = math.floor(pde.t_stop / 0.25) * 0.25
    parts = simulate_particles(model, 20000, t_final=t_end, integrator="rk4", dt=0.025, save_every=0.25, seed=3)
    cmp = compare(pde, parts)
    heavy, heavy_up, heavy_uq = cmp.heavy_atoms(0.02)
    assert len(heavy) == 2 and not heavy_up and not heavy_uq
    spacing = math.pi / (int(pde.degree[-1]) + 1)
    for pair in heavy:
        assert pair["position_error"] <= spacing
        assert abs(pair["mass_difference"]) <= 0.02
        assert pair["pde_mass"] > 0.03


# --- the command -----------------------------------------------------------------------------------------
VALIDATE_CFG = """
[run]
name = "v"
[model]
d = 2
beta = 4.0
flow = "ascent"
[model.perceptron]
units = 2
activation = "gelu"
seed = 111
[initial]
kind = "von_mises"
mu = [1.0, 0.0]
kappa = 1.0
[pde]
degree = 32
t_final = 0.5
save_every = 0.25
[particles]
n = 10
seed = 5
integrator = "rk4"
dt = 0.05
t_final = 0.5
save_every = 0.25
[compare]
moments = 4
"""


@pytest.mark.slow
def test_validate_command_writes_table_archive_and_figure(tmp_path):
    cfg = tmp_path / "v.toml"
    cfg.write_text(VALIDATE_CFG)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = lambda *a: subprocess.run([sys.executable, "-m", "solvers.app.cli", *map(str, a)], cwd=ROOT, env=env,
                                    capture_output=True, text=True, timeout=300)
    r = run("validate", cfg, "--n", "50,200,800", "--seeds", "2", "--workers", "2")
    assert r.returncode == 0, r.stderr
    assert "slope" in r.stdout and "w1" in r.stdout
    out = tmp_path / "v_validation.h5"
    res = load(out).validation
    assert list(res.n) == [50, 200, 800] and list(res.seeds) == [5, 6]
    assert res.distances["mmd"].shape == (3, 2, 3) and np.all(res.distances["mmd"][:, :, 1:] > 0)
    with h5py.File(out) as f:
        assert f["pde/t"].shape[0] == 3 and f.attrs["status"] == "finished"
        assert f["validation/mmd"].dims[2][0] == f["validation/t"]
    assert (tmp_path / "v_validation.png").stat().st_size > 10_000
    info = run("info", out)
    assert info.returncode == 0 and "validation: particles -> PDE" in info.stdout
    again = run("validate", cfg, "--n", "50")
    assert again.returncode == 2 and "exists" in again.stderr
    bad = run("validate", cfg, "--n", "50,x")
    assert bad.returncode == 2 and "'x' is not a number" in bad.stderr
    bad = run("validate", cfg, "--n", "0.5", "--force")
    assert bad.returncode == 2 and "integers >= 1" in bad.stderr


def test_a_fit_time_between_snapshots_is_fitted_at_the_nearest_and_says_so():
    """--at between two common snapshot times: the slopes are those of the nearest snapshot (distances
    decaying like N^-1/2 there give slope -1/2), and the table says which time it used and why."""
    from solvers.app.validate import METRICS, _assemble
    t, ns = np.array([0.0, 0.25, 0.5]), [100, 400, 1600]
    # at t = 0.25 the distances fall like N^-1/2, at t = 0.5 like N^-1: the slope tells which was used
    results = [{"t": t, "n": n, "seed": 0, **{k: np.array([1.0, n ** -0.5, n ** -1.0]) for k in METRICS}}
               for n in ns]
    near = _assemble(results, ns, [0], at=0.33)
    assert near.at == 0.25 and all(abs(v + 0.5) < 1e-12 for v in near.slopes.values())
    assert "--at 0.33 is not a snapshot time: the nearest common snapshot is used" in near.table
    exact = _assemble(results, ns, [0], at=0.5)
    assert exact.at == 0.5 and all(abs(v + 1) < 1e-12 for v in exact.slopes.values())
    assert "not a snapshot time" not in exact.table


# --- atoms of a PDE density beside a jump ---------------------------------------------------------------
def test_gibbs_oscillations_beside_a_jump_are_not_atoms():
    """rho = truncated Fourier series of a density shaped like a ReLU descent state (a ramp rising to
    just below the threshold 10 that drops to the background at a dead-zone boundary) plus a sharp
    von Mises peak: beside the jump the series overshoots above the threshold; the only concentrated
    piece is the peak."""
    K = 1024
    th = 2 * np.pi * np.arange(16 * K) / (16 * K)
    ramp = np.where((th > 1.0) & (th < 2.0), 60.0 * (th - 1.0) ** 2, 0.0)
    vm = np.exp(400.0 * (np.cos(th - 4.5) - 1))
    dens = 1.0 + ramp + 2.0 * vm / vm.mean()
    dens /= dens.mean()
    assert dens[(th > 1.0) & (th < 2.0)].max() < 10.0
    c = np.fft.rfft(dens)[:K] / dens.size
    raw = CircleSpace.atoms(c, threshold=10.0, smoothing=None)
    ang = np.mod(np.arctan2(raw.positions[:, 1], raw.positions[:, 0]), 2 * np.pi)
    # without smoothing the overshoot passes for an atom (its ripples, each a local maximum, are one piece
    # by persistence: the dips between them are shallower than 10% of their height)
    assert np.sum(np.abs(ang - 2.0) < 0.05) >= 1
    at = CircleSpace.atoms(c, threshold=10.0)
    assert len(at) == 1
    assert abs(np.mod(np.arctan2(at.positions[0, 1], at.positions[0, 0]), 2 * np.pi) - 4.5) < 1e-3


def test_terminal_atoms_tells_chained_atoms_from_a_different_atomic_state():
    # particles: 2000 at theta = 0 and 2000 at theta = 0.6 (the PDE's two atoms), chained by 20 stray
    # particles 0.03 apart (mass 0.004 outside the caps), and 400 at theta = 2.5 where the PDE has no atom.
    # Single linkage at 0.1 rad makes one cluster of both atoms and the strays, which pairs with neither
    # atom, and one of the 400: only the latter is a different atomic state
    from solvers.atoms import Atoms
    from solvers.comparison import terminal_atoms

    th = np.concatenate([np.zeros(2000), np.full(2000, 0.6), 0.015 + 0.03 * np.arange(20), np.full(400, 2.5)])
    th += 1e-4 * np.random.default_rng(0).standard_normal(th.size)
    x = np.stack([np.cos(th), np.sin(th)], axis=1)
    w = np.full(th.size, 1.0 / th.size)
    atoms = Atoms(np.array([[1.0, 0.0], [math.cos(0.6), math.sin(0.6)]]), np.array([0.45, 0.45]))
    r = terminal_atoms(atoms, x, w, 0.1, cap=0.05, min_mass=0.01)
    assert np.allclose(r["cap_masses"], [2002 / th.size] * 2)      # two strays (0.015, 0.045) in each cap
    assert len(r["outside"]) == 1
    centre, mass = r["outside"][0]
    assert mass == pytest.approx(400 / th.size, abs=1e-12)
    assert abs(math.atan2(centre[1], centre[0]) - 2.5) < 1e-3
    assert len(r["unmatched_particles"]) == 2 and len(r["unmatched_pde"]) == 2      # the chain pairs with neither
