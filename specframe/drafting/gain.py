"""The expected gain of a draft: how likely its tokens are to be accepted, what drafting costs, what length pays.

A drafted token is accepted with probability ``p`` once the tokens before it were (a geometric model), so a draft
cut to ``k`` tokens yields ``1 + p + p^2 + ... + p^k`` tokens for the seconds of a target pass over ``1 + k``
tokens (``PassCost``) plus any drafting still to be paid. The best cut maximises that rate; a draft is worth
verifying only when its rate beats plain decoding's, one token per single-token pass.

The first token of a draft and the tokens after an accepted one are estimated apart, per drafter: drafts are
mostly either wrong from the start or right for a stretch. The first token's estimate is kept by the draft's
*run*, how many tokens the drafter's drafts have got right in a row when this one carries on the last (a copy
under way tends to go on), and by the context support of the token (support.py: a token that already followed a
long stretch of the same context is likelier). Each estimate starts from a weak prior that grows with both, and
from what the drafter's first tokens were worth in earlier runs at the same run and support (acceptance_memory.py),
and the drafter's record soon outweighs both. Every step, each draft that was made is scored against the tokens the
target emitted, whether or not it was the draft verified, so the estimates of all drafters learn from every step
at no cost.

A pass may verify several sequences' drafts at once (a server's slots). Its cost then depends on all the tokens in
it, how llama.cpp splits them and how many llama_decode calls the engine makes of it (``cheapest_calls``), so a
sequence's draft is weighed by the rate of the whole pass (``PassShare``): the tokens the rest of the pass is
expected to yield plus this draft's, over the seconds of the whole pass. Sequences choose in turn, each seeing what
those before it chose: a draft is worth its tokens only while it does not slow the others down by more than it
brings. A pass over one sequence shares nothing, and the rate is that sequence's own.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from specframe.drafting.acceptance_memory import Learned
from specframe.drafting.pass_cost import PassCost, load_over
from specframe.prefix import common_prefix

DECAY = 0.9             # weight of the past in an acceptance estimate, per scored draft
RUNS = (0, 1, 4, 16)    # run buckets: a fresh draft, or one carrying on after 1-3, 4-15, 16+ tokens right
PROBE_EVERY = 16        # a costly drafter not asked for this many steps is asked once anyway,
PROBE_MAX_EVERY = 256   # and twice as late each time that did not pay: never given up for good
PROBE_LENGTH = 2        # tokens a probe asks for
MODEL_BURST = 4         # a probed model that could pay is asked or probed at this many following steps too
ASK, PROBE = "ask", "probe"
CAUTION = 1.0           # acceptance estimates are taken this many standard errors low: little evidence, little trust
HOPE = 1.0              # and this many high where a model's probes ask whether its drafts could pay at all
CALIBRATION_PRIOR = 4.0  # tokens of agreement between estimates and outcomes a drafter's trust starts with
PRIOR_WEIGHT = 2.0     # an estimate starts as worth this many observations of its prior:
LEARNED_WEIGHT = 8.0   # what earlier runs found weighs as at most this many of a run's drafts: a reply's few
                       # hundred tokens are over before its own estimates of a (run, support) pair have seen enough
CHEAP_SHARE = 0.25      # a drafter whose calls cost less than this share of a single pass is asked every step while
                        # its calls pay for themselves (Upkeep); a dearer one only when it is expected to pay
COST_SAMPLES = 4        # calls timed before a drafter can be found costly by its calls' time (one slow first call
                        # that indexed a whole prompt, or met a page fault, must not hold it back for good)
CATCH_UP_TIMED_FROM = 16   # prompt tokens a model's begin must evaluate to time its catching up by
REACH_SAMPLES = 8          # a model's recent calls whose draft lengths tell how long its drafts come out,
REACH_SPAN = 32            # if made within this many tokens of the text
EMPTY_CALLS = 3            # a model whose calls drafted nothing this many times in a row is asked or probed only
                           # after PROBE_MAX_EVERY steps (p_min stops it: each call would only catch it up)
UPKEEP_PRIOR = 4.0         # single passes' worth of savings asking starts a request with: a drafter whose copies come
                           # now and then is not paused before the first came (nor the chain)
UPKEEP_DECAY = 0.995       # weight of the past in what asking cost and saved, per step asked: about a request
UPKEEP_SHARE = 0.02        # the time weighed (the chain's a step, a drafter's a call), as a share of a single pass,
                           # under which asking is never paused (a CPU's: tens of microseconds beside tens of ms)
PAUSE_MAX = 8              # the most steps the chain, or a drafter, sits out at once: a copy that starts meanwhile
                           # waits no longer
PROBE_SHARE = 0.02         # what a costly drafter's calls may cost, net of what its drafts saved, before it is probed
                           # no more: a share of plain decoding's time for the tokens emitted meanwhile (ProbeBudget),
PROBE_CREDIT = 0.5         # and beyond that share, plain decoding's time for this many tokens: a probe that costs a
                           # wrong draft's few milliseconds of pass is not the end of a request's first burst


def refuted(n_drafted: int, n_confirmed: int, n_emitted: int) -> bool:
    """Whether the tokens the target emitted refuted a token of a draft of ``n_drafted`` whose first ``n_confirmed``
    they confirmed: both go on past the confirmed ones, and the next differ."""
    return n_confirmed < min(n_drafted, n_emitted)


def decided(n_drafted: int, n_confirmed: int, n_emitted: int) -> bool:
    """Whether the tokens the target emitted decide a draft of ``n_drafted`` whose first ``n_confirmed`` they
    confirmed: they refuted one of its tokens, or confirmed them all. A draft they agree with but end before (one
    cut to a shorter verification, or not verified this step) is not decided: told it was accepted only as far as
    the output went, a drafter that learns from its acceptance (ngram-mod's pool reset, ngram-map's draft lengths)
    would take every such draft for a poor one."""
    return refuted(n_drafted, n_confirmed, n_emitted) or n_confirmed == n_drafted


def call_seconds(cost: PassCost, segments: list[tuple[int, int]], one_batch: bool) -> float:
    """Seconds of one llama_decode over ``segments``, (sequence id, tokens) in batch order. With a KV buffer per
    sequence llama.cpp evaluates it in parts: each takes, from a run of consecutive sequence ids, as many tokens
    from every one of them as the shortest still has, so a long draft beside single tokens costs a part of its
    own. With one buffer for all (``one_batch``: kv_unified) it is one batch, priced by all its tokens."""
    if one_batch or len(segments) == 1:
        return cost.seconds(sum(n for _, n in segments))
    seqs = [seq for seq, _ in segments]
    left = [n for _, n in segments]
    total = 0.0
    while any(left):
        first = next(i for i, n in enumerate(left) if n)
        part, last = [first], seqs[first]
        for i in range(first + 1, len(left)):
            if left[i] and seqs[i] == last + 1:
                part.append(i)
                last = seqs[i]
        each = min(left[i] for i in part)
        for i in part:
            left[i] -= each
        total += cost.seconds(each * len(part))
    return total


def cheapest_calls(cost: PassCost, segments: list[tuple[int, int]], one_batch: bool) -> tuple[float, list[list[int]]]:
    """The fewest seconds a pass over ``segments`` takes and how: the indices of the segments of each llama_decode
    call, in batch order. A pass need not be one call: where batches of 16 tokens run faster than of 15 (this
    Xeon: 229 ms against 281), a 16-token verification beside a single token costs 2 + 15 tokens in parts, 373 ms,
    and 16, then 1, in two calls, 293 ms. The ways weighed: one call, one call per segment, and the single tokens
    together with each longer segment alone."""
    everything = list(range(len(segments)))
    ways = [[everything], [[i] for i in everything]]
    singles = [i for i in everything if segments[i][1] == 1]
    if 1 < len(singles) < len(segments):
        ways.append([singles] + [[i] for i in everything if segments[i][1] != 1])
    priced = [(sum(call_seconds(cost, [segments[i] for i in call], one_batch) for call in way), way) for way in ways]
    return min(priced, key=lambda pair: pair[0])


@dataclass(frozen=True)
class PassShare:
    """The pass a draft would be verified in: its segments in batch order as (sequence id, tokens), ``mine`` the
    index of the drafting sequence's own segment, the tokens the other segments are expected to yield, and whether
    the sequences share one KV buffer (``one_batch``). The pass is priced as the engine runs it: in the cheapest
    of the ways ``cheapest_calls`` weighs."""

    segments: tuple[tuple[int, int], ...] = ()
    mine: int = 0
    expected: float = 0.0
    one_batch: bool = False

    def seconds(self, cost: PassCost, n_tokens: int) -> float:
        """The pass's seconds when this sequence puts ``n_tokens`` in it."""
        if len(self.segments) <= 1:       # this sequence's alone
            return cost.seconds(n_tokens)
        segments = list(self.segments)
        segments[self.mine] = (segments[self.mine][0], n_tokens)
        return cheapest_calls(cost, segments, self.one_batch)[0]

    def seconds_from(self, cost: PassCost, first: int, last: int) -> list[float]:
        """``seconds`` for each of ``first``..``last`` tokens of this sequence's."""
        if len(self.segments) <= 1:       # this sequence's alone
            return cost.seconds_from(first, last)
        return [self.seconds(cost, n) for n in range(first, last + 1)]


