"""Turning accepted tokens into streamed text: whole UTF-8 characters only, stop strings honoured."""

from __future__ import annotations

import codecs
from typing import Sequence


class TextStream:
    """Feed token bytes in; get out the text that is final.

    A character split across tokens comes out once complete. Text that could still grow into a stop string is
    held back until it cannot; when a stop string appears, the text before it is released and the stream stops.
    """

    def __init__(self, stops: Sequence[str] = ()):
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = [s for s in stops if s]
        self._pending = ""
        self.stopped = False

    def push(self, piece: bytes) -> str:
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(piece)
        return self._release()

    def finish(self) -> str:
        """Release everything held back (the request ended without a stop string)."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(b"", final=True)
        out, self._pending = self._pending, ""
        return out

    def _release(self) -> str:
        text = self._pending
        cut = min((i for i in (text.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._pending = ""
            return text[:cut]
        hold = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), hold, -1):
                if text.endswith(stop[:n]):
                    hold = n
                    break
        self._pending = text[len(text) - hold:] if hold else ""
        return text[:len(text) - hold]
