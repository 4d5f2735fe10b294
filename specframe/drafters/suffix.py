"""suffix: SuffixDecoding (arXiv 2411.04975; vLLM's and SGLang's ``suffix``, from Snowflake's Arctic Inference).

Two indexes are searched for the longest match of the context's last tokens (up to ``max_depth``): the request's
own tokens (prompt and output so far) and a global index of earlier responses, the most recent ``max_responses``
of them holding at most ``max_tokens`` tokens (past either bound the oldest are dropped). From each match the draft
follows the most frequent continuation while its estimated probability stays at least ``min_token_prob``, and
holds at most ``max_spec_factor`` x the match length + ``max_spec_offset`` tokens; the draft whose probabilities
sum highest (the tokens expected to stand) wins, the request's on a tie. ``specframe.suffix_index`` holds the
indexes and the drafting, and why they are hash chains in numpy rather than a tree.

The global index is shared by a server's slots, as ngram-mod's pool is. A response joins it when its slot's next
request begins, or when the engine closes: the tokens this drafter saw, and those of its last draft the target
accepted. With ``state`` and ``save_state``, the global index is written to a file when the engine closes and
read when it starts (specframe.state_files: atomic, versioned, set aside when it cannot be used), so a restarted
server drafts from the answers it gave before. Its size is bounded by ``max_tokens``.

Deliberate differences from Arctic Inference: the per-request index holds the prompt and output, as there, but a
response joins the global index when it ends, not token by token, so concurrent slots do not draft from each
other's unfinished answers (the request's own index has them); see specframe.suffix_index for the others.
"""

from __future__ import annotations

import pathlib
import struct
from collections import deque
from dataclasses import dataclass

import numpy as np

from specframe.drafting import NO_DRAFT, Draft, Drafter
from specframe.hookspecs import hookimpl
from specframe.params import param
from specframe.sampling import SamplingParams
from specframe.state_files import (
    StateError,
    check_state_param,
    check_token_ids,
    check_vocabulary,
    load_state,
    save_state,
    state_path,
)
from specframe.suffix_index import DraftRule, SuffixIndex

STATE_MAGIC = b"SFSUFFIX"
STATE_VERSION = 1
_STATE_HEADER = struct.Struct("<II")   # vocabulary size (0: unknown), number of responses


@dataclass(frozen=True)
class SuffixParams:
    max_depth: int = param(64, min=1, max=1024, help="longest match of the context's last tokens looked for")
    max_spec_factor: float = param(1.0, min=0.0, max=1024.0,
                                   help="a draft holds at most max_spec_factor x the match length + "
                                        "max_spec_offset tokens")
    max_spec_offset: float = param(0.0, min=-1024.0, max=1024.0, help="see max_spec_factor")
    min_token_prob: float = param(0.1, min=0.0, max=1.0,
                                  help="a draft stops before a token whose estimated probability (the product of "
                                       "its continuation's shares) is below this")
    max_responses: int = param(1024, min=0, max=1 << 20,
                               help="earlier responses the global index keeps (0: none, the request's own tokens "
                                    "only)")
    max_tokens: int = param(1 << 17, min=1024, max=1 << 24,
                            help="tokens the global index keeps (at most about 100 bytes each in memory, 4 in the "
                                 "state file); past either bound the oldest responses are dropped")
    state: str = param("", help="file of the global index, relative to the config: read when the engine starts")
    save_state: bool = param(False, help="write the global index to the state file when the engine closes")