ALONE = PassShare()


@dataclass
class Acceptance:
    """Decayed counts of drafted tokens the target confirmed (``hits``) and of drafts that went wrong (``misses``):
    the per-token acceptance is hits / (hits + misses)."""

    hits: float = 3.0        # prior: p = 0.75 over a few tokens, soon outweighed
    misses: float = 1.0

    @property
    def p(self) -> float:
        return self.hits / (self.hits + self.misses)

    def observe(self, n_confirmed: int, went_wrong: bool) -> None:
        self.hits = DECAY * self.hits + n_confirmed
        self.misses = DECAY * self.misses + went_wrong


@dataclass
class CallCost:
    """Seconds of one draft call as ``fixed + per_token * tokens``, fitted over recent calls (decayed least
    squares). A draft model's fixed part is mostly catching up on the tokens it has not seen."""

    _sums: tuple[float, ...] = (0.0,) * 5   # weight, k, k*k, seconds, k*seconds (floats: observed every step)
    _recent: deque = field(default_factory=lambda: deque(maxlen=8))

    def observe(self, n_tokens: int, seconds: float) -> None:
        k = float(n_tokens)
        w, sk, skk, s, sks = self._sums
        self._sums = (DECAY * w + 1.0, DECAY * sk + k, DECAY * skk + k * k, DECAY * s + seconds,
                      DECAY * sks + k * seconds)
        self._recent.append(seconds)

    @property
    def samples(self) -> int:
        return len(self._recent)

    @property
    def typical(self) -> float:
        """The median of the last calls: a first call that indexes a whole prompt does not make a drafter
        costly."""
        return statistics.median(self._recent) if self._recent else 0.0

    def typically_over(self, seconds: float) -> bool:
        """Whether ``typical`` exceeds ``seconds``, the slowest call checked first: a cheap drafter is classified
        at every step, and its calls are all far under."""
        return bool(self._recent) and max(self._recent) > seconds and self.typical > seconds

    def seconds(self, n_tokens: int) -> float:
        """Seconds of a call drafting ``n_tokens``."""
        fixed, per_token = self.line()
        return fixed + per_token * n_tokens

    def line(self) -> tuple[float, float]:
        """The fit: seconds of a call as ``fixed + per_token * tokens`` ((0, 0) before any call)."""
        w, k, kk, s, ks = self._sums
        if not w:
            return 0.0, 0.0
        spread = w * kk - k * k
        if spread <= 1e-9 * max(1.0, w * kk):     # every call drafted as many tokens: no fit. A call costs as
            # one more token than it drafts (a draft model evaluates the new history, then a pass per token),
            # so a probe's 2 tokens price a longest draft neither free nor at twice the probe's cost per token
            per_token = s / w / (k / w + 1)
            return per_token, per_token
        per_token = max(0.0, (w * ks - k * s) / spread)
        return max(0.0, (s - per_token * k) / w), per_token


