"""``attnpde extremum``: the /extremum group (read back into the same Extremum, its model re-run to the same
numbers), the figure, a run archive's certified end compared, refusals."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from solvers import extremum
from solvers.app.cli import main
from solvers.app.extremum_cmd import read_extremum

CONFIG = """
[run]
name = "ex"
[model]
d = {d}
beta = {beta}
flow = "{flow}"
{extra}
[model.perceptron]
units = {d}
activation = "{activation}"
scale = 1.0
seed = 111
[pde]
degree = {degree}
t_final = {t_final}
"""


def _write(tmp_path, d=2, beta=5.0, flow="descent", activation="relu", extra="", degree=64, t_final="10.0",
           name="ex.toml"):
    p = tmp_path / name
    p.write_text(CONFIG.format(d=d, beta=beta, flow=flow, activation=activation, extra=extra, degree=degree,
                               t_final=t_final))
    return p


@pytest.mark.parametrize("d,flow", [(2, "descent"), (3, "ascent")])
def test_the_command_writes_the_group_and_the_figure_and_the_model_reruns(tmp_path, capsys, d, flow):
    cfg = _write(tmp_path, d=d, flow=flow, degree=64 if d == 2 else 16)
    assert main(["extremum", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "E* =" in out and "gap" in out and "(group /extremum)" in out
    path = tmp_path / "ex.h5"
    assert (tmp_path / "ex_extremum.png").stat().st_size > 0
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == "attnpde-extremum" and "extremum/model" in f
    ext, end = read_extremum(path)
    assert end is None
    again = extremum(ext.model)                       # the stored model, run again: the same numbers
    assert again.kind == ext.kind and again.energy == ext.energy and again.gap == ext.gap
    np.testing.assert_array_equal(again.positions, ext.positions)
    np.testing.assert_array_equal(again.masses, ext.masses)
    assert ext.gap <= 1e-12


@pytest.mark.parametrize("extra,message", [('attention = "normalized"', "normalised attention"),
                                           ("noise = 0.5", "noise")])
def test_unsupported_models_are_refused_in_one_line(tmp_path, capsys, extra, message):
    cfg = _write(tmp_path, extra=extra)
    assert main(["extremum", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_an_output_that_is_not_an_attnpde_file_is_refused(tmp_path, capsys):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.attrs["format"] = "something else"
    assert main(["extremum", str(_write(tmp_path)), "--out", str(other)]) == 2
    assert "neither an attnpde run archive" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_archive_gains_the_group_and_the_comparison_with_its_certified_end(tmp_path, capsys):
    """S3 (descent, GeLU) at beta = 5 on the circle: the flow ends certified in two atoms whose masses are set by
    their basins, above the minimum by more than the end's error bars allow."""
    cfg = _write(tmp_path, activation="gelu", degree=128, t_final="inf")
    assert main(["run", str(cfg), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["extremum", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "end vs global minimum" in out
    ext, end = read_extremum(tmp_path / "ex.h5")
    assert end is not None and end["energy_gap"] > end["energy_error"] and not end["is_global"]
    assert main(["info", str(tmp_path / "ex.h5")]) == 0              # the run archive still reads whole
