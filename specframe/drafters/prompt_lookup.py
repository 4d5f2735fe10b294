"""prompt-lookup: Saxena's prompt lookup decoding (as in Hugging Face transformers and llama-cpp-python).

Match the longest suffix n-gram of the history (``max_ngram`` down to 1) at its earliest earlier occurrence
and draft the ``num_pred`` tokens that followed it. The earliest occurrence is what both reference
implementations choose; like transformers (unlike llama-cpp-python, which drafts nothing then), a continuation
shorter than ``num_pred`` is drafted as far as it goes. The index of first occurrences grows with the history:
each call costs O(new tokens x max_ngram).
"""

from __future__ import annotations

from dataclasses import dataclass

from specframe.drafting import NO_DRAFT, Draft
from specframe.drafting.incremental import IncrementalDrafter, ngram_starts
from specframe.hookspecs import hookimpl
from specframe.params import MAX_DRAFT_TOKENS, param


@dataclass(frozen=True)
class PromptLookupParams:
    # The index holds every n-gram up to max_ngram at each position: memory grows with its square.
    max_ngram: int = param(2, min=1, max=32, help="longest suffix n-gram to look up")
    num_pred: int = param(10, min=1, max=MAX_DRAFT_TOKENS, help="tokens to draft after a match")


class PromptLookupDrafter(IncrementalDrafter):
    name = "prompt-lookup"
    Params = PromptLookupParams

    def __init__(self, params: PromptLookupParams, env):
        super().__init__(params, env)
        self._first: list[dict[tuple, int]] = [{} for _ in range(params.max_ngram + 1)]  # [n][ngram] -> start

    def restart(self) -> None:
        for index in self._first:
            index.clear()

    def index(self, tokens: list[int], start: int, stop: int) -> None:
        for n in range(1, self.params.max_ngram + 1):
            first = self._first[n]
            for at in ngram_starts(n, start, stop):
                first.setdefault(tuple(tokens[at:at + n]), at)

    def propose(self, tokens: list[int], n_max: int) -> Draft:
        length = len(tokens)
        for n in range(min(self.params.max_ngram, length - 1), 0, -1):
            start = self._first[n].get(tuple(tokens[length - n:]))
            if start is not None and start < length - n:   # an earlier occurrence, not the suffix itself
                follow = start + n
                return Draft.of(tokens[follow:min(follow + self.params.num_pred, follow + n_max, length)])
        return NO_DRAFT


@hookimpl
def register_drafters(register):
    register(PromptLookupDrafter)
