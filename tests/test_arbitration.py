"""Choosing the draft to verify: by expected gain (the default) or by priority (llama.cpp's rule)."""

import time
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from specframe.drafting import NO_DRAFT, ChainEntry, Draft, Drafter, DrafterChain, DrafterStats
from specframe.drafting import chain as chain_module
from specframe.drafting.acceptance_memory import KEPT_PER_SAVE, AcceptanceMemory, Learned
from specframe.drafting.catch_up import ModelRateStore
from specframe.drafting.gain import (
    ASK,
    DECAY,
    EMPTY_CALLS,
    LEARNED_WEIGHT,
    MODEL_BURST,
    PAUSE_MAX,
    PROBE,
    PROBE_CREDIT,
    PROBE_EVERY,
    PROBE_MAX_EVERY,
    PROBE_SHARE,
    REACH_SPAN,
    Acceptance,
    CallCost,
    DrafterRecord,
    PassShare,
    best_cut,
    call_seconds,
    cheapest_calls,
    expected_tokens,
    plain_rate,
)
from specframe.drafting.pass_cost import UNCONFIRMED_DRAFT, PassCost, others_busy
from specframe.prefix import common_prefix

RNG = np.random.default_rng(0)
REFERENCE = RNG.integers(10, 1000, size=600).astype(np.int32)    # the target's greedy output
PROMPT = 100
# A CPU where a pass over 16 tokens costs 2.9 single passes (measured on a 2-core Xeon).
XEON = PassCost({1: 0.030, 2: 0.033, 4: 0.039, 8: 0.060, 16: 0.087, 17: 0.095})
# One where it costs 9.5 (a 2-core AMD EPYC): there no draft pays before its drafter has proved right.
EPYC = PassCost({1: 0.0296, 2: 0.0572, 4: 0.0978, 8: 0.2252, 16: 0.2805, 17: 0.3058})


class Knowing(Drafter):
    """Drafts the reference continuation, wrong from token ``wrong_at`` on (never, when None)."""

    name = "knowing"

    def __init__(self, length, wrong_at=None, uses_model=False, every=1):
        super().__init__(None, None)
        self.length, self.wrong_at, self.every = length, wrong_at, every
        self.uses_model = uses_model
        self.accepted = []

    def draft(self, history, n_max):
        n = len(history)
        if n % self.every:
            return NO_DRAFT
        tokens = REFERENCE[n:n + min(self.length, n_max)].copy()
        if self.wrong_at is not None:
            tokens[self.wrong_at:] += 1
        return Draft.of(tokens)

    def accept(self, n_accepted):
        self.accepted.append(n_accepted)


def chain_of(*drafters, cost=XEON, arbitration="gain"):
    entries = [ChainEntry(f"d{i}", d, "test", DrafterStats()) for i, d in enumerate(drafters)]
    return DrafterChain(entries, 2000, cost=cost, arbitration=arbitration)


def replay(chain, n_tokens=400, n_max=16, passes=XEON):
    """Drive the chain as the engine does, the target emitting REFERENCE; return the seconds the passes took, as
    ``passes`` prices them."""
    n, seconds = PROMPT, 0.0
    chain.begin(REFERENCE[:PROMPT])
    while n < PROMPT + n_tokens:
        draft = chain.draft(REFERENCE[:n], n_max)
        accepted = common_prefix(draft.tokens, REFERENCE[n:])
        seconds += passes.seconds(1 + len(draft))
        chain.accept(accepted, REFERENCE[n:n + accepted + 1])
        n += accepted + 1
    return seconds


def draft_lengths(chain, steps, at=PROMPT, n_max=16):
    """Drive the chain for ``steps`` steps from position ``at`` (begun there when it is the prompt's end), the target
    emitting REFERENCE; return each step's draft length."""
    if at == PROMPT:
        chain.begin(REFERENCE[:PROMPT])
    lengths = []
    for _ in range(steps):
        draft = chain.draft(REFERENCE[:at], n_max)
        accepted = common_prefix(draft.tokens, REFERENCE[at:])
        lengths.append(len(draft))
        chain.accept(accepted, REFERENCE[at:at + accepted + 1])
        at += accepted + 1
    return lengths


def plain_seconds(n_tokens=400):
    return n_tokens * XEON.seconds(1)


def test_expected_tokens_and_the_best_cut():
    assert expected_tokens(np.array([0.5, 0.5])) == pytest.approx([1.0, 1.5, 1.75])
    k, rate = best_cut(np.full(16, 0.99), XEON)
    assert k == 15 and rate == pytest.approx(expected_tokens(np.full(16, 0.99))[15] / 0.087)   # 16 < 15 + 1
    assert best_cut(np.full(16, 0.99), XEON, n_min=17) == (0, 0.0)
    slow_drafting = CallCost()
    for k in (4, 8, 16):
        slow_drafting.observe(k, 0.010 * k)                  # 10 ms per drafted token: a draft model
    assert slow_drafting.seconds(6) == pytest.approx(0.060)
    assert best_cut(np.full(16, 0.99), XEON, slow_drafting)[0] < 16
    nothing_drafted = CallCost()
    for _ in range(4):
        nothing_drafted.observe(0, 0.040)                    # a draft model stopped by p_min at every call
    assert nothing_drafted.seconds(16) == pytest.approx(17 * 0.040)   # not 0.040: no long draft is free
    probed = CallCost()
    for _ in range(2):
        probed.observe(2, 0.060)          # a model's probes: its new history evaluated, then 2 drafted tokens
    assert probed.seconds(16) == pytest.approx(0.060 * 17 / 3)        # 0.34 s, not 16 x 30 ms


@settings(max_examples=300, deadline=None)
@given(p=hnp.arrays(np.float64, st.integers(1, 48), elements=st.floats(0.0, 1.0)), n_min=st.integers(1, 4),
       trust=st.floats(0.05, 1.0), catching_up=st.floats(0.0, 0.05), missed=st.integers(0, 300),
       others=st.floats(0.0, 3.0), calls=st.lists(st.tuples(st.integers(0, 16), st.floats(0.001, 0.1)), max_size=6),
       table=st.sampled_from([XEON, EPYC]), shared=st.booleans())
def test_the_best_cut_is_the_rate_of_every_length_at_its_highest(p, n_min, trust, catching_up, missed, others, calls,
                                                                  table, shared):
    """best_cut (a loop over floats, run several times a step) against the rate of each length written out. A
    held-back model's catching up on ``missed`` tokens is charged as far as the step's own expected tokens go."""
    drafting = CallCost()
    for n_tokens, seconds in calls:
        drafting.observe(n_tokens, seconds)
    share = PassShare(((0, 1), (1, 1)), 0, others, one_batch=True) if shared else PassShare(expected=others)
    k, rate = best_cut(p, table, drafting, n_min, trust, share, catching_up, missed)
    if len(p) < n_min:
        assert (k, rate) == (0, 0.0)
        return
    own = [1 + trust * (expected_tokens(p)[n] - 1) for n in range(len(p) + 1)]
    charged = [catching_up * min(1.0, own[n] / missed) if missed else catching_up for n in range(len(p) + 1)]
    rates = [(share.expected + own[n]) / (share.seconds(table, 1 + n) + charged[n] + drafting.seconds(n))
             for n in range(n_min, len(p) + 1)]
    assert n_min <= k <= len(p)
    assert rate == pytest.approx(max(rates), rel=1e-9) and rates[k - n_min] == pytest.approx(max(rates), rel=1e-9)


