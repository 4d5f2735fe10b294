"""The drafter chain: asks the drafters for drafts, picks the one to verify, keeps per-drafter statistics.

Two rules pick the draft (``[speculative] arbitration``):

- ``"gain"`` (the default): every cheap drafter (each call well under a pass) is asked each step while its calls
  pay for themselves (gain.Upkeep), and the draft with the most expected tokens per second of verification wins,
  cut to the length that pays (gain.py). A
  costly drafter (a draft model, or any drafter whose calls are not negligible) is asked only when what it is
  expected to bring beats the best cheap draft, or now and then as a probe. Drafts that agree strengthen each
  other: a position two drafters agree on is as likely as the likelier of them makes it, or as likely as agreement
  has proved to be, whichever is more. Without a pass-cost model (``adaptive = false``) drafts are not cut, and
  the draft with the most expected tokens wins. ``order`` breaks ties.
- ``"priority"``: llama.cpp's rule. Drafters are asked in order and the first non-empty draft wins; only the
  winner hears ``accept``. With a pass-cost model each drafter is asked for the length its estimate makes pay.

In a pass shared by several sequences (a server's slots), rates are the whole pass's (gain.PassShare): a draft
must pay for what it adds to everyone's pass, and the margin a draft must beat plain decoding by is that of its
own sequence's tokens.

Each step every draft that was made is scored against the tokens the target emitted, so the estimates learn from
every step, and each drafter hears ``accept`` with how many of its draft's tokens the target confirmed once those
tokens decide its draft: they refuted a token of it, or confirmed it whole.

A drafter that raises or returns an invalid draft (see ``Drafter`` for what ``draft()`` may return) is reported
once and set aside for the rest of the run: verification by the target keeps the output correct whatever a
drafter proposes, but a bad token id must never reach the model.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from specframe.drafting.acceptance_memory import AcceptanceMemory
from specframe.drafting.catch_up import ModelRateStore
from specframe.drafting.gain import (
    ALONE,
    HOPE,
    PROBE,
    PROBE_LENGTH,
    Acceptance,
    DrafterRecord,
    PassShare,
    Upkeep,
    best_cut,
    decided,
    expected_tokens,
    plain_rate,
    refuted,
)
from specframe.drafting.pass_cost import PassCost, cpu_times, other_load, others_busy
from specframe.drafting.protocol import NO_DRAFT, Constraint, Draft, Drafter, begin_form, begin_request
from specframe.drafting.support import support_level
from specframe.prefix import common_prefix
from specframe.sampling import SamplingParams

log = logging.getLogger("specframe.drafting")

ARBITRATIONS = ("gain", "priority")
MARGIN = 0.1           # a draft is verified only when expected to beat plain decoding by this much: estimates err
PROBE_CUT_CONFIDENCE = 0.5   # a cost probe verifies the draft's tokens that are at least this likely to stand


@dataclass
class DrafterStats:
    """llama.cpp's per-implementation counters (common_speculative_print_stats), plus how drafts were chosen."""

    calls: int = 0             # times asked for a draft
    drafts: int = 0            # non-empty drafts it returned
    wins: int = 0              # its drafts chosen for verification
    accepted_drafts: int = 0   # chosen drafts with at least one accepted token
    drafted_tokens: int = 0    # tokens of its chosen drafts that were verified
    accepted_tokens: int = 0   # of those, accepted
    confirmed_tokens: int = 0  # tokens of all its drafts, chosen or not, that the target's output confirmed
    prepare_ms: float = 0.0    # what making it ready on first use took (a draft model's load), apart from its calls
    begin_ms: float = 0.0
    draft_ms: float = 0.0
    accept_ms: float = 0.0
    held_back: int = 0         # steps it was not asked because what it would bring was not expected to pay
    begins_deferred: int = 0   # requests whose prompt a model did not evaluate up front: it could not pay for it
    accepted_by_position: list = field(default_factory=list)   # accepted tokens of its chosen drafts, by position

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ChainEntry:
    label: str          # the drafter's name in the config
    drafter: Drafter
    plugin: str
    stats: DrafterStats
    disabled: str | None = None   # why it was set aside
    record: DrafterRecord = field(default_factory=DrafterRecord)
    upkeep: Upkeep = field(default_factory=Upkeep)   # whether asking it at every step pays (a cheap drafter's)
    catch_up_store: ModelRateStore | None = None   # where a model's catch-up rate is kept across runs,
    drafting_store: ModelRateStore | None = None   # and its drafting rate
    acceptance_memory: AcceptanceMemory | None = None   # what its drafts were worth in earlier runs
    deferred_begin: tuple | None = None   # (prompt, sampling, constraint) of a begin put off until the model's
                                          # first call
    prepared: bool = False                # Drafter.prepare has been called
    begin_form: int = field(init=False)   # the arguments its begin takes (protocol.begin_form)

    def __post_init__(self):
        self.begin_form = begin_form(self.drafter)

    def begin(self, prompt: np.ndarray, sampling: SamplingParams | None = None,
              constraint: Constraint | None = None) -> None:
        begin_request(self.drafter, prompt, sampling, constraint, self.begin_form)


