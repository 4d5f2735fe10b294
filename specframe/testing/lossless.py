"""Is speculative output the target's own output? The near-tie check (docs/design.md), made decisive for quantized
models.

CPU kernels round batched and one-at-a-time evaluation differently, so greedy output with speculation may leave
plain greedy output where the target's top two choices are close. On float32 models the difference is in the
last bits, and a divergence is accepted only at a near-tie (plain decoding's top-2 logit gap below ``tie``).
On quantized models it is far larger: on Qwen2.5-Coder-1.5B Q4_K_M on a 2-core AVX2 CPU, batched and
one-at-a-time logits of the same tokens differ by up to 0.75 (median 0.43), and batching alone flips choices
whose gap is 0.07, also through the KV entries that earlier batches wrote. So a divergence with a larger gap
is tested directly: the committed tokens (plain decoding's own, up to the divergence) are evaluated again in the
passes the speculative run made, laid out as they were (beside other requests' segments, in a server), without
any drafter; if that chooses the speculative token, the divergence is the arithmetic of batching. A real bug
(wrong rollback, wrong acceptance) does not reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specframe.grammar import Constraint, GrammarSpec
from specframe.llama import Segment
from specframe.results import GenerationResult

if TYPE_CHECKING:
    from specframe.engine import Engine

NEAR_TIE = 1e-2


@dataclass(frozen=True)
class LosslessVerdict:
    n_compared: int
    diverged_at: int | None          # index of the first differing generated token
    plain_margin: float | None       # plain decoding's top-2 logit gap there
    tie: float
    replayed: bool = False           # the target's own batches, replayed without speculation, choose that token

    @property
    def identical(self) -> bool:
        return self.diverged_at is None

    @property
    def near_tie(self) -> bool:
        return self.plain_margin is not None and self.plain_margin < self.tie

    @property
    def ok(self) -> bool:
        return self.identical or self.near_tie or self.replayed

    def __str__(self) -> str:
        if self.identical:
            return f"identical over {self.n_compared} tokens"
        where = (f"diverged at token {self.diverged_at} of {self.n_compared} (plain top-2 gap "
                 f"{self.plain_margin:.3g})")
        if self.near_tie:
            return f"{where}: a near-tie (< {self.tie})"
        if self.replayed:
            return f"{where}: reproduced by the run's batch shapes without its drafts (batching arithmetic)"
        return f"{where}: NOT explained by a near-tie or by batching: a real difference"


def compare(plain: GenerationResult, speculative: GenerationResult, engine: "Engine | None" = None,
            tie: float = NEAR_TIE, grammar: "GrammarSpec | None" = None) -> LosslessVerdict:
    """Compare a greedy speculative run with a plain greedy run made with ``track_margins=True``. With the
    ``engine`` that made them, a divergence that is no near-tie is replayed (see the module's doc) when the
    speculative run was traced too; under the runs' ``grammar``, the replay chooses among what it allows."""
    if plain.margins is None:
        raise ValueError("the plain run needs track_margins=True")
    n = min(len(plain.tokens), len(speculative.tokens))
    diverged = next((i for i in range(n) if plain.tokens[i] != speculative.tokens[i]), None)
    if diverged is None:
        return LosslessVerdict(n, None, None, tie)
    margin = plain.margins[diverged]
    replayed = margin >= tie and engine is not None and _replay_chooses(engine, speculative, diverged, grammar)
    return LosslessVerdict(n, diverged, margin, tie, replayed)


def _replay_chooses(engine: "Engine", run: GenerationResult, index: int, grammar: "GrammarSpec | None" = None) -> bool:
    """Evaluate the committed tokens (which equal plain decoding's up to ``index``) in the passes the speculative
    run made, each laid out as it was: this request's rejected drafts and the other sequences' segments hold
    placeholder tokens (the other sequences placeholder histories up to their positions), and this request's
    entries are cut back after each pass. True when that chooses the run's token at ``index``. A row of a pass
    depends on the tokens before it in its own sequence and on the pass's shape, not on the values of later rows
    or other sequences' tokens, so this is the run's arithmetic without its drafts: a wrong rollback or
    acceptance differs. False when the run was not traced."""
    if run.passes is None or run.prompt is None:
        return False
    sequence = np.concatenate([run.prompt, np.asarray(run.tokens[:index + 1], dtype=np.int32)])
    context = engine.context
    context.clear()
    held = [0] * context.n_seq_max           # positions each sequence holds
    chosen = 0                               # generated tokens chosen by the passes so far
    for p in run.passes:
        segments = []
        for i, (seq, start, size, n_logits) in enumerate(p.layout):
            tokens = np.zeros(size, dtype=np.int32)
            if i == p.mine:
                right = sequence[start:start + (min(p.kept, size) if p.kept else size)]
                tokens[:len(right)] = right
            else:
                _hold(context, held, seq, start)
            segments.append(Segment(seq, tokens, start, n_logits))
        logits = context.decode_batch(segments)[p.mine]
        seq, start, size, _ = p.layout[p.mine]
        if chosen + p.kept > index:
            row = logits[len(run.prompt) + index - 1 - start]
            if grammar is not None:
                constraint = Constraint(grammar, engine.vocab)
                for token in run.tokens[:index]:
                    constraint.advance(token)
                row = constraint.masked(row)
            return int(np.argmax(row)) == run.tokens[index]
        chosen += p.kept
        for other_seq, other_start, other_size, _ in p.layout:
            held[other_seq] = other_start + other_size
        held[seq] = start + (p.kept if p.kept else size)
        context.truncate(held[seq], seq)
    return False


def _hold(context, held: list[int], seq: int, n: int) -> None:
    """Make sequence ``seq`` hold exactly ``n`` positions (placeholder tokens where it held fewer)."""
    if held[seq] > n:
        context.truncate(n, seq)
    elif held[seq] < n:
        context.decode(np.zeros(n - held[seq], dtype=np.int32), held[seq], seq=seq)
    held[seq] = n
