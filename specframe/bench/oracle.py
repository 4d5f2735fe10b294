"""The oracle: a drafter that knows the answer, for benchmarks only.

It drafts the known plain-greedy continuation, so nearly every draft is accepted and its speedup is the best
this machine allows at a given n_max: the ceiling other strategies are measured against. It is not registered as
a plugin, since no config can give it the answer; the benchmark runner builds it per workload.

Batched verification can break a near-tie of plain decoding the other way, and the text may never rejoin the
reference: on open prose the oracle's output left plain's at its 7th token and it drafted nothing after, 0.93x plain
where it reaches 3x. So the benchmark first settles the reference (``settled_reference``): the oracle's own output
becomes the reference until the oracle follows it to the end, which its batched passes then reproduce. Should a run
still leave it, the oracle re-anchors: it drafts what followed the history's last ANCHOR tokens in the reference,
at the occurrence nearest to where it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from specframe.drafting import NO_DRAFT, Draft, Drafter, DrafterChain, DrafterEnv
from specframe.drafting.gain import DrafterRecord

if TYPE_CHECKING:
    from specframe.engine import Engine

ANCHOR = 4
SETTLE_TRIES = 8    # oracle runs to settle a reference: each one that leaves it follows it further (open prose: 5)


class OracleDrafter(Drafter):
    name = "oracle"

    def __init__(self, reference: np.ndarray, env: DrafterEnv):
        super().__init__(None, env)
        self.reference = np.asarray(reference, dtype=np.int32)   # prompt + plain greedy continuation
        tokens = self.reference.tolist()
        self._after: dict[tuple, list[int]] = {}                  # ANCHOR tokens -> positions right after them
        for end in range(ANCHOR, len(tokens)):
            self._after.setdefault(tuple(tokens[end - ANCHOR:end]), []).append(end)
        self._agreed = 0          # leading history tokens known to equal the reference
        self._on_reference = True

    def begin(self, prompt: np.ndarray, sampling=None) -> None:
        self._agreed, self._on_reference = 0, True

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        n = len(history)
        if self._on_reference:
            if n <= len(self.reference) and np.array_equal(history[self._agreed:n], self.reference[self._agreed:n]):
                self._agreed = n
                return Draft.of(self.reference[n:n + n_max])
            self._on_reference = False                            # left it: anchor from now on
        ends = self._after.get(tuple(history[-ANCHOR:].tolist()))
        if not ends:
            return NO_DRAFT
        end = min(ends, key=lambda e: abs(e - n))
        return Draft.of(self.reference[end:end + n_max])


def oracle_chain(engine: Engine, prompt: np.ndarray, reference) -> DrafterChain:
    """A chain of the oracle alone, drafting ``reference`` after ``prompt``, its record certain from the start."""
    drafter = OracleDrafter(np.concatenate([prompt, np.asarray(reference, dtype=np.int32)]), engine.drafters.env)
    chain = engine.chain_of({OracleDrafter.name: drafter})
    chain.entries[0].record = DrafterRecord.certain()
    return chain


def settled_reference(reply_to: Callable[[np.ndarray], np.ndarray], reference: np.ndarray,
                      tries: int = SETTLE_TRIES) -> np.ndarray:
    """The reply the oracle reproduces: ``reply_to(reference)`` is the oracle's output when it drafts
    ``reference``, taken as the next reference until the two agree (or after ``tries`` runs, the last output)."""
    reference = np.asarray(reference, dtype=np.int32)
    for _ in range(tries):
        output = np.asarray(reply_to(reference), dtype=np.int32)
        if np.array_equal(output, reference):
            break
        reference = output
    return reference
