"""The same answer on every machine: grids fixed by the degree, atoms independent of the grid and of
its orientation.

SHTns, left to itself (``set_grid(nl_order=2)``), rounds the number of latitudes up to a multiple of
its SIMD vector length, so an AVX2 machine (4 doubles) and an AVX-512 machine (8 doubles) got different
grids (L = 128: 196 and 200 latitudes) and, through the grid graph of the basin rule, different atoms.
:func:`shtns_auto_grid` transcribes SHTns's own choice (``choose_nlat`` and ``fft_int`` of its
``sht_init.c``, version 3.7.5) for either vector length, so that both grid kinds are forced here on any
machine.
"""
import math

import h5py
import numpy as np
import pytest

import shtns
from solvers import Model, Perceptron, solve_pde
from solvers.app.config import parse_config
from solvers.pde_circle import CircleSpace
from solvers.pde_sphere import SphereDiscretization, SphereSpace
from solvers.app.runner import run_config
from spectral import sphere
from spectral.sphere import SphereBasis

# every verdict here is about the machine: scripts/test --foreign-simd runs them again under another SHTns build
pytestmark = pytest.mark.cpu_dependent

VECTOR_DOUBLES = {"avx2": 4, "avx512": 8}


def shtns_auto_grid(L: int, vsize: int) -> tuple[int, int]:
    """The Gauss grid SHTns 3.7.5 picks for ``set_grid(nl_order=2)`` with SIMD vectors of ``vsize``
    doubles (phi-contiguous layout): nlat from choose_nlat(3L/2 + 1), nphi = fft_int(3L + 1, 7)."""
    n = (3 * L) // 2 + 1
    n += n & 1
    n = -(-n // vsize) * vsize
    nlat = max(n, 4 * vsize)
    n = 3 * L + 1
    n -= 2 - (n & 1)
    while True:                                 # fft_int: the next even 7-smooth integer ...
        n += 2
        r = n
        for p in (2, 3, 5, 7):
            while r % p == 0:
                r //= p
        if r == 1:
            break
    k = 1 << (n - 1).bit_length()
    nphi = k if (k - n) * 33 < n else n         # ... or a power of 2 within 3%
    return nlat, nphi


# --- the grid is the project's, from the degree alone ----------------------------------------------------
def test_dealiased_grid_is_the_smallest_admissible_one():
    for L in list(range(4, 300)) + [383, 511, 767, 1023]:
        nlat, nphi = sphere.dealiased_grid(L)
        # the 3/2 rule, SHTns's minimum of 32 latitudes, whole SIMD vectors of up to 8 doubles
        assert nlat >= 1.5 * (L + 1) and nlat >= 32 and nlat % 8 == 0
        assert nlat - 8 < max(1.5 * (L + 1), 32)
        r = nphi
        for p in (2, 3, 5, 7):
            while r % p == 0:
                r //= p
        assert r == 1 and nphi % 2 == 0 and nphi >= 3 * (L + 1)
        assert all(_rough(q) for q in range(3 * (L + 1) + (3 * (L + 1)) % 2, nphi, 2))   # the smallest one


def _rough(q: int) -> bool:
    for p in (2, 3, 5, 7):
        while q % p == 0:
            q //= p
    return q != 1


def test_the_solvers_grids_are_the_project_grid_not_shtns_choice():
    # the AVX2 kind differs from the project's grid where the solvers refine to (L = 128: 196 latitudes)
    assert shtns_auto_grid(128, VECTOR_DOUBLES["avx2"]) == (196, 392)
    assert shtns_auto_grid(128, VECTOR_DOUBLES["avx512"]) == (200, 392) == sphere.dealiased_grid(128)
    for L in (16, 32, 64, 128, 256):
        assert (SphereBasis(L).nlat, SphereBasis(L).nphi) == sphere.dealiased_grid(L)
        disc = SphereDiscretization(Model(3, 4.0, "ascent"), L)
        assert disc.basis.shape == sphere.dealiased_grid(L)
        if disc.kbasis is not None:
            assert disc.kbasis.shape == disc.basis.shape


@pytest.fixture
def shtns_choice(monkeypatch):
    """``set(kind)``: from then on SHTns answers a request for its own grid (nlat = nphi = 0) with the
    grid it picks on an AVX2 or an AVX-512 machine; every call is recorded."""
    calls = []
    original = shtns.sht.set_grid

    def install(kind):
        vsize = VECTOR_DOUBLES[kind]

        def set_grid(self, nlat=0, nphi=0, *args, **kw):
            calls.append((self.lmax, nlat, nphi))
            if nlat == 0 or nphi == 0:
                nlat, nphi = shtns_auto_grid(self.lmax, vsize)
                kw.pop("nl_order", None)
            return original(self, nlat, nphi, *args, **kw)
        monkeypatch.setattr(shtns.sht, "set_grid", set_grid)
    install.calls = calls
    return install


SPHERE_CFG = """
[model]
d = 3
beta = 4.0
flow = "ascent"
[model.perceptron]
units = 3
activation = "gelu"
seed = 111
[pde]
degree = 32
t_final = 1.0
save_every = 0.25
max_degree = 128
tail_tol = 1e-5
tail_max = 1e-3
continuation = "none"
"""


def _datasets(path):
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out[name] = obj[()]
    with h5py.File(path, "r") as f:
        f.visititems(visit)
        attrs = {k: v for k, v in f["pde"].attrs.items() if k != "wall_time"}
    return out, attrs


def test_sphere_archive_is_bit_identical_whichever_grid_shtns_would_pick(tmp_path, shtns_choice):
    """The same configuration run as if on an AVX2 and on an AVX-512 machine (SHTns's own grid choice
    forced to either kind): every dataset of the two archives is bitwise equal, and the grids used
    (recorded in the archive) are the project's."""
    config = parse_config(SPHERE_CFG)
    archives = {}
    for kind in ("avx2", "avx512"):
        shtns_choice(kind)
        out = tmp_path / f"{kind}.h5"
        run_config(config, out, progress=False, log=lambda s: None)
        archives[kind] = _datasets(out)
    # nothing asked SHTns for a grid of its own choosing
    assert shtns_choice.calls and all(nlat > 0 and nphi > 0 for _, nlat, nphi in shtns_choice.calls)
    (a, attrs_a), (b, attrs_b) = archives["avx2"], archives["avx512"]
    assert a.keys() == b.keys() and attrs_a == attrs_b
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), name
    degrees = sorted({int(L) for L in a["pde/degree"]})
    assert degrees[-1] > 32                                   # it refined
    grids = {int(row[0]): (int(row[1]), int(row[2])) for row in a["pde/grids"]}
    assert all(grids[L] == sphere.dealiased_grid(L) for L in degrees)


