"""Context support: how strongly the history itself backs a drafted token.

A draft's first token is far likelier to stand when the last few committed tokens were followed by that very token
somewhere earlier: a copy that resumes after a 12-token match is usually right, one after a single matching token
often is not. The support of a token is the longest of ``SUPPORT_LENGTHS`` such contexts; it is measured the same
way for any drafter, built-in or not. It is found by one vectorised scan of the history when a draft asks: no index
is kept, so the tokens of a step cost nothing until then (an index of Python tuples cost several per token, in
memory a target's pass had pushed out of the caches).
"""

from __future__ import annotations

import numpy as np

SUPPORT_LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16)
_LEVELS = np.searchsorted(SUPPORT_LENGTHS, np.arange(SUPPORT_LENGTHS[-1] + 1), side="right")  # match -> level
_BACK = np.arange(1, SUPPORT_LENGTHS[-1] + 1)


def support_level(history: np.ndarray, next_token: int) -> int:
    """0 when ``next_token`` never followed even the last token of ``history`` before, else 1 + the index in
    SUPPORT_LENGTHS of the longest context it followed."""
    n = len(history)
    ends = np.flatnonzero(history[1:] == next_token) + 1     # where it followed something
    if not ends.size:
        return 0
    back = _BACK[:n - 1] if n <= SUPPORT_LENGTHS[-1] else _BACK
    before = ends[:, None] - back                            # the tokens before each, nearest first
    agree = (history[np.maximum(before, 0)] == history[n - back]) & (before >= 0)
    longest = int(np.cumprod(agree, axis=1).sum(axis=1).max())
    return int(_LEVELS[longest])