@dataclass
class ProbeBudget:
    """What a costly drafter's calls cost, net of the pass seconds its verified drafts saved, against plain
    decoding's time for the tokens emitted meanwhile (both decayed alike, about a request's worth, and kept across
    requests). While the net cost exceeds PROBE_SHARE of that time the drafter is not probed: probes of a drafter
    that does not pay then cost at most that share of a run. On a CPU where the 0.5B draft model's drafts cannot
    pay even when right, its probes (each catching it up on the tokens it missed, then drafting two tokens that
    save less than they cost) took 1.1 s of a 16 s code-generation run. Where its drafts pay, nothing is held
    back; and as the past decays, a drafter is probed again, never given up for good. The budget decides whether
    a probe starts, not whether a model's burst of in-step probes goes on (DrafterRecord.decide)."""

    net_cost: float = 0.0   # decayed seconds its calls took, less the pass seconds its drafts saved
    plain: float = 0.0      # decayed seconds plain decoding takes for the tokens emitted
    credit: float = 0.0     # PROBE_CREDIT tokens' worth of plain decoding's seconds

    def elapse(self, n_tokens: int, token_seconds: float) -> None:
        """A step emitted ``n_tokens``; plain decoding takes ``token_seconds`` a token."""
        self.net_cost *= UPKEEP_DECAY
        self.plain = UPKEEP_DECAY * self.plain + n_tokens * token_seconds
        self.credit = PROBE_CREDIT * token_seconds

    def called(self, seconds: float, saved: float) -> None:
        """A call took ``seconds``; its draft, if verified, saved ``saved`` seconds of passes."""
        self.net_cost += seconds - saved

    def allows(self) -> bool:
        return self.net_cost <= PROBE_SHARE * self.plain + self.credit


