"""The OpenAI API as specframe serves it: request bodies (validated by pydantic) and the responses built for them.

Sampling fields are OpenAI's and llama-server's (``top_k``, ``min_p``, ``repeat_penalty``, ``repeat_last_n``), with
[sampling]'s meanings and bounds; so are the output's constraints (``response_format``, ``tools``, llama-server's
``grammar`` and ``json_schema``) and log-probabilities (``logprobs``, ``top_logprobs``, ``n_probs``). Every field
is declared and typed strictly: one specframe does not know, or a value of the wrong type, is a 400 that names it.
Responses carry llama-server's ``timings`` and specframe's per-drafter counters (``drafters``) and target passes
beside OpenAI's fields; with ``"specframe": {"spans": true}`` each choice (each chunk's, streaming) carries the
spans of its text by the drafter that wrote it (docs/chat-page.md).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from specframe.errors import SpecframeError
from specframe.grammar import GRAMMAR_KEYS, GrammarError, GrammarSpec
from specframe.params import INT32_MAX
from specframe.provenance import Span
from specframe.results import GenerationResult
from specframe.sampling import SAMPLING_KEYS, TokenLogprob
from specframe.tool_calls import ToolCall, split_tool_calls

MAX_TOP_LOGPROBS = 20   # OpenAI's bound on top_logprobs

# How a request ended, as OpenAI names it: the model finished (or a stop string), or the answer was cut short.
FINISH_REASONS = {"eog": "stop", "stop": "stop", "max_tokens": "length", "limit": "length", "context_full": "length",
                  "interrupted": "length", "cancelled": "length"}


class _Strict(BaseModel):
    """Every field declared, every type exact: a field specframe does not know, or ``"stream": "yes"``, is a 400
    that names it, never silently dropped or coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: bool = False


class SpecframeOptions(_Strict):
    """specframe's own request fields, apart from OpenAI's."""

    spans: bool = False     # each choice carries its text's spans by drafter (provenance.py)


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCall(_Strict):
    name: str
    arguments: str


