"""Plain-text description of an archive: what the run was, how it ended, its key numbers.

One function per result kind (`describe_model`, `describe_pde`, `describe_particles`); a comparison
and a validation study render themselves (`Comparison.summary`, `ValidationResult.table`).
`describe(path)` reads an archive and joins them.
"""
from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np

from ..lagrangian import DUST, UNRESOLVED, not_stationary_note, unresolved
from .archive import load
from .config import ConfigError, parse_config

__all__ = ["describe", "describe_model", "describe_pde", "describe_particles"]


def _vec(v) -> str:
    return "(" + ", ".join(f"{x:+.4f}" for x in np.asarray(v).ravel()) + ")"


def _atoms_lines(positions, masses, limit: int = 8, errors=None, position_errors=None, extents=None) -> list[str]:
    lines, loose = [], unresolved(masses, errors)
    for k, (p, m) in enumerate(list(zip(positions, masses))[:limit]):
        err = "" if errors is None else f" ± {errors[k]:.1e}"
        where = ("" if position_errors is None else f" ± {position_errors[k]:.1e} rad"
                 if np.isfinite(position_errors[k]) else " (no partner in the rerun)")
        size = "" if extents is None or not np.isfinite(extents[k]) else f", nodes within {extents[k]:.1e} rad of it"
        lines.append(f"      mass {m:.4f}{err} at {_vec(p)}{where}{size}" + (UNRESOLVED if loose[k] else ""))
    if len(masses) > limit:
        lines.append(f"      ... {len(masses) - limit} more (total mass {np.sum(masses):.4f})")
    return lines


def _ended(r) -> str:
    if getattr(r, "stop_reason", "") in ("", "killed"):
        return f"  no end recorded (killed, or still running): last snapshot at t = {r.t[-1]:.6g}"
    return f"  ended: {r.stop_reason} at t = {r.t_stop:.6g} — {getattr(r, 'message', '')}"


def describe_model(m, noise: str | None = None) -> list[str]:
    """The model's parameters and its perceptron; ``noise``: what to say of the noise instead of its value
    (a branch's, which is its parameter)."""
    p = m.perceptron
    return [f"model: S^{m.d - 1} (d = {m.d}), beta = {m.beta:g}, {m.flow}, attention {m.attention}, "
            f"strength {m.strength:g}, " + (noise if noise is not None else f"noise {m.noise:g}"),
            "  perceptron: none" if p is None else
            f"  perceptron: {p.units} units, {p.activation}, {'gradient' if p.is_gradient else 'general'} form"]


def _continuation_lines(r) -> list[str]:
    """The Lagrangian continuation of a PDE run: handoff, nodes, merges."""
    h, merges = r.lagrangian.handoff, r.lagrangian.merges
    last = next((n for n in reversed(r.nodes) if n is not None), None)
    return [f"  handoff to the Lagrangian continuation at t = {h.t:.6g} ({h.reason}): {h.message}",
            f"    from degree {h.degree}: {h.description}; clipped mass {h.clipped_mass:.2e}",
            f"    {len(merges)} steps with merges; nodes {h.nodes} -> {len(last['w']) if last else '?'}; "
            f"max |v| over the nodes at the end {last['max_drift']:.3g}" if last else "    no node snapshot"]


def _pde_atoms_lines(pos, mass, attrs: dict, errs, position_errors=None, extents=None) -> list[str]:
    heavy = int(np.sum(mass >= 0.01))
    if attrs.get("kind") != "node groups":
        return [f"  atoms: {len(mass)} (mass >= 0.01: {heavy}), total mass {np.sum(mass):.4f}; outside their "
                f"basins {max(0.0, 1.0 - float(np.sum(mass))):.4f}"] + _atoms_lines(pos, mass)
    est = (f", error estimate from the rerun with {int(attrs['check_nodes'])} nodes" if errs is not None
           else ", no error estimate yet (its rerun was interrupted: a resume runs it)"
           if attrs.get("error_estimate") == "interrupted"
           else ", no error estimate (error_estimate = false, or the run did not end)")
    # archives before extents grouped without the centre condition (lagrangian.node_atoms)
    rule = (f"nodes linked within {attrs['radius']:.2g} rad, >= 2 initial nodes" +
            (f", one within {attrs['radius']:.2g} rad of the centre" if extents is not None else ""))
    resolved = "" if errs is None else f", mass above its error: {int(np.sum(~unresolved(mass, errs)))}"
    return ([f"  atoms: {len(mass)} node groups ({rule}; mass >= 0.01: {heavy}{resolved}), total mass "
             f"{np.sum(mass):.4f}; diffuse mass "
             f"{attrs['diffuse']:.4f}" + (f" ± {attrs['diffuse_error']:.1e}" if errs is not None else "") + est]
            + ([f"  dust (node groups below {DUST:g} of the mass, not listed): {int(attrs['dust_groups'])} groups, "
                f"mass {float(attrs['dust']):.4f}"] if int(attrs.get("dust_groups", 0)) else [])
            + _atoms_lines(pos, mass, errors=errs, position_errors=position_errors, extents=extents))


