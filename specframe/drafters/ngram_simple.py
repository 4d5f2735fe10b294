"""ngram-simple: llama.cpp's common_ngram_simple_draft (common/ngram-map.cpp at 0c1e570).

The pattern is the last ``n`` tokens; its most recent earlier occurrence that starts at least two positions
before the pattern's own start is looked up, and the tokens that followed it are drafted, at most ``m`` and
not past the token before the last one. Nothing is drafted while the history has at most n + m + 2 tokens, or
when fewer than ``n`` tokens follow the match. The index maps each n-gram to its latest start and grows by the
new tokens only.

Deliberate difference: llama.cpp's backward search stops before position 0 (its "no match" sentinel), so a
pattern that occurs only at the very start of the history is never found; here position 0 matches too.
"""

from __future__ import annotations

from dataclasses import dataclass

from specframe.drafting import NO_DRAFT, Draft
from specframe.drafting.incremental import IncrementalDrafter, ngram_starts
from specframe.hookspecs import hookimpl
from specframe.params import MAX_DRAFT_TOKENS, param


@dataclass(frozen=True)
class NgramSimpleParams:
    n: int = param(12, min=1, max=256, help="pattern length: the last n tokens (indexed at every position)")
    m: int = param(48, min=1, max=MAX_DRAFT_TOKENS, help="longest draft")


class NgramSimpleDrafter(IncrementalDrafter):
    name = "ngram-simple"
    Params = NgramSimpleParams

    def __init__(self, params: NgramSimpleParams, env):
        super().__init__(params, env)
        self._latest: dict[tuple, int] = {}

    def restart(self) -> None:
        self._latest.clear()

    def indexable(self, length: int) -> int:
        """n-grams that start at least two positions before the pattern's own start (llama.cpp's search)."""
        return length - 2

    def index(self, tokens: list[int], start: int, stop: int) -> None:
        n = self.params.n
        for at in ngram_starts(n, start, stop):
            self._latest[tuple(tokens[at:at + n])] = at

    def propose(self, tokens: list[int], n_max: int) -> Draft:
        n, m = self.params.n, self.params.m
        cur_len = len(tokens) - 1           # llama.cpp's view: the history before the last sampled token
        if cur_len <= n + m + 1:
            return NO_DRAFT
        match = self._latest.get(tuple(tokens[-n:]))
        if match is None:
            return NO_DRAFT
        copy_max = min(m, cur_len - (match + n))
        if copy_max < n:
            return NO_DRAFT
        follow = match + n
        return Draft.of(tokens[follow:follow + min(copy_max, n_max)])


@hookimpl
def register_drafters(register):
    register(NgramSimpleDrafter)
