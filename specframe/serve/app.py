"""The HTTP front end (FastAPI on uvicorn): OpenAI's endpoints, llama-server's own (llama_api.py), /health and
/metrics, errors in OpenAI's shape, and the chat page at / (static files in static/, docs/chat-page.md).

Handlers never touch the engine: they hand requests to the engine thread (scheduler.py) and read what comes
back from each request's own queue. A client that goes away cancels its request, streaming or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import pathlib
import secrets
import time
from importlib.metadata import version
from typing import Any, AsyncIterator, Callable

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from specframe.engine import Engine
from specframe.errors import SpecframeError
from specframe.infill import ExtraChunk
from specframe.sampling import SAMPLING_KEYS
from specframe.serve.llama_api import (
    ApplyTemplateBody,
    CompletionBody,
    DetokenizeBody,
    InfillBody,
    NativeAnswer,
    TokenizeBody,
)
from specframe.serve.protocol import Answer, ChatCompletionRequest, CompletionRequest, FieldError, error_body
from specframe.serve.scheduler import Accepted, Finished, InfillInput, Job, QueueFull, Rejected, Scheduler, Text
from specframe.tool_calls import ToolCall, ToolCallStream

STATIC = pathlib.Path(__file__).with_name("static")   # the chat page: no build step, nothing fetched elsewhere


def error(status: int, message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status)


class ApiError(Exception):
    """Ends a request with an error in OpenAI's shape."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        self.response = error(status, message, param, code)


