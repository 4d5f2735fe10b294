"""Is speculative output the target's own output? The check of DESIGN.md §3, made decisive for quantized models.

CPU kernels round batched and one-at-a-time evaluation differently, so greedy output with speculation may leave
plain greedy output where the target's top two choices are close. On float32 models the difference is in the
last bits, and a divergence is accepted only at a near-tie (plain decoding's top-2 logit gap below ``tie``).
On quantized models it is far larger: on Qwen2.5-Coder-1.5B Q4_K_M on a 2-core AVX2 CPU, batched and
one-at-a-time logits of the same tokens differ by up to 0.75 (median 0.43), and batching alone flips choices
whose gap is 0.07. So a divergence with a larger gap is tested directly: plain decoding's own prefix is
re-evaluated without any speculation, the diverging position inside a batch of the shape the speculative run
verified it in (same start, same size: CPU kernels change with the batch size); if that yields the speculative
token, the divergence is the arithmetic of batching. A real bug (wrong rollback, wrong acceptance) does not
reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specframe.engine import GenerationResult

if TYPE_CHECKING:
    from specframe.engine import Engine

NEAR_TIE = 1e-2
_WINDOWS = (2, 4, 8, 16)


@dataclass(frozen=True)
class LosslessVerdict:
    n_compared: int
    diverged_at: int | None          # index of the first differing generated token
    plain_margin: float | None       # plain decoding's top-2 logit gap there
    tie: float
    batch_window: int | None = None  # a batch size whose plain evaluation yields the speculative token

    @property
    def identical(self) -> bool:
        return self.diverged_at is None

    @property
    def near_tie(self) -> bool:
        return self.plain_margin is not None and self.plain_margin < self.tie

    @property
    def ok(self) -> bool:
        return self.identical or self.near_tie or self.batch_window is not None

    def __str__(self) -> str:
        if self.identical:
            return f"identical over {self.n_compared} tokens"
        where = (f"diverged at token {self.diverged_at} of {self.n_compared} (plain top-2 gap "
                 f"{self.plain_margin:.3g})")
        if self.near_tie:
            return f"{where}: a near-tie (< {self.tie})"
        if self.batch_window is not None:
            return f"{where}: reproduced without speculation by a batch of {self.batch_window} (batching arithmetic)"
        return f"{where}: NOT explained by a near-tie or by batching: a real difference"


def compare(plain: GenerationResult, speculative: GenerationResult, engine: "Engine | None" = None,
            tie: float = NEAR_TIE) -> LosslessVerdict:
    """Compare a greedy speculative run with a plain greedy run made with ``track_margins=True``. With the
    ``engine`` that made them, a divergence that is no near-tie is re-evaluated with batching."""
    if plain.margins is None:
        raise ValueError("the plain run needs track_margins=True")
    n = min(len(plain.tokens), len(speculative.tokens))
    diverged = next((i for i in range(n) if plain.tokens[i] != speculative.tokens[i]), None)
    if diverged is None:
        return LosslessVerdict(n, None, None, tie)
    margin = plain.margins[diverged]
    window = None
    if margin >= tie and engine is not None:
        window = _reproducing_batch(engine, plain, speculative, diverged)
    return LosslessVerdict(n, diverged, margin, tie, window)


def _reproducing_batch(engine: "Engine", plain: GenerationResult, speculative: GenerationResult,
                       index: int) -> int | None:
    """The size of a batch, if any, with which evaluating plain's prefix (prompt + its first ``index`` tokens)
    chooses the speculative token next. First the batch the speculative run verified that token in (same start,
    same size: the kernels depend on both), then batches that end at the token."""
    sequence = np.concatenate([plain.prompt, np.asarray(plain.tokens, dtype=np.int32)])
    end = len(plain.prompt) + index          # the token is chosen from the logits after sequence[:end]
    token = speculative.tokens[index]
    shapes = [(end - w, w) for w in _WINDOWS if w < end]
    if speculative.passes is not None:
        start, size = speculative.passes[index]
        shapes.insert(0, (start, size))
    context = engine.context
    for start, size in shapes:
        batch = sequence[start:start + size]
        if start <= 0 or len(batch) < end - start:
            continue
        batch = np.concatenate([batch, np.zeros(size - len(batch), dtype=np.int32)])   # later rows do not matter
        context.clear()
        context.decode(sequence[:start], 0)
        logits = context.decode(batch, start, all_logits=True)
        if int(np.argmax(logits[end - 1 - start])) == token:
            return size
    return None
