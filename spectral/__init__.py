"""Discretisation of functions on S^1 and S^2 — knows nothing of the model.

- :mod:`spectral.fourier`: real Fourier basis on S^1 (pyFFTW plans made once, reused).
- :mod:`spectral.multipliers`: Funk–Hecke multipliers of the zonal kernel exp(beta(t-1)), any d.
- :mod:`spectral.filters`: explicit spectral filters.
"""
