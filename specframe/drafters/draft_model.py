"""draft-model: a smaller model drafts (llama.cpp's draft-simple), directly or through token mapping.

Its own context mirrors the committed history incrementally: each call compares only the tokens added since
the last call with what its KV memory holds, keeps the matching part (including draft tokens the target
accepted), drops the rest and evaluates just the new tokens. The prompt is evaluated in ``begin`` (counted as
prompt processing; the chain defers it where it cannot pay, see drafting/catch_up.py), and a prefix shared with the
previous request is kept, with the runs of it held at other positions moved into place (an editor's next request,
whose window of the file moved by a few lines). A server's slots share one draft
model and one context, a sequence per slot, each slot's drafter mirroring its own sequence.

Drafting takes the top token while its probability is at least ``p_min``, up to ``n_max`` tokens; drafts
shorter than ``n_min`` are dropped. When the engine accepts by rejection sampling (``begin`` is given the sampling
settings), the draft samples its tokens with the target's settings instead (logit bias, penalties over the same
history, top-k / top-p / min-p, temperature) and returns their distributions.

``head = N`` drafts with a copy of the model whose output layer holds only the vocabulary's first N tokens
(specframe/pruned_head.py): a small model reads its output matrix for every token it drafts, and cut it drafts
faster. The copy is fed input embeddings, drafts token ids for a target of the same vocabulary only, and its p_min
is tested over the tokens it can draft.

Vocabularies: llama.cpp's compatibility check decides. A compatible draft drafts token ids directly; any other
drafts through text (drafting/token_mapping.py), with the ``replace`` table turning target text into the draft's
dialect.

Difference from llama.cpp: its p_min is tested on probabilities renormalised over the top 10 candidates; here
it is the probability over the whole vocabulary, which is what p_min means (slightly stricter).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from specframe.drafting import NO_DRAFT, Draft, Drafter, DrafterEnv
from specframe.drafting.token_mapping import TokenMapping
from specframe.errors import ModelError, ParamError
from specframe.hookspecs import hookimpl
from specframe.llama import Context, Model, Vocab
from specframe.llama.quantize import QUANT_TYPES
from specframe.model_settings import ModelSettings
from specframe.params import INT32_MAX, MAX_DRAFT_TOKENS, param
from specframe.prefix import common_prefix, reusable_chunks
from specframe.pruned_head import InputEmbeddings, inputs_table, pruned_head
from specframe.requantized import requantized
from specframe.sampling import SamplingParams, TokenSampler

DRAFT_STREAM = 1   # the draft's own random stream (the target samples from stream 0)
MOVED_RUN_MIN = 64   # a new prompt's runs of at least this many tokens held at other positions are moved, not evaluated


@dataclass(frozen=True)
class DraftModelParams(ModelSettings):
    """Its own keys, then the model settings (threads, GPU, KV cache...), which default to the target's."""

    model: str = param(help="catalog name, Hugging Face reference (hf:OWNER/REPO[:QUANT]) or GGUF path of the "
                            "draft model", model=True)
    n_max: int = param(16, min=1, max=MAX_DRAFT_TOKENS, help="longest draft")
    n_min: int = param(0, min=0, max=MAX_DRAFT_TOKENS, help="drafts shorter than this are dropped")
    p_min: float = param(0.75, min=0.0, max=1.0, help="stop drafting when the top token is less likely")
    n_ctx: int = param(0, min=0, max=INT32_MAX,
                       help="draft context size (0: the target's; twice that with token mapping)")
    token_mapping: str = param("auto", choices=("auto", "always", "never"),
                               help="draft through text: auto = when the vocabularies are incompatible")
    replace: dict = param({}, help="TARGET = DRAFT text replacements for token mapping, e.g. chat markers")
    quantize: str = param("none", choices=("none", *QUANT_TYPES),
                          help="re-quantize the draft into this type first (made once, cached): on x86 CPUs q4_0 "
                               "and iq4_nl run fastest; the output stays the target's")
    head: int = param(0, min=0, max=INT32_MAX,
                      help="draft with a copy whose output layer holds only the vocabulary's first N tokens (made "
                           "once, cached; 0: the whole vocabulary): faster drafting, tokens past N never drafted. "
                           "Needs the target's vocabulary")


