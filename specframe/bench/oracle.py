"""The oracle: a drafter that knows the answer, for benchmarks only.

It drafts the known plain-greedy continuation, so every draft is accepted and its speedup is the best this
machine allows at a given n_max: the ceiling other strategies are measured against. It is not registered as a
plugin, since no config can give it the answer; the benchmark runner builds it per workload.
"""

from __future__ import annotations

import numpy as np

from specframe.drafting import NO_DRAFT, Draft, Drafter


class OracleDrafter(Drafter):
    name = "oracle"

    def __init__(self, reference: np.ndarray):
        super().__init__(None, None)
        self.reference = np.asarray(reference, dtype=np.int32)   # prompt + plain greedy continuation
        self._agreed = 0     # leading history tokens known to equal the reference

    def begin(self, prompt: np.ndarray) -> None:
        self._agreed = 0

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        """The reference's next tokens while the history follows it; nothing once it has left it (a near-tie
        that batched evaluation broke the other way)."""
        n = len(history)
        if n > len(self.reference) or n < self._agreed:
            return NO_DRAFT
        same = history[self._agreed:n] == self.reference[self._agreed:n]
        if not same.all():
            self._agreed = len(self.reference) + 1
            return NO_DRAFT
        self._agreed = n
        return Draft.of(self.reference[n:n + n_max])