def test_a_long_right_draft_wins_over_a_short_wrong_one_that_comes_first():
    short_wrong, long_right = Knowing(3, wrong_at=1), Knowing(16)
    gain = chain_of(short_wrong, long_right)
    assert replay(gain) < 0.4 * plain_seconds()
    assert gain.entries[1].stats.wins > 10 * gain.entries[0].stats.wins
    priority = chain_of(Knowing(3, wrong_at=1), Knowing(16), cost=None, arbitration="priority")
    replay(priority)
    assert priority.entries[1].stats.calls == 0              # llama.cpp's rule: the first non-empty draft wins


def test_the_chain_is_as_fast_as_its_best_member_and_never_slower_than_plain():
    members = [lambda: Knowing(10, wrong_at=2), lambda: Knowing(16, wrong_at=12, every=3), lambda: Knowing(8)]
    alone = [replay(chain_of(make())) for make in members]
    together = replay(chain_of(*(make() for make in members)))
    assert together <= min(alone) / 0.95            # the goal: at least 0.95x its best member
    hopeless = replay(chain_of(Knowing(16, wrong_at=0), Knowing(4, wrong_at=0)))
    assert hopeless <= plain_seconds() / 0.97       # and at least 0.97x plain decoding


def test_every_drafter_hears_how_much_of_its_draft_the_target_confirmed():
    a, b = Knowing(4, wrong_at=2), Knowing(8)
    chain = chain_of(a, b)
    replay(chain, n_tokens=100)
    assert a.accepted and set(a.accepted) <= {0, 1, 2} and max(a.accepted) == 2
    stats = chain.entries[0].stats
    assert stats.calls >= stats.drafts > 0 and stats.wins < stats.drafts
    assert stats.confirmed_tokens >= stats.accepted_tokens


def test_a_drafter_hears_accept_only_once_the_output_decides_its_draft():
    """On a CPU where only long right drafts pay, long drafts are held back or cut to a shorter verification
    while their estimates grow: the output then agrees with them as far as it goes. Their drafters must not be told
    those drafts were accepted only that far (ngram-mod empties its pool after five such, ngram-map shortens its
    drafts): they hear of a draft once the output refutes a token of it or confirms it whole."""
    right, wrong = Knowing(16), Knowing(16, wrong_at=3)
    chain = chain_of(right, wrong, cost=EPYC)
    replay(chain, n_tokens=300)
    stats = chain.entries[0].stats
    assert stats.drafts > len(right.accepted) > 0           # many of its drafts were left undecided...
    assert set(right.accepted) == {16}                       # ...and it never heard one fell short
    assert wrong.accepted and set(wrong.accepted) == {3}     # refuted at its fourth token, as far as it was checked


def test_a_costly_drafter_is_asked_only_when_cheap_drafts_are_not_expected_to_beat_it():
    cheap, costly = Knowing(16), Knowing(16, uses_model=True)
    chain = chain_of(cheap, costly)
    replay(chain)
    stats = chain.entries[1].stats
    assert stats.held_back > 5 * stats.calls        # the cheap copy is always right: the model is rarely asked,
    assert stats.calls > 0 and stats.wins == 0      # and not probed in step while a cheap draft pays


class Recorded(Knowing):
    """Remembers the history length of every call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def draft(self, history, n_max):
        self.calls.append(len(history))
        return super().draft(history, n_max)


def spend(seconds):
    """Take ``seconds`` of the caller's time exactly: a sleep this short overshoots by a tenth of a millisecond or
    more on some hosts, which made a 0.3 ms drafter costly beside a GPU's 1.8 ms pass (a quarter of it) there."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# A GPU's passes: a single pass 1.8 ms, sixteen more tokens barely dearer.
GPU = PassCost({1: 0.0018, 2: 0.0019, 4: 0.0019, 8: 0.0021, 16: 0.0024, 17: 0.0025})


class SilentUntilACopy(Recorded):
    """Drafts nothing, taking 0.3 ms a call (what a chain's asking costs a step on a GPU's host), until the reply
    starts repeating at ``copy_from``; from there on drafts the reference."""

    def __init__(self, copy_from):
        super().__init__(16)
        self.copy_from = copy_from

    def draft(self, history, n_max):
        spend(0.0003)
        if len(history) < self.copy_from:
            self.calls.append(len(history))
            return NO_DRAFT
        return super().draft(history, n_max)


def test_the_chain_sits_out_steps_while_asking_costs_more_than_its_drafts_save():
    """On a GPU the chain's own time where nothing is drafted would make it slower than plain decoding: it pauses,
    and asks at every step again once a copy pays. On a CPU, whose passes take a hundred times longer, that time is
    negligible and every step is asked: a copy is found where it starts."""
    copy_from = PROMPT + 200
    drafter = SilentUntilACopy(copy_from)
    lengths = draft_lengths(chain_of(drafter, cost=GPU), 260)
    silent = [n for n in drafter.calls if n < copy_from]
    assert silent[:5] == list(range(PROMPT, PROMPT + 5))    # a request's first steps are asked (UPKEEP_PRIOR)
    assert len(silent) < 200 / 3                              # then it pauses, longer each time, up to PAUSE_MAX
    assert max(np.diff(silent)) == PAUSE_MAX + 1
    calls = drafter.calls
    first_copying = next(n for n in calls if n >= copy_from)
    assert first_copying <= copy_from + PAUSE_MAX             # the copy waited no longer than a pause
    assert sum(lengths) > 0.8 * (len(REFERENCE) - first_copying)   # and drafted to the reference's end once found
    hundredfold = PassCost({n: 100 * seconds for n, seconds in GPU.measured.items()})
    drafter = SilentUntilACopy(copy_from)
    draft_lengths(chain_of(drafter, cost=hundredfold), 220)
    assert drafter.calls[:200] == list(range(PROMPT, copy_from))


def test_a_drafter_whose_drafts_never_win_sits_out_while_the_winner_is_asked_at_every_step():
    """On a GPU each drafter's calls are weighed too: one that drafts nothing costs its 0.3 ms a step for nothing,
    beside one whose copies pay."""
    copying, silent = Recorded(2), SilentUntilACopy(copy_from=10**9)
    steps = 150
    assert draft_lengths(chain_of(copying, silent, cost=GPU), steps) == [2] * steps
    assert len(copying.calls) == steps
    assert silent.calls[:5] == list(range(PROMPT, PROMPT + 15, 3)) and len(silent.calls) < steps / 3
    assert max(np.diff(silent.calls)) == 3 * (PAUSE_MAX + 1)     # 3 tokens a step: a pause counts steps


# An H200's passes as calibrated there: a single pass replays a captured CUDA graph, a longer one launches its kernels
# one by one (two tokens 2.5 single passes, sixteen 3.0): only a draft expected to bring two tokens or more pays.
H200 = PassCost({1: 0.00182, 2: 0.00464, 4: 0.00389, 8: 0.00427, 16: 0.00550, 17: 0.00577})


class WrongUntilACopy(Recorded):
    """Drafts 16 tokens all wrong, taking 0.3 ms a call, until the reply starts repeating at ``copy_from``; from
    there on drafts the reference."""

    def __init__(self, copy_from):
        super().__init__(16)
        self.copy_from = copy_from

    def draft(self, history, n_max):
        spend(0.0003)
        draft = super().draft(history, n_max)
        return draft if len(history) >= self.copy_from else Draft.of(draft.tokens + 1)


