"""Context support: how strongly the history itself backs a drafted token.

A draft's first token is far likelier to stand when the last few committed tokens were followed by that very token
somewhere earlier: a copy that resumes after a 12-token match is usually right, one after a single matching token
often is not. The support of a token is the longest of ``SUPPORT_LENGTHS`` such contexts; it is measured the same
way for any drafter, built-in or not. It is found by a scan of the history in C when a draft asks: no index is kept,
so the tokens of a step cost nothing until then (an index of Python tuples cost several per token, and a numpy
scan a tenth of a millisecond a step, in memory a target's pass had pushed out of the caches).
"""

from __future__ import annotations

import bisect

import numpy as np

from specframe.llama.scans import context_match

SUPPORT_LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16)


def support_level(history: np.ndarray, next_token: int) -> int:
    """0 when ``next_token`` never followed even the last token of ``history`` before, else 1 + the index in
    SUPPORT_LENGTHS of the longest context it followed."""
    return bisect.bisect_right(SUPPORT_LENGTHS, context_match(history, next_token, SUPPORT_LENGTHS[-1]))
