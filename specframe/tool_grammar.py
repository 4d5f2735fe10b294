"""The grammar of the tool calls a model may write, in the Hermes / Qwen2.5 format (tool_calls.py reads them).

Each call is ``<tool_call>`` then ``\\n{"name": ..., "arguments": {...}}\\n`` then ``</tool_call>``, the object held
to one of the offered functions: its name, and its ``parameters`` schema for the arguments. With tool_choice
``auto`` the grammar is lazy (as llama.cpp's lazy grammars): the model writes freely until it opens a call, and
from there on only calls. It opens one with the marker, or, as small models often do, by answering with the
call's object alone, bare or in a code fence (``{"name": "get_weather", ...``, whitespace as it likes): a pattern
on the answer's start that names an offered function triggers the grammar then. With ``required`` (or a named
function) the output is calls from its first token. After the last call only the end of the turn may come.
"""

from __future__ import annotations

import json
import re

from specframe.grammar import JSON_STYLE, GrammarSpec

FREE_WHITESPACE = {"whitespace_flexible": True}


def call_grammar(functions: list[dict], opening: int, closing: int, required: bool, parallel: bool) -> GrammarSpec:
    """The grammar of calls to ``functions`` (OpenAI function objects: name, parameters), between the marker
    tokens ``opening`` and ``closing``; ``required``: a call must come first; ``parallel``: several may come."""
    more = f' (<[{closing}]> "\\n" <[{opening}]> call)*' if parallel else ""
    rules = [f"tagged: <[{opening}]> call{more} <[{closing}]>",
             f'call: "\\n" %json {json.dumps(_calls(functions, JSON_STYLE))} "\\n"']
    if required:
        return GrammarSpec("lark", "\n".join(["start: tagged", *rules]) + "\n")
    names = "|".join(re.escape(f["name"]) for f in functions)
    bare = f'bare: /[^{{]*/ %json {json.dumps(_calls(functions, FREE_WHITESPACE))} /[ \\t\\r\\n]*(```[ \\t\\r\\n]*)?/'
    pattern = r'\A\s*(?:```(?:json)?\s*)?\{\s*"name"\s*:\s*"(?:' + names + ')"'
    return GrammarSpec("lark", "\n".join(["start: tagged | bare", *rules, bare]) + "\n", (opening,), pattern)


def _calls(functions: list[dict], style: dict) -> dict:
    """The JSON schema of one call to any of ``functions``."""
    return {"anyOf": [{"type": "object",
                       "properties": {"name": {"const": f["name"]},
                                      "arguments": f.get("parameters") or {"type": "object"}},
                       "required": ["name", "arguments"], "additionalProperties": False} for f in functions],
            "x-guidance": style}