def test_a_drafter_whose_first_drafts_missed_is_verified_again_soon_after_its_copy_starts():
    """On an H200 its first draft, verified on the prior's trust, misses: trust falls, and with it every later draft
    under what a pass over it costs. Were trust learnt from verified drafts alone, nothing would raise it again: the
    chain sits out most steps (its time is not negligible beside the pass), and at those it asks, the drafter's right
    drafts, each fresh from a pause, are not trusted enough to verify. Its drafts not verified teach trust too, once
    the output decides them, and a copy carries on through the steps it was not asked at."""
    copy_from = PROMPT + 40
    chain = chain_of(WrongUntilACopy(copy_from), cost=H200)
    chain.begin(REFERENCE[:PROMPT])
    at, missed, copied = PROMPT, 0, 0
    while at < copy_from + 100:
        draft = chain.draft(REFERENCE[:at], 16)
        accepted = common_prefix(draft.tokens, REFERENCE[at:])
        chain.accept(accepted, REFERENCE[at:at + accepted + 1])
        missed += len(draft) > 0 and not accepted
        copied += accepted
        at += accepted + 1
    assert missed >= 1
    assert copied >= 60            # of the copy's first 100 tokens (23-39 when trust learnt from verified drafts)


def test_trust_learns_from_a_draft_not_verified_as_the_output_reaches_its_tokens():
    """A copy not verified, followed one token a step, shows right at each: trust rises with each (not only once its
    last is emitted, 8 steps on) and ends where the draft decided at once would have left it. A refuted token
    decides the rest of the draft with it."""
    p = np.full(8, 0.9)

    def promised_and_missed() -> DrafterRecord:
        record = DrafterRecord()
        for _ in range(3):
            record.verified(p, 0)                   # each promised about 5 tokens, none stood
        return record

    record, at_once = promised_and_missed(), promised_and_missed()
    low = record.trust
    record.not_verified(REFERENCE[:8], p)
    at_once.not_verified(REFERENCE[:8], p)
    trusts = []
    for at in range(8):
        if at:
            record.not_verified(REFERENCE[at:at + 8] + 1, p)   # one followed at a time: these are not
        record.heard(REFERENCE[at:at + 1], drafted=False)
        trusts.append(record.trust)
    at_once.heard(REFERENCE[:9], drafted=False)
    assert low < trusts[0] and all(np.diff(trusts) > 0)
    assert trusts[-1] == pytest.approx(at_once.trust) and trusts[-1] > low + 0.2
    raised = record.trust
    record.not_verified(REFERENCE[9:17], p)
    record.heard(REFERENCE[9:10], drafted=False)        # its first token stood,
    record.heard(REFERENCE[10:11] + 1, drafted=False)   # its second did not
    assert record.trust < raised
    lowered = record.trust
    record.heard(REFERENCE[11:12], drafted=False)       # decided: the rest of it counts no more
    assert record.trust == lowered


def test_a_copy_carries_on_through_the_steps_its_drafter_made_no_draft_at():
    record = DrafterRecord()
    record.score(REFERENCE[:16], 0, 0, REFERENCE[:1])     # right so far
    for at in range(1, 5):                                # not asked (a pause), the output following it
        record.heard(REFERENCE[at:at + 1], drafted=False)
    assert record.run_of(REFERENCE[5:21]) > 0             # the next draft carries on a run of 5
    record.heard(REFERENCE[5:6] + 1, drafted=False)       # the output departs from it
    assert record.run_of(REFERENCE[6:22]) == 0


def test_a_cheap_drafter_held_back_is_probed_at_growing_intervals():
    wrong = Recorded(16, wrong_at=0)
    chain = chain_of(wrong, arbitration="priority")
    replay(chain, n_tokens=300)
    assert wrong.calls[0] == PROMPT                       # the first step of a request
    gaps = np.diff(wrong.calls)[1:]                       # (the prior asks it once more before it is known)
    assert len(gaps) >= 3 and gaps[0] >= PROBE_EVERY and all(np.diff(gaps) > 0)   # never given up for good


def test_a_model_that_never_pays_is_probed_in_a_burst_then_at_growing_intervals():
    wrong = Recorded(16, wrong_at=0, uses_model=True)
    chain = chain_of(wrong)
    replay(chain, n_tokens=400)
    calls = np.array(wrong.calls)
    assert calls[0] == PROMPT
    assert np.array_equal(np.diff(calls[:MODEL_BURST + 1]), np.ones(MODEL_BURST))   # in step: each next token
    gaps = np.diff(calls[MODEL_BURST:])             # later probes that miss start no burst
    assert len(gaps) >= 3 and gaps[0] >= PROBE_EVERY and all(np.diff(gaps) > 0)   # never given up for good
    assert chain.entries[0].stats.wins <= 1


class SlowModel(Recorded):
    """A draft model that takes 20 ms per drafted token: on EPYC, not even a draft that is all right pays."""

    def draft(self, history, n_max):
        draft = super().draft(history, n_max)
        time.sleep(0.020 * len(draft))
        return draft


def test_a_model_that_could_not_pay_is_probed_once_per_request_when_it_has_nothing_to_catch_up():
    slow = SlowModel(16, uses_model=True)
    chain = chain_of(slow, cost=EPYC)
    for _ in range(3):
        replay(chain, n_tokens=100)
    assert slow.calls.count(PROMPT) == 3
    assert len(slow.calls) <= 6                           # and beside those, only while its prior was trusted


# The Xeon of this repository's README: a pass over 16 tokens costs 4.35 single passes, one over 2 tokens 1.63.
XEON_AVX512 = PassCost({1: 0.058, 2: 0.0945, 4: 0.1125, 8: 0.1926, 16: 0.2523, 17: 0.300})


class ConfidentModel(Recorded):
    """A draft model that spends 20 ms per token it evaluates and drafts only while confident: ``length`` tokens at
    most, all right, at one position in ``every`` (elsewhere its first token is under p_min: no draft)."""

    def draft(self, history, n_max):
        draft = super().draft(history, n_max)
        time.sleep(0.020 * min(len(draft) + 1, n_max))
        return draft


def test_a_model_is_priced_by_how_long_its_drafts_come_out():
    """A model whose calls return nothing at every other step (as p_min stops it on uncertain text) is not asked at
    every step on the strength of what a full-length draft of it would bring: its drafts, right when made, are two
    tokens or none, and that does not pay for its calls. A model that drafts long still is asked."""
    seldom_confident = ConfidentModel(2, uses_model=True, every=2)
    replay(chain_of(seldom_confident, cost=XEON_AVX512), n_tokens=200)
    assert len(seldom_confident.calls) <= 50                # probes and the steps after them, not all ~100 steps
    goes_on = ConfidentModel(16, uses_model=True)
    chain = chain_of(goes_on, cost=XEON_AVX512)
    replay(chain, n_tokens=200)
    assert chain.entries[0].stats.wins >= 12 and len(goes_on.calls) >= 12


def test_a_model_that_drafts_nothing_is_probed_only_after_the_longest_interval():
    """A model that p_min stops at every call (open prose) is probed at most PROBE_MAX_EVERY steps apart once
    it has drafted nothing EMPTY_CALLS times in a row: each probe catches it up on every token it missed, for a
    draft it does not make. It is still probed then, and at the first step of the next request."""
    silent = Recorded(16, uses_model=True, every=10**9)      # no draft at any history length but 0
    chain = chain_of(silent, cost=XEON_AVX512)
    replay(chain, n_tokens=400)
    calls = np.array(silent.calls)
    assert calls[0] == PROMPT and len(calls) <= EMPTY_CALLS + 2
    assert np.all(np.diff(calls[EMPTY_CALLS - 1:]) >= PROBE_MAX_EVERY)
    replay(chain, n_tokens=50)
    assert silent.calls[len(calls)] == PROMPT


