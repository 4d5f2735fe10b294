"""The engine thread: it owns the engine (every libllama object), admits requests into slots and steps them.

The HTTP front end runs on asyncio; it hands each request over as a ``Job`` and reads what becomes of it from the
job's own asyncio queue: ``Accepted`` (or ``Rejected``) once the prompt is tokenized and checked, then ``Text``
pieces, then ``Finished``. A job that the client gave up on is cancelled, and its slot is free at the next step.

Continuous batching: every step is one target pass over all the slots that hold a request (engine.step). A
waiting request takes the free slot whose memory shares the longest prefix with its prompt, so only the rest is
evaluated: a chat's next turn finds its history in place. A slot counts only if that prefix is at least half of
what it holds (a shared system prompt is not worth another conversation's memory), or if it holds the whole prompt
(a request asked again, whose answer outgrew its prompt); otherwise the request takes the slot used least
recently, an empty one first.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from specframe.config import Config
from specframe.engine import Engine
from specframe.errors import ParamError, SpecframeError
from specframe.infill import ExtraChunk, infill_prompt
from specframe.provenance import Span
from specframe.results import GenerationResult
from specframe.sampling import SAMPLING_KEYS, TokenLogprob
from specframe.sequence import Sequence
from specframe.serve.metrics import Metrics
from specframe.serve.protocol import ToolRequest
from specframe.stats_text import format_stats

log = logging.getLogger("specframe.serve")


@dataclass(frozen=True)
class Accepted:
    n_prompt_tokens: int
    tool_call_markers: tuple[str, str] | None = None   # how calls are written, where the request offered tools
    prompt_text: str = ""                              # the prompt as laid out (native requests only)


@dataclass(frozen=True)
class InfillInput:
    """An editor's fill-in-the-middle request, laid out on the engine thread (infill.py)."""

    prefix: str
    suffix: str
    prompt: str
    extra: list[ExtraChunk]


@dataclass(frozen=True)
class Rejected:
    status: int
    message: str
    param: str | None = None
    code: str | None = None


@dataclass(frozen=True)
class Text:
    text: str
    spans: list[Span] = field(default_factory=list)             # the text by the drafter that wrote it
    logprobs: list[TokenLogprob] = field(default_factory=list)   # of the tokens behind it, when asked for
    pieces: dict[int, bytes] = field(default_factory=dict)      # the bytes of the tokens those entries name
    tokens: list[int] = field(default_factory=list)             # the tokens generated since the last Text
    slot: int = -1


@dataclass(frozen=True)
class Finished:
    result: GenerationResult
    pieces: dict[int, bytes] = field(default_factory=dict)   # the bytes of the tokens its log-probabilities name
    slot: int = -1


class QueueFull(SpecframeError):
    """Every slot is busy and the queue of waiting requests is full."""


@dataclass(eq=False)
class Job:
    """One request on its way through the engine thread."""

    messages: list[dict] | None                # a chat, as chat templates read its messages
    prompt: str | list[int] | InfillInput | None   # or a raw prompt (text or token ids), or the text around a cursor
    options: dict                              # Engine.start's options
    loop: asyncio.AbstractEventLoop
    tools: ToolRequest | None = None           # functions the model may call
    slot: int | None = None                    # the slot it must run in (llama-server's id_slot), else any
    cache_prompt: bool = True                  # keep what the slot's memory holds of the prompt
    native: bool = False                       # llama-server's own API: Accepted spells the prompt out
    spans: bool = False                        # the client reads spans: those of no text are sent too
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    arrived: float = field(default_factory=time.perf_counter)
    first_text: float | None = None
    tokens_sent: int = 0                       # generated tokens already sent with Text events
    _cancelled: threading.Event = field(default_factory=threading.Event)

    def send(self, event) -> None:
        """From the engine thread to the request's handler."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)

    def cancel(self) -> None:
        """The client is gone: the engine thread drops the request at its next step."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