# --- atoms independent of the grid and its orientation ---------------------------------------------------
def _frame(mu):
    """An orthonormal tangent frame (e1, e2) at the unit vector mu."""
    e1 = np.cross(mu, [0.0, 0.0, 1.0] if abs(mu[2]) < 0.9 else [1.0, 0.0, 0.0])
    e1 /= np.linalg.norm(e1)
    return e1, np.cross(mu, e1)


def _ridge_cases(n=50, seed=2026):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        mu = rng.standard_normal(3)
        mu /= np.linalg.norm(mu)
        tilt = rng.uniform(0.0, np.pi)                    # orientation of the long axis in the tangent plane
        long_w = rng.uniform(0.2, 0.5)
        short_w = rng.uniform(0.05, 0.1)                  # aspect ratios 2 to 10
        yield mu, tilt, long_w, short_w


def _ridge(mu, tilt, long_w, short_w):
    e1, e2 = _frame(mu)
    long_ax = np.cos(tilt) * e1 + np.sin(tilt) * e2
    short_ax = np.cross(mu, long_ax)
    return lambda x: 1.0 + 60.0 * np.exp(-0.5 * ((x @ long_ax) / long_w) ** 2 - 0.5 * ((x @ short_ax) / short_w) ** 2
                                         - 40.0 * (1.0 - x @ mu) ** 2)


