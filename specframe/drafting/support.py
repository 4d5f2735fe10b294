"""Context support: how strongly the history itself backs a drafted token.

A draft's first token is far likelier to stand when the last few committed tokens were followed by that very token
somewhere earlier: a copy that resumes after a 12-token match is usually right, one after a single matching token
often is not. The support of a token is the longest of ``SUPPORT_LENGTHS`` such contexts; it is measured the same
way for any drafter, built-in or not, from an index of the history's n-grams that grows by the new tokens only.
"""

from __future__ import annotations

import numpy as np

from specframe.drafting.history import HistoryMirror

SUPPORT_LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16)


class ContextSupport:
    def __init__(self):
        self._seen = HistoryMirror()
        self._followed: list[set[tuple]] = [set() for _ in SUPPORT_LENGTHS]   # (context..., next token)

    def reset(self) -> None:
        self._seen.reset()
        for index in self._followed:
            index.clear()

    def _update(self, history: np.ndarray) -> None:
        new_from = self._seen.update(history)
        if new_from == 0:
            for index in self._followed:
                index.clear()
        tokens = self._seen.tokens
        for k, index in zip(SUPPORT_LENGTHS, self._followed):
            for end in range(max(k, new_from), len(tokens)):
                index.add(tuple(tokens[end - k:end + 1]))

    def level(self, history: np.ndarray, next_token: int) -> int:
        """0 when ``next_token`` never followed even the last token of ``history`` before, else 1 + the index in
        SUPPORT_LENGTHS of the longest context it followed. The index takes in the history's new tokens only
        here, when a draft asks: a step without one costs nothing."""
        self._update(history)
        tokens = self._seen.tokens
        for level in range(len(SUPPORT_LENGTHS), 0, -1):
            k = SUPPORT_LENGTHS[level - 1]
            if k <= len(tokens) and tuple(tokens[len(tokens) - k:]) + (next_token,) in self._followed[level - 1]:
                return level
        return 0
