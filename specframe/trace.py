"""An optional observer of a request's target passes, for benchmarks and the lossless check (lossless.py).

For each generated token it records the target's top-2 logit gap in the pass that chose it (how near a tie the
greedy choice was) and that pass: the position of its first token and how many of this request's tokens it held.
Requests without a trace record neither.
"""

from __future__ import annotations

import numpy as np

from specframe.sampling import top2_margin


class Trace:
    def __init__(self):
        self.margins: list[float] = []
        self.passes: list[tuple[int, int]] = []

    def observe(self, logits: np.ndarray, start: int, size: int, n_kept: int) -> None:
        """A pass over ``size`` tokens from position ``start`` chose ``n_kept`` generated tokens from the first rows
        of ``logits``."""
        self.margins.extend(top2_margin(logits[:n_kept]).tolist())
        self.passes.extend([(start, size)] * n_kept)
