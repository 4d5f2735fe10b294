"""Text tinted by who wrote it, for a terminal (run --color, chat --color): each drafter's accepted tokens in a
colour of its own, the target's own tokens plain, as llama.cpp's speculative example colours accepted tokens; and
a legend of the colours with each drafter's accepted tokens."""

from __future__ import annotations

import os
from collections import Counter
from typing import Iterable, TextIO

from specframe.provenance import Span

# ANSI foreground colours, then their bright kin: readable on dark and light backgrounds alike
_PALETTE = (36, 32, 33, 35, 34, 31, 96, 92, 93, 95, 94, 91)
_RESET = "\x1b[0m"


def wanted(mode: str, stream: TextIO) -> bool:
    """Whether ``mode`` tints what goes to ``stream``: "always"; "auto" when it is a terminal that takes colour
    (TERM is not "dumb") and NO_COLOR is not set (no-color.org); never "never"."""
    if mode == "auto":
        return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    return mode == "always"


class Tint:
    """The colours of one session's drafters (a drafter keeps its colour from answer to answer)."""

    def __init__(self, drafters: Iterable[str] = ()):
        """``drafters``: the configured ones, coloured in this order (the legend names each, drafting or not)."""
        self._colours: dict[str, int] = {}
        for name in drafters:
            self._colour(name)

    def paint(self, span: Span) -> str:
        """The span's text, in its drafter's colour (each line apart, so that no colour runs past a line's end)."""
        if span.drafter is None or not span.text:
            return span.text
        start = f"\x1b[{self._colour(span.drafter)}m"
        return "\n".join(f"{start}{line}{_RESET}" if line else "" for line in span.text.split("\n"))

    def legend(self, spans: list[Span]) -> str:
        """Each drafter's colour and the tokens of its drafts the target accepted in ``spans``; then the target's
        own."""
        tokens: Counter[str | None] = Counter()
        for span in spans:
            tokens[span.drafter] += span.tokens
            if span.drafter is not None:
                self._colour(span.drafter)
        drafted = [f"\x1b[{colour}m{name}{_RESET} {tokens[name]}" for name, colour in self._colours.items()]
        return (f"drafted and accepted, by drafter: {', '.join(drafted) if drafted else 'none'}; "
                f"the target's own tokens (plain): {tokens[None]}")

    def _colour(self, drafter: str) -> int:
        if drafter not in self._colours:
            self._colours[drafter] = _PALETTE[len(self._colours) % len(_PALETTE)]
        return self._colours[drafter]
