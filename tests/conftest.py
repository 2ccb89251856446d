import os

# Keep BLAS/OpenMP from oversubscribing the 2-core CI machine.
os.environ.setdefault("OMP_NUM_THREADS", "2")
