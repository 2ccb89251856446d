"""The command's message streams, and what happens to them when their reader has gone
(``attnpde run CFG 2>&1 | head`` once head has exited): the run goes on, its messages are dropped."""
from __future__ import annotations

import os
import sys

__all__ = ["say", "silence", "standard_streams"]


def silence(stream) -> None:
    """Point the file descriptor of ``stream`` at /dev/null: whatever is written to it from now on (and
    the interpreter's flush at exit) is dropped. Nothing happens for a stream without a descriptor."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)
    except (OSError, ValueError):
        pass


def say(line: str, stream=None) -> None:
    """Write one message line to ``stream`` (default: stderr) and flush it. If the stream can no longer be
    written (its reader has gone away, or its device is full: ``2>/dev/full``), the run goes on: the stream
    is silenced, so this line and the later ones are dropped. A message is never worth the run, and the
    archive is what the run is for."""
    stream = stream or sys.stderr
    try:
        print(line, file=stream, flush=True)
    except OSError:                         # BrokenPipeError, ENOSPC, EIO
        silence(stream)


def standard_streams() -> None:
    """Descriptors 0, 1 and 2 open, on /dev/null where the caller closed them (``attnpde run CFG 2>&-``),
    and ``sys.stdout`` / ``sys.stderr`` for them. A closed descriptor 2 is the next file the process opens
    (the archive), and what a library prints to its stderr would be written into that file; messages nobody
    can read are dropped, as above."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)
