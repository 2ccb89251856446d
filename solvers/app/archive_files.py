"""The archive as a file: who may use it (locks), room to write it (out of space as an ordinary failure),
and the errors a command reports in one line.

Locks. HDF5 creates a file by opening it with O_TRUNC and locks it only afterwards, so a refused
``--force`` used to empty the archive a run was writing. Every archive is opened here: first an advisory
lock (``flock``) on the file itself, taken on a descriptor opened without truncation (exclusive to write,
shared to read, never waiting), and only then HDF5, with its own locking off (the two would conflict within
one process). HDF5's locks are ``flock``s too, so a program reading an archive with h5py or xarray blocks a
writer here and is blocked by one. A lock this process holds already (the run reading back its own archive)
is shared. On a file system without locks (NFS mounted ``nolock``) the archive is used without them.

Space. Before each write the writer reserves the bytes it is about to add (``fallocate`` past the end of the
file, without changing its size; the file size limit, ``ulimit -f``, is checked against the same count), so
HDF5 never meets a full disk halfway through a flush, which leaves a file it cannot read. What the last
reservation did not use stays allocated past the end of the file (at most twice a batch and 512 KiB): giving it
back would cost a truncation per archive. A reservation that fails raises :class:`ArchiveFull` before anything
is written: the archive stays as its last flush left it. If a write fails all the same, :func:`abandon` points
HDF5's descriptor at /dev/null, so that nothing more of that session reaches the file.
"""
from __future__ import annotations

import ctypes
import errno
import os
import resource
import sys
from pathlib import Path

import h5py

#: the HDF5 file format of new objects: 1.8's, whose superblock, object headers (attributes included), fractal
#: heaps and version-2 B-trees carry checksums. Not 1.10's: its superblock marks a file open for writing, and
#: HDF5 then refuses to open a file whose writer was killed (until ``h5clear``)
LIBVER = ("v108", "v108")


class ArchiveError(ValueError):
    """A file that is not a readable attnpde archive (foreign, damaged, of another format version, in use,
    not writable): the command says why in one line and exits with status 2."""


class ArchiveInUse(ArchiveError):
    """The archive is locked by another process (a run writing it, a program reading it)."""


class ArchiveDamaged(ArchiveError):
    """The archive fails a check of its own content (a checksum, a missing dataset, a restart state that does
    not fit the rest)."""


class ArchiveFull(OSError):
    """No room to write the archive: a full device, a quota, or the file size limit."""


_LOCK_UNSUPPORTED = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}
#: (st_dev, st_ino) -> [exclusive?, count] of the locks this process holds
_HELD: dict[tuple[int, int], list] = {}


