"""The HTTP front end (FastAPI on uvicorn): OpenAI's endpoints, /health and /metrics, errors in OpenAI's shape.

Handlers never touch the engine: they hand requests to the engine thread (scheduler.py) and read what comes
back from each request's own queue. A client that goes away cancels its request, streaming or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from typing import AsyncIterator, Callable

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from specframe.serve.protocol import Answer, ChatCompletionRequest, CompletionRequest, FieldError, error_body
from specframe.serve.scheduler import Accepted, Finished, Job, QueueFull, Rejected, Scheduler, Text
from specframe.tool_calls import ToolCall, ToolCallStream


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
        """Every endpoint but /health asks for the key, when there is one."""
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
        job = Job([m.as_template_input() for m in body.messages], None, options, asyncio.get_running_loop(), tools)
        shape = Answer(True, model_name, logprobs=options["logprobs"] is not None,
                       tool_names=tuple(f["name"] for f in tools.functions) if tools is not None else ())
        return await answer(job, shape, body.stream, body.include_usage, request)

    @app.post("/v1/completions", dependencies=keyed)
    async def completions(body: CompletionRequest, request: Request):
        if isinstance(body.prompt, list) and len(body.prompt) != 1:
            return error(400, "prompt: only one prompt per request is served", "prompt", "invalid_value")
        options = body.options()
        job = Job(None, body.text, options, asyncio.get_running_loop())
        shape = Answer(False, model_name, logprobs=options["logprobs"] is not None)
        return await answer(job, shape, body.stream, body.include_usage, request)

    async def answer(job: Job, shape: Answer, stream: bool, include_usage: bool, request: Request) -> Response:
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
        shape.markers = first.tool_call_markers
        if stream:
            return EventStream(sse(job, shape, include_usage), job.cancel)
        return await whole(job, shape, request)

    return app


async def whole(job: Job, shape: Answer, request: Request) -> Response:
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
    return JSONResponse(shape.whole(event.result, event.pieces.__getitem__))


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
                yield _event(shape.text_chunk(event.text, event.logprobs, event.pieces.__getitem__))
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
