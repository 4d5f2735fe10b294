"""ngram-mod: llama.cpp's common_ngram_mod (common/ngram-mod.cpp and its speculative wrapper at 0c1e570).

A fixed pool of int32 slots (4 Mi by default: 16 MiB), indexed by a 64-bit polynomial (LCG) hash of
``n_match`` tokens modulo the pool size, holds the token that last followed that n-gram. Drafting chains
lookups: the last ``n_match`` tokens give the next token, which shifts into the window, up to ``n_max``
tokens; a chain that ends before ``n_min`` tokens drafts nothing. The pool is shared across requests on
purpose (it learns what the user's sessions repeat), and across a server's slots, as llama.cpp's server shares
it: ``begin`` adds the prompt, and empties the pool first if it
is more than 25 % full; history is added in chunks of 32 tokens; five consecutive drafts with less than a quarter
of their tokens accepted empty the pool too.

Deliberate differences: llama.cpp measures that acceptance fraction against the whole chain, before the caller
cuts the draft to its n_max, so with a chain of 64 and n_max 16 even fully accepted drafts score 0.25 at most and
the pool is wiped every five drafts. Here the fraction is of the tokens actually drafted. And llama.cpp never adds
what a request generated after its last chunk, so a repeated request finds the end of its answer missing; here the
next ``begin`` adds it first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specframe.drafting import NO_DRAFT, Draft, Drafter
from specframe.drafting.incremental import IncrementalDrafter
from specframe.errors import ParamError
from specframe.hookspecs import hookimpl
from specframe.params import MAX_DRAFT_TOKENS, param
from specframe.sampling import SamplingParams

_MULTIPLIER = 6364136223846793005   # llama.cpp's LCG multiplier; arithmetic modulo 2**64
_MASK = (1 << 64) - 1
_EMPTY = -1
_CHUNK = 32
_RESET_FILL = 0.25
_LOW_ACCEPTANCE = 0.25
_LOW_ROUNDS = 5


@dataclass(frozen=True)
class NgramModParams:
    n_match: int = param(24, min=1, max=1024, help="n-gram length hashed to find the next token")
    n_min: int = param(48, min=0, max=MAX_DRAFT_TOKENS, help="chains shorter than this draft nothing")
    n_max: int = param(64, min=1, max=MAX_DRAFT_TOKENS, help="longest chain")
    pool_size: int = param(4 * 1024 * 1024, min=1024, max=1 << 30, help="slots in the pool (int32 each)")

    def __post_init__(self):
        if self.n_min > self.n_max:
            raise ValueError(f"n_min = {self.n_min} can never be reached by chains of at most n_max = {self.n_max}")


class _Pool:
    """The next token by n-gram hash, and how many of its slots are used."""

    def __init__(self, size: int):
        try:
            self.tokens = np.full(size, _EMPTY, dtype=np.int32)
        except MemoryError:
            raise ParamError("pool_size", f"{size} slots need {size * 4 / 2**30:.1f} GiB, more than this machine "
                                          "can give; expected a smaller pool") from None
        self.used = 0

    def reset(self) -> None:
        self.tokens.fill(_EMPTY)
        self.used = 0


class NgramModDrafter(IncrementalDrafter):
    name = "ngram-mod"
    Params = NgramModParams

    def __init__(self, params: NgramModParams, env, pool: _Pool | None = None):
        """``pool``: the pool shared with the other slots' drafters (by default one of its own)."""
        super().__init__(params, env)
        self._pool = pool or _Pool(params.pool_size)
        self._drafted = 0           # tokens in the last draft
        self._low_rounds = 0
        self._lead = pow(_MULTIPLIER, params.n_match - 1, 1 << 64)   # weight of a window's first token

    @classmethod
    def for_slots(cls, params: NgramModParams, env, n_slots: int) -> list[Drafter]:
        """One pool for every slot."""
        pool = _Pool(params.pool_size)
        return [cls(params, env, pool) for _ in range(n_slots)]

    # --- the pool ------------------------------------------------------------------------------------------

    @property
    def pool(self) -> np.ndarray:
        return self._pool.tokens

    @property
    def used(self) -> int:
        return self._pool.used

    def _slots(self, tokens: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Pool slots of the n-grams starting at ``starts`` (vectorised polynomial hash, wrapping at 2**64)."""
        h = np.zeros(len(starts), dtype=np.uint64)
        multiplier = np.uint64(_MULTIPLIER)
        for i in range(self.params.n_match):
            h = h * multiplier + tokens[starts + i].astype(np.uint64)
        return (h % np.uint64(self.params.pool_size)).astype(np.int64)

    def index(self, tokens: list[int], start: int, stop: int) -> None:
        """Record the token following each n-gram, for the following tokens in [start, stop), later ones
        overwriting."""
        first = max(0, start - self.params.n_match)   # where the n-gram before ``start`` begins
        if stop - self.params.n_match <= first:
            return
        window = np.asarray(tokens[first:stop], dtype=np.int32)
        starts = np.arange(len(window) - self.params.n_match)
        slots = self._slots(window, starts)
        following = window[starts + self.params.n_match]
        last = len(slots) - 1 - np.unique(slots[::-1], return_index=True)[1]   # the last write to each slot
        slots, following = slots[last], following[last]
        self._pool.used += int(np.count_nonzero(self.pool[slots] == _EMPTY))
        self.pool[slots] = following

    def reset(self) -> None:
        self._pool.reset()

    # --- the protocol ---------------------------------------------------------------------------------------

    def begin(self, prompt: np.ndarray, sampling: SamplingParams | None = None) -> None:
        self.index_to(len(self.tokens))   # the last request's reply since its last chunk: a repeat drafts it too
        super().begin(prompt, sampling)
        self._drafted = 0
        # As llama.cpp: the prompt's last token is fed with the first draft, and indexed from there.
        self.take_in(prompt[:-1])
        self.index_to(len(self.tokens))
        if len(self.tokens) >= self.params.n_match and self.used / self.params.pool_size > _RESET_FILL:
            self.reset()

    def indexable(self, length: int) -> int:
        """The history before its last token (llama.cpp's "prompt"), once it holds a chunk of new n-grams."""
        committed = length - 1
        if max(0, self.indexed_until - self.params.n_match) + _CHUNK < committed:
            return committed
        return self.indexed_until

    def propose(self, tokens: list[int], n_max: int) -> Draft:
        params, n = self.params, self.params.n_match
        self._drafted = 0
        if len(tokens) - 1 < n:                          # llama.cpp's "prompt": history before the last token
            return NO_DRAFT
        window = tokens[-n:]
        h = 0
        for token in window:
            h = (h * _MULTIPLIER + token) & _MASK
        size, lead = params.pool_size, self._lead
        chain: list[int] = []
        for i in range(params.n_max):
            token = int(self.pool[h % size])
            if token == _EMPTY:
                if i < params.n_min:
                    return NO_DRAFT
                break
            chain.append(token)
            h = ((h - window[i] * lead) * _MULTIPLIER + token) & _MASK   # roll the window by one token
            window.append(token)
        drafted = chain[:n_max]
        self._drafted = len(drafted)
        return Draft.of(drafted)

    def accept(self, n_accepted: int) -> None:
        if self._drafted == 0:
            return
        if n_accepted / self._drafted < _LOW_ACCEPTANCE:
            self._low_rounds += 1
            if self._low_rounds >= _LOW_ROUNDS:
                self.reset()
                self._low_rounds = 0
                self.indexed_until = 0   # the next call adds the whole history again
        else:
            self._low_rounds = 0


@hookimpl
def register_drafters(register):
    register(NgramModDrafter)