class Lock:
    """An advisory lock on an archive file (see the module docstring); ``fd`` stays open while it is held.
    ``exclusive`` to write (``create``: the file is created when missing, never truncated), else shared."""

    def __init__(self, path: str | Path, *, exclusive: bool, create: bool = False) -> None:
        import fcntl

        self.path, self.exclusive, self.locked = Path(path), exclusive, False
        self.under_own_writer = False            # this process writes the file: HDF5 must not lock it again
        flags = (os.O_RDWR | (os.O_CREAT if create else 0)) if exclusive else os.O_RDONLY
        try:
            self.fd = os.open(self.path, flags | getattr(os, "O_CLOEXEC", 0), 0o666)
        except OSError as e:
            raise _open_error(self.path, e, exclusive) from None
        st = os.fstat(self.fd)
        self.key = (st.st_dev, st.st_ino)
        held = _HELD.get(self.key)
        if held is not None and exclusive:
            os.close(self.fd)
            self.fd = -1
            raise ArchiveInUse(f"{self.path}: in use by another writer of this process")
        if held is not None:
            held[1] += 1                   # this process holds it already (a run reading its own archive)
            self.shared_with_self = True
            self.under_own_writer = bool(held[0])
            return
        self.shared_with_self = False
        try:
            fcntl.flock(self.fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            self.locked = True
        except OSError as e:
            if e.errno not in _LOCK_UNSUPPORTED:
                os.close(self.fd)
                self.fd = -1
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise ArchiveInUse(f"{self.path}: in use by another process "
                                       + ("(a run writing it, or a program reading it); nothing was changed"
                                          if exclusive else "(a run writing it)")) from None
                raise ArchiveError(f"{self.path}: cannot be locked ({e.strerror})") from None
        _HELD[self.key] = [exclusive, 1]

    def release(self) -> None:
        if self.fd < 0:
            return
        held = _HELD.get(self.key)
        if held is not None:
            held[1] -= 1
            if held[1] <= 0:
                del _HELD[self.key]
        os.close(self.fd)                  # closing the descriptor releases the flock
        self.fd = -1

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _open_error(path: Path, e: OSError, write: bool) -> ArchiveError:
    if e.errno == errno.ENOENT:
        return ArchiveError(f"{path}: no such file")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        what = "read-only (its file, its directory or its file system)" if write else "not readable"
        return ArchiveError(f"{path}: cannot be {'written' if write else 'read'}: permission denied, {what}"
                            if e.errno != errno.EROFS else f"{path}: cannot be written: a read-only file system")
    if e.errno == errno.EISDIR:
        return ArchiveError(f"{path}: a directory, not an archive")
    return ArchiveError(f"{path}: cannot be opened ({e.strerror})")


def h5open(path: str | Path, mode: str) -> h5py.File:
    """The HDF5 file of an archive whose lock the caller holds, to write: HDF5's own locking off (see above;
    new objects in the format :data:`LIBVER`). A reader keeps HDF5's locking as the process has it, since
    HDF5 refuses to open one file in one process with two settings (an xarray handle open beside ``load``)."""
    if mode == "r":
        return h5py.File(path, "r")
    # no chunk cache: a chunk is allocated and written by the write that fills it, not by a later flush
    return h5py.File(path, mode, locking=False, libver=LIBVER, rdcc_nbytes=0)


def hdf5_error(path: Path, e: Exception) -> ArchiveError:
    """An HDF5 error opening ``path`` as one line (HDF5's message spans lines: its error stack)."""
    text = " ".join(str(e).split())
    if "locking flag values don't match" in text:
        return ArchiveInUse(f"{path}: open in this process with other file-locking settings (an h5py or xarray "
                            "handle): close it first")
    if "checksum" in text:
        return ArchiveDamaged(f"{path}: damaged archive: HDF5 finds a wrong checksum in its structure ({text})")
    return ArchiveError(f"{path}: not a readable HDF5 file ({text})")


# --- room to write --------------------------------------------------------------------------------------
_FALLOC_FL_KEEP_SIZE = 1


def _fallocate():
    if not sys.platform.startswith("linux"):
        return None
    try:
        f = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    f.restype = ctypes.c_int
    return f


_FALLOCATE = _fallocate()
NO_SPACE = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


def reserve(lock: Lock, f: h5py.File | None, nbytes: int) -> None:
    """Make room for ``nbytes`` more bytes of ``f`` (whose lock is ``lock``; None: a file about to be
    created), or raise ArchiveFull before anything is written (see the module docstring). Where the file
    system cannot reserve, nothing is reserved (a failed write is then caught by the writer, :func:`abandon`)."""
    start = int(f.id.get_filesize()) if f is not None else 0
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft != resource.RLIM_INFINITY and start + nbytes > soft:
        raise ArchiveFull(errno.EFBIG, full_message(lock.path, errno.EFBIG, start + nbytes))
    if _FALLOCATE is None or lock.fd < 0 or nbytes <= 0:
        return
    if _FALLOCATE(lock.fd, _FALLOC_FL_KEEP_SIZE, start, nbytes) != 0:
        err = ctypes.get_errno()
        if err in NO_SPACE:
            raise ArchiveFull(err, full_message(lock.path, err, nbytes))


def abandon(f: h5py.File) -> None:
    """After a failed write: nothing more of this HDF5 session reaches the file (its descriptor now writes to
    /dev/null, so that HDF5's flush at close cannot mix half a batch into what the last flush left), then
    close it; the file is as the last flush left it."""
    try:
        fd = f.id.get_vfd_handle()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, RuntimeError):
        pass
    try:
        f.close()
    except Exception:                                      # what HDF5 says now goes nowhere
        pass


def is_no_space(e: BaseException) -> int:
    """The errno of a write that failed for lack of room (ENOSPC, EFBIG, EDQUOT), else 0; HDF5's errors carry
    it in their text ("errno = 28")."""
    if isinstance(e, OSError) and e.errno in NO_SPACE:
        return e.errno
    text = str(e)
    for err in NO_SPACE:
        if f"errno = {err}," in text:
            return err
    return 0


def _mount_of(path: Path) -> str:
    """The file system holding ``path``: "/dev/sda1 (ext4) mounted on /data", from /proc/self/mountinfo."""
    try:
        st = os.stat(path if path.exists() else path.parent)
        dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                parts = line.split()
                if parts[2] == dev:
                    fs = parts[parts.index("-") + 1:]
                    return f"{fs[1]} ({fs[0]}) mounted on {parts[4]}"
    except (OSError, ValueError, IndexError):
        pass
    return f"the device of {path.parent}"


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


def full_message(path: Path, err: int, needed: int) -> str:
    """One line: the device (or the size limit) and the space needed."""
    if err == errno.EFBIG:
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        limit = "" if soft == resource.RLIM_INFINITY else f" of {_mb(soft)}"
        return (f"{path}: the file size limit{limit} is reached (ulimit -f; the archive needs to grow to "
                f"{_mb(needed)})")
    try:
        vfs = os.statvfs(path.parent)
        free = f", {_mb(vfs.f_bavail * vfs.f_frsize)} free"
    except OSError:
        free = ""
    what = "the disk quota is exceeded" if err == errno.EDQUOT else "no space left"
    return f"{path}: {what} on {_mount_of(path)}: the next write needs {_mb(needed)}{free}"


def replace_into(part: Path, path: Path) -> None:
    """Rename the finished archive ``part`` to ``path`` (atomic within a file system), unless ``path`` is an
    archive another process holds (ArchiveInUse: ``part`` stays, ``path`` is untouched)."""
    old = None
    if path.exists():
        old = Lock(path, exclusive=True)
    try:
        os.replace(part, path)
    finally:
        if old is not None:
            old.release()
