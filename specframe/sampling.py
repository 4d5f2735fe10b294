"""Choosing target tokens from logits, and accepting drafts: greedy, sample-and-match, rejection sampling.

Sampling draws one uniform number per emitted token, by inverse CDF, in the order tokens are emitted. So with
the same seed, sample-and-match emits the same tokens as plain sampling would: acceptance re-uses the draw the
target would have made anyway. For a drafter without a distribution (q one-hot at its token) that is exactly
lossless rejection sampling too: the draft token stands with probability p(d), and otherwise the draw falls on
another token with probability proportional to p.

For drafts that carry their distribution q, rejection sampling (Leviathan et al. 2023, Chen et al. 2023) accepts
d with probability min(1, p(d) / q(d)), else samples from norm(max(0, p - q)), and after a fully accepted draft
samples one bonus token from p: the emitted tokens follow the target's distribution exactly, and more draft
tokens stand than under sample-and-match when q is close to p.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specframe.params import INT32_MAX, param

ACCEPTANCE_MODES = ("rejection", "match")


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = param(0.0, min=0.0, max=100.0, help="0 = greedy")
    top_k: int = param(40, min=0, max=INT32_MAX, help="0 = whole vocabulary")
    top_p: float = param(0.95, min=0.0, max=1.0)
    seed: int = param(0, min=0, max=2**64 - 1)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class TokenSampler:
    """Samples with the given settings from its own random stream: ``stream`` tells apart the samplers of one
    request (the target's is 0) so a drafter's draws never shift the target's."""

    def __init__(self, params: SamplingParams, stream: int = 0):
        self.params = params
        self.rng = np.random.default_rng((params.seed, stream))

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def candidates(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids (most likely first) and their probabilities after temperature, top-k and top-p."""
        params = self.params
        if 0 < params.top_k < logits.size:
            ids = np.argpartition(logits, -params.top_k)[-params.top_k:]
        else:
            ids = np.arange(logits.size)
        scaled = logits[ids].astype(np.float64) / params.temperature
        order = np.argsort(-scaled, kind="stable")
        ids, scaled = ids[order], scaled[order]
        weights = np.exp(scaled - scaled[0])
        probs = weights / weights.sum()
        if params.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1
            ids, probs = ids[:keep], probs[:keep] / probs[:keep].sum()
        return ids, probs

    def draw(self, ids: np.ndarray, probs: np.ndarray) -> int:
        """One token of a distribution over ``ids``, by inverse CDF with one uniform number."""
        index = int(np.searchsorted(np.cumsum(probs), self.rng.random() * probs.sum(), side="right"))
        return int(ids[min(index, ids.size - 1)])

    def sample(self, logits: np.ndarray) -> int:
        """One token from one row of logits."""
        if self.greedy:
            return int(np.argmax(logits))
        return self.draw(*self.candidates(logits))


def verify(logits: np.ndarray, tokens: np.ndarray, draft_probs: np.ndarray | None, sampler: TokenSampler,
           acceptance: str = "rejection") -> tuple[int, list[int]]:
    """Accept a prefix of the drafted ``tokens`` from the target's ``logits`` (one row per position, the last
    after the whole draft); return (n_accepted, emitted tokens): the accepted ones plus the target's own token at
    the first rejection or after a fully accepted draft."""
    k = len(tokens)
    if sampler.greedy:
        choices = np.argmax(logits[:k + 1], axis=1)
        mismatch = np.flatnonzero(choices[:k] != tokens)
        n = int(mismatch[0]) if mismatch.size else k
        return n, choices[:n + 1].tolist()
    rejection_probs = draft_probs if acceptance == "rejection" else None
    emitted = []
    for i in range(k + 1):
        ids, probs = sampler.candidates(logits[i])
        if i == k:
            emitted.append(sampler.draw(ids, probs))
            return k, emitted
        if rejection_probs is not None:
            token, accepted = _reject_or_accept(sampler, ids, probs, int(tokens[i]), rejection_probs[i])
        else:
            token = sampler.draw(ids, probs)
            accepted = token == tokens[i]
        emitted.append(token)
        if not accepted:
            return i, emitted
    raise AssertionError("unreachable")


def _reject_or_accept(sampler: TokenSampler, ids: np.ndarray, p: np.ndarray, drafted: int,
                      q: np.ndarray) -> tuple[int, bool]:
    """One step of speculative sampling: keep ``drafted`` with probability min(1, p/q), else draw from the
    residual max(0, p - q) (which is p itself where q puts no mass)."""
    where = np.flatnonzero(ids == drafted)
    p_drafted = float(p[where[0]]) if where.size else 0.0
    q_drafted = float(q[drafted])
    if q_drafted > 0 and sampler.rng.random() * q_drafted < p_drafted:
        return drafted, True
    residual = np.maximum(p - q[ids], 0.0)
    if residual.sum() <= 0.0:     # p <= q everywhere on p's support: only when p == q, where rejection is moot
        residual = p
    return sampler.draw(ids, residual), False


def top2_margin(logits: np.ndarray) -> np.ndarray:
    """Gap between the best and second-best logit of each row: how close a greedy choice was to a tie."""
    top2 = np.partition(logits, -2, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]
