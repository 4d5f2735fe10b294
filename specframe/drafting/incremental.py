"""IncrementalDrafter: the skeleton of drafters that index the history as it grows.

Within a request the history only grows, so a drafter that keeps an index of it (n-grams, counts) needs to take in
only the tokens added since its last call: each call then costs O(new tokens), however long the history. This
class keeps that bookkeeping in one place: a mirror of the history, the ``indexed_until`` cursor, and the restart
when a new request begins (after ``begin``, or when a history arrives that is shorter than the last one).
"""

from __future__ import annotations

import numpy as np

from specframe.drafting.history import HistoryMirror
from specframe.drafting.protocol import Draft, Drafter
from specframe.sampling import SamplingParams


class IncrementalDrafter(Drafter):
    """A drafter whose index grows with the history.

    Each ``draft`` call takes in the new tail of the history, hands ``index`` the positions from ``indexed_until``
    to ``indexable(len(tokens))``, then asks ``propose`` for the draft. Subclasses implement ``index`` and
    ``propose``, and ``restart`` when they keep per-request state (called before a request's first index).
    ``tokens`` is the history as a Python list, cheap to slice and to hash as tuples.
    """

    def __init__(self, params, env):
        super().__init__(params, env)
        self._mirror = HistoryMirror()
        self.indexed_until = 0   # what the tokens before this position add to the index has been taken in

    @property
    def tokens(self) -> list[int]:
        return self._mirror.tokens

    def begin(self, prompt: np.ndarray, sampling: SamplingParams | None = None) -> None:
        super().begin(prompt, sampling)
        self._mirror.reset()   # the next history taken in starts a new request

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        self.take_in(history)
        self.index_to(self.indexable(len(self.tokens)))
        return self.propose(self.tokens, n_max)

    def take_in(self, history: np.ndarray) -> None:
        """Mirror the tokens of ``history`` not seen yet; at a new request, reset the cursor and ``restart``."""
        if self._mirror.update(history) == 0:
            self.indexed_until = 0
            self.restart()

    def index_to(self, stop: int) -> None:
        """Index the positions from ``indexed_until`` up to ``stop`` (none when it is not beyond the cursor)."""
        if stop > self.indexed_until:
            self.index(self.tokens, self.indexed_until, stop)
            self.indexed_until = stop

    # --- what subclasses define ------------------------------------------------------------------------------

    def restart(self) -> None:
        """A new request's history begins: forget what was indexed of the last one."""

    def indexable(self, length: int) -> int:
        """How far the index may reach in a history of ``length`` tokens (all of it, by default)."""
        return length

    def index(self, tokens: list[int], start: int, stop: int) -> None:
        """Take in what ``tokens[start:stop]`` add: the n-grams (or other units) that end at those positions."""
        raise NotImplementedError

    def propose(self, tokens: list[int], n_max: int) -> Draft:
        """The draft (at most ``n_max`` tokens) that continues ``tokens``, from the index; ``NO_DRAFT`` if none."""
        raise NotImplementedError


def ngram_starts(n: int, start: int, stop: int) -> range:
    """The start positions of the ``n``-grams whose last token lies in [start, stop)."""
    return range(max(0, start - n + 1), stop - n + 1)
