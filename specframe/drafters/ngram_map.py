"""ngram-map-k and ngram-map-k4v: llama.cpp's common_ngram_map (common/ngram-map.cpp at 0c1e570).

The key is the last ``n`` tokens. It is looked up among earlier n-grams that are followed by at least m + 1
tokens (as in llama.cpp), and each key keeps statistics across the request:

- ngram-map-k drafts the ``m`` tokens that followed the key, cut to the number of tokens accepted the last time
  this key drafted (at first ``m``), so a key's draft length follows its acceptance. A key whose last draft had
  nothing accepted drafts nothing again, as in llama.cpp.
- ngram-map-k4v counts up to four different m-token continuations of the key and drafts the most frequent one
  only when the key was hit at least ``min_hits`` times and that continuation occurred at least twice as often as
  the others together.

Per-request cost: new n-grams are indexed as the history grows (O(n) per new token), continuations are counted
from the key's occurrence list since its last count, so no call rescans the history.

Deliberate differences from llama.cpp, each a plain bug there:
- llama.cpp finds a key through a hash table whose slots keep whichever occurrence was written first (and miss
  on collisions), or by a backward scan that skips position 0 and the n + m + 1 positions before the end of the
  prompt. Here every eligible position is indexed and the most recent occurrence is used.
- llama.cpp's k4v drafts the tokens after the matched occurrence even when the dominant continuation is another
  one; here the dominant continuation is drafted.
- llama.cpp counts the previously matched occurrence again at every later count; here each occurrence counts once.
- llama.cpp keeps the map across requests for a server whose next prompt extends the last conversation; in an
  unrelated prompt its stored positions point at other text. Here the map belongs to the request.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from specframe.drafting import NO_DRAFT, Draft
from specframe.drafting.incremental import IncrementalDrafter, ngram_starts
from specframe.hookspecs import hookimpl
from specframe.params import MAX_DRAFT_TOKENS, param

MAX_VALUES = 4          # continuations tracked per key (COMMON_NGRAM_MAX_VALUES)
MAX_COUNT = 16380       # counters saturate here (COMMON_NGRAM_MAX_VALUE_COUNT)


@dataclass(frozen=True)
class NgramMapParams:
    n: int = param(12, min=1, max=256, help="key length: the last n tokens (indexed at every position)")
    m: int = param(48, min=1, max=MAX_DRAFT_TOKENS, help="continuation (value) length, the longest draft")
    min_hits: int = param(1, min=1, max=MAX_COUNT, help="k4v: key hits needed before drafting (hits saturate at "
                                                        f"{MAX_COUNT})")


@dataclass
class _Value:
    start: int               # where one occurrence of this continuation starts in the history
    count: int = 0
    accepted: int = 0        # tokens accepted the last time this continuation was drafted


@dataclass
class _Key:
    hits: int = 0
    counted_until: int = -1  # occurrences at or before this position are counted
    values: list[_Value] = field(default_factory=list)


class _NgramMapDrafter(IncrementalDrafter):
    """The shared machinery; ``continuation`` is what differs between k and k4v."""

    Params = NgramMapParams

    def __init__(self, params: NgramMapParams, env):
        super().__init__(params, env)
        self._occurrences: dict[tuple, list[int]] = {}   # key -> start positions, ascending
        self._keys: dict[tuple, _Key] = {}
        self._last: _Value | None = None

    def restart(self) -> None:
        self._occurrences.clear()
        self._keys.clear()

    def indexable(self, length: int) -> int:
        """A key must be followed by at least m + 1 tokens before the last one (llama.cpp's committed history)."""
        return length - self.params.m - 2

    def index(self, tokens: list[int], start: int, stop: int) -> None:
        n = self.params.n
        for at in ngram_starts(n, start, stop):
            self._occurrences.setdefault(tuple(tokens[at:at + n]), []).append(at)

    def propose(self, tokens: list[int], n_max: int) -> Draft:
        n, m = self.params.n, self.params.m
        self._last = None
        committed = len(tokens) - 1            # llama.cpp's view: history before the last token
        if committed < 2 * n + m:
            return NO_DRAFT
        key = tuple(tokens[-n:])
        positions = self._occurrences.get(key)
        if not positions:
            return NO_DRAFT
        stats = self._keys.get(key)
        if stats is None:
            stats = self._keys[key] = _Key()
        stats.hits = min(stats.hits + 1, MAX_COUNT)
        value = self.continuation(tokens, key, stats, positions)
        if value is None:
            return NO_DRAFT
        self._last = value
        length = min(m, value.accepted, n_max)
        return Draft.of(tokens[value.start:value.start + length])

    def continuation(self, tokens: list[int], key: tuple, stats: _Key, positions: list[int]) -> _Value | None:
        raise NotImplementedError

    def accept(self, n_accepted: int) -> None:
        if self._last is not None:
            self._last.accepted = n_accepted
            self._last = None


class NgramMapKDrafter(_NgramMapDrafter):
    name = "ngram-map-k"

    def continuation(self, tokens, key, stats, positions):
        """What followed the key's most recent occurrence; the length learned is the key's own."""
        if not stats.values:
            stats.values.append(_Value(positions[-1] + self.params.n, accepted=self.params.m))
        stats.values[0].start = positions[-1] + self.params.n
        return stats.values[0]


class NgramMapK4vDrafter(_NgramMapDrafter):
    name = "ngram-map-k4v"

    def continuation(self, tokens, key, stats, positions):
        """The dominant one of up to four continuations counted so far, if it dominates."""
        n, m = self.params.n, self.params.m
        if stats.hits < self.params.min_hits:
            return None
        for start in positions[bisect.bisect_right(positions, stats.counted_until):]:
            follow = start + n
            value_tokens = tokens[follow:follow + m]
            for value in stats.values:
                if tokens[value.start:value.start + m] == value_tokens:
                    value.count = min(value.count + 1, MAX_COUNT)
                    break
            else:
                if len(stats.values) < MAX_VALUES:   # a fifth continuation is not tracked (as in llama.cpp)
                    stats.values.append(_Value(follow, count=1, accepted=m))
        stats.counted_until = positions[-1]
        best = max(stats.values, key=lambda v: v.count)   # the first of equals, as llama.cpp
        others = sum(v.count for v in stats.values) - best.count
        if others > 0 and best.count < 2 * others:
            return None
        return best


@hookimpl
def register_drafters(register):
    register(NgramMapKDrafter)
    register(NgramMapK4vDrafter)