class WrongFirst(Recorded):
    """A draft model whose first two drafts of a request are wrong from their first token, and right after that:
    the first tokens of a reply are where drafts miss most."""

    def draft(self, history, n_max):
        draft = super().draft(history, n_max)
        return Draft.of(draft.tokens + 1) if len(self.calls) <= 2 else draft


def test_a_model_whose_first_draft_misses_is_probed_again_and_then_pays():
    model = WrongFirst(8, uses_model=True)
    chain = chain_of(model)
    seconds = replay(chain, n_tokens=300)
    assert model.calls[2] == model.calls[0] + 2             # probed again at the next steps, in step
    assert chain.entries[0].stats.wins > 20 and seconds < 0.6 * plain_seconds(300)


class SlowFirst(Knowing):
    """Its first call of a request takes 5 ms (it indexes the prompt), the others next to nothing."""

    def begin(self, prompt):
        self.first = True

    def draft(self, history, n_max):
        if self.first:
            self.first = False
            time.sleep(0.005)
        return super().draft(history, n_max)


def test_one_slow_first_call_does_not_make_a_drafter_costly():
    """5 ms is a sixth of a pass: were it the drafter's cost, it would be held back until the next request (and
    there its first call is slow again). The bench's oracle drafted nothing for a whole run so."""
    drafter = SlowFirst(16)
    chain = chain_of(drafter, cost=EPYC)
    for _ in range(2):
        assert replay(chain, n_tokens=200) < 0.4 * plain_seconds(200)
    assert chain.entries[0].stats.held_back == 0


def test_agreeing_drafts_are_trusted_more_than_either_alone():
    chain = chain_of(Knowing(8), Knowing(8))
    chain.begin(REFERENCE[:PROMPT])
    alone = chain.entries[0].record.p(8, 0, 0)[0]
    chain.agreement[0] = Acceptance(hits=19.0, misses=1.0)  # agreement has proved right 19 times in 20
    draft = chain.draft(REFERENCE[:PROMPT], 16)
    assert len(draft) == 8
    assert chain._chosen.p[0] == pytest.approx(0.95) and alone < 0.95


def test_without_a_cost_model_the_draft_with_the_most_expected_tokens_wins():
    chain = chain_of(Knowing(3), Knowing(12), cost=None)
    chain.begin(REFERENCE[:PROMPT])
    assert len(chain.draft(REFERENCE[:PROMPT], 16)) == 12


def test_a_table_that_holds_every_draft_back_is_tested_by_a_probe():
    """A table that says every pass costs 1.5 times as many single passes as it has tokens (possible, but a
    poisoned file here) would keep speculation off for good; a probe verifies a likely draft now and then, and
    the engine hears what the pass really cost."""
    dear = PassCost({1: 0.030, 2: 0.09, 17: 0.765})
    assert max(draft_lengths(chain_of(Knowing(16), cost=dear), 40)) > 0


def test_a_draft_is_weighed_by_the_whole_pass_it_shares():
    p = np.full(16, 0.5)
    assert best_cut(p, XEON, share=PassShare()) == best_cut(p, XEON)
    assert best_cut(p, XEON)[1] > 1.1 * plain_rate(XEON)             # alone, a short draft pays
    beside_three = PassShare(((0, 1), (1, 1), (2, 1), (3, 1)), mine=0, expected=3.0)   # three verifying one token
    k, rate = best_cut(p, XEON, share=beside_three)
    assert rate < plain_rate(XEON, beside_three)                     # it would slow them down more than it brings


def test_one_call_over_several_sequences_is_priced_as_llama_cpp_splits_it():
    """Per-sequence KV buffers: a llama_decode call is evaluated in parts over consecutive sequence ids, as many
    tokens from each as the shortest still has."""
    assert call_seconds(XEON, [(0, 1), (1, 1), (2, 1), (3, 1)], False) == pytest.approx(XEON.seconds(4))
    assert call_seconds(XEON, [(0, 1), (1, 1), (2, 1), (3, 13)], False) == pytest.approx(XEON.seconds(4)
                                                                                        + XEON.seconds(12))
    assert call_seconds(XEON, [(0, 1), (2, 1)], False) == pytest.approx(2 * XEON.seconds(1))   # not consecutive
    assert call_seconds(XEON, [(0, 1), (1, 13)], True) == pytest.approx(XEON.seconds(14))      # one buffer
    assert PassShare().seconds(XEON, 5) == XEON.seconds(5)


# This Xeon's table (ms): the repacked Q4_K kernels take 16 rows at once, so 16 tokens cost less than 15.
SIXTEEN_CHEAP = PassCost({1: 0.0645, 2: 0.0926, 3: 0.1165, 4: 0.1046, 8: 0.1875, 12: 0.2279, 15: 0.2806,
                          16: 0.2289, 17: 0.2820, 34: 0.4630})


def test_a_pass_is_split_into_the_llama_decode_calls_that_cost_least():
    """Beside a single token, a 16-token verification in one call costs 2 tokens, then 15 (373 ms); in two calls,
    16 then 1 (293 ms). Single tokens stay together: two of them cost 93 ms in one call, 129 ms in two."""
    seconds, calls = cheapest_calls(SIXTEEN_CHEAP, [(0, 16), (1, 1)], False)
    assert calls == [[0], [1]] and seconds == pytest.approx(0.2289 + 0.0645)
    assert call_seconds(SIXTEEN_CHEAP, [(0, 16), (1, 1)], False) == pytest.approx(0.0926 + 0.2806)
    assert cheapest_calls(SIXTEEN_CHEAP, [(0, 1), (1, 1)], False) == (pytest.approx(0.0926), [[0, 1]])
    seconds, calls = cheapest_calls(SIXTEEN_CHEAP, [(0, 1), (1, 1), (2, 1), (3, 16)], False)
    assert calls == [[0, 1, 2], [3]]                          # the single tokens in one call, the draft alone
    assert seconds == pytest.approx(0.1165 + 0.2289)          # against 4 x 1, then 15: 385 ms
    beside = PassShare(((0, 1), (1, 1)), mine=0, expected=1.0)
    assert beside.seconds(SIXTEEN_CHEAP, 16) == pytest.approx(0.2289 + 0.0645)   # what a draft is weighed by
    p = np.full(16, 0.9)
    assert best_cut(p, SIXTEEN_CHEAP, share=beside)[0] == 15


def test_a_pass_over_one_shared_kv_buffer_is_priced_as_one_batch():
    """kv_unified: llama.cpp evaluates the whole pass at once, so a long draft beside single tokens costs only its
    tokens, and may pay where parts would not."""
    four = PassShare(((0, 1), (1, 1), (2, 1), (3, 1)), mine=3, expected=3.0, one_batch=True)
    assert four.seconds(XEON, 13) == pytest.approx(XEON.seconds(16))
    parts = PassShare(four.segments, mine=3, expected=3.0)
    p = np.full(16, 0.9)
    assert best_cut(p, XEON, share=four)[1] > 1.1 * plain_rate(XEON, four)
    assert best_cut(p, XEON, share=parts)[1] < plain_rate(XEON, parts)


