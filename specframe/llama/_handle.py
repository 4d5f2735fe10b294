"""Deterministic release of a C object: ``close()``, ``with``, and a last resort at garbage collection."""

from __future__ import annotations

from specframe.errors import SpecframeError
from specframe.llama._native import raise_pending_interrupt


class Handle:
    """Owns one pointer from libllama; subclasses free it in ``_free`` exactly once."""

    _handle = None
    _what = "object"

    @property
    def handle(self):
        if self._handle is None:
            raise SpecframeError(f"the {self._what} is closed")
        return self._handle

    def _free(self, handle) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._release()
        raise_pending_interrupt()

    def _release(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self._free(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        self._release()   # an interrupt during it waits for the next libllama call: it cannot be raised here
