"""Is speculative output the target's own output? The check of DESIGN.md §3.

CPU kernels give batched and one-at-a-time evaluation slightly different logits, so greedy output with
speculation may leave plain greedy output where the target's top two choices were nearly tied. A divergence is
accepted only there: plain decoding's top-2 logit gap at the first differing token must be below ``tie``.
"""

from __future__ import annotations

from dataclasses import dataclass

from specframe.engine import GenerationResult

NEAR_TIE = 1e-2


@dataclass(frozen=True)
class LosslessVerdict:
    n_compared: int
    diverged_at: int | None          # index of the first differing generated token
    plain_margin: float | None       # plain decoding's top-2 logit gap there
    tie: float

    @property
    def identical(self) -> bool:
        return self.diverged_at is None

    @property
    def ok(self) -> bool:
        return self.identical or (self.plain_margin is not None and self.plain_margin < self.tie)

    def __str__(self) -> str:
        if self.identical:
            return f"identical over {self.n_compared} tokens"
        kind = "a near-tie" if self.ok else "NOT a near-tie: a real difference"
        return (f"diverged at token {self.diverged_at} of {self.n_compared}, where plain decoding's top-2 gap was "
                f"{self.plain_margin:.4g} ({kind}, threshold {self.tie})")


def compare(plain: GenerationResult, speculative: GenerationResult, tie: float = NEAR_TIE) -> LosslessVerdict:
    """Compare a greedy speculative run with a plain greedy run made with ``track_margins=True``."""
    if plain.margins is None:
        raise ValueError("the plain run needs track_margins=True")
    n = min(len(plain.tokens), len(speculative.tokens))
    for i in range(n):
        if plain.tokens[i] != speculative.tokens[i]:
            return LosslessVerdict(n, i, plain.margins[i], tie)
    return LosslessVerdict(n, None, None, tie)