class Overconfident(DrafterRecord):
    """Estimates every token of every draft as all but certain, whatever the drafts got right."""

    def p(self, length, run, support=None):
        return np.full(length, 0.99)


def test_a_drafter_whose_estimates_promise_too_much_is_trusted_less(monkeypatch):
    """Its drafts are always wrong, its estimates say they are right: trusted, they would each cost a long pass for
    one token; discounted by what its verified drafts delivered, they are held back and decoding runs as plain."""
    def replay_overconfident():
        chain = chain_of(Knowing(16, wrong_at=0))
        chain.entries[0].record = Overconfident()
        return chain, replay(chain)

    chain, seconds = replay_overconfident()
    assert chain.entries[0].record.trust < 0.1
    assert seconds <= plain_seconds() / 0.9
    monkeypatch.setattr(Overconfident, "verified", lambda self, p, n_accepted: None)   # estimates taken as they are
    _, blind_seconds = replay_overconfident()
    assert blind_seconds > 2 * plain_seconds()


class SlowToCatchUp(Recorded):
    """A draft model that evaluates 3 ms per token it has not seen (its begin, over the prompt), and whose drafts
    are wrong from their first token."""

    def begin(self, prompt):
        time.sleep(0.003 * len(prompt))


def test_a_model_is_not_probed_where_catching_up_costs_more_than_its_draft_could_bring():
    cheap_to_catch_up = Recorded(16, wrong_at=0, uses_model=True)
    slow_to_catch_up = SlowToCatchUp(16, wrong_at=0, uses_model=True)
    for model in (cheap_to_catch_up, slow_to_catch_up):      # on EPYC a 4-token draft, if all right, pays
        replay(chain_of(model, cost=EPYC), n_tokens=300, n_max=4)      # a little
    assert cheap_to_catch_up.calls[-1] > PROMPT + 2 * PROBE_EVERY    # probed again (its record wrong: after long waits)
    assert slow_to_catch_up.calls[-1] <= PROMPT + MODEL_BURST        # after its first steps, catching up on 16
                                                                      # missed tokens costs more than that
    for _ in range(2):                                                # and it is probed again by every request
        replay(chain_of(slow_to_catch_up, cost=EPYC), n_tokens=50, n_max=4)
    assert slow_to_catch_up.calls.count(PROMPT) == 3


class SlowlyDrafting(Recorded):
    """A draft model whose calls take ``call_seconds``, 5 ms."""

    call_seconds = 0.005

    def draft(self, history, n_max):
        time.sleep(self.call_seconds)
        return super().draft(history, n_max)


def test_a_model_is_probed_only_where_a_draft_as_long_as_its_drafts_come_out_could_pay():
    """On EPYC a 16-token draft all right would pay, a 1-token one not: a model whose drafts stop after one token
    (its confidence under p_min) is probed at a request's first step, not again and again for a length it does not
    draft; once those drafts lie REACH_SPAN tokens behind (the text may have changed) it is probed at growing
    intervals."""
    long_drafts = SlowlyDrafting(16, wrong_at=0, uses_model=True)
    one_token_drafts = SlowlyDrafting(1, wrong_at=0, uses_model=True)
    for model in (long_drafts, one_token_drafts):
        replay(chain_of(model, cost=EPYC), n_tokens=300)
    assert long_drafts.calls[-1] > PROMPT + 2 * PROBE_EVERY          # probed at growing intervals
    gaps = np.diff(one_token_drafts.calls)
    assert one_token_drafts.calls[0] == PROMPT and len(gaps) <= 5
    assert np.all(gaps > REACH_SPAN) and np.all(gaps[1:] >= gaps[:-1])


class DearModel(SlowlyDrafting):
    """A draft model whose calls take 50 ms, 1.7 single passes on XEON (the 0.5B's on a 2-core EPYC take a pass and
    more)."""

    call_seconds = 0.050


def test_probes_of_a_model_that_does_not_pay_cost_at_most_their_share_of_the_run():
    """On XEON a long draft all right would pay for a 50 ms call, so the model is probed; its probes, wrong, save
    nothing. Probed as before in a burst at a request's start and then every 16, 32, 64... steps, they cost 5% of
    plain decoding's time over 300 tokens; now, past the request's first burst (which is not charged), what they
    cost beyond PROBE_CREDIT stays within PROBE_SHARE of it, and the model is still probed again later in the
    request."""
    model = DearModel(16, wrong_at=0, uses_model=True)
    chain = chain_of(model, cost=XEON)
    replay(chain, n_tokens=300)
    first_burst = list(range(PROMPT, PROMPT + MODEL_BURST + 1))
    assert model.calls[:MODEL_BURST + 1] == first_burst
    call = DearModel.call_seconds     # what its calls took: beyond the credit, the share, but for one call's overshoot
    later = len(model.calls) - len(first_burst)
    assert call * later <= PROBE_SHARE * plain_seconds(300) + PROBE_CREDIT * XEON.seconds(1) + call
    assert model.calls[-1] > PROMPT + 2 * PROBE_EVERY
    assert chain.entries[0].stats.wins <= 1


# Measured on a 2-core Intel Xeon (family 6, model 106; AVX-512), scaled tenfold down: a single pass of the 1.5B
# 71 ms, 16 tokens 5.76 single passes; the re-quantized 0.5B drafts a token in 21 ms.
ICE_LAKE = PassCost({1: 0.0071, 2: 0.0120, 4: 0.0148, 8: 0.0297, 16: 0.0409, 17: 0.0474})


class WrongAtTheStart(Recorded):
    """A draft model taking 2.1 ms per token it drafts (and one more pass), whose first draft of a reply is wrong
    from its first token (the reply's opening, which no draft model guesses), the rest right. Its time passes on a
    clock of its own (``clock``), which the chain is given: a busy machine's sleeps overshoot by milliseconds, and
    priced so the model looks too dear to pay."""

    clock = 0.0

    def draft(self, history, n_max):
        self.wrong_at = 0 if len(history) == PROMPT else None
        draft = super().draft(history, n_max)
        self.clock += 0.0021 * (len(draft) + 1)
        return draft


def test_a_model_that_pays_is_asked_after_missing_the_replys_opening(monkeypatch):
    """On this Xeon the 0.5B pays on code generation (1.23x plain at fixed lengths), yet the chain held it back for
    whole runs: its first probe missed the reply's first token, and the probe budget, whose plain time is a step or
    two at a request's start, stopped the burst that would have proved it right, and every probe after it. A
    request's first burst now runs its course and is not charged to the budget."""
    model = WrongAtTheStart(16, uses_model=True)
    monkeypatch.setattr("specframe.drafting.chain.time", SimpleNamespace(perf_counter=lambda: model.clock))
    chain = chain_of(model, cost=ICE_LAKE)
    seconds = replay(chain, n_tokens=200, passes=ICE_LAKE)
    stats = chain.entries[0].stats
    assert stats.wins >= 8 and stats.accepted_tokens >= 100
    assert seconds + stats.draft_ms / 1e3 < 200 * ICE_LAKE.seconds(1) / 1.05      # 1.14x here, 0.98x before


