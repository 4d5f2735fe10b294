"""Constrained generation: a request's output held to a grammar, with one llguidance matcher per sequence.

A grammar is GBNF (llama.cpp's), Lark (llguidance's), a JSON schema or a regular expression. The target's choice
at every position, verified or not, is made under the grammar state after the history and the draft tokens
before it (sampling.verify), so constrained output is the same with and without drafts, and rejection sampling
stays exact over the constrained distribution. Drafts are cut before verification at their first token the
grammar forbids (drafting.chain), and the ``grammar`` drafter drafts what the grammar forces.

Why llguidance (docs/design.md, constrained generation): its matcher checks a token in microseconds, so a greedy
position needs the whole vocabulary's mask only where the target's best token is forbidden, and it computes a
mask over Qwen's 152k tokens in well under a millisecond where libllama's grammar sampler walks every candidate.

A lazy grammar (``triggers``) constrains nothing until one of its trigger tokens is emitted, then the rest of the
output: a tool call's arguments are held to the function's schema from the token that opens the call.
"""

from __future__ import annotations

import json
import os
import pathlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specframe.errors import ParamError, SpecframeError

if TYPE_CHECKING:
    from specframe.llama import Vocab
    from specframe.sampling import SamplingParams

GRAMMAR_KINDS = ("gbnf", "lark", "json_schema", "regex")
GRAMMAR_KEYS = frozenset({"grammar", "grammar_file", "json_schema"})   # the [sampling] settings that set one
# JSON as json.dumps writes it: one separator each, no free whitespace, so that keys and punctuation are forced.
JSON_STYLE = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}
NO_TOKENS = np.empty(0, dtype=np.int32)


class GrammarError(SpecframeError):
    """A grammar that cannot be compiled, or one a request cannot use."""


@dataclass(frozen=True)
class GrammarSpec:
    """What constrains an output: ``text`` of a ``kind`` (GRAMMAR_KINDS); ``triggers``: token ids that start it
    (a lazy grammar), none to constrain from the first token."""

    kind: str
    text: str
    triggers: tuple[int, ...] = ()

    @classmethod
    def json_schema(cls, schema: Any) -> "GrammarSpec":
        """A JSON schema given as an object or as JSON text; True or {} allows any JSON object."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise GrammarError(f"the JSON schema is not valid JSON: {exc}") from None
        if schema is True or schema == {}:
            schema = {"type": "object"}
        if not isinstance(schema, dict):
            raise GrammarError(f"a JSON schema is an object, got {type(schema).__name__}")
        return cls("json_schema", json.dumps(schema))

    def source(self) -> str:
        """The grammar in llguidance's form; GrammarError names what is wrong with it."""
        from llguidance import LLMatcher, grammar_from

        try:
            if self.kind == "json_schema":
                source = LLMatcher.grammar_from_json_schema(self.text, defaults=JSON_STYLE)  # type: ignore[arg-type]
            elif self.kind in GRAMMAR_KINDS:
                source = grammar_from(self.kind, self.text)   # type: ignore[arg-type]
            else:
                raise GrammarError(f"grammar kind {self.kind!r}: expected one of {', '.join(GRAMMAR_KINDS)}")
        except ValueError as exc:
            raise GrammarError(_one_line(exc)) from None
        problem = LLMatcher.validate_grammar(source)
        if problem:
            raise GrammarError(_one_line(problem))
        return source


def sampling_grammar(params: "SamplingParams", directory: pathlib.Path) -> GrammarSpec | None:
    """The grammar [sampling] sets (``grammar``, ``grammar_file`` or ``json_schema``), files read from
    ``directory``; a ParamError names the key at fault."""
    given = sorted(key for key in GRAMMAR_KEYS if getattr(params, key))
    if len(given) > 1:
        raise ParamError(given[1], f"give one of grammar, grammar_file and json_schema, not {' and '.join(given)}")
    if not given:
        return None
    key = given[0]
    value: str = getattr(params, key)
    try:
        if key == "grammar":
            spec = GrammarSpec("gbnf", value)
        elif key == "grammar_file":
            spec = GrammarSpec("gbnf", _read(directory, value))
        else:
            text = value if value.lstrip().startswith("{") else _read(directory, value)
            spec = GrammarSpec.json_schema(text)
        spec.source()
    except GrammarError as exc:
        raise ParamError(key, str(exc)) from None
    return spec


def _read(directory: pathlib.Path, name: str) -> str:
    path = directory / os.path.expanduser(name)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GrammarError(f"cannot read {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None


class Constraint:
    """One sequence's grammar state: it advances on the tokens the target emits, and answers, at the current
    position, whether a token is allowed (``allows``), the allowed set (``masked``), how much of a draft is
    (``admissible``) and what the grammar forces next (``forced``)."""

    def __init__(self, spec: GrammarSpec, vocab: "Vocab"):
        from llguidance import LLMatcher

        self.spec = spec
        self._matcher = LLMatcher(vocab.grammar_tokenizer(), spec.source(), log_level=0)
        if self._matcher.is_error():
            raise GrammarError(_one_line(self._matcher.get_error()))
        self._n_vocab = vocab.n_tokens
        self._triggers = frozenset(spec.triggers)
        self.active = not self._triggers     # a lazy grammar waits for a trigger token

    def admissible(self, tokens: np.ndarray) -> int:
        """How many leading ``tokens`` the grammar allows from here."""
        ids = [int(t) for t in tokens]
        if self.active:
            return self._matcher.validate_tokens(ids)
        for i, token in enumerate(ids):
            if token in self._triggers:
                return i + 1 + self._matcher.validate_tokens(ids[i + 1:])
        return len(ids)

    def allows(self, token: int) -> bool:
        return not self.active or self._matcher.validate_tokens([token]) == 1

    def masked(self, row: np.ndarray) -> np.ndarray:
        """``row`` of logits with every token the grammar forbids here at -inf."""
        if not self.active:
            return row
        bits = np.unpackbits(np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        return np.where(bits[:row.size].view(bool), row, np.float32(-np.inf))

    def advance(self, token: int) -> None:
        """The target emitted ``token``."""
        if self.active:
            self._matcher.consume_token(token)
        elif token in self._triggers:
            self.active = True

    def forced(self) -> np.ndarray:
        """The tokens the grammar forces from here (none while a lazy grammar waits)."""
        if not self.active or self._matcher.is_stopped():
            return NO_TOKENS
        return np.asarray(self._matcher.compute_ff_tokens(), dtype=np.int32)

    @property
    def failed(self) -> str | None:
        """Why the matcher stopped matching (a token was forced past it), or None."""
        return _one_line(self._matcher.get_error()) if self._matcher.is_error() else None


def _one_line(problem: object) -> str:
    return " ".join(str(problem).split())
