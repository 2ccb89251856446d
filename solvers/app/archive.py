"""HDF5 archives of runs: self-describing, appended as the run goes, resumable, checked when read.

Layout (format ``attnpde-run``, version 3; versions 1 and 2 are read; ``attnpde info --layout`` prints
the layout of a given archive)::

    /                      attrs: format, format_version, checksums, software_version, created, updated,
                           status, config (the TOML text), command (the command line), name, compression,
                           libraries (the numerical libraries' versions and the CPU: what a run's round-off
                           depends on), libraries_resumed, software_resumed (a resume with other versions),
                           resumed, resumed_with (the [run] settings each resume changed), failure
    /model                 attrs: d, beta, flow, attention, strength, noise
    /model/perceptron      datasets a, b, c | w; attrs activation, form   (absent without perceptron)
    /pde                   t (T) [dimension scale "t"], coeffs (T, n) complex (canonical layout, exact
                           restart state), degree (T), density (T, grid...), grid (grid..., d),
                           energy, mass, min_density, tail, dissipation (T),
                           steps/{t, dt, error, accepted} (every attempted step), refinements (R, 3),
                           grids (G, 1 + grid dims: the computational grid of every degree used),
                           lagrangian/ (the continuation's node measures: one ragged array, see its
                           attribute layout), restart/ (the commit record, see below);
                           attrs: stop_reason ("" while running), message, t_stop, nsteps, nrejected,
                           options (JSON: every option as the run resolved it), initial, wall_time, complete
    /pde/terminal          the certified terminal state (PDEResult.terminal): positions (k, d), masses,
                           counts, extents, displacement, eigenvalues[_imag], mass_errors, position_errors,
                           residuals, scales (the balance of the forces), dead, underflow (0/1); attrs t,
                           verdict, stable, growth, neutral, energy, max_speed, check_nodes, newton_steps
    /pde/stages            the slow stages (PDEResult.slow_stages): per stage t_entered, t_left, atoms, atom,
                           atom_mass, position, speed, scale, t_move, why
    /pde/plateaus          the plateaus the run left (PDEResult.plateaus): per plateau t_entered,
                           t_certified, energy, growth, kick, atom, part, natoms; their atoms' positions,
                           masses, direction one plateau after another (ragged by natoms)
    /particles             t (T), x (T, N, d), w (N), energy, max_drift, dissipation, step_stiffness,
                           n_clusters (T), restart/; attrs: options (JSON: the simulate_particles
                           arguments as resolved), initial, stop_reason, message, t_stop, nsteps,
                           nrejected, sum_method, wall_time, complete
    /atoms/pde, /atoms/particles     positions (k, d), masses (k); node groups (past a handoff) also
                           counts, extents, mass_errors, position_errors; attrs: kind, diffuse, dust, radius, ...
    /comparison            distances against time (the comparison layer)
    /validation            the distances of ``attnpde validate`` (N, seed, t)

Every axis of every dataset has a named dimension (netCDF-4's dimension scales), so xarray and netCDF
tools read each group; a dimension without coordinates is an empty placeholder dataset whose attributes
say what it counts. Compression (gzip 1 with byte shuffling) applies to ``compression="none"`` (the default:
nothing), ``"density"`` (the output-grid density) or ``"all"`` (also coefficients and particle positions).

How a run is written (:mod:`.archive_transaction`, :mod:`.archive_writer`): snapshots are buffered and written in
batches, each a transaction whose commit record is the restart state (``restart@state``: the slot ``restart/a`` or
``restart/b`` holding its arrays, the rows it covers with their CRC-32, its digest). A kill at any moment leaves the
last committed state whole. How it is read (:mod:`.archive_reader`): under a shared lock, after checking the digests,
the CRC-32 of every dataset and HDF5's Fletcher-32 of every chunk. Locks and room to write: :mod:`.archive_files`.
The names, dimensions and CF attributes: :mod:`.archive_schema`.
"""
from .archive_files import ArchiveDamaged, ArchiveError, ArchiveFull, ArchiveInUse, Lock, replace_into
from .archive_reader import (RunArchive, load, model_differences, open_archive, read_comparison, read_model, read_pde,
                     read_particles, read_restart, read_state, read_validation, verify)
from .archive_schema import (COMPRESSIONS, FORMAT, FORMAT_VERSION, PARTICLE_SERIES, PDE_SERIES, STEP_KEYS,
                             SWEEP_COMMAND, VALIDATE_COMMAND, libraries, made_by, software_version)
from .archive_writer import ArchiveWriter, write_comparison, write_model, write_validation

__all__ = ["ArchiveError", "ArchiveDamaged", "ArchiveFull", "ArchiveInUse", "ArchiveWriter", "Lock", "RunArchive",
           "load", "made_by", "open_archive", "write_comparison", "read_comparison", "write_validation",
           "read_validation", "read_restart", "read_model", "read_pde", "read_particles", "read_state", "verify",
           "model_differences", "replace_into", "libraries", "software_version", "write_model",
           "FORMAT", "FORMAT_VERSION", "COMPRESSIONS", "PDE_SERIES", "PARTICLE_SERIES", "STEP_KEYS",
           "SWEEP_COMMAND", "VALIDATE_COMMAND"]
