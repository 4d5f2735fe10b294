"""SuffixIndex: token sequences indexed so that the longest match of a context's suffix, and what followed it, are
found in tens of microseconds: SuffixDecoding's suffix tree (arXiv 2411.04975) in numpy.

A suffix tree of depth 64 over 100 000 tokens is millions of nodes, too many for Python objects, and cffi is for
libllama only. What a draft needs of the tree is the set of places where the context's last m tokens occurred
(a node's occurrences: its count) and, walking forward from them, which token followed most often. So the tokens
are kept in one int32 array, sequences separated by -1, and for each length k in ``LEVELS`` a hash chain (as in
LZ77 match finders) links each position to the previous position whose last k tokens hash to the same bucket: a
``heads`` table by bucket and a ``prev`` array by position, 4 bytes per position and level. Adding tokens costs a
fixed number of numpy operations per call plus O(new tokens); nothing already indexed is touched.

A lookup takes, from the longest level the context fills, the ``OCCURRENCES`` most recent positions of its last k
tokens, measures how far back each one matches the context (one gather of at most 32 x ``max_depth`` tokens), and
drafts from the positions that match at least m tokens, for each match length m that occurs, longest first. The
draft follows the most frequent next token, SuffixDecoding's path speculation: its probability is the product of
each chosen token's share of the occurrences still followed, the draft stops before a token whose probability
falls below ``min_token_prob``, and holds at most ``max_spec_factor * m + max_spec_offset`` tokens. Its score is
the sum of its tokens' probabilities (the tokens expected to be accepted); the best score over match lengths wins,
and shorter matches are not tried once their length limit cannot beat it. The continuations are read in one
gather, and once a single occurrence is left, its tokens up to its sequence's end are taken in one slice.

Deliberate differences from Arctic Inference's tree: counts come from at most ``OCCURRENCES`` most recent
occurrences per level (exact for the long, rare matches that make long drafts; a recent sample for very common
short ones); a draft is not limited to ``max_depth`` minus the match length, which the tree's depth forces there;
the occurrence that is the context itself (not followed by anything yet) is not counted; ties go to the
continuation seen most recently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specframe.params import MAX_DRAFT_TOKENS

LEVELS = (1, 2, 4, 8, 16, 32)   # the k-gram lengths hashed: each match length m is found from the level k <= m
OCCURRENCES = 32                # most recent occurrences a lookup takes per level
SEPARATOR = -1                  # between sequences, before the first and after the last token
_NO_TOKEN = -2                  # ends a probe: equal to no token, nor to SEPARATOR
_WINDOW = LEVELS[-1]            # tokens before a position that hashing it reads
_FIRST_HEADS = 1 << 10
_NONE = np.empty(0, dtype=np.int64)
_CHUNK = 4096                   # positions hashed per numpy call


def _powers(base: int, n: int) -> np.ndarray:
    factors = np.full(n, base, dtype=np.uint64)
    factors[0] = 1
    return np.cumprod(factors, dtype=np.uint64)   # wraps modulo 2**64


_BASE = 0x9E3779B97F4A7C15      # odd, so invertible modulo 2**64
_MIX = np.uint64(0xD6E8FEB86659FD93)
_INVERSE_POWERS = _powers(pow(_BASE, -1, 1 << 64), _CHUNK + _WINDOW)
_ENDS = np.arange(_WINDOW, _CHUNK + _WINDOW)                   # a chunk's positions in its window
_STARTS = _ENDS - np.array(LEVELS, dtype=np.int64)[:, None]   # and where their k-grams begin, by level
_END_POWERS = _powers(_BASE, _CHUNK + _WINDOW)[_ENDS]


@dataclass
class SuffixDraft:
    """A draft, its tokens' estimated probabilities, their sum (the tokens expected to stand) and the match."""

    tokens: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    match_length: int = 0

    @property
    def score(self) -> float:
        return sum(self.probs)


@dataclass(frozen=True)
class Context:
    """The end of a history as lookups take it: the mixed hashes of its last k tokens by level, and its last tokens
    (at most ``max_depth``, none before its start) newest first, then _NO_TOKEN."""

    mixed_hashes: np.ndarray
    probe: np.ndarray


@dataclass(frozen=True)
class DraftRule:
    """SuffixDecoding's limits on a draft: its length by the match's, and its tokens' least probability."""

    max_spec_factor: float = 1.0
    max_spec_offset: float = 0.0
    min_token_prob: float = 0.1

    def limit(self, match_length: int, n_max: int) -> int:
        return max(0, min(n_max, int(match_length * self.max_spec_factor + self.max_spec_offset + 1e-6)))


