"""The command's message streams, and what happens to them when their reader has gone
(``attnpde run CFG 2>&1 | head`` once head has exited): the run goes on, its messages are dropped."""
from __future__ import annotations

import os
import sys

__all__ = ["say", "silence"]


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
    """Write one message line to ``stream`` (default: stderr) and flush it. If the reader of the stream has
    gone away, the run goes on: the stream is silenced, so this line and the later ones are dropped. A
    message is never worth the run, and the archive is what the run is for."""
    stream = stream or sys.stderr
    try:
        print(line, file=stream, flush=True)
    except BrokenPipeError:
        silence(stream)