@dataclass
class _Candidate:
    entry: ChainEntry
    draft: Draft
    run: int                                                      # its run bucket (gain.py)
    support: int                                                  # context support of its first token
    p: np.ndarray = field(default_factory=lambda: np.empty(0))   # acceptance of each token, its predecessors given
    unverified_cut: int = 0   # the length a verification of it would take were its drafter trusted fully, where
                              # that would pay and its drafter is not (0 elsewhere): trust learns from it unverified


class DrafterChain:
    """Drafters in tie-break order; ``cost`` (a PassCost) makes draft lengths and choices cost-aware."""

    def __init__(self, entries: list[ChainEntry], n_vocab: int, n_min: int = 0, cost: PassCost | None = None,
                 arbitration: str = "gain", n_max: int = 16):
        if arbitration not in ARBITRATIONS:
            raise ValueError(f"arbitration {arbitration!r}: expected one of {', '.join(ARBITRATIONS)}")
        self.entries = entries
        self.n_vocab = n_vocab
        self.n_min = max(1, n_min)
        self.n_max = n_max      # the longest draft a step verifies
        self.cost = cost
        self.arbitration = arbitration
        self.agreement: dict[int, Acceptance] = {}   # by context support: how often agreed-on positions stand
        self._candidates: list[_Candidate] = []
        self._chosen: _Candidate | None = None
        self.constraint: Constraint | None = None   # the request's grammar: drafts are cut where it forbids
        self._agreed = np.empty(0, dtype=np.int32)   # the longest prefix two candidates agreed on,
        self._agreed_support = 0                      # and the context support of its first token
        self._steps_without_verifying = 0
        self._cost_probe_every = 16
        self._share = ALONE
        self.expected = 1.0     # tokens the last step's pass is expected to yield for this sequence
        self.upkeep = Upkeep()  # whether asking at all pays (the gain rule with a cost model)
        self._spent = 0.0       # the chain's own seconds at this step so far
        self._priced_calls = 0.0   # this step's calls to drafters asked only where they pay: the gain rule prices
                                   # those itself
        self._sat_out = False   # this step asked no drafter
        self._asked_cheap: list[tuple[ChainEntry, float]] = []   # this step's cheap drafters, and their calls' time
        self._asked_costly: list[tuple[ChainEntry, float]] = []  # the same of drafters asked only where they pay

    def begin(self, prompt: np.ndarray, sampling: SamplingParams | None = None,
              constraint: Constraint | None = None) -> None:
        """A request starts: each drafter sees the prompt and learns how drafts are accepted (``Drafter.begin``)
        and the request's grammar, if any. A model whose catching up on the prompt costs more than a draft of it
        could bring back is begun only if and when it is asked."""
        self._candidates, self._chosen, self.constraint = [], None, constraint
        self.upkeep.restart()
        for entry in self._active():
            entry.record.restart()
            entry.upkeep.restart()
            if self._cannot_pay_for(entry, len(prompt)):
                entry.deferred_begin = (prompt.copy(), sampling, constraint)
                entry.record.deferred()
                entry.stats.begins_deferred += 1
            else:
                self._begin(entry, prompt, sampling, constraint)

    def _begin(self, entry: ChainEntry, prompt: np.ndarray, sampling: SamplingParams | None,
               constraint: Constraint | None) -> None:
        """Begin one drafter, timing a model's catching up (kept across runs where a store is given)."""
        entry.deferred_begin = None
        if not self._prepared(entry):
            return
        before, start = cpu_times(), time.perf_counter()
        self._guard(entry, "begin", entry.begin, prompt, sampling, constraint)
        seconds = time.perf_counter() - start
        entry.stats.begin_ms += seconds * 1e3
        timed = entry.record.began(len(prompt), seconds if entry.drafter.uses_model else 0.0)
        if timed and entry.catch_up_store is not None and entry.disabled is None:
            entry.catch_up_store.save(entry.record.catch_up, other_load(before, cpu_times(), seconds),
                                      self.cost.pace if self.cost is not None else 1.0)

    def _cannot_pay_for(self, entry: ChainEntry, n_prompt: int) -> bool:
        """Whether a model known to catch up at its rate could not pay for evaluating the prompt even with a
        longest draft all right (the gain rule only: under priority the first draft wins whatever it costs). A
        begin cheaper than a single pass is not worth saving: it makes the first-step probe, which times the
        model's calls again, cost next to nothing."""
        record, cost = entry.record, self.cost
        if not (entry.drafter.uses_model and cost is not None and self.arbitration == "gain"):
            return False
        catching_up = record.catch_up * n_prompt
        if catching_up < cost.seconds(1):
            return False
        rate = best_cut(np.ones(self.n_max), cost, record.cost, self.n_min, catching_up=catching_up)[1]
        return rate <= plain_rate(cost)

    def draft(self, history: np.ndarray, n_max: int, share: PassShare = ALONE) -> Draft:
        """The draft to verify next (at most ``n_max`` tokens), or NO_DRAFT; ``share`` is what the rest of the
        pass that verifies it holds. ``expected`` is then the tokens it is expected to yield, with the pass's own.
        Under the gain rule the chain sits out steps while asking costs more than its drafts save (gain.Upkeep)."""
        start = time.perf_counter()
        self._candidates, self._chosen, self._share, self.expected = [], None, share, 1.0
        self._priced_calls, self._asked_cheap, self._asked_costly = 0.0, [], []
        self._sat_out = self._weighs_upkeep() and self.upkeep.sits_out()
        if self._sat_out:
            for entry in self._active():
                entry.upkeep.sits_out()     # a drafter's own pause counts steps, sat out by the chain or not
                self._sit_out(entry)
            return NO_DRAFT
        draft = self._draft(history, n_max)
        self._spent = time.perf_counter() - start - self._priced_calls
        return draft

    def _draft(self, history: np.ndarray, n_max: int) -> Draft:
        if self.cost is not None:
            n_max = self.cost.draft_limit(n_max)
        if n_max < self.n_min:
            return NO_DRAFT
        if self.arbitration == "priority":
            chosen = self._by_priority(history, n_max)
        else:
            chosen = self._by_gain(history, n_max)
        if chosen is None:
            return NO_DRAFT
        self._chosen = chosen
        self.expected = 1.0 + chosen.entry.record.trust * (expected_tokens(chosen.p)[-1] - 1.0)
        chosen.entry.stats.wins += 1
        chosen.entry.stats.drafted_tokens += len(chosen.draft)
        return chosen.draft

    @property
    def drafter(self) -> str | None:
        """The name of the drafter whose draft this step verifies, until ``accept`` (None: no draft)."""
        return self._chosen.entry.label if self._chosen is not None else None

    def step_drafts(self) -> dict[str, np.ndarray]:
        """The drafts this step's drafters made, by drafter, as they made them (uncut): what an observer compares
        the chosen draft with, until ``accept``."""
        return {candidate.entry.label: candidate.draft.tokens for candidate in self._candidates}

    def accept(self, n_accepted: int, emitted: np.ndarray | list[int]) -> None:
        """The target accepted ``n_accepted`` tokens of the chosen draft and emitted ``emitted`` (those and its own
        next token). Every draft of this step is scored against them, and its drafter hears ``accept`` once they
        decide it (``decided``)."""
        if self._sat_out:
            self._hear(emitted)
            return
        accepting = time.perf_counter()
        drafted = len(self._chosen.draft) if self._chosen is not None else 0
        winner = self._chosen.entry if self._chosen is not None else None
        if self._chosen is not None:
            self._chosen.entry.record.verified(self._chosen.p, n_accepted)
            stats = self._chosen.entry.stats
            stats.accepted_tokens += n_accepted
            stats.accepted_drafts += n_accepted > 0
            by_position = stats.accepted_by_position
            by_position.extend([0] * (n_accepted - len(by_position)))
            for position in range(n_accepted):
                by_position[position] += 1
        if len(self._agreed):
            agreed = common_prefix(self._agreed, emitted)
            self._agreement(self._agreed_support).observe(agreed, refuted(len(self._agreed), agreed, len(emitted)))
        for candidate in self._candidates:
            if candidate.unverified_cut and candidate.entry is not winner:
                cut = candidate.unverified_cut
                candidate.entry.record.not_verified(candidate.draft.tokens[:cut], candidate.p[:cut])
        self._hear(emitted)
        for candidate in self._candidates:
            entry = candidate.entry
            confirmed = entry.record.score(candidate.draft.tokens, candidate.run, candidate.support, emitted)
            entry.stats.confirmed_tokens += confirmed
            if self.arbitration == "priority" and candidate is not self._chosen:
                continue
            if not decided(len(candidate.draft), confirmed, len(emitted)):
                continue
            start = time.perf_counter()
            self._guard(entry, "accept", entry.drafter.accept, confirmed)
            entry.stats.accept_ms += (time.perf_counter() - start) * 1e3
        self._candidates, self._chosen, self._agreed = [], None, self._agreed[:0]
        if self._weighs_upkeep():
            assert self.cost is not None
            single, saved = self.cost.seconds(1), self._saved(drafted, len(emitted))
            for entry, seconds in self._asked_cheap:
                entry.upkeep.observe(seconds, saved if entry is winner else 0.0, single)
            for entry, seconds in self._asked_costly:
                if entry.record.charged:
                    entry.record.probe_budget.called(seconds, saved if entry is winner else 0.0)
            self.upkeep.observe(self._spent + time.perf_counter() - accepting, saved, single)
        self._asked_cheap, self._asked_costly = [], []

    def _hear(self, emitted: np.ndarray | list[int]) -> None:
        """Every drafter's record hears what the target emitted, at every step, asked or not: it decides the drafts
        that were not verified (DrafterRecord.heard), and plain decoding's time for those tokens is what its probes
        may cost a share of (gain.ProbeBudget)."""
        drafted = {id(candidate.entry) for candidate in self._candidates}
        token_seconds = 1 / self._plain_rate() if self._weighs_upkeep() else 0.0
        for entry in self._active():
            entry.record.heard(emitted, id(entry) in drafted)
            entry.record.probe_budget.elapse(len(emitted), token_seconds)

    def _sit_out(self, entry: ChainEntry) -> None:
        """Not asked at this step, as asking did not pay (gain.Upkeep): counted as held back."""
        entry.record.sat_out()
        entry.stats.held_back += 1

    def _weighs_upkeep(self) -> bool:
        """Whether the chain pauses where asking does not pay: under the gain rule with a cost model (llama.cpp's
        priority rule asks at every step)."""
        return self.cost is not None and self.arbitration == "gain"

    def _saved(self, drafted: int, n_emitted: int) -> float:
        """Pass seconds a verified draft of ``drafted`` tokens saved when the target emitted ``n_emitted``: the
        tokens it accepted at what plain decoding's pass takes a token, less what the draft added to its pass."""
        if not drafted:
            return 0.0
        assert self.cost is not None
        single = self._share.seconds(self.cost, 1)
        return ((n_emitted - 1) * single / (self._share.expected + 1)
                - (self._share.seconds(self.cost, 1 + drafted) - single))

    # --- choosing ----------------------------------------------------------------------------------------------

    def _by_priority(self, history: np.ndarray, n_max: int) -> _Candidate | None:
        for entry in self._active():
            candidate = (self._ask(entry, history, n_max) if self.cost is None
                         else self._ask_if_it_pays(entry, history, n_max, self.cost, self._plain_rate()))
            if candidate is not None:
                return candidate
        return None

    def _ask_if_it_pays(self, entry: ChainEntry, history: np.ndarray, n_max: int, cost: PassCost,
                        to_beat: float) -> _Candidate | None:
        """Ask a drafter whose drafting costs time only when its draft is expected to beat ``to_beat`` tokens per
        second, or as a probe (gain.DrafterRecord.decide). Whether it could pay, which a probe needs, is priced
        with its whole catching up: a probe's is paid back only if it finds the model's drafts paying."""
        record, uses_model = entry.record, entry.drafter.uses_model
        catching_up, missed = record.catching_up(len(history)), record.missed(len(history))
        reach = record.reach(n_max, len(history)) if uses_model else n_max
        length, prospect = best_cut(record.p_next(reach), cost, record.cost, self.n_min, record.trust, self._share,
                                    catching_up, missed)
        expected_to_pay = prospect > to_beat
        if_right = (best_cut(np.ones(reach), cost, record.cost, self.n_min, share=self._share,
                             catching_up=catching_up)[1] if uses_model and not expected_to_pay else 0.0)
        plain = self._plain_rate()
        could_pay = if_right > to_beat and not self._worth_verifying(to_beat, plain)   # weighed by decide() only
        pays_if_right = if_right > plain                                                # when not expected_to_pay
        hopeful = pays_if_right and best_cut(record.p_next(reach, caution=-HOPE), cost, record.cost, self.n_min,
                                             share=self._share, catching_up=catching_up)[1] > plain
        decision = record.decide(expected_to_pay, uses_model, could_pay, pays_if_right, hopeful)
        if decision is None:
            entry.stats.held_back += 1
            return None
        if decision == PROBE:
            length = min(PROBE_LENGTH, n_max)
        asking = time.perf_counter()
        candidate = self._ask(entry, history, max(length, self.n_min))
        seconds = time.perf_counter() - asking
        self._priced_calls += seconds
        self._asked_costly.append((entry, seconds))
        return candidate

    def _by_gain(self, history: np.ndarray, n_max: int) -> _Candidate | None:
        cost, plain = self.cost, self._plain_rate()
        cheap: list[ChainEntry] = []
        costly: list[ChainEntry] = []
        single = cost.seconds(1) if cost is not None else 0.0
        for entry in self._active():
            (costly if entry.record.costly(single, entry.drafter.uses_model) else cheap).append(entry)
        for entry in cheap:
            if cost is not None and entry.upkeep.sits_out():
                self._sit_out(entry)
                continue
            asking = time.perf_counter()
            self._ask(entry, history, n_max)
            self._asked_cheap.append((entry, time.perf_counter() - asking))
        best = self._best()
        for entry in costly:
            if cost is None:
                asked = self._ask(entry, history, n_max)
            else:
                asked = self._ask_if_it_pays(entry, history, n_max, cost, max(plain, best[1] if best else 0.0))
            if asked is not None:
                best = self._best()
        if best is None:
            return None
        candidate, rate, k = best
        if cost is not None:
            if self._worth_verifying(rate, plain):
                self._steps_without_verifying = 0
            else:
                k = self._cost_probe(candidate, rate / plain)
                if k == 0:
                    return None
        return self._cut(candidate, k)

    def _worth_verifying(self, rate: float, plain: float) -> bool:
        """Whether a draft expected at ``rate`` beats plain decoding's ``plain`` by MARGIN of this sequence's
        tokens."""
        return rate > plain * (1 + MARGIN / (self._share.expected + 1))

    def _plain_rate(self) -> float:
        """Tokens per second of the pass without a draft of this sequence (0 without a cost model: then any draft
        beats it)."""
        return plain_rate(self.cost, self._share) if self.cost is not None else 0.0

    def _best(self) -> tuple[_Candidate, float, int] | None:
        """The candidate with the best rate (the most expected tokens without a cost model), its rate and cut."""
        self._estimate_agreement()
        plain = self._plain_rate()
        best = None
        for candidate in self._candidates:
            if self.cost is not None:
                trust = candidate.entry.record.trust
                k, rate = best_cut(candidate.p, self.cost, n_min=self.n_min, trust=trust, share=self._share)
                candidate.unverified_cut = 0     # weighed again at each call: a draft that agrees may have come
                if trust < 1.0 and not self._worth_verifying(rate, plain):   # held back by its trust alone?
                    k_trusted, trusted = best_cut(candidate.p, self.cost, n_min=self.n_min, share=self._share)
                    candidate.unverified_cut = k_trusted if self._worth_verifying(trusted, plain) else 0
            else:
                k, rate = len(candidate.p), expected_tokens(candidate.p)[-1]
            if best is None or rate > best[1]:
                best = (candidate, rate, k)
        return best

    def _estimate_agreement(self) -> None:
        """Each candidate's per-token acceptance: its drafter's estimate (made when it was asked), raised where another
        draft agrees (in place: raising twice by the same draft changes nothing)."""
        candidates = self._candidates
        longest_agreed = self._agreed
        for candidate in candidates:
            tokens = candidate.draft.tokens
            p = candidate.p
            for other in candidates:
                if other is candidate:
                    continue
                agreed = common_prefix(tokens, other.draft.tokens)
                if agreed:
                    backing = other.entry.record.p(agreed, other.run, other.support)
                    shared = self._agreement(candidate.support).p
                    p[:agreed] = np.maximum(p[:agreed], np.maximum(backing, shared))
                    if agreed > len(longest_agreed):
                        longest_agreed, self._agreed_support = tokens[:agreed], candidate.support
        self._agreed = longest_agreed

    def _agreement(self, support: int) -> Acceptance:
        return self.agreement.setdefault(support, Acceptance())

    def _cost_probe(self, candidate: _Candidate, relative_rate: float) -> int:
        """When nothing has been verified for a while, verify the likely part of a promising draft anyway: a pass
        of that size tells whether the pass-cost table is right (the engine re-measures it if not)."""
        self._steps_without_verifying += 1
        if self._steps_without_verifying < self._cost_probe_every or relative_rate < 0.5:
            return 0
        self._steps_without_verifying = 0
        self._cost_probe_every = min(2 * self._cost_probe_every, 256)
        likely = int(np.count_nonzero(np.cumprod(candidate.p) >= PROBE_CUT_CONFIDENCE))
        return max(likely, self.n_min) if len(candidate.p) >= self.n_min else 0

    def _cut(self, candidate: _Candidate, k: int) -> _Candidate:
        draft = candidate.draft
        if k < len(draft):
            draft = Draft(draft.tokens[:k], None if draft.probs is None else draft.probs[:k])
        return _Candidate(candidate.entry, draft, candidate.run, candidate.support, candidate.p[:k])

    # --- asking ------------------------------------------------------------------------------------------------

    def _ask(self, entry: ChainEntry, history: np.ndarray, n_max: int) -> _Candidate | None:
        """Ask one drafter; a valid non-empty draft becomes a candidate of this step."""
        if entry.deferred_begin is not None:
            self._begin(entry, *entry.deferred_begin)
            if entry.disabled is not None:
                return None
        if not self._prepared(entry):
            return None
        entry.stats.calls += 1
        catching_up = entry.record.catching_up(len(history))
        entry.record.asked(len(history))
        before = cpu_times() if entry.drafter.uses_model else None
        start = time.perf_counter()
        result = self._guard(entry, "draft", entry.drafter.draft, history, n_max)
        seconds = time.perf_counter() - start
        if before is not None:
            entry.record.timed_call(seconds, others_busy(before, cpu_times()))
        entry.stats.draft_ms += seconds * 1e3
        draft = self._validated(entry, result, n_max) if entry.disabled is None else None
        if draft is not None and self.constraint is not None:
            draft = _admissible(draft, self.constraint.admissible(draft.tokens))
        n_drafted = len(draft) if draft is not None else 0
        # What catching up on missed tokens took is priced apart (DrafterRecord.catching_up): in the call's cost
        # it made every later draft look dearer, so the model was held back longer, and caught up on more.
        entry.record.cost.observe(n_drafted, max(0.0, seconds - catching_up))
        entry.record.drafted(n_drafted, n_max, self.n_max)
        if draft is None or len(draft) < self.n_min:
            return None
        entry.stats.drafts += 1
        run, support = entry.record.run_of(draft.tokens), support_level(history, int(draft.tokens[0]))
        candidate = _Candidate(entry, draft, run, support, entry.record.p(len(draft), run, support))
        self._candidates.append(candidate)
        return candidate

    def _prepared(self, entry: ChainEntry) -> bool:
        """Prepare a drafter on its first use, apart from the calls whose time prices it; False if that failed
        (it is then set aside)."""
        if not entry.prepared:
            entry.prepared = True
            start = time.perf_counter()
            self._guard(entry, "prepare", entry.drafter.prepare)
            entry.stats.prepare_ms += (time.perf_counter() - start) * 1e3
        return entry.disabled is None

    def prepare(self) -> None:
        """Prepare every drafter now (a server, before it says it is ready), not at its first use."""
        for entry in self._active():
            self._prepared(entry)

    def close(self) -> None:
        for entry in self.entries:
            self._guard(entry, "close", entry.drafter.close)

    def stats(self) -> dict[str, dict]:
        stats = {}
        for entry in self.entries:
            note = self._guard(entry, "describe", entry.drafter.describe)
            stats[entry.label] = (entry.stats.as_dict() | ({"note": str(note)} if note else {})
                                  | ({"disabled": entry.disabled} if entry.disabled else {}))
        return stats

    def _active(self):
        return (e for e in self.entries if e.disabled is None)

    def _guard(self, entry: ChainEntry, what: str, call, *args):
        try:
            return call(*args)
        except (Exception, SystemExit) as exc:     # a plugin's sys.exit() is a fault like any other
            self._disable(entry, f"{what}() raised {type(exc).__name__}: {exc}")
            return None

    def _disable(self, entry: ChainEntry, reason: str) -> None:
        if entry.disabled is None:
            entry.disabled = reason
            log.warning("drafter '%s' (plugin %s) is set aside for the rest of this run: %s",
                        entry.label, entry.plugin, reason)

    def _validated(self, entry: ChainEntry, result, n_max: int) -> Draft | None:
        """The drafter's result as a Draft of at most ``n_max`` tokens, or None after setting the drafter aside."""
        try:
            draft = valid_draft(result, self.n_vocab, n_max)
        except InvalidDraft as exc:
            self._disable(entry, str(exc))
            return None
        return draft