def _energy_note(m) -> str:
    """Why E need not be monotone in this model (empty where the flow is a gradient flow of E)."""
    if not m.has_energy:
        return (" (not a Lyapunov function here: " + ("SA" if m.normalized else "the general-form perceptron")
                + " makes the flow no gradient flow of E)")
    return " (without the entropy term of the noise: need not be monotone)" if m.noise > 0 else ""


def describe_pde(r, atoms: dict) -> list[str]:
    """A `PDEResult`: initial data, how it ended, steps and resolution, invariants, the continuation,
    the atoms recorded at the end (``atoms`` as `RunArchive.atoms`)."""
    out = ["pde:", f"  initial: {r.initial}", _ended(r),
           f"  {len(r.t)} snapshots (t = {r.t[0]:.4g} .. {r.t[-1]:.4g}), {r.step_counts()}, "
           f"resolution {int(r.degree[0])} -> {int(r.degree[-1])}, {len(r.refinements)} refinement(s), "
           + ("wall not recorded (no end)" if r.stop_reason == "killed" else f"wall {r.wall_time:.1f} s"),
           f"  energy {r.energy[0]:.10g} -> {r.energy[-1]:.10g}{_energy_note(r.model)}; max |mass - 1| = "
           f"{np.max(np.abs(r.mass - 1)):.2e}"
           # past the handoff rho is a node measure: no minimum or spectral tail to watch
           + (f"; min rho (last) {r.min_density[-1]:.3g}; spectral tail (last) {r.tail[-1]:.2e}"
              if r.lagrangian is None else "")]
    if r.lagrangian is not None:
        out += _continuation_lines(r)
    for k, pl in enumerate(getattr(r, "plateaus", None) or []):
        out.append(f"  plateau {k + 1}: entered t = {pl.t_entered:.6g}, certified t = {pl.t_certified:.6g}, "
                   f"{len(pl.masses)} atom(s), energy {pl.energy:.10g}, growth {pl.growth:.3e} ({pl.part}"
                   + (f", atom {pl.atom + 1}" if pl.atom >= 0 else "") + f"), left by a kick of {pl.kick:.1e} rad")
    for st in getattr(r, "slow_stages", None) or []:
        out.append(f"  {st.summary()}")
    terminal = getattr(r, "terminal", None)
    if terminal is not None:
        out += _terminal_lines(terminal, atoms.get("pde:attrs", {}))
    elif r.lagrangian is not None:
        out.append("  terminal state: not certified")
    if "pde" in atoms and terminal is None:
        attrs = atoms.get("pde:attrs", {})
        positions, masses = atoms["pde"]
        lines = _pde_atoms_lines(positions, masses, attrs, atoms.get("pde:mass_errors"),
                                 atoms.get("pde:position_errors"), atoms.get("pde:extents"))
        note = (not_stationary_note(r.stop_reason, float(r.t[-1]), len(atoms["pde"][1]))
                if attrs.get("kind") == "node groups" else None)
        out += lines[:1] + ([f"  {note}"] if note else []) + lines[1:]
    return out