@dataclass
class DrafterRecord:
    """What the chain knows of one drafter: its acceptance by state and support, its call cost, when to probe it."""

    by_run: dict = field(default_factory=dict)   # run bucket -> Acceptance of a draft's first token
    first: dict = field(default_factory=dict)    # (run bucket, support level) -> the same, counted from nothing
    learned: Learned = field(default_factory=Learned)   # what earlier runs' drafts were worth (acceptance_memory.py)
    tally: Learned = field(default_factory=Learned)     # the same counted since the record was made, for the next runs
    later: Acceptance = field(default_factory=lambda: Acceptance(hits=0.9 * PRIOR_WEIGHT,
                                                                 misses=0.1 * PRIOR_WEIGHT))  # after an accepted one
    cost: CallCost = field(default_factory=CallCost)
    _reach: deque = field(default_factory=lambda: deque(maxlen=REACH_SAMPLES))   # how far its recent drafts went,
                                                                                  # (history length, tokens)
    skipped: int = 0                 # steps not asked since it was last asked
    _held_back: bool = False         # not asked at the step before this one (decide() resets ``skipped`` when it
                                     # asks, before the call that must catch up is priced)
    probe_every: int = PROBE_EVERY
    _rest: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int32))  # what its last draft still
                                                                                     # predicts, if it held up
    _run: int = 0                    # tokens its drafts got right in a row
    _first_step: bool = True         # no step of this request has been drafted yet
    _burst: int = 0                  # in-step probes left in this burst (a model's)
    _burst_through_misses: bool = False   # the burst of a request's first steps goes on after a miss
    _paused: int = 0                 # steps of the burst under way at which another draft was expected to pay more
    charged: bool = True             # this step's call counts in probe_budget (a request's first burst does not)
    _expected: float = CALIBRATION_PRIOR   # decayed sums of tokens its verified drafts were expected to get right,
    _confirmed: float = CALIBRATION_PRIOR  # and of those that were
    _unverified: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int32))   # a draft of it not
    _unverified_expected: np.ndarray = field(default_factory=lambda: np.empty(0))   # verified, cut as a verification
    _unverified_heard: int = 0             # would have, still to be decided by the output; the chance each of its
                                           # tokens was expected to stand with; its tokens the output confirmed
    catch_up: float = 0.0            # a model's seconds per token it evaluates in a batch, timed over its begin
                                     # (0: not known yet)
    _seen: int = 0                   # the history's length at its last call (or begin)
    _deferred: bool = False          # its begin waits for its first call: it has evaluated none of the request
    _empty: int = 0                  # its calls in a row of this request that drafted nothing
    _calls_timed: np.ndarray = field(default_factory=lambda: np.zeros(2))   # a model's calls: their wall seconds,
                                                                            # and other processes' CPU seconds then
    probe_budget: ProbeBudget = field(default_factory=ProbeBudget)   # what probing it may still cost

    @classmethod
    def certain(cls) -> "DrafterRecord":
        """The record of a drafter known to draft the target's own tokens (the benchmark's oracle): its estimates
        start where a record of right drafts would have them, so the ceiling it measures is not lowered by learning,
        nor by the caution with which estimates over little evidence are taken. Where batched verification breaks a
        near-tie the other way, the oracle's drafts go wrong until the text rejoins its reference: a record of 20
        right then learns of its misses within a few drafts."""
        known = {"hits": 20.0, "misses": 0.0}
        return cls(by_run={run: Acceptance(**known) for run in range(len(RUNS))}, later=Acceptance(**known))

    @property
    def trust(self) -> float:
        """How many of the tokens its estimates promise its drafts deliver: below 1 when they promise too much
        (estimates miss what this drafter gets wrong), and then its drafts are expected to bring that much less."""
        return min(1.0, self._confirmed / self._expected)

    def restart(self) -> None:
        """A request starts: what its drafts carried on, and how far they went (that was another text), is
        forgotten."""
        self._rest, self._run, self._first_step, self._burst, self._empty = self._rest[:0], 0, True, 0, 0
        self._paused = 0
        self._reach.clear()
        self._unverified = self._unverified[:0]

    def began(self, n_prompt: int, seconds: float) -> bool:
        """Its begin took ``seconds`` over a prompt of ``n_prompt`` tokens; return whether that timed its catching
        up. A model's begin evaluates the prompt in a batch, as a model held back evaluates every token it missed
        before it can draft again."""
        self._seen, self._deferred = n_prompt, False
        timed = n_prompt >= CATCH_UP_TIMED_FROM and seconds > 0
        if timed:
            self.catch_up = seconds / n_prompt
        return timed

    def deferred(self) -> None:
        """Its begin waits for its first call, which must then evaluate the whole history first."""
        self._seen, self._deferred = 0, True

    def asked(self, n_history: int) -> None:
        self._seen, self._held_back = n_history, False

    def sat_out(self) -> None:
        """It was not asked at this step (Upkeep): a model catches up on it when next asked."""
        self._held_back = True

    def assume_drafting_rate(self, seconds_per_token: float, n_max: int) -> None:
        """Price its calls, until they are timed, at the rate an earlier run timed (0: unknown, nothing assumed):
        otherwise a model's first request prices its drafting at nothing, and on a CPU where even its longest draft
        all right cannot pay, it is begun on the prompt and probed for nothing."""
        if seconds_per_token > 0:
            self.cost.observe(n_max, seconds_per_token * (n_max + 1))

    def timed_call(self, seconds: float, others_busy: float | None) -> None:
        """A model's call took ``seconds`` while other processes used ``others_busy`` CPU seconds (None: unknown)."""
        if others_busy is not None:
            self._calls_timed += (seconds, others_busy)

    def drafting_rate(self, n_max: int) -> tuple[float, float | None] | None:
        """Seconds per token of a call drafting ``n_max`` tokens, as this run's timed calls price it, and other
        processes' load (cores) over those calls (None when too short to tell); None when no call was timed."""
        wall, others = self._calls_timed.tolist()
        if not wall:
            return None
        return self.cost.seconds(n_max) / (n_max + 1), load_over(others, wall)

    def catching_up(self, n_history: int) -> float:
        """Seconds a model not asked at the last step would spend on the tokens it missed before drafting: a probe
        after a long wait pays for every token decoded meanwhile (and a model whose begin was deferred, for the
        prompt too), and on a CPU whose batches cost nearly as much as their tokens one by one, that is more than a
        short draft can bring back."""
        return self.catch_up * self._unseen(n_history)

    def missed(self, n_history: int) -> int:
        """The reply's tokens that ``catching_up`` covers, over which resuming is paid back (best_cut); 0 for a
        deferred begin, which evaluates the prompt: no measure of how long the reply runs."""
        return 0 if self._deferred else self._unseen(n_history)

    def _unseen(self, n_history: int) -> int:
        """The tokens a model not asked at the last step must evaluate before it drafts (0 while it is in step)."""
        behind = self.skipped or self._held_back or self._deferred
        return max(0, n_history - self._seen) if behind else 0

    def run_of(self, draft_tokens: np.ndarray) -> int:
        """The run bucket of a draft: 0 unless it carries on the drafter's last draft, which held up so far."""
        n = min(len(draft_tokens), len(self._rest))
        carries_on = n and common_prefix(draft_tokens, self._rest) == n
        return _bucket(self._run) if carries_on else 0

    def p(self, length: int, run: int, support: int | None = None, caution: float = CAUTION) -> np.ndarray:
        """Acceptance of each token of a draft, its predecessors accepted: the first by run and context support
        (leaning on the run's estimate while that support has been seen rarely), the others as the drafter's
        tokens after an accepted one. Both are taken CAUTION standard errors low: after a few long drafts all
        right, the tokens after an accepted one count no miss at all, and taken at face value they make every
        draft worth its full length, where the copy it follows may end at any token. What earlier runs found at the
        same run and support counts as up to LEARNED_WEIGHT drafts of this one's. Without a support: ``p_next``.
        A negative ``caution`` takes them that many standard errors high instead (HOPE)."""
        later = self.later
        p = np.full(length, cautious(later.p, later.hits + later.misses, caution))
        general = self._run_estimate(run)
        if support is None:     # a draft not made yet: the run's own estimate, on all the evidence it holds
            hits, n = general.hits, general.hits + general.misses
            drafts, right = self._learned_at_run(run)
        else:
            specific = self.first.get((run, support)) or Acceptance(hits=0.0, misses=0.0)
            hits = specific.hits + PRIOR_WEIGHT * general.p
            n = specific.hits + specific.misses + PRIOR_WEIGHT
            drafts, right = self.learned.first.get((run, support), (0.0, 0.0))
        if drafts:
            share = learned_share(drafts)
            hits, n = hits + share * right, n + share * drafts
        p[:1] = cautious(hits / n, n, caution)
        return p

    def learn(self, learned: Learned) -> None:
        """Start from what earlier runs' drafts were worth: their first tokens weigh in ``p``, their tokens after an
        accepted one join the estimate of those, as at most LEARNED_WEIGHT drafts of this run's (which then fade as
        its own drafts are scored)."""
        self.learned = learned
        drafts, judged, stood = learned.later
        if drafts:
            share = learned_share(drafts)
            self.later = Acceptance(hits=self.later.hits + share * stood,
                                    misses=self.later.misses + share * (judged - stood))

    def _learned_at_run(self, run: int) -> tuple[float, float]:
        """What earlier runs found at ``run``, over every support level: (drafts, first tokens right)."""
        drafts = right = 0.0
        for (at_run, _), (d, r) in self.learned.first.items():
            if at_run == run:
                drafts, right = drafts + d, right + r
        return drafts, right

    def _run_estimate(self, run: int) -> Acceptance:
        if run not in self.by_run:
            prior = 1 - 0.25 / 2 ** max(0, run - 1)   # 3 in 4 for a fresh draft or a short run, likelier as
                                                      # a run goes on
            self.by_run[run] = Acceptance(hits=prior * PRIOR_WEIGHT, misses=(1 - prior) * PRIOR_WEIGHT)
        return self.by_run[run]

    def drafted(self, n_tokens: int, asked: int, longest: int) -> None:
        """A call asked for ``asked`` tokens returned ``n_tokens``. A draft that stopped short of the ask (a model
        stops where its confidence falls under p_min) shows how far its drafts go; one that filled the ask could
        have gone on, up to ``longest``."""
        self._reach.append((self._seen, n_tokens if n_tokens < asked else longest))
        self._empty = 0 if n_tokens else self._empty + 1

    def reach(self, n_max: int, n_history: int) -> int:
        """The draft length a model's next draft can be counted on for: the median of how far its drafts of the
        last REACH_SPAN tokens of the text went (``n_max`` without any). On text where it is seldom confident its
        calls return little or nothing, and a prospect priced at full length would ask it at every step for drafts
        it does not make. Older drafts tell nothing: where it was unsure lies behind, and a model held back on
        their strength was never asked again (on code generation, right at every draft, it sat out 80 of 190
        tokens)."""
        recent = [n for at, n in self._reach if n_history - at <= REACH_SPAN]
        return min(n_max, int(statistics.median(recent))) if recent else n_max

    def p_next(self, length: int, caution: float = CAUTION) -> np.ndarray:
        """Acceptance of the tokens of a draft not made yet (it would carry on the last one if that held up). Its
        first token's support is not known: it is estimated by run alone, with the evidence of every draft of that
        run (not as the prior of a support level, worth PRIOR_WEIGHT drafts whatever was seen: that held a draft
        model's prospect at half its drafts' acceptance at a request's start, and under it all along), and what
        earlier runs found at that run."""
        return self.p(length, _bucket(self._run) if len(self._rest) else 0, caution=caution)

    def costly(self, single_pass_seconds: float, uses_model: bool) -> bool:
        """Asked only when expected to pay: a model, or any drafter whose calls are not negligible."""
        return uses_model or (self.cost.samples >= COST_SAMPLES
                              and self.cost.typically_over(CHEAP_SHARE * single_pass_seconds))

    def verified(self, p: np.ndarray, n_accepted: int) -> None:
        """One of its drafts, whose tokens were estimated ``p``, was verified: ``n_accepted`` stood. Chosen drafts
        are those whose estimates were highest, so these are where estimates are most likely to promise too
        much."""
        self._calibrated(expected_tokens(p)[-1] - 1.0, n_accepted)

    def not_verified(self, tokens: np.ndarray, p: np.ndarray) -> None:
        """A draft of it, cut to ``tokens`` as a verification would have cut it (estimated ``p``), was not verified:
        once the output decides it (``heard``), its trust learns from it as from a verified one. Trust learnt from
        verified drafts alone, once low, keeps a drafter's drafts from being verified, and so from ever rising
        again: where a pass over a few tokens costs two or three single ones (a GPU's), two early misses would
        hold a copy that comes right later back for the whole request. One draft is followed at a time, and its
        tokens count as the output reaches them: a 16-token copy followed one token a step would otherwise hold
        trust where it was for 16 steps, the very steps it shows right."""
        if len(tokens) and not len(self._unverified):
            self._unverified, self._unverified_heard = tokens, 0
            self._unverified_expected = np.cumprod(p)

    def heard(self, emitted: np.ndarray | list[int], drafted: bool) -> None:
        """The target emitted ``emitted`` at this step, which may decide the draft followed (``not_verified``).
        Where it made no draft this step (not asked, sat out, or nothing to draft: ``drafted`` False), its last
        draft carries on while the output follows it, as it does through the steps it drafts: a copy under way is
        still one when the drafter is next asked."""
        if not drafted and len(self._rest):
            confirmed = common_prefix(self._rest, emitted)
            holds = confirmed == min(len(self._rest), len(emitted))
            self._rest = self._rest[len(emitted):] if holds else self._rest[:0]
            self._run = self._run + confirmed if holds else 0
        rest = self._unverified[self._unverified_heard:]
        if not len(rest):
            return
        confirmed = common_prefix(rest, emitted)
        start = self._unverified_heard
        # a refuted token decides all after it
        reached = len(self._unverified) if refuted(len(rest), confirmed, len(emitted)) else start + confirmed
        self._calibrated(float(self._unverified_expected[start:reached].sum()), confirmed, decay=start == 0)
        if reached == len(self._unverified):                                  # decided whole
            self._unverified = self._unverified[:0]
        else:
            self._unverified_heard = reached

    def _calibrated(self, expected: float, confirmed: int, decay: bool = True) -> None:
        """Add a draft's tokens, expected to stand ``expected`` of them, ``confirmed`` of which did; the past
        decays once a draft (``decay`` False for the later parts of one decided in parts)."""
        weight = DECAY if decay else 1.0
        self._expected = weight * self._expected + expected
        self._confirmed = weight * self._confirmed + confirmed

    def score(self, draft_tokens: np.ndarray, run: int, support: int, emitted: np.ndarray | list[int]) -> int:
        """Score a draft against the tokens the target emitted; return how many it got right."""
        confirmed = common_prefix(draft_tokens, emitted)
        went_wrong = refuted(len(draft_tokens), confirmed, len(emitted))
        first_right = confirmed > 0
        if not first_right and not self._burst_through_misses:
            self._burst = 0
        self._run_estimate(run).observe(first_right, went_wrong=not first_right)
        first = self.first.get((run, support))
        if first is None:
            first = self.first[run, support] = Acceptance(hits=0.0, misses=0.0)
        first.observe(first_right, went_wrong=not first_right)
        drafts, right = self.tally.first.get((run, support), (0, 0))
        self.tally.first[run, support] = (drafts + 1, right + first_right)
        if run or first_right:     # carrying on a draft that held up, even its first token follows accepted ones
            stood = confirmed if run else confirmed - 1
            self.later.observe(stood, went_wrong=went_wrong)
            drafts, judged, kept = self.tally.later
            self.tally.later = (drafts + 1, judged + stood + went_wrong, kept + stood)
        self._rest = draft_tokens[len(emitted):] if not went_wrong else draft_tokens[:0]
        self._run = self._run + confirmed if run and not went_wrong else confirmed if not went_wrong else 0
        return confirmed

    def decide(self, expected_to_pay: bool, uses_model: bool, could_pay: bool = False,
               pays_if_right: bool = False, hopeful: bool = True) -> str | None:
        """Called once a step for a drafter asked only when it pays: ASK, PROBE (a short draft, so that an estimate
        that holds it back can be proved wrong) or None. ``could_pay``: a draft of it, as long as its drafts come out
        (``reach``), would pay if all its tokens were right (the table and its call cost allow a gain at all) and
        no other draft is expected to pay. ``pays_if_right``: the same against plain decoding alone, whatever the
        other drafts. ``hopeful``: the same at the acceptance its record allows at best (HOPE standard errors high).

        Every drafter is probed at the first step of a request, and after ``probe_every`` steps held back
        (doubling up to PROBE_MAX_EVERY while probes do not pay), which also times its calls again. A model is
        probed only where it could pay: a draft model held back first catches up on every token it missed, a
        tenth of a run on a CPU where nothing pays, and where cheap drafts pay, its probes cost more than what they
        tell. Nor is a model whose begin was deferred probed at the first step: the probe would evaluate the
        prompt. After a request's first step, a model is asked or probed at each of the next MODEL_BURST steps while
        it stays in step (a probe then costs only its two draft tokens): the first tokens of a reply are where
        drafts miss most, and one miss must not hold a model back for a whole run. A step of the burst where another
        draft is expected to pay more is waited out (and counted). After a later probe, the same burst goes on while
        its drafts come out right. Past the first burst a model is probed, and its burst goes on, only while it is
        ``hopeful``, otherwise after PROBE_MAX_EVERY steps: a record that leaves no room for its drafts to pay (the
        0.5B's on a 2-core EPYC, whose pass over 3 tokens costs 2.2 single ones) does not buy probes after 16, 32,
        64 steps, each catching it up on every token it missed. The first burst goes on without: after misses at a
        reply's opening, the record of a model right afterwards leaves little room.
        A model whose last EMPTY_CALLS calls of the request drafted nothing (its
        confidence under p_min: open prose) is asked or probed only after PROBE_MAX_EVERY steps, whatever its
        estimates: every call first catches it up on the tokens it missed, and on open prose those catch-ups cost 5%
        of a run. Nor does a probe start while the drafter's calls have cost more than its drafts saved by
        PROBE_SHARE of the time decoded (ProbeBudget); a burst under way runs its course, and a request's first
        burst, its calls asked or probed, is not charged to the budget (``charged``): at a request's start the time
        decoded is a step or two, and on a 2-core Xeon the budget stopped the 0.5B's first burst after its probe of
        the reply's opening missed, which held it back for whole runs where it makes code generation 1.23x faster;
        charged for a first-step draft asked and wrong, it was not probed again for 50 to 100 tokens."""
        self._held_back = self._held_back or self.skipped > 0
        self.skipped += 1
        first, self._first_step = self._first_step, False
        in_burst = self._burst > 0 and self.skipped == 1 + self._paused   # asked at its last step not pre-empted
        paused, self._paused = self._paused, 0
        self._burst = MODEL_BURST if first and uses_model else self._burst - 1 if in_burst else 0
        self._burst_through_misses = first or (self._burst_through_misses and in_burst)
        self.charged = not (self._burst_through_misses and (in_burst or first and uses_model))
        if uses_model and self._empty >= EMPTY_CALLS and self.skipped < PROBE_MAX_EVERY:
            self._burst = 0
            return None
        if expected_to_pay:
            self.skipped, self.probe_every = 0, PROBE_EVERY
            return ASK
        if in_burst and could_pay and (hopeful or self._burst_through_misses):
            self.skipped = 0
            return PROBE
        if in_burst and pays_if_right:     # another draft is expected to pay more at this step: the burst waits
            self._paused = paused + 1
            return None
        if not self.probe_budget.allows():
            self._burst = 0
            return None
        if uses_model and not could_pay:
            if not first or self._deferred:    # a deferred model's first-step probe would evaluate the prompt
                self._burst = 0
                return None
            if not pays_if_right:
                self._burst = 0
        if first:
            self.skipped = 0
            return PROBE
        if self.skipped >= self.probe_every and (hopeful or not uses_model or self.skipped >= PROBE_MAX_EVERY):
            self.probe_every = min(2 * self.probe_every, PROBE_MAX_EVERY)
            self.skipped, self._burst = 0, MODEL_BURST if uses_model else 0
            return PROBE
        return None


