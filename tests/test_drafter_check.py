"""specframe.testing: check_drafter passes the built-in drafters and catches each fault a third-party drafter can
have."""

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pytest

from specframe import NO_DRAFT, Draft, Drafter, IncrementalDrafter, param
from specframe.plugins import load_plugins
from specframe.testing import assert_drafter_ok, check_drafter, fake_env

LEARN_ACROSS_REQUESTS = {"ngram-mod", "ngram-cache", "suffix"}   # a shared pool, a dynamic cache, earlier responses
DRAFTLESS = [t.cls for t in load_plugins().drafter_types().values() if not t.cls.uses_model]


@pytest.mark.parametrize("cls", DRAFTLESS, ids=lambda cls: cls.name)
def test_every_draftless_drafter_passes(cls):
    report = assert_drafter_ok(cls, learns_across_requests=cls.name in LEARN_ACROSS_REQUESTS)
    assert set(report.seconds_per_call) == {1000, 20000}


def test_what_a_drafter_learns_across_requests_is_caught_unless_declared():
    ngram_mod = load_plugins().drafter_types()["ngram-mod"].cls
    report = check_drafter(ngram_mod, ngram_mod.Params(pool_size=1 << 16))
    assert [p for p in report.problems if p.startswith("state leaks across requests")], report


class LastTokenCopy(Drafter):
    """Drafts what followed the last occurrence of the last token; subclasses break it in one way each."""

    name = "last-token-copy"

    def draft(self, history, n_max):
        found = np.flatnonzero(history[:-1] == history[-1])
        if not found.size:
            return NO_DRAFT
        return Draft.of(history[found[-1] + 1:][:n_max])


class ReturnsText(LastTokenCopy):
    def draft(self, history, n_max):
        return " ".join(map(str, super().draft(history, n_max).tokens))


class OutOfVocabulary(LastTokenCopy):
    def draft(self, history, n_max):
        return Draft.of([40000])          # within Qwen's 151936 ids, not Llama's 32000


class Negative(LastTokenCopy):
    def draft(self, history, n_max):
        return Draft.of([-1])


class TooLong(LastTokenCopy):
    def draft(self, history, n_max):
        return Draft.of(np.resize(history[-2:], n_max + 1))


class Raises(LastTokenCopy):
    def accept(self, n_accepted):
        raise RuntimeError("accept\nbroke")


class WritesHistory(LastTokenCopy):
    def draft(self, history, n_max):
        history[-1] = 0
        return NO_DRAFT


class UnlocksAndWritesHistory(LastTokenCopy):
    def draft(self, history, n_max):
        history.flags.writeable = True
        history[0] += 1
        return NO_DRAFT


class Leaks(LastTokenCopy):
    """Remembers what followed each token it saw, in every request, and drafts that after the last token."""

    def __init__(self, params, env):
        super().__init__(params, env)
        self.seen: dict[int, int] = {}

    def draft(self, history, n_max):
        recent = history[-64:].tolist()
        self.seen.update(pairwise(recent))
        following = self.seen.get(int(history[-1]))
        return NO_DRAFT if following is None else Draft.of([following])


class Rescans(LastTokenCopy):
    """Counts every token of the history at each call, in Python."""

    def draft(self, history, n_max):
        counts: dict[int, int] = {}
        for token in history.tolist():
            counts[token] = counts.get(token, 0) + 1
        return Draft.of([max(counts, key=counts.get)])


@pytest.mark.parametrize("cls,expected", [
    (ReturnsText, "draft() returned str: expected a Draft"),
    (OutOfVocabulary, "drafted a token id outside the vocabulary [0, 32000) (n_vocab 32000)"),
    (Negative, "drafted a token id outside the vocabulary [0, 151936) (n_vocab 151936)"),
    (TooLong, "tokens when asked for at most n_max = "),
    (Raises, "accept() raised RuntimeError: accept broke (n_vocab 151936)"),
    (WritesHistory, "draft() writes into the history it is given (read-only"),
    (UnlocksAndWritesHistory, "draft() writes into the history it is given (n_vocab 151936)"),
    (Leaks, "state leaks across requests"),
    (Rescans, "draft() cost grows with the history"),
])
def test_each_fault_is_reported_in_one_line(cls, expected):
    report = check_drafter(cls)
    assert any(expected in p for p in report.problems), report
    assert all("\n" not in p for p in report.problems)


def test_assert_drafter_ok_fails_with_the_report():
    assert_drafter_ok(LastTokenCopy)
    with pytest.raises(AssertionError, match=r"drafter 'last-token-copy': 2 problem\(s\)\n  - drafted a token id"):
        assert_drafter_ok(Negative)


def test_a_class_that_could_not_be_registered_is_reported():
    class NoDraft(Drafter):
        name = "no-draft"

    assert check_drafter(NoDraft).problems == ["cannot be registered: it does not implement draft()"]


@dataclass(frozen=True)
class RequiredParams:
    n: int = param(help="no default")


class NeedsParams(IncrementalDrafter):
    name = "needs-params"
    Params = RequiredParams

    def index(self, tokens, start, stop):
        pass

    def propose(self, tokens, n_max):
        return NO_DRAFT


def test_params_without_defaults_must_be_given():
    with pytest.raises(ValueError, match="pass params="):
        check_drafter(NeedsParams)
    assert check_drafter(NeedsParams, RequiredParams(n=3)).ok


def test_fake_env_has_a_vocabulary_of_the_given_size():
    vocab = fake_env(n_vocab=151936).target.vocab
    assert vocab.n_tokens == 151936 and vocab.piece(151935) == b"<151935>"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.text(151936)


def test_the_draft_model_passes_with_a_real_target(target_path, draft_path):
    """A drafter that runs a model is checked in an environment with a real target (here the synthetic one)."""
    from specframe.drafting import DrafterEnv
    from specframe.llama import Model

    draft_model = load_plugins().drafter_types()["draft-model"].cls
    target = Model(target_path)
    try:
        env = DrafterEnv(target=target, n_ctx=4096, n_threads=1, n_gpu_layers=0)
        report = assert_drafter_ok(draft_model, draft_model.Params(model=str(draft_path)), env=env,
                                   short=200, long=2000)
        assert report.seconds_per_call
    finally:
        target.close()
