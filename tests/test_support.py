"""Context support, found by a scan of the history, against its definition written out with Python tuples."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specframe.drafting.support import SUPPORT_LENGTHS, support_level


def by_definition(tokens: list[int], next_token: int) -> int:
    """1 + the index of the longest k in SUPPORT_LENGTHS such that the last k tokens were once followed by
    ``next_token``; 0 if none."""
    for level in range(len(SUPPORT_LENGTHS), 0, -1):
        k = SUPPORT_LENGTHS[level - 1]
        followed = {tuple(tokens[end - k:end + 1]) for end in range(k, len(tokens))}
        if k <= len(tokens) and tuple(tokens[len(tokens) - k:]) + (next_token,) in followed:
            return level
    return 0


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=60), st.integers(0, 4))
def test_the_level_is_the_longest_context_the_token_followed(tokens, next_token):
    assert support_level(np.array(tokens, dtype=np.int32), next_token) == by_definition(tokens, next_token)


def test_a_copy_resumed_after_a_long_match_has_the_highest_level():
    text = np.arange(40, dtype=np.int32)
    history = np.concatenate((text, [99], text[:20]))
    assert support_level(history, 20) == len(SUPPORT_LENGTHS)     # 20 followed the last 16 tokens before
    assert support_level(history, 21) == 0                        # and 21 never followed 19
    assert support_level(np.array([5], dtype=np.int32), 5) == 0
