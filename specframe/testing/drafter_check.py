"""check_drafter: a drafter run through the protocol the way the engine runs it, and what it would trip on.

A drafter author's test calls ``assert_drafter_ok(MyDrafter)``. It creates the drafter against fake targets whose
vocabularies have real tokenizers' sizes (151936 as Qwen's, 32000 as Llama 2's: no model file needed), runs several
requests (begin, then draft / accept as the history grows, the accepted tokens decided by a known continuation)
on synthetic histories whose token ids span the whole vocabulary, and reports, one line each:

- a result that is not a ``Draft`` of integer token ids, an id outside [0, n_vocab), a draft longer than n_max:
  the chain sets such a drafter aside for the rest of the run;
- an exception from begin, draft, accept, save or close (also setting it aside), or from creating it;
- a write into the history it was given (it is shared with the other drafters);
- state leaking across requests: after ``begin``, a used drafter drafts otherwise than a fresh one on the same
  request (skipped for drafters that learn across requests on purpose);
- cost growing with the history: the median draft() call at a long history more than ``factor`` times that at a
  short one (the drafter rescans instead of indexing only what is new).
"""

from __future__ import annotations

import pathlib
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np

from specframe.drafting.chain import InvalidDraft, valid_draft
from specframe.drafting.protocol import Drafter, DrafterEnv, begin_form, begin_request
from specframe.plugins import _check_drafter_class
from specframe.prefix import common_prefix
from specframe.sampling import SamplingParams

if TYPE_CHECKING:
    from specframe.llama import Model

TOKENIZER_SIZES = (151936, 32000)   # Qwen2 / Qwen2.5 and Llama 2 / Mistral vocabularies
N_MAX_CHOICES = (1, 2, 3, 5, 8, 16, 48)
TIMING_FLOOR = 20e-6                # shorter medians are timer noise: growth is measured from at least this


class FakeVocab:
    """A target vocabulary of ``n_tokens`` ids without a model: sizes, special ids, and a text for each id."""

    def __init__(self, n_tokens: int, *, vocab_type: str = "bpe", bos: int = 1, eos: int = 2):
        self.n_tokens = n_tokens
        self.type = vocab_type
        self.bos, self.eos, self.eot = bos, eos, -1
        self.add_bos, self.add_eos = True, False

    def is_eog(self, token: int) -> bool:
        return token == self.eos

    def is_control(self, token: int) -> bool:
        return token in (self.bos, self.eos)

    def text(self, token: int) -> bytes:
        if not 0 <= token < self.n_tokens:
            raise ValueError(f"token id {token} is outside the vocabulary [0, {self.n_tokens})")
        return f"<{token}>".encode()

    def piece(self, token: int, special: bool = False) -> bytes:
        return self.text(token)


@dataclass
class FakeTarget:
    """Stands for the target ``Model`` in a ``DrafterEnv``: its path and vocabulary."""

    vocab: FakeVocab
    path: str = "fake-target.gguf"


def fake_env(n_vocab: int = 32000, *, n_ctx: int = 4096, config_dir: str | pathlib.Path | None = None,
             vocab_type: str = "bpe", bos: int = 1, eos: int = 2) -> DrafterEnv:
    """A ``DrafterEnv`` whose target is a fake vocabulary of ``n_vocab`` ids: enough to create and run a drafter
    that needs no model."""
    target = FakeTarget(FakeVocab(n_vocab, vocab_type=vocab_type, bos=bos, eos=eos))
    return DrafterEnv(target=cast("Model", target),   # it has what a drafter without a model reads of one
                      n_ctx=n_ctx, n_threads=1, n_gpu_layers=0,
                      config_dir=pathlib.Path(config_dir) if config_dir is not None else pathlib.Path.cwd())


@dataclass
class DrafterReport:
    """What ``check_drafter`` found: ``problems``, one line each (empty when the drafter passed every check), and
    the median draft() time by history length."""

    drafter: str
    problems: list[str] = field(default_factory=list)
    seconds_per_call: dict[int, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: str) -> None:
        if problem not in self.problems:
            self.problems.append(problem)

    def __str__(self) -> str:
        if self.ok:
            return f"drafter {self.drafter}: no problems"
        return f"drafter {self.drafter}: {len(self.problems)} problem(s)\n" + "\n".join(
            f"  - {p}" for p in self.problems)


class _SetAside(Exception):
    """The drafter did what the chain sets a drafter aside for: this run of it stops."""


