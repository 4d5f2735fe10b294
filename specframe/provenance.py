"""Which drafter wrote which text: a request's output as spans, each written by one drafter or by the target.

Tokens and text do not map one to one: TextStream holds bytes back (an incomplete character, a possible start of
a stop string) and releases them with a later token. A piece of text goes to the source of the token that
released it (the drafter whose draft held that token, or None for the target's own); tokens that released no text
are held until one does, and those of another source then become spans of no text that keep their count. So the
spans concatenate to the text exactly, and each drafter's spans count exactly the tokens of its drafts that the
target accepted: its ``accepted_tokens``, those that wrote no text included (an end of generation, tokens past a
stop string).
"""

from __future__ import annotations

from itertools import groupby
from typing import NamedTuple


class Span(NamedTuple):
    text: str
    drafter: str | None   # the drafter whose accepted draft wrote it; None: the target's own tokens
    tokens: int           # the generated tokens it stands for

    def as_dict(self) -> dict:
        return {"text": self.text, "drafter": self.drafter, "tokens": self.tokens}


def merged(spans: list[Span]) -> list[Span]:
    """Neighbouring spans of the same source as one."""
    out = []
    for drafter, group in groupby(spans, key=lambda span: span.drafter):
        run = list(group)
        out.append(run[0] if len(run) == 1 else Span("".join(s.text for s in run), drafter,
                                                      sum(s.tokens for s in run)))
    return out


class Provenance:
    """The spans of one request's text as tokens are committed; ``take`` gives those not yet streamed."""

    def __init__(self):
        self.spans: list[Span] = []
        self._new: list[Span] = []
        self._held: list[list] = []     # [source, tokens] of consecutive tokens that released no text yet
        self._last: str | None = None   # the source of the last token

    def add(self, piece: str, source: str | None) -> None:
        """A token of ``source`` was committed and released ``piece`` (maybe nothing)."""
        self._last = source
        if piece:
            span = Span(piece, source, 1 + self._release(source) if self._held else 1)
            self.spans.append(span)
            self._new.append(span)
        elif self._held and self._held[-1][0] == source:
            self._held[-1][1] += 1
        else:
            self._held.append([source, 1])

    def unwritten(self, source: str | None, tokens: int) -> None:
        """Accepted drafted tokens that wrote no text: an end of generation, tokens past where the output ended."""
        self._record(Span("", source, tokens), True)

    def end(self, tail: str, streamed: bool) -> None:
        """The request ended, releasing ``tail`` (the text held back), streamed unless it was cut short."""
        source = self._held[-1][0] if self._held else self._last
        tokens = self._release(source)
        if tail or tokens:
            self._record(Span(tail, source, tokens), streamed)

    def take(self) -> list[Span]:
        """The spans since the last call, neighbours of the same source merged."""
        new, self._new = self._new, []
        return merged(new)

    def _release(self, source: str | None) -> int:
        """Empty the held tokens: those of ``source`` are counted (returned), the others become spans of no text."""
        same = 0
        for held_source, tokens in self._held:
            if held_source == source:
                same += tokens
            else:
                self._record(Span("", held_source, tokens), True)
        self._held.clear()
        return same

    def _record(self, span: Span, streamed: bool) -> None:
        self.spans.append(span)
        if streamed:
            self._new.append(span)
