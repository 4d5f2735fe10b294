"""llama-server's own endpoints as specframe serves them: what editors and llama.cpp's clients send to /infill,
/completion, /tokenize, /detokenize and /apply-template, and the native responses they read.

Bodies are validated as strictly as the OpenAI ones (protocol.py): every field declared and typed. A sampler chain
(``samplers``, names or llama.cpp's letters) chooses which of specframe's transforms apply, in llama.cpp's default
order; one left out is off (a chain without ``temperature`` draws at temperature 1, as llama.cpp's does) unless
the body sets it (llama.vim's warm-ups send ``"samplers": []`` with ``"temperature": 0``). dry,
typ_p, xtc and top_n_sigma are accepted as the no-ops their default settings make them; adaptive_p is refused.

``t_max_prompt_ms`` is accepted and, as by llama-server, not applied: the prompt is always evaluated whole, since a
completion given up for a slow prompt would leave a CPU user's editor without any (docs/design.md, editors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from specframe.params import INT32_MAX
from specframe.results import GenerationResult
from specframe.sequence import EditorLimits
from specframe.serve.protocol import FieldError, Message, _Request, _Strict, statistics

# The transforms specframe applies, in the order it applies them (llama.cpp's default chain, infill last).
CHAIN = ("penalties", "top_k", "top_p", "min_p", "temperature", "infill")
NO_OPS = frozenset({"dry", "typ_p", "xtc", "top_n_sigma"})   # off at their llama-server defaults
SAMPLER_NAMES = {name: name for name in (*CHAIN, *NO_OPS, "adaptive_p")} | {
    "top-k": "top_k", "topk": "top_k", "top-p": "top_p", "topp": "top_p", "nucleus": "top_p", "min-p": "min_p",
    "minp": "min_p", "temp": "temperature", "typ-p": "typ_p", "typp": "typ_p", "typ": "typ_p",
    "typical_p": "typ_p", "top-n-sigma": "top_n_sigma", "topnsigma": "top_n_sigma", "adaptive-p": "adaptive_p",
    "adaptivep": "adaptive_p"}
SAMPLER_LETTERS = {"d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p",
                   "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties", "a": "adaptive_p"}
OFF: dict[str, dict[str, Any]] = {   # each transform's settings that turn it off
    "penalties": {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0},
    "top_k": {"top_k": 0}, "top_p": {"top_p": 1.0}, "min_p": {"min_p": 0.0}, "temperature": {"temperature": 1.0},
    "infill": {"infill": False}}

# llama-server's stop_type: why a completion ended.
STOP_TYPES = {"eog": "eos", "stop": "word", "max_tokens": "limit", "limit": "limit", "context_full": "limit",
              "interrupted": "limit", "cancelled": "limit", "error": "none"}


def sampler_chain(samplers: list[str] | str) -> dict[str, Any]:
    """The sampling overrides a llama.cpp sampler chain stands for; FieldError names a chain specframe cannot
    apply as asked."""
    given = list(samplers) if isinstance(samplers, list) else [SAMPLER_LETTERS.get(c, c) for c in samplers]
    names = []
    for name in given:
        canonical = SAMPLER_NAMES.get(name.lower())
        if canonical is None:
            raise FieldError("samplers", f"{name!r} is not a llama.cpp sampler; expected names among "
                                         f"{', '.join(CHAIN + tuple(sorted(NO_OPS)))} (or their letters)")
        if canonical == "adaptive_p":
            raise FieldError("samplers", "adaptive_p is not served; specframe draws from the chain's distribution")
        if canonical not in NO_OPS:
            names.append(canonical)
    positions = [CHAIN.index(name) for name in names]
    if positions != sorted(set(positions)):
        raise FieldError("samplers", f"specframe applies {', '.join(CHAIN)} in that order, each once; got "
                                     f"{', '.join(names)}")
    overrides: dict[str, Any] = {"infill": "infill" in names}
    for name in CHAIN:
        if name not in names:
            overrides |= OFF[name]
    return overrides


class _NativeRequest(_Request):
    """What /completion and /infill share (llama-server's completion parameters)."""

    n_predict: int | None = Field(None, ge=-1, le=INT32_MAX)     # -1: until the end of generation or the context
    cache_prompt: bool = True
    id_slot: int = Field(-1, ge=-1)
    samplers: list[str] | str | None = None
    response_fields: list[str] | None = None
    return_tokens: bool = False
    n_indent: int = Field(0, ge=0, le=INT32_MAX)
    t_max_prompt_ms: int = Field(-1, ge=-1, le=INT32_MAX)   # accepted and not applied, as by llama-server (docs)
    t_max_predict_ms: int = Field(-1, ge=-1, le=INT32_MAX)
    mirostat: int = Field(0, ge=0, le=0)       # llama.cpp's mirostat is not served: only 0 (off)

    def options(self) -> dict:
        if self.n_predict is not None and self.max_tokens is not None:
            raise FieldError("n_predict", "give n_predict or max_tokens, not both")
        options = super().options()
        if self.n_predict is not None:
            options["max_tokens"] = INT32_MAX if self.n_predict == -1 else self.n_predict
        if self.samplers is not None:   # a setting given in the body stands, whatever the chain leaves out
            options |= {key: value for key, value in sampler_chain(self.samplers).items()
                        if key not in self.model_fields_set}
        options["limits"] = EditorLimits(self.n_indent, max(0, self.t_max_predict_ms))
        return options

    @property
    def slot(self) -> int | None:
        return None if self.id_slot < 0 else self.id_slot


class CompletionBody(_NativeRequest):
    """POST /completion: a raw prompt, text or token ids."""

    prompt: str | list[int] = Field(min_length=1)


class ExtraChunkIn(_Strict):
    text: str
    filename: str = "tmp"
    time: Any = None          # llama.vim stamps its chunks; the time plays no part in the prompt


class InfillBody(_NativeRequest):
    """POST /infill: the text around the cursor, the line typed so far and chunks of other files."""

    input_prefix: str
    input_suffix: str
    input_extra: list[ExtraChunkIn] = []
    prompt: str = ""


class TokenizeBody(_Strict):
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeBody(_Strict):
    tokens: list[int]


class ApplyTemplateBody(_Strict):
    messages: list[Message] = Field(min_length=1)


@dataclass(frozen=True)
class NativeAnswer:
    """llama-server's native completion objects (not OpenAI's), whole or as stream chunks, cut to
    ``response_fields`` (slash paths such as timings/prompt_n) when the request names them."""

    model: str
    fields: list[str] | None
    return_tokens: bool
    prompt: str = ""             # the prompt as text (the infill layout spelt out)
    settings: dict | None = None  # the request's generation settings, echoed

    def chunk(self, text: str, tokens: list[int], slot: int, n_predicted: int, n_prompt: int) -> dict:
        return self._cut({"index": 0, "content": text, "tokens": tokens if self.return_tokens else [],
                          "stop": False, "id_slot": slot, "tokens_predicted": n_predicted,
                          "tokens_evaluated": n_prompt})

    def whole(self, result: GenerationResult, slot: int, streamed: bool = False) -> dict:
        """The response, or a stream's last chunk (``streamed``: its text and tokens went in the chunks before,
        as llama-server sends it)."""
        s = result.stats
        return self._cut({
            "index": 0, "content": "" if streamed else result.text,
            "tokens": result.tokens if self.return_tokens and not streamed else [],
            "id_slot": slot, "stop": True, "model": self.model, "tokens_predicted": s.n_generated,
            "tokens_evaluated": s.n_prompt_tokens, "generation_settings": self.settings or {}, "prompt": self.prompt,
            "has_new_line": "\n" in result.text, "truncated": False, "stop_type": STOP_TYPES[result.stop_reason],
            "stopping_word": result.stop_word, "tokens_cached": s.n_prompt_tokens + s.n_generated,
        } | statistics(result))

    def _cut(self, response: dict) -> dict:
        if not self.fields:
            return response
        picked = {}
        for path in self.fields:
            value: Any = response
            for key in path.split("/"):
                if not isinstance(value, dict) or key not in value:
                    break
                value = value[key]
            else:
                picked[path] = value
        return picked