class _DraftModel:
    """The draft model and its context, one sequence per slot: what the drafters of a server's slots share. Loaded
    on first use (``load``): where the chain never asks it (a CPU on which its drafts cannot pay), a run does
    without its 0.5-2 s of loading. Only ``token_mapping = "never"`` loads it at once, to refuse an incompatible
    vocabulary before the first request."""

    def __init__(self, params: DraftModelParams, env: DrafterEnv, n_slots: int):
        self.params, self.env, self.n_slots = params, env, n_slots
        if params.head and params.token_mapping == "always":
            raise ParamError("head", "a cut output layer drafts the target's token ids; token_mapping = \"always\" "
                                     "drafts through text (expected head = 0, or token_mapping = \"auto\")")
        self.path = env.resolve_model(params.model)
        if params.quantize != "none":
            self.path = requantized(self.path, params.quantize)
        self.settings = dataclasses.replace(params, threads=params.threads or env.n_threads)   # 0: the target's
        Model.check(self.path, self.settings)
        self.source = self.path        # the model whose vocabulary it drafts in
        self.inputs: InputEmbeddings | None = None    # a cut copy's input embeddings
        if params.head:
            self.path = pruned_head(self.path, params.head)
        self.model: Model | None = None
        self.context: Context | None = None
        self.mapped = params.token_mapping == "always"
        self._notes = [f"re-quantized to {params.quantize}"] if params.quantize != "none" else []
        if params.head:
            self._notes.append(f"output cut to the first {params.head} tokens")
        if params.token_mapping == "never":
            self.load()

    def load(self) -> tuple[Model, Context]:
        """The model and its context, loaded now if they were not yet."""
        if self.model is not None and self.context is not None:
            return self.model, self.context
        params, env = self.params, self.env
        if params.head:
            self._check_cut_vocabulary()
            self.inputs = InputEmbeddings(inputs_table(self.path))
        model = Model(self.path, self.settings)
        reason = None if params.head else env.target.vocab.incompatibility(model.vocab)
        if reason and params.token_mapping == "never":
            model.close()
            raise ModelError(f"draft model {self.path.name} cannot draft token ids for target {env.target.path}: "
                             f"{reason}; set token_mapping = \"auto\" to draft through text")
        self.mapped = self.mapped or bool(reason)
        if self.mapped:
            self._notes.append(f"token mapping: {reason or 'as configured'}")
        n_ctx = params.n_ctx or (2 * env.n_ctx if self.mapped else env.n_ctx)
        try:
            self.context = Context(model, n_ctx=n_ctx, n_seq_max=self.n_slots)
        except BaseException:
            model.close()
            raise
        self.model = model
        return model, self.context

    def _check_cut_vocabulary(self) -> None:
        """A cut copy has no tokenizer: its source's must be the target's."""
        source = Model(self.source, self.settings, vocab_only=True)
        try:
            reason = self.env.target.vocab.incompatibility(source.vocab)
        finally:
            source.close()
        if reason:
            raise ModelError(f"draft model {self.source.name} cannot draft with a cut output layer (head = "
                             f"{self.params.head}) for target {self.env.target.path}: {reason}; set head = 0 to "
                             "draft through text")

    @property
    def note(self) -> str | None:
        return "; ".join(self._notes) or None

    def close(self) -> None:
        if self.context is not None:
            self.context.close()
        if self.model is not None:
            self.model.close()


