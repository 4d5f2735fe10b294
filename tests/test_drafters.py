"""Built-in drafters on hand-built token sequences whose right draft is known, and against brute force."""

import numpy as np
import pytest

from specframe.drafters.copy_cursor import CopyCursorDrafter, CopyCursorParams
from specframe.drafters.draft_model import DraftModelDrafter, DraftModelParams
from specframe.drafters.ngram_simple import NgramSimpleDrafter, NgramSimpleParams
from specframe.drafters.prompt_lookup import PromptLookupDrafter, PromptLookupParams
from specframe.drafting import DrafterEnv


def h(*tokens):
    return np.array(tokens, dtype=np.int32)


def drafted(drafter, history, n_max=64):
    return drafter.draft(history, n_max).tokens.tolist()


# --- prompt-lookup -----------------------------------------------------------------------------------------------

def test_prompt_lookup_matches_the_longest_suffix_at_its_earliest_occurrence():
    d = PromptLookupDrafter(PromptLookupParams(max_ngram=2, num_pred=3), env=None)
    # suffix (1, 2) occurs at 0 and 4: the earliest wins, and the continuation stops at num_pred
    assert drafted(d, h(1, 2, 3, 4, 1, 2, 7, 8, 1, 2)) == [3, 4, 1]
    d.begin(h())
    # (9, 7) never occurred: fall back to the 1-gram (7), first seen at 0
    assert drafted(d, h(7, 8, 9, 5, 9, 7)) == [8, 9, 5]
    d.begin(h())
    assert drafted(d, h(1, 2, 3)) == []                      # no earlier occurrence of anything
    d.begin(h())
    assert drafted(d, h(4, 5, 6, 4, 5), n_max=1) == [6]      # n_max caps the draft
    d.begin(h())
    assert drafted(d, h(4, 5, 4, 5)) == [4, 5]               # a short continuation is drafted as far as it goes


@pytest.mark.parametrize("make", [
    lambda: PromptLookupDrafter(PromptLookupParams(max_ngram=3, num_pred=4), env=None),
    lambda: CopyCursorDrafter(CopyCursorParams(), env=None),
])
def test_the_copying_drafters_draft_the_middle_from_the_suffix_and_from_other_files(make):
    """An infill prompt (specframe/infill.py) holds other files' chunks, the prefix and the suffix: a completion
    that runs into text of the suffix, or of another file, is drafted from it."""
    sep, pre, suf, mid = 900, 901, 902, 903
    chunk = [sep, 50, 51, 52, 53, 54, 55, 56]             # another file: 53 54 55 56 is what the user writes next
    prefix, suffix = [pre, 10, 11, 12], [suf, 20, 21, 22, 23, 24, 25]
    into_suffix = h(*chunk, *prefix, 7, *suffix, mid, 20, 21, 22)        # the middle reaches the suffix's text
    drafter = make()
    drafter.begin(into_suffix[:-3])
    assert drafted(drafter, into_suffix)[:3] == [23, 24, 25]
    from_other_file = h(*chunk, *prefix, *suffix, mid, 52, 53)
    drafter = make()
    drafter.begin(from_other_file[:-2])
    assert drafted(drafter, from_other_file)[:3] == [54, 55, 56]


# --- copy-cursor -------------------------------------------------------------------------------------------------

def test_copy_cursor_drafts_on_from_where_its_copy_stands():
    """(2, 9) occurs at 0 and at 6: prompt lookup re-matches it at the earliest, while the copy under way is at 6."""
    prompt = [2, 9, 7, 0, 0, 5, 2, 9, 6, 3]
    d = CopyCursorDrafter(CopyCursorParams(num_pred=4), env=None)
    assert drafted(d, h(*prompt, 5)) == [2, 9, 6, 3]           # (5) follows only position 5
    assert drafted(d, h(*prompt, 5, 2, 9)) == [6, 3, 5, 2]     # the target took 2 9: on from there
    lookup = PromptLookupDrafter(PromptLookupParams(max_ngram=2, num_pred=4), env=None)
    assert drafted(lookup, h(*prompt, 5, 2, 9)) == [7, 0, 0, 5]


