"""The grammar of the tool calls a model may write, in the Hermes / Qwen2.5 format (tool_calls.py reads them).

Each call is ``<tool_call>`` then ``\\n{"name": ..., "arguments": {...}}\\n`` then ``</tool_call>``, the object held
to one of the offered functions: its name, and its ``parameters`` schema for the arguments. With tool_choice
``auto`` the grammar is lazy (llama.cpp's lazy grammars): the model writes freely until it emits the opening
marker, and from there on only calls; with ``required`` (or a named function) the output is calls from its
first token. After the last call only the end of the turn may come.
"""

from __future__ import annotations

import json

from specframe.grammar import JSON_STYLE, GrammarSpec


def call_grammar(functions: list[dict], opening: int, closing: int, required: bool, parallel: bool) -> GrammarSpec:
    """The grammar of calls to ``functions`` (OpenAI function objects: name, parameters), between the marker
    tokens ``opening`` and ``closing``; ``required``: a call must come first; ``parallel``: several may come."""
    calls = {"anyOf": [{"type": "object",
                        "properties": {"name": {"const": f["name"]},
                                       "arguments": f.get("parameters") or {"type": "object"}},
                        "required": ["name", "arguments"], "additionalProperties": False} for f in functions],
             "x-guidance": JSON_STYLE}
    more = f' (<[{closing}]> "\\n" <[{opening}]> call)*' if parallel else ""
    lark = (f"start: {f'<[{opening}]> ' if required else ''}call{more} <[{closing}]>\n"
            f'call: "\\n" %json {json.dumps(calls)} "\\n"\n')
    return GrammarSpec("lark", lark, () if required else (opening,))
