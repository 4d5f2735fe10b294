"""draft-model: a smaller model of the same vocabulary drafts greedily (llama.cpp's draft-simple).

Its own context mirrors the committed history incrementally: each call compares only the tokens added since
the last call with what its KV memory holds, keeps the matching part (including draft tokens the target
accepted), drops the rest and evaluates just the new tokens. The prompt is evaluated in ``begin`` (counted as
prompt processing), and a prefix shared with the previous request is kept. Drafting takes the top token while its probability is at
least ``p_min``, up to ``n_max`` tokens; drafts shorter than ``n_min`` are dropped.

Difference from llama.cpp: its p_min is tested on probabilities renormalised over the top 10 candidates; here
it is the probability over the whole vocabulary, which is what p_min means (slightly stricter).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specframe.drafting import NO_DRAFT, Draft, Drafter, DrafterEnv
from specframe.errors import ModelError
from specframe.hookspecs import hookimpl
from specframe.llama import Context, Model
from specframe.params import param


@dataclass(frozen=True)
class DraftModelParams:
    model: str = param(help="catalog name or GGUF path of the draft model (same vocabulary as the target)",
                       model=True)
    n_max: int = param(16, min=1, help="longest draft")
    n_min: int = param(0, min=0, help="drafts shorter than this are dropped")
    p_min: float = param(0.75, min=0.0, max=1.0, help="stop drafting when the top token is less likely")
    n_ctx: int = param(0, min=0, help="draft context size (0: the target's)")


class DraftModelDrafter(Drafter):
    name = "draft-model"
    Params = DraftModelParams
    uses_model = True

    def __init__(self, params: DraftModelParams, env: DrafterEnv):
        super().__init__(params, env)
        path = env.resolve_model(params.model)
        self.model = Model(path, n_gpu_layers=env.n_gpu_layers)
        reason = env.target.vocab.incompatibility(self.model.vocab)
        if reason:
            self.model.close()
            raise ModelError(f"draft model {path.name} cannot draft for target {env.target.path}: {reason}; "
                             "a draft model needs the target's vocabulary")
        self.context = Context(self.model, n_ctx=params.n_ctx or env.n_ctx, n_threads=env.n_threads)
        self._kv = np.empty(self.context.n_ctx, dtype=np.int32)   # the tokens held in the draft's KV memory
        self._n_kv = 0
        self._n_synced = 0    # history tokens known to match the KV memory

    def begin(self, prompt: np.ndarray) -> None:
        """Evaluate the prompt now, with the target's prompt processing (as llama.cpp feeds its draft context),
        so drafting starts in step; a prefix shared with the last request stays in memory."""
        self._n_synced = 0
        if len(prompt) and len(prompt) <= self.context.n_ctx:
            self._sync(prompt)

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        length = len(history)
        n_max = min(n_max, self.params.n_max, self.context.n_ctx - length)
        if n_max <= 0:
            return NO_DRAFT
        logits = self._sync(history)
        top_p_min = self.params.p_min
        tokens: list[int] = []
        while True:
            token = int(np.argmax(logits))
            probability = 1.0 / float(np.exp(logits - logits[token]).sum())
            if probability < top_p_min:
                break
            tokens.append(token)
            if len(tokens) >= n_max:
                break
            position = length + len(tokens) - 1
            logits = self.context.decode([token], position)[0]
            self._kv[position] = token
            self._n_kv = position + 1
        if len(tokens) < max(1, self.params.n_min):
            return NO_DRAFT
        return Draft.of(tokens)

    def _sync(self, history: np.ndarray) -> np.ndarray:
        """Bring the KV memory in line with ``history``; return the logits after its last token."""
        length = len(history)
        if length < self._n_synced:     # a new request that skipped begin(): compare from the start
            self._n_synced = 0
        start, stop = self._n_synced, min(self._n_kv, length)
        mismatch = np.flatnonzero(self._kv[start:stop] != history[start:stop])
        common = start + int(mismatch[0]) if mismatch.size else max(start, stop)
        common = min(common, length - 1)     # the last token is always evaluated: its logits start the draft
        if common < self._n_kv:
            self.context.truncate(common)
        logits = self.context.decode(history[common:], common)[-1]
        self._kv[common:length] = history[common:]
        self._n_kv = self._n_synced = length
        return logits

    def close(self) -> None:
        self.context.close()
        self.model.close()


@hookimpl
def register_drafters(register):
    register(DraftModelDrafter)
