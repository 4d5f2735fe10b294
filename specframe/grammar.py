"""Constrained generation: a request's output held to a grammar, with one llguidance matcher per sequence.

A grammar is GBNF (llama.cpp's), Lark (llguidance's), a JSON schema or a regular expression. The target's choice
at every position, verified or not, is made under the grammar state after the history and the draft tokens
before it (sampling.verify), so constrained output is the same with and without drafts, and rejection sampling
stays exact over the constrained distribution. Drafts are cut before verification at their first token the
grammar forbids (drafting.chain), and the ``grammar`` drafter drafts what the grammar forces.

Why llguidance (docs/design.md, constrained generation): its matcher checks a token in microseconds, so a greedy
position needs the whole vocabulary's mask only where the target's best token is forbidden, and it computes a
mask over Qwen's 152k tokens in well under a millisecond where libllama's grammar sampler walks every candidate.

A lazy grammar constrains nothing until a trigger token is emitted or a pattern matches the output's start, then
the rest of the output: a tool call's arguments are held to the function's schema from the call's opening on.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import pathlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

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
    """What constrains an output: ``text`` of a ``kind`` (GRAMMAR_KINDS); ``triggers`` (token ids) or ``pattern``
    make it lazy (Constraint), neither constrains from the first token."""

    kind: str
    text: str
    triggers: tuple[int, ...] = ()
    pattern: str = ""          # or a regular expression searched in the output's first bytes that starts it

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

    @functools.cached_property
    def source(self) -> str:
        """The grammar in llguidance's form, compiled and checked once per spec (a request's is checked when it
        arrives and used as it is by every matcher made of it); GrammarError names what is wrong with it."""
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
        _ = spec.source    # compiled and checked now
    except GrammarError as exc:
        raise ParamError(key, str(exc)) from None
    return spec


def _read(directory: pathlib.Path, name: str) -> str:
    path = directory / os.path.expanduser(name)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GrammarError(f"cannot read {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None


PATTERN_WINDOW = 512   # bytes at the start of an output in which a trigger pattern is looked for


class Constraint:
    """One sequence's grammar state: it advances on the tokens the target emits, and answers, at the current
    position, whether a token is allowed (``allows``), the allowed set (``masked``), how much of a draft is
    (``admissible``) and what the grammar forces next (``forced``).

    A lazy grammar allows everything until a trigger: one of its trigger tokens, or its pattern matching the
    output's start. The grammar then holds the output from the token that triggered it (or the one where the
    pattern's match begins) on; should those tokens not fit it, the output stays free."""

    def __init__(self, spec: GrammarSpec, vocab: "Vocab"):
        self.spec = spec
        self._vocab = vocab
        self._source = spec.source
        self._matcher = self._new_matcher()
        self._watch: _Watch | None = None
        if spec.triggers or spec.pattern:
            self._watch = _Watch(frozenset(spec.triggers), re.compile(spec.pattern.encode()) if spec.pattern else None,
                                 lambda token: vocab.piece(token, special=True))

    @property
    def active(self) -> bool:
        return self._watch is None

    def _new_matcher(self):
        from llguidance import LLMatcher

        matcher = LLMatcher(self._vocab.grammar_tokenizer(), self._source, log_level=0)
        if matcher.is_error():
            raise GrammarError(_one_line(matcher.get_error()))
        return matcher

    def admissible(self, tokens: np.ndarray) -> int:
        """How many leading ``tokens`` the grammar allows from here."""
        ids = [int(t) for t in tokens]
        if self._watch is None:
            return self._matcher.validate_tokens(ids)
        watch = self._watch.copy()
        for i, token in enumerate(ids):
            held = watch.push(token)
            if held is not None:
                matcher = self._new_matcher()
                if not matcher.consume_tokens(held):
                    return len(ids)      # the trigger's text does not fit: the output stays free
                return i + 1 + matcher.validate_tokens(ids[i + 1:])
        return len(ids)

    def allows(self, token: int) -> bool:
        return self._watch is not None or self._matcher.validate_tokens([token]) == 1

    def masked(self, row: np.ndarray) -> np.ndarray:
        """``row`` of logits with every token the grammar forbids here at -inf."""
        if self._watch is not None:
            return row
        bits = np.unpackbits(np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        return np.where(bits[:row.size].view(bool), row, np.float32(-np.inf))

    def advance(self, token: int) -> None:
        """The target emitted ``token``."""
        if self._watch is None:
            self._matcher.consume_token(token)
            return
        held = self._watch.push(token)
        if held is not None:
            if self._matcher.consume_tokens(held):
                self._watch = None
            else:
                self._watch.stop()

    def forced(self) -> np.ndarray:
        """The tokens the grammar forces from here (none while a lazy grammar waits)."""
        if self._watch is not None or self._matcher.is_stopped():
            return NO_TOKENS
        return np.asarray(self._matcher.compute_ff_tokens(), dtype=np.int32)

    @property
    def failed(self) -> str | None:
        """Why the matcher stopped matching (a token was forced past it), or None."""
        return _one_line(self._matcher.get_error()) if self._matcher.is_error() else None


class _Watch:
    """What a lazy grammar waits for: ``push`` each emitted token; it returns the tokens the grammar is to hold
    (from the triggering one on) once triggered, else None."""

    def __init__(self, triggers: frozenset[int], pattern: re.Pattern | None, piece: Callable[[int], bytes]):
        self.triggers, self.pattern, self.piece = triggers, pattern, piece
        self.tokens: list[int] = []      # the output so far, while the pattern may still match it
        self.starts: list[int] = []      # where each of those tokens' bytes begin
        self.text = b""
        self.stopped = False             # triggered once and did not fit: the output stays free

    def copy(self) -> "_Watch":
        other = _Watch(self.triggers, self.pattern, self.piece)
        other.tokens, other.starts, other.text, other.stopped = list(self.tokens), list(self.starts), self.text, \
            self.stopped
        return other

    def stop(self) -> None:
        self.stopped, self.pattern, self.tokens, self.starts, self.text = True, None, [], [], b""

    def push(self, token: int) -> list[int] | None:
        if self.stopped:
            return None
        if token in self.triggers:
            return [token]
        if self.pattern is None:
            return None
        self.tokens.append(token)
        self.starts.append(len(self.text))
        self.text += self.piece(token)
        match = self.pattern.search(self.text)
        if match is not None:
            first = bisect.bisect_right(self.starts, match.start()) - 1
            return self.tokens[first:]
        if len(self.text) > PATTERN_WINDOW:
            self.pattern, self.tokens, self.starts, self.text = None, [], [], b""
        return None


def _one_line(problem: object) -> str:
    return " ".join(str(problem).split())
