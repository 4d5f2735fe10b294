"""Benchmark workloads: a real prompt each, with a fixed token budget.

The built-in ones cover what speculation is asked to speed up: rewriting given code (drafts come from the
prompt), answering by quoting a given passage, writing new code, and open prose (little to copy). Users name
their own prompt files instead; a file's budget is the ``--max-tokens`` of the run.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from specframe.errors import SpecframeError

PROMPTS = pathlib.Path(__file__).resolve().parent / "prompts"


@dataclass(frozen=True)
class Workload:
    name: str
    prompt: str
    max_tokens: int


BUILTIN: dict[str, tuple[str, int]] = {      # name -> (prompt file, token budget)
    "code-editing": ("code_editing.txt", 256),
    "quoting": ("quoting.txt", 128),
    "code-generation": ("code_generation.txt", 192),
    "open-prose": ("open_prose.txt", 192),
}


def workload(spec: str, max_tokens: int | None = None) -> Workload:
    """A built-in workload by name, or a prompt file (its name is the file's stem)."""
    if spec in BUILTIN:
        filename, budget = BUILTIN[spec]
        return Workload(spec, (PROMPTS / filename).read_text(encoding="utf-8"), max_tokens or budget)
    path = pathlib.Path(spec).expanduser()
    if not path.is_file():
        raise SpecframeError(f"workload {spec!r}: neither a built-in workload ({', '.join(BUILTIN)}) "
                             "nor a prompt file")
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise SpecframeError(f"workload {spec!r}: the prompt file is empty")
    return Workload(path.stem, text, max_tokens or 192)


def workloads(specs=(), max_tokens: int | None = None) -> list[Workload]:
    """The named workloads, or all built-in ones."""
    return [workload(spec, max_tokens) for spec in (specs or BUILTIN)]