def _admissible(draft: Draft, k: int) -> Draft:
    """``draft`` cut to its first ``k`` tokens, those the grammar allows; a distribution keeps the row of the
    refuted token (Draft)."""
    if k >= len(draft):
        return draft
    return Draft(draft.tokens[:k], None if draft.probs is None else draft.probs[:k + 1])


class InvalidDraft(ValueError):
    """What a drafter returned cannot be verified."""


PROBS_TOLERANCE = 1e-3   # a row of draft probabilities must sum to 1 within this
_TOKEN_ID = np.dtype(np.int32)
_OUTSIDE = "drafted a token id outside the vocabulary [0, {})"


def valid_draft(result, n_vocab: int, n_max: int) -> Draft:
    """Check what ``draft()`` returned: a Draft, None (no draft) or a sequence of token ids (a draft without
    probabilities); token ids within the vocabulary and, when given, a draft distribution per token (finite,
    non-negative, summing to 1, giving its own token a chance). Rejection sampling divides by these
    probabilities: any other numbers would bias the output silently."""
    if result is None or result is NO_DRAFT:
        return NO_DRAFT
    if (type(result) is Draft and result.probs is None and type(result.tokens) is np.ndarray
            and result.tokens.dtype is _TOKEN_ID and result.tokens.ndim == 1 and len(result.tokens) <= n_max):
        ids = result.tokens.tolist()    # the built-ins' drafts, at every step: checked without numpy's calls
        if ids and (min(ids) < 0 or max(ids) >= n_vocab):
            raise InvalidDraft(_OUTSIDE.format(n_vocab))
        return result
    if not isinstance(result, Draft):
        if not _token_ids(result):
            raise InvalidDraft(f"draft() returned {type(result).__name__}: expected a Draft, NO_DRAFT, None or "
                               "a 1-D sequence of integer token ids")
        result = Draft(np.asarray(result))
    try:
        tokens = np.asarray(result.tokens)
        probs = None if result.probs is None else np.asarray(result.probs)
    except (ValueError, TypeError) as exc:
        raise InvalidDraft(f"draft tokens and probs must be arrays: {exc}") from None
    if not _token_ids(tokens):
        raise InvalidDraft("draft tokens must be a 1-D array of integer token ids")
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= n_vocab):
        raise InvalidDraft(_OUTSIDE.format(n_vocab))
    if len(tokens) > n_max:
        tokens = tokens[:n_max]
    tokens = tokens.astype(np.int32, copy=False)
    if probs is not None:
        if probs.shape[:1] != (len(result.tokens),) or probs.shape[1:] != (n_vocab,):
            raise InvalidDraft(f"draft probs must have shape ({len(result.tokens)}, {n_vocab}), got {probs.shape}")
        if not np.issubdtype(probs.dtype, np.floating):
            raise InvalidDraft(f"draft probs must be floating-point, got {probs.dtype}")
        if len(probs) > n_max:
            probs = probs[:n_max]
        if not np.isfinite(probs).all() or probs.min(initial=0.0) < 0:
            raise InvalidDraft("draft probs must be finite and non-negative")
        sums = probs.sum(axis=1, dtype=np.float64)
        if len(sums) and np.abs(sums - 1).max() > PROBS_TOLERANCE:
            worst = sums[np.abs(sums - 1).argmax()]
            raise InvalidDraft(f"each row of draft probs must sum to 1, one sums to {worst:.6g}")
        if len(tokens) and (probs[np.arange(len(tokens)), tokens] <= 0).any():
            raise InvalidDraft("a drafted token has no probability in its own draft distribution")
    if tokens is result.tokens and probs is result.probs:    # a valid Draft as it came (the built-ins' at every
        return result                                        # step): no copy
    return Draft(tokens, probs)


def _token_ids(value) -> bool:
    """Whether ``value`` is a 1-D sequence of integers (any dtype when empty)."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        return False
    return array.ndim == 1 and (array.size == 0 or array.dtype.kind in "iu")