def check_drafter(cls: type[Drafter], params=None, *, env: DrafterEnv | None = None,
                  learns_across_requests: bool = False, short: int = 1000, long: int = 20000, factor: float = 10.0,
                  seed: int = 0) -> DrafterReport:
    """Run drafter class ``cls`` (with ``params``, by default its ``Params()``) through the protocol and report
    what a user of it would trip on.

    ``env``: the environment to create it in (a drafter that runs a model needs a real one); by default fake
    targets of ``TOKENIZER_SIZES`` ids. ``learns_across_requests``: the drafter keeps what it learns from one
    request for the next on purpose (a shared pool, a cache), so it is not compared with a fresh instance.
    ``short``, ``long``, ``factor``: the history lengths whose draft() times are compared, and the growth allowed.
    """
    report = DrafterReport(repr(getattr(cls, "name", cls)))
    problem = _check_drafter_class(cls)
    if problem:
        report.add(f"cannot be registered: {problem}")
        return report
    if params is None:
        params = _default_params(cls)
    if env is None and cls.uses_model:
        raise ValueError(f"drafter {cls.name!r} runs a model: pass env= a DrafterEnv with a real target")
    envs = [env] if env is not None else [fake_env(n) for n in TOKENIZER_SIZES]
    for which, drafter_env in enumerate(envs):
        _Run(cls, params, drafter_env, report, np.random.default_rng(seed)).check(
            learns_across_requests, timing=(short, long, factor) if which == 0 else None)
    return report


def assert_drafter_ok(cls: type[Drafter], params=None, **options) -> DrafterReport:
    """``check_drafter``, failing the calling test with the report when it found a problem."""
    report = check_drafter(cls, params, **options)
    assert report.ok, str(report)
    return report


def _default_params(cls: type[Drafter]):
    try:
        return cls.Params()
    except TypeError as exc:
        raise ValueError(f"{cls.__name__}.Params() cannot be made without values ({exc}): pass params=") from None


