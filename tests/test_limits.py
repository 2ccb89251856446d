"""Limits before work: directions normalised without overflow, configurations read only from regular files
of at most 1 MiB (without blocking), and the configuration layer's errors in one line for any value.

The refusals themselves, with their messages, are rows of tests/test_refusals.py."""
import math
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from solvers import Perceptron
from solvers.app.config import (MAX_CONFIG_BYTES, ConfigError, load_config, parse_config, read_config_text,
                                initial_density)
from solvers.model import VonMisesFisher, unit_vector

BASE = '[model]\nd = 2\nbeta = 1.0\nflow = "ascent"\n'
SMALL = BASE + "[pde]\ndegree = 16\nt_final = 0.1\n"
RUNS = Path(__file__).resolve().parents[1] / "runs"


# --- directions -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("v, want", [
    ([1e308, 1e308], [1.0, 1.0]),                       # the norm overflows
    ([1.7976931348623157e308, -1.7976931348623157e308], [1.0, -1.0]),
    ([1e-308, 1e-308], [1.0, 1.0]),                     # the squares underflow
    ([5e-324, 5e-324], [1.0, 1.0]),                     # subnormal: the smallest double
    ([5e-324, 0.0], [1.0, 0.0]),
    ([1e308, 1e-308], [1.0, 0.0]),                      # 1e-616: 0 to the double precision
    ([3.0, 4.0], [3.0, 4.0]),
    ([0.0, 0.0, -1e300], [0.0, 0.0, -1.0]),
])
def test_unit_vector_is_the_asked_direction(v, want):
    want = np.array(want) / np.linalg.norm(want)
    u = unit_vector(v)
    assert np.all(np.isfinite(u))
    assert np.linalg.norm(u) == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_allclose(u, want, rtol=1e-15, atol=1e-300)
    # every user-given direction is normalised so: the von Mises mode, the perceptron's directions
    np.testing.assert_allclose(VonMisesFisher(v, 1.0).mu, u, rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(Perceptron([v], c=[1.0]).a[0], u, rtol=1e-15, atol=1e-300)


def test_perceptron_unit_directions_are_kept_bit_for_bit():
    """Directions of unit length are not divided (a perceptron read back from an archive is the one written);
    others the same bits as before the overflow guard (plain division by np.linalg.norm)."""
    p = Perceptron.random(3, 50, "gelu", 1.0, seed=7)
    q = Perceptron(p.a, c=p.c, b=p.b, activation="gelu")
    assert np.array_equal(p.a, q.a)
    a = np.random.default_rng(1).standard_normal((20, 3)) * 10.0
    assert np.array_equal(Perceptron(a, c=np.ones(20)).a, a / np.linalg.norm(a, axis=1)[:, None])


def test_config_mu_of_huge_entries_is_the_asked_mode():
    """[initial] mu = [1e308, 1e308]: the mode (1, 1)/sqrt 2, not the other one a NaN/zero vector gave."""
    for entry in ("1e308", "1e-308", "5e-324"):
        cfg = parse_config(BASE + f'[initial]\nkind = "von_mises"\nmu = [{entry}, {entry}]\nkappa = 4.0\n'
                                  "[particles]\nn = 10\nt_final = 0.1\n")
        rho = cfg.initial_density()
        np.testing.assert_allclose(rho.mu, [math.sqrt(0.5), math.sqrt(0.5)], rtol=1e-15)
        x = rho.sample(np.random.default_rng(0), 2000)
        assert np.mean(x @ rho.mu) > 0.8                  # around (1, 1)/sqrt 2, not its antipode
    # the zonal harmonic's axis: 1 + amplitude at the axis itself
    spec = {"kind": "zonal_harmonic", "axis": np.array([0.0, 1e-320, 1e-320]), "degree": 3, "amplitude": 0.5}
    f = initial_density(spec, 3)
    assert f(np.array([[0.0, math.sqrt(0.5), math.sqrt(0.5)]]))[0] == pytest.approx(1.5, rel=1e-14)
    spec["axis"] = np.array([1e308, 0.0, 0.0])
    assert initial_density(spec, 3)(np.array([[1.0, 0.0, 0.0]]))[0] == pytest.approx(1.5, rel=1e-14)


# --- reading a configuration -------------------------------------------------------------------------------
def _within(seconds: float, fn):
    """fn() in a thread; its result or exception, or AssertionError if it is still running after ``seconds``."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:          # noqa: BLE001 - handed to the caller
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "blocked"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_fifo_is_refused_without_blocking(tmp_path):
    """A FIFO nobody writes to: refused from its stat, never opened for reading (which would block)."""
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"c\.toml: is a FIFO \(named pipe\); give a TOML configuration file$"):
        _within(10.0, lambda: load_config(fifo))
    from solvers.app.branch import load_branch_config
    with pytest.raises(ConfigError, match="is a FIFO"):
        _within(10.0, lambda: load_branch_config(fifo))


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_is_refused():
    with pytest.raises(ConfigError, match=r"^/dev/zero: is a character device; give a TOML configuration file$"):
        _within(10.0, lambda: read_config_text("/dev/zero"))


def test_other_files_that_are_not_configurations(tmp_path):
    with pytest.raises(ConfigError, match=r": is a directory; give a TOML configuration file$"):
        read_config_text(tmp_path)
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read: No such file or directory$"):
        read_config_text(tmp_path / "nope.toml")
    big = tmp_path / "big.toml"
    big.write_text(SMALL + "#" + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match=r"big\.toml: is 10\d{5} bytes, above the 1048576 \(1 MiB\)"):
        read_config_text(big)
    bad = tmp_path / "bad.toml"
    bad.write_bytes(SMALL.encode() + b"\xff\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not a UTF-8 TOML file: byte \d+ \(b'\\xff'\) is not UTF-8$"):
        read_config_text(bad)
    # a symbolic link to a regular file is read (the stat follows it)
    good = tmp_path / "good.toml"
    good.write_text(SMALL)
    link = tmp_path / "link.toml"
    link.symlink_to(good)
    assert load_config(link).pde.degree == 16


def test_a_config_at_the_size_cap_is_read(tmp_path):
    c = tmp_path / "c.toml"
    c.write_text(SMALL + "#" * (MAX_CONFIG_BYTES - len(SMALL) - 1) + "\n")
    assert c.stat().st_size == MAX_CONFIG_BYTES
    assert load_config(c).name == "c"


# --- one line for any value --------------------------------------------------------------------------------
VALUES = [1e308, -1e308, 1e-300, 5e-324, 0.0, -1.0, float("nan"), float("inf"), float("-inf"), 2 ** 63 - 1,
          -(2 ** 63), 0, 1, 10 ** 9, "", "a\u0000b", "\u0001", "x" * 10000, True, [], [1e308, 1e308],
          [[[1.0]]], [1.0, "a"], {}, {"x": 1}]


def _leaves(d, path=()):
    for k, v in d.items():
        yield path + (k,)
        if isinstance(v, dict):
            yield from _leaves(v, path + (k,))


@pytest.mark.slow
@pytest.mark.parametrize("base", ["validate_circle.toml", "sphere_ascent_gelu.toml"])
def test_every_value_anywhere_is_accepted_or_refused_in_one_line(base, monkeypatch):
    """Each key of a configuration of runs/ set to each of VALUES: parse_config either accepts it or raises a
    ConfigError of one line (no other exception: no OverflowError, no ValueError from numpy)."""
    import tomllib
    from solvers.app.config import dump_toml

    monkeypatch.setattr("solvers._memory.physical_memory", lambda: 16.0 * 2 ** 30)
    raw = tomllib.loads((RUNS / base).read_text())
    for path in list(_leaves(raw)):
        for value in VALUES:
            r = tomllib.loads((RUNS / base).read_text())
            t = r
            for k in path[:-1]:
                t = t[k]
            t[path[-1]] = value
            try:
                text = dump_toml(r)
            except TypeError:
                continue
            try:
                parse_config(text)
            except ConfigError as e:
                assert "\n" not in str(e) and len(str(e)) < 2000, (path, value, str(e))


def test_a_max_degree_beyond_memory_is_accepted_where_the_continuation_caps_the_resolution(tmp_path, monkeypatch):
    """With the Lagrangian continuation (on by default without noise) the Eulerian resolution stops at the
    handoff degree: a max_degree whose transforms would not fit is never reached, and is accepted."""
    monkeypatch.setattr("solvers._memory.physical_memory", lambda: 16.0 * 2 ** 30)
    c = tmp_path / "c.toml"
    c.write_text(BASE.replace("d = 2", "d = 3") + "[pde]\ndegree = 16\nt_final = 1.0\nmax_degree = 8191\n")
    assert load_config(c).pde.max_degree == 8191