def test_copy_cursor_resumes_an_edited_copy_where_it_broke_off():
    """The reply copies 1 2 3 from the source 1..7, inserts 9, then writes 4: of the three 4s in the prompt, the one
    where the copy broke off resumes it, not the earliest (prompt lookup's) nor the most recent."""
    prompt = [4, 8, 1, 2, 3, 4, 5, 6, 7, 0, 4, 0]
    d = CopyCursorDrafter(CopyCursorParams(), env=None)
    assert drafted(d, h(*prompt, 1))[:3] == [2, 3, 4]
    assert drafted(d, h(*prompt, 1, 2, 3, 9)) == []            # 9 was never seen: nothing to copy
    assert drafted(d, h(*prompt, 1, 2, 3, 9, 4))[:3] == [5, 6, 7]
    lookup = PromptLookupDrafter(PromptLookupParams(max_ngram=2, num_pred=3), env=None)
    assert drafted(lookup, h(*prompt, 1, 2, 3, 9, 4)) == [8, 1, 2]
    far = CopyCursorDrafter(CopyCursorParams(window=0), env=None)   # resuming only exactly where it broke off
    drafted(far, h(*prompt, 1))
    drafted(far, h(*prompt, 1, 2, 3, 9))
    assert drafted(far, h(*prompt, 1, 2, 3, 9, 4))[:3] == [0, 1, 2]   # position 6 is 1 past it: most recent 4


class ReferenceCopyCursor:
    """copy-cursor without an index: every match rescans the history."""

    def __init__(self, max_ngram, num_pred, window):
        self.max_ngram, self.num_pred, self.window = max_ngram, num_pred, window
        self.cursor, self.cursor_from, self.resume_from, self.tracked = None, 0, 0, 0

    def draft(self, tokens, n_max):
        for i in range(max(self.tracked, 1), len(tokens)):
            if self.cursor is None:
                break
            if tokens[self.cursor] == tokens[i]:
                self.cursor += 1
            else:
                if self.cursor > self.cursor_from:
                    self.resume_from = self.cursor
                self.cursor = None
        self.tracked = len(tokens)
        if self.cursor is None:
            self.cursor = self.match(tokens)
            if self.cursor is None:
                return []
            self.cursor_from = self.cursor
        return tokens[self.cursor:min(self.cursor + self.num_pred, self.cursor + n_max, len(tokens))]

    def match(self, tokens):
        """The nearest resuming occurrence of the longest suffix n-gram that has one, else the most recent
        occurrence of the longest suffix n-gram that occurs at all."""
        length, most_recent = len(tokens), None
        for n in range(min(self.max_ngram, length - 1), 0, -1):
            follows = [s + n for s in range(length - n) if tokens[s:s + n] == tokens[length - n:]]
            near = [f for f in follows if 0 <= f - self.resume_from <= self.window]
            if near:
                return min(near)
            if follows and most_recent is None:
                most_recent = max(follows)
        return most_recent


def test_copy_cursor_matches_a_rescanning_reference_as_the_history_grows():
    rng = np.random.default_rng(7)
    for tokens in repetitive_sequences(seed=3, count=12, length=240):
        max_ngram, window = int(rng.integers(1, 5)), int(rng.integers(0, 40))
        d = CopyCursorDrafter(CopyCursorParams(max_ngram=max_ngram, num_pred=12, window=window), env=None)
        reference = ReferenceCopyCursor(max_ngram, 12, window)
        length = 20
        while length < len(tokens):
            n_max = int(rng.integers(1, 16))
            assert drafted(d, h(*tokens[:length]), n_max) == reference.draft(tokens[:length], n_max)
            length += int(rng.integers(1, 6))


def reference_prompt_lookup(tokens, max_ngram, num_pred, n_max):
    """The obvious rescanning implementation."""
    length = len(tokens)
    for n in range(min(max_ngram, length - 1), 0, -1):
        suffix = tokens[length - n:]
        for start in range(0, length - n):
            if tokens[start:start + n] == suffix:
                return tokens[start + n:min(start + n + num_pred, start + n + n_max, length)]
    return []


def reference_ngram_simple(tokens, n, m, n_max):
    """llama.cpp's common_ngram_simple_draft, transcribed, with position 0 searched too (our documented fix)."""
    cur_len = len(tokens) - 1
    if cur_len <= n + m + 1:
        return []
    pattern = tokens[cur_len - n + 1:cur_len] + [tokens[-1]]
    match = None
    for j in range(cur_len - n - 1, -1, -1):
        if tokens[j:j + n] == pattern:
            match = j
            break
    if match is None:
        return []
    copy_max = min(m, cur_len - (match + n))
    if copy_max < n:
        return []
    return tokens[match + n:match + n + min(copy_max, n_max)]


def repetitive_sequences(seed, count=20, length=300):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        vocab = int(rng.integers(3, 12))
        out = []
        while len(out) < length:   # random tokens with copied runs, like code being edited
            if out and rng.random() < 0.5:
                start = int(rng.integers(0, len(out)))
                out.extend(out[start:start + int(rng.integers(1, 30))])
            else:
                out.extend(rng.integers(0, vocab, size=int(rng.integers(1, 6))).tolist())
        yield out[:length]


