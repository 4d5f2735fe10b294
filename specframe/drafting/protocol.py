"""The drafter protocol: what the decoding loop knows of a drafter (DESIGN.md §2).

A drafter proposes tokens that continue the committed history; the target model verifies them. It mirrors
llama.cpp's common_speculative begin / draft / accept. Drafters subclass ``Drafter`` and are registered
through the ``register_drafters`` plugin hook; the built-in ones are registered the same way.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ClassVar

import numpy as np

if TYPE_CHECKING:  # only for annotations: drafting itself never touches libllama
    from specframe.llama import Model
    from specframe.sampling import SamplingParams


@dataclass(frozen=True)
class Draft:
    """Proposed tokens, and for drafters that have one, the distribution each was drawn from.

    ``probs[i]`` is the draft distribution q over the whole vocabulary at token i (float32, summing to 1);
    lossless stochastic acceptance uses it. ``None`` means the drafter is deterministic (q is one-hot).
    """

    tokens: np.ndarray
    probs: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    @staticmethod
    def of(tokens, probs: np.ndarray | None = None) -> "Draft":
        return Draft(np.asarray(tokens, dtype=np.int32), probs)


NO_DRAFT = Draft(np.empty(0, dtype=np.int32))


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
    resolve_model: Callable[[str], pathlib.Path] = lambda spec: pathlib.Path(spec)  # catalog name or path -> file

    def path(self, value: str | os.PathLike) -> pathlib.Path:
        """A path given in the config, relative to the config file."""
        return (self.config_dir / os.path.expanduser(os.fspath(value))).resolve()


class Drafter:
    """Base class of drafters.

    Subclasses set ``name`` (the ``type`` used in configs), ``Params`` (a frozen dataclass whose fields, with
    defaults and types, are the drafter's configuration keys), and implement ``draft``. ``uses_model`` marks
    drafters that run a model: by default the chain puts draftless drafters first, as llama.cpp does.

    ``history`` is every committed token (prompt and generated so far), an append-only int32 array, read-only:
    a drafter that writes into it is set aside. Within a request, each call sees the previous history plus new tokens, so drafters index
    only what is new (O(new tokens) per call) instead of rescanning.
    """

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    uses_model: ClassVar[bool] = False
    # Set by the chain before each begin(): the target's sampling settings when the engine accepts drafts by
    # rejection sampling (a drafter that samples its tokens then returns their distributions in Draft.probs),
    # None when it accepts by matching (greedy decoding, or sample-and-match): then draft the likeliest tokens.
    sampling: "SamplingParams | None" = None
    # A short remark for the statistics (e.g. how the drafter works with this target), or None.
    note: str | None = None

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

    def begin(self, prompt: np.ndarray) -> None:
        """A new request starts with ``prompt``: reset per-request state."""

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        """Propose at most ``n_max`` tokens that continue ``history``; ``NO_DRAFT`` when there is no opinion."""
        raise NotImplementedError

    def accept(self, n_accepted: int) -> None:
        """The target accepted the first ``n_accepted`` tokens of this drafter's last draft."""

    def save(self) -> None:
        """Write what the drafter keeps across runs (called once, when the engine closes). A failure is raised:
        the run then ends with an error instead of losing what it learned."""

    def close(self) -> None:
        """Free resources (contexts, files) held by the drafter."""
