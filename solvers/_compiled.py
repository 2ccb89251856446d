"""The compiled loops of the stepping (``solvers/_kernels.c``), or a clear error when they are not built.

They are part of the package, not an option: a numpy fallback would round differently, so a result would
depend on whether the extension happened to be built. The install builds them (``scripts/setup``, or
``pip install -e .``), with the C compiler that shtns needs as well.

What they compute (every function documents its IEEE operations, in order; the same bits on every
machine):

``weighted_sum(w, stack, out, factor)``   out = (sum_r w[r] stack[r]) * factor, rows added in order
``complex_multiply(a, b, out)``          out = a * b entrywise, (ar br - ai bi, ar bi + ai br)
``load_spectrum(c, factor, spec, ncols, mult)``  a batch of inverse transforms' input: row 0 = c (* factor)
                                         zero-padded, row q = row 0's head * mult[q - 1], zero-padded
``affine_flux(rho, g, gamma, drift, out, mm)``   g = gamma g + drift, out = rho g, and min / max of rho, g
"""
from __future__ import annotations

try:
    from . import _kernels as kernels
except ImportError as exc:              # pragma: no cover - an install without the build step
    raise ImportError(
        "attnpde's compiled loops (solvers/_kernels.c) are not built: install the package with "
        "`scripts/setup` or `pip install -e .` (a C compiler is needed, as for shtns)") from exc

__all__ = ["kernels"]
