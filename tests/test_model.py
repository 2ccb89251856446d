"""The model (docs/model.md §1): validation, activations, drift = grad V, velocity and energy definitions."""
import math

import numpy as np
import pytest
from scipy.special import erf

from solvers import Model, Perceptron
from solvers.perceptron import ACTIVATIONS, activation, activation_primitive, tangent_project


def unit(n, d, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# --- bad input is refused with a message naming the parameter ------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    (dict(d=1, beta=1.0, flow="ascent"), "d must be an integer >= 2"),
    (dict(d=2.5, beta=1.0, flow="ascent"), "d must be an integer >= 2"),
    (dict(d=2, beta=-0.1, flow="ascent"), "beta must be finite and >= 0"),
    (dict(d=2, beta=float("inf"), flow="ascent"), "beta must be finite and >= 0"),
    (dict(d=2, beta=float("nan"), flow="ascent"), "beta must be finite and >= 0"),
    (dict(d=2, beta="x", flow="ascent"), "beta must be a number"),
    (dict(d=2, beta="1", flow="ascent"), "beta must be a number"),        # as the configuration refuses it
    (dict(d=2, beta=1.0, flow="ascent", noise="0.1"), "noise must be a number"),
    (dict(d=2, beta=1.0, flow="up"), "flow must be one of .*ascent.*descent"),
    (dict(d=2, beta=1.0, flow="ascent", attention="softmax"), "attention must be one of .*unnormalized.*normalized.*none"),
    (dict(d=2, beta=1.0, flow="ascent", strength=0.0), "strength must be finite and > 0"),
    (dict(d=2, beta=1.0, flow="ascent", strength=-2.0), "strength must be finite and > 0"),
    (dict(d=2, beta=1.0, flow="ascent", attention="normalized", strength=2.0), "strength plays no role"),
    (dict(d=2, beta=1.0, flow="ascent", noise=-1e-3), "noise must be finite and >= 0"),
    (dict(d=2, beta=1.0, flow="ascent", perceptron=Perceptron.random(3, 3, "relu", 1.0, 0)),
     "perceptron dimension 3 does not match d = 2"),
])
def test_model_refuses_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Model(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(a=[[0.0, 0.0], [1.0, 0.0]], c=[1.0, 1.0]), "direction a_0 is zero"),
    (dict(a=[[np.nan, 1.0]], c=[1.0]), "must be finite"),
    (dict(a=[[1.0, 0.0]]), "exactly one of c .* or w"),
    (dict(a=[[1.0, 0.0]], c=[1.0], w=[[1.0, 0.0]]), "exactly one of c .* or w"),
    (dict(a=[[1.0, 0.0]], c=[1.0], activation="sigmoid"), "activation must be one of"),
    (dict(a=[[1.0, 0.0]], c=[1.0, 2.0]), "c must be 1 finite numbers"),
    (dict(a=[[1.0, 0.0]], w=[[1.0, 0.0, 0.0]]), r"w must be finite with shape \(1, 2\)"),
    (dict(a=[[1.0, 0.0]], c=[1.0], b=[np.inf]), "b must be 1 finite numbers"),
])
def test_perceptron_refuses_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Perceptron(**kwargs)


def test_random_perceptron_is_seeded_and_unit():
    p1 = Perceptron.random(3, 5, "gelu", 2.0, seed=7)
    p2 = Perceptron.random(3, 5, "gelu", 2.0, seed=7)
    p3 = Perceptron.random(3, 5, "gelu", 2.0, seed=8)
    assert np.array_equal(p1.a, p2.a) and np.array_equal(p1.c, p2.c)
    assert not np.array_equal(p1.a, p3.a)
    assert np.allclose(np.linalg.norm(p1.a, axis=1), 1.0)
    assert Perceptron.random(4).units == 4        # units default to d, as in the reference experiments


