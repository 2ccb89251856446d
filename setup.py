"""The one thing pyproject.toml cannot declare stably: the C extension of the stepping's compiled loops.

``solvers._kernels`` (solvers/_kernels.c, with its loops in solvers/_kernels_loops.h) is built by every
install (``scripts/setup``, ``pip install -e .``) with the C compiler shtns needs as well. -ffp-contract=off:
no fused multiply-add, which some CPUs have and others lack, so its results are the same bits everywhere.
Everything else about the package is in pyproject.toml.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "solvers._kernels",
    sources=["solvers/_kernels.c"],
    depends=["solvers/_kernels_loops.h", "solvers/_sums_loops.h"],
    extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math"],
)])
