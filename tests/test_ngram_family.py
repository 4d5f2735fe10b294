"""ngram-map-k, ngram-map-k4v and ngram-mod on hand-built token sequences whose right draft is known."""

import numpy as np

from specframe.drafters.ngram_map import NgramMapK4vDrafter, NgramMapKDrafter, NgramMapParams
from specframe.drafters.ngram_mod import NgramModDrafter, NgramModParams


def h(*tokens):
    return np.array(tokens, dtype=np.int32)


def drafted(drafter, history, n_max=64):
    return drafter.draft(h(*history), n_max).tokens.tolist()


def map_k(**params):
    return NgramMapKDrafter(NgramMapParams(**params), env=None)


def test_map_k_drafts_what_followed_the_most_recent_eligible_occurrence():
    d = map_k(n=2, m=2)
    assert drafted(d, [1, 2, 7, 8, 9, 3, 4, 5, 1, 2]) == [7, 8]
    d.begin(h())
    assert drafted(d, [1, 2, 7, 7, 1, 2, 8, 8, 0, 0, 0, 1, 2]) == [8, 8]
    d.begin(h())
    # the only earlier (1, 2) is followed by fewer than m + 1 tokens before the last one: not eligible
    assert drafted(d, [0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 1, 2]) == []
    d.begin(h())
    assert drafted(d, [1, 2, 7, 8, 1, 2]) == []          # shorter than 2n + m + 1 tokens: no draft


def test_map_k_draft_length_follows_the_keys_last_acceptance():
    d = map_k(n=2, m=3)
    history = [1, 2, 7, 8, 9, 3, 4, 5, 6, 1, 2]
    assert drafted(d, history) == [7, 8, 9]
    d.accept(1)
    history += [7, 0, 5, 1, 2]
    assert drafted(d, history) == [7]                    # one accepted last time: one token now
    d.accept(0)
    history += [7, 4, 4, 1, 2]
    assert drafted(d, history) == []                     # nothing accepted: the key drafts nothing (llama.cpp)
    assert drafted(d, [3, 4, 9, 9, 9, 9, 9, 9, 9, 3, 4]) != []   # a new request (no begin) starts afresh


def k4v(**params):
    return NgramMapK4vDrafter(NgramMapParams(**params), env=None)


def test_k4v_drafts_the_dominant_continuation():
    # key 5 is followed by 6 three times and by 7 once (the most recent): 3 >= 2 x 1, so 6 is drafted
    # (llama.cpp would draft 7, what followed the matched occurrence: a bug it has)
    assert drafted(k4v(n=1, m=1), [5, 6, 5, 6, 5, 6, 5, 7, 0, 0, 5]) == [6]
    # 6 twice and 7 twice: nothing dominates
    assert drafted(k4v(n=1, m=1), [5, 6, 5, 6, 5, 7, 5, 7, 0, 0, 5]) == []
    # one continuation only: it dominates
    assert drafted(k4v(n=1, m=2), [5, 6, 1, 5, 6, 1, 0, 0, 0, 5]) == [6, 1]


def test_k4v_min_hits_and_incremental_counts():
    d = k4v(n=1, m=1, min_hits=2)
    history = [5, 6, 5, 6, 5, 6, 0, 0, 0, 5]
    assert drafted(d, history) == []                     # first hit of key 5
    history += [6, 5]
    assert drafted(d, history) == [6]                    # second hit
    history += [7, 5, 7, 5, 7, 5, 7, 0, 0, 0, 5]         # now 6 x4 (counted once each), 7 x3 eligible
    assert drafted(d, history) == []                     # 4 < 2 x 3: no longer dominant


def mod(**params):
    return NgramModDrafter(NgramModParams(**{"pool_size": 1024, **params}), env=None)


def test_ngram_mod_chains_lookups_and_honours_n_min():
    # begin() indexes the prompt but its last token (the engine feeds that one with the first draft)
    d = mod(n_match=2, n_min=3, n_max=5)
    d.begin(h(1, 2, 3, 4, 5, 6, 0))
    assert drafted(d, [0, 1, 2]) == [3, 4, 5, 6]         # (1,2)->3 (2,3)->4 (3,4)->5 (4,5)->6 then (5,6) unknown
    assert drafted(d, [0, 1, 2], n_max=2) == [3, 4]
    d = mod(n_match=2, n_min=5, n_max=5)
    d.begin(h(1, 2, 3, 4, 5, 6, 0))
    assert drafted(d, [0, 1, 2]) == []                   # a chain of 4 is shorter than n_min


def test_ngram_mod_pool_persists_across_requests_until_it_fills():
    d = mod(n_match=2, n_min=1, n_max=4)
    d.begin(h(1, 2, 3, 4, 0))
    d.begin(h(9))                                        # a new request: the pool is kept on purpose
    assert drafted(d, [9, 1, 2]) == [3, 4]
    d.begin(h(*np.arange(300)))                          # more than 25 % of 1024 slots: emptied
    assert d.used == 0 and drafted(d, [9, 1, 2]) == []


def test_ngram_mod_keeps_the_end_of_a_reply_for_the_next_request():
    """History is added in chunks of 32 tokens, so a reply's last tokens were never in the pool when the next
    request began: a repeated request could not draft them. The next begin adds them first."""
    d = mod(n_match=2, n_min=1, n_max=8)
    d.begin(h(100, 101))
    reply = list(range(1, 20))
    assert drafted(d, [100, 101, *reply]) == []            # fewer than 32 new tokens: none of them indexed yet
    d.begin(h(100, 101))                                  # the same request again
    assert drafted(d, [100, 101, 1, 2]) == [3, 4, 5, 6, 7, 8, 9, 10]


def test_ngram_mod_resets_after_five_poorly_accepted_drafts():
    d = mod(n_match=2, n_min=1, n_max=4)
    d.begin(h(1, 2, 3, 4, 5, 0))
    for _ in range(4):
        assert drafted(d, [0, 1, 2]) == [3, 4, 5]
        d.accept(0)
    assert d.used > 0
    assert drafted(d, [0, 1, 2]) == [3, 4, 5]
    d.accept(0)
    assert d.used == 0                                   # fifth low round in a row


def test_ngram_mod_acceptance_counts_only_the_tokens_drafted():
    d = mod(n_match=2, n_min=1, n_max=8)
    d.begin(h(1, 2, 3, 4, 5, 6, 7, 8, 9, 0))
    for _ in range(10):                                  # the chain is 7 long, the caller takes 2, accepts 2
        assert drafted(d, [0, 1, 2], n_max=2) == [3, 4]
        d.accept(2)
    assert d.used > 0                                    # llama.cpp would have wiped it (2/7 < 0.25 ... twice)


def test_ngram_mod_hash_is_llama_cpps():
    d = mod(n_match=3)
    tokens = h(7, 151000, 3, 42, 9)
    slots = d._slots(tokens, np.arange(3))
    for start, slot in enumerate(slots):
        value = 0
        for t in tokens[start:start + 3]:
            value = (value * 6364136223846793005 + int(t)) % 2**64
        assert slot == value % 1024
