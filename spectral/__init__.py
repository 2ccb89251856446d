"""Discretisation of functions on S^1 and S^2 — knows nothing of the model.

- :mod:`spectral.fourier`: real Fourier basis on S^1 (pyFFTW plans made once, reused).
- :mod:`spectral.sphere`: real spherical-harmonic basis on S^2 (SHTns, dealiased Gauss grid; point sums by ducc0).
- :mod:`spectral.multipliers`: Funk–Hecke multipliers of the zonal kernel exp(beta(t-1)), any d.
- :mod:`spectral.filters`: explicit spectral filters.
"""