def create_app(scheduler: Scheduler, model_name: str, api_key: str = "") -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        scheduler.start()
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(scheduler.stop)

    async def authorized(request: Request) -> None:
        """Every endpoint but /health and the chat page's files asks for the key, when there is one (the page asks
        its user for it, and sends it with its API calls)."""
        given = request.headers.get("authorization", "")
        if api_key and not secrets.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
            raise ApiError(401, "invalid or missing API key: send 'Authorization: Bearer KEY'",
                           code="invalid_api_key")

    app = FastAPI(title="specframe", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    keyed = [Depends(authorized)]
    created = int(time.time())

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError):
        return exc.response

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError):
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"][1:]) or "body"
        if problem["type"] == "json_invalid":
            return error(400, f"the request body is not valid JSON: {problem['msg']}")
        if problem["type"] == "extra_forbidden":
            return error(400, f"{where}: not a field specframe serves", where, "unsupported_field")
        return error(400, f"{where}: {problem['msg']}", where, "invalid_value")

    @app.exception_handler(FieldError)
    async def field_error(_request: Request, exc: FieldError):
        return error(400, str(exc), exc.field, "invalid_value")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException):
        return error(exc.status_code, str(exc.detail))

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def chat_page():
        return FileResponse(STATIC / "index.html")

    @app.get("/health")
    async def health():
        if not scheduler.ready.is_set():
            return error(503, "loading the model", code="loading")
        if scheduler.failure:
            return error(500, scheduler.failure)
        return {"status": "ok"}

    @app.get("/metrics", dependencies=keyed)
    async def metrics():
        return Response(scheduler.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models", dependencies=keyed)
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": created,
                                            "owned_by": "specframe"}]}

    @app.post("/v1/chat/completions", dependencies=keyed)
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        options, tools = body.options(), body.tool_request()
        job = Job([m.as_template_input() for m in body.messages], None, options, asyncio.get_running_loop(), tools,
                  spans=body.spans)
        shape = Answer(True, model_name, logprobs=options["logprobs"] is not None,
                       tool_names=tuple(f["name"] for f in tools.functions) if tools is not None else (),
                       spans=body.spans)
        return await answer(job, shape, body.stream, body.include_usage, request)

    @app.post("/v1/completions", dependencies=keyed)
    async def completions(body: CompletionRequest, request: Request):
        if isinstance(body.prompt, list) and len(body.prompt) != 1:
            return error(400, "prompt: only one prompt per request is served", "prompt", "invalid_value")
        options = body.options()
        job = Job(None, body.text, options, asyncio.get_running_loop(), spans=body.spans)
        shape = Answer(False, model_name, logprobs=options["logprobs"] is not None, spans=body.spans)
        return await answer(job, shape, body.stream, body.include_usage, request)

    @app.post("/completion", dependencies=keyed)
    @app.post("/completions", dependencies=keyed)
    async def native_completion(body: CompletionBody, request: Request):
        job = Job(None, body.prompt, body.options(), asyncio.get_running_loop(), slot=body.slot,
                  cache_prompt=body.cache_prompt, native=True)
        return await native_answer(job, body, request)

    @app.post("/infill", dependencies=keyed)
    async def infill(body: InfillBody, request: Request):
        extra = [ExtraChunk(chunk.text, chunk.filename) for chunk in body.input_extra]
        job = Job(None, InfillInput(body.input_prefix, body.input_suffix, body.prompt, extra), body.options(),
                  asyncio.get_running_loop(), slot=body.slot, cache_prompt=body.cache_prompt, native=True)
        return await native_answer(job, body, request)

    @app.post("/tokenize", dependencies=keyed)
    async def tokenize(body: TokenizeBody):
        def run(engine: Engine) -> dict:
            tokens = engine.vocab.tokenize(body.content, add_special=body.add_special,
                                           parse_special=body.parse_special).tolist()
            if not body.with_pieces:
                return {"tokens": tokens}
            return {"tokens": [{"id": token, "piece": _piece(engine.vocab.piece(token, special=True))}
                               for token in tokens]}
        return await engine_call(run)

    @app.post("/detokenize", dependencies=keyed)
    async def detokenize(body: DetokenizeBody):
        def run(engine: Engine) -> dict:
            n_vocab = engine.vocab.n_tokens
            if any(not 0 <= token < n_vocab for token in body.tokens):
                raise FieldError("tokens", f"token ids run from 0 to {n_vocab - 1}")
            return {"content": engine.vocab.detokenize(body.tokens)}
        return await engine_call(run)

    @app.post("/apply-template", dependencies=keyed)
    async def apply_template(body: ApplyTemplateBody):
        messages = [m.as_template_input() for m in body.messages]
        return await engine_call(lambda engine: {"prompt": engine.chat_prompt(messages)})

    @app.get("/props", dependencies=keyed)
    async def props():
        return await engine_call(lambda engine: properties(engine, scheduler, model_name))

    @app.get("/slots", dependencies=keyed)
    async def slots():
        return await engine_call(scheduler.slot_states)

    async def engine_call(function: Callable[[Engine], object]) -> Response:
        if not scheduler.ready.is_set():
            return error(503, "loading the model", code="loading")
        try:
            return JSONResponse(await scheduler.call(function))
        except QueueFull as exc:
            return error(503, str(exc), code="unavailable")
        except FieldError as exc:
            return error(400, str(exc), exc.field, "invalid_value")
        except SpecframeError as exc:     # a chat template the model cannot apply, a model without one
            return error(400, str(exc), code="invalid_value")

    async def admitted(job: Job) -> Accepted | Response:
        """Hand the request over; what the engine thread said of it first (or the error response)."""
        if not scheduler.ready.is_set():
            return error(503, "loading the model", code="loading")
        try:
            scheduler.submit(job)
        except QueueFull as exc:
            return error(503, str(exc), code="queue_full")
        first = await job.events.get()
        if isinstance(first, Rejected):
            return error(first.status, first.message, first.param, first.code)
        assert isinstance(first, Accepted)
        return first

    async def answer(job: Job, shape: Answer, stream: bool, include_usage: bool, request: Request) -> Response:
        first = await admitted(job)
        if not isinstance(first, Accepted):
            return first
        shape.markers = first.tool_call_markers
        if stream:
            return EventStream(sse(job, shape, include_usage), job.cancel)
        return await whole(job, request, lambda end: shape.whole(end.result, end.pieces.__getitem__))

    async def native_answer(job: Job, body: CompletionBody | InfillBody, request: Request) -> Response:
        first = await admitted(job)
        if not isinstance(first, Accepted):
            return first
        settings = {key: value for key, value in job.options.items() if key in SAMPLING_KEYS and value is not None}
        shape = NativeAnswer(model_name, body.response_fields, body.return_tokens, first.prompt_text,
                             settings | {"n_predict": job.options["max_tokens"], "stop": job.options["stop"] or []})
        if body.stream:
            return EventStream(native_sse(job, shape, first.n_prompt_tokens), job.cancel)
        return await whole(job, request, lambda end: shape.whole(end.result, end.slot))

    return app


