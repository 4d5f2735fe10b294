"""Incremental indexing support: drafters see the history grow and index only what is new."""

from __future__ import annotations

import numpy as np


class HistoryMirror:
    """The tokens a drafter has indexed so far, as a Python list for cheap slicing and hashing."""

    def __init__(self):
        self.tokens: list[int] = []

    def reset(self) -> None:
        self.tokens.clear()

    def update(self, history: np.ndarray) -> int:
        """Take in the new tail of ``history``; return the index of the first new token (0 after a reset,
        including when the history is shorter than what was seen: a new request began without ``begin``)."""
        seen = len(self.tokens)
        if len(history) < seen:
            self.tokens.clear()
            seen = 0
        self.tokens.extend(history[seen:].tolist())
        return seen
