"""Find and import the compiled binding that build_llama.sh made, and route llama.cpp's log into logging (and to
``captured_log`` on the thread that asked, whatever the logging level).

A signal that arrives while libllama runs is handled by Python when libllama next calls back into it (its log):
a KeyboardInterrupt raised there cannot cross the C frames, so it is kept and raised again by
``raise_pending_interrupt`` once the C call has returned, instead of being lost.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import importlib.machinery
import importlib.util
import logging
import os
import pathlib
import sys
import threading
from typing import Any, Iterator

from specframe.errors import SpecframeError
from specframe.llama._declarations import MODULE_NAME
from specframe.paths import cache_dir

log = logging.getLogger("specframe.llama")

_BUILD_HINT = "build it with ./build_llama.sh (add --cuda or --metal for a GPU), see README.md"


class LlamaLibraryError(SpecframeError):
    """libllama or its binding is missing or unusable."""


def library_prefix() -> pathlib.Path:
    """The libllama build in use: $SPECFRAME_LLAMA_PREFIX, else the one build_llama.sh recorded last."""
    explicit = os.environ.get("SPECFRAME_LLAMA_PREFIX")
    if explicit:
        return pathlib.Path(explicit)
    pointer = cache_dir() / "llama" / "current"
    if not pointer.is_file():
        raise LlamaLibraryError(f"libllama is not built (no {pointer}): {_BUILD_HINT}")
    return pathlib.Path(pointer.read_text().strip())


@functools.lru_cache(maxsize=None)
def native() -> tuple[Any, Any]:
    """Return ``(ffi, lib)`` of the binding, importing it once. They are untyped: the rest of specframe/llama/
    calls them as cffi builds them from _declarations.py."""
    prefix = library_prefix()
    binding_dir = prefix / "python"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = binding_dir / f"{MODULE_NAME}{suffix}"
        if candidate.is_file():
            break
    else:
        raise LlamaLibraryError(
            f"no specframe binding for this Python and this version of specframe in {binding_dir}: {_BUILD_HINT}"
        )
    _load_cxx_runtime_first()
    spec = importlib.util.spec_from_file_location(MODULE_NAME, candidate)
    assert spec is not None and spec.loader is not None   # an extension module's suffix always has a loader
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise LlamaLibraryError(f"cannot load {candidate} ({exc}): {_BUILD_HINT}") from None
    ffi, lib = module.ffi, module.lib
    _install_log_callback(ffi, lib)
    lib.llama_backend_init()
    return ffi, lib


def _load_cxx_runtime_first() -> None:
    """Make libstdc++'s symbols global before libllama loads (Linux). A CUDA build's libggml-cuda exports C++
    runtime symbols of its own; llama.cpp's tools load libstdc++ first, but a Python process has not, so
    llama.cpp's own stream output bound to those copies and crashed at model load (seen on an H100)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass      # no libstdc++ to find: a build that needs it will say so when it loads


_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_pending_interrupts: list[KeyboardInterrupt] = []
_capture = threading.local()   # .lines: the list captured_log fills on this thread


@contextlib.contextmanager
def captured_log() -> Iterator[list[str]]:
    """The lines llama.cpp logs on this thread inside the ``with``, at any level: what a load reports (its buffers)
    is read from them even where logging shows none of it."""
    outer = getattr(_capture, "lines", None)
    lines: list[str] = []
    _capture.lines = lines
    try:
        yield lines
    finally:
        _capture.lines = outer


def raise_pending_interrupt() -> None:
    """Raise the KeyboardInterrupt that arrived during the last libllama calls, if one did."""
    if _pending_interrupts:
        interrupt = _pending_interrupts[-1]
        _pending_interrupts.clear()
        raise interrupt


def _keep_interrupt(exception_type, value, traceback):
    if not issubclass(exception_type, KeyboardInterrupt):
        raise value   # printed by cffi as an error in a callback, as without this handler
    _pending_interrupts.append(value)


def _install_log_callback(ffi, lib) -> None:
    last_level = [logging.INFO]

    @ffi.def_extern(onerror=_keep_interrupt)
    def specframe_log_callback(level, text, _user_data):
        # GGML_LOG_LEVEL_CONT continues the previous message at its level.
        python_level = _LEVELS.get(int(level), last_level[0])
        last_level[0] = python_level
        capture = getattr(_capture, "lines", None)
        if capture is not None or log.isEnabledFor(python_level):
            message = ffi.string(text).decode("utf-8", "replace").rstrip("\n")
            if message and capture is not None:
                capture.append(message)
            if message and log.isEnabledFor(python_level):
                log.log(python_level, "%s", message)

    lib.llama_log_set(lib.specframe_log_callback, ffi.NULL)
