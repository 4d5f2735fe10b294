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

With ``state`` and ``save_state``, the pool is written to a file when the engine closes (its used slots only, so at
most 8 bytes a slot) and read when it starts (specframe.state_files: atomic, versioned, set aside when it cannot
be used, such as one written for another n_match or pool_size), so a restarted server remembers its sessions.
"""

from __future__ import annotations

import pathlib
import struct
from dataclasses import dataclass

import numpy as np

from specframe.drafting import NO_DRAFT, Draft, Drafter
from specframe.drafting.incremental import IncrementalDrafter
from specframe.errors import ParamError
from specframe.hookspecs import hookimpl
from specframe.params import MAX_DRAFT_TOKENS, param
from specframe.sampling import SamplingParams
from specframe.state_files import (
    StateError,
    check_state_param,
    check_token_ids,
    check_vocabulary,
    load_state,
    save_state,
    state_path,
)

_MULTIPLIER = 6364136223846793005   # llama.cpp's LCG multiplier; arithmetic modulo 2**64
_MASK = (1 << 64) - 1
_EMPTY = -1
_CHUNK = 32
_RESET_FILL = 0.25
_LOW_ACCEPTANCE = 0.25
_LOW_ROUNDS = 5
STATE_MAGIC = b"SFNGMOD\0"
STATE_VERSION = 1
_STATE_HEADER = struct.Struct("<IIII")   # vocabulary size (0: unknown), n_match, pool_size, used slots


@dataclass(frozen=True)
class NgramModParams:
    n_match: int = param(24, min=1, max=1024, help="n-gram length hashed to find the next token")
    n_min: int = param(48, min=0, max=MAX_DRAFT_TOKENS, help="chains shorter than this draft nothing")
    n_max: int = param(64, min=1, max=MAX_DRAFT_TOKENS, help="longest chain")
    pool_size: int = param(4 * 1024 * 1024, min=1024, max=1 << 30, help="slots in the pool (int32 each)")
    state: str = param("", help="file of the pool, relative to the config: read when the engine starts")
    save_state: bool = param(False, help="write the pool to the state file when the engine closes")

    def __post_init__(self):
        if self.n_min > self.n_max:
            raise ValueError(f"n_min = {self.n_min} can never be reached by chains of at most n_max = {self.n_max}")


class _Pool:
    """The next token by n-gram hash, and how many of its slots are used; read from and saved to its state file."""

    def __init__(self, size: int, n_match: int = 0, n_vocab: int = 0, path: pathlib.Path | None = None):
        try:
            self.tokens = np.full(size, _EMPTY, dtype=np.int32)
        except MemoryError:
            raise ParamError("pool_size", f"{size} slots need {size * 4 / 2**30:.1f} GiB, more than this machine "
                                          "can give; expected a smaller pool") from None
        self.used = 0
        self.n_match, self.n_vocab, self.path = n_match, n_vocab, path
        self.changed = False     # since it was read or saved
        if path is not None:
            stored = load_state(path, STATE_MAGIC, STATE_VERSION, self._parse, "ngram-mod's pool")
            if stored is not None:
                slots, tokens = stored
                self.tokens[slots] = tokens
                self.used = len(slots)

    @classmethod
    def of(cls, params: NgramModParams, env) -> "_Pool":
        path = state_path(params.state, env)
        return cls(params.pool_size, params.n_match, env.n_vocab if env is not None else 0, path)

    def reset(self) -> None:
        self.tokens.fill(_EMPTY)
        self.used = 0
        self.changed = True

    def save(self) -> None:
        """Write the used slots to the state file, when the pool changed since it was read or last written."""
        if self.path is None or not self.changed:
            return
        slots = np.flatnonzero(self.tokens != _EMPTY).astype("<u4")
        header = _STATE_HEADER.pack(self.n_vocab, self.n_match, len(self.tokens), len(slots))
        save_state(self.path, STATE_MAGIC, STATE_VERSION,
                   header + slots.tobytes() + self.tokens[slots].astype("<i4").tobytes())
        self.changed = False

    def _parse(self, payload: bytes) -> tuple[np.ndarray, np.ndarray]:
        if len(payload) < _STATE_HEADER.size:
            raise StateError("truncated")
        n_vocab, n_match, size, used = _STATE_HEADER.unpack_from(payload)
        check_vocabulary(n_vocab, self.n_vocab)
        if (n_match, size) != (self.n_match, len(self.tokens)):
            raise StateError(f"written for n_match {n_match} and pool_size {size}; this config has n_match "
                             f"{self.n_match} and pool_size {len(self.tokens)}")
        if len(payload) != _STATE_HEADER.size + 8 * used:
            raise StateError(f"corrupt ({len(payload)} bytes for {used} slots)")
        slots = np.frombuffer(payload, dtype="<u4", count=used, offset=_STATE_HEADER.size).astype(np.int64)
        tokens = np.frombuffer(payload, dtype="<i4", offset=_STATE_HEADER.size + 4 * used).astype(np.int32)
        if used and ((np.diff(slots) <= 0).any() or slots[-1] >= size):
            raise StateError("corrupt (slots out of order or beyond the pool)")
        check_token_ids(tokens, self.n_vocab)
        return slots, tokens


class NgramModDrafter(IncrementalDrafter):
    name = "ngram-mod"
    Params = NgramModParams

    def __init__(self, params: NgramModParams, env, pool: _Pool | None = None):
        """``pool``: the pool shared with the other slots' drafters (by default one of its own)."""
        super().__init__(params, env)
        self._pool = pool or _Pool.of(params, env)
        self._drafted = 0           # tokens in the last draft
        self._low_rounds = 0
        self._lead = pow(_MULTIPLIER, params.n_match - 1, 1 << 64)   # weight of a window's first token

    @classmethod
    def for_slots(cls, params: NgramModParams, env, n_slots: int) -> list[Drafter]:
        """One pool for every slot."""
        pool = _Pool.of(params, env)
        return [cls(params, env, pool) for _ in range(n_slots)]

    @classmethod
    def check_params(cls, params: NgramModParams, config_dir: pathlib.Path) -> None:
        check_state_param(config_dir, params.state, params.save_state, "state", "save_state")

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
        self._pool.changed = True

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
        size, lead, pool = params.pool_size, self._lead, self.pool
        chain: list[int] = []
        for i in range(min(params.n_max, max(params.n_min, n_max))):   # past both, a chain is neither cut nor kept
            token = pool.item(h % size)
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

    def save(self) -> None:
        """The reply's tail since its last chunk joins the pool (as the next ``begin`` would add it); then, with
        ``save_state``, the pool is written."""
        self.index_to(len(self.tokens))
        if self.params.save_state:
            self._pool.save()


@hookimpl
def register_drafters(register):
    register(NgramModDrafter)
