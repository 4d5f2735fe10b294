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
_WINDOW = LEVELS[-1] - 1        # tokens before a position that its longest hash covers
_MIX = np.uint64(0x9E3779B97F4A7C15)
_COMBINE = np.uint64(0xD6E8FEB86659FD93)
_FIRST_HEADS = 1 << 10


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
class DraftRule:
    """SuffixDecoding's limits on a draft: its length by the match's, and its tokens' least probability."""

    max_spec_factor: float = 1.0
    max_spec_offset: float = 0.0
    min_token_prob: float = 0.1

    def limit(self, match_length: int, n_max: int) -> int:
        return max(0, min(n_max, int(match_length * self.max_spec_factor + self.max_spec_offset + 1e-6)))


def level_hashes(window: np.ndarray, n_levels: int) -> np.ndarray:
    """Hashes of the k-grams ending at each position of ``window``, for the first ``n_levels`` of LEVELS (shape
    ``(n_levels, len(window))``; a row's first k - 1 entries cover fewer tokens and are not meaningful)."""
    hashes = np.empty((n_levels, len(window)), dtype=np.uint64)
    hashes[0] = (window.astype(np.int64) + 1).astype(np.uint64) * _MIX
    for j in range(1, n_levels):
        half = LEVELS[j - 1]
        hashes[j, :half] = hashes[j - 1, :half]
        hashes[j, half:] = hashes[j - 1, :-half] * _COMBINE + hashes[j - 1, half:]   # wraps modulo 2**64
    return hashes


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
        self.last_hashes = np.zeros(self.n_levels, dtype=np.uint64)   # of the last position, by level
        self._offsets = np.arange(max(max_depth, MAX_DRAFT_TOKENS) + 1, dtype=np.int64)

    def reset(self) -> None:
        self.tokens[self.start:self.size] = SEPARATOR
        self.heads.fill(-1)
        self.size = self.base = self.start
        self.indexed = 0

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
        self.last_hashes = self._link(first, self.size)[:, -1]
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
        """Put positions [first, stop) at the head of their buckets' chains, each level; return their hashes."""
        hashes = level_hashes(self.tokens[first - _WINDOW:stop], self.n_levels)[:, _WINDOW:]
        positions = np.arange(first, stop, dtype=np.int64)
        keys = (self._buckets(hashes) + self._level_heads).ravel()             # into heads.ravel()
        slots = (positions + self._level_slots * self.prev.shape[1]).ravel()   # into prev.ravel()
        order = np.argsort(keys, kind="stable")          # a bucket's positions stay in increasing order
        keys, slots = keys[order], slots[order]
        positions = np.tile(positions, self.n_levels)[order]
        heads, prev = self.heads.reshape(-1), self.prev.reshape(-1)
        links = heads[keys]
        same = keys[1:] == keys[:-1]
        links[1:][same] = positions[:-1][same]           # after an earlier position of this call
        prev[slots] = links
        last = np.append(~same, True)
        heads[keys[last]] = positions[last]
        return hashes

    def _buckets(self, hashes: np.ndarray) -> np.ndarray:
        """The head-table buckets of ``hashes``: their top bits after a multiplicative mix."""
        shift = np.uint64(65 - self.heads.shape[1].bit_length())
        return ((hashes * _MIX) >> shift).astype(np.int64)

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
        chain = self.prev[level]
        found: list[int] = []
        position = int(self.heads[level, bucket])
        while position >= self.base and len(found) < OCCURRENCES:
            if position != exclude:
                found.append(position)
            position = int(chain[position])
        return np.array(found, dtype=np.int64)

    def best_draft(self, context_hashes: np.ndarray, reversed_context: np.ndarray, n_max: int, rule: DraftRule,
                   exclude: int = -1, to_beat: float = 0.0) -> SuffixDraft | None:
        """The draft with the best score above ``to_beat`` that continues the context, or None.

        ``context_hashes``: the context's last-position hashes by level (``level_hashes``); ``reversed_context``:
        its last tokens, newest first (at most ``max_depth``); ``exclude``: a position not to count (the context's
        own end, when it is indexed here)."""
        best: SuffixDraft | None = None
        score_to_beat = to_beat
        buckets = self._buckets(context_hashes).tolist()
        probe = np.append(reversed_context, _NO_TOKEN)
        upper = len(reversed_context) + 1        # match lengths from here on were tried at a longer level
        for level in reversed(range(self.n_levels)):
            k = LEVELS[level]
            if k >= upper:
                continue
            if rule.limit(upper - 1, n_max) <= score_to_beat:
                break
            ends = self.occurrences(level, buckets[level], exclude)
            if len(ends):
                lengths = self._match_lengths(ends, probe)
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
        rows = self.tokens.take(ends[:, None] + self._offsets[1:limit + 1], mode="clip").tolist()  # SEPARATOR past
        draft, prob = SuffixDraft(), 1.0                                                            # the end
        for column in range(limit):
            if len(rows) == 1:                    # one occurrence left: its tokens, up to its end
                rest = rows[0][column:]
                rest = rest[:rest.index(SEPARATOR)] if SEPARATOR in rest else rest
                draft.tokens.extend(rest)
                draft.probs.extend([prob] * len(rest))
                break
            followers = [row[column] for row in rows]
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
                rows = [row for row in rows if row[column] == token]
            draft.tokens.append(token)
            draft.probs.append(prob)
        return draft
