"""Archives are netCDF-4 for xarray: every group opens with ``xarray.open_dataset(path, group=G,
engine="h5netcdf")`` with named dimensions only (no phony ones), the values xarray reads are the ones
h5py reads, coordinates are the ones of the grids, and archives of format version 1 still load.
"""
from __future__ import annotations

import lzma
from pathlib import Path

import h5py
import numpy as np
import pytest

xr = pytest.importorskip("xarray")
pytest.importorskip("h5netcdf")

from solvers.app.archive import FORMAT_VERSION, load  # noqa: E402
from solvers.app.config import parse_config  # noqa: E402
from solvers.app.runner import run_config  # noqa: E402
from solvers.app.validate import validate  # noqa: E402

DATA = Path(__file__).parent / "data"

# PDE with a forced handoff to the continuation (and its error-estimate rerun), particles, comparison
RUN = """
[run]
name = "{name}"
[model]
d = {d}
beta = 4.0
flow = "ascent"
[model.perceptron]
units = {d}
activation = "gelu"
seed = 111
[pde]
degree = {degree}
max_degree = {max_degree}
t_final = 0.6
save_every = 0.2
output_points = {points}
handoff_at = 0.3
handoff_degree = {max_degree}
nodes = {nodes}
[particles]
n = 40
seed = 3
integrator = "rk4"
dt = 0.05
t_final = 0.6
save_every = 0.2
[compare]
moments = 4
"""


def _groups(path: Path) -> list[str]:
    out = ["/"]
    with h5py.File(path, "r") as f:
        f.visit(lambda n: out.append("/" + n) if isinstance(f[n], h5py.Group) else None)
    return out


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("xr")
    paths = {}
    for name, d, degree, max_degree, points, nodes in (("circle", 2, 16, 64, 64, 128),
                                                       ("sphere", 3, 16, 32, 12, 128)):
        cfg = parse_config(RUN.format(name=name, d=d, degree=degree, max_degree=max_degree, points=points,
                                      nodes=nodes))
        paths[name] = tmp / f"{name}.h5"
        run_config(cfg, paths[name], progress=False, log=lambda s: None)
    vcfg = parse_config(RUN.format(name="v", d=2, degree=32, max_degree=32, points=64, nodes=64)
                        .replace("handoff_at = 0.3\n", ""))
    paths["validation"] = tmp / "v_validation.h5"
    validate(vcfg, [20, 80], 2, paths["validation"], workers=1, log=lambda s: None)
    return paths


def _compare_with_h5py(path: Path, group: str, ds) -> int:
    """Every variable and coordinate xarray read from ``group`` equals the dataset h5py reads there."""
    n = 0
    with h5py.File(path, "r") as f:
        g = f[group]
        for name, var in ds.variables.items():
            assert name in g, f"{group}: {name} is not a dataset of the group"
            np.testing.assert_array_equal(var.values, g[name][()], err_msg=f"{group}/{name}")
            n += 1
    return n


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["circle", "sphere", "validation"])
def test_every_group_opens_with_named_dimensions(archives, kind):
    path = archives[kind]
    groups = _groups(path)
    expected = {"circle": {"/pde", "/pde/steps", "/pde/restart", "/pde/lagrangian", "/pde/lagrangian/check",
                           "/particles", "/particles/restart", "/atoms/pde", "/atoms/particles", "/comparison",
                           "/comparison/concentration_pde", "/comparison/concentration_particles",
                           "/model/perceptron"},
                "validation": {"/pde", "/validation"}}
    assert expected.get(kind, expected["circle"]) <= set(groups)
    checked = 0
    for group in groups:
        # phony_dims=None: h5netcdf raises on any axis without a named dimension
        with xr.open_dataset(path, group=group, engine="h5netcdf", phony_dims=None) as ds:
            assert not [dim for dim in ds.dims if str(dim).startswith("phony")]
            # every variable says what it is (CF long_name; units where it has any)
            assert not [name for name, v in ds.variables.items() if "long_name" not in v.attrs], group
            checked += _compare_with_h5py(path, group, ds)
    assert checked > 20
    with h5py.File(path, "r") as f:
        assert f.attrs["format_version"] == FORMAT_VERSION == 3
    # all groups at once, as docs/archive.md shows (open_datatree refuses the groups with a t of their own)
    every = xr.open_groups(path, engine="h5netcdf")
    try:
        assert set(groups) <= set(every)
    finally:
        for ds in every.values():
            ds.close()


