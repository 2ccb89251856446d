"""The sections of a run's archive: /pde, /particles and their atoms as the solvers hand them over (snapshots,
checkpoints, the end of a stage), and the results written whole (/comparison, /validation). Each batch is one
transaction of :class:`~.archive_transaction.ArchiveTransaction` (the commit and what a kill leaves); the datasets'
dimensions and the text attributes' seal are in :mod:`.archive_dims`.
"""

import json
import math
from typing import Any, Callable

import h5py
import numpy as np

from .archive_files import ArchiveDamaged, ArchiveFull
from .archive_reader import read_restart, read_results, read_state
from .archive_schema import (PARTICLE_SERIES, PDE_SERIES, STEP_KEYS, digest, to_json)
from .archive_dims import _fixed_text, _grid_coordinates, _set_attrs, put, seal, write_model
from .archive_transaction import ArchiveTransaction, _kept_after_snapshot, _nbytes, _stack


class ArchiveWriter(ArchiveTransaction):
    __doc__ = ArchiveTransaction.__doc__

    # --- PDE ------------------------------------------------------------------------------------------
    def pde_begin(self, grid: np.ndarray, options: dict, initial: str, spec: dict | None = None) -> None:
        """Open /pde: the output grid, the options as the run resolved them (``PDESpec.options_dict``), and the
        whole spec (``PDESpec.to_dict``, JSON in /pde@spec), which a resume compares with its own."""
        extra = {} if spec is None else {"spec": to_json(spec)}
        self._begin_stage("pde", "grid", grid, options, initial, options_note=PDE_OPTIONS_NOTE, **extra)
        self._step_rows0 = 0

    def _begin_stage(self, name: str, key: str, data: np.ndarray, options: dict, initial: str, **attrs) -> None:
        """Open the group of a stage (afresh: a stage without a committed state holds no rows): its fixed
        dataset ``key``, settings, initial data, and an empty restart group (a stage without one has lost it)."""
        data = np.asarray(data, dtype=float)
        with self._writing(data.nbytes * 2):
            if name in self.f:
                del self.f[name]
                self._datasets.clear()
            g = self.f.create_group(name)
            self._crc[name] = {}
            self._state.pop(name, None)
            self._cover(name, put(g, key, data))
            if name == "pde" and self.labels:
                for ds in _grid_coordinates(g, data):
                    self._cover(name, ds)
            g.create_group("restart")
            g.attrs.update({"options": to_json(options), "initial": initial, "complete": False, "stop_reason": "",
                            **attrs})
            seal(g)
            self._labeled = {p for p in self._labeled if not p.startswith(name)}
            self._flush()                     # the stage on the disk, before its first batch

    def pde_snapshot(self, snap: dict) -> None:
        """Buffer one snapshot (the dict a solve_pde callback receives); write the batch when due."""
        self._buffer("pde", snap)

    def pde_checkpoint(self, cp: dict) -> None:
        """Write the state a run kept between snapshots (``PDERun.run``'s checkpoint: {"restart", "steps"})
        as its restart state, after the snapshots buffered before it and with the steps since."""
        def write() -> None:
            step_rows = self._write_steps({k: cp["steps"][k] for k in STEP_KEYS})
            self._pde_restart(self.f["pde"], dict(cp["restart"]), step_rows, [], 0)
        self._checkpoint("pde", write, cp["restart"])

    def _write_pde(self, snaps: list[dict]) -> None:
        g = self.f["pde"]
        def column(key, dtype):
            return np.array([s[key] for s in snaps], dtype=dtype)
        t = self._append(g, "pde", "t", column("t", float))
        coeffs = self._append(g, "pde", "coeffs", _stack([s["coeffs"] for s in snaps], complex),
                              compress="coeffs" in self.compress, grow=True)
        if self.labels:
            self._mode_coordinates(g, coeffs.shape[1])
        self._append(g, "pde", "degree", column("degree", np.int64))
        self._append(g, "pde", "density", _stack([s["density"] for s in snaps], float),
                     compress="density" in self.compress)
        for k in PDE_SERIES:
            self._append(g, "pde", k, column(k, float))
        step_rows = self._write_steps({k: [v for s in snaps for v in s.get("steps", {}).get(k, ())]
                                       for k in STEP_KEYS})
        lag = [(i, s) for i, s in enumerate(snaps) if s.get("nodes") is not None]
        self._pde_restart(g, dict(snaps[-1]["restart"]), step_rows, lag, t.shape[0] - len(snaps))
        self._kept_after["pde"] = False

    def _write_steps(self, columns: dict) -> int:
        """Append the attempted steps (STEP_KEYS -> iterable of values) to /pde/steps; returns its rows."""
        st = self.f["pde"].require_group("steps")
        for k, dt in zip(STEP_KEYS, (float, float, float, bool)):
            self._append(st, "pde", k, np.fromiter(columns[k], dtype=dt))
        self._label(st, "pde/steps")
        return st["t"].shape[0]

    def _mode_coordinates(self, g: h5py.Group, width: int) -> None:
        """Coordinates of the coefficient axis of /pde, grown to ``width``: k on S^1; l and m on S^2."""
        from ..pde_spec import space_for
        space = space_for(self.d)[1]
        for name, values in space.mode_coordinates(space.degree_of(width)).items():
            self._grow_to(g, "pde", name, np.asarray(values, dtype=np.int64))

    def _pde_restart(self, g: h5py.Group, restart: dict, step_rows: int, lag: list, first_row: int) -> None:
        """Commit the restart state (a snapshot's, or one kept after it) with the rows it continues after: the
        snapshots, ``step_rows`` steps, the node measures (``lag``: the Lagrangian snapshots just appended,
        the first at row ``first_row``); its refinements and grids, which /pde's datasets show."""
        restart["refinements"] = [list(map(float, r)) for r in restart.get("refinements", [])]
        restart["grids"] = [list(map(int, r)) for r in restart.get("grids", [])]
        new = [k for k, rows in (("refinements", np.array(restart["refinements"], dtype=float).reshape(-1, 3)),
                                 ("grids", np.array(restart["grids"], dtype=np.int64)))
               if (rows.size or k == "refinements") and self._grow_to(g, "pde", k, rows)]
        if lag:
            restart.update(self._write_nodes(g, first_row, lag, restart))
        elif "lagrangian" in g and "t" in g["lagrangian"]:
            restart.update(lag_rows=int(g["lagrangian/t"].shape[0]), lag_points=int(g["lagrangian/w"].shape[0]))
        restart["snapshots"] = g["t"].shape[0]
        restart["step_rows"] = step_rows
        self._label(g, "pde", new)
        self._commit("pde", restart)

    def _write_nodes(self, g: h5py.Group, first_row: int, lag: list, restart: dict) -> dict:
        """Append the node measures of Lagrangian snapshots to /pde/lagrangian (one ragged array, archive_schema.RAGGED:
        per snapshot its row in /pde, time, node count and max drift; the nodes of all snapshots one after
        another in x, w, count), with the handoff record and the merges. Returns the row counts the restart
        state covers."""
        lg = g.require_group("lagrangian")
        handoff = to_json(restart["handoff"])
        if lg.attrs.get("handoff") != handoff:
            lg.attrs.update({"handoff": handoff, "layout": RAGGED_NOTE})
            seal(lg)
        self._grow_to(lg, "pde", "merges", np.array(restart.get("merges", []), dtype=float).reshape(-1, 3))
        nodes = [s["nodes"] for _, s in lag]
        self._append(lg, "pde", "t", np.array([s["t"] for _, s in lag], dtype=float))
        self._append(lg, "pde", "snapshot", np.array([first_row + i for i, _ in lag], dtype=np.int64))
        self._append(lg, "pde", "node_count", np.array([len(n["w"]) for n in nodes], dtype=np.int64))
        self._append(lg, "pde", "max_drift", np.array([n["max_drift"] for n in nodes], dtype=float))
        for k, dt in (("x", float), ("w", float), ("count", np.int64)):
            self._append(lg, "pde", k, np.concatenate([np.asarray(n[k], dtype=dt) for n in nodes]))
        self._label(lg, "pde/lagrangian", ["merges"])
        return {"lag_rows": int(lg["t"].shape[0]), "lag_points": int(lg["w"].shape[0])}

    def _finish_restart(self, section: str, result, write: Callable[[dict], None]) -> None:
        """The restart state a stage ends with: ``write(result.restart)`` when it is the state of the step an
        interruption stopped after, or when a checkpoint wrote a newer one than the last snapshot's of a
        complete stage (that one again, as a run without checkpoints leaves); a complete stage's in slot a,
        covering everything the stage wrote (:meth:`_settle_restart`)."""
        complete = result.stop_reason != "interrupted"
        self._hold = False
        held = self._held.pop(section, None)
        if _kept_after_snapshot(result) or (complete and self._kept_after[section] and result.restart is not None):
            write(dict(result.restart))
        elif held is not None:
            self._commit(section, held)
        self._kept_after[section] = False
        if complete:
            self._settle_restart(section)

    def _settle_restart(self, section: str) -> None:
        """A complete stage keeps its restart state in slot a only, whatever the number of states written
        before (which the wall clock decides), so that its archive does not depend on timing, and that state
        covers every row the stage wrote (steps after its last snapshot included): the committed state is
        committed again when it is in slot b or rows came after it, then b goes."""
        g = self.f[section]
        if "restart" not in g or "state" not in g["restart"].attrs:
            return
        r = g["restart"]
        committed = self._state.get(section) or read_state(r)
        covered = {k: v for k, v in (committed.get("crc") or {}).items() if not k.startswith("restart/")}
        if committed.get("slot") == "b" or covered != self._crc[section]:
            state = read_restart(g, with_rows=False)
            for k in ("slot", "crc", "digest"):
                state.pop(k, None)
            self._commit(section, state)
            if self._state[section].get("slot") == "b":
                self._commit(section, state)
        if "b" in r:
            del r["b"]
            self._datasets.clear()
            self._labeled.discard(f"{section}/restart/b")

    def _finish_stage(self, name: str, result) -> h5py.Group:
        """How the stage ended: its stop reason and message, the time and steps it reached, and the wall time
        added to that of the runs it resumed (the caller flushes)."""
        g = self.f[name]
        g.attrs.update({"stop_reason": result.stop_reason, "message": result.message, "t_stop": result.t_stop,
                        "nsteps": result.nsteps, "nrejected": result.nrejected,
                        "wall_time": float(g.attrs.get("wall_time", 0.0)) + float(result.wall_time),
                        "complete": result.stop_reason != "interrupted"})
        seal(g)
        return g

    def _last_batch(self) -> None:
        """Write a stage's last batch, its commit held back for the stage's end (``_hold``): the end's own
        commit covers both."""
        self._hold = True
        try:
            self._write_batch()
        except BaseException:
            self._hold, self._held = False, {}
            raise

    def pde_finish(self, result) -> None:
        """Record how the PDE run ended, and its atoms; for a run an interruption stopped between
        snapshots, the state it kept there (with the steps since its last snapshot). A complete stage's
        last commit covers everything it wrote, its atoms included (the commit of its last batch waits for
        them: one commit instead of two); then it is marked complete."""
        self._last_batch()
        check = None if result.lagrangian is None else result.lagrangian.check
        with self._writing(_nbytes(result.restart or {}) + _nbytes({} if check is None else check.to_dict())):
            g = self.f["pde"]
            sent = (g["steps/t"].shape[0] if "steps" in g else 0) - self._step_rows0    # this run's steps written
            if len(result.steps["t"]) > sent:
                # the steps after the last snapshot or checkpoint (a stop without a snapshot: max_steps, ...)
                self._write_steps({k: result.steps[k][sent:] for k in STEP_KEYS})
            if result.lagrangian is not None:
                # the node steps of the whole run (the restart state holds those of its last snapshot)
                g.attrs.update({"node_nsteps": int(result.lagrangian.node_nsteps),
                                "node_nrejected": int(result.lagrangian.node_nrejected)})
            if check is not None:
                c = g.require_group("lagrangian").require_group("check")
                for k in ("x", "w", "count"):
                    self._cover("pde", put(c, k, np.asarray(getattr(check, k))))
                self._label_group(c, "pde/lagrangian/check")
                c.attrs.update(check.scalars())
                seal(c)
            self._write_terminal(g, result)
            cut_check = result.lagrangian is not None and result.lagrangian.check_interrupted
            if (result.stop_reason != "interrupted" or cut_check) and "t" in g and g["t"].shape[0]:
                # a resumed result holds only what came after its restart: its atoms come from the whole
                # archived run, read back; a run written from its start has them in memory
                from .archive_reader import read_model, read_pde
                whole = (result if not self.resumed and len(result.t) == g["t"].shape[0]
                         else read_pde(g, read_model(self.f), all_rows=True))
                # the rerun cut: the solution's atoms, without error bars until a resume runs the rerun again
                marks: dict[str, Any] = {"error_estimate": "interrupted"} if cut_check else {}
                self.write_atoms("pde", whole.atoms(), **marks)
            self._finish_restart("pde", result, lambda r: self._pde_restart(
                g, r, self._step_rows0 + r["step_log"], [], 0))
            self._flush()                    # what the stage holds, then that it is complete
            self._finish_stage("pde", result)
            self._record_stage("pde", result)

    def _write_terminal(self, g: h5py.Group, result) -> None:
        """/pde/terminal (the certified state: arrays as datasets, scalars as attributes), /pde/plateaus (a
        ragged table: natoms per plateau, their atoms one plateau after another) and /pde/stages (the slow
        stages, one row each), each replaced whole and covered by the stage's last commit."""
        for name in ("terminal", "plateaus", "stages"):
            if name in g:
                del g[name]
                self._datasets.clear()
                self._crc["pde"] = {k: v for k, v in self._crc["pde"].items() if not k.startswith(f"/pde/{name}/")}
        term = getattr(result, "terminal", None)
        if term is not None:
            t = g.create_group("terminal")
            ev = np.asarray(term.eigenvalues)
            arrays = {k: getattr(term, k) for k in term._ARRAYS}
            arrays["eigenvalues"] = ev.real
            if np.iscomplexobj(ev):
                arrays["eigenvalues_imag"] = ev.imag
            for k, v in arrays.items():
                if v is not None:
                    v = np.asarray(v)
                    self._cover("pde", put(t, k, v.astype(np.int8) if v.dtype == bool else v))
            t.attrs.update({"t": term.t, "max_speed": term.max_speed, "stable": bool(term.stable),
                            "verdict": term.verdict, "growth": term.growth, "neutral": int(term.neutral),
                            "energy": term.energy, "check_nodes": -1 if term.check_nodes is None else term.check_nodes,
                            "newton_steps": int(term.newton_steps),
                            "energy_gap": math.nan if term.energy_gap is None else term.energy_gap,
                            "is_global": -1 if term.is_global is None else int(term.is_global),
                            "extremum_energy": math.nan if term.extremum_energy is None else term.extremum_energy,
                            "extremum_kind": term.extremum_kind, "global_note": term.global_note})
            seal(t)
            self._label_group(t, "pde/terminal")
        plateaus = getattr(result, "plateaus", None) or []
        if plateaus:
            p = g.create_group("plateaus")
            columns = {k: np.array([getattr(q, k) for q in plateaus], dtype=float)
                       for k in ("t_entered", "t_certified", "energy", "growth", "kick")}
            columns.update(atom=np.array([q.atom for q in plateaus], dtype=np.int64),
                           part=np.array([q.part for q in plateaus], dtype="S16"),
                           natoms=np.array([len(q.masses) for q in plateaus], dtype=np.int64),
                           **{k: np.concatenate([np.asarray(getattr(q, k)) for q in plateaus])
                              for k in ("positions", "masses", "direction")})
            for k, v in columns.items():
                self._cover("pde", put(p, k, v))
            self._label_group(p, "pde/plateaus")
        stages = getattr(result, "slow_stages", None) or []
        if stages:
            p = g.create_group("stages")
            columns = {k: np.array([getattr(q, k) for q in stages], dtype=float)
                       for k in ("t_entered", "t_left", "speed", "scale", "t_move")}
            columns["atom_mass"] = np.array([q.mass for q in stages], dtype=float)
            columns.update(atoms=np.array([q.atoms for q in stages], dtype=np.int64),
                           atom=np.array([q.atom for q in stages], dtype=np.int64),
                           position=np.array([q.position for q in stages], dtype=float),
                           why=np.array([q.why.encode() for q in stages], dtype="S"))
            for k, v in columns.items():
                self._cover("pde", put(p, k, v))
            self._label_group(p, "pde/stages")

    def _record_results(self, prefix: str, entries: dict) -> None:
        """The root's ``results``: what the archive holds complete (a stage: the digest of its last restart
        state; a result written whole, /comparison or /validation: the CRC-32 and shape of its datasets), with
        its digest, written in place after a flush, so that a reader finds any of them missing if it goes."""
        self._flush()
        record = {k: v for k, v in read_results(self.f).items() if not k.startswith(prefix) and k != "digest"}
        record.update(entries)
        record["digest"] = digest(record)
        _set_attrs(self.f, {"results": _fixed_text(to_json(record))})
        self._flush()

    def _record_stage(self, section: str, result) -> None:
        """A complete stage in the root's ``results`` (the digest of its last restart state); flushed."""
        if result.stop_reason == "interrupted" or "state" not in self.f[f"{section}/restart"].attrs:
            self._flush()
            return
        digest = read_state(self.f[f"{section}/restart"])["digest"]
        self._record_results(f"/{section}@", {f"/{section}@state": [digest]})

    def _cover(self, section: str, ds: h5py.Dataset) -> None:
        """Count a dataset written once (outside the per-snapshot series) in the section's next commit, by its
        path from the root, so that a reader finds it missing if it goes."""
        self._crc[section][ds.name] = [int(ds.attrs["crc32"]), *ds.shape]

    # --- particles ----------------------------------------------------------------------------------
    def particles_begin(self, w: np.ndarray, settings: dict, initial: str) -> None:
        """Open /particles: the weights and the run's settings (``simulate_particles`` arguments: n, init,
        seed, integrator, dt, t_final, save_every, stop, and the options)."""
        self._begin_stage("particles", "w", np.asarray(w, dtype=float), settings, initial)

    def particles_snapshot(self, snap: dict) -> None:
        """Buffer one particle snapshot; write the batch when due."""
        self._buffer("particles", snap)

    def particles_checkpoint(self, cp: dict) -> None:
        """Write the state a particle run kept between snapshots as its restart state (after the snapshots
        buffered before it)."""
        self._checkpoint("particles", lambda: self._particles_restart(self.f["particles"], dict(cp["restart"])),
                         cp["restart"])

    def _write_particles(self, snaps: list[dict]) -> None:
        g = self.f["particles"]
        before = g["t"].shape[0] if "t" in g else 0
        self._append(g, "particles", "t", np.array([s["t"] for s in snaps], dtype=float))
        self._append(g, "particles", "x", _stack([s["x"] for s in snaps], float), compress="x" in self.compress)
        for k in PARTICLE_SERIES:
            # a series this version records and the archive's earlier rows (a resumed older archive) do not:
            # NaN for those rows, so that every series keeps the rows of t
            head = [np.nan] * before if before and k not in g else []
            self._append(g, "particles", k, np.array(head + [s.get(k, np.nan) for s in snaps], dtype=float))
        counts = np.array([s.get("cluster_count", -1) for s in snaps], dtype=np.int64)
        self._append(g, "particles", "n_clusters", counts)
        self._particles_restart(g, dict(snaps[-1]["restart"]))
        self._kept_after["particles"] = False

    def _particles_restart(self, g: h5py.Group, restart: dict) -> None:
        """Commit the restart state (a snapshot's, or one kept after it), after the snapshots written so far."""
        self._label(g, "particles")
        self._commit("particles", {**restart, "snapshots": g["t"].shape[0]})

    def particles_finish(self, result) -> None:
        """Record how the particle run ended, and its clusters at the end (the stopping rule's scale and
        rule; scale 0.5 and single linkage without one); for a run an interruption stopped between
        snapshots, the state it kept there."""
        self._last_batch()
        with self._writing(_nbytes(result.restart or {})):
            g = self.f["particles"]
            over = getattr(result, "beyond_stability", None)
            g.attrs.update({"sum_method": result.sum_method,
                            "beyond_stability": math.nan if over is None else float(over)})
            if result.stop_reason != "interrupted" and len(result.t):
                scale, rule = result.cluster_rule
                centres, masses = result.clusters(-1, scale=scale, rule=rule)
                self.write_atoms("particles", centres, masses, scale=scale, rule=rule)
            self._finish_restart("particles", result, lambda r: self._particles_restart(g, r))
            self._flush()
            self._finish_stage("particles", result)
            self._record_stage("particles", result)

    # --- shared -------------------------------------------------------------------------------------
    def write_atoms(self, which: str, atoms, masses: np.ndarray | None = None, **attrs) -> None:
        """/atoms/<which>: ``atoms`` an Atoms (a NodeAtoms adds counts, errors and the diffuse mass), or
        positions with ``masses``; rewritten whole (a resumed run's atoms replace the old ones)."""
        from ..lagrangian import NodeAtoms
        parent = self.f.require_group("atoms")
        if which in parent:
            del parent[which]
            self._datasets.clear()
        g = parent.create_group(which)
        positions = atoms.positions if masses is None else atoms
        masses = atoms.masses if masses is None else masses
        values = {"positions": np.asarray(positions, dtype=float).reshape(len(masses), -1) if len(masses) else
                  np.zeros((0, self.d or 2)), "masses": np.asarray(masses, dtype=float)}
        if isinstance(atoms, NodeAtoms):
            attrs.update(kind="node groups", diffuse=atoms.diffuse, radius=atoms.radius, dust=atoms.dust,
                         dust_groups=atoms.dust_groups)
            values.update(counts=atoms.counts, extents=atoms.extents)
            if atoms.mass_errors is not None:
                values.update(mass_errors=atoms.mass_errors, position_errors=atoms.position_errors)
                attrs.update(diffuse_error=atoms.diffuse_error, check_nodes=atoms.check_nodes)
        self._crc[which] = {k: v for k, v in self._crc[which].items() if not k.startswith(g.name + "/")}
        for k, v in values.items():
            self._cover(which, put(g, k, v))
        g.attrs.update(attrs)
        seal(g)
        self._label_group(g, f"atoms/{which}")


