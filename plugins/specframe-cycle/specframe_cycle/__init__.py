"""cycle: when the history ends in a block repeated ``min_repeats`` times, draft the block once more."""

from dataclasses import dataclass

import numpy as np

from specframe import NO_DRAFT, Draft, Drafter, hookimpl, param


@dataclass(frozen=True)
class CycleParams:
    max_period: int = param(16, min=1, help="longest repeating block to look for")
    min_repeats: int = param(2, min=2, help="how many times the block must already repeat")


class CycleDrafter(Drafter):
    """Looks only at the last max_period x min_repeats tokens: the cost does not grow with the history."""

    name = "cycle"
    Params = CycleParams

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        repeats = self.params.min_repeats
        for period in range(1, self.params.max_period + 1):
            span = period * repeats
            if span > len(history):
                break
            tail = history[-span:].reshape(repeats, period)
            if (tail == tail[0]).all():
                block = tail[0]
                return Draft.of(np.resize(block, min(n_max, 2 * period)))
        return NO_DRAFT


@hookimpl
def register_drafters(register):
    register(CycleDrafter)
