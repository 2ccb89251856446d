"""The compiled loops of the stepping and of the interaction sums (``solvers/_kernels.c``), or a clear error
when they are not built.

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
``direct_sums(x, y, w, beta, psi, G)``   the interaction sums by direct summation, any d
``circle_coefficients``, ``circle_evaluate``     the Bessel series on S^1 (:class:`solvers.interaction.CircleSums`)
``sphere_coefficients``, ``sphere_evaluate``     the harmonic series on S^2 (:class:`solvers.interaction.SphereSums`)
``sphere_angles``, ``sphere_tangent``            ducc0's (theta, phi) of points on S^2, and tangent vectors from
                                         (theta, phi) components
``simd([name])``                         the loops in use ("avx512", "avx2", "baseline": the same bits)

The sums' loops (``solvers/_sums_loops.h``) compute each evaluation point on its own and keep their
coefficients as 8 partial sums whatever the SIMD width, so they too give the same bits on every machine.
"""
from __future__ import annotations

try:
    from . import _kernels as kernels
except ImportError as exc:              # pragma: no cover - an install without the build step
    raise ImportError(
        "attnpde's compiled loops (solvers/_kernels.c) are not built: install the package with "
        "`scripts/setup` or `pip install -e .` (a C compiler is needed, as for shtns)") from exc

__all__ = ["kernels"]
