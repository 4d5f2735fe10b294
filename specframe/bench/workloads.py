"""Benchmark workloads: a real prompt each, with a fixed token budget.

The built-in ones cover what speculation is asked to speed up: rewriting given code (drafts come from the
prompt), answering by quoting a given passage, writing new code, and open prose (little to copy); they are the
default set. The structured ones constrain the answer: a JSON record of 14 fields extracted from a paragraph (a
JSON schema), and a tool call (the tools shown by the chat template, the call held to its function's schema).
Users name their own prompt files instead; a file's budget is the ``--max-tokens`` of the run.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

from specframe.errors import SpecframeError

PROMPTS = pathlib.Path(__file__).resolve().parent / "prompts"


@dataclass(frozen=True)
class Workload:
    name: str
    prompt: str
    max_tokens: int
    schema: dict | None = None    # the JSON schema the answer is held to
    tools: list | None = None     # the tools offered (OpenAI's objects): the answer is held to calls of them


BUILTIN: dict[str, tuple[str, int]] = {      # name -> (prompt file, token budget): the default set
    "code-editing": ("code_editing.txt", 256),
    "quoting": ("quoting.txt", 128),
    "code-generation": ("code_generation.txt", 192),
    "open-prose": ("open_prose.txt", 192),
}
STRUCTURED: dict[str, tuple[str, int, str]] = {   # name -> (prompt file, token budget, schema or tools file)
    "json-extraction": ("json_extraction.txt", 256, "json_extraction.schema.json"),
    "tool-call": ("tool_call.txt", 160, "tool_call.tools.json"),
}


def workload(spec: str, max_tokens: int | None = None) -> Workload:
    """A built-in workload by name, or a prompt file (its name is the file's stem)."""
    if spec in BUILTIN:
        filename, budget = BUILTIN[spec]
        return Workload(spec, (PROMPTS / filename).read_text(encoding="utf-8"), max_tokens or budget)
    if spec in STRUCTURED:
        filename, budget, constraint = STRUCTURED[spec]
        held = json.loads((PROMPTS / constraint).read_text(encoding="utf-8"))
        return Workload(spec, (PROMPTS / filename).read_text(encoding="utf-8"), max_tokens or budget,
                        held if isinstance(held, dict) else None, held if isinstance(held, list) else None)
    path = pathlib.Path(spec).expanduser()
    if not path.is_file():
        raise SpecframeError(f"workload {spec!r}: neither a built-in workload ({', '.join([*BUILTIN, *STRUCTURED])}) "
                             "nor a prompt file")
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise SpecframeError(f"workload {spec!r}: the prompt file is empty")
    return Workload(path.stem, text, max_tokens or 192)


def workloads(specs=(), max_tokens: int | None = None) -> list[Workload]:
    """The named workloads, or the default set (BUILTIN)."""
    return [workload(spec, max_tokens) for spec in (specs or BUILTIN)]
