"""N-gram cache files (round trip, merge, refusals) and the ngram-cache drafter's thresholds."""

import struct

import numpy as np
import pytest

from specframe.drafters.ngram_cache import NgramCacheDrafter, NgramCacheParams
from specframe.ngram_counts import NgramCache, NgramCacheError


def cache_of(*sequences):
    cache = NgramCache()
    for seq in sequences:
        cache.update(list(seq))
    return cache


def test_counts_every_ngram_of_one_to_four_tokens():
    cache = cache_of([1, 2, 3, 1, 2, 4])
    assert cache.get((1, 2)) == {3: 1, 4: 1}
    assert cache.get((2,)) == {3: 1, 4: 1}
    assert cache.get((3, 1, 2)) == {4: 1}
    assert cache.get((1, 2, 3, 1)) == {2: 1}
    incremental, seen, tokens = NgramCache(), 0, [1, 2, 3, 1, 2, 4]
    for end in (2, 3, 6):                        # a growing history: each position is counted once
        incremental.update(tokens[:end], start=seen)
        seen = end
    assert incremental.table == cache.table


def test_round_trip_and_merge(tmp_path):
    a, b = cache_of([5, 6, 7, 5, 6, 8]), cache_of([5, 6, 7])
    path = tmp_path / "a.ngc"
    a.save(path)
    assert NgramCache.load(path).table == a.table
    a.merge(b)
    assert a.get((5, 6)) == {7: 2, 8: 1}
    assert a.stats()["ngrams_by_size"]["1"] == len([k for k in a.table if len(k) == 1])


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "c.ngc"
    cache_of([1, 2, 3, 4, 1, 2, 3]).save(path)
    return path


def test_truncated_corrupt_and_foreign_files_are_refused(saved, tmp_path):
    data = saved.read_bytes()
    cases = {
        "truncated": data[:-3],
        "trailing": data + b"x",
        "corrupt": data[:-1] + bytes([data[-1] ^ 1]),
        "version": data[:8] + struct.pack("<I", 99) + data[12:],
        "magic": b"GGUF" + data[4:],
        "empty": b"",
    }
    messages = {"truncated": "truncated", "trailing": "trailing data", "corrupt": "checksum",
                "version": "format version 99", "magic": "bad magic", "empty": "bad magic"}
    for name, content in cases.items():
        path = tmp_path / f"{name}.ngc"
        path.write_bytes(content)
        with pytest.raises(NgramCacheError, match=messages[name]) as info:
            NgramCache.load(path)
        assert str(path) in str(info.value)
    with pytest.raises(NgramCacheError, match="cannot read"):
        NgramCache.load(tmp_path / "missing.ngc")


def drafter(**params):
    return NgramCacheDrafter(NgramCacheParams(**params), env=None)


def h(*tokens):
    return np.array(tokens, dtype=np.int32)


def test_context_thresholds_are_lax_and_longest_ngram_first():
    d = drafter(n_draft=3)
    # (9,) was followed once by 1: a 1-gram needs 2 observations, so nothing from the 1-gram alone
    assert d.draft(h(9, 1, 5, 9), 8).tokens.tolist() == []
    d.begin(h())
    # (9,) and (4, 9) were each followed once by 7: too few for 1- and 2-grams, but the 3-gram (3, 4, 9)
    # needs one observation, and it is tried first
    assert d.draft(h(3, 4, 9, 7, 3, 4, 9), 8).tokens.tolist()[:1] == [7]


def test_static_cache_drafts_when_context_is_silent_and_dynamic_is_saved(tmp_path):
    static = tmp_path / "static.ngc"
    corpus = NgramCache()
    corpus.update([10, 11, 12] * 3, sizes=[2])
    corpus.save(static)
    dynamic = tmp_path / "dynamic.ngc"
    d = drafter(n_draft=4, static=str(static), dynamic=str(dynamic), save_dynamic=True)
    d.begin(h(1, 10, 11))
    assert d.draft(h(1, 10, 11), 8).tokens.tolist() == [12, 10, 11, 12]
    d.draft(h(1, 10, 11, 12, 40, 41), 8)
    d.save()
    saved = NgramCache.load(dynamic)
    assert saved.get((12,)) == {40: 1} and saved.get((40,)) == {41: 1}
    again = drafter(n_draft=4, dynamic=str(dynamic))
    assert again.dynamic.table == saved.table
