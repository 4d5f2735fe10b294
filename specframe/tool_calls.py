"""Tool calls in the text a model writes, in the Hermes / Qwen2.5 format: each call a JSON object
``{"name": ..., "arguments": {...}}`` between markers (``<tool_call>`` and ``</tool_call>``), possibly several,
possibly after some content.

``split_tool_calls`` reads a whole answer; ``ToolCallStream`` reads it as it streams and gives the same content and
calls (streamed == non-streamed, which the OpenAI clients rely on when they assemble a streamed answer). A block
that is not a call (its JSON does not parse, or names no function) is content, never an error: the model's text
reaches the user either way.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One call: ``arguments`` is JSON text, as the OpenAI API carries it."""

    id: str
    name: str
    arguments: str

    def as_openai(self) -> dict:
        """The call as an OpenAI ``tool_calls`` entry."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def new_call_id() -> str:
    """An id like OpenAI's: clients pair a ``tool`` message with its call by it, so it must be unique."""
    return "call_" + secrets.token_hex(12)


def parse_call(body: str) -> ToolCall | None:
    """The call that a block's text (between the markers) encodes, or None where it is not one.

    ``arguments`` may be missing (no arguments) or written as a JSON string holding the object; either way the call
    carries the object's JSON text."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments: Any = value.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    return ToolCall(new_call_id(), value["name"], json.dumps(arguments, ensure_ascii=False))


_BARE_CALL = re.compile(r"\A\s*(?:```(?:json)?\s*)?(\{.*\})\s*(?:```)?\s*\Z", re.S)


def bare_call(text: str, names: Collection[str]) -> ToolCall | None:
    """The call an answer is when it is nothing but a call's JSON object naming one of ``names``, bare or in a
    code fence: how small models often write one, ignoring their template's markers."""
    match = _BARE_CALL.match(text) if names else None
    call = parse_call(match[1]) if match else None
    return call if call is not None and call.name in names else None


def split_tool_calls(text: str, markers: tuple[str, str],
                     names: Collection[str] = ()) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a whole answer. The content is the text outside the calls (before, between and after
    them; blocks that are not calls included), stripped; None when it is empty and there are calls, as OpenAI
    answers. A call left open at the end (the model stopped after its JSON) counts where its JSON is complete. An
    answer that is a bare call to one of ``names`` (``bare_call``) is that call."""
    bare = bare_call(text, names)
    if bare is not None:
        return None, [bare]
    opening, closing = markers
    content: list[str] = []
    calls: list[ToolCall] = []
    position = 0
    while True:
        start = text.find(opening, position)
        if start < 0:
            content.append(text[position:])
            break
        content.append(text[position:start])
        body_start = start + len(opening)
        end = text.find(closing, body_start)
        block_end = len(text) if end < 0 else end + len(closing)
        call = parse_call(text[body_start:len(text) if end < 0 else end])
        if call is None:
            content.append(text[start:block_end])
        else:
            calls.append(call)
        if end < 0:
            break
        position = block_end
    joined = "".join(content).strip()
    return (None if not joined and calls else joined), calls


class ToolCallStream:
    """``split_tool_calls`` for text that arrives in pieces: content is given as soon as it cannot be part of a
    call, each call as soon as its closing marker arrives.

    Held back: text that may be the start of an opening marker, a call's text until it closes, and whitespace that
    may turn out to be the content's end (``split_tool_calls`` strips it): the content given, joined, is exactly
    ``split_tool_calls``'s (or "" for its None), and the calls are the same, in order, for any split into pieces.
    """

    def __init__(self, markers: tuple[str, str], names: Collection[str] = ()):
        self.opening, self.closing = markers
        self._names = names
        self._maybe_bare: str | None = "" if names else None   # the answer so far, while it may be a bare call
        self._buffer = ""          # text not yet given: a possible marker start, or the open call's body
        self._in_call = False
        self._scanned = 0          # how much of an open call's body holds no closing marker
        self._started = False      # whether content other than whitespace was given (leading whitespace is cut)
        self._whitespace = ""      # whitespace after the last content given: given only if more content follows

    def feed(self, piece: str) -> list[str | ToolCall]:
        """What can be given after ``piece``: content text and completed calls, in order."""
        if self._maybe_bare is not None:       # held whole while it may be a bare call (bare_call)
            self._maybe_bare += piece
            first = self._maybe_bare.lstrip()[:1]
            if not first or first in "`{":
                return []
            piece, self._maybe_bare = self._maybe_bare, None
        events: list[str | ToolCall] = []
        self._buffer += piece
        while True:
            if self._in_call:
                end = self._buffer.find(self.closing, self._scanned)
                if end < 0:
                    self._scanned = max(0, len(self._buffer) - len(self.closing) + 1)
                    break
                self._close_call(self._buffer[:end], self.closing, events)
                self._buffer = self._buffer[end + len(self.closing):]
                continue
            start = self._buffer.find(self.opening)
            if start >= 0:
                self._content(self._buffer[:start], events)
                self._buffer = self._buffer[start + len(self.opening):]
                self._in_call, self._scanned = True, 0
                continue
            keep = _marker_start(self._buffer, self.opening)
            self._content(self._buffer[:len(self._buffer) - keep], events)
            self._buffer = self._buffer[len(self._buffer) - keep:]
            break
        return events

    def finish(self) -> list[str | ToolCall]:
        """What is left at the end of the answer: a call left open counts where its JSON is complete; the rest is
        content (but trailing whitespace)."""
        if self._maybe_bare is not None:
            answer, self._maybe_bare = self._maybe_bare, None
            bare = bare_call(answer, self._names)
            if bare is not None:
                return [bare]
            return self.feed(answer) + self.finish()
        events: list[str | ToolCall] = []
        if self._in_call:
            self._close_call(self._buffer, "", events)
        else:
            self._content(self._buffer, events)
        self._buffer = ""
        self._whitespace = ""
        return events

    def _close_call(self, body: str, closing: str, events: list[str | ToolCall]) -> None:
        self._in_call = False
        call = parse_call(body)
        if call is None:
            self._content(self.opening + body + closing, events)
        else:
            events.append(call)

    def _content(self, text: str, events: list[str | ToolCall]) -> None:
        if not self._started:
            text = text.lstrip()
            if not text:
                return
            self._started = True
        kept = text.rstrip()
        if kept:
            events.append(self._whitespace + kept)
            self._whitespace = text[len(kept):]
        else:
            self._whitespace += text


def _marker_start(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that begins ``marker`` (shorter than it): text to hold back."""
    for length in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0