class ToolCallIn(_Strict):
    """A call an assistant message made earlier in the conversation."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None     # an assistant's
    tool_call_id: str | None = None                # a tool's answer to that call
    refusal: None = None                           # null fields that clients echo when they resend an answer
    annotations: None = None
    audio: None = None
    function_call: None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""

    def as_template_input(self) -> dict:
        """The message as chat templates read it."""
        message: dict = {"role": self.role, "content": self.text}
        if self.name is not None:
            message["name"] = self.name
        if self.tool_calls:
            message["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class Function(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: Function


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None
    schema_: dict | None = Field(None, alias="schema")    # llama-server's json_object with a schema


class _Request(_Strict):
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, le=INT32_MAX)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(None, ge=0.0, le=100.0)
    repeat_last_n: int | None = Field(None, ge=-1, le=INT32_MAX)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    seed: int | None = Field(None, ge=0, le=2**64 - 1)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1)
    user: str | None = None                       # OpenAI's end-user id: for the provider's records, none kept here
    grammar: str | None = None                    # llama-server's: GBNF
    json_schema: dict | None = None               # llama-server's: a schema the output must match
    n_probs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)   # llama-server's: alternatives per token
    specframe: SpecframeOptions | None = None

    @property
    def spans(self) -> bool:
        return self.specframe is not None and self.specframe.spans

    @property
    def stops(self) -> list[str] | None:
        return [self.stop] if isinstance(self.stop, str) else self.stop

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def grammar_spec(self) -> GrammarSpec | None:
        """The grammar the request asks its output to match; GrammarError names what is wrong with it."""
        given = {key: value for key, value in self._grammars().items() if value is not None}
        if len(given) > 1:
            raise FieldError(" and ".join(given), "give one way to constrain the output, not several")
        if not given:
            return None
        field_name, spec = next(iter(given.items()))
        try:
            _ = spec.source    # compiled and checked now, used as it is by the engine
        except GrammarError as exc:
            raise FieldError(field_name, str(exc)) from None
        return spec

    def _grammars(self) -> dict[str, GrammarSpec | None]:
        return {"grammar": GrammarSpec("gbnf", self.grammar) if self.grammar is not None else None,
                "json_schema": GrammarSpec.json_schema(self.json_schema) if self.json_schema is not None else None}

    def top_logprobs_asked(self) -> int | None:
        """How many alternatives per token the log-probabilities hold (None: none asked)."""
        return self.n_probs

    def options(self) -> dict:
        """The engine's options for this request; None leaves the config's."""
        sampling = {key: getattr(self, key, None) for key in SAMPLING_KEYS - GRAMMAR_KEYS}
        return sampling | {"max_tokens": self.max_tokens, "stop": self.stops, "grammar": self.grammar_spec(),
                           "logprobs": self.top_logprobs_asked()}


class ChatCompletionRequest(_Request):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = False             # llama-server's default: small models repeat calls otherwise
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)

    def _grammars(self) -> dict[str, GrammarSpec | None]:
        return super()._grammars() | {"response_format": self._response_format()}

    def _response_format(self) -> GrammarSpec | None:
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return GrammarSpec.json_schema(fmt.schema_ or {"type": "object"})
        if fmt.json_schema is None:
            raise FieldError("response_format.json_schema", "required when type is json_schema")
        return GrammarSpec.json_schema(fmt.json_schema.schema_ or {"type": "object"})

    def top_logprobs_asked(self) -> int | None:
        if self.top_logprobs is not None and not self.logprobs:
            raise FieldError("top_logprobs", "needs logprobs: true")
        if self.logprobs:
            return self.top_logprobs or 0
        return super().top_logprobs_asked()

    def tool_request(self) -> ToolRequest | None:
        """The tools the model may call and how (None: no tools, or tool_choice none)."""
        if self.tool_choice is not None and not self.tools and self.tool_choice != "none":
            raise FieldError("tool_choice", "needs tools")
        if not self.tools or self.tool_choice == "none":
            return None
        if any(spec is not None for spec in self._grammars().values()):
            raise FieldError("tools", "cannot be combined with response_format, grammar or json_schema")
        if self.spans:
            raise FieldError("specframe.spans", "cannot be combined with tools (calls are taken out of the text)")
        functions = [tool.function for tool in self.tools]
        names = [f.name for f in functions]
        if len(set(names)) != len(names):
            raise FieldError("tools", "two functions have the same name")
        choice = self.tool_choice or "auto"
        if isinstance(choice, NamedToolChoice):
            if choice.function.name not in names:
                raise FieldError("tool_choice.function.name",
                                 f"{choice.function.name!r} is not among the tools ({', '.join(names)})")
            functions = [f for f in functions if f.name == choice.function.name]
            choice = "required"
        return ToolRequest([f.model_dump(exclude_none=True) for f in functions],
                           [tool.model_dump(exclude_none=True) for tool in self.tools], choice == "required",
                           self.parallel_tool_calls)

    def options(self) -> dict:
        return super().options() | {"max_tokens": self.max_completion_tokens or self.max_tokens}


@dataclass(frozen=True)
class ToolRequest:
    functions: list[dict]      # those the model may call: name, description, parameters
    tools: list[dict]          # every tool, as the chat template shows them to the model
    required: bool             # a call must come (tool_choice required, or a named function)
    parallel: bool             # several calls may come


class CompletionRequest(_Request):
    prompt: str | list[str] = Field(min_length=1)   # a list holds exactly one prompt: n > 1 is not served
    logprobs: int | None = Field(None, ge=0, le=5)  # OpenAI's legacy completions: up to 5 alternatives

    @property
    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    def top_logprobs_asked(self) -> int | None:
        return self.logprobs if self.logprobs is not None else super().top_logprobs_asked()


class FieldError(SpecframeError):
    """A request field that cannot be served as given: a 400 naming it."""

    def __init__(self, field_name: str, problem: str):
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error object."""
    error_type = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            503: "unavailable_error"}.get(status, "server_error")
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


