"""The decoding loop: prefill -> {draft -> verify -> accept -> roll back KV -> feed back -> emit}.

The engine knows drafters only through the drafter chain (the drafter protocol). Each step decodes
``[last, d1..dk]`` in one target batch with logits at every position; the target's own choice at each position
decides, so the output is the target's whatever the drafts are (DESIGN.md §3).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pathlib
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterator, Sequence

import numpy as np

from specframe.config import Config, load_config
from specframe.drafting import NO_DRAFT, ChainEntry, Drafter, DrafterChain, DrafterEnv, DrafterStats
from specframe.drafting.pass_cost import PassCost, PassCostStore
from specframe.errors import ParamError, SpecframeError
from specframe.llama import Context, ContextFullError, Model, default_threads, library_prefix
from specframe.models import resolve_model
from specframe.paths import cache_dir
from specframe.sampling import ACCEPTANCE_MODES, TokenSampler, top2_margin, verify
from specframe.text import TextStream

log = logging.getLogger("specframe.engine")


@dataclass
class RequestStats:
    n_prompt_tokens: int = 0
    n_generated: int = 0
    n_drafts: int = 0               # verify steps that carried a draft
    n_drafted: int = 0
    n_accepted: int = 0
    n_target_passes: int = 0        # target forward passes after the prompt
    prompt_seconds: float = 0.0
    generation_seconds: float = 0.0  # decoding; a re-measurement of a stale pass-cost table is counted apart
    calibration_seconds: float = 0.0
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
    def tokens_per_second(self) -> float:
        return self.n_generated / self.generation_seconds if self.generation_seconds > 0 else 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.n_prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        for name in ("acceptance_rate", "mean_accepted_length", "tokens_per_pass", "tokens_per_second",
                     "prompt_tokens_per_second"):
            data[name] = getattr(self, name)
        return data


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    n_prompt_tokens: int
    stop_reason: str   # "eog", "max_tokens", "stop", "context_full" or "interrupted"
    stats: RequestStats
    # With track_margins: the top-2 logit gap of the target at each generated token, in the batch that chose it.
    margins: list[float] | None = None
    prompt: np.ndarray | None = None   # the prompt's token ids
    # For each generated token, the target pass that chose it: (position of its first token, number of tokens).
    passes: list[tuple[int, int]] | None = None

    def as_dict(self) -> dict:
        data = {"text": self.text, "tokens": self.tokens, "n_prompt_tokens": self.n_prompt_tokens,
                "stop_reason": self.stop_reason, "stats": self.stats.as_dict()}
        if self.margins is not None:
            data["margins"] = self.margins
        return data


class Generation:
    """A request in progress: iterating yields text as it is accepted; ``result`` is set once it ends."""

    def __init__(self, run: Callable[["Generation"], Iterator[str]]):
        self.result: GenerationResult | None = None
        self._steps = run(self)

    def __iter__(self) -> Iterator[str]:
        return self._steps

    def interrupt(self) -> GenerationResult:
        """End the request now (e.g. on Ctrl-C); the result holds the text accepted so far."""
        self._steps.close()
        return self.result


class Engine:
    """A target model, its context and a drafter chain, ready to answer prompts.

    ``Engine.from_config(path)`` builds one from a TOML config; ``generate`` returns a result, ``stream``
    yields text as it is accepted. Close it (or use ``with``) to free the models.
    """

    def __init__(self, config: Config):
        self.config = config
        self.plugins = config.plugins
        t = config.target
        self.n_threads = t.threads or default_threads()
        self.model = Model(resolve_model(t.model, config.directory), n_gpu_layers=t.n_gpu_layers)
        self.context = Context(self.model, n_ctx=t.n_ctx, n_batch=t.n_batch, n_threads=self.n_threads)
        self.vocab = self.model.vocab
        self._entries: dict[str, ChainEntry | None] = {}   # configured drafters created so far, by name
        # The target's measured cost per pass size belongs to the model, the build, the machine and the threads:
        # it is kept across requests and runs (pass_cost.py says how it is kept trustworthy).
        self.pass_cost_store = PassCostStore(cache_dir() / "pass-cost", self._cost_key())
        self.pass_cost = PassCost() if config.speculative.adaptive else None

    def _cost_key(self) -> str:
        t, path = self.config.target, pathlib.Path(self.model.path)
        stat = path.stat()
        identity = (f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{self.n_threads}:{t.n_batch}:"
                    f"{t.n_gpu_layers}:{library_prefix()}")
        return hashlib.sha256(identity.encode()).hexdigest()[:16]

    @classmethod
    def from_config(cls, path: str | os.PathLike) -> "Engine":
        return cls(load_config(path))

    # --- requests -------------------------------------------------------------------------------------------

    def prompt_tokens(self, prompt: str, raw: bool = False) -> np.ndarray:
        """The token ids of a user prompt: wrapped in the model's chat template unless ``raw``."""
        text = prompt
        if not raw and self.model.chat_template is not None:
            messages = ([("system", self.config.generation.system)] if self.config.generation.system else [])
            text = self.model.apply_chat_template(messages + [("user", prompt)])
        return self.vocab.tokenize(text, add_special=True, parse_special=True)

    def generate(self, prompt: str | Sequence[int], **options) -> GenerationResult:
        generation = self.stream(prompt, **options)
        for _ in generation:
            pass
        return generation.result

    def stream(self, prompt: str | Sequence[int], *, max_tokens: int | None = None,
               temperature: float | None = None, seed: int | None = None, speculative: bool = True,
               raw: bool = False, stop: Sequence[str] | None = None, track_margins: bool = False,
               drafters: Sequence[str] | None = None, acceptance: str | None = None,
               chain: DrafterChain | None = None) -> Generation:
        """Start a request. ``prompt`` is text (chat-templated unless ``raw``) or token ids (used as they are).
        ``drafters`` names the configured drafters to use for this request, in their chain order (default: all),
        or ``chain`` gives drafters made elsewhere (``chain_of``); ``acceptance`` overrides [speculative]
        acceptance ("rejection" or "match") when sampling."""
        gen_cfg = self.config.generation
        sampling = self.config.sampling
        if temperature is not None:
            sampling = replace(sampling, temperature=temperature)
        if seed is not None:
            sampling = replace(sampling, seed=seed)
        tokens = (self.prompt_tokens(prompt, raw) if isinstance(prompt, str)
                  else np.asarray(prompt, dtype=np.int32))
        if tokens.size == 0:
            raise SpecframeError("the prompt is empty")
        acceptance = acceptance or self.config.speculative.acceptance
        if acceptance not in ACCEPTANCE_MODES:
            raise SpecframeError(f"acceptance {acceptance!r}: expected one of {', '.join(ACCEPTANCE_MODES)}")
        if chain is None and speculative and self.config.speculative.enabled:
            chain = self.chain(drafters)
        stops = list(gen_cfg.stop if stop is None else stop)
        return Generation(lambda generation: self._run(generation, tokens, max_tokens or gen_cfg.max_tokens,
                                                       TokenSampler(sampling), acceptance, chain, stops,
                                                       track_margins))

    def chain(self, names: Sequence[str] | None = None) -> DrafterChain | None:
        """The configured drafters (or those named) in priority order. Each is created on first use and kept:
        a plain run never loads a draft model, and a request for one drafter creates only that one."""
        if names is not None:
            unknown = set(names) - {d.name for d in self.config.drafters}
            if unknown:
                raise SpecframeError(f"no drafter named {', '.join(sorted(unknown))} in {self.config.path}")
        types = self.plugins.drafter_types()
        entries = [self._entry(d, types) for d in self.config.ordered_drafters(types)
                   if names is None or d.name in names]
        entries = [e for e in entries if e is not None]
        return self._new_chain(entries) if entries else None

    def _entry(self, drafter_cfg, types) -> ChainEntry | None:
        """The chain entry of a configured drafter, created once; None when a third-party drafter cannot start."""
        if drafter_cfg.name not in self._entries:
            kind = types[drafter_cfg.type]
            env = DrafterEnv(target=self.model, n_ctx=self.context.n_ctx, n_threads=self.n_threads,
                             n_gpu_layers=self.config.target.n_gpu_layers, config_dir=self.config.directory,
                             resolve_model=lambda spec: resolve_model(spec, self.config.directory))
            try:
                drafter = kind.cls(drafter_cfg.params, env)
                self._entries[drafter_cfg.name] = ChainEntry(drafter_cfg.name, drafter, kind.plugin, DrafterStats())
            except ParamError as exc:
                raise self.config.drafter_error(drafter_cfg, exc) from None
            except SpecframeError:
                raise
            except (Exception, SystemExit) as exc:  # a third-party drafter that cannot start is reported, not fatal
                log.warning("drafter '%s' (plugin %s) could not be created and is left out: %s: %s",
                            drafter_cfg.name, kind.plugin, type(exc).__name__, exc)
                self._entries[drafter_cfg.name] = None
        return self._entries[drafter_cfg.name]

    def chain_of(self, drafters: dict[str, Drafter], plugin: str = "(not a plugin)") -> DrafterChain:
        """A chain of drafters made outside the config (the benchmark's oracle), with this engine's settings."""
        return self._new_chain([ChainEntry(label, drafter, plugin, DrafterStats())
                                for label, drafter in drafters.items()])

    def _new_chain(self, entries: list[ChainEntry]) -> DrafterChain:
        return DrafterChain(entries, self.vocab.n_tokens, self.config.speculative.n_min, self.pass_cost,
                            self.config.speculative.arbitration)

    def _run(self, generation: Generation, prompt: np.ndarray, max_tokens: int, sampler: TokenSampler,
             acceptance: str, chain: DrafterChain | None, stops: list[str], track_margins: bool) -> Iterator[str]:
        ctx, vocab = self.context, self.vocab
        n_ctx = ctx.n_ctx
        if prompt.size >= n_ctx:
            raise ContextFullError(f"the prompt has {prompt.size} tokens, more than fit in n_ctx={n_ctx} "
                                   "(raise [target] n_ctx)")
        stats = RequestStats(n_prompt_tokens=int(prompt.size))
        # Committed tokens, append-only; the context ends generation after n_ctx + 1 - prompt tokens at most.
        history = np.empty(prompt.size + min(max_tokens, n_ctx) + 1, dtype=np.int32)
        history[:prompt.size] = prompt
        drafters_view = history.view()      # what drafters see: read-only, so none can corrupt the others' input
        drafters_view.flags.writeable = False
        n_history = prompt.size
        generated: list[int] = []
        margins: list[float] | None = [] if track_margins else None
        passes: list[tuple[int, int]] = []
        text = TextStream(stops)
        pieces: list[str] = []
        stop_reason = None
        n_max_config = self.config.speculative.n_max
        if chain is not None:
            for entry in chain.entries:
                entry.stats = DrafterStats()

        prompt_start, generation_start = time.perf_counter(), None
        try:   # an interrupt during the prompt ends the request like one during generation
            ctx.clear()
            if prompt.size > 1:  # the last prompt token is fed with the first draft, so the first step speculates
                ctx.decode(prompt[:-1], 0)
            n_past = prompt.size - 1
            if chain is not None:
                if self.pass_cost is not None:
                    self._ensure_pass_cost(n_past, min(n_max_config + 1, n_ctx - n_past))
                # Drafters sample (and give their distributions) only where rejection sampling will use them.
                chain.begin(drafters_view[:prompt.size],
                            None if sampler.greedy or acceptance == "match" else sampler.params)
            generation_start = time.perf_counter()
            stats.prompt_seconds = generation_start - prompt_start
            while stop_reason is None:
                if chain is not None and self.pass_cost is not None and self.pass_cost.stale:
                    calibration_start = time.perf_counter()
                    self._ensure_pass_cost(n_past, min(n_max_config + 1, n_ctx - n_past))
                    stats.calibration_seconds += time.perf_counter() - calibration_start
                last = history[n_history - 1]
                n_max = min(n_max_config, max_tokens - len(generated) - 1, n_ctx - n_past - 1)
                draft = chain.draft(drafters_view[:n_history], n_max) if chain is not None else NO_DRAFT
                if n_past + 1 + len(draft) > n_ctx:
                    stop_reason = "context_full"
                    break
                batch = np.concatenate(([last], draft.tokens)).astype(np.int32, copy=False)
                pass_start = time.perf_counter()
                logits = ctx.decode(batch, n_past, all_logits=True)
                if self.pass_cost is not None:
                    self.pass_cost.observe(len(batch), time.perf_counter() - pass_start)
                stats.n_target_passes += 1
                n_accepted, emitted = verify(logits, draft.tokens, draft.probs, sampler, acceptance)
                if n_accepted < len(draft):
                    ctx.truncate(n_past + n_accepted + 1)
                n_past += n_accepted + 1
                if len(draft):
                    stats.n_drafts += 1
                    stats.n_drafted += len(draft)
                    stats.n_accepted += n_accepted
                if chain is not None:
                    chain.accept(n_accepted, emitted)
                step_margins = top2_margin(logits[:len(emitted)]) if margins is not None else None
                for i, token in enumerate(emitted):
                    if vocab.is_eog(token):
                        stop_reason = "eog"
                        break
                    history[n_history] = token
                    n_history += 1
                    generated.append(token)
                    passes.append((n_past - n_accepted - 1, len(batch)))
                    if margins is not None:
                        margins.append(float(step_margins[i]))
                    piece = text.push(vocab.piece(token))
                    if piece:
                        pieces.append(piece)
                        yield piece
                    if text.stopped:
                        stop_reason = "stop"
                    elif len(generated) >= max_tokens:
                        stop_reason = "max_tokens"
                    if stop_reason:
                        break
        except (KeyboardInterrupt, GeneratorExit):
            stop_reason = "interrupted"
        except ContextFullError:
            stop_reason = "context_full"
        finally:
            if generation_start is None:
                stats.prompt_seconds = time.perf_counter() - prompt_start
            else:
                stats.generation_seconds = time.perf_counter() - generation_start - stats.calibration_seconds
            stats.n_generated = len(generated)
            if chain is not None:
                stats.drafters = chain.stats()
            tail = text.finish()
            pieces.append(tail)
            if stop_reason == "context_full":
                log.warning("the context is full (n_ctx=%d): generation stopped; raise [target] n_ctx", n_ctx)
            generation.result = GenerationResult("".join(pieces), generated, int(prompt.size), stop_reason,
                                                 stats, margins, prompt, passes)
        if tail and stop_reason != "interrupted":
            yield tail

    def calibrate(self, reset: bool = False) -> PassCost:
        """Measure the pass-cost table now (``reset``: even when a stored one is still good) and store it."""
        if reset:
            self.pass_cost_store.reset()
        self.pass_cost = self.pass_cost or PassCost()
        if reset:
            self.pass_cost.stale_reason = "asked to measure again"
        self.context.clear()
        self._ensure_pass_cost(0, self.config.speculative.n_max + 1)
        return self.pass_cost

    def _ensure_pass_cost(self, n_past: int, largest: int) -> None:
        """Have a trustworthy cost for every pass size up to ``largest``: the table in hand, else the stored one,
        else measured now (once per model, build, machine and threads; see pass_cost.py)."""
        sizes = range(1, largest + 1)
        cost = self.pass_cost
        if cost.covers(sizes) and not cost.stale:
            return
        with self.pass_cost_store.locked():   # another process starting at the same time measures once
            stored = None if cost.stale else self.pass_cost_store.load()
            if stored is not None and stored.covers(sizes):
                cost.__init__(stored.measured, measured_at=stored.measured_at, other_load=stored.other_load)
                return
            if cost.stale:
                log.info("measuring the pass costs again: %s", cost.stale_reason)
            self._measure_pass_cost(n_past, sizes)
            self.pass_cost_store.save(cost)

    def _measure_pass_cost(self, n_past: int, sizes: range) -> None:
        ctx = self.context
        filler = np.full(len(sizes), self.vocab.bos if self.vocab.bos >= 0 else 0, dtype=np.int32)

        def run_pass(n: int) -> float:
            start = time.perf_counter()
            ctx.decode(filler[:n], n_past, all_logits=True)
            seconds = time.perf_counter() - start
            ctx.truncate(n_past)
            return seconds

        self.pass_cost.calibrate(run_pass, sizes)

    def forget_drafters(self) -> None:
        """Close the drafters without saving what they learned, and forget their estimates: the next request
        starts them cold, as a new process would (the benchmark runs each request so: a repeat of the same
        prompt must not draft from the last one's answer)."""
        self._new_chain([e for e in self._entries.values() if e is not None]).close()
        self._entries.clear()

    def close(self) -> None:
        """Save what drafters persist, free everything, then raise the saves that failed: a run that loses what
        it learned must not end as if it succeeded."""
        entries = [e for e in self._entries.values() if e is not None]
        failures = [failure for entry in entries if (failure := self._save(entry))]
        self._new_chain(entries).close()
        self._entries.clear()
        self.context.close()
        self.model.close()
        if failures:
            raise SpecframeError("; ".join(failures))

    @staticmethod
    def _save(entry: ChainEntry) -> str | None:
        """Why the drafter could not save what it persists, or None when it saved (or has nothing to save)."""
        try:
            entry.drafter.save()
        except (Exception, SystemExit) as exc:
            reason = str(exc) if isinstance(exc, SpecframeError) else f"{type(exc).__name__}: {exc}"
            return f"drafter '{entry.label}' (plugin {entry.plugin}) could not save what it learned: {reason}"
        return None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