PDE_OPTIONS_NOTE = ("options: every option as the run used it, a default replaced by its value; null: dt0 "
                    "(computed from the initial state: the first step, steps/dt[0]) and atom_radius (a tenth of the "
                    "handoff nodes' spacing: lagrangian@handoff) when not given, dt_max, handoff_at, filter: none, "
                    "and the continuation's options (handoff_degree, nodes, node_rtol, node_atol) in a run without it")
RAGGED_NOTE = ("x, w and count hold the node measures of all node snapshots one after another (CF contiguous "
               "ragged array): node snapshot i, at time t[i] and row snapshot[i] of /pde, is rows "
               "sum(node_count[:i]) .. sum(node_count[:i+1]) - 1")


# --- results written whole --------------------------------------------------------------------------------
def write_comparison(writer: ArchiveWriter, cmp, d: int) -> None:
    """/comparison: the distances against its time axis, the matched atoms, the options, and each solver's
    concentration (``Comparison.concentration``) in concentration_<kind>/."""
    with writer._writing(1 << 20):
        if "comparison" in writer.f:                   # a new comparison replaces the old one whole
            del writer.f["comparison"]
            writer._datasets.clear()
        g = writer.f.create_group("comparison")
        put(g, "t", cmp.t)
        for name in ("w1", "mmd", "moment_gap", "energy_gap", "cdf_drift"):
            v = getattr(cmp, name)
            if v is not None:
                put(g, name, v)
        pairs = cmp.matched_atoms
        put(g, "matched_pde_positions", np.array([p["pde_position"] for p in pairs]).reshape(-1, d))
        put(g, "matched_particle_positions", np.array([p["particle_position"] for p in pairs]).reshape(-1, d))
        for key in ("position_error", "pde_mass", "particle_mass"):
            put(g, f"matched_{key}", np.array([p[key] for p in pairs], dtype=float))
        for which in ("pde", "particles"):
            un = getattr(cmp, f"unmatched_{which}")
            put(g, f"unmatched_{which}_positions", np.array([a[0] for a in un]).reshape(-1, d))
            put(g, f"unmatched_{which}_masses", np.array([a[1] for a in un], dtype=float))
        g.attrs.update({"kernel": cmp.kernel, "moments_degree": cmp.moments_degree,
                        "unmatched_pde": len(cmp.unmatched_pde), "unmatched_particles": len(cmp.unmatched_particles),
                        **{f"option_{k}": v for k, v in cmp.options.items()}})
        seal(g)
        for kind, con in cmp.concentration.items():
            cg = g.require_group(f"concentration_{kind}")
            for k in ("t", "mass_near_atoms", "effective_support", "l2", "final_positions", "final_masses"):
                put(cg, {"final_positions": "final_atom_positions", "final_masses": "final_atom_masses"}.get(k, k),
                    np.asarray(con[k]))
            cg.attrs.update({k: con[k] for k in ("radius", "eps", "cells", "statement")})
            seal(cg)
            writer._label_group(cg, f"comparison/concentration_{kind}")
        writer._label_group(g, "comparison")
        _cover_results(writer, g)


