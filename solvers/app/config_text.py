"""The text of a configuration: read from a file with limits (:func:`read_config_text`), parsed as TOML in one
line of error (:func:`parse_toml`), and written back (:func:`dump_toml`, a sweep member's archive keeps its own)."""
from __future__ import annotations

import math
import os
import stat
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..fields import ConfigError, json_string

__all__ = ["MAX_CONFIG_BYTES", "read_config_text", "parse_toml", "dump_toml"]

#: the largest configuration file read (bytes): the largest of runs/ is ~1.5 KiB; 1 MiB holds explicit
#: perceptron weights of ~10^5 numbers, and keeps any value's check and message cheap
MAX_CONFIG_BYTES = 1 << 20


def parse_toml(text: str) -> dict:
    """The table of TOML text; ConfigError with tomllib's own one-line message (and its line and column)
    when it is not valid TOML, also for arrays or inline tables nested too deep for the parser (tomllib
    recurses once per level: a few hundred levels exhaust Python's stack)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("", f"not valid TOML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise ConfigError("", "not valid TOML here: arrays or inline tables nested too deep for the parser "
                              f"(Python's recursion limit {sys.getrecursionlimit()})") from None


def read_config_text(path: str | Path) -> str:
    """The text of the configuration file ``path``: ConfigError (one line, naming the file) unless it is a
    regular file of at most MAX_CONFIG_BYTES in UTF-8. Nothing else is opened for reading: a FIFO that no
    one writes to, a device such as /dev/zero, a directory or a socket is refused from its ``stat``, and
    the file is opened non-blocking and checked again (it could be replaced in between)."""
    def refuse(why: str) -> ConfigError:
        return ConfigError("", f"{path}: {why}")

    try:
        st = os.stat(path)
    except OSError as e:
        raise refuse(f"cannot read: {e.strerror or e}") from None
    except ValueError as e:            # an embedded NUL in the path
        raise refuse(f"cannot read: {e}") from None

    def kind(mode: int) -> str | None:
        for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                           (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                           (stat.S_ISSOCK, "a socket")):
            if test(mode):
                return what
        return None if stat.S_ISREG(mode) else "not a regular file"

    def check(st) -> None:
        what = kind(st.st_mode)
        if what is not None:
            raise refuse(f"is {what}; give a TOML configuration file")
        if st.st_size > MAX_CONFIG_BYTES:
            raise refuse(f"is {st.st_size} bytes, above the {MAX_CONFIG_BYTES} (1 MiB) a configuration may have "
                         "(an archive? give the .toml configuration)")

    check(st)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise refuse(f"cannot read: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        check(os.fstat(f.fileno()))
        try:
            data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as e:
            raise refuse(f"cannot read: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise refuse(f"is more than {MAX_CONFIG_BYTES} bytes (1 MiB), the most a configuration may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start == 0 or data.startswith(b"\x89HDF"):
            raise refuse("not a UTF-8 TOML file (an archive? give the .toml configuration)") from None
        raise refuse(f"not a UTF-8 TOML file: byte {e.start} ({data[e.start:e.start + 1]!r}) is not UTF-8") from None


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan")
    if isinstance(v, str):
        return json_string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def dump_toml(raw: dict) -> str:
    """TOML text of a configuration dict (tables of scalars, arrays and sub-tables), e.g. for sweeps."""
    lines: list[str] = []

    def table(d: dict, name: str) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        subs = {k: v for k, v in d.items() if isinstance(v, dict)}
        if name and (scalars or not subs):
            lines.append(f"[{name}]")
        for k, v in scalars.items():
            lines.append(f"{k} = {_toml_value(v)}")
        if scalars or (name and not subs):
            lines.append("")
        for k, v in subs.items():
            table(v, f"{name}.{k}" if name else k)

    table(raw, "")
    return "\n".join(lines).rstrip() + "\n"
