"""copy-cursor: prompt lookup that follows the copy it is making.

A reply that edits given text (code with type hints added, a name changed, a passage quoted with words of its own
between) copies its source in stretches. Prompt lookup matches the history's last n-gram afresh at every step and
takes its earliest occurrence, so after each edit it often resumes the copy at the wrong place: ``):`` or ``\\n``
occur all over a file. This drafter keeps a cursor on its source instead. While the target accepts, it drafts on
from where the cursor stands. When the reply leaves the source, it remembers where the copy broke off, and the next
match resumes it there if it can: of the history's last ``max_ngram`` down to 1 tokens, the longest that occurs at
or after that place (within ``window`` tokens), at its nearest occurrence, which is where an insertion or a replaced
word picks the copy up again. Only when none does is the longest that occurs at all taken, at its most recent
occurrence. Each call indexes the new tokens only and tracks the cursor over them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from specframe.drafting import NO_DRAFT, Draft
from specframe.drafting.incremental import IncrementalDrafter, ngram_starts
from specframe.hookspecs import hookimpl
from specframe.params import MAX_DRAFT_TOKENS, param


@dataclass(frozen=True)
class CopyCursorParams:
    max_ngram: int = param(4, min=1, max=32, help="longest suffix n-gram to look up when the copy breaks off")
    num_pred: int = param(48, min=1, max=MAX_DRAFT_TOKENS, help="longest draft")
    window: int = param(64, min=0, max=1 << 20,
                        help="how far past where the last copy broke off a match may resume it")


class CopyCursorDrafter(IncrementalDrafter):
    name = "copy-cursor"
    Params = CopyCursorParams

    def __init__(self, params: CopyCursorParams, env):
        super().__init__(params, env)
        self._follows: list[dict[tuple, list[int]]] = [{} for _ in range(params.max_ngram + 1)]  # [n][ngram] ->
        self.restart()                                                     # positions right after it, ascending

    def restart(self) -> None:
        for index in self._follows:
            index.clear()
        self._cursor: int | None = None   # the position of the source token the reply is expected to copy next
        self._cursor_from = 0             # where the cursor was placed by the last match
        self._resume_from = 0             # where the last copy that got anything right broke off
        self._tracked = 0                 # history tokens the cursor has been checked against

    def index(self, tokens: list[int], start: int, stop: int) -> None:
        for n in range(1, self.params.max_ngram + 1):
            follows = self._follows[n]
            for at in ngram_starts(n, start, stop):
                follows.setdefault(tuple(tokens[at:at + n]), []).append(at + n)

    def propose(self, tokens: list[int], n_max: int) -> Draft:
        self._track(tokens)
        if self._cursor is None:
            self._cursor = self._match(tokens)
            if self._cursor is None:
                return NO_DRAFT
            self._cursor_from = self._cursor
        at = self._cursor
        return Draft.of(tokens[at:min(at + self.params.num_pred, at + n_max, len(tokens))])

    def _track(self, tokens: list[int]) -> None:
        """Move the cursor over the tokens added since the last call, dropping it where the reply left the source."""
        cursor = self._cursor
        for i in range(max(self._tracked, 1), len(tokens)):
            if cursor is None:
                break
            if tokens[cursor] == tokens[i]:
                cursor += 1
            else:
                if cursor > self._cursor_from:     # the copy got something right: resume near where it broke off
                    self._resume_from = cursor
                cursor = None
        self._cursor, self._tracked = cursor, len(tokens)

    def _match(self, tokens: list[int]) -> int | None:
        """Where to copy from next: after the nearest occurrence of the longest suffix n-gram that resumes the last
        copy, else after the most recent occurrence of the longest suffix n-gram found at all."""
        length, resume_from = len(tokens), self._resume_from
        fallback = None
        for n in range(min(self.params.max_ngram, length - 1), 0, -1):
            follows = self._follows[n].get(tuple(tokens[length - n:]), [])
            usable = bisect.bisect_left(follows, length)      # not the suffix's own end: nothing follows it yet
            if not usable:
                continue
            nearest = bisect.bisect_left(follows, resume_from, 0, usable)
            if nearest < usable and follows[nearest] - resume_from <= self.params.window:
                return follows[nearest]
            if fallback is None:
                fallback = follows[usable - 1]
        return fallback


@hookimpl
def register_drafters(register):
    register(CopyCursorDrafter)
