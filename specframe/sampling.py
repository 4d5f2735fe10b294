"""Choosing target tokens from logits: greedy, or seeded sampling after temperature / top-k / top-p.

Sampling draws exactly one uniform number per emitted token, by inverse CDF, in the order tokens are emitted.
So with the same seed, speculative sample-and-match emits the same tokens as plain sampling would: acceptance
re-uses the draw the target would have made anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specframe.params import param


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = param(0.0, min=0.0, help="0 = greedy")
    top_k: int = param(40, min=0, help="0 = whole vocabulary")
    top_p: float = param(0.95, min=0.0, max=1.0)
    seed: int = param(0, min=0)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class TokenSampler:
    def __init__(self, params: SamplingParams):
        self.params = params
        self._rng = np.random.default_rng(params.seed)

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def candidates(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids (most likely first) and their probabilities after temperature, top-k and top-p."""
        p = self.params
        scaled = logits.astype(np.float64) / p.temperature
        if 0 < p.top_k < scaled.size:
            ids = np.argpartition(scaled, -p.top_k)[-p.top_k:]
        else:
            ids = np.arange(scaled.size)
        order = np.argsort(-scaled[ids], kind="stable")
        ids = ids[order]
        weights = np.exp(scaled[ids] - scaled[ids[0]])
        probs = weights / weights.sum()
        if p.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1
            ids, probs = ids[:keep], probs[:keep] / probs[:keep].sum()
        return ids, probs

    def sample(self, logits: np.ndarray) -> int:
        """One token from one row of logits."""
        if self.greedy:
            return int(np.argmax(logits))
        ids, probs = self.candidates(logits)
        index = int(np.searchsorted(np.cumsum(probs), self._rng.random(), side="right"))
        return int(ids[min(index, ids.size - 1)])


def top2_margin(logits: np.ndarray) -> np.ndarray:
    """Gap between the best and second-best logit of each row: how close a greedy choice was to a tie."""
    top2 = np.partition(logits, -2, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]
