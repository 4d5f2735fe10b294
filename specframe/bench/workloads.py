"""Benchmark workloads: a real prompt each, with a fixed token budget.

The built-in ones cover what speculation is asked to speed up: rewriting given code (drafts come from the
prompt), answering by quoting a given passage, writing new code, and open prose (little to copy); they are the
default set. The structured ones constrain the answer: a JSON record of 14 fields extracted from a paragraph (a
JSON schema), and a tool call (the tools shown by the chat template, the call held to its function's schema).
Users name their own prompt files instead; a file's budget is the ``--max-tokens`` of the run.

Sessions (``bench --session``) are conversations in which later requests repeat earlier text, as a server sees
them: an agent rewriting one module turn after turn, questions about a document after its summary, a plan followed
by its implementation and a review of it. A session file (TOML, sessions/) gives the system prompt, the user's
turns and each turn's token budget; the assistant's answers are the model's own, so the conversation is made as
it runs.
"""

from __future__ import annotations

import json
import pathlib
import sys
from dataclasses import dataclass

from specframe.errors import SpecframeError
from specframe.files import read_text

if sys.version_info >= (3, 11):
    import tomllib
else:   # pragma: no cover - Python 3.10
    import tomli as tomllib

PROMPTS = pathlib.Path(__file__).resolve().parent / "prompts"
SESSIONS = pathlib.Path(__file__).resolve().parent / "sessions"


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


@dataclass(frozen=True)
class Turn:
    user: str          # the user's message
    max_tokens: int    # the answer's token budget


@dataclass(frozen=True)
class Session:
    """A conversation to replay: each turn's request carries the earlier turns and the model's answers to them."""
    name: str
    system: str | None
    turns: tuple[Turn, ...]


BUILTIN_SESSIONS = ("agent-loop", "document-qa", "plan-code-review")   # sessions/NAME.toml


def session(spec: str, max_tokens: int | None = None) -> Session:
    """A built-in session by name, or a session file (its name is the file's stem); ``max_tokens`` replaces every
    turn's budget."""
    path = SESSIONS / f"{spec}.toml" if spec in BUILTIN_SESSIONS else pathlib.Path(spec).expanduser()
    if not path.is_file():
        raise SpecframeError(f"session {spec!r}: neither a built-in session ({', '.join(BUILTIN_SESSIONS)}) nor a "
                             "session file")
    try:
        data = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise SpecframeError(f"session {path}: not TOML ({exc})") from None
    return _session(path, data, max_tokens)


def sessions(specs=(), max_tokens: int | None = None) -> list[Session]:
    """The named sessions, or the built-in ones."""
    return [session(spec, max_tokens) for spec in (specs or BUILTIN_SESSIONS)]


def _session(path: pathlib.Path, data: dict, max_tokens: int | None) -> Session:
    """A session file's contents checked: ``system`` (optional text), ``max_tokens`` (each turn's budget unless
    the turn sets its own) and ``[[turn]]`` tables of ``user`` text and an optional ``max_tokens``."""
    def fault(field: str, problem: str) -> SpecframeError:
        return SpecframeError(f"session {path}: {field}: {problem}")

    def budget(value, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise fault(field, f"expected a whole number of tokens >= 1, got {value!r}")
        return value

    unknown = set(data) - {"system", "max_tokens", "turn"}
    if unknown:
        raise fault(sorted(unknown)[0], "unknown key (expected system, max_tokens and [[turn]] tables)")
    system = data.get("system")
    if system is not None and (not isinstance(system, str) or not system.strip()):
        raise fault("system", "expected non-empty text")
    default = budget(data["max_tokens"], "max_tokens") if "max_tokens" in data else None
    tables = data.get("turn")
    if not isinstance(tables, list) or not tables:
        raise fault("turn", "expected one or more [[turn]] tables")
    turns = []
    for number, table in enumerate(tables, 1):
        where = f"turn {number}"
        unknown = set(table) - {"user", "max_tokens"}
        if unknown:
            raise fault(f"{where}.{sorted(unknown)[0]}", "unknown key (expected user and max_tokens)")
        user = table.get("user")
        if not isinstance(user, str) or not user.strip():
            raise fault(f"{where}.user", "expected the user's message, non-empty text")
        if "max_tokens" in table:
            own = budget(table["max_tokens"], f"{where}.max_tokens")
        elif default is not None:
            own = default
        else:
            raise fault(f"{where}.max_tokens", "missing (and the session sets no max_tokens for every turn)")
        turns.append(Turn(user, max_tokens or own))
    return Session(path.stem, system, tuple(turns))