def kgram_hashes(window: np.ndarray, n_levels: int) -> np.ndarray:
    """Hashes of the k-grams (k in the first ``n_levels`` of LEVELS) that end at each position of ``window`` after
    its first _WINDOW tokens, at most _CHUNK of them: shape ``(n_levels, len(window) - _WINDOW)``.

    A k-gram's hash is sum(t_i B^(p - i)) modulo 2**64 over its tokens t_i (SEPARATOR as 2**64 - 1): the prefix
    sums of t_i B^-i, differenced k apart and multiplied by B^p, give every level in a few numpy calls."""
    n = len(window) - _WINDOW
    sums = np.cumsum(window.astype(np.uint64) * _INVERSE_POWERS[:len(window)], dtype=np.uint64)
    return (sums[_ENDS[:n]] - sums[_STARTS[:n_levels, :n]]) * _END_POWERS[:n]


class SuffixIndex:
    """Sequences of tokens and the hash chains that find where a context's suffix occurred in them.

    ``extend`` adds tokens to the last sequence, ``end_sequence`` closes it, ``forget_before`` drops the
    sequences before a position from every later lookup. Positions start at ``start`` (after a run of separators
    that keeps every backward look in bounds).
    """

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.n_levels = sum(1 for k in LEVELS if k <= max_depth)
        self.start = max(max_depth, _WINDOW + 1)
        self.tokens = np.full(self.start + 1024, SEPARATOR, dtype=np.int32)
        self.prev = np.full((self.n_levels, len(self.tokens)), -1, dtype=np.int32)
        self._level_slots = np.arange(self.n_levels, dtype=np.int64)[:, None]   # a level's row, as a column
        self.heads = np.full((self.n_levels, _FIRST_HEADS), -1, dtype=np.int32)
        self._level_heads = self._level_slots * _FIRST_HEADS
        self.size = self.start   # positions below are filled
        self.base = self.start   # positions below are forgotten
        self.indexed = 0         # tokens taken in since creation (or the last reset)
        self._last_hashes = np.zeros(self.n_levels, dtype=np.uint64)   # of the last position, by level
        self._offsets = np.arange(max(max_depth, MAX_DRAFT_TOKENS) + 1, dtype=np.int64)

    def reset(self) -> None:
        self.tokens[self.start:self.size] = SEPARATOR
        self.heads.fill(-1)
        self.size = self.base = self.start
        self.indexed = 0

    def context(self) -> Context:
        """The end of the last sequence, as lookups in this index or another take it."""
        depth = min(self.max_depth, self.indexed)
        return Context(self._last_hashes * _MIX, np.append(self.tokens[self.size - 1:self.size - 1 - depth:-1],
                                                            _NO_TOKEN))

    @property
    def live(self) -> int:
        """Positions (tokens and separators) not forgotten."""
        return self.size - self.base

    # --- adding ---------------------------------------------------------------------------------------------

    def extend(self, tokens: np.ndarray) -> None:
        """Append ``tokens`` to the last sequence and index them: O(len(tokens)) after a fixed cost per call."""
        n = len(tokens)
        if n == 0:
            return
        self._reserve(n)
        first = self.size
        self.tokens[first:first + n] = tokens
        self.size += n
        self.indexed += n
        self._last_hashes = self._link(first, self.size)[:, -1]
        if self.live > 2 * self.heads.shape[1]:                 # at most two positions per bucket and level
            self._rehash(1 << (self.live - 1).bit_length())

    def end_sequence(self) -> None:
        """Close the last sequence: what follows is another."""
        if self.tokens[self.size - 1] != SEPARATOR:
            self._reserve(1)
            self.size += 1   # the slot already holds SEPARATOR

    def forget_before(self, position: int) -> None:
        """Lookups no longer find the tokens before ``position`` (chains stop there)."""
        self.base = max(self.base, min(position, self.size))

    def _reserve(self, n: int) -> None:
        """Room for ``n`` more tokens and one SEPARATOR after them."""
        if self.size + n + 1 <= len(self.tokens):
            return
        capacity = max(2 * len(self.tokens), self.size + n + 1)
        tokens = np.full(capacity, SEPARATOR, dtype=np.int32)
        tokens[:self.size] = self.tokens[:self.size]
        prev = np.full((self.n_levels, capacity), -1, dtype=np.int32)
        prev[:, :self.size] = self.prev[:, :self.size]
        self.tokens, self.prev = tokens, prev

    def _link(self, first: int, stop: int) -> np.ndarray:
        """Put positions [first, stop) at the head of their buckets' chains, each level; return the hashes of the
        last chunk of them."""
        for chunk in range(first, stop, _CHUNK):
            end = min(chunk + _CHUNK, stop)
            hashes = kgram_hashes(self.tokens[chunk - _WINDOW:end], self.n_levels)
            self._link_chunk(chunk, end, hashes)
        return hashes

    def _link_chunk(self, first: int, stop: int, hashes: np.ndarray) -> None:
        n = stop - first
        keys = (self._buckets(hashes * _MIX) + self._level_heads).ravel()      # into heads.ravel()
        positions = np.arange(first, stop)
        slots = (positions + self._level_slots * self.prev.shape[1]).ravel()   # into prev.ravel()
        positions = np.tile(positions, self.n_levels)
        heads, prev = self.heads.reshape(-1), self.prev.reshape(-1)
        if n == 1:                                       # a key per level: none twice
            prev[slots] = heads[keys]
            heads[keys] = positions
            return
        order = np.argsort(keys, kind="stable")          # a bucket's positions stay in increasing order
        keys, slots, positions = keys[order], slots[order], positions[order]
        links = heads[keys]
        same = keys[1:] == keys[:-1]
        links[1:][same] = positions[:-1][same]           # after an earlier position of this call
        prev[slots] = links
        last = np.append(~same, True)
        heads[keys[last]] = positions[last]

    def _buckets(self, mixed_hashes: np.ndarray) -> np.ndarray:
        """The head-table buckets of hashes multiplied by _MIX: their top bits."""
        return (mixed_hashes >> np.uint64(65 - self.heads.shape[1].bit_length())).astype(np.int64)

    def _rehash(self, n_heads: int) -> None:
        """Rebuild the chains of the live positions with ``n_heads`` buckets per level (a power of two)."""
        self.heads = np.full((self.n_levels, n_heads), -1, dtype=np.int32)
        self._level_heads = self._level_slots * n_heads
        if self.live:
            self._link(self.base, self.size)

    # --- looking up -----------------------------------------------------------------------------------------

    def occurrences(self, level: int, bucket: int, exclude: int) -> np.ndarray:
        """The most recent (at most OCCURRENCES) positions in the chain of ``bucket`` at ``level``, newest first,
        without ``exclude``."""
        position = int(self.heads[level, bucket])
        if position < self.base:
            return _NONE
        chain = self.prev[level]
        found: list[int] = []
        while position >= self.base and len(found) < OCCURRENCES:
            if position != exclude:
                found.append(position)
            position = int(chain[position])
        return np.array(found, dtype=np.int64)

    def best_draft(self, context: Context, n_max: int, rule: DraftRule, exclude: int = -1,
                   to_beat: float = 0.0) -> SuffixDraft | None:
        """The draft with the best score above ``to_beat`` that continues ``context``, or None; ``exclude``: a
        position not to count (the context's own end, when it is indexed here)."""
        best: SuffixDraft | None = None
        score_to_beat = to_beat
        buckets = self._buckets(context.mixed_hashes).tolist()
        upper = len(context.probe)               # match lengths from here on were tried at a longer level
        for level in reversed(range(self.n_levels)):
            k = LEVELS[level]
            if k >= upper:
                continue
            if rule.limit(upper - 1, n_max) <= score_to_beat:
                break
            ends = self.occurrences(level, buckets[level], exclude)
            if len(ends):
                lengths = self._match_lengths(ends, context.probe)
                for m in sorted({n for n in lengths.tolist() if k <= n < upper}, reverse=True):
                    limit = rule.limit(m, n_max)
                    if limit <= score_to_beat:
                        return best
                    draft = self._follow(ends[lengths >= m], limit, rule.min_token_prob)
                    if draft.score > score_to_beat:
                        best, score_to_beat = draft, draft.score
                        best.match_length = m
            upper = k
        return best

    def _match_lengths(self, ends: np.ndarray, probe: np.ndarray) -> np.ndarray:
        """How many tokens before and at each of ``ends`` equal the context's last ones (``probe``: them, newest
        first, then a value no token has, so that every row has a first difference)."""
        return (self.tokens[ends[:, None] - self._offsets[:len(probe)]] != probe).argmax(axis=1)

    def _follow(self, ends: np.ndarray, limit: int, min_token_prob: float) -> SuffixDraft:
        """The most frequent path after the occurrences ending at ``ends``: up to ``limit`` tokens, each while
        its probability (the product of the chosen tokens' shares) stays at least ``min_token_prob``."""
        rows = self.tokens.take(ends[:, None] + self._offsets[1:limit + 1], mode="clip")   # SEPARATOR past the end
        columns = rows.T.tolist()               # the followers of the occurrences still followed, by column
        draft, prob = SuffixDraft(), 1.0
        for column in range(limit):
            followers = columns[column]
            if len(followers) == 1:               # one occurrence left: its tokens, up to its sequence's end
                rest = rows[0, column:].tolist()
                rest = rest[:rest.index(SEPARATOR)] if SEPARATOR in rest else rest
                draft.tokens.extend(rest)
                draft.probs.extend([prob] * len(rest))
                break
            token = followers[0]
            if token == SEPARATOR or followers.count(token) < len(followers):   # the occurrences part here
                counts: dict[int, int] = {}
                for follower in followers:        # newest occurrence first: ties go to the most recent
                    if follower != SEPARATOR:
                        counts[follower] = counts.get(follower, 0) + 1
                if not counts:
                    break
                token = max(counts, key=counts.__getitem__)
                prob *= counts[token] / len(followers)
                if prob < min_token_prob:
                    break
                rows = rows[[i for i, follower in enumerate(followers) if follower == token]]
                columns[column + 1:] = rows[:, column + 1:].T.tolist()
            draft.tokens.append(token)
            draft.probs.append(prob)
        return draft