@dataclass
class Upkeep:
    """Whether asking pays at all: the chain's own time a step (asking the cheap drafters, weighing the costly ones,
    scoring the drafts; a costly drafter's calls are priced by the gain rule itself), or one cheap drafter's calls.
    On a GPU a single pass takes about 2 ms and the chain's time a tenth to a sixth of that, so where nothing is
    drafted that pays, the chain runs slower than plain decoding whatever it chooses; and a drafter whose drafts
    never win (another's are as good, or better) costs its calls for nothing. That time is weighed against the pass
    time the verified drafts saved (the drafter's own, for a drafter): their accepted tokens at plain decoding's
    seconds each, less what they added to their passes. While more was spent than saved, and the time is not
    negligible beside a pass, the chain, or the drafter, sits out steps (is not asked), twice as many each time up to
    PAUSE_MAX, and is asked at every step again as soon as asking pays."""

    spent: float = 0.0    # decayed seconds of the time weighed, at the steps asked
    saved: float = 0.0    # decayed pass seconds the drafts saved there
    weight: float = 0.0   # decayed count of those steps
    asked: int = 0        # steps of this request that were asked
    pause: int = 0        # length of the last pause (0: asking pays)
    left: int = 0         # steps of the pause still to sit out

    def restart(self) -> None:
        self.spent = self.saved = self.weight = 0.0
        self.asked = self.pause = self.left = 0

    def sits_out(self) -> bool:
        """Whether this step is one of a pause."""
        if self.left:
            self.left -= 1
            return True
        return False

    def observe(self, spent: float, saved: float, single_pass: float) -> None:
        """At a step the chain asked, its own time was ``spent`` and its draft saved ``saved`` seconds of passes
        (negative where a wrong draft made the pass longer); ``single_pass`` is a single pass's seconds. A
        request's first step is not weighed (it indexes the prompt, a cost paid once whatever asking brings after):
        asking is credited there with UPKEEP_PRIOR single passes saved instead."""
        self.asked += 1
        if self.asked == 1:
            self.saved = UPKEEP_PRIOR * single_pass
            return
        self.spent = UPKEEP_DECAY * self.spent + spent
        self.saved = UPKEEP_DECAY * self.saved + saved
        self.weight = UPKEEP_DECAY * self.weight + 1.0
        if self.saved < self.spent and self.spent > UPKEEP_SHARE * single_pass * self.weight:
            self.pause = min(2 * self.pause or 1, PAUSE_MAX)
            self.left = self.pause
        else:
            self.pause = 0


