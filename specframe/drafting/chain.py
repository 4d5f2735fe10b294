"""The drafter chain: drafters in priority order, the first non-empty draft wins, with per-drafter statistics.

A drafter that raises or returns an invalid draft is reported once and set aside for the rest of the run:
verification by the target keeps the output correct whatever a drafter proposes, but a bad token id must never
reach the model.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from specframe.drafting.budget import AcceptanceEstimate, VerifyCost
from specframe.drafting.protocol import NO_DRAFT, Draft, Drafter
from specframe.sampling import SamplingParams

log = logging.getLogger("specframe.drafting")


@dataclass
class DrafterStats:
    """llama.cpp's per-implementation counters (common_speculative_print_stats)."""

    calls: int = 0
    drafts: int = 0            # non-empty drafts that went to the target
    accepted_drafts: int = 0   # drafts with at least one accepted token
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    begin_ms: float = 0.0
    draft_ms: float = 0.0
    accept_ms: float = 0.0
    held_back: int = 0         # steps the cost model judged a draft from it not worth verifying

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ChainEntry:
    label: str          # the drafter's name in the config
    drafter: Drafter
    plugin: str
    stats: DrafterStats
    disabled: str | None = None   # why it was set aside
    estimate: AcceptanceEstimate = field(default_factory=AcceptanceEstimate)


class DrafterChain:
    """Drafters in priority order; drafts shorter than ``n_min`` are passed over for the next drafter's.

    With a ``verify`` cost model, each drafter is asked for the number of tokens its acceptance so far makes
    worth verifying (see budget.py), and not asked at all when that is none.
    """

    def __init__(self, entries: list[ChainEntry], n_vocab: int, n_min: int = 0, verify: VerifyCost | None = None):
        self.entries = entries
        self.n_vocab = n_vocab
        self.n_min = max(1, n_min)
        self.verify = verify
        self._winner: ChainEntry | None = None
        self._winner_draft = (0, 0, 0.0)   # (tokens asked for, tokens drafted, seconds) of the winning draft

    def begin(self, prompt: np.ndarray, sampling: SamplingParams | None = None) -> None:
        """A request starts: each drafter learns how it is sampled (``Drafter.sampling``) and sees the prompt."""
        for entry in self._active():
            entry.drafter.sampling = sampling
            start = time.perf_counter()
            self._guard(entry, "begin", entry.drafter.begin, prompt)
            entry.stats.begin_ms += (time.perf_counter() - start) * 1e3

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        """The first non-empty draft in priority order (at most ``n_max`` tokens), or NO_DRAFT."""
        self._winner = None
        if n_max <= 0:
            return NO_DRAFT
        for entry in self._active():
            length = entry.estimate.length(self.verify, n_max) if self.verify is not None else n_max
            if length < self.n_min:
                entry.stats.held_back += 1
                continue
            entry.stats.calls += 1
            start = time.perf_counter()
            result = self._guard(entry, "draft", entry.drafter.draft, history, length)
            seconds = time.perf_counter() - start
            entry.stats.draft_ms += seconds * 1e3
            if result is None:
                continue
            draft = self._validated(entry, result, length)
            if draft is not None and len(draft) >= self.n_min:
                entry.stats.drafts += 1
                entry.stats.drafted_tokens += len(draft)
                self._winner = entry
                self._winner_draft = (length, len(draft), seconds)
                return draft
            entry.estimate.update_empty(seconds)
        return NO_DRAFT

    def accept(self, n_accepted: int) -> None:
        """Tell the winner of the last draft how many of its tokens the target accepted."""
        entry, self._winner = self._winner, None
        if entry is None:
            return
        entry.stats.accepted_tokens += n_accepted
        entry.stats.accepted_drafts += n_accepted > 0
        n_asked, n_drafted, seconds = self._winner_draft
        entry.estimate.update(n_asked, n_drafted, n_accepted, seconds)
        start = time.perf_counter()
        self._guard(entry, "accept", entry.drafter.accept, n_accepted)
        entry.stats.accept_ms += (time.perf_counter() - start) * 1e3

    def close(self) -> None:
        for entry in self.entries:
            self._guard(entry, "close", entry.drafter.close)

    def stats(self) -> dict[str, dict]:
        return {e.label: e.stats.as_dict() | ({"note": e.drafter.note} if e.drafter.note else {})
                | ({"disabled": e.disabled} if e.disabled else {}) for e in self.entries}

    def _active(self):
        return (e for e in self.entries if e.disabled is None)

    def _guard(self, entry: ChainEntry, what: str, call, *args):
        try:
            return call(*args)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            self._disable(entry, f"{what}() raised {type(exc).__name__}: {exc}")
            return None

    def _disable(self, entry: ChainEntry, reason: str) -> None:
        if entry.disabled is None:
            entry.disabled = reason
            log.warning("drafter '%s' (plugin %s) is set aside for the rest of this run: %s",
                        entry.label, entry.plugin, reason)

    def _validated(self, entry: ChainEntry, result, n_max: int) -> Draft | None:
        if not isinstance(result, Draft):
            self._disable(entry, f"draft() returned {type(result).__name__}, expected a Draft")
            return None
        tokens = np.asarray(result.tokens)
        if tokens.ndim != 1 or (tokens.size and not np.issubdtype(tokens.dtype, np.integer)):
            self._disable(entry, "draft tokens must be a 1-D array of integer token ids")
            return None
        if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= self.n_vocab):
            self._disable(entry, f"drafted a token id outside the vocabulary [0, {self.n_vocab})")
            return None
        probs = result.probs
        if probs is not None:
            probs = np.asarray(probs)
            if probs.shape != (len(tokens), self.n_vocab):
                self._disable(entry, f"draft probs must have shape ({len(tokens)}, {self.n_vocab}), got {probs.shape}")
                return None
            probs = probs[:n_max]
        return Draft(tokens[:n_max].astype(np.int32, copy=False), probs)