def test_a_burst_waits_out_a_step_where_another_draft_is_expected_to_pay_more_and_runs_whatever_the_budget():
    """A cheap draft expected to pay at the second step pre-empted the model there, which ended its first burst: the
    next probe came 16 steps later. The burst now goes on at the step after, the budget spent or not; a request's
    first burst is not charged to it, a later one is."""
    record = DrafterRecord()
    record.probe_budget.net_cost = 1.0                     # spent: no new probe starts
    assert record.decide(False, True, could_pay=False, pays_if_right=True) is None
    record.restart()
    record.probe_budget.net_cost = 0.0
    assert record.decide(False, True, could_pay=False, pays_if_right=True) == PROBE   # pre-empted, first step
    assert not record.charged
    record.probe_budget.net_cost = 1.0
    assert record.decide(False, True, could_pay=False, pays_if_right=True) is None    # pre-empted: waits
    for _ in range(MODEL_BURST - 1):
        assert record.decide(False, True, could_pay=True, pays_if_right=True) == PROBE
        assert not record.charged
    assert record.decide(False, True, could_pay=True, pays_if_right=True) is None     # the burst has run its course
    for _ in range(PROBE_EVERY):                                                       # a later probe must wait
        assert record.decide(False, True, could_pay=True, pays_if_right=True) is None  # for the budget
    record.probe_budget.net_cost = 0.0
    assert record.decide(False, True, could_pay=True, pays_if_right=True) == PROBE
    assert record.charged
    record.probe_budget.net_cost = 1.0
    assert record.decide(False, True, could_pay=True, pays_if_right=True) == PROBE    # its burst runs, charged
    assert record.charged


def test_a_requests_first_burst_is_not_charged_to_the_budget_when_its_calls_are_asked_either():
    """A model that the acceptance memory expects to pay is asked at a request's first step, not probed; charged
    for that draft when it missed the reply's opening, it was not probed again for 50 to 100 tokens."""
    record = DrafterRecord()
    assert record.decide(True, True) == ASK and not record.charged                   # the first step
    for _ in range(MODEL_BURST):
        assert record.decide(True, True) == ASK and not record.charged               # its burst
    assert record.decide(True, True) == ASK and record.charged                       # after it
    record.restart()
    assert record.decide(True, False) == ASK and record.charged      # a drafter not a model has no first burst


def test_a_dear_model_whose_drafts_are_right_is_not_held_back_by_what_its_probes_cost():
    """Its first probe, two tokens right, saves about what it costs; then its long drafts pay for their calls."""
    model = DearModel(16, uses_model=True)
    chain = chain_of(model, cost=XEON)
    seconds = replay(chain, n_tokens=200)
    assert chain.entries[0].stats.wins >= 8 and seconds < 0.5 * plain_seconds(200)
    assert chain.entries[0].record.probe_budget.net_cost < 0


def test_how_far_a_models_drafts_go_is_learnt_anew_for_each_request_and_from_the_texts_last_tokens():
    record = DrafterRecord()
    for at in (100, 101, 102):
        record.asked(at)
        record.drafted(1, asked=16, longest=16)           # stopped short: prose, where it is seldom confident
    assert record.reach(16, 103) == 1
    assert record.reach(16, 102 + REACH_SPAN) == 1
    assert record.reach(16, 103 + REACH_SPAN) == 16       # where it was unsure lies behind
    record.asked(200)
    record.drafted(16, asked=16, longest=16)
    assert record.reach(16, 201) == 16
    record.restart()
    assert record.reach(16, 103) == 16                    # the next request may be code


def test_a_model_held_back_at_a_near_tie_is_asked_again_once_its_estimate_pays():
    """Its catching up on the tokens it missed is charged to the next draft only as far as that draft's expected
    tokens go: whole, it grew at every step held back, until no draft could pay for it."""
    record = DrafterRecord(catch_up=0.005)
    record.asked(100)
    p = np.full(15, 0.95)
    for _ in range(200):
        record.decide(False, True)
    catching_up, missed = record.catching_up(300), record.missed(300)
    assert catching_up == pytest.approx(1.0) and missed == 200
    assert best_cut(p, XEON, catching_up=catching_up, missed=missed)[1] > 1.5 * plain_rate(XEON)
    assert best_cut(p, XEON, catching_up=catching_up)[1] < plain_rate(XEON)    # charged whole: never again


class CatchingUp(Recorded):
    """A draft model that evaluates the tokens it has not seen at 2 ms each (its begin, over the prompt, too: that
    times its catching up), then takes 5 ms per token it drafts (and one more pass)."""

    seen = PROMPT
    catch_up_seconds, token_seconds = 0.002, 0.005

    def begin(self, prompt):
        time.sleep(self.catch_up_seconds * len(prompt))
        self.seen = len(prompt)

    def draft(self, history, n_max):
        draft = super().draft(history, n_max)
        time.sleep(self.catch_up_seconds * (len(history) - self.seen) + self.token_seconds * (len(draft) + 1))
        self.seen = len(history)
        return draft


class UnsureAtFirst(CatchingUp):
    """The 0.5B on this Xeon, to scale: it catches up at 5 ms a token and drafts at 17 ms, right throughout, but
    confident for two tokens at most over the reply's first 24: drafts that short do not pay, longer ones do."""

    catch_up_seconds, token_seconds = 0.005, 0.017

    def draft(self, history, n_max):
        return super().draft(history, n_max if len(history) >= PROMPT + 24 else min(n_max, 2))


def test_a_model_whose_first_drafts_came_out_short_is_asked_for_long_ones_later():
    """How far its drafts went at the reply's opening is not held against it for the rest of the reply, nor is
    all it has to catch up on by then charged to its next draft alone."""
    model = UnsureAtFirst(16, uses_model=True)
    chain = chain_of(model, cost=XEON_AVX512)
    replay(chain, n_tokens=200)
    long_calls = [at for at in model.calls if at >= PROMPT + 24]
    assert long_calls and long_calls[0] <= PROMPT + 24 + REACH_SPAN + PROBE_EVERY
    assert chain.entries[0].stats.accepted_tokens >= 100


def test_a_models_call_cost_leaves_out_its_catching_up(monkeypatch):
    """What a probe spends on the tokens the model missed while held back is priced as catching up; counted in its
    drafting cost as well, it made every later draft look dearer, so the model was held back longer still. The
    chain decides to probe before it asks, so the probe must still be known for one that catches up. (Its probes
    wait until their share of the run has paid for its first call, ProbeBudget: some 40 steps here, after which a
    longest draft all right, caught up, still pays; its record, wrong throughout, is given room by a wide HOPE.)"""
    monkeypatch.setattr(chain_module, "HOPE", 100.0)
    model = CatchingUp(16, wrong_at=0, uses_model=True)     # wrong: held back after its first steps
    chain = chain_of(model, cost=XEON)
    replay(chain, n_tokens=8 * PROBE_EVERY)
    assert max(np.diff(model.calls)) >= PROBE_EVERY        # probed after a wait, catching up on what it missed
    record = chain.entries[0].record
    assert record.catch_up == pytest.approx(0.002, rel=0.3)
    assert record.cost.seconds(2) == pytest.approx(0.015, rel=0.3)    # a probe's own drafting: 3 passes of 5 ms


def test_a_model_whose_record_leaves_no_room_to_pay_is_probed_again_only_after_long_waits():
    """Wrong at every first token, the model's record after its first burst leaves no room for a draft of it to pay,
    its acceptance taken HOPE standard errors high: it is probed again only after PROBE_MAX_EVERY steps, not after
    16, 32, 64..., each probe first catching it up on every token it missed (on a 2-core EPYC the 0.5B's probes,
    none expected to pay, took 4.5% of a code-generation run). Never given up for good: a request's first burst
    goes on through misses, and the probes after long waits go on (where catching up on what it missed meanwhile
    would not cost more than a draft of it could bring)."""
    model = CatchingUp(16, wrong_at=0, uses_model=True)
    model.catch_up_seconds = 0.0002
    replay(chain_of(model, cost=EPYC), n_tokens=len(REFERENCE) - PROMPT)
    assert model.calls[:MODEL_BURST + 1] == list(range(PROMPT, PROMPT + MODEL_BURST + 1))
    waits = np.diff(model.calls[MODEL_BURST:])
    assert len(waits) >= 1 and np.all(waits >= PROBE_MAX_EVERY)


