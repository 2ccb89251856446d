"""The default job of ``scripts/demo``: the circle PDE from uniform data with a ReLU perceptron."""
from __future__ import annotations

import sys
import time

from .model import Model
from .pde import solve_pde
from .perceptron import Perceptron


def main(argv: list[str] | None = None) -> int:
    perceptron = Perceptron.random(2, 2, "relu", 1.0, seed=111)
    model = Model(2, 1.0, "ascent", perceptron=perceptron)
    print("attnpde demo: mean-field PDE on S^1 from uniform data, ascent, USA beta = 1, ReLU perceptron (2 units)")
    t0 = time.perf_counter()
    # ReLU makes rho jump at the perceptron's dead-zone boundaries: the Fourier tail decays like
    # K^(-1/2) there, so this run accepts a tail of 1e-2 at its cap of 2048 modes.
    result = solve_pde(model, 10.0, 128, save_every=0.5, max_degree=2048, tail_max=1e-2,
                       progress=sys.stdout.isatty())
    print(result.summary())
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
