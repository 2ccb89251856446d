"""Smoke test of scripts/studies/paper_protocol.py (--quick): the protocol runs end to end, writes its outputs,
and reproduces facts stated outside this code (the main paper §4; The model §5)."""
from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    # imported by name, so that the worker processes can unpickle its job function
    if str(ROOT / "scripts" / "studies") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts" / "studies"))
    mod = importlib.import_module("paper_protocol")
    out = tmp_path_factory.mktemp("paper_protocol")
    # the PDE of S2 at beta = 0.01 only (5 s of CPU): the terminal fields of the protocol's JSON
    assert mod.main(["--quick", "--betas", "0.01,5", "--n", "100", "--pde-betas", "0.01", "--pde-setups", "S2",
                     "--out", str(out)]) == 0
    return out, json.loads((out / "summary.json").read_text())


def rec(summary, setup, beta):
    return next(r for r in summary["records"] if r["setup"] == setup and r["beta"] == beta)


@pytest.mark.slow
def test_outputs_written(quick):
    out, summary = quick
    for name in ("clusters_vs_sqrt_beta.png", "cluster_masses.png", "final_states.png", "summary.json"):
        assert (out / name).stat().st_size > 0
    assert {r["setup"] for r in summary["records"]} == {"S1", "S1-0", "S2", "S3"}
    assert "Theorem 3.5" in summary["theorem_3_5"]
    for r in summary["records"]:
        assert math.isclose(sum(r["masses"]), 1.0, abs_tol=1e-9)
        assert r["stop_reason"] == "converged"


def test_pure_attention_at_small_beta_collapses_to_one_cluster(quick):
    # beta -> 0 is the Kuramoto limit: ascent synchronises everything (Geshkovski et al., "A mathematical perspective on Transformers"; the main paper §4, S1-0)
    _, summary = quick
    assert rec(summary, "S1-0", 0.01)["clusters"] == 1


def test_relu_descent_keeps_mass_frozen_in_the_dead_zone(quick):
    # the main paper §4: "a visible fraction of the mass remains trapped where the ReLU is identically zero"
    _, summary = quick
    r = rec(summary, "S2", 5.0)
    assert r["frozen_mass"] > 0.05
    assert rec(summary, "S3", 5.0)["frozen_mass"] is None      # GeLU has no dead zone


def test_descent_clusters_obey_the_theorem_3_5_bound(quick):
    # the main paper §3.2 / §4: in descent the heaviest cluster is bounded once beta is large enough
    _, summary = quick
    checked = 0
    for setup in ("S2", "S3"):
        r = rec(summary, setup, 5.0)
        assert r["bound_3_5"] < 1.0
        assert max(r["masses_greedy"]) <= r["bound_3_5"]
        checked += 1
        assert rec(summary, setup, 0.01)["bound_3_5"] > 1.0      # vacuous at small beta
    assert checked == 2
    assert rec(summary, "S1", 5.0)["bound_3_5"] is None           # ascent: no anti-concentration


def test_theorem_3_5_constants():
    if str(ROOT / "scripts" / "studies") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts" / "studies"))
    mod = importlib.import_module("paper_protocol")
    from scipy.stats import norm
    z = np.linspace(-8.0, 8.0, 1_600_001)
    assert math.isclose(mod.LIPSCHITZ["gelu"], np.abs(norm.cdf(z) + z * norm.pdf(z)).max(), rel_tol=1e-10)
    from solvers import Perceptron
    p = Perceptron(np.array([[1.0, 0.0], [0.0, 1.0]]), c=np.array([0.5, -2.0]), activation="relu")
    assert math.isclose(mod.theorem_3_5_constant(p), 2.0 * 2.5)       # sum |c_k| (1 + 1) for unit a_k
    assert math.isclose(mod.theorem_3_5_bound(60.0, p), 16.0 / (16.0 + 3.0 * math.exp(11.0 / 8.0)), rel_tol=1e-12)


def test_the_pde_run_ends_certified_with_its_terminal_fields(quick):
    """--pde-betas 0.01 --pde-setups S2: the PDE to its certified terminal state (t_final = inf), recorded with
    its atoms (masses ± the rerun's errors), verdict, growth, time certified and plateaus, beside the particles."""
    out, summary = quick
    assert summary["pde_settings"]["t_final"] == "inf" and summary["pde_settings"]["max_steps"] is None   # no cap
    (p,) = summary["pde"]
    assert (p["setup"], p["beta"]) == ("S2", 0.01)
    assert p["certified"] and p["status"] == "certified" and p["stop_reason"] == "stationary"
    T = p["terminal"]
    for key in ("t", "positions", "masses", "mass_errors", "verdict", "growth", "max_speed", "counts", "energy"):
        assert key in T
    assert T["verdict"] == "stable" and T["growth"] < 0 and T["max_speed"] <= 1e-10
    assert T["t"] == p["t_stop"] > 0
    assert math.isclose(sum(T["masses"]), 1.0, abs_tol=1e-12) and p["masses"] == T["masses"]
    assert len(T["mass_errors"]) == len(T["masses"]) == p["atoms"] and all(0 < e < 0.01 for e in T["mass_errors"])
    assert isinstance(p["plateaus"], list)
    for pl in p["plateaus"]:
        assert {"t_entered", "t_certified", "energy", "growth", "part", "kick"} <= set(pl)
    assert p["dead"] is not None and p["dead_mass"] is not None       # ReLU: the dead zone is looked at
    table = (out / "terminal_table.md").read_text()
    assert "| S2 | 0.01 | certified at t = " in table and "stable" in table
    # the particles' record carries the particle mass near each PDE atom
    assert len(rec(summary, "S2", 0.01)["near_pde_atoms"]) == sum(m >= 0.01 for m in p["masses"])

