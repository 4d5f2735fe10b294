"""The drafter protocol: what the decoding loop knows of a drafter (docs/design.md, the drafter protocol).

A drafter proposes tokens that continue the committed history; the target model verifies them. It mirrors
llama.cpp's common_speculative begin / draft / accept. Drafters subclass ``Drafter`` and are registered
through the ``register_drafters`` plugin hook; the built-in ones are registered the same way. Everything the
chain gives a drafter is an argument, everything it takes back a return value.
"""

from __future__ import annotations

import inspect
import os
import pathlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ClassVar, Protocol

import numpy as np

if TYPE_CHECKING:  # only for annotations: drafting itself never touches libllama
    from specframe.llama import Model
    from specframe.sampling import SamplingParams


@dataclass(frozen=True)
class Draft:
    """Proposed tokens, and for drafters that have one, the distribution each was drawn from.

    ``probs[i]`` is the draft distribution q over the target's whole vocabulary at token i (shape
    ``(len(tokens), env.n_vocab)``, float32, summing to 1); rejection sampling uses it. ``None`` means the
    drafter is deterministic (q is one-hot). After the chain cuts a draft at a token the request's grammar
    forbids, ``probs`` keeps that token's row: verification draws there as if it had rejected the token.
    """

    tokens: np.ndarray
    probs: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    @staticmethod
    def of(tokens, probs: np.ndarray | None = None) -> "Draft":
        return Draft(np.asarray(tokens, dtype=np.int32), probs)


NO_DRAFT = Draft(np.empty(0, dtype=np.int32))


class Constraint(Protocol):
    """A request's grammar as drafters see it, at the committed position: read-only."""

    def admissible(self, tokens: np.ndarray) -> int:
        """How many leading ``tokens`` the grammar allows from here."""

    def forced(self) -> np.ndarray:
        """The tokens the grammar forces from here (int32; empty when it forces none)."""


@dataclass(frozen=True)
class NoParams:
    """For drafters without parameters."""


@dataclass
class DrafterEnv:
    """What a drafter may use when it is created."""

    target: "Model"                                        # the target model: its vocab, for compatibility checks
    n_ctx: int                                             # the target's context size
    n_threads: int                                         # threads for any model the drafter runs
    n_gpu_layers: int                                      # GPU layers for any model the drafter runs
    config_dir: pathlib.Path = field(default_factory=pathlib.Path.cwd)  # relative paths in params are from here
    resolve_model: Callable[[str], pathlib.Path] = lambda spec: pathlib.Path(spec)  # model reference -> file

    @property
    def n_vocab(self) -> int:
        """The target's vocabulary size: token ids are below it, and ``Draft.probs`` rows are this wide."""
        return self.target.vocab.n_tokens

    def path(self, value: str | os.PathLike) -> pathlib.Path:
        """A path given in the config, relative to the config file."""
        return (self.config_dir / os.path.expanduser(os.fspath(value))).resolve()


