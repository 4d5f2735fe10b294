"""One request in an engine: its committed tokens, its place in the target's memory, its text and statistics.

The engine moves a sequence through its phases: the prompt is evaluated (all but its last token, which goes in
with the first draft so that the first step already speculates), then each step verifies ``[last, draft...]``
and commits what the target chose. Several sequences, one per slot of the target's context, can share a step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence as Sequence_

import numpy as np

from specframe.drafting import DrafterChain, DrafterStats
from specframe.grammar import Constraint
from specframe.llama import Vocab
from specframe.provenance import Provenance, Span, merged
from specframe.results import GenerationResult, RequestStats
from specframe.sampling import TokenLogprob, TokenSampler
from specframe.text import TextStream
from specframe.trace import Trace


@dataclass(frozen=True)
class EditorLimits:
    """What an editor's completion request bounds beyond its token budget (llama-server's infill fields): lines
    after the first indented at least ``n_indent``; no new line once ``t_max_predict_ms`` of generation passed.
    0: no bound."""

    n_indent: int = 0
    t_max_predict_ms: float = 0.0

    def past_predict_time(self, generation_ms: float) -> bool:
        return 0 < self.t_max_predict_ms < generation_ms


class Sequence:
    def __init__(self, *, seq: int, prompt: np.ndarray, cached: int, max_tokens: int, n_ctx: int,
                 sampler: TokenSampler, acceptance: str, chain: DrafterChain | None, stops: Sequence_[str],
                 trace: Trace | None, vocab: Vocab, constraint: Constraint | None = None,
                 logprobs: int | None = None, limits: EditorLimits | None = None):
        self.seq = seq                   # its sequence id in the target's context
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.sampler = sampler
        self.acceptance = acceptance
        self.chain = chain
        self.trace = trace
        self.constraint = constraint       # the output's grammar state, advanced by verification
        self.logprobs = logprobs           # alternatives recorded per emitted token (None: no log-probabilities)
        self.limits = limits or EditorLimits()
        self.logprob_entries: list[TokenLogprob] = []   # one per generated token, when recorded
        self._logprobs_taken = 0
        self._vocab = vocab
        # Committed tokens, append-only; the context ends generation after n_ctx + 1 - prompt tokens at most.
        self._history = np.empty(prompt.size + min(max_tokens, n_ctx) + 1, dtype=np.int32)
        self._history[:prompt.size] = prompt
        self._view = self._history.view()    # what drafters see: read-only, so none can corrupt the others' input
        self._view.flags.writeable = False
        self.n_history = prompt.size
        self.n_past = cached             # positions of this sequence held in the target's KV memory
        self.generated: list[int] = []
        self.stats = RequestStats(n_prompt_tokens=int(prompt.size), n_cached_tokens=cached)
        self.stop_reason: str | None = None
        self.result: GenerationResult | None = None
        self._text = TextStream(stops, self.limits.n_indent)
        self._provenance = Provenance()
        self._started = time.perf_counter()
        self._generation_start: float | None = None
        self._set_up_before = 0.0         # seconds of setting up (below) before generation started
        if chain is not None:
            for entry in chain.entries:
                entry.stats = DrafterStats()

    # --- phases ----------------------------------------------------------------------------------------------

    @property
    def prompt_pending(self) -> int:
        """Prompt tokens still to evaluate before generation starts (the last one is fed with the first draft)."""
        return self.prompt.size - 1 - self.n_past

    def prompt_done(self) -> str | None:
        """The prompt is in: why the request ends before generating (no tokens asked for: an editor's warm-up), or
        None to generate."""
        return "max_tokens" if self.max_tokens == 0 else None

    @property
    def generation_ms(self) -> float:
        """Milliseconds since generation started (0 before)."""
        start = self._generation_start
        return 0.0 if start is None else 1e3 * (time.perf_counter() - start - self._setting_up() + self._set_up_before)

    @property
    def generating(self) -> bool:
        return self._generation_start is not None and self.stop_reason is None

    def start_generating(self) -> None:
        self._generation_start = time.perf_counter()
        self._set_up_before = self._setting_up()
        self.stats.prompt_seconds = self._generation_start - self._started - self._set_up_before

    def _setting_up(self) -> float:
        """Seconds so far of what is neither prompt nor decoding: measuring the pass costs, and making drafters
        ready on first use (a draft model's load)."""
        return self.stats.calibration_seconds + self._preparing()

    def _preparing(self) -> float:
        """Seconds so far of making this request's drafters ready on first use."""
        return sum(entry.stats.prepare_ms for entry in self.chain.entries) / 1e3 if self.chain is not None else 0.0

    @property
    def history(self) -> np.ndarray:
        """Every committed token, read-only."""
        return self._view[:self.n_history]

    @property
    def last(self) -> int:
        return int(self._history[self.n_history - 1])

    def fed(self, draft: np.ndarray) -> np.ndarray:
        """What a step feeds the target, the last committed token and ``draft``: laid in the history's room past
        its end (``n_max`` leaves room), where ``commit`` writes what the target chose."""
        end = self.n_history
        if len(draft):
            self._history[end:end + len(draft)] = draft
        return self._history[end - 1:end + len(draft)]

    def n_max(self, n_max: int, n_ctx: int) -> int:
        """The longest draft this sequence can take: it must not pass max_tokens or the context."""
        return min(n_max, self.max_tokens - len(self.generated) - 1, n_ctx - self.n_past - 1)

    # --- a verified step -------------------------------------------------------------------------------------

    def commit(self, emitted: list[int], n_drafted: int = 0, drafter: str | None = None) -> int:
        """Append what the target emitted after a pass over ``fed``'s tokens, stopping at an end of generation, a
        stop string or max_tokens; return how many of the tokens were kept. The first ``n_drafted`` were
        ``drafter``'s draft, which ``fed`` laid in place."""
        self.n_past += len(emitted)   # the accepted drafts and the last token; the new last token is not in KV
        kept = 0
        vocab, text, provenance = self._vocab, self._text, self._provenance
        for token in emitted:
            if vocab.is_eog(token):
                self.stop_reason = "eog"
                break
            kept += 1
            data = vocab.piece(token)
            provenance.add(text.push(data), drafter if kept <= n_drafted else None)
            if text.stopped:
                self.stop_reason = "limit" if text.underindented else "stop"
            elif len(self.generated) + kept >= self.max_tokens:
                self.stop_reason = "max_tokens"
            elif b"\n" in data and self.limits.past_predict_time(self.generation_ms):
                self.stop_reason = "limit"
            if self.stop_reason:
                break
        for i in range(n_drafted, kept):     # the accepted draft lies in place already (``fed``)
            self._history[self.n_history + i] = emitted[i]
        self.n_history += kept
        self.generated += emitted[:kept]
        if kept < n_drafted:
            self._provenance.unwritten(drafter, n_drafted - kept)
        return kept

    def take_spans(self) -> list[Span]:
        """The text accepted since the last call, as spans by drafter (provenance.py)."""
        return self._provenance.take()

    def piece(self, token: int) -> bytes:
        """A token's bytes in the output (special tokens spelt out)."""
        return self._vocab.piece(token, special=True)

    def take_logprobs(self) -> list[TokenLogprob]:
        """The log-probabilities of the tokens generated since the last call."""
        entries = self.logprob_entries[self._logprobs_taken:]
        self._logprobs_taken = len(self.logprob_entries)
        return entries

    # --- the end ---------------------------------------------------------------------------------------------

    def finish(self, reason: str | None = None) -> GenerationResult:
        """End the request (for ``reason`` when it has not stopped by itself; "error" without one: an exception
        ended it) and make its result; what text was held back (a possible start of a stop string, an incomplete
        character) comes out now unless the request was cut short."""
        if self.result is not None:
            return self.result
        self.stop_reason = self.stop_reason or reason or "error"
        stats, now = self.stats, time.perf_counter()
        if self._generation_start is None:
            stats.prompt_seconds = now - self._started
        else:
            stats.generation_seconds = now - self._generation_start - (self._setting_up() - self._set_up_before)
        stats.n_generated = len(self.generated)
        stats.preparing_seconds = self._preparing()
        if self.chain is not None:
            stats.drafters = self.chain.stats()
        provenance = self._provenance
        provenance.end(self._text.finish(), streamed=self.stop_reason not in ("interrupted", "cancelled"))
        trace, spans = self.trace, merged(provenance.spans)
        self.result = GenerationResult("".join(span.text for span in spans), self.generated, int(self.prompt.size),
                                       self.stop_reason, stats, trace.margins if trace else None, self.prompt,
                                       trace.passes if trace else None,
                                       self.logprob_entries if self.logprobs is not None else None,
                                       self._text.stop_word, spans)
        return self.result