class BegunSlowly(SlowToCatchUp):
    """SlowToCatchUp, counting the prompts it was begun with."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.begun = []

    def begin(self, prompt):
        self.begun.append(len(prompt))
        super().begin(prompt)


def test_a_model_known_to_catch_up_too_slowly_is_not_begun_on_the_prompt(tmp_path, monkeypatch):
    """Evaluating the prompt first would cost more than even a longest draft all right could bring back: once a
    run has timed its catching up, the next (another process: a new chain, the rate from the store) does not begin
    the model, nor probe it."""
    monkeypatch.setattr("specframe.drafting.chain.other_load", lambda *_: 0.0)   # the rule is tested, not the load
    store = ModelRateStore(tmp_path, "model")

    def run_once():
        model = BegunSlowly(16, wrong_at=0, uses_model=True)
        chain = chain_of(model, cost=EPYC)
        chain.entries[0].catch_up_store, chain.entries[0].record.catch_up = store, store.load()
        replay(chain, n_tokens=50, n_max=4)
        return model, chain.entries[0].stats

    first, stats = run_once()
    assert first.begun == [PROMPT] and first.calls[0] == PROMPT and stats.begins_deferred == 0   # not known yet
    assert store.load() == pytest.approx(0.003, rel=0.5)
    later, stats = run_once()
    assert later.begun == [] and later.calls == [] and stats.begins_deferred == 1 and stats.begin_ms == 0


class SlowToLoad(Knowing):
    """Knowing, as a draft model whose first use loads its weights (``prepare``: 50 ms), or fails to."""

    def __init__(self, *args, fails=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.prepared, self.fails = 0, fails

    def prepare(self):
        self.prepared += 1
        time.sleep(0.05)
        if self.fails:
            raise RuntimeError("no such weights")


def test_a_drafter_is_prepared_once_on_first_use_and_its_load_is_not_priced_as_its_calls():
    loading = SlowToLoad(16, uses_model=True)
    chain = chain_of(loading)
    replay(chain, n_tokens=60)
    stats, record = chain.entries[0].stats, chain.entries[0].record
    assert loading.prepared == 1 and stats.prepare_ms >= 50 and stats.accepted_tokens > 30
    assert stats.begin_ms + stats.draft_ms < 50                  # timed apart: its calls are not priced by its load
    assert record.catch_up < 0.01 / PROMPT and record.cost.typical < 0.01


def test_a_model_the_chain_never_asks_is_never_prepared():
    """Known to catch up too slowly on this CPU, its begin is deferred and it is never asked: a run does without
    loading it."""
    model = SlowToLoad(16, wrong_at=0, uses_model=True)
    chain = chain_of(model, cost=EPYC)
    chain.entries[0].record.catch_up = 0.003
    replay(chain, n_tokens=50, n_max=4)
    assert model.prepared == 0 and chain.entries[0].stats.begins_deferred == 1 and chain.entries[0].stats.calls == 0


def test_a_drafter_that_cannot_be_prepared_is_set_aside_and_the_others_go_on():
    failing, other = SlowToLoad(16, fails=True), Knowing(16)
    chain = chain_of(failing, other)
    replay(chain, n_tokens=100)
    assert chain.entries[0].disabled == "prepare() raised RuntimeError: no such weights" and failing.prepared == 1
    assert chain.entries[0].stats.calls == 0 and chain.entries[1].stats.accepted_tokens > 50


def test_a_deferred_begin_runs_before_the_models_first_draft():
    model = BegunSlowly(16, uses_model=True)
    chain = chain_of(model, cost=EPYC)
    chain.entries[0].record.catch_up = 0.003
    chain.begin(REFERENCE[:PROMPT])
    assert model.begun == []
    candidate = chain._ask(chain.entries[0], REFERENCE[:PROMPT + 5], 4)   # as a step that asks it does
    assert model.begun == [PROMPT] and model.calls == [PROMPT + 5] and candidate is not None


def test_a_catch_up_rate_is_not_stored_when_timed_under_load_nor_loaded_when_old(tmp_path, monkeypatch):
    store = ModelRateStore(tmp_path, "model")
    store.save(0.01, other_load=1.0)
    assert store.load() == 0.0
    store.save(0.01, other_load=0.1)
    assert store.load() == 0.01
    monkeypatch.setattr("time.time", lambda: 1e12)
    assert store.load() == 0.0
    store.path.write_text("{not json")
    assert store.load() == 0.0


def test_a_model_rate_is_stored_at_the_pace_of_the_pass_cost_table(tmp_path):
    """Timed while the target's passes took a quarter longer than the table says, a rate is kept a quarter faster:
    a later run weighs it against the same table, whatever the machine's pace was at the time."""
    store = ModelRateStore(tmp_path, "model")
    store.save(0.025, other_load=0.0, pace=1.25)
    assert store.load() == pytest.approx(0.02)


class Resuming(Drafter):
    """Drafts the reference on, its first token wrong at about a third of the steps (a copy resumed at the wrong
    place)."""

    name = "resuming"

    def draft(self, history, n_max):
        n = len(history)
        tokens = REFERENCE[n:n + n_max].copy()
        if (n * 7919) % 10 < 3:
            tokens += 1
        return Draft.of(tokens)


def test_a_short_reply_starts_from_what_the_drafters_first_tokens_were_worth_in_an_earlier_run(tmp_path):
    """Within a short reply the first-token estimates see too few drafts to trust a drafter right two times in three,
    and hold its drafts back; a chain that starts from an earlier run's counts verifies them from the start."""
    earlier = chain_of(Resuming(None, None))
    replay(earlier, n_tokens=400)
    counts = earlier.entries[0].record.tally
    assert sum(drafts for drafts, _ in counts.first.values()) > 40
    memory = AcceptanceMemory("resuming", tmp_path)
    memory.save([Learned(counts.first)])   # the first tokens' alone: this drafter's wrong steps fall at fixed
    cold, warm = chain_of(Resuming(None, None)), chain_of(Resuming(None, None))   # places, which any change of
    warm.entries[0].record.learn(memory.load())                                   # length moves a short reply to
    assert replay(warm, n_tokens=60) < 0.85 * replay(cold, n_tokens=60)


def test_what_earlier_runs_found_weighs_as_a_few_drafts_of_this_one():
    record = DrafterRecord()
    cold = record.p(4, 1, 2)[0]
    record.learn(Learned({(1, 2): (1000.0, 990.0)}))
    assert record.p(4, 1, 2)[0] > cold + 0.2 and record.p(4, 0, 2)[0] == DrafterRecord().p(4, 0, 2)[0]
    for _ in range(3 * int(LEARNED_WEIGHT)):       # this run's own drafts of the pair, all wrong, outweigh it
        record.score(REFERENCE[:16] + 1, 1, 2, REFERENCE[:1])
    assert record.p(4, 1, 2)[0] < 0.5
    assert record.tally.first[1, 2] == (3 * LEARNED_WEIGHT, 0)