def _terminal_lines(T, attrs: dict) -> list[str]:
    """A certified end: its verdict, then where all the mass is (the atoms, the dust atoms lighter than DUST,
    the diffuse rest: they add to 1) and every atom, the dust ones marked; then what it was polished from."""
    word = {"stable": "stable", "unstable": "unstable (a saddle)", "marginal": "marginal"}.get(T.verdict, T.verdict)
    masses = np.asarray(T.masses, dtype=float)
    errs = T.mass_errors
    dust = masses < DUST
    heavy, light = float(np.sum(masses[~dust])), float(np.sum(masses[dust]))
    diffuse = max(0.0, 1.0 - heavy - light)
    n, k = int(np.sum(~dust)), int(np.sum(dust))
    lines = [f"  terminal state: certified at t = {T.t:.6g}, {word}, growth {T.growth:.3e}, max |v| {T.max_speed:.1e}"
             + (f", {T.neutral} neutral (symmetry)" if T.neutral else ""),
             (f"  {len(masses)} atoms: total mass {heavy:.4f} in {n} atom(s) + {light:.4f} in {k} dust atom(s) "
              f"(each below {DUST:g} of the mass, what the nodes barely resolve)" if k else
              f"  total mass {heavy:.4f} in {n} atom(s)") + f"; diffuse {diffuse:.4f}"]
    balance = getattr(T, "balance", None)
    if balance is not None:
        lines.append(f"  balanced: the forces at every atom cancel to {balance:.1e} of their size (max |v| / S) "
                     f"after {T.newton_steps} Newton step(s), which moved the atoms by at most "
                     f"{float(np.max(T.displacement, initial=0.0)):.1e} rad")
    if getattr(T, "energy_gap", None) is not None:
        lines.append(f"  against the global {T.extremum_kind} of the energy (E* = {T.extremum_energy:.10g}): "
                     f"energy gap {T.energy_gap:.3e}; "
                     + ("the end IS the global " if T.is_global else "not the global ")
                     + f"{T.extremum_kind} ({T.global_note})")
    elif getattr(T, "global_note", ""):
        lines.append(f"  global extremum: {T.global_note}")
    for i, (p, m) in enumerate(zip(T.positions, masses)):
        pm = f" ± {errs[i]:.1e}" if errs is not None and np.isfinite(errs[i]) else ""
        notes = [f"{int(T.counts[i])} initial nodes"]
        if getattr(T, "dead", None) is not None and T.dead[i]:
            notes.append("in a dead zone")
        if getattr(T, "underflow", None) is not None and T.underflow[i]:
            notes.append("every force on it underflows: balanced only to the floating-point range")
        lines.append(f"      {'dust ' if dust[i] else ''}atom mass {m:.4f}{pm} at {_vec(p)} ({'; '.join(notes)})")
    if attrs.get("kind") == "node groups":
        est = (f"; error bars from the rerun with {int(attrs['check_nodes'])} nodes" if errs is not None
               and "check_nodes" in attrs else "")
        lines.append(f"  polished from the node groups of the last snapshot (nodes linked within "
                     f"{attrs['radius']:.2g} rad){est}")
    return lines


def _clusters_and_comparison(r, masses: np.ndarray, cmp) -> list[str]:
    """How the clusters `info` lists relate to the particle atoms the comparison names: the same atoms, or
    why not (another rule, another time). Both are printed, so they must tell one story.

    The clusters (the stopping rule's count) take all of the mass that links to them; the comparison's atoms
    (solvers.comparison: density peaks) only the mass within its atom radius of each peak, at the last time
    both solvers saved, which precedes the particles' end when the PDE saves less often or stops earlier.
    """
    q = np.array(sorted([p["particle_mass"] for p in cmp.matched_atoms]
                        + [float(m) for _, m in cmp.unmatched_particles], reverse=True))
    min_mass = float(cmp.options.get("min_mass", 0.01))
    c = np.sort(np.asarray(masses, dtype=float)[np.asarray(masses) >= min_mass])[::-1]
    radius = float(cmp.options.get("atom_radius", float("nan")))
    t_c, t_p = float(cmp.t[-1]), float(r.t[-1])
    when = "" if abs(t_c - t_p) <= 1e-9 * max(1.0, abs(t_p)) else \
        f" (at t = {t_c:.4g}, the last time both solvers saved; the clusters are at the particles' end, t = {t_p:.4g})"
    rule = f"density peaks, each with the mass within {radius:.3g} rad of it"
    listed = ", ".join(f"{m:.4f}" for m in q[:8]) + (" ..." if len(q) > 8 else "")
    if len(q) == len(c) and (not len(q) or np.max(np.abs(q - c)) <= 0.02):
        return [f"  the comparison below finds the same {len(q)} particle atom(s) by its own rule ({rule}): "
                f"{listed or 'none'}{when}"]
    extra = float(np.sum(c) - np.sum(q))
    these = "this cluster holds" if len(c) == 1 else f"these {len(c)} clusters hold"
    return [f"  the comparison below names other particle atoms: {len(q)} by its own rule ({rule}): {listed or 'none'}"
            + when,
            f"    {these} {np.sum(c):.4f} of the mass, those atoms {np.sum(q):.4f}: "
            + (f"the clusters also take the {extra:.4f} they link to through the diffuse mass between the atoms"
               if extra > 0.01 else "the two rules split the mass differently")]