class EarlierResponses:
    """The global index: the most recent responses within the bounds, shared by a server's slots."""

    def __init__(self, params: SuffixParams, n_vocab: int = 0, path: pathlib.Path | None = None):
        self.params, self.n_vocab, self.path = params, n_vocab, path
        self.index = SuffixIndex(params.max_depth)
        self.spans: deque[tuple[int, int]] = deque()   # where each response lies in the index, oldest first
        self.n_tokens = 0
        self.changed = False                           # since it was loaded or saved
        if path is not None:
            self.add(load_state(path, STATE_MAGIC, STATE_VERSION, self._parse, "suffix's global index") or [])
            self.changed = False

    @classmethod
    def of(cls, params: SuffixParams, env) -> "EarlierResponses":
        path = state_path(params.state, env)
        return cls(params, env.n_vocab if env is not None else 0, path)

    def add(self, responses: list[np.ndarray]) -> None:
        """Index ``responses`` (each as a sequence of its own), dropping the oldest beyond the bounds first."""
        if not self.params.max_responses:
            return
        responses = [r[-self.params.max_tokens:] for r in responses if len(r)][-self.params.max_responses:]
        if not responses:
            return
        incoming = sum(len(r) for r in responses)
        while self.spans and (len(self.spans) + len(responses) > self.params.max_responses
                              or self.n_tokens + incoming > self.params.max_tokens):
            first, stop = self.spans.popleft()
            self.n_tokens -= stop - first
        index = self.index
        index.forget_before(self.spans[0][0] if self.spans else index.size)
        if (index.size + incoming + len(responses) >= len(index.tokens)
                and index.base - index.start >= len(index.tokens) // 4):   # rebuild without the forgotten
            responses = self.responses() + responses                        # rather than grow
            self.index, self.spans, self.n_tokens = SuffixIndex(self.params.max_depth), deque(), 0
        first = self.index.size
        lengths = [len(response) for response in responses]
        separated = np.full(sum(lengths) + len(lengths) - 1, -1, dtype=np.int32)
        at = 0
        for response in responses:
            separated[at:at + len(response)] = response
            self.spans.append((first + at, first + at + len(response)))
            at += len(response) + 1
        self.n_tokens += sum(lengths)
        self.index.extend(separated)
        self.index.end_sequence()
        self.changed = True

    def responses(self) -> list[np.ndarray]:
        return [self.index.tokens[first:stop].copy() for first, stop in self.spans]

    def save(self) -> None:
        """Write the index to its file, when it changed since it was read or last written."""
        if self.path is None or not self.changed:
            return
        responses = self.responses()
        lengths = np.array([len(r) for r in responses], dtype="<u4")
        tokens = np.concatenate(responses).astype("<i4") if responses else np.empty(0, dtype="<i4")
        payload = _STATE_HEADER.pack(self.n_vocab, len(responses)) + lengths.tobytes() + tokens.tobytes()
        save_state(self.path, STATE_MAGIC, STATE_VERSION, payload)
        self.changed = False

    def _parse(self, payload: bytes) -> list[np.ndarray]:
        if len(payload) < _STATE_HEADER.size:
            raise StateError("truncated")
        n_vocab, n_responses = _STATE_HEADER.unpack_from(payload)
        check_vocabulary(n_vocab, self.n_vocab)
        if len(payload) < _STATE_HEADER.size + 4 * n_responses:
            raise StateError(f"truncated: {n_responses} responses announced")
        lengths = np.frombuffer(payload, dtype="<u4", count=n_responses, offset=_STATE_HEADER.size).astype(np.int64)
        tokens_at = _STATE_HEADER.size + 4 * n_responses
        if len(payload) != tokens_at + 4 * int(lengths.sum()) or (lengths == 0).any():
            raise StateError("corrupt (response lengths do not add up to the tokens stored)")
        tokens = np.frombuffer(payload, dtype="<i4", offset=tokens_at).astype(np.int32)
        check_token_ids(tokens, self.n_vocab)
        return np.split(tokens, np.cumsum(lengths)[:-1])


class SuffixDrafter(Drafter):
    """SuffixDecoding: the longest match in this request and in earlier responses, drafted along its most frequent
    continuation, as long as the match and the continuation's probability warrant."""

    name = "suffix"
    Params = SuffixParams

    def __init__(self, params: SuffixParams, env, earlier: EarlierResponses | None = None):
        """``earlier``: the global index shared with the other slots' drafters (by default one of its own)."""
        super().__init__(params, env)
        self.earlier = earlier or EarlierResponses.of(params, env)
        self.request = SuffixIndex(params.max_depth)   # this request's tokens
        self._rule = DraftRule(params.max_spec_factor, params.max_spec_offset, params.min_token_prob)
        self._response_from = 0      # where the request's response begins in its history
        self._drafted: list[int] = []
        self._drafted_at = -1        # the history's length when the last draft was made
        self._accepted: list[int] = []

    @classmethod
    def for_slots(cls, params: SuffixParams, env, n_slots: int) -> list[Drafter]:
        """One global index for every slot."""
        earlier = EarlierResponses.of(params, env)
        return [cls(params, env, earlier) for _ in range(n_slots)]

    @classmethod
    def check_params(cls, params: SuffixParams, config_dir: pathlib.Path) -> None:
        check_state_param(config_dir, params.state, params.save_state, "state", "save_state")

    def begin(self, prompt: np.ndarray, sampling: SamplingParams | None = None) -> None:
        super().begin(prompt, sampling)
        self._end_request()
        self._response_from = len(prompt)

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        seen = self.request.indexed
        if len(history) < seen:                  # a new request without begin(): its prompt is what it starts with
            self._end_request()
            self._response_from, seen = len(history), 0
        self.request.extend(history[seen:])
        self._drafted, self._drafted_at, self._accepted = [], len(history), []
        if not len(history):
            return NO_DRAFT
        context = self.request.context()
        own = self.request.best_draft(context, n_max, self._rule, exclude=self.request.size - 1)
        earlier = (self.earlier.index.best_draft(context, n_max, self._rule, to_beat=own.score if own else 0.0)
                   if self.earlier.spans else None)
        best = earlier or own
        if best is None:
            return NO_DRAFT
        self._drafted = best.tokens
        return Draft.of(best.tokens)

    def accept(self, n_accepted: int) -> None:
        self._accepted = self._drafted[:n_accepted]

    def _end_request(self) -> None:
        """The request's response (with its last draft's accepted tokens) joins the global index."""
        first = self.request.start + self._response_from
        response = self.request.tokens[first:self.request.size]
        if self._drafted_at == self.request.indexed:
            response = np.concatenate((response, np.asarray(self._accepted, dtype=np.int32)))
        self.earlier.add([response.copy()])
        self.request.reset()
        self._drafted, self._drafted_at, self._accepted = [], -1, []

    def describe(self) -> str | None:
        return f"global index: {len(self.earlier.spans)} earlier responses, {self.earlier.n_tokens} tokens"

    def save(self) -> None:
        self._end_request()
        if self.params.save_state:
            self.earlier.save()


@hookimpl
def register_drafters(register):
    register(SuffixDrafter)
