"""Smoke test of scripts/bench: quick mode runs every section and writes records of the common form.

Only the form of the records is checked, never a timing.
"""
import importlib.machinery
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"case", "seconds", "floor_seconds", "ratio", "target", "met"}


def _bench():
    loader = importlib.machinery.SourceFileLoader("attnpde_bench", str(ROOT / "scripts" / "bench"))
    spec = importlib.util.spec_from_loader("attnpde_bench", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_quick_bench_writes_records_of_the_common_form(tmp_path, capsys):
    bench = _bench()
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--json", str(out)]) == 0
    records = json.loads(out.read_text())
    assert isinstance(records, list) and records
    for r in records:
        assert KEYS <= set(r), r
        assert isinstance(r["case"], str) and r["case"]
        assert isinstance(r["target"], str) and r["target"]
        assert r["met"] in (True, False, None)
        for k in ("seconds", "floor_seconds", "ratio"):
            assert r[k] is None or (isinstance(r[k], float) and r[k] > 0), (k, r)
    assert all(r["met"] is None for r in records)            # quick mode: no target applies
    cases = " | ".join(r["case"] for r in records)
    for word in ("circle PDE RHS", "sphere PDE RHS", "whole PDE run S^1", "whole PDE run S^2",
                 "S^1 particle velocity", "S^2 particle velocity", "peak memory", "archive overhead"):
        assert word in cases, word
    # the looser sum_tol's record: its sums within the 1e-10 of the direct ones, and so the default's
    loose = next(r for r in records if "sum_tol=" in r["case"])
    assert loose["error_default"] <= loose["error_loose"] <= 1e-10
    # the archive's record carries its HDF5 floor (the same snapshots as the plainest file), a fraction of the run
    arch = next(r for r in records if "archive overhead" in r["case"])
    assert arch["hdf5_floor_seconds"] > 0 and arch["hdf5_floor_fraction"] > 0
    mem = next(r for r in records if "peak memory" in r["case"])
    assert mem["peak_gib"] > 0
    # the printed table has one line per record (plus notes)
    printed = capsys.readouterr().out
    assert all(r["case"] in printed for r in records)
