"""The run layer of attnpde: what turns a configuration into archived results and back.

- :mod:`~solvers.app.config`: TOML run configurations, validated before any work;
- :mod:`~solvers.app.runner`: a configuration run end to end into one archive (stages, resume, progress);
- :mod:`~solvers.app.archive`: the HDF5 archive — writing and reading every result kind;
- :mod:`~solvers.app.info`, :mod:`~solvers.app.plots`: text and figures of an archive;
- :mod:`~solvers.app.sweep`, :mod:`~solvers.app.validate`: runs fanned out over beta, N and seeds;
- :mod:`~solvers.app.cli`: the ``attnpde`` command.

This package may import the numerics (``solvers.*``, ``spectral``); the numerics never import it
(checked by ``tests/test_architecture.py``).
"""
