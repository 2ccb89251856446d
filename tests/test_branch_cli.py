"""``attnpde branch``: the [branch] configuration, the /branch group of the archive (netCDF-4, read back into
the same Branch), resuming an interrupted branch to the same numbers, the diagram, ``attnpde info``."""
from __future__ import annotations

import contextlib

import h5py
import numpy as np
import pytest

from solvers.app import branch as app_branch
from solvers.app.branch import load_branch, load_branch_config, parse_branch_config, run_branch
from solvers.app.cli import main
from solvers.app.config import ConfigError

CONFIG = """
[run]
name = "b"
[model]
d = {d}
beta = 3.0
flow = "ascent"
[branch]
mode = 1
noise_range = [{lo}, {hi}]
degree = {degree}
max_points = 25
"""


def _write(tmp_path, d=2, lo=0.03, hi=0.07, degree=32, name="b.toml"):
    p = tmp_path / name
    p.write_text(CONFIG.format(d=d, lo=lo, hi=hi, degree=degree))
    return p


@pytest.mark.cpu_dependent
def test_branch_command_writes_the_archive_the_diagram_and_the_summary(tmp_path, capsys):
    """The summary prints the computed fold and transition digit for digit (both are computed here, so this
    holds on any CPU); the values are compared as numbers, to 1e-10, the nine digits the summary was always
    checked to: other kernels move them by about an ulp (docs/numerics.md, "Same answer on every machine"),
    far inside that bound."""
    cfg = _write(tmp_path)
    assert main(["branch", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "kind: subcritical" in out
    png = tmp_path / "b_branch.png"
    assert png.exists() and png.stat().st_size > 20000
    assert main(["info", str(tmp_path / "b.h5")]) == 0
    text = capsys.readouterr().out
    assert "branch: mode 1 (even, degree 32)" in text
    # the model's noise is the branch's parameter: its range, not the model's unused 0
    assert "noise: the branch's parameter, nu in [0.03, 0.07]" in text and "noise 0" not in text
    assert main(["plot", str(tmp_path / "b.h5"), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "figs" / "b_branch.png").exists()
    # the archive's branch is the one computed in Python
    from solvers import Model, branch_from_uniform
    b = branch_from_uniform(Model(2, 3.0, "ascent"), 1, 32, noise_range=(0.03, 0.07), max_points=25)
    r = load_branch(tmp_path / "b.h5")
    for key in ("noise", "amplitude", "projection", "free_energy", "stable", "unstable", "coeffs", "side"):
        np.testing.assert_array_equal(getattr(r, key), getattr(b, key), err_msg=key)
    assert (r.kind, r.threshold, r.transition, r.normal_form) == (b.kind, b.threshold, b.transition, b.normal_form)
    assert [f["nu"] for f in r.folds] == [f["nu"] for f in b.folds]
    assert f"fold at nu = {b.folds[0]['nu']:.10g}," in out and f"transition: nu = {b.transition:.10g}" in out
    assert abs(b.folds[0]["nu"] - 0.0663597437247) <= 1e-10 and abs(b.transition - 0.0661896810797) <= 1e-10


@contextlib.contextmanager
def _stop_after(n):
    """graceful_stop whose request turns true after n polls (a Ctrl-C after n continuation steps)."""
    class Request:
        polls = 0

        def __bool__(self):
            Request.polls += 1
            return Request.polls > n
    yield Request()


@pytest.mark.cpu_dependent
@pytest.mark.parametrize("d, degree, n", [(2, 32, 12), (2, 32, 30), (3, 16, 8), (3, 8, 45),
                                          pytest.param(3, 8, 4, marks=pytest.mark.slow)])
def test_an_interrupted_branch_resumes_to_the_uninterrupted_numbers(tmp_path, monkeypatch, d, degree, n):
    hi = 0.07 if d == 2 else 0.045
    cfg = load_branch_config(_write(tmp_path, d=d, lo=0.03, hi=hi, degree=degree))
    whole = run_branch(cfg, tmp_path / "whole.h5", figure=False, log=lambda s: None)
    monkeypatch.setattr(app_branch, "graceful_stop", lambda: _stop_after(n))
    part = run_branch(cfg, tmp_path / "part.h5", figure=False, log=lambda s: None)
    assert part.status == "interrupted"
    with h5py.File(tmp_path / "part.h5") as f:
        assert f.attrs["status"] == "interrupted" and not f["branch"].attrs["complete"]
        assert 0 < f["branch"].attrs["points"] < len(whole.branch.noise)
    monkeypatch.undo()
    from solvers.app.info import describe
    text = describe(tmp_path / "part.h5")
    assert "--resume` continues it from its last point" in text and "not complete" in text
    with pytest.raises(Exception, match="exists"):
        run_branch(cfg, tmp_path / "part.h5", figure=False, log=lambda s: None)
    done = run_branch(cfg, tmp_path / "part.h5", resume=True, figure=False, log=lambda s: None)
    assert done.status == "finished"
    a, b = load_branch(tmp_path / "whole.h5"), load_branch(tmp_path / "part.h5")
    for key in ("noise", "amplitude", "free_energy", "coeffs", "unknowns", "tangents", "stable"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    assert (a.kind, a.transition, a.normal_form) == (b.kind, b.transition, b.normal_form)
    # on S^2 the branch is raised to L = 32 on the way (interrupted before or after a raise)
    assert a.degree == b.degree == whole.branch.degree and a.refinements == b.refinements == whole.branch.refinements
    assert [r["from"] for r in a.refinements] == {(2, 32): [], (3, 16): [16], (3, 8): [8, 16]}[d, degree]
    with pytest.raises(Exception, match="already finished"):
        run_branch(cfg, tmp_path / "part.h5", resume=True, figure=False, log=lambda s: None)


def test_the_branch_group_opens_in_xarray_with_named_dimensions(tmp_path):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    for d, degree in ((2, 32), (3, 16)):
        path = tmp_path / f"x{d}.h5"
        run_branch(load_branch_config(_write(tmp_path, d=d, hi=0.07 if d == 2 else 0.045, degree=degree,
                                             name=f"x{d}.toml")), path, figure=False, log=lambda s: None)
        with xr.open_dataset(path, group="branch", engine="h5netcdf", phony_dims=None) as ds, h5py.File(path) as f:
            assert not [dim for dim in ds.dims if str(dim).startswith("phony")]
            assert not [name for name, v in ds.variables.items() if "long_name" not in v.attrs]
            for name, var in ds.variables.items():
                np.testing.assert_array_equal(var.values, f["branch"][name][()], err_msg=name)
            assert ds.noise.dims == ("point",) and ds.coeffs.dims == ("point", "k" if d == 2 else "mode")
            assert ds.coeffs.dtype == np.complex128 and ds.fold_noise.dims == ("fold",)
            assert ds.attrs["kind"] == "subcritical" and ds.sizes["fold"] == (1 if d == 2 else 0)
            if d == 3:
                np.testing.assert_allclose(ds.coeffs.where((ds.l == 0) & (ds.m == 0), drop=True).real,
                                           np.sqrt(4 * np.pi), rtol=1e-12)


def test_example_branch_configurations_are_valid():
    from pathlib import Path
    configs = sorted((Path(__file__).resolve().parents[1] / "runs" / "branch").glob("*.toml"))
    assert len(configs) == 2
    for p in configs:
        load_branch_config(p)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("[branch]", "[brunch]"), "brunch: unknown key"),
    (lambda t: t.split("[branch]")[0], "branch: is required"),
    (lambda t: t.replace("mode = 1", "mode = 0"), "branch.mode"),
    (lambda t: t.replace("mode = 1", "mode = 1\nsteps = 3"), "branch.steps: unknown key"),
    (lambda t: t.replace("noise_range = [0.03, 0.07]", "noise_range = [0.03]"), r"must be \[lo, hi\]"),
    (lambda t: t.replace("noise_range = [0.03, 0.07]", "noise_range = [0.07, 0.03]"), "0 < lo < hi"),
    (lambda t: t.replace("noise_range = [0.03, 0.07]", "noise_range = [0.07, 0.09]"), "must contain the threshold"),
    (lambda t: t.replace("ascent", "descent"), "in descent"),
    (lambda t: t.replace("degree = 32", "degree = 1"), "branch.degree"),
    (lambda t: t + "[pde]\ndegree = 32\n", "pde: is a table of an `attnpde run` configuration"),
])
def test_configuration_errors_name_the_key(tmp_path, edit, message):
    text = edit(CONFIG.format(d=2, lo=0.03, hi=0.07, degree=32))
    with pytest.raises(ConfigError, match=message):
        parse_branch_config(text)
    p = tmp_path / "bad.toml"
    p.write_text(text)
    assert main(["branch", str(p)]) == 2
    assert not (tmp_path / "bad.h5").exists()