def _pde_atoms_and_comparison(r, positions, masses, cmp) -> list[str]:
    """How the PDE atoms `info` lists relate to the comparison's PDE atoms: the comparison counts the mass
    within its atom radius of each density peak (diffuse mass near an atom included), at the last time both
    solvers saved; each listed atom is paired with the comparison's nearest one within that radius."""
    found = [(p["pde_position"], p["pde_mass"]) for p in cmp.matched_atoms] + list(cmp.unmatched_pde)
    radius = float(cmp.options.get("atom_radius", float("nan")))
    if not found or not len(masses):
        return []
    P = np.asarray([f[0] for f in found]).reshape(len(found), -1)
    pairs = []
    for x, m in zip(np.asarray(positions)[:8], masses[:8]):
        dist = np.arccos(np.clip(P @ np.asarray(x), -1.0, 1.0))
        k = int(np.argmin(dist))
        if dist[k] <= radius:
            pairs.append(f"{found[k][1]:.4f} for {m:.4f}")
    if not pairs:
        return []
    t_c, t_e = float(cmp.t[-1]), float(r.t[-1])
    when = (f"at t = {t_c:.4g}" if abs(t_c - t_e) <= 1e-9 * max(1.0, abs(t_e))
            else f"at t = {t_c:.4g}, the last time both solvers saved, before the PDE's end")
    return [f"  the comparison below counts the mass within {radius:.3g} rad of each atom's density peak ({when}; "
            f"diffuse mass near it included): {', '.join(pairs)} here"]


def describe_particles(r, atoms: dict, comparison=None) -> list[str]:
    """A `ParticleResult`: size, how it ended, the clusters recorded at the end (by the rule and scale of
    its stopping rule, recorded with them) and, with a ``comparison``, how they relate to its particle
    atoms."""
    out = ["particles:", f"  N = {r.x.shape[1]}, {len(r.t)} snapshots (t = {r.t[0]:.4g} .. {r.t[-1]:.4g})",
           _ended(r)]
    stiffness = r.stiffness_line()
    if stiffness is not None:
        out.append("  " + stiffness)
    if "particles" in atoms:
        pos, mass = atoms["particles"]
        rule = atoms.get("particles:attrs", {}).get("rule", "linkage")
        what = ("single-linkage clusters at the end (The model §5; chain through any diffuse part)" if rule == "linkage"
                else "clusters at the end by the released code's rule (greedy arcs on S^1, components on S^2)")
        out.append(f"  {what}: {len(mass)} (mass >= 0.01: {int(np.sum(mass >= 0.01))})")
        out += _atoms_lines(pos, mass)
        if comparison is not None and len(comparison.t):
            out += _clusters_and_comparison(r, mass, comparison)
    return out


def _stages(run) -> set[str] | None:
    """The solver stages ("pde", "particles") of the archive's configuration; None if it does not parse."""
    try:
        cfg = parse_config(str(run.attrs.get("config", "")))
    except ConfigError:
        return None
    return {s for s in ("pde", "particles") if getattr(cfg, s) is not None}