def write_validation(writer: ArchiveWriter, res, results: list[dict], compare_opts: dict, pde) -> None:
    """/validation: the distances (N, seed, t) of a validation study, its wall times and stop reasons,
    the fitted slopes, the comparison options and the PDE's end."""
    with writer._writing(sum(v.nbytes for v in res.distances.values())):
        if "validation" in writer.f:
            del writer.f["validation"]
            writer._datasets.clear()
        g = writer.f.create_group("validation")
        put(g, "n", np.asarray(res.n))
        put(g, "seed", np.asarray(res.seeds))
        put(g, "t", res.t)
        for k, v in res.distances.items():
            put(g, k, v)
        by = {(r["n"], r["seed"]): r for r in results}
        put(g, "wall", np.array([[by[(n, s)]["wall"] for s in res.seeds] for n in res.n]))
        put(g, "stop_reason", np.array([[by[(n, s)]["stop_reason"] for s in res.seeds] for n in res.n], dtype="S16"))
        g.attrs.update({"at": res.at, "slopes": json.dumps(res.slopes), "compare": json.dumps(compare_opts),
                        "table": res.table, "pde_stop_reason": pde.stop_reason, "pde_t_stop": float(pde.t_stop)})
        seal(g)
        writer._label_group(g, "validation")
        _cover_results(writer, g)


def _cover_results(writer: ArchiveWriter, g: h5py.Group) -> None:
    """Record the datasets of a result written whole (/comparison, /validation) in the root's ``results``."""
    entries: dict[str, list] = {}
    g.visititems(lambda name, ds: entries.__setitem__(ds.name, [int(ds.attrs["crc32"]), *ds.shape])
                 if isinstance(ds, h5py.Dataset) and "crc32" in ds.attrs else None)
    writer._record_results(g.name + "/", entries)


__all__ = ["ArchiveWriter", "write_comparison", "write_validation", "write_model", "read_restart",
           "ArchiveDamaged", "ArchiveFull"]