def learned_share(drafts: float) -> float:
    """The share of earlier runs' counts over ``drafts`` drafts that a run starts from: as at most LEARNED_WEIGHT of
    its own drafts."""
    return min(LEARNED_WEIGHT, drafts) / drafts


def cautious(p: float, n: float, caution: float = CAUTION) -> float:
    """An acceptance ``p`` estimated over ``n`` (decayed) observations, taken ``caution`` standard errors low (high
    where negative)."""
    return min(1.0, max(0.0, p - caution * (p * (1 - p) / (n + 1)) ** 0.5))


def _bucket(run: int) -> int:
    return bisect.bisect_right(RUNS, run) - 1


def expected_tokens(p: np.ndarray) -> list[float]:
    """Expected tokens from a pass that verifies the first k draft tokens, for k = 0..len(p), when token i is
    accepted with probability p[i] once all before it were (the pass's own token always counts). In plain floats:
    a draft has a few tokens, and numpy's calls on them cost more (see best_cut)."""
    expected, all_right = [1.0], 1.0
    for accepted in p.tolist():
        all_right *= accepted
        expected.append(expected[-1] + all_right)
    return expected


def plain_rate(cost: PassCost, share: PassShare = ALONE) -> float:
    """Tokens per second of the pass when this sequence adds no draft (plain decoding's, alone)."""
    return (share.expected + 1.0) / share.seconds(cost, 1)


