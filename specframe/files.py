"""Files specframe writes (caches, tables): written whole or not at all, and one writer at a time.

A write goes to a temporary file of its own in the same folder, is flushed to disk and renamed over the target, so
a reader sees the old file or the new one, never a mix, and a kill leaves at most an orphan temporary file that the
next write of the same file removes. Two processes that update the same file (read, change, write) hold
``locked(path)`` around it, so neither loses the other's update.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import tempfile
import time
from typing import Iterator

_TEMPORARY_SUFFIX = ".partial"


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (its folder is created when missing)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_TEMPORARY_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
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