def properties(engine: Engine, scheduler: Scheduler, model_name: str) -> dict:
    """/props: llama-server's description of the server (the generation defaults, the slots, the model, its chat
    template), and specframe's drafters."""
    config, vocab = engine.config, engine.vocab
    defaults = {key: getattr(config.sampling, key) for key in SAMPLING_KEYS}
    return {
        "default_generation_settings": {"params": defaults | {"n_predict": config.generation.max_tokens,
                                                              "stop": list(config.generation.stop)},
                                        "n_ctx": engine.context.n_ctx},
        "total_slots": scheduler.slots,
        "model_alias": model_name,
        "model_path": str(engine.model.path),
        "modalities": {"vision": False, "audio": False},
        "endpoint_slots": True,
        "endpoint_props": False,
        "endpoint_metrics": True,
        "chat_template": engine.model.chat_template or "",
        "bos_token": vocab.piece(vocab.bos, special=True).decode(errors="replace"),
        "eos_token": vocab.piece(vocab.eos, special=True).decode(errors="replace"),
        "build_info": f"specframe {version('specframe')}",
        "infill": not vocab.fim.missing,
        "cache_reuse": config.server.cache_reuse,
        "drafters": ([{"name": d.name, "type": d.type, "params": _json_params(d.params)} for d in config.drafters]
                     if config.speculative.enabled else []),
    }


def _json_params(params: Any) -> dict:
    """A drafter's parameters (a dataclass: plugins.py checks) as JSON has them, a path as its text."""
    return json.loads(json.dumps(dataclasses.asdict(params), default=str))


def _piece(data: bytes) -> str | list[int]:
    """A token's text, or its bytes where they are not UTF-8 on their own (llama-server's /tokenize)."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return list(data)


async def whole(job: Job, request: Request, render: Callable[[Finished], dict]) -> Response:
    """Wait for the end of the request, cancelling it if the client disconnects first."""
    outcome: list = []

    async def wait_for_end(cancel: Callable[[], None]) -> None:
        while not isinstance(event := await job.events.get(), (Finished, Rejected)):
            pass
        outcome.append(event)
        cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(wait_for_end, group.cancel_scope.cancel)
        await _until_disconnected(request.receive)
        job.cancel()
        group.cancel_scope.cancel()
    if not outcome:
        return Response(status_code=499)       # nobody is listening
    event = outcome[0]
    if isinstance(event, Rejected):
        return error(event.status, event.message, event.param, event.code)
    return JSONResponse(render(event))


async def native_sse(job: Job, shape: NativeAnswer, n_prompt: int) -> AsyncIterator[str]:
    """llama-server's native stream: a chunk per piece of text, then the whole response (its content already
    sent); no [DONE]."""
    predicted = 0
    while True:
        event = await job.events.get()
        if isinstance(event, Text):
            predicted += len(event.tokens)
            yield _event(shape.chunk(event.text, event.tokens, event.slot, predicted, n_prompt))
        elif isinstance(event, Finished):
            yield _event(shape.whole(event.result, event.slot, streamed=True))
            return
        else:
            yield _event(error_body(event.status, event.message, event.param, event.code))
            return


async def sse(job: Job, shape: Answer, include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events: the assistant's role (chat), text as it is accepted, the finish reason with the
    statistics, the usage if asked for, then ``[DONE]``."""
    if shape.chat:
        yield _event(shape.first_chunk())
    calls = ToolCallStream(shape.markers, shape.tool_names) if shape.markers is not None else None
    while True:
        event = await job.events.get()
        if isinstance(event, Text):
            if calls is None:
                yield _event(shape.text_chunk(event.text, event.logprobs, event.pieces.__getitem__, event.spans))
                continue
            for part in calls.feed(event.text):
                yield _event(shape.call_chunk(part) if isinstance(part, ToolCall) else shape.text_chunk(part))
        elif isinstance(event, Finished):
            for part in calls.finish() if calls is not None else []:
                yield _event(shape.call_chunk(part) if isinstance(part, ToolCall) else shape.text_chunk(part))
            yield _event(shape.last_chunk(event.result))
            if include_usage:
                yield _event(shape.usage_chunk(event.result))
            break
        else:   # refused after all: the server is shutting down
            yield _event(error_body(event.status, event.message, event.param, event.code))
            break
    yield "data: [DONE]\n\n"


def _event(data: dict) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _until_disconnected(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStream(StreamingResponse):
    """A text/event-stream response that ends, and calls ``on_close``, as soon as the client goes away, whatever
    ASGI version the server speaks (Starlette listens for the disconnect only before 2.4)."""

    def __init__(self, events: AsyncIterator[str], on_close: Callable[[], None]):
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            async with anyio.create_task_group() as group:
                async def listen() -> None:
                    await _until_disconnected(receive)
                    group.cancel_scope.cancel()

                group.start_soon(listen)
                await self.stream_response(send)
                group.cancel_scope.cancel()
        except OSError:      # the client went away while we wrote
            pass
        finally:
            self._on_close()