class DraftModelDrafter(Drafter):
    name = "draft-model"
    Params = DraftModelParams
    uses_model = True

    def __init__(self, params: DraftModelParams, env: DrafterEnv, shared: _DraftModel | None = None, seq: int = 0):
        """``shared``: the model and context of the slots' drafters, of which this one mirrors sequence ``seq``
        (by default a model and context of its own)."""
        super().__init__(params, env)
        self._shared = shared or _DraftModel(params, env, 1)
        self.seq = seq
        self._ready = False   # prepared: the model and context below are set
        self.model: Model
        self.context: Context
        self._vocab: Vocab     # the vocabulary its drafts are in (prepare): a cut copy has none of its own
        self.mapping: TokenMapping | None = None
        self._whole = np.empty(0, dtype=np.float32)   # a cut copy's logits over the whole vocabulary (prepare)
        self._n_target_vocab = env.n_vocab
        self._kv = np.empty(0, dtype=np.int32)   # the tokens held in the draft's KV memory
        self._n_kv = 0
        self._n_synced = 0    # leading tokens of the last synced sequence known to match the KV memory
        self._sampler: TokenSampler | None = None

    @classmethod
    def for_slots(cls, params: DraftModelParams, env: DrafterEnv, n_slots: int) -> list[Drafter]:
        """One model and one context for every slot, a sequence each."""
        shared = _DraftModel(params, env, n_slots)
        return [cls(params, env, shared, seq) for seq in range(n_slots)]

    def prepare(self) -> None:
        """Load the model (once for every slot) and make this slot's mirror of its memory."""
        if self._ready:
            return
        self.model, self.context = self._shared.load()
        self._vocab = self.env.target.vocab if self._shared.inputs is not None else self.model.vocab
        if self._shared.mapped:
            self.mapping = TokenMapping(self.env.target.vocab, self.model.vocab, self.params.replace)
        self._kv = np.empty(self.context.n_ctx, dtype=np.int32)
        if self._shared.inputs is not None:       # a cut copy's logits, sampled over the whole vocabulary
            self._whole = np.full(self._n_target_vocab, -np.inf, dtype=np.float32)
        self._ready = True

    def begin(self, prompt: np.ndarray, sampling: SamplingParams | None = None) -> None:
        """Evaluate the prompt now, with the target's prompt processing (as llama.cpp feeds its draft context),
        so drafting starts in step; a prefix shared with the last request stays in memory."""
        self.prepare()
        self._n_synced = 0
        self._sampler = TokenSampler(sampling, DRAFT_STREAM) if sampling and not self.mapping else None
        if self.mapping is not None:
            self.mapping.reset()
        tokens, _ = self._view(prompt)
        if 0 < len(tokens) <= self.context.n_ctx:
            self._sync(tokens, 0)

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        self.prepare()
        tokens, unchanged = self._view(history)
        length = len(tokens)
        wanted = min(n_max, self.params.n_max) + (self.mapping is not None)   # mapping drops an unsure last token
        wanted = min(wanted, self.context.n_ctx - length)
        if wanted <= 0:
            return NO_DRAFT
        logits = self._sync(tokens, unchanged)
        drafted: list[int] | np.ndarray
        drafted, probs, ended = self._generate(logits, tokens, wanted)
        if self.mapping is not None:
            drafted = self.mapping.back(drafted, history, min(n_max, self.params.n_max), complete=ended)
        if len(drafted) < max(1, self.params.n_min):
            return NO_DRAFT
        return Draft.of(drafted, probs)

    def describe(self) -> str | None:
        """Re-quantization and token mapping, when used."""
        return self._shared.note

    def _view(self, history: np.ndarray) -> tuple[np.ndarray, int]:
        """The history in the draft's tokens, and how many leading ones are as the last call saw them."""
        if self.mapping is not None:
            return self.mapping.update(history)
        return history, self._n_synced if len(history) >= self._n_synced else 0

    def _generate(self, logits: np.ndarray, history: np.ndarray, n: int) -> tuple[list[int], np.ndarray | None,
                                                                                  bool]:
        """Draft up to ``n`` tokens from ``logits``, which follow ``history``; return them, their distributions
        when sampled (after the target's bias and penalties, over the history and the tokens drafted before
        each), and whether the draft ended the turn."""
        sampler = self._sampler
        position = len(history)
        tokens: list[int] = []
        probs = np.zeros((n, self._n_target_vocab), dtype=np.float32) if sampler else None
        ended = False
        while len(tokens) < n:
            logits = logits[:self._n_target_vocab]        # a draft vocabulary may be a little larger
            if sampler is not None and len(logits) < self._n_target_vocab:   # a cut one: the rest are never drawn
                self._whole[:len(logits)] = logits
                logits = self._whole
            if sampler is not None:
                ids, p = sampler.candidates(sampler.adjusted(logits, history, tokens))
                top = float(p[0])
                token = sampler.draw(ids, p)
            else:
                token = int(np.argmax(logits))
                top = 1.0 / float(np.exp(logits - logits[token]).sum())
            if top < self.params.p_min:
                break
            if probs is not None:
                probs[len(tokens), ids] = p
            tokens.append(token)
            if self._vocab.is_eog(token):
                ended = True
                break
            if len(tokens) < n:
                position_of_token = position + len(tokens) - 1
                logits = self._decode(np.array([token], dtype=np.int32), position_of_token)[0]
                self._kv[position_of_token] = token
                self._n_kv = position_of_token + 1
        return tokens, (probs[:len(tokens)] if probs is not None else None), ended

    def _sync(self, tokens: np.ndarray, unchanged: int) -> np.ndarray:
        """Bring the KV memory in line with ``tokens``, whose first ``unchanged`` are as last synced; return
        the logits after the last token."""
        length = len(tokens)
        start, stop = min(unchanged, self._n_synced), min(self._n_kv, length)
        common = start + common_prefix(self._kv[start:stop], tokens[start:stop])
        if common < length - 1 and self.context.can_move:   # a new prompt: keep what it shares further on too
            common, moves = reusable_chunks(self._kv[:self._n_kv], tokens[:length - 1], MOVED_RUN_MIN)
            for source, n, to in moves:
                self.context.move(self.seq, source, n, to)
            self._kv[:common] = tokens[:common]
        common = min(common, length - 1)     # the last token is always evaluated: its logits start the draft
        if common < self._n_kv:
            self.context.truncate(common, self.seq)
        logits = self._decode(tokens[common:], common)[-1]
        self._kv[common:length] = tokens[common:]
        self._n_kv = self._n_synced = length
        return logits

    def _decode(self, tokens: np.ndarray, position: int) -> np.ndarray:
        """Evaluate ``tokens`` from ``position`` on: a cut copy is fed their input embeddings."""
        inputs = self._shared.inputs
        return self.context.decode(inputs(tokens) if inputs is not None else tokens, position, seq=self.seq)

    def close(self) -> None:
        self._shared.close()      # closing twice (another slot's drafter did) does nothing


@hookimpl
def register_drafters(register):
    register(DraftModelDrafter)