@pytest.mark.parametrize("kind", ["avx2", "avx512"])
def test_an_oblique_ridge_is_one_atom_on_both_grid_kinds(kind):
    """A single peak elongated along a random direction (50 random centres, orientations and aspect
    ratios 2-10), resolved at L = 128, on the grid SHTns picks on an AVX2 or an AVX-512 machine: one
    atom, at the peak, carrying at least the bump. Without the persistence merge, the crests' spurious
    grid maxima split such peaks into several atoms on either grid kind."""
    L = 128
    grid = shtns_auto_grid(L, VECTOR_DOUBLES[kind])
    for mu, tilt, long_w, short_w in _ridge_cases():
        c = SphereSpace.project(_ridge(mu, tilt, long_w, short_w), L)
        assert SphereSpace.tail(c) < 1e-4          # resolved as the solver resolves (tail_tol)
        pos, mass = SphereSpace.atoms(c, threshold=10.0, smoothing=None, grid=grid)
        case = (kind, mu.round(3).tolist(), round(tilt, 3), round(long_w, 3), round(short_w, 3))
        assert len(mass) == 1, (case, mass)
        assert math.acos(min(1.0, float(pos[0] @ mu))) < 0.01, case
        assert mass[0] > 0.3 * SphereSpace.mass(c) - 1e-12, case


@pytest.mark.parametrize("kind", ["avx2", "avx512"])
def test_every_resolved_narrow_peak_is_an_atom_on_both_grid_kinds(kind):
    """von Mises-Fisher peaks of widths 1-2 wavelengths 2 pi / L (resolved at L = 64 as the solver resolves:
    spectral tail at most 1.2e-4 for the narrowest, about its tail_tol 1e-4) and heights 12-40 over a
    uniform background, at random centres, alone and with a second peak 0.7 as high 2 rad away, on either
    grid kind: every peak above the threshold is an atom at its centre (to 5% of the latitude spacing)
    carrying at least its bump. The default smoothing (2 pi / L) lowers the narrowest to half their height,
    below the threshold up to heights ~20: the threshold is tested on rho in each peak's core."""
    L = 64
    grid = shtns_auto_grid(L, VECTOR_DOUBLES[kind])
    rng = np.random.default_rng(11)
    for width in (1.0, 1.5, 2.0):
        s = width * 2 * math.pi / L
        kap = 1 / s ** 2
        for height in (12.0, 20.0, 40.0):
            mu = rng.standard_normal(3)
            mu /= np.linalg.norm(mu)
            e1, _ = _frame(mu)
            bumps = [(mu, height), (math.cos(2.0) * mu + math.sin(2.0) * e1, 0.7 * height)]
            m = [h * (1 - math.exp(-2 * kap)) / (2 * kap) for _, h in bumps]      # mass of a peak of height h
            bg = 1.0 - sum(m)
            if bg < 0.05:
                continue
            f = lambda x: bg + sum(mk * 2 * kap * np.exp(kap * (x @ v - 1)) / (1 - np.exp(-2 * kap))
                                   for mk, (v, _) in zip(m, bumps))        # noqa: E731
            c = SphereSpace.project(f, L)
            assert SphereSpace.tail(c) < 2e-4
            at = SphereSpace.atoms(c, grid=grid)
            expect = [(v, mk) for mk, (v, h) in zip(m, bumps) if h + bg >= 10.0]
            case = (kind, width, height, at)
            assert len(at) == len(expect), case
            for v, mk in expect:
                k = int(np.argmax(at.positions @ v))
                assert math.acos(min(1.0, float(at.positions[k] @ v))) < 0.05 * math.pi / grid[0], case
                assert at.masses[k] >= mk - 1e-9, case


def test_gibbs_ripples_beside_a_high_jump_on_the_sphere_are_no_atoms():
    """Half of a narrow Gaussian peak (height 500, width 0.05), cut by a plane through its centre, at L = 64:
    the Gibbs ripples beside the jump rise above the threshold and are separate local maxima of rho
    (smoothing=None: three atoms); the structure from the smoothed density keeps them in the peak's basin,
    and the threshold tested on rho in the peak's core adds none: one atom."""
    mu = np.array([0.3, -0.5, 0.8])
    mu /= np.linalg.norm(mu)
    e1, _ = _frame(mu)
    c = SphereSpace.project(lambda x: 0.05 + 500.0 * np.exp(-(1 - x @ mu) / 0.05 ** 2) * (x @ e1 >= 0), 64)
    c = c / SphereSpace.mass(c)
    assert len(SphereSpace.atoms(c, smoothing=None)) >= 3
    at = SphereSpace.atoms(c)
    assert len(at) == 1 and math.acos(min(1.0, float(at.positions[0] @ mu))) < 0.1