# --- activations: exact forms and primitives ---------------------------------------------------
def test_activation_exact_forms():
    z = np.linspace(-4, 4, 101)
    assert np.array_equal(activation(z, "relu"), np.maximum(z, 0))
    assert np.allclose(activation(z, "gelu"), z * 0.5 * (1 + erf(z / math.sqrt(2))), rtol=0, atol=1e-15)
    assert np.allclose(activation(z, "tanh"), np.tanh(z))
    assert np.array_equal(activation(z, "linear"), z)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_primitive_derivative_is_activation(name):
    z = np.linspace(-5, 5, 2000)   # no node at the relu kink z = 0
    h = 1e-5
    fd = (activation_primitive(z + h, name) - activation_primitive(z - h, name)) / (2 * h)
    assert np.allclose(fd, activation(z, name), rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("d", [2, 3, 5])
def test_gradient_drift_is_tangent_gradient_of_potential(name, d):
    p = Perceptron.random(d, 4, name, 1.3, seed=d, bias_scale=0.5)
    x = unit(50, d, seed=1)
    g = p.drift(x)
    assert np.allclose(np.einsum("nd,nd->n", g, x), 0, atol=1e-14)        # tangent
    # directional derivative of V along geodesics in random tangent directions
    e = unit(50, d, seed=2)
    e = e - np.einsum("nd,nd->n", e, x)[:, None] * x
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    h = 1e-6
    xp = np.cos(h) * x + np.sin(h) * e
    xm = np.cos(h) * x - np.sin(h) * e
    fd = (p.potential(xp) - p.potential(xm)) / (2 * h)
    assert np.allclose(fd, np.einsum("nd,nd->n", g, e), rtol=0, atol=1e-7)


def test_general_form_drift_and_no_potential():
    a = unit(3, 3, 0)
    w = np.random.default_rng(1).standard_normal((3, 3))
    p = Perceptron(a, w=w, activation="tanh")
    x = unit(10, 3, 3)
    vec = np.tanh(x @ a.T) @ w
    assert np.allclose(p.drift(x), vec - np.einsum("nd,nd->n", vec, x)[:, None] * x)
    with pytest.raises(ValueError, match="no potential"):
        p.potential(x)
    assert not Model(3, 1.0, "ascent", perceptron=p).has_energy


# --- velocity and energy from their definitions -------------------------------------------------
def brute_velocity(model, x, y, w):
    """The model §1 written out point by point, independently of Model.velocity."""
    s = 1.0 if model.flow == "ascent" else -1.0
    out = []
    for xi in x:
        P = np.eye(len(xi)) - np.outer(xi, xi)
        num = sum(wj * math.exp(model.beta * (xi @ yj - 1)) * (P @ yj) for yj, wj in zip(y, w))
        den = sum(wj * math.exp(model.beta * (xi @ yj - 1)) for yj, wj in zip(y, w))
        if model.attention == "unnormalized":
            att = model.strength * num
        elif model.attention == "normalized":
            att = num / den
        else:
            att = 0 * num
        drift = 0 * xi
        if model.perceptron is not None:
            p = model.perceptron
            W = p.c[:, None] * p.a if p.is_gradient else p.w
            drift = P @ (activation(p.a @ xi + p.b, p.activation) @ W)
        out.append(s * (att + drift))
    return np.array(out)


@pytest.mark.parametrize("attention", ["unnormalized", "normalized", "none"])
@pytest.mark.parametrize("flow", ["ascent", "descent"])
@pytest.mark.parametrize("general", [False, True])
def test_velocity_matches_definition(attention, flow, general):
    d = 4
    p = Perceptron.random(d, 3, "gelu", 1.0, seed=3, general=general, bias_scale=0.3)
    m = Model(d, 2.5, flow, attention=attention, strength=1.0 if attention == "normalized" else 1.7, perceptron=p)
    y = unit(30, d, 4)
    w = np.random.default_rng(5).random(30)
    w /= w.sum()
    x = unit(7, d, 6)
    assert np.allclose(m.velocity_direct(x, y, w), brute_velocity(m, x, y, w), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("d", [2, 3, 4, 6])          # tangent_project: columns (d <= 3), rows (d > 3)
@pytest.mark.parametrize("general", [False, True])
@pytest.mark.parametrize("units", [1, 5])
def test_perceptron_drift_and_potential_match_their_definition(d, general, units):
    """drift = P_x sum_k W_k sigma(<a_k, x> + b_k) and V = sum_k c_k Sigma(<a_k, x> + b_k), written out
    point by point (The model §1); and the drift is the tangent gradient of V (centred differences
    along a tangent direction)."""
    p = Perceptron.random(d, units, "gelu", 1.0, seed=d + units, general=general, bias_scale=0.3)
    x = unit(50, d, 8)
    W = p.c[:, None] * p.a if p.is_gradient else p.w
    want = np.array([(np.eye(d) - np.outer(xi, xi)) @ (activation(p.a @ xi + p.b, p.activation) @ W) for xi in x])
    assert np.allclose(p.drift(x), want, rtol=1e-13, atol=1e-15)
    if general:
        return
    V = np.array([p.c @ activation_primitive(p.a @ xi + p.b, p.activation) for xi in x])
    assert np.allclose(p.potential(x), V, rtol=1e-13, atol=1e-15)
    e = tangent_project(x, np.random.default_rng(9).standard_normal((50, d)))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    h = 1e-5
    fd = (p.potential(x + h * e) - p.potential(x - h * e)) / (2 * h)      # V extends off the sphere smoothly
    assert np.allclose(fd, np.sum(p.drift(x) * e, axis=1), rtol=0, atol=1e-8)



@pytest.mark.parametrize("attention", ["unnormalized", "normalized", "none"])
@pytest.mark.parametrize("flow", ["ascent", "descent"])
@pytest.mark.parametrize("with_drift", [False, True])
def test_velocity_is_the_signed_drive_exactly_and_out_buffers_change_nothing(attention, flow, with_drift):
    """v = s w with s = +-1 holds bit for bit (the spectral solvers put s into the divergence), and the
    velocity written into a reused buffer is the velocity computed afresh, written out from The model §1."""
    rng = np.random.default_rng(7)
    strength = 1.0 if attention == "normalized" else 1.7
    m = Model(2, 2.5, flow, attention=attention, strength=strength)
    G, drift = rng.standard_normal((2, 500))
    psi = 0.5 + rng.random(500)
    drift = drift if with_drift else None
    s = 1.0 if flow == "ascent" else -1.0
    att = {"unnormalized": strength * G, "normalized": G / psi, "none": 0.0 * G}[attention]
    v = m.velocity(G, psi, drift)
    assert np.array_equal(v, s * att + (s * drift if with_drift else 0.0))
    w = m.drive(G, psi, drift)
    assert np.array_equal(v, s * w)
    buf = np.full(500, np.nan)
    assert m.velocity(G, psi, drift, out=buf) is buf and np.array_equal(buf, v)
    assert m.drive(G, psi, drift, out=buf) is buf and np.array_equal(buf, w)

def test_energy_matches_definition_and_beta_zero_limit():
    d = 3
    p = Perceptron.random(d, 3, "relu", 1.0, seed=3)
    y = unit(40, d, 1)
    w = np.full(40, 1 / 40)
    for beta in [0.7, 4.0]:
        m = Model(d, beta, "ascent", strength=1.3, perceptron=p)
        ref = 1.3 / (2 * beta) * sum(wi * wj * math.exp(beta * (yi @ yj - 1)) for yi, wi in zip(y, w) for yj, wj in zip(y, w))
        ref += sum(wi * vi for wi, vi in zip(w, p.potential(y)))
        assert math.isclose(m.energy_direct(y, w), ref, rel_tol=1e-12)
    # beta = 0: (gamma/2) ∬ (<x,y> - 1), the limit after dropping gamma / (2 beta)
    m0 = Model(d, 0.0, "ascent", strength=1.3, perceptron=p)
    mean = w @ y
    assert math.isclose(m0.energy_direct(y, w), 0.65 * (mean @ mean - 1) + w @ p.potential(y), rel_tol=1e-12)
    for beta in [1e-5, 1e-7]:
        mb = Model(d, beta, "ascent", strength=1.3, perceptron=p)
        assert abs(mb.energy_direct(y, w) - 1.3 / (2 * beta) - m0.energy_direct(y, w)) < 1e-4