def _resume_points(run) -> str:
    """Where a resume of each unfinished stage continues: its last snapshot, a state kept after it (where
    an interruption stopped it, or its last checkpoint), or t = 0 for a stage of the configuration that
    wrote no snapshot (killed before its first)."""
    where, stages = [], _stages(run)
    for name, res in (("pde", run.pde), ("particles", run.particles)):
        if res is None:
            if stages is not None and name in stages:
                where.append(f"{name}: its start, t = 0 (no snapshot of it was written)")
            continue
        r = getattr(res, "restart", None)
        if r is None or res.stop_reason not in ("interrupted", "killed"):
            continue
        last = r.get("last_snapshot_t")
        where.append(f"{name}: t = {float(r['t']):.6g}, a state kept after its last snapshot" if last is not None
                     and float(r["t"]) > float(last) else f"{name}: its last snapshot, t = {float(r['t']):.6g}")
    if where:
        return "; ".join(where)
    return "its last snapshot" if stages is None else "where it stopped (its solver stages are complete)"


def _resume_command(command: str, path: Path) -> str:
    """The archive's own `attnpde run` command made a resume of ``path``, the archive as info was given it
    (its --out and --force, also abbreviated, dropped; --out path and --resume added); a placeholder for
    the configuration when the command is not recorded."""
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = []
    if argv[:2] != ["attnpde", "run"] or len(argv) < 3:
        return f"attnpde run CONFIG --out {shlex.quote(str(path))} --resume"
    kept, skip = [], False
    for x in argv:
        name = x.split("=", 1)[0]
        # the option an argument names: argparse takes any unambiguous prefix of a long option
        option = next((o for o in ("--out", "--force", "--resume") if x.startswith("--") and len(name) > 2
                       and o.startswith(name)), None)
        if skip:
            skip = False
        elif option is None:
            kept.append(x)
        else:
            skip = option == "--out" and "=" not in x          # its value follows
    return shlex.join(kept + ["--out", str(path), "--resume"])


def describe(path: str | Path) -> str:
    """The text of `attnpde info`: the archive's header, then each result kind it holds."""
    run = load(path)
    a = run.attrs
    out = [f"archive {run.path}  ({a.get('format')} v{a.get('format_version')}, attnpde {a.get('software_version')})",
           f"  name: {a.get('name', '')}   status: {run.status}   created {a.get('created')}   "
           f"updated {a.get('updated')}",
           f"  command: {a.get('command', '')}"]
    if run.status != "finished":
        why = {"running": "killed, or still being written", "interrupted": "interrupted",
               "failed": f"failed: {a.get('failure', 'no reason recorded')}"}.get(run.status, run.status)
        if run.made_by == "validate":
            out.append(f"  not finished ({why}): `attnpde validate` does not resume; the same command again "
                       "starts the study over, its PDE included")
        elif str(a.get("command", "")).startswith("attnpde branch"):
            out.append(f"  not finished ({why}): `attnpde branch CONFIG --out {shlex.quote(str(run.path))} --resume` "
                       "continues it from its last point")
        elif run.made_by == "sweep":
            out.append(f"  not finished ({why}): a member of `attnpde sweep`; the sweep's own command with "
                       "--resume (its configuration, --beta list and --out folder) continues it from "
                       + _resume_points(run))
        else:
            out.append(f"  not finished ({why}): `{_resume_command(a.get('command', ''), run.path)}` continues it from "
                       + _resume_points(run))
    if run.warnings:
        out.append(f"  warning: {', '.join(run.warnings)} changed since attnpde wrote it (edited by hand, or damaged)")
    if a.get("libraries"):
        out.append(f"  libraries: {a['libraries']}")
    if a.get("libraries_resumed"):
        out.append(f"  resumed with: {a['libraries_resumed']}")
    if a.get("software_resumed"):
        out.append(f"  resumed by attnpde {a['software_resumed']}")
    if int(a.get("resumed", 0)):
        out.append(f"  resumed {int(a['resumed'])} time(s)")
    if a.get("resumed_with"):
        out.append(f"  resumed with other archive settings: {a['resumed_with']}")
    from .branch import branch_noise
    out += describe_model(run.model, branch_noise(run.path))
    if run.pde is not None:
        out += describe_pde(run.pde, run.atoms)
        terminal = getattr(run.pde, "terminal", None)
        listed = ((terminal.positions, terminal.masses) if terminal is not None
                  else run.atoms.get("pde"))
        if run.comparison is not None and len(run.comparison.t) and listed is not None:
            out += _pde_atoms_and_comparison(run.pde, listed[0], listed[1], run.comparison)
    if run.particles is not None:
        out += describe_particles(run.particles, run.atoms, run.comparison)
    if run.comparison is not None:
        out.append("comparison (PDE vs particles):")
        out += ["  " + line for line in run.comparison.summary().splitlines()]
    from .branch import describe_branch
    out += describe_branch(run.path)
    val = run.validation
    if val is not None:
        out.append(f"validation: particles -> PDE for N = {', '.join(str(int(n)) for n in val.n)} "
                   f"({len(val.seeds)} seed(s) each)")
        out += ["  " + line for line in val.table.splitlines()]
    return "\n".join(out)