def test_coordinates_of_the_circle(archives):
    path = archives["circle"]
    with xr.open_dataset(path, group="pde", engine="h5netcdf") as ds, h5py.File(path) as f:
        assert ds.coeffs.dims == ("t", "k") and ds.coeffs.dtype == np.complex128
        np.testing.assert_array_equal(ds.k.values, np.arange(ds.sizes["k"]))
        assert ds.sizes["k"] == f["pde/coeffs"].shape[1] > 16           # grown with the refinements
        M = ds.sizes["theta"]
        np.testing.assert_allclose(ds.theta.values, 2 * np.pi * np.arange(M) / M, atol=1e-14)
        assert ds.theta.attrs["units"] == "radian" and ds.density.dims == ("t", "theta")
        np.testing.assert_array_equal(ds.t.values, f["pde/t"][()])
        run = load(path)
        np.testing.assert_array_equal(ds.coeffs.values, run.pde.coeffs)
        # the density is the PDE's, on the named grid: its mean over theta is the mass
        np.testing.assert_allclose(ds.density.mean("theta").values, run.pde.mass, rtol=1e-10)
    with xr.open_dataset(path, group="particles", engine="h5netcdf") as ds:
        assert ds.x.dims == ("t", "particle", "component") and ds.sizes["particle"] == 40
    with xr.open_dataset(path, group="pde/lagrangian", engine="h5netcdf") as ds:
        # CF contiguous ragged array: node_count per snapshot sums to the nodes
        assert ds.node_count.attrs["sample_dimension"] == "node"
        assert int(ds.node_count.sum()) == ds.sizes["node"]


def test_sphere_density_on_lat_lon(archives, tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = archives["sphere"]
    with xr.open_dataset(path, group="pde", engine="h5netcdf") as ds, h5py.File(path) as f:
        grid = f["pde/grid"][()]
        assert ds.density.dims == ("t", "lat", "lon") and ds.grid.dims == ("lat", "lon", "component")
        n = ds.sizes["lat"]
        # the output grid is equiangular: colatitude pi (i + 1/2) / n, longitude pi j / n
        np.testing.assert_allclose(ds.lat.values, 90.0 - 180.0 * (np.arange(n) + 0.5) / n, atol=1e-10)
        np.testing.assert_allclose(ds.lon.values, 180.0 * np.arange(2 * n) / n, atol=1e-10)
        lat, lon = np.radians(ds.lat.values)[:, None], np.radians(ds.lon.values)[None, :]
        np.testing.assert_allclose(grid[..., 2], np.sin(lat) * np.ones_like(lon), atol=1e-14)
        np.testing.assert_allclose(grid[..., 0], np.cos(lat) * np.cos(lon), atol=1e-14)
        assert ds.lat.attrs["units"] == "degrees_north" and ds.lon.attrs["units"] == "degrees_east"
        # coefficients keep (l, m) as coordinates along "mode", and stay complex
        assert ds.coeffs.dims == ("t", "mode") and ds.coeffs.dtype == np.complex128
        l, m = ds.l.values, ds.m.values
        np.testing.assert_array_equal(l * (l + 1) // 2 + m, np.arange(ds.sizes["mode"]))
        c00 = ds.coeffs.where((ds.l == 0) & (ds.m == 0), drop=True).values.ravel()
        np.testing.assert_allclose(c00.real, np.sqrt(4 * np.pi), rtol=1e-12)     # the mass
        plt.figure()                          # its own axes, whatever an earlier test left current
        ds.density.isel(t=-1).plot()
        ax = plt.gca()
        assert ax.get_xlabel().startswith("lon") and ax.get_ylabel().startswith("lat")
        plt.savefig(tmp_path / "density.png")
        plt.close("all")
    assert (tmp_path / "density.png").stat().st_size > 5000


@pytest.mark.cpu_dependent
@pytest.mark.parametrize("name", ["format_v1_circle", "format_v1_sphere"])
def test_archives_of_format_version_1_still_load(name, tmp_path):
    """Archives written by format version 1 (commit c28c7cc, from tests/data/<name>.toml): no named
    dimensions; everything still loads."""
    path = tmp_path / f"{name}.h5"
    path.write_bytes(lzma.decompress((DATA / f"{name}.h5.xz").read_bytes()))
    run = load(path)
    assert run.attrs["format_version"] == 1
    assert run.pde is not None and run.pde.lagrangian is not None and len(run.pde.t) == 3
    assert run.particles is not None and run.particles.x.shape == (3, 20, run.model.d)
    assert run.comparison is not None
    assert run.pde.restart is not None and "coeffs" in run.pde.restart
    np.testing.assert_allclose(run.pde.mass, 1.0, atol=1e-12)