@pytest.mark.parametrize("max_ngram,num_pred", [(1, 5), (2, 10), (4, 3)])
def test_prompt_lookup_incremental_index_equals_rescanning(max_ngram, num_pred):
    drafter = PromptLookupDrafter(PromptLookupParams(max_ngram=max_ngram, num_pred=num_pred), env=None)
    for seq in repetitive_sequences(1):
        drafter.begin(h(*seq[:5]))
        for length in range(5, len(seq), 3):   # the history grows by a few tokens per call
            want = reference_prompt_lookup(seq[:length], max_ngram, num_pred, n_max=8)
            assert drafted(drafter, h(*seq[:length]), n_max=8) == want


# --- ngram-simple ------------------------------------------------------------------------------------------------

def test_ngram_simple_follows_llama_cpp_rules():
    d = NgramSimpleDrafter(NgramSimpleParams(n=2, m=3), env=None)
    # pattern (5, 6) found at 1: draft what followed, at most m
    assert drafted(d, h(0, 5, 6, 1, 2, 3, 9, 5, 6)) == [1, 2, 3]
    d.begin(h())
    # found at position 0 (llama.cpp's search skips position 0; we do not, on purpose)
    assert drafted(d, h(5, 6, 1, 2, 3, 4, 9, 5, 6)) == [1, 2, 3]
    d.begin(h())
    # the most recent occurrence wins
    assert drafted(d, h(5, 6, 1, 1, 5, 6, 2, 2, 8, 5, 6)) == [2, 2, 8]
    d.begin(h())
    # fewer than n tokens follow the match: no draft
    assert drafted(d, h(0, 0, 0, 0, 0, 0, 0, 5, 6, 5, 6)) == []
    d.begin(h())
    # too short a history (at most n + m + 2 tokens): no draft
    assert drafted(d, h(5, 6, 1, 2, 3, 5, 6)) == []
    d.begin(h())
    # the occurrence right before the pattern is skipped, as in llama.cpp
    assert drafted(d, h(1, 2, 3, 4, 9, 9, 9, 9, 9)) == []


@pytest.mark.parametrize("n,m", [(1, 4), (2, 8), (3, 48), (12, 48)])
def test_ngram_simple_incremental_index_equals_llama_cpp_search(n, m):
    drafter = NgramSimpleDrafter(NgramSimpleParams(n=n, m=m), env=None)
    for seq in repetitive_sequences(2):
        drafter.begin(h(*seq[:5]))
        for length in range(5, len(seq), 2):
            want = reference_ngram_simple(seq[:length], n, m, n_max=16)
            assert drafted(drafter, h(*seq[:length]), n_max=16) == want


def test_drafters_restart_cleanly_when_a_new_request_skips_begin():
    for drafter in (PromptLookupDrafter(PromptLookupParams(), env=None),
                    NgramSimpleDrafter(NgramSimpleParams(n=1, m=2), env=None)):
        drafted(drafter, h(*range(50)))
        fresh = type(drafter)(drafter.params, env=None)
        history = h(3, 4, 5, 6, 3, 4, 5, 6, 3)
        assert drafted(drafter, history) == drafted(fresh, history)


# --- draft-model -------------------------------------------------------------------------------------------------

def draft_model(target_model, draft_path, **params):
    env = DrafterEnv(target=target_model, n_ctx=512, n_threads=2, n_gpu_layers=0)
    return DraftModelDrafter(DraftModelParams(model=str(draft_path), **params), env)


def test_draft_model_keeps_its_memory_in_step_incrementally(target_model, draft_path):
    """Drafts from a drafter that syncs incrementally (keeping accepted draft tokens in its KV memory) equal
    those of a fresh drafter that evaluates the whole history each time."""
    incremental = draft_model(target_model, draft_path, p_min=0.0, n_max=6)
    rng = np.random.default_rng(0)
    history = list(target_model.vocab.tokenize("the quick brown fox"))
    incremental.begin(h(*history), None)
    for _ in range(12):
        draft = drafted(incremental, h(*history), n_max=6)
        fresh = draft_model(target_model, draft_path, p_min=0.0, n_max=6)
        assert drafted(fresh, h(*history), n_max=6) == draft
        fresh.close()
        keep = int(rng.integers(0, len(draft) + 1))       # the target accepts a prefix, then its own token
        history += draft[:keep] + [int(rng.integers(3, 300))]
    incremental.close()


def test_draft_model_p_min_and_n_min(target_model, draft_path):
    certain = draft_model(target_model, draft_path, p_min=1.0)
    assert drafted(certain, target_model.vocab.tokenize("hello")) == []     # nothing is that sure
    certain.close()
    greedy = draft_model(target_model, draft_path, p_min=0.0, n_max=5)
    assert len(drafted(greedy, target_model.vocab.tokenize("hello"))) == 5
    greedy.close()
    picky = draft_model(target_model, draft_path, p_min=0.0, n_max=3, n_min=4)
    assert drafted(picky, target_model.vocab.tokenize("hello")) == []       # shorter than n_min: dropped
    picky.close()