def best_cut(p: np.ndarray, cost: PassCost, drafting: CallCost | None = None, n_min: int = 1,
             trust: float = 1.0, share: PassShare = ALONE, catching_up: float = 0.0,
             missed: int = 0) -> tuple[int, float]:
    """The length k in [n_min, len(p)] with the most expected tokens per second, and that rate ((0, 0.0) when the
    draft is shorter than n_min). ``drafting`` adds the cost of drafting k tokens still to be paid (a drafter not
    asked yet) and ``catching_up`` the seconds it must spend first whatever the length (DrafterRecord.catching_up);
    ``trust`` scales the drafted tokens expected (a drafter's calibration); ``share`` is the rest of the pass.
    Compare the rate with ``plain_rate``.

    ``missed``: the tokens of the reply a held-back model's ``catching_up`` covers. A reply that has run on that
    many tokens without it is as likely to run on as many more with it, so resuming is paid back over them, once:
    the step is charged the share of it that its own expected tokens are of them. Charged whole to the next draft
    it grew at every step held back, and a model held back at a near-tie was never asked again (on code
    generation, right at 97% of its tokens, it sat out 174 of 183 steps)."""
    n_min = max(1, n_min)
    if len(p) < n_min:
        return 0, 0.0
    # Plain floats: the chain weighs several drafts at every step, and numpy's per-call cost on arrays of a few
    # tokens is most of a step's deciding (a sixth of a pass on a GPU).
    passes = share.seconds_from(cost, 1 + n_min, 1 + len(p))
    fixed, per_token = drafting.line() if drafting is not None else (0.0, 0.0)
    fixed += 0.0 if missed else catching_up
    own = share.expected + 1
    catching_up_per_token = catching_up / missed if missed else 0.0
    best, best_rate, all_right, drafted = 0, -1.0, 1.0, 0.0
    for k, accepted in enumerate(p.tolist(), 1):
        all_right *= accepted
        drafted += all_right                 # expected_tokens(p)[k] - 1
        if k >= n_min:
            caught_up = catching_up_per_token * min(missed, 1 + trust * drafted)
            rate = (own + trust * drafted) / (passes[k - n_min] + fixed + caught_up + per_token * k)
            if rate > best_rate:
                best, best_rate = k, rate
    return best, best_rate
