"""The OpenAI API as specframe serves it: request bodies (validated by pydantic) and the responses built for them.

Sampling fields are OpenAI's and llama-server's (``top_k``, ``min_p``, ``repeat_penalty``, ``repeat_last_n``), with
[sampling]'s meanings and bounds. Fields clients commonly send and specframe has no use for (``user``, ...) are
ignored; fields it cannot honour are refused with a 400 that names them (``n`` above 1). Responses carry
llama-server's ``timings`` and specframe's per-drafter counters (``drafters``) beside OpenAI's fields.
"""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specframe.params import INT32_MAX
from specframe.results import GenerationResult
from specframe.sampling import SAMPLING_KEYS

# How a request ended, as OpenAI names it: the model finished (or a stop string), or the answer was cut short.
FINISH_REASONS = {"eog": "stop", "stop": "stop", "max_tokens": "length", "context_full": "length",
                  "interrupted": "length", "cancelled": "length"}


class StreamOptions(BaseModel):
    include_usage: bool = False


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
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

    @property
    def stops(self) -> list[str] | None:
        return [self.stop] if isinstance(self.stop, str) else self.stop

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def options(self) -> dict:
        """The engine's options for this request; None leaves the config's."""
        sampling = {key: getattr(self, key) for key in SAMPLING_KEYS}
        return sampling | {"max_tokens": self.max_tokens, "stop": self.stops}


class ChatCompletionRequest(_Request):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)

    def options(self) -> dict:
        return super().options() | {"max_tokens": self.max_completion_tokens or self.max_tokens}


class CompletionRequest(_Request):
    prompt: str | list[str] = Field(min_length=1)   # a list holds exactly one prompt: n > 1 is not served

    @property
    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error object."""
    error_type = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            503: "unavailable_error"}.get(status, "server_error")
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


class Answer:
    """The response objects of one request, OpenAI's chat or completion shape, as a whole or as stream chunks."""

    def __init__(self, chat: bool, model: str):
        self.chat = chat
        self.model = model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    def _head(self, chunk: bool) -> dict:
        object_name = self.object + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": object_name, "created": self.created, "model": self.model}

    def whole(self, result: GenerationResult) -> dict:
        choice = {"index": 0, "finish_reason": FINISH_REASONS[result.stop_reason], "logprobs": None}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": result.text}
        else:
            choice["text"] = result.text
        return self._head(False) | {"choices": [choice], "usage": usage(result)} | statistics(result)

    def first_chunk(self) -> dict:
        """Chat streams open with the assistant's role."""
        return self._chunk({"role": "assistant", "content": ""}, None)

    def text_chunk(self, text: str) -> dict:
        return self._chunk({"content": text} if self.chat else text, None)

    def last_chunk(self, result: GenerationResult) -> dict:
        return self._chunk({} if self.chat else "", FINISH_REASONS[result.stop_reason]) | statistics(result)

    def usage_chunk(self, result: GenerationResult) -> dict:
        return self._head(True) | {"choices": [], "usage": usage(result)}

    def _chunk(self, delta, finish_reason: str | None) -> dict:
        choice = {"index": 0, "finish_reason": finish_reason, "logprobs": None}
        choice |= {"delta": delta} if self.chat else {"text": delta}
        return self._head(True) | {"choices": [choice]}


def usage(result: GenerationResult) -> dict:
    s = result.stats
    return {"prompt_tokens": s.n_prompt_tokens, "completion_tokens": s.n_generated,
            "total_tokens": s.n_prompt_tokens + s.n_generated,
            "prompt_tokens_details": {"cached_tokens": s.n_cached_tokens}}


def statistics(result: GenerationResult) -> dict:
    """llama-server's ``timings`` and specframe's per-drafter counters."""
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
    return {"timings": timings, "drafters": s.drafters}