def describe_layout(path: str | Path) -> str:
    """The text of `attnpde info --layout`: every group with its attributes, every dataset with its shape,
    type, named dimensions and what it holds (its long_name), the placeholder dimensions (no data) with
    what they count, and how the ragged node measure splits. The structure only: no value is checked."""
    import h5py

    from .archive import ArchiveDamaged, open_archive
    from .archive_reader import attr_text, is_dimension
    from .archive_schema import RAGGED

    path = Path(path)
    lines: list = []
    placeholders: dict = {}

    def short(v) -> str:
        v = v.item() if isinstance(v, np.generic) else v
        if isinstance(v, (bytes, np.bytes_)):
            v = v.decode(errors="replace").rstrip()
        if isinstance(v, str):
            return repr(v) if len(v) <= 40 and "\n" not in v else f"(text, {len(v)} characters)"
        if isinstance(v, np.ndarray):
            return f"(array {v.shape})"
        return f"{v:g}" if isinstance(v, float) else str(v)

    hidden = {"DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "long_name", "units", "standard_name",
              "sample_dimension", "coordinates", "description", "comment", "crc32", "text_crc32"}

    def visit(name: str, obj) -> None:
        where = "/" + name
        if isinstance(obj, h5py.Group):
            attrs = [f"{k} = {short(v)}" for k, v in obj.attrs.items() if k not in hidden]
            lines.append((where, "group" + (f"; attrs: {', '.join(attrs)}" if attrs else "")))
            return
        if is_dimension(obj):
            placeholders.setdefault(name.rsplit("/", 1)[-1], []).append(where.rsplit("/", 1)[0] or "/")
            return
        scale = h5py.h5ds.is_scale(obj.id)
        dims = [name.rsplit("/", 1)[-1]] if scale else [
            next((s.name.rsplit("/", 1)[-1] for s in obj.dims[i].values()), "?") for i in range(obj.ndim)]
        role = "coordinate: " if scale else ""
        what = attr_text(obj.attrs.get("long_name", ""))
        units = attr_text(obj.attrs.get("units", ""))
        lines.append((where, f"{str(obj.shape):14s} {str(obj.dtype):10s} [{', '.join(dims)}] {role}{what}"
                     + (f" ({units})" if units and units != "1" else "")))

    with open_archive(path) as f:
        try:
            head = (f"archive {path}  ({attr_text(f.attrs.get('format'))} v{f.attrs.get('format_version')}, "
                    f"checksums: {attr_text(f.attrs.get('checksums', 'none (written before them)'))})")
            attrs = [f"{k} = {short(v)}" for k, v in f.attrs.items() if k not in hidden]
            lines.append(("/", f"attrs: {', '.join(attrs)}"))
            f.visititems(visit)
        except Exception as e:                    # a structure HDF5 cannot walk
            raise ArchiveDamaged(f"{path}: damaged archive: its structure cannot be read "
                                 f"({' '.join(str(e).split())})") from None
    from .archive_schema import DIMENSION_NOTES
    width = max(len(w) for w, _ in lines) + 1
    out = [head, "", *(f"{w:{width}s} {text}" for w, text in lines)]
    if placeholders:
        out += ["", "dimensions without coordinates (empty placeholder datasets: no data; the length is that of the "
                    "variables using them):"]
        out += [f"  {k:20s} {DIMENSION_NOTES.get(k, k)}  (in {', '.join(sorted(set(v)))})"
                for k, v in sorted(placeholders.items())]
    if any(w == "/pde/lagrangian/x" for w, _ in lines):
        out += ["", f"/pde/lagrangian: {RAGGED}"]
    out += ["", "restart/ (a or b): the state a resume continues from; restart@state (JSON) names the slot, the "
                "rows it covers with their CRC-32, and its digest"]
    return "\n".join(out)
