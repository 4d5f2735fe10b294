"""Files specframe reads and writes: clear one-line problems, and writes whole or not at all, one writer at a time.

Reading: ``read_text`` decodes UTF-8 or names the file and the first bad byte; ``file_problem`` and
``output_problem`` say in a few words why a path cannot be read or written, before any work depends on it.

Writing: a write goes to a temporary file of its own in the same folder, is flushed to disk and renamed over the
target, so a reader sees the old file or the new one, never a mix, and a kill leaves at most an orphan temporary file
that the next write of the same file removes. Two processes that update the same file (read, change, write) hold
``locked(path)`` around it, so neither loses the other's update.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import stat
import tempfile
import time
from typing import Iterator

from specframe.errors import SpecframeError

_TEMPORARY_SUFFIX = ".partial"


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (its folder is created when missing)."""
    with atomic_output(path) as temporary:
        temporary.write_bytes(data)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[pathlib.Path]:
    """A temporary path of its own beside ``path``, for a writer that creates the file itself (a library given a
    file name, or ``atomic_write``): once the block ends, the file is flushed to disk and renamed over ``path``; if
    the block raises, it is removed. Its folder is created when missing."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_TEMPORARY_SUFFIX, dir=path.parent)
    os.close(descriptor)
    temporary = pathlib.Path(name)
    try:
        yield temporary
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    _remove_orphans(path)


def _remove_orphans(path: pathlib.Path) -> None:
    """Temporary files of ``path`` left by a killed writer: any but a live writer's (those are younger than a
    minute)."""
    for orphan in path.parent.glob(f".{path.name}.*{_TEMPORARY_SUFFIX}"):
        with contextlib.suppress(OSError):
            if time.time() - orphan.stat().st_mtime > 60:
                orphan.unlink()


@contextlib.contextmanager
def locked(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive advisory lock for updating ``path`` (a ``.lock`` file beside it)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of ``path``; a file that cannot be read or is not UTF-8 is a one-line SpecframeError."""
    problem = file_problem(path)
    if problem:
        raise SpecframeError(f"{path}: {problem}")
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise SpecframeError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecframeError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def file_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not an existing regular file ("not found", "is a directory", ...), or None."""
    status = _status(path)
    if isinstance(status, OSError):
        return _reason(status)
    if stat.S_ISDIR(status.st_mode):
        return "is a directory, not a file"
    return None if stat.S_ISREG(status.st_mode) else "is not a regular file"


def output_problem(path: str | os.PathLike) -> str | None:
    """Why a file cannot be written at ``path`` (its folder is missing or read-only, it is a directory, ...), or
    None: checked before the work whose result it will hold."""
    path = pathlib.Path(path)
    status = _status(path)
    if not isinstance(status, OSError) and stat.S_ISDIR(status.st_mode):
        return "is a directory, not a file"
    if isinstance(status, OSError) and not isinstance(status, FileNotFoundError):
        return _reason(status)
    folder = _status(path.parent)
    if isinstance(folder, OSError) or not stat.S_ISDIR(folder.st_mode):
        return f"folder {path.parent} does not exist"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return f"folder {path.parent} is not writable"
    return None


def _status(path: str | os.PathLike) -> os.stat_result | OSError:
    try:
        return os.stat(path)
    except OSError as exc:
        return exc
    except ValueError:   # an embedded NUL character
        return OSError(0, "not a valid path (it contains a NUL character)")


def _reason(error: OSError) -> str:
    if isinstance(error, (FileNotFoundError, NotADirectoryError)):
        return "not found"
    return (error.strerror or str(error)).lower()
