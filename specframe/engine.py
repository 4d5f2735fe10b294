"""The decoding loop: prefill -> {draft -> verify -> accept -> roll back KV -> feed back -> emit}, over one or
several sequences at once.

The engine knows drafters only through the drafter chain (the drafter protocol). Each step is one target pass:
every generating sequence adds ``[last, d1..dk]`` with logits at every position, sequences still reading their
prompt add a chunk of it; the target's own choice at each position decides, so the output is the target's
whatever the drafts are (docs/design.md, verification and losslessness), and each sequence is verified and rolled
back on its own. ``generate`` and ``stream`` run one request as one sequence; a server (specframe.serve) steps one
sequence per slot.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import replace
from typing import Any, Generator
from typing import Sequence as Sequence_

import numpy as np

from specframe.calibration import Calibration
from specframe.chat_template import ChatTemplate
from specframe.config import Config, load_config
from specframe.drafting import NO_DRAFT, Drafter, DrafterChain, DrafterEnv
from specframe.drafting.configured import ConfiguredDrafters
from specframe.drafting.gain import PassShare, cheapest_calls
from specframe.drafting.pass_cost import PassCost, PassCostStore
from specframe.errors import ConfigError, ModelError, ParamError, SpecframeError
from specframe.grammar import GRAMMAR_KEYS, Constraint, GrammarError, GrammarSpec, sampling_grammar
from specframe.llama import Context, ContextFullError, Model, Segment, choose_tiled_matmul
from specframe.models import resolve_model
from specframe.overrides import Layer
from specframe.params import forced
from specframe.prefix import reusable_chunks
from specframe.provenance import Span
from specframe.results import Generation, GenerationResult, RequestStats
from specframe.sampling import ACCEPTANCE_MODES, SAMPLING_KEYS, TokenSampler, log_probabilities, verify
from specframe.sequence import EditorLimits, Sequence
from specframe.tool_grammar import call_grammar
from specframe.trace import Trace

__all__ = ["Engine", "Generation", "GenerationResult", "RequestStats"]

log = logging.getLogger("specframe.engine")


class Engine:
    """A target model, its context and the configured drafters, ready to answer prompts.

    ``Engine.from_config(path)`` builds one from a TOML config; ``generate`` returns a result, ``stream``
    yields text as it is accepted. Close it (or use ``with``) to free the models.
    """

    def __init__(self, config: Config, slots: int = 1):
        self.config = config
        self.slots = slots
        t = config.target
        choose_tiled_matmul(t.cpu_tiled_matmul)   # before any pass: ggml reads it at the first
        try:
            self.model = Model(resolve_model(t.model, config.directory), t)
            self.context = Context(self.model, n_ctx=t.n_ctx, n_batch=t.n_batch, n_seq_max=slots)
        except ParamError as exc:   # a setting this build cannot honour (a GPU it does not have)
            raise ConfigError(config.where().at(f"target.{exc.key}", exc.problem)) from None
        except ModelError as exc:   # found but not fetched, or a file llama.cpp refuses: the setting that named it
            raise ConfigError(config.where().at("target.model", str(exc))) from None
        self.n_threads = self.context.n_threads
        self.vocab = self.model.vocab
        try:
            config_sampler = self.sampler({})
            self._config_grammar = sampling_grammar(config.sampling, config.directory)   # its files read once
        except ParamError as exc:   # a biased token this vocabulary does not have, a grammar that does not compile
            raise ConfigError(config.where().at(f"sampling.{exc.key}", exc.problem)) from None
        self.calibration = Calibration(self.context, Calibration.identity(self.model.path, self.n_threads,
                                                                          t.n_batch, t),
                                       config.speculative.adaptive)
        env = DrafterEnv(target=self.model, n_ctx=self.context.n_ctx, n_threads=self.n_threads,
                         n_gpu_layers=t.n_gpu_layers, config_dir=config.directory,
                         resolve_model=lambda spec: resolve_model(spec, config.directory))
        self.drafters = ConfiguredDrafters(config, env, self.vocab.n_tokens, slots)
        self.drafters.cost = self.calibration.cost
        self._kept: list[np.ndarray] = [np.empty(0, dtype=np.int32)] * slots   # each sequence's tokens in KV
        # Greedy choices made in the graph where it pays (on a CPU, ggml's argmax took 1-2% longer than the host's
        # scan of the logits), from the start when the config's requests are greedy: the pass-cost table is then
        # timed as their passes run.
        backend_sampling = forced(t.backend_sampling)
        self.backend_sampling = self.model.offloaded if backend_sampling is None else backend_sampling
        for slot in range(slots):
            self._choose_greedily(slot, config_sampler, self._config_grammar is not None)

    @classmethod
    def from_config(cls, path: str | os.PathLike | None, overrides: Sequence_[Layer] = ()) -> "Engine":
        """The engine of a config file (None: none) with ``overrides`` over its values (see ``load_config``)."""
        return cls(load_config(path, overrides=overrides))

    @property
    def pass_cost(self) -> PassCost | None:
        return self.calibration.cost

    @property
    def pass_cost_store(self) -> PassCostStore:
        return self.calibration.store

    # --- requests -------------------------------------------------------------------------------------------

    def prompt_tokens(self, prompt: str, raw: bool = False, tools: list[dict] | None = None) -> np.ndarray:
        """The token ids of a user prompt: wrapped in the model's chat template unless ``raw``, with the [generation]
        system prompt and the ``tools`` offered (OpenAI's tool objects)."""
        text = prompt
        if not raw and self.model.chat_template is not None:
            text = self.chat_prompt([{"role": "user", "content": prompt}], tools)
        return self.vocab.tokenize(text, add_special=True, parse_special=True)

    @functools.cached_property
    def chat_template(self) -> ChatTemplate | None:
        """The model's own Jinja chat template, compiled once: None where the model has none, or where jinja2
        cannot compile it (llama.cpp's built-in templates then render plain conversations)."""
        source = self.model.chat_template
        if source is None:
            return None
        vocab = self.vocab
        bos, eos = (vocab.piece(t, special=True).decode(errors="replace") for t in (vocab.bos, vocab.eos))
        try:
            return ChatTemplate(source, bos, eos)
        except ModelError as exc:
            log.warning("chat prompts use llama.cpp's built-in templates, without tools: %s", exc)
            return None

    def chat_prompt(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        """The prompt text of a conversation (OpenAI chat messages as dicts) for the assistant's next answer, with
        the [generation] system prompt unless the conversation has one. ModelError: the model has no chat
        template; ParamError: ``tools`` (or tool messages) where only llama.cpp's built-in templates apply."""
        system = self.config.generation.system
        if system and not any(m["role"] in ("system", "developer") for m in messages):
            messages = [{"role": "system", "content": system}, *messages]
        template = self.chat_template
        if template is not None:
            return template.render(messages, tools)
        if tools or any(m["role"] == "tool" or m.get("tool_calls") for m in messages):
            raise ParamError("tools", "jinja2 cannot render the model's chat template, so it cannot show the model "
                                      "tools")
        return self.model.apply_chat_template([("system" if m["role"] == "developer" else m["role"], m["content"])
                                               for m in messages])

    def tool_grammar(self, functions: list[dict], required: bool, parallel: bool) -> GrammarSpec:
        """The grammar of calls to ``functions`` in the format the model's chat template writes them (a ParamError
        names ``tools`` where specframe cannot read it)."""
        template = self.chat_template
        markers = template.tool_call_markers if template is not None else None
        if markers is None:
            raise ParamError("tools", "the model's chat template has no tool-call format specframe reads (Hermes "
                                      "<tool_call> blocks)")
        ids = [self.vocab.tokenize(marker, add_special=False, parse_special=True) for marker in markers]
        if any(len(marker) != 1 for marker in ids):
            raise ParamError("tools", "the model's vocabulary spells its tool-call markers in several tokens, which "
                                      "specframe cannot constrain")
        return call_grammar(functions, int(ids[0][0]), int(ids[1][0]), required, parallel)

    def generate(self, prompt: str | Sequence_[int] | np.ndarray, **options) -> GenerationResult:
        generation = self.stream(prompt, **options)
        for _ in generation:
            pass
        assert generation.result is not None   # set when the request ends
        return generation.result

    def stream(self, prompt: str | Sequence_[int] | np.ndarray, *, raw: bool = False, track_margins: bool = False,
               **options) -> Generation:
        """Start a request. ``prompt`` is text (chat-templated unless ``raw``) or token ids (used as they are);
        ``track_margins`` records a Trace (margins and passes) in the result; other options as ``start``."""
        tokens = (self.prompt_tokens(prompt, raw) if isinstance(prompt, str)
                  else np.asarray(prompt, dtype=np.int32))
        sequence = self.start(tokens, trace=Trace() if track_margins else None, **options)
        return Generation(lambda generation: self._run(generation, sequence))

    def start(self, prompt: np.ndarray, *, slot: int = 0, reuse: bool = False, reuse_chunks: int = 0,
              max_tokens: int | None = None,
              speculative: bool = True, stop: Sequence_[str] | None = None, drafters: Sequence_[str] | None = None,
              acceptance: str | None = None, chain: DrafterChain | None = None, grammar: GrammarSpec | None = None,
              logprobs: int | None = None, limits: EditorLimits | None = None, trace: Trace | None = None,
              **sampling: Any) -> Sequence:
        """A new request on sequence ``slot``, to be stepped. With ``reuse``, the prompt's longest prefix that this
        slot's memory still holds from its last request is kept, not evaluated again, and with ``reuse_chunks`` N
        > 0 so are runs of at least N tokens it holds further on (moved into place: ``reusable``). ``drafters``
        names the configured drafters to use for this request, in their chain order (default: all), or ``chain`` gives
        drafters made elsewhere (``chain_of``); ``acceptance`` overrides [speculative] acceptance ("rejection"
        or "match") when sampling; ``grammar`` constrains the output (over any grammar of [sampling]);
        ``logprobs`` records each emitted token's log-probability and that many alternatives (None: none);
        ``limits`` bounds an editor's completion (sequence.EditorLimits); ``max_tokens`` 0 evaluates the prompt and
        generates nothing (an editor's warm-up); other
        keywords override [sampling] settings (``temperature=0.7``; None keeps the config's)."""
        if prompt.size == 0:
            raise SpecframeError("the prompt is empty")
        n_ctx = self.context.n_ctx
        if prompt.size >= n_ctx:
            raise ContextFullError(f"the prompt has {prompt.size} tokens, more than fit in n_ctx={n_ctx} "
                                   "(raise [target] n_ctx)")
        sampler = self.sampler(sampling)
        acceptance = acceptance or self.config.speculative.acceptance
        if acceptance not in ACCEPTANCE_MODES:
            raise SpecframeError(f"acceptance {acceptance!r}: expected one of {', '.join(ACCEPTANCE_MODES)}")
        if chain is None and speculative and self.config.speculative.enabled:
            chain = self.drafters.chain(drafters, slot)
        constraint = self.constraint(grammar, sampler)
        self._choose_greedily(slot, sampler, trace is not None or constraint is not None or logprobs is not None)
        cached = self._keep(slot, prompt, reuse_chunks) if reuse else 0
        self.context.truncate(cached, slot)
        self._kept[slot] = prompt[:cached]
        sequence = Sequence(seq=slot, prompt=prompt, cached=cached,
                            max_tokens=self.config.generation.max_tokens if max_tokens is None else max_tokens,
                            n_ctx=n_ctx,
                            sampler=sampler, acceptance=acceptance, chain=chain,
                            stops=list(self.config.generation.stop if stop is None else stop), trace=trace,
                            vocab=self.vocab, constraint=constraint, logprobs=logprobs, limits=limits)
        return sequence

    def constraint(self, grammar: GrammarSpec | None, sampler: TokenSampler) -> Constraint | None:
        """A request's grammar state: ``grammar``, else the one its [sampling] settings give (None: free output).
        A ParamError names the setting at fault."""
        config = self.config.sampling
        try:
            if grammar is None:
                same = all(getattr(sampler.params, key) == getattr(config, key) for key in GRAMMAR_KEYS)
                grammar = self._config_grammar if same else sampling_grammar(sampler.params, self.config.directory)
            return Constraint(grammar, self.vocab) if grammar is not None else None
        except GrammarError as exc:
            raise ParamError("grammar", str(exc)) from None

    def sampler(self, overrides: dict[str, Any]) -> TokenSampler:
        """The target's sampler for a request: the config's [sampling] with ``overrides`` (None keeps a setting);
        a ParamError names a setting that cannot be honoured."""
        overrides = {key: value for key, value in overrides.items() if value is not None}
        for key in overrides:
            if key not in SAMPLING_KEYS:
                raise ParamError(key, f"not a sampling setting; expected one of {', '.join(sorted(SAMPLING_KEYS))}")
        if GRAMMAR_KEYS & overrides.keys():    # a request's grammar replaces the config's, of whatever kind
            overrides = {key: "" for key in GRAMMAR_KEYS} | overrides
        sampler = TokenSampler(replace(self.config.sampling, **overrides), vocab=self.vocab)
        sampler.check_vocabulary(self.vocab.n_tokens)
        return sampler

    def _choose_greedily(self, slot: int, sampler: TokenSampler | None, wants_rows: bool) -> None:
        """Make the choice as the pass ends where it is the row's argmax and nothing else (a trace, a grammar,
        log-probabilities) wants the rows of logits: on the device where that pays (``backend_sampling``), else
        on the host in C, not in numpy (docs/design.md, performance method)."""
        greedy = sampler is not None and sampler.chooses_as_argmax and not wants_rows
        self.context.choose_on_device(slot, greedy and self.backend_sampling)
        self.context.choose_on_host(slot, greedy and not self.context.chooses_on_device(slot))

    def reusable(self, slot: int, prompt: np.ndarray, min_chunk: int = 0) -> int:
        """How many leading tokens of ``prompt`` sequence ``slot`` could keep from its memory: the prefix it holds,
        then (``min_chunk`` > 0) the runs of at least that many tokens it holds at later positions, which would be
        moved into place (llama-server's --cache-reuse). Never the whole prompt: its last token is fed with the
        first draft."""
        return self._reuse_plan(slot, prompt, min_chunk)[0]

    def _reuse_plan(self, slot: int, prompt: np.ndarray, min_chunk: int) -> tuple[int, list[tuple[int, int, int]]]:
        held = self._kept[slot]
        if self.context.positions(slot) != len(held):   # someone else used the context: trust nothing
            return 0, []
        return reusable_chunks(held, prompt[:-1], min_chunk if self.context.can_move else 0)

    def _keep(self, slot: int, prompt: np.ndarray, min_chunk: int) -> int:
        """Keep what ``reusable`` finds in the slot's memory, its runs moved into place; return how many."""
        kept, moves = self._reuse_plan(slot, prompt, min_chunk)
        for start, n, to in moves:
            self.context.move(slot, start, n, to)
        return kept

    def kept(self, slot: int) -> int:
        """How many tokens sequence ``slot`` holds in memory from its last request."""
        return len(self._kept[slot])

    def finish(self, sequence: Sequence, reason: str | None = None) -> GenerationResult:
        """End a request; its slot keeps its committed tokens in memory for the next request's prompt (``reuse``)
        and nothing after them: a step interrupted before its verification leaves its draft there, and an
        end-of-generation token that was drafted and accepted is no committed token."""
        kept = min(sequence.n_past, sequence.n_history)
        self.context.truncate(kept, sequence.seq)
        self._kept[sequence.seq] = sequence.history[:kept].copy()
        return sequence.finish(reason)

    def _run(self, generation: Generation, sequence: Sequence) -> Generator[Span, None, None]:
        try:   # an interrupt during the prompt ends the request like one during generation
            while sequence.stop_reason is None:
                self.step([sequence])
                yield from sequence.take_spans()
        except (KeyboardInterrupt, GeneratorExit):
            sequence.stop_reason = sequence.stop_reason or "interrupted"
        except ContextFullError:
            sequence.stop_reason = "context_full"
        finally:
            generation.result = self.finish(sequence)
            if sequence.stop_reason == "context_full":
                log.warning("the context is full (n_ctx=%d): generation stopped; raise [target] n_ctx",
                            self.context.n_ctx)
        if sequence.stop_reason != "interrupted":
            yield from sequence.take_spans()    # what the end released

    # --- one step --------------------------------------------------------------------------------------------

    def step(self, sequences: list[Sequence]) -> None:
        """One target pass over every sequence that has not stopped: drafts verified for those generating, a
        chunk of the prompt for those still reading it (within n_batch tokens in all)."""
        ctx, n_ctx = self.context, self.context.n_ctx
        for s in sequences:
            if s.stop_reason is None and not s.generating and s.prompt_pending == 0:
                s.stop_reason = s.prompt_done()
                if s.stop_reason is None:
                    self._begin(s)
        # In sequence order: llama.cpp evaluates a batch over several sequences in parts (unless the KV buffer is
        # shared), each over consecutive sequence ids with as many tokens each, so an unordered batch would cost
        # passes it need not.
        ordered = sorted(sequences, key=lambda s: s.seq)
        generating = [s for s in ordered if s.generating]
        reading = [s for s in ordered if s.stop_reason is None and not s.generating]
        cost = self.calibration.cost
        if cost is not None and cost.stale and any(s.chain is not None for s in generating):
            self._heal_pass_cost(generating)
        # The batch: each generating sequence's last token and draft, then prompt chunks. Prompts get what drafts
        # at their longest leave, and at least half the room, so that no prompt waits for long generations.
        room = ctx.n_batch - len(generating)
        n_max = self.config.speculative.n_max
        pending = sum(s.prompt_pending for s in reading)
        prompt_room = min(pending, max(room - len(generating) * n_max, room // 2))
        draft_room = room - prompt_room
        chunks = []
        for s in reading:
            n = min(s.prompt_pending, prompt_room)
            if n:
                chunks.append((s, n))
                prompt_room -= n
        # What each sequence puts in the pass, as the drafts are chosen in turn: a draft sees those before it.
        planned = [(s.seq, 1) for s in generating] + [(s.seq, n) for s, n in chunks]
        expected = float(len(generating))
        segments, drafts = [], []
        for mine, s in enumerate(generating):
            draft = NO_DRAFT
            if cost is not None:     # drafts priced, and the pass judged, at this sequence's depth
                cost.at_depth(s.n_past)
            if s.chain is not None:
                share = PassShare(tuple(planned), mine, expected - 1.0, ctx.one_batch)
                choosing = time.perf_counter()
                draft = s.chain.draft(s.history, min(s.n_max(n_max, n_ctx), draft_room), share)
                s.stats.chain_seconds += time.perf_counter() - choosing
                draft_room -= len(draft)
                planned[mine] = (s.seq, 1 + len(draft))
                expected += s.chain.expected - 1.0
            if s.n_past + 1 + len(draft) > n_ctx:
                s.stop_reason = "context_full"
                continue
            tokens = s.fed(draft.tokens)
            segments.append(Segment(s.seq, tokens, s.n_past, len(tokens)))
            drafts.append((s, draft))
        for s, n in chunks:
            segments.append(Segment(s.seq, s.prompt[s.n_past:s.n_past + n], s.n_past, 0))
        if not segments:
            return
        calls = ([list(range(len(segments)))] if cost is None or len(segments) == 1
                 else cheapest_calls(cost, [(seg.seq, len(seg.tokens)) for seg in segments], ctx.one_batch)[1])
        target_seconds = 0.0
        for call in calls:
            self._evaluate([segments[i] for i in call], [drafts[i] if i < len(drafts) else chunks[i - len(drafts)]
                                                         for i in call])
            target_seconds += ctx.pass_seconds
        for s, _ in drafts:     # each waited for every call of the step
            s.stats.target_seconds += target_seconds

    def _evaluate(self, segments: list[Segment], owners: list) -> None:
        """One llama_decode over ``segments``; each owner, (sequence, draft) for a verification or (sequence,
        tokens) for a prompt chunk, takes its rows before the next call overwrites them."""
        cost = self.calibration.cost
        pass_start = time.perf_counter()
        logits = self.context.decode_batch(segments)
        seconds = time.perf_counter() - pass_start
        if cost is not None:
            # The table times one sequence's verification pass; a pass over several is evaluated in parts (see
            # Context), and one with a prompt chunk asks no logits for it: neither is comparable, yet each breaks a
            # run of passes of one size (whose graph llama.cpp reuses, and a GPU replays). A plain request's pass
            # prices no draft and is not compared either: that would be a sixth of its step's host time on a CPU.
            cost.observe(sum(len(segment.tokens) for segment in segments), seconds,
                         comparable=len(segments) == 1 and bool(segments[0].n_logits)
                         and owners[0][0].chain is not None)
        layout = None
        for mine, (segment, (s, owned), rows) in enumerate(zip(segments, owners, logits)):
            kept = self._verify(s, owned, rows) if segment.n_logits else 0
            if not segment.n_logits:
                s.n_past += owned
            if s.trace is not None:
                layout = layout or tuple((segment.seq, segment.start_pos, len(segment.tokens), segment.n_logits)
                                         for segment in segments)
                s.trace.observe(layout, mine, rows if segment.n_logits else None, kept, seconds)

    def _verify(self, s: Sequence, draft, logits: np.ndarray) -> int:
        """Accept what the target agrees with, roll back the rest; return the tokens kept."""
        stats = s.stats
        stats.n_target_passes += 1
        n_accepted, emitted = verify(logits, draft.tokens, draft.probs, s.sampler, s.acceptance, s.history,
                                     s.constraint)
        if n_accepted < len(draft):
            self.context.truncate(s.n_past + n_accepted + 1, s.seq)
        if len(draft):
            stats.n_drafts += 1
            stats.n_drafted += len(draft)
            stats.n_accepted += n_accepted
        drafter = None
        if s.chain is not None:
            hearing = time.perf_counter()
            drafter = s.chain.drafter      # whose draft this was: accept() forgets it
            s.chain.accept(n_accepted, emitted)
            stats.chain_seconds += time.perf_counter() - hearing
        kept = s.commit(emitted, n_accepted, drafter)
        if s.logprobs is not None:
            s.logprob_entries += log_probabilities(logits[:kept], emitted[:kept], s.logprobs)
        return kept

    def _begin(self, s: Sequence) -> None:
        """The prompt is in: drafters see it, and generation starts."""
        if s.chain is not None:
            if self.calibration.cost is not None:     # a first run measures the table here
                self._heal_pass_cost([s])
            # Drafters sample (and give their distributions) only where rejection sampling will use them.
            s.chain.begin(s.history, None if s.sampler.greedy or s.acceptance == "match" else s.sampler.params,
                          s.constraint)
        s.start_generating()

    def _pass_sizes(self, n_past: int) -> list[int]:
        room = min(self.context.n_batch, self.context.n_ctx - n_past)
        return Calibration.sizes(self.config.speculative.n_max, self.slots, room)

    def _heal_pass_cost(self, generating: list[Sequence]) -> None:
        """Have the table (measured if there is none; a stale one checked, and measured again if need be) on the
        first sequence's memory; the time is counted as calibration, neither the prompt's nor decoding's."""
        first = generating[0]
        start = time.perf_counter()
        self.calibration.heal(self._pass_sizes(first.n_past), first.seq, first.n_past)
        for s in generating:
            s.stats.calibration_seconds += time.perf_counter() - start

    # --- drafters and the pass-cost table --------------------------------------------------------------------

    def chain(self, names: Sequence_[str] | None = None) -> DrafterChain | None:
        """The configured drafters (or those named) in priority order, as a request on the first slot uses them."""
        return self.drafters.chain(names)

    def chain_of(self, drafters: dict[str, Drafter], plugin: str = "(not a plugin)") -> DrafterChain:
        """A chain of drafters made outside the config (the benchmark's oracle), with this engine's settings."""
        return self.drafters.chain_of(drafters, plugin)

    def prepare_drafters(self) -> bool:
        """Make every slot's configured drafters ready now, a draft model loaded (a server, before it says it is
        ready), not on first use; whether there are any."""
        return self.drafters.prepare()

    def calibrate(self, reset: bool = False) -> PassCost:
        """Measure the pass-cost table now (``reset``: even when a stored one is still good) and store it."""
        cost = self.calibration.calibrate(self._pass_sizes(0), reset)
        self.drafters.cost = cost
        self._kept = [np.empty(0, dtype=np.int32)] * self.slots
        return cost

    def forget_drafters(self) -> None:
        """Close the drafters without saving what they learned, and forget their estimates: the next request
        starts them cold, as a new process would (the benchmark runs each request so: a repeat of the same
        prompt must not draft from the last one's answer). What their drafts were worth is kept, as a closing
        process keeps it (acceptance_memory.py)."""
        self.drafters.forget()

    def close(self) -> None:
        """Save what drafters persist, free everything, then raise the saves that failed: a run that loses what
        it learned must not end as if it succeeded."""
        failures = self.drafters.close()
        self.context.close()
        self.model.close()
        if failures:
            raise SpecframeError("; ".join(failures))

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
