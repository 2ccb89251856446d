"""Run the attnpde command and kill it (SIGKILL) inside its Nth restart-state write, after that state's
arrays have been written and flushed to the file and before the attribute that holds the rest of it.

    python tests/kill_in_restart_write.py N attnpde-arguments...

What a kill -9 or a crash at the worst moment leaves (tests/test_interrupts.py)."""
import os
import signal
import sys

from solvers.app import archive

_set_attrs = archive._set_attrs
_writes = []


def _set_attrs_then_die(obj, values, new=False):
    if "state" in values:
        _writes.append(True)
        if len(_writes) == int(sys.argv[1]):
            obj.file.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    return _set_attrs(obj, values, new)


archive._set_attrs = _set_attrs_then_die

if __name__ == "__main__":
    from solvers.app.cli import main
    sys.exit(main(sys.argv[2:]))
