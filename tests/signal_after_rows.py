"""Run the attnpde command and signal this process once its archive holds AFTER snapshot rows.

    python tests/signal_after_rows.py AFTER SIGNAL attnpde-arguments...

Every batch is written at once (the writer's flush interval set to 0 in this process only), so where the
run is cut does not depend on how fast the machine is, or how busy. The signal is sent once, right after
the batch whose rows (of /pde/t or /particles/t) reach AFTER, from the thread that wrote it (in the
foreground or behind the run). The patch is made at import, so that worker processes forked by a sweep
carry it too. Used by tests/test_cli_archive.py (kill -9 and Ctrl-C of a run) and
tests/test_sweep_members.py (a sweep member's process killed).
"""
import os
import sys

from solvers.app import archive

_write = archive.ArchiveWriter._write_batch


def _write_batch(self, *a, **k):
    _write(self, *a, **k)
    rows = max((self.f[g].shape[0] for g in ("pde/t", "particles/t") if g in self.f), default=0)
    if rows >= int(sys.argv[1]) and not getattr(self, "_signalled", False):
        self._signalled = True
        os.kill(os.getpid(), int(sys.argv[2]))


archive.ArchiveWriter._due = lambda self: True
archive.ArchiveWriter._write_batch = _write_batch

if __name__ == "__main__":
    from solvers.app.cli import main
    sys.exit(main(sys.argv[3:]))