def test_the_tokens_after_an_accepted_one_start_from_earlier_runs_and_fade_under_this_ones():
    """A draft model right to the end of its long drafts in earlier runs is not started from the prior (90%, taken
    cautiously) that held its drafts' length back; a run whose drafts go wrong after their first token soon says so."""
    cold = DrafterRecord().p(8, 0, 0)[1]
    record = DrafterRecord()
    record.learn(Learned(later=(200.0, 2010.0, 2000.0)))         # 200 drafts, a later token wrong 1 time in 200
    assert record.p(8, 0, 0)[1] > max(0.95, cold + 0.1)
    for _ in range(3 * int(LEARNED_WEIGHT)):
        record.score(np.array([REFERENCE[0], REFERENCE[1] + 1]), 0, 0, REFERENCE[:3])   # wrong at its second token
    assert record.p(8, 0, 0)[1] < 0.3
    assert record.tally.later == (3 * LEARNED_WEIGHT, 3 * LEARNED_WEIGHT, 0)


def test_a_draft_not_made_yet_is_estimated_on_its_runs_whole_evidence_and_on_earlier_runs():
    """A draft model is asked only where its next draft, not made yet, is expected to pay. That estimate has no
    support level: taken as the prior of one, worth PRIOR_WEIGHT drafts whatever the run had seen, it held a model
    right 94% of the time at half that at a request's start, and well under its rate all along."""
    assert DrafterRecord().p_next(4)[0] < 0.55                 # nothing known: the prior, taken cautiously
    warm = DrafterRecord()
    warm.learn(Learned({(0, 0): (80.0, 74.0), (0, 3): (20.0, 20.0), (1, 0): (10.0, 0.0)}))
    assert warm.p_next(4)[0] > 0.8                              # run 0 over every support: right 94 times in 100
    record = DrafterRecord()
    right_then_wrong = np.array([REFERENCE[0], REFERENCE[1] + 1])   # the first token stands, the draft stops there
    for i in range(20):
        record.score(right_then_wrong if i % 10 else right_then_wrong + 1, 0, i % 5, REFERENCE[:3])
    assert record.p_next(4)[0] > 0.8                            # 18 of 20 right: more evidence, less caution


def test_the_acceptance_memory_adds_each_save_to_what_fades_and_ignores_a_bad_file(tmp_path):
    memory = AcceptanceMemory("ngram-simple:n=12:target.gguf", tmp_path)
    assert memory.load() == Learned()
    memory.save([Learned({(0, 1): (10, 3)}, (4, 30, 25)),                      # two slots' records
                 Learned({(0, 1): (2, 1), (1, 4): (5, 5)}, (1, 3, 3))])
    assert memory.load() == Learned({(0, 1): (12.0, 4.0), (1, 4): (5.0, 5.0)}, (5.0, 33.0, 28.0))
    memory.save([Learned({(0, 1): (10, 9)})])
    kept = memory.load()
    assert kept.first == {(0, 1): (pytest.approx(KEPT_PER_SAVE * 12 + 10), pytest.approx(KEPT_PER_SAVE * 4 + 9)),
                          (1, 4): (pytest.approx(KEPT_PER_SAVE * 5), pytest.approx(KEPT_PER_SAVE * 5))}
    assert kept.later == pytest.approx((KEPT_PER_SAVE * 5, KEPT_PER_SAVE * 33, KEPT_PER_SAVE * 28))
    for bad in ("{not json", '{"first_token": [[0, 1, 2, 3]]}', '{"first_token": [[0, 1]]}', "[]",
                '{"first_token": [], "later_tokens": [1, 2, 3]}', '{"first_token": [], "later_tokens": 7}',
                '{"first_token": [], "later_tokens": [Infinity, 2, 1]}'):
        memory.path.write_text(bad)
        assert memory.load() == Learned()
    memory.path.write_text('{"first_token": [[2, 8, 4, 4]]}')   # a file of before the later tokens were kept
    assert memory.load() == Learned({(2, 8): (4.0, 4.0)})
    memory.path.write_text("{not json")
    memory.save([Learned({(2, 8): (4, 4)})])          # written anew
    assert memory.load() == Learned({(2, 8): (4.0, 4.0)}, (0.0, 0.0, 0.0))


def test_a_models_drafting_rate_is_what_its_timed_calls_cost_and_tells_under_what_load():
    record = DrafterRecord()
    assert record.drafting_rate(16) is None                            # no call timed: nothing to store
    record.assume_drafting_rate(0.010, 16)                             # as an earlier run stored it
    assert record.cost.seconds(16) == pytest.approx(0.170) and record.drafting_rate(16) is None
    record = DrafterRecord()
    record.cost.observe(2, 0.030)
    record.timed_call(0.030, others_busy((10.0, 1.0), (10.06, 1.03)))   # the CPU busy 60 ms, this process 30
    rate, load = record.drafting_rate(16)
    assert rate == pytest.approx(0.010) and load is None               # too short to tell the load by
    for _ in range(9):
        record.timed_call(0.030, others_busy((10.0, 1.0), (10.06, 1.03)))
    assert record.drafting_rate(16)[1] == pytest.approx(1.0)           # another process kept a core busy
    record.timed_call(0.030, others_busy(None, None))                  # no /proc: the call's load is unknown
    assert record.drafting_rate(16)[1] == pytest.approx(1.0)


def test_the_tokens_after_an_accepted_one_are_estimated_a_standard_error_low():
    """Three 16-token drafts all right leave the record after an accepted token with no miss to count: taken at
    face value it promises every long draft whole (0.99 a token), where the copy a draft follows may end anywhere."""
    record = DrafterRecord()
    for _ in range(3):
        record.score(REFERENCE[:16], 0, 0, REFERENCE[:17])
    later = record.later
    face_value = later.p
    n = later.hits + later.misses
    assert face_value > 0.99
    assert record.p(16, 0)[1:] == pytest.approx(face_value - (face_value * (1 - face_value) / (n + 1)) ** 0.5)


def test_drafts_held_back_that_carry_on_teach_the_tokens_after_an_accepted_one():
    """A copy held back emits one token a step; each step's draft carries on the last, so its first token is the
    token after an accepted one of the draft before. Those steps teach the later-token estimate as verified drafts
    would: without them a copy under way stays priced by its prior and is held back for its whole length."""
    record = DrafterRecord()
    before = record.p(16, 0)[1]
    for at in range(12):
        draft = REFERENCE[at:at + 16]
        record.score(draft, record.run_of(draft), 0, REFERENCE[at:at + 1])
    assert record.p(16, 0)[1] > max(before, 0.9)
    misses = record.later.misses
    draft = REFERENCE[12:28]
    record.score(draft, record.run_of(draft), 0, REFERENCE[12:13] + 1)   # it carries on, and goes wrong
    assert record.later.misses == pytest.approx(DECAY * misses + 1)


def test_drafts_are_cut_short_until_a_stored_table_is_confirmed():
    """A stored table is taken at its word for long drafts only once a pass over several tokens ran at its pace."""
    cost = PassCost(XEON.measured, confirmed=False)    # as loaded from a file
    chain = chain_of(Knowing(16), cost=cost)
    before = draft_lengths(chain, 40)
    cost.observe(4, XEON.seconds(4))                    # a pass over several tokens at the table's pace
    after = draft_lengths(chain, 20, at=PROMPT + 40 + sum(before))
    assert 0 < max(before) <= UNCONFIRMED_DRAFT and max(after) > UNCONFIRMED_DRAFT