class Answer:
    """The response objects of one request, OpenAI's chat or completion shape, as a whole or as stream chunks.
    With tool-call ``markers`` (the request offered tools), calls in the text become ``tool_calls``."""


    def __init__(self, chat: bool, model: str, markers: tuple[str, str] | None = None,
                 logprobs: bool = False, tool_names: tuple[str, ...] = (), spans: bool = False):
        self.chat = chat
        self.model = model
        self.markers = markers
        self.tool_names = tool_names      # the functions offered: an answer that is a bare call to one is a call
        self.logprobs = logprobs
        self.spans = spans                # each choice carries its text's spans
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"
        self._calls = 0          # tool calls streamed so far
        self._offset = 0         # characters of completion text streamed so far (completions' text_offset)

    def _head(self, chunk: bool) -> dict:
        object_name = self.object + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": object_name, "created": self.created, "model": self.model}

    def whole(self, result: GenerationResult, piece: Callable[[int], bytes]) -> dict:
        finish_reason = FINISH_REASONS[result.stop_reason]
        choice: dict = {"index": 0, "logprobs": self._logprobs(result.logprobs or [], piece)}
        if self.chat:
            message: dict = {"role": "assistant", "content": result.text}
            if self.markers is not None:
                content, calls = split_tool_calls(result.text, self.markers, self.tool_names)
                message["content"] = content
                if calls:
                    message["tool_calls"] = [call.as_openai() for call in calls]
                    finish_reason = "tool_calls" if finish_reason == "stop" else finish_reason
            choice["message"] = message
        else:
            choice["text"] = result.text
        choice["finish_reason"] = finish_reason
        self._add_spans(choice, result.spans)
        return self._head(False) | {"choices": [choice], "usage": usage(result)} | statistics(result)

    def first_chunk(self) -> dict:
        """Chat streams open with the assistant's role."""
        return self._chunk({"role": "assistant", "content": ""}, None)

    def text_chunk(self, text: str, logprobs: list[TokenLogprob] | None = None,
                   piece: Callable[[int], bytes] | None = None, spans: list[Span] | None = None) -> dict:
        chunk = self._chunk({"content": text} if self.chat else text, None)
        if logprobs and piece is not None:
            chunk["choices"][0]["logprobs"] = self._logprobs(logprobs, piece)
        if spans is not None:
            self._add_spans(chunk["choices"][0], spans)
        self._offset += len(text)
        return chunk

    def _add_spans(self, choice: dict, spans: list[Span]) -> None:
        if self.spans:
            choice["specframe"] = {"spans": [span.as_dict() for span in spans]}

    def call_chunk(self, call: ToolCall) -> dict:
        """A whole tool call as one delta, which the OpenAI clients assemble as the non-streamed call."""
        delta = {"tool_calls": [{"index": self._calls} | call.as_openai()]}
        self._calls += 1
        return self._chunk(delta, None)

    def last_chunk(self, result: GenerationResult) -> dict:
        finish_reason = FINISH_REASONS[result.stop_reason]
        if self._calls and finish_reason == "stop":
            finish_reason = "tool_calls"
        return self._chunk({} if self.chat else "", finish_reason) | statistics(result)

    def usage_chunk(self, result: GenerationResult) -> dict:
        return self._head(True) | {"choices": [], "usage": usage(result)}

    def _chunk(self, delta, finish_reason: str | None) -> dict:
        choice = {"index": 0, "finish_reason": finish_reason, "logprobs": None}
        choice |= {"delta": delta} if self.chat else {"text": delta}
        return self._head(True) | {"choices": [choice]}

    def _logprobs(self, entries: list[TokenLogprob], piece: Callable[[int], bytes]) -> dict | None:
        """OpenAI's logprobs object: chat's ``content`` list, or the legacy completions' parallel lists."""
        if not self.logprobs:
            return None
        if self.chat:
            return {"content": [_token_entry(e.token, e.logprob, piece)
                                | {"top_logprobs": [_token_entry(t, lp, piece) for t, lp in e.top]}
                                for e in entries], "refusal": None}
        texts = [piece(e.token).decode("utf-8", "replace") for e in entries]
        offsets = list(self._offset + np.cumsum([0] + [len(t) for t in texts[:-1]]).astype(int)) if texts else []
        return {"tokens": texts, "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": [{piece(t).decode("utf-8", "replace"): lp for t, lp in e.top} for e in entries],
                "text_offset": [int(o) for o in offsets]}


def _token_entry(token: int, logprob: float, piece: Callable[[int], bytes]) -> dict:
    data = piece(token)
    return {"token": data.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(data)}


def usage(result: GenerationResult) -> dict:
    s = result.stats
    return {"prompt_tokens": s.n_prompt_tokens, "completion_tokens": s.n_generated,
            "total_tokens": s.n_prompt_tokens + s.n_generated,
            "prompt_tokens_details": {"cached_tokens": s.n_cached_tokens}}


def statistics(result: GenerationResult) -> dict:
    """llama-server's ``timings``, specframe's per-drafter counters and the target's passes (after the prompt's)."""
    s = result.stats
    evaluated = s.n_prompt_tokens - s.n_cached_tokens
    prompt_ms, predicted_ms = 1e3 * s.prompt_seconds, 1e3 * s.generation_seconds
    timings = {
        "cache_n": s.n_cached_tokens,
        "prompt_n": evaluated,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / evaluated if evaluated else 0.0,
        "prompt_per_second": s.prompt_tokens_per_second,
        "predicted_n": s.n_generated,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / s.n_generated if s.n_generated else 0.0,
        "predicted_per_second": s.tokens_per_second,
        "draft_n": s.n_drafted,
        "draft_n_accepted": s.n_accepted,
    }
    return {"timings": timings, "drafters": s.drafters, "target_passes": s.n_target_passes}