@dataclass(eq=False)
class Call:
    """A function of the engine (tokenizing, a template, a look at the slots) run on the engine thread between
    steps, its result (or exception) set on ``future`` in the caller's loop."""

    function: Callable[[Engine], object]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop

    def run(self, engine: Engine) -> None:
        try:
            result = self.function(engine)
        except Exception as exc:
            self.loop.call_soon_threadsafe(_settle, self.future, None, exc)
        else:
            self.loop.call_soon_threadsafe(_settle, self.future, result, None)


def _settle(future: asyncio.Future, result, exc: BaseException | None) -> None:
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class Scheduler:
    def __init__(self, config: Config, slots: int, queue_size: int, metrics: Metrics,
                 on_failure: Callable[[], None] = lambda: None):
        """``on_failure`` is called (from the engine thread) when the engine cannot start or fails."""
        self.config = config
        self.slots = slots
        self.queue_size = queue_size
        self.metrics = metrics
        self.on_failure = on_failure
        self.ready = threading.Event()     # the models are loaded (or failed to load: see ``failure``)
        self.failure: str | None = None    # why the engine could not start, or why saving failed at the end
        self._inbox: queue.Queue[Job | Call | None] = queue.Queue()
        self._lock = threading.RLock()     # shutdown() may run in a signal handler while submit() holds it
        self._in_flight = 0                # submitted, not yet finished or refused
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="specframe-engine", daemon=True)
        self._waiting: collections.deque[tuple[Job, np.ndarray]] = collections.deque()
        self._active: dict[int, tuple[Job, Sequence]] = {}   # by slot
        self._last_used = [0.0] * slots

    # --- the front end's side ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Hand a request to the engine thread; QueueFull when it cannot take more."""
        with self._lock:
            if self._stopping or self.failure:
                raise QueueFull(self.failure or "the server is shutting down")
            if self._in_flight >= self.slots + self.queue_size:
                raise QueueFull(f"all {self.slots} slots are busy and {self.queue_size} requests wait already")
            self._in_flight += 1
        self._inbox.put(job)

    async def call(self, function: Callable[[Engine], object]):
        """``function(engine)`` run on the engine thread; its result, or its exception raised here."""
        if self._stopping or self.failure or not self.ready.is_set():
            raise QueueFull(self.failure or "the server is not serving")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._inbox.put(Call(function, future, loop))
        return await future

    def shutdown(self) -> None:
        """Refuse new requests and end those in flight now (their text so far is sent); the engine thread then
        saves what drafters persist and frees the models. Returns at once."""
        with self._lock:
            self._stopping = True
        self._inbox.put(None)

    def stop(self) -> None:
        """``shutdown``, and wait for the engine thread to be done."""
        self.shutdown()
        if self._thread.is_alive():
            self._thread.join()

    # --- the engine thread ------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            engine = Engine(self.config, slots=self.slots)
        except Exception as exc:
            self.failure = str(exc) if isinstance(exc, SpecframeError) else f"{type(exc).__name__}: {exc}"
            log.error("the engine could not start: %s", self.failure)
            self.ready.set()
            self._reject_all()
            self.on_failure()
            return
        try:
            if self.config.speculative.enabled and engine.prepare_drafters():   # the drafters, loaded now
                if engine.pass_cost is not None:
                    engine.calibrate()      # now, before the first request waits for it
            self.ready.set()
            self._serve(engine)
        except Exception as exc:        # a failing engine ends the server's requests, and /health says so
            self.failure = f"the engine failed: {type(exc).__name__}: {exc}"
            log.exception("the engine failed")
            self.on_failure()
        finally:
            for slot in list(self._active):
                self._end(engine, slot, "interrupted")
            self.ready.set()
            self._reject_all()
            try:
                engine.close()
            except SpecframeError as exc:
                self.failure = str(exc)
                log.error("%s", exc)

    def _serve(self, engine: Engine) -> None:
        while True:
            idle = not self._active and not self._waiting
            if not self._take(engine, block=idle):
                return
            self._drop_cancelled(engine)
            self._admit(engine)
            if self._active:
                engine.step([sequence for _, sequence in self._active.values()])
                self._publish(engine)
            self.metrics.queue(len(self._active), len(self._waiting))

    def _take(self, engine: Engine, block: bool) -> bool:
        """Tokenize and check the requests that arrived; False once the server stops."""
        while True:
            try:
                job = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if job is None:
                return False
            if isinstance(job, Call):
                job.run(engine)
                continue
            try:
                tokens = self._tokens(engine, job)
                if job.tools is not None:
                    job.options["grammar"] = engine.tool_grammar(job.tools.functions, job.tools.required,
                                                                 job.tools.parallel)
                engine.sampler({k: v for k, v in job.options.items() if k in SAMPLING_KEYS})
            except ParamError as exc:    # a setting the model cannot honour: a biased token it does not have
                self._refuse(job, Rejected(400, str(exc), exc.key))
                continue
            except _Refusal as refusal:
                self._refuse(job, refusal.event)
                continue
            except SpecframeError as exc:   # e.g. a chat template llama.cpp cannot apply
                self._refuse(job, Rejected(400, str(exc), "messages" if job.messages is not None else "prompt"))
                continue
            template = engine.chat_template
            markers = template.tool_call_markers if job.tools is not None and template is not None else None
            shown = engine.vocab.detokenize(tokens, unparse_special=True) if job.native else ""
            job.send(Accepted(int(tokens.size), markers, shown))
            self._waiting.append((job, tokens))

    def _tokens(self, engine: Engine, job: Job) -> np.ndarray:
        model, field_name = engine.model, "messages" if job.messages is not None else "prompt"
        if job.slot is not None and job.slot >= self.slots:
            raise _Refusal(400, f"id_slot: this server has slots 0 to {self.slots - 1}", "id_slot")
        prompt = job.prompt
        if job.messages is not None:
            if model.chat_template is None:
                raise _Refusal(400, f"{model.path} has no chat template: use /v1/completions", "messages")
            text = engine.chat_prompt(job.messages, job.tools.tools if job.tools is not None else None)
            tokens = engine.vocab.tokenize(text, add_special=True, parse_special=True)
        elif isinstance(prompt, InfillInput):
            tokens = infill_prompt(engine.vocab, prompt.prefix, prompt.suffix, prompt.prompt, prompt.extra,
                                   n_batch=engine.context.n_batch, n_predict=-1, n_ctx=engine.context.n_ctx)
        elif isinstance(prompt, list):
            tokens = np.asarray(prompt, dtype=np.int32)
            if tokens.size and (tokens.min() < 0 or tokens.max() >= engine.vocab.n_tokens):
                raise _Refusal(400, f"prompt: token ids run from 0 to {engine.vocab.n_tokens - 1}", "prompt")
        else:
            tokens = engine.vocab.tokenize(prompt or "", add_special=True, parse_special=True)
        if tokens.size == 0:
            raise _Refusal(400, f"{field_name}: the prompt is empty", field_name)
        n_ctx = engine.context.n_ctx
        if tokens.size >= n_ctx:
            raise _Refusal(400, f"{field_name}: the prompt has {tokens.size} tokens, more than fit in the "
                                f"context of {n_ctx} tokens per slot", field_name, "context_length_exceeded")
        return tokens

    def slot_states(self, engine: Engine) -> list[dict]:
        """/slots: what each slot holds and does (on the engine thread)."""
        states = []
        for slot in range(self.slots):
            job_sequence = self._active.get(slot)
            sequence = job_sequence[1] if job_sequence is not None else None
            states.append({"id": slot, "n_ctx": engine.context.n_ctx, "is_processing": sequence is not None,
                           "n_cached": sequence.n_past if sequence is not None else engine.kept(slot),
                           "next_token": [{"has_next_token": sequence is not None,
                                           "n_decoded": len(sequence.generated) if sequence is not None else 0}]})
        return states

    def _drop_cancelled(self, engine: Engine) -> None:
        for waiting in [w for w in self._waiting if w[0].cancelled]:
            self._waiting.remove(waiting)
            self._release()
        for slot in [slot for slot, (job, _) in self._active.items() if job.cancelled]:
            self._end(engine, slot, "cancelled")

    def _admit(self, engine: Engine) -> None:
        """Waiting requests take free slots in turn; one bound to a busy slot (id_slot) waits for it."""
        free = [slot for slot in range(self.slots) if slot not in self._active]
        for waiting in list(self._waiting):
            if not free:
                return
            job, tokens = waiting
            if job.slot is not None and job.slot not in free:
                continue
            self._waiting.remove(waiting)
            slot = job.slot if job.slot is not None else max(
                free, key=lambda s: (self._reusable(engine, s, tokens), -self._last_used[s]))
            free.remove(slot)
            sequence = engine.start(tokens, slot=slot, reuse=job.cache_prompt,
                                    reuse_chunks=self.config.server.cache_reuse, **job.options)
            self._active[slot] = (job, sequence)

    def _reusable(self, engine: Engine, slot: int, tokens: np.ndarray) -> int:
        """The prompt tokens the slot's memory would spare evaluating, if that keeps at least half of it or the
        whole prompt (all but the last token, which is always fed anew)."""
        common = engine.reusable(slot, tokens, self.config.server.cache_reuse)
        return common if 2 * common >= engine.kept(slot) or common == tokens.size - 1 else 0

    def _publish(self, engine: Engine) -> None:
        for slot, (job, sequence) in list(self._active.items()):
            self._send_text(job, sequence)
            if sequence.stop_reason is not None:
                self._end(engine, slot)

    def _send_text(self, job: Job, sequence: Sequence) -> None:
        spans = sequence.take_spans()
        text = "".join(span.text for span in spans)
        logprobs = sequence.take_logprobs()
        tokens = sequence.generated[job.tokens_sent:]
        if text or logprobs or (spans and job.spans):
            job.tokens_sent = len(sequence.generated)
            job.first_text = job.first_text or time.perf_counter()
            job.send(Text(text, spans, logprobs, _pieces(sequence, logprobs), tokens, sequence.seq))

    def _end(self, engine: Engine, slot: int, reason: str | None = None) -> None:
        job, sequence = self._active.pop(slot)
        result = engine.finish(sequence, reason)
        self._last_used[slot] = time.perf_counter()
        self._send_text(job, sequence)
        job.send(Finished(result, _pieces(sequence, result.logprobs or []), slot))
        self._release()
        now = time.perf_counter()
        self.metrics.finished(result, job.first_text and job.first_text - job.arrived, now - job.arrived)
        log.info("slot %d: %s", slot, format_stats(result).strip())

    def _refuse(self, job: Job, event: Rejected) -> None:
        job.send(event)
        self._release()

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _reject_all(self) -> None:
        """Requests still waiting when the engine stops (or never started) are refused."""
        with self._lock:
            self._stopping = True
        refusal = Rejected(503, self.failure or "the server is shutting down")
        while self._waiting:
            self._refuse(self._waiting.popleft()[0], refusal)
        while True:
            try:
                job = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(job, Call):
                job.loop.call_soon_threadsafe(_settle, job.future, None, QueueFull(refusal.message))
            elif job is not None:
                self._refuse(job, refusal)


def _pieces(sequence: Sequence, entries: list[TokenLogprob]) -> dict[int, bytes]:
    """The bytes of every token ``entries`` name, read on the engine thread (the only one that calls libllama)."""
    tokens = {token for entry in entries for token in (entry.token, *(t for t, _ in entry.top))}
    return {token: sequence.piece(token) for token in tokens}


class _Refusal(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        self.event = Rejected(status, message, param, code)
