"""Turning accepted tokens into streamed text: whole UTF-8 characters only, stop strings and an editor's
indentation limit honoured."""

from __future__ import annotations

import codecs
from typing import Sequence


class TextStream:
    """Feed token bytes in; get out the text that is final.

    A character split across tokens comes out once complete. Text that could still grow into a stop string is
    held back until it cannot; when a stop string appears, the text before it is released and the stream stops.
    With ``indent`` n > 0 (llama-server's n_indent: a completion at a cursor indented n), every line after the first
    must be indented at least n: the first line that is not (a blank line included) stops the stream and is cut
    after its indentation (llama-server's cut), its leading whitespace held back until it is known.
    """

    def __init__(self, stops: Sequence[str] = (), indent: int = 0):
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = [s for s in stops if s]
        self._pending = ""
        self._indent = indent
        self._line_start: str | None = None   # after a newline: the new line's whitespace so far (undecided)
        self.stopped = False
        self.underindented = False    # stopped by ``indent``, not by a stop string
        self.stop_word = ""           # the stop string that stopped it

    def push(self, piece: bytes) -> str:
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(piece)
        return self._indented(self._release())

    def finish(self) -> str:
        """Release everything held back (the request ended without a stop string)."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(b"", final=True)
        out, self._pending = self._indented(self._pending), ""
        return out if self.stopped else out + (self._line_start or "")

    def _indented(self, text: str) -> str:
        """``text`` up to the first line indented less than ``indent`` (then stopped), the start of a line whose
        indentation is not known yet held back."""
        if self._indent <= 0:
            return text
        out: list[str] = []
        for char in text:
            if self._line_start is not None:
                if char in " \t":
                    self._line_start += char
                    continue
                if len(self._line_start) < self._indent:   # cut from the line's first character on, as llama-server
                    self.stopped = self.underindented = True
                    self.stop_word = ""          # a stop string further on did not end it
                    return "".join(out) + self._line_start
                out.append(self._line_start)
                self._line_start = None
            out.append(char)
            if char == "\n":
                self._line_start = ""
        return "".join(out)

    def _release(self) -> str:
        text = self._pending
        found = [(i, stop) for stop in self._stops if (i := text.find(stop)) >= 0]
        if found:
            cut, self.stop_word = min(found)
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