class _Run:
    """The checks of one drafter class in one environment."""

    def __init__(self, cls: type[Drafter], params, env: DrafterEnv, report: DrafterReport, rng: np.random.Generator):
        self.cls, self.params, self.env, self.report, self.rng = cls, params, env, report, rng
        self.n_vocab = env.target.vocab.n_tokens
        self.where = f"(n_vocab {self.n_vocab})"

    def check(self, learns_across_requests: bool, timing: tuple[int, int, float] | None) -> None:
        drafter = self._create()
        if drafter is None:
            return
        requests = [synthetic_history(self.rng, self.n_vocab, length) for length in (300, 200, 400)]
        prompt_lengths = [40, 1, 120]
        try:
            for i, (tokens, prompt_length) in enumerate(zip(requests, prompt_lengths)):
                sampling = SamplingParams(temperature=0.8, seed=i) if i == 1 else None
                self._request(drafter, tokens, prompt_length, sampling)
            if not learns_across_requests:
                self._compare_with_fresh(drafter, requests[0], prompt_lengths[0])
            self._call(drafter, "save")
            self._call(drafter, "close")
        except _SetAside:
            return
        self._check_for_slots()
        if timing is not None:
            self._check_cost(*timing)

    # --- calls as the chain makes them ------------------------------------------------------------------------

    def _create(self) -> Drafter | None:
        try:
            return self._guarded("creating it", self.cls, self.params, self.env)
        except _SetAside:
            return None

    def _call(self, drafter: Drafter, what: str, *args):
        return self._guarded(f"{what}()", getattr(drafter, what), *args)

    def _guarded(self, what: str, call, *args):
        """``call(*args)``; a fault of any kind is the drafter's, reported as the chain would set it aside for."""
        try:
            return call(*args)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever a drafter raises is what is reported
            if isinstance(exc, ValueError) and "read-only" in str(exc):
                self.report.add(f"{what} writes into the history it is given (read-only: it is every drafter's "
                                f"input) {self.where}")
            else:
                self.report.add(f"{what} raised {type(exc).__name__}: {_line(exc)} {self.where}")
            raise _SetAside from None

    def _begin(self, drafter: Drafter, prompt: np.ndarray, sampling: SamplingParams | None) -> None:
        self._guarded("begin()", begin_request, drafter, _read_only(prompt), sampling, None, begin_form(drafter))

    def _draft(self, drafter: Drafter, history: np.ndarray, n_max: int) -> tuple[np.ndarray, float]:
        """The draft's tokens, after checking it as the chain does and that the history was left alone, and the
        seconds the call took."""
        before, view = history.copy(), _read_only(history)
        started = time.perf_counter()
        result = self._call(drafter, "draft", view, n_max)
        seconds = time.perf_counter() - started
        if not np.array_equal(history, before):
            self.report.add(f"draft() writes into the history it is given {self.where}")
            raise _SetAside
        try:
            draft = valid_draft(result, self.n_vocab, n_max)
        except InvalidDraft as exc:
            self.report.add(f"{exc} {self.where}")
            raise _SetAside from None
        offered = 0 if result is None else len(result)   # before the check cut it to n_max
        if offered > n_max:
            self.report.add(f"drafted {offered} tokens when asked for at most n_max = {n_max} "
                            f"(the chain cuts it) {self.where}")
        return draft.tokens, seconds

    def _request(self, drafter: Drafter, tokens: np.ndarray, prompt_length: int,
                 sampling: SamplingParams | None = None, times: list[float] | None = None,
                 start_timing: int = 0) -> list[list[int]]:
        """One request: the history grows along ``tokens``, by each draft's tokens that match them plus one, as a
        target that would emit ``tokens`` accepts them. Returns the drafts; ``times`` collects the seconds of the
        draft() calls from history length ``start_timing`` on."""
        self._begin(drafter, tokens[:prompt_length], sampling)
        drafts, length = [], prompt_length
        while length < len(tokens):
            n_max = int(self.rng.choice(N_MAX_CHOICES))
            draft, seconds = self._draft(drafter, tokens[:length], n_max)
            if times is not None and length >= start_timing:
                times.append(seconds)
            truth = tokens[length:length + len(draft)]
            accepted = common_prefix(draft, truth)
            self._call(drafter, "accept", accepted)
            drafts.append(draft.tolist())
            length += accepted + 1
        return drafts

    # --- the checks -----------------------------------------------------------------------------------------

    def _compare_with_fresh(self, used: Drafter, tokens: np.ndarray, prompt_length: int) -> None:
        fresh = self._create()
        if fresh is None:
            return
        state = self.rng.bit_generator.state
        again = self._request(used, tokens, prompt_length)
        self.rng.bit_generator.state = state   # the same n_max at each step
        first = self._request(fresh, tokens, prompt_length)
        self._call(fresh, "close")
        if again != first:
            step = next((i for i, (a, b) in enumerate(zip(again, first)) if a != b), min(len(again), len(first)))
            self.report.add(f"state leaks across requests: after begin(), a used drafter drafts otherwise than a "
                            f"fresh one on the same request (first at draft {step + 1}) {self.where}")

    def _check_for_slots(self) -> None:
        try:
            drafters = self._guarded("for_slots()", self.cls.for_slots, self.params, self.env, 2)
            if (not isinstance(drafters, list) or len(drafters) != 2
                    or not all(isinstance(d, self.cls) for d in drafters) or drafters[0] is drafters[1]):
                self.report.add(f"for_slots(params, env, 2) must return a list of 2 distinct {self.cls.__name__} "
                                f"instances, got {drafters!r:.80} {self.where}")
                return
            for drafter in drafters:
                self._call(drafter, "close")
        except _SetAside:
            return

    def _check_cost(self, short: int, long: int, factor: float) -> None:
        """Median draft() time around ``long`` history tokens against around ``short``; measured twice before
        blaming the drafter, so that one burst of load on the machine does not."""
        tokens = synthetic_history(self.rng, self.n_vocab, long + 200)
        for _attempt in range(2):
            medians = {}
            for length in (short, long):
                drafter = self._create()
                if drafter is None:
                    return
                times: list[float] = []
                try:
                    # the prompt is taken in by the first calls: only those after it are timed
                    self._request(drafter, tokens[:length + 150], length - 50, times=times, start_timing=length)
                    self._call(drafter, "close")
                except _SetAside:
                    return
                medians[length] = statistics.median(times) if times else 0.0
            self.report.seconds_per_call = medians
            if medians[long] <= factor * max(medians[short], TIMING_FLOOR):
                return
        self.report.add(f"draft() cost grows with the history: median {medians[long] * 1e3:.3g} ms per call at "
                        f"{long} tokens against {medians[short] * 1e3:.3g} ms at {short} (more than {factor:g}x): "
                        f"index only what is new since the last call (see IncrementalDrafter) {self.where}")


def synthetic_history(rng: np.random.Generator, n_vocab: int, length: int) -> np.ndarray:
    """``length`` int32 token ids like generated text that repeats itself: random runs of a small alphabet and
    copies of earlier stretches. The alphabet's ids spread over [0, n_vocab), the last id included."""
    alphabet = rng.choice(n_vocab, size=min(n_vocab, 64), replace=False)
    alphabet[0] = n_vocab - 1
    out: list[int] = []
    while len(out) < length:
        if out and rng.random() < 0.5:
            start = int(rng.integers(0, len(out)))
            out.extend(out[start:start + int(rng.integers(1, 40))])
        else:
            out.extend(rng.integers(0, len(alphabet), size=int(rng.integers(1, 6))).tolist())
    return alphabet[np.array(out[:length])].astype(np.int32)


def _read_only(tokens: np.ndarray) -> np.ndarray:
    view = tokens.view()
    view.flags.writeable = False
    return view


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]