def _two_bumps_on_the_sphere(L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """mu1, mu2 0.3 rad apart and the degree-L coefficients of 1 + 80 e^{-(1 - x.mu1) / s^2} +
    30 e^{-(1 - x.mu2) / s^2}, s = 0.06: two bumps on the uniform background."""
    mu1 = np.array([0.3, -0.5, 0.8])
    mu1 /= np.linalg.norm(mu1)
    e1, _ = _frame(mu1)
    mu2 = math.cos(0.3) * mu1 + math.sin(0.3) * e1
    f = lambda x: 1.0 + 80.0 * np.exp(-(1 - x @ mu1) / 0.06 ** 2) + 30.0 * np.exp(-(1 - x @ mu2) / 0.06 ** 2)
    return mu1, mu2, SphereSpace.project(f, L)


def _two_peaks_on_the_circle(second: float, K: int = 512) -> np.ndarray:
    """The K Fourier coefficients of the probability density proportional to 1 + 80 e^{400(cos(theta - 1) - 1)}
    + 30 e^{400(cos(theta - second) - 1)}: two von Mises peaks on the uniform background."""
    th = 2 * np.pi * np.arange(8 * K) / (8 * K)
    dens = 1.0 + 80.0 * np.exp(400 * (np.cos(th - 1.0) - 1)) + 30.0 * np.exp(400 * (np.cos(th - second) - 1))
    return np.fft.rfft(dens / dens.mean())[:K] / dens.size


def test_two_peaks_with_a_deep_valley_stay_two():
    """Two bumps 0.3 rad apart (widths 0.06, heights 80 and 30 over the uniform background): the
    density falls to ~1 between them, so they are two atoms — on both grid kinds, on S^2 and on S^1.
    Each carries at least its bump, h (s^2 / 2)(1 - e^(-2 / s^2)) for height h and width s; how the
    flat background splits between their basins is a convention of the basin rule (asserted to be
    round-off-proof by the next test), not asserted here."""
    L = 128
    mu1, mu2, c = _two_bumps_on_the_sphere(L)
    bump = lambda h: h * 0.06 ** 2 / 2 * (1 - math.exp(-2 / 0.06 ** 2))     # mass of h e^{-(1 - x.mu) / s^2}
    for kind in ("avx2", "avx512"):
        pos, mass = SphereSpace.atoms(c, threshold=10.0, grid=shtns_auto_grid(L, VECTOR_DOUBLES[kind]))
        assert len(mass) == 2, (kind, mass)
        i1 = int(np.argmax(pos @ mu1))
        i2 = 1 - i1
        assert math.acos(min(1.0, float(pos[i1] @ mu1))) < 0.01 and math.acos(min(1.0, float(pos[i2] @ mu2))) < 0.01
        assert mass.sum() <= SphereSpace.mass(c) + 1e-12
        assert mass[i1] > 0.99 * bump(80.0) and mass[i2] > 0.99 * bump(30.0), (kind, mass)
    # on the circle: two von Mises peaks 0.3 rad apart
    cc = _two_peaks_on_the_circle(1.3)           # peaks 25 and 9.4, valley 0.3 after normalising
    at = CircleSpace.atoms(cc, threshold=5.0)
    ang = np.mod(np.arctan2(at.positions[:, 1], at.positions[:, 0]), 2 * np.pi)
    assert len(at) == 2 and np.allclose(ang, [1.0, 1.3], atol=1e-3)


def test_basin_masses_on_a_flat_background_do_not_depend_on_round_off():
    """Two peaks on an exactly uniform background, whose basins share it: perturbing the coefficients
    by 2e-16 relative (what another machine's kernels do to them) moves no node from one basin to
    another, on S^2 (both grid kinds) and S^1. Without the basin rule's resolution (``_resolved``) the
    round-off of the synthesised plateau decided where each of its nodes climbed: the masses moved by
    up to 0.3 (measured)."""
    rng = np.random.default_rng(5)
    L = 128
    _, _, c = _two_bumps_on_the_sphere(L)
    cc = _two_peaks_on_the_circle(2.5)
    cases = [(lambda a, g=shtns_auto_grid(L, VECTOR_DOUBLES[kind]): SphereSpace.atoms(a, threshold=10.0, grid=g), c)
             for kind in ("avx2", "avx512")] + [(lambda a: CircleSpace.atoms(a, threshold=5.0), cc)]
    for atoms, coeffs in cases:
        ref = atoms(coeffs)
        assert len(ref) == 2
        for _ in range(4):
            got = atoms(coeffs * (1.0 + 2e-16 * rng.standard_normal(coeffs.shape)))
            assert len(got) == 2 and np.allclose(got.masses, ref.masses, rtol=0, atol=1e-12), (ref, got)
            assert np.allclose(got.positions, ref.positions, rtol=0, atol=1e-9), (ref, got)


def _rotated(c: np.ndarray, R: np.ndarray) -> np.ndarray:
    """Coefficients of x -> rho(R^T x): Gauss quadrature of the band-limited rho on L + 2 latitudes and
    2L + 2 longitudes (exact for the degree-2L products it needs), rho evaluated by direct summation (no
    rotation code of the library)."""
    L = sphere.degree_of(c.size)
    b = SphereBasis(L, L + 2 - L % 2, sphere.fft_size(2 * L + 2))
    vals = sphere.evaluate(c, b.points.reshape(-1, 3) @ R).reshape(b.shape)
    return b.to_canonical(b.analys(vals))


@pytest.mark.slow
def test_rotated_pde_state_gives_the_rotated_atoms():
    """The state where a ReLU descent run from uniform data stops (L = 128, two atoms forming against the
    dead-zone boundaries, Gibbs oscillations beside the jumps), rotated by three random rotations: the
    atoms of the rotated state are the rotated atoms, positions within the grid spacing, masses within
    what moving the basins' boundaries by one grid spacing can shift."""
    p = Perceptron.random(3, 3, "relu", 1.0, seed=111)
    r = solve_pde(Model(3, 9.0, "descent", perceptron=p), 10.0, 16, save_every=0.25, max_degree=128,
                  tail_max=3e-2, positivity_tol=0.1, continuation="none")
    c = r.coefficients(-1)
    atoms = r.atoms()
    assert sphere.degree_of(c.size) == 128 and len(atoms) == 2
    h = math.pi / sphere.dealiased_grid(128)[0]
    for seed in (5, 6, 7):
        q, rr = np.linalg.qr(np.random.default_rng(seed).standard_normal((3, 3)))
        q = q * np.sign(np.diag(rr))
        R = q if np.linalg.det(q) > 0 else -q
        rot = SphereSpace.atoms(_rotated(c, R))
        assert len(rot) == len(atoms)
        err = np.arccos(np.clip(np.sum((atoms.positions @ R.T) * rot.positions, axis=1), -1, 1))
        assert np.all(err < h), (seed, err, h)
        assert np.all(np.abs(rot.masses - atoms.masses) < h), (seed, rot.masses - atoms.masses)


def test_resume_refuses_an_archive_computed_on_another_grid(tmp_path):
    """An unfinished sphere run whose archive records a grid this machine would not use (the AVX2 kind
    of SHTns's own choice, as written before the grid was fixed), or no grid at all, is not resumed."""
    from solvers.app.runner import RunRefused, check_resumable

    config = parse_config(SPHERE_CFG)
    out = tmp_path / "a.h5"
    run_config(config, out, progress=False, log=lambda s: None)
    check = lambda: check_resumable(out, config)
    with h5py.File(out, "r+") as f:                      # as if killed before the end
        f.attrs["status"] = "running"
        f["pde"].attrs["complete"] = False
        rows = f["pde/grids"][()]
        assert [tuple(r[1:]) for r in rows] == [sphere.dealiased_grid(int(r[0])) for r in rows]
    check()                                              # the machine's grids: resumable
    with h5py.File(out, "r+") as f:
        g = f["pde/grids"]
        i = [int(r[0]) for r in g[()]].index(128)
        g[i, 1:] = shtns_auto_grid(128, VECTOR_DOUBLES["avx2"])
    with pytest.raises(RunRefused, match=r"degree 128 on the grid \(196, 392\); this machine and version "
                                          r"would use \(200, 392\)"):
        check()
    with h5py.File(out, "r+") as f:
        del f["pde/grids"]
    with pytest.raises(RunRefused, match="records no computational grids"):
        check()
