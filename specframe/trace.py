"""An optional observer of a request's target passes, for benchmarks and the lossless check (testing/lossless.py).

For each generated token it records the target's top-2 logit gap in the pass that chose it (how near a tie the
greedy choice was), and it records every pass that held some of the request's tokens as it was laid out, so
that the pass's arithmetic can be repeated without the drafts. Requests without a trace record neither.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specframe.llama.scans import top2_margins


@dataclass(frozen=True)
class Pass:
    """A target pass that held some of this request's tokens."""

    layout: tuple[tuple[int, int, int, int], ...]   # each segment: (sequence, first position, tokens, logits)
    mine: int                                       # the index of this request's segment
    kept: int                                       # generated tokens it chose for this request (0: prompt)
    seconds: float                                  # the llama_decode call's wall time (the whole pass's)

    @property
    def size(self) -> int:
        """Tokens in the whole pass, every sequence's."""
        return sum(tokens for _, _, tokens, _ in self.layout)

    @property
    def verifies(self) -> bool:
        """It verified this request's last token and draft (else it read part of the request's prompt)."""
        return self.layout[self.mine][3] > 0


class Trace:
    def __init__(self):
        self.margins: list[float] = []
        self.passes: list[Pass] = []

    def observe(self, layout: tuple, mine: int, logits: np.ndarray | None, kept: int, seconds: float) -> None:
        """A pass laid out as ``layout``, whose segment ``mine`` was this request's, took ``seconds`` and chose
        ``kept`` generated tokens from the first rows of ``logits``."""
        if kept and logits is not None:
            self.margins.extend(top2_margins(logits[:kept]))
        self.passes.append(Pass(layout, mine, kept, seconds))
