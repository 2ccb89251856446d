"""Run the attnpde command and kill it (SIGKILL) inside its Nth restart-state write, after that state's
arrays have been written and flushed to the file and before the attribute that holds the rest of it.

    python tests/kill_in_restart_write.py N attnpde-arguments...
    python tests/kill_in_restart_write.py batch:N attnpde-arguments...

``batch:N`` counts only the writes that end a batch of snapshots (the restart state of its last
snapshot, written with its rows), not those of checkpoints. What a kill -9 or a crash at the worst moment
leaves (tests/test_interrupts.py)."""
import os
import signal
import sys
import traceback

from solvers.app import archive_dims, archive_transaction, archive_writer

_set_attrs = archive_dims._set_attrs
_writes = []
_batches_only = sys.argv[1].startswith("batch:")
_nth = int(sys.argv[1].removeprefix("batch:"))


def _in_a_batch() -> bool:
    return any(f.name in ("_write_pde", "_write_particles") for f in traceback.extract_stack())


def _set_attrs_then_die(obj, values, new=False):
    if "state" in values and (not _batches_only or _in_a_batch()):
        _writes.append(True)
        if len(_writes) == _nth:
            obj.file.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    return _set_attrs(obj, values, new)


# every module that writes a restart state looks the function up in its own namespace
for module in (archive_dims, archive_transaction, archive_writer):
    module._set_attrs = _set_attrs_then_die

if __name__ == "__main__":
    from solvers.app.cli import main
    sys.exit(main(sys.argv[2:]))