class Drafter:
    """Base class of drafters.

    Subclasses set ``name`` (the ``type`` used in configs), ``Params`` (a frozen dataclass whose fields, with
    defaults and types, are the drafter's configuration keys), and implement ``draft``. ``uses_model`` marks
    drafters that run a model: by default the chain puts draftless drafters first, as llama.cpp does. The
    signatures of ``begin``, ``draft`` and ``accept`` are checked when the class is registered.

    ``history`` is every committed token (prompt and generated so far), an append-only int32 array, read-only:
    a drafter that writes into it is set aside. Within a request, each call sees the previous history plus new
    tokens, so drafters index only what is new (O(new tokens) per call) instead of rescanning.

    ``draft`` returns a ``Draft``, or ``NO_DRAFT`` when it has no opinion; ``None`` counts as ``NO_DRAFT`` and a
    plain sequence of token ids (a list, a 1-D integer array) as ``Draft.of(ids)``. Anything else, or token ids
    outside the vocabulary, sets the drafter aside for the rest of the run (reported with the reason): the output
    never depends on what a drafter returns.
    """

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    uses_model: ClassVar[bool] = False
    # What begin() was last given, for drafters written when the chain set it instead (begin(prompt) only).
    sampling: "SamplingParams | None" = None

    def __init__(self, params, env: DrafterEnv):
        self.params = params
        self.env = env

    @classmethod
    def for_slots(cls, params, env: DrafterEnv, n_slots: int) -> list["Drafter"]:
        """The drafters of ``n_slots`` requests decoded together (a server's slots), one per slot, each with its
        own per-request state. By default each is a drafter of its own; override this to share, across slots,
        what the drafter means to share across requests (ngram-mod's pool, a draft model's weights)."""
        return [cls(params, env) for _ in range(n_slots)]

    @classmethod
    def check_params(cls, params, config_dir: pathlib.Path) -> None:
        """Refuse, when the config loads, parameters this drafter could not honour (raise ``ParamError``): an
        output file in a missing folder, say. It runs before any model is loaded, so no work is lost to them."""

    def prepare(self) -> None:
        """Make ready what this drafter puts off until it is first needed (a draft model loads its weights then, so
        that a run whose chain never asks it does not pay for them). The chain calls it, untimed, before the first
        begin or draft it times; a drafter used outside a chain calls it itself. Called again, it does nothing."""

    def begin(self, prompt: np.ndarray, sampling: SamplingParams | None = None) -> None:
        """A new request starts with ``prompt``: reset per-request state. ``sampling`` is the target's sampling
        settings when the engine accepts drafts by rejection sampling (a drafter that samples its tokens then
        returns their distributions in ``Draft.probs``), None when it accepts by matching (greedy decoding, or
        sample-and-match): then draft the likeliest tokens. A drafter may define ``begin(self, prompt)`` alone,
        or ``begin(self, prompt, sampling, constraint)`` to be given the request's grammar (a ``Constraint``,
        None when the output is free): the chain cuts every draft at its first forbidden token anyway.
        """
        self.sampling = sampling

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        """Propose at most ``n_max`` tokens that continue ``history``; ``NO_DRAFT`` when there is no opinion."""
        raise NotImplementedError

    def accept(self, n_accepted: int) -> None:
        """The target accepted the first ``n_accepted`` tokens of this drafter's last draft, and refuted the next one
        or had none left to check: not called for a draft the target's output agrees with so far but has not
        reached the end of (a long draft cut to a shorter verification, or one not verified)."""

    def describe(self) -> str | None:
        """A short remark shown with the drafter's statistics (how it works with this target, say), or None."""
        return None

    def save(self) -> None:
        """Write what the drafter keeps across runs (called once, when the engine closes). A failure is raised:
        the run then ends with an error instead of losing what it learned."""

    def close(self) -> None:
        """Free resources (contexts, files) held by the drafter."""


_TOKENS = np.empty(0, dtype=np.int32)
_CALLS = {   # how the chain calls each protocol method: (parameters, sample arguments) of each accepted form
    "begin": (("prompt, sampling", (_TOKENS, None)), ("prompt", (_TOKENS,)),
              ("prompt, sampling, constraint", (_TOKENS, None, None))),
    "draft": (("history, n_max", (_TOKENS, 1)),),
    "accept": (("n_accepted", (0,)),),
}


def signature_problem(cls: type) -> str | None:
    """Why the chain could not call a protocol method of drafter class ``cls``, or None when it can."""
    for method, forms in _CALLS.items():
        if not any(_binds(cls, method, args) for _, args in forms):
            expected = " or ".join(f"{method}({parameters})" for parameters, _ in forms)
            return f"{method}{_signature(cls, method)} cannot be called as {expected}"
    return None


def begin_form(drafter: Drafter) -> int:
    """How many arguments ``drafter.begin`` takes: 3 (with the constraint), 2, or 1 (``begin(prompt)``)."""
    if _binds(type(drafter), "begin", _CALLS["begin"][2][1]):
        return 3
    return 2 if _binds(type(drafter), "begin", _CALLS["begin"][0][1]) else 1


def begin_request(drafter: Drafter, prompt: np.ndarray, sampling: SamplingParams | None,
                  constraint: Constraint | None, form: int) -> None:
    """Start a request in the form the drafter was written for (``form``: begin_form)."""
    if form == 3:
        drafter.begin(prompt, sampling, constraint)   # type: ignore[call-arg]
    elif form == 2:
        drafter.begin(prompt, sampling)
    else:                                   # written when the chain set the attribute before begin(prompt)
        drafter.sampling = sampling
        drafter.begin(prompt)


def _binds(cls: type, method: str, args: tuple) -> bool:
    function = getattr(cls, method)
    if not isinstance(inspect.getattr_static(cls, method), (staticmethod, classmethod)):
        args = (None, *args)    # self
    try:
        inspect.signature(function).bind(*args)
    except TypeError:
        return False
    except ValueError:          # no signature to read (a builtin): assume it fits
        return True
    return True


def _signature(cls: type, method: str) -> str:
    try:
        return str(inspect.signature(getattr(cls, method)))
    except ValueError:
        return "(...)"
