"""State files: what a drafter learned, kept across restarts in a versioned, checksummed file.

Layout (little-endian): an 8-byte magic naming the kind of state, the format version (uint32), the CRC-32 of the
payload (uint32), the payload's length (uint64), then the payload, which the drafter packs and parses. Files are
written atomically (specframe.files). A file that cannot be used (unreadable, truncated, corrupt, of another
version, or for another vocabulary or configuration) is set aside as ``NAME.corrupt`` with one logged line, and the
drafter starts empty: what it learned is an optimisation, never worth refusing to start over.
"""

from __future__ import annotations

import logging
import os
import pathlib
import struct
import zlib
from typing import Callable, TypeVar

from specframe.errors import ParamError
from specframe.files import atomic_write, file_problem, output_problem

log = logging.getLogger("specframe.drafting")

SET_ASIDE_SUFFIX = ".corrupt"
_HEADER = struct.Struct("<8sIIQ")
T = TypeVar("T")


class StateError(ValueError):
    """A state file's content cannot be used; the message says why."""


def save_state(path: str | os.PathLike, magic: bytes, version: int, payload: bytes) -> None:
    atomic_write(path, _HEADER.pack(magic, version, zlib.crc32(payload), len(payload)) + payload)


def load_state(path: str | os.PathLike, magic: bytes, version: int, parse: Callable[[bytes], T],
               what: str) -> T | None:
    """``parse(payload)`` of the state file at ``path``; None when there is none, or when it cannot be used (``parse``
    raises StateError for a payload it refuses): the file is then set aside with one logged line naming ``what``."""
    name = os.fspath(path)
    if not os.path.lexists(name):
        return None
    try:
        with open(name, "rb") as f:
            data = f.read()
        return parse(_payload(data, magic, version))
    except (OSError, StateError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        aside = name + SET_ASIDE_SUFFIX
        try:
            os.replace(name, aside)
            moved = f"set aside as {aside}"
        except OSError as move_error:
            moved = f"left in place ({move_error.strerror})"
        log.warning("%s: cannot be used (%s); %s, %s starts empty", name, reason, moved, what)
        return None


def _payload(data: bytes, magic: bytes, version: int) -> bytes:
    if len(data) < _HEADER.size or data[:8] != magic:
        raise StateError(f"not a {magic.rstrip(bytes(1)).decode()} state file (bad magic number)")
    _, found_version, crc, length = _HEADER.unpack_from(data)
    if found_version != version:
        raise StateError(f"format version {found_version}; this specframe reads {version}")
    if len(data) != _HEADER.size + length:
        state = "truncated" if len(data) < _HEADER.size + length else "has trailing data"
        raise StateError(f"{state}: {len(data)} bytes, the header announces {_HEADER.size + length}")
    payload = data[_HEADER.size:]
    if zlib.crc32(payload) != crc:
        raise StateError("corrupt (checksum mismatch)")
    return payload


def state_path(value: str, env) -> pathlib.Path | None:
    """Where a drafter's ``state`` setting puts its file: relative to the config (``env.path``), None when unset."""
    if not value:
        return None
    return env.path(value) if env is not None else pathlib.Path(value)


def check_vocabulary(written: int, n_vocab: int) -> None:
    """Refuse state written for another vocabulary than this target's ``n_vocab`` (0: unknown, nothing refused)."""
    if n_vocab and written != n_vocab:
        raise StateError(f"written for a vocabulary of {written} tokens; this target has {n_vocab}")


def check_token_ids(tokens, n_vocab: int) -> None:
    """Refuse stored token ids outside the vocabulary (``n_vocab`` 0: unknown, only negative ids refused)."""
    if len(tokens) and (tokens.min() < 0 or (n_vocab and tokens.max() >= n_vocab)):
        raise StateError(f"corrupt (a token id outside [0, {n_vocab or 'n_vocab'}))")


def check_state_param(config_dir: pathlib.Path, value: str, save: bool, key: str, save_key: str) -> None:
    """Refuse (ParamError) a state file setting that cannot be honoured: saving without a file, a file that exists
    but cannot be read, or one that is to be written where it cannot be."""
    if save and not value:
        raise ParamError(save_key, f"needs a file to write into; expected {key} = \"FILE\"")
    if not value:
        return
    located = config_dir / os.path.expanduser(value)
    problem = (output_problem(located) if save else
               file_problem(located) if os.path.lexists(located) else None)
    if problem:
        raise ParamError(key, f"{value!r}: {problem}")
