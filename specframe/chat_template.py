"""A model's own Jinja chat template (the GGUF's ``tokenizer.chat_template``), rendered with jinja2 as Hugging Face
transformers renders it.

llama.cpp's ``llama_chat_apply_template`` knows a fixed set of templates by their look and takes (role, text) pairs
only: it cannot pass ``tools``, nor an assistant's ``tool_calls`` or a ``tool`` message's id. Rendering the template
itself gives every model its tools and calls in its own format (Qwen2.5's ``<tool_call>`` blocks), and the same text
the model was trained on, since transformers' conventions are what the template authors wrote against: a sandboxed
environment with ``trim_blocks`` and ``lstrip_blocks``, loop controls, a ``tojson`` that does not escape HTML, the
``raise_exception`` and ``strftime_now`` globals, and the variables ``messages``, ``tools``,
``add_generation_prompt``, ``bos_token`` and ``eos_token``.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox

from specframe.errors import ModelError, printable

TOOL_CALL_MARKERS = ("<tool_call>", "</tool_call>")


class TemplateRaised(Exception):
    """What a template's ``raise_exception(message)`` raises: the template's own refusal, reported as it words it."""


def _raise_exception(message: object) -> NoReturn:
    raise TemplateRaised(str(message))


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    """json.dumps: jinja2's own ``tojson`` escapes ``<``, ``>``, ``&`` and ``'`` for HTML, which would change the
    tool schemas and call arguments the model reads."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    """Today's date in the template's format (Llama 3's templates put it in the system prompt)."""
    return datetime.datetime.now().strftime(format)


class _GenerationTags(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``, which some templates wrap the assistant's part in (transformers
    uses it to mark the tokens to train on): rendered as its body, so that such templates compile."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[jinja2.nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _GenerationTags])
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return printable(text)


class ChatTemplate:
    """A chat template compiled once, rendered per request."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        """``bos_token`` / ``eos_token``: the text of the model's BOS and EOS tokens, which templates may write."""
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        environment = _environment()
        try:
            self._ast = environment.parse(source)
            self._template = environment.from_string(self._ast)
        except jinja2.TemplateSyntaxError as e:
            raise ModelError(f"the model's chat template does not compile in jinja2: {_one_line(e)} "
                             f"(template line {e.lineno})") from None
        except jinja2.TemplateError as e:
            raise ModelError(f"the model's chat template does not compile in jinja2: {_one_line(e)}") from None

    @property
    def uses_tools(self) -> bool:
        """Whether the template reads ``tools`` at all: one that does not would silently drop them."""
        return "tools" in jinja2.meta.find_undeclared_variables(self._ast)

    @property
    def tool_call_markers(self) -> tuple[str, str] | None:
        """The markers around a call the model writes, where the template shows that format (Hermes, Qwen2.5:
        ``<tool_call>`` / ``</tool_call>``); None for formats not known here."""
        return TOOL_CALL_MARKERS if TOOL_CALL_MARKERS[0] in self.source else None

    def render(self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = True,
               **extra: Any) -> str:
        """The prompt text for ``messages`` (OpenAI chat messages) and ``tools`` (the OpenAI ``tools`` list, passed
        as transformers passes it). ``extra``: more template variables (e.g. ``enable_thinking``)."""
        variables = {"bos_token": self.bos_token, "eos_token": self.eos_token, **extra,
                     "messages": [_prepared(m) for m in messages], "tools": tools,
                     "add_generation_prompt": add_generation_prompt}
        try:
            return self._template.render(variables)
        except TemplateRaised as e:
            raise ModelError(f"the model's chat template refused the messages: {_one_line(e)}") from None
        except Exception as e:  # the template is the model's code: whatever it trips on is a template error
            raise ModelError(f"the model's chat template failed on the messages: {type(e).__name__}: "
                             f"{_one_line(e)}") from None


def _prepared(message: dict) -> dict:
    """The message as templates expect it (a copy; the caller's is untouched): ``developer`` is ``system`` (the
    templates predate it), and a call's ``arguments`` JSON text is the object it encodes, since templates write it
    with ``tojson`` (left as the text when it does not parse)."""
    prepared = dict(message)
    if prepared.get("role") == "developer":
        prepared["role"] = "system"
    calls = prepared.get("tool_calls")
    if isinstance(calls, list):
        prepared["tool_calls"] = [_prepared_call(call) for call in calls]
    return prepared


def _prepared_call(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    function = call["function"]
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return call
    return {**call, "function": {**function, "arguments": arguments}}
