"""What a request yields: its text and tokens, why it stopped, and its statistics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Generator, Iterator

import numpy as np

from specframe.provenance import Span


@dataclass
class RequestStats:
    n_prompt_tokens: int = 0
    n_cached_tokens: int = 0        # leading prompt tokens whose KV entries an earlier request left (not evaluated)
    n_generated: int = 0
    n_drafts: int = 0               # verify steps that carried a draft
    n_drafted: int = 0
    n_accepted: int = 0
    n_target_passes: int = 0        # target forward passes after the prompt
    prompt_seconds: float = 0.0      # evaluating the prompt (the target's, and a draft model's catching up)
    generation_seconds: float = 0.0  # decoding
    calibration_seconds: float = 0.0  # measuring or checking the pass-cost table (a first run's, or a stale one's),
    preparing_seconds: float = 0.0    # and making drafters ready on first use (a draft model's load): counted apart
    chain_seconds: float = 0.0       # of decoding, the drafter chain's: asking its drafters, choosing, hearing outcomes
    target_seconds: float = 0.0      # of decoding, the target's passes: inside llama_decode, the results waited for
    drafters: dict = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Accepted tokens per draft that went to the target."""
        return self.n_accepted / self.n_drafts if self.n_drafts else 0.0

    @property
    def tokens_per_pass(self) -> float:
        return self.n_generated / self.n_target_passes if self.n_target_passes else 0.0

    @property
    def host_ms_per_pass(self) -> float:
        """Milliseconds of decoding per target pass spent outside the target's passes: drafting, choosing,
        verifying, committing, the text. On a GPU, whose pass takes a few milliseconds, this decides the speed."""
        host = self.generation_seconds - self.target_seconds
        return 1e3 * host / self.n_target_passes if self.n_target_passes else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.n_generated / self.generation_seconds if self.generation_seconds > 0 else 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        evaluated = self.n_prompt_tokens - self.n_cached_tokens
        return evaluated / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        for name in ("acceptance_rate", "mean_accepted_length", "tokens_per_pass", "host_ms_per_pass",
                     "tokens_per_second", "prompt_tokens_per_second"):
            data[name] = getattr(self, name)
        return data


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    n_prompt_tokens: int
    stop_reason: str   # "eog", "max_tokens", "stop", "context_full", "interrupted", "cancelled" or "error" (an
                       # exception ended it)
    stats: RequestStats
    # With a Trace (track_margins): the top-2 logit gap of the target at each generated token, in the pass that
    # chose it, and every pass that held this request's tokens (trace.Pass).
    margins: list[float] | None = None
    prompt: np.ndarray | None = None   # the prompt's token ids
    passes: list | None = None
    logprobs: list | None = None       # sampling.TokenLogprob of each generated token, when they were asked for
    stop_word: str = ""                # the stop string that ended it (stop_reason "stop")
    spans: list[Span] = field(default_factory=list)   # the text by the drafter that wrote it (provenance.py)

    def as_dict(self) -> dict:
        data = {"text": self.text, "tokens": self.tokens, "n_prompt_tokens": self.n_prompt_tokens,
                "stop_reason": self.stop_reason, "stats": self.stats.as_dict()}
        if self.margins is not None:
            data["margins"] = self.margins
        return data


class Generation:
    """A request in progress: iterating yields text as it is accepted, ``spans()`` the same text as spans by the
    drafter that wrote it; ``result`` is set once it ends."""

    def __init__(self, run: Callable[["Generation"], Generator[Span, None, None]]):
        self.result: GenerationResult | None = None
        self._steps = run(self)

    def __iter__(self) -> Iterator[str]:
        return (span.text for span in self._steps if span.text)

    def spans(self) -> Iterator[Span]:
        return self._steps

    def interrupt(self) -> GenerationResult:
        """End the request now (e.g. on Ctrl-C); the result holds the text accepted so far."""
        self._steps.close()
        assert self.result is not None, "interrupted before it started"
        return self.result
