"""Lossless stochastic acceptance: the emitted tokens follow the target's distribution, with or without drafts.

Significance level: every goodness-of-fit test below rejects losslessness at p < ALPHA. The seeds are fixed,
so a run is reproducible; each test also shows it has the power to fail, on a deliberately lossy acceptance.
"""

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

import specframe
import specframe.engine
from specframe.engine import Engine
from specframe.errors import ParamError
from specframe.grammar import Constraint, GrammarSpec
from specframe.sampling import SamplingParams, TokenSampler, infill_candidates, verify

ALPHA = 1e-3


def goodness_of_fit(counts: dict, expected: dict) -> float:
    """p-value of observed sequence counts against exact probabilities (cells with < 5 expected pooled)."""
    n = sum(counts.values())
    keys = sorted(expected, key=expected.get, reverse=True)
    observed, predicted, pooled_o, pooled_e = [], [], 0, 0.0
    for key in keys:
        if expected[key] * n >= 5:
            observed.append(counts.get(key, 0))
            predicted.append(expected[key] * n)
        else:
            pooled_o += counts.get(key, 0)
            pooled_e += expected[key] * n
    pooled_o += sum(c for k, c in counts.items() if k not in expected)   # impossible under the target
    observed.append(pooled_o)
    predicted.append(max(pooled_e, 1e-9))
    predicted = np.array(predicted) * n / sum(predicted)
    return float(chisquare(observed, predicted).pvalue)


# --- one verification step, on hand-made distributions ---------------------------------------------------------

P = np.array([0.5, 0.3, 0.15, 0.05, 0.0])        # the target (temperature 1, no truncation: logits = log p)
Q = np.array([0.1, 0.2, 0.3, 0.1, 0.3])          # the draft, far from it, with mass where p has none


def first_tokens(acceptance: str, n: int = 40000) -> tuple[dict, float]:
    sampler = TokenSampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, seed=5))
    draft_rng = np.random.default_rng(6)
    logits = np.log(np.maximum(P, 1e-30)).astype(np.float32)[None].repeat(2, axis=0)
    counts, accepted = {}, 0
    for _ in range(n):
        token = int(draft_rng.choice(len(Q), p=Q))
        n_accepted, emitted = verify(logits, np.array([token]), Q[None].astype(np.float32), sampler, acceptance)
        counts[(emitted[0],)] = counts.get((emitted[0],), 0) + 1
        accepted += n_accepted
    return counts, accepted / n


class Forbids:
    """A grammar over the hand-made vocabulary that forbids one token everywhere."""

    def __init__(self, token: int):
        self.token = token

    def allows(self, token: int) -> bool:
        return token != self.token

    def masked(self, row: np.ndarray) -> np.ndarray:
        row = row.copy()
        row[self.token] = -np.inf
        return row

    def advance(self, token: int) -> None:
        assert token != self.token


@pytest.mark.parametrize("refuted_row", [True, False], ids=["residual at the cut", "fresh draw at the cut"])
def test_a_draft_cut_where_the_grammar_forbids_keeps_rejection_sampling_exact(refuted_row):
    """The chain cuts a draft at a forbidden token; drawing there from the residual of the refuted token's
    distribution keeps the output exact over the constrained target, a fresh draw from it does not."""
    sampler = TokenSampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5))
    draft_rng = np.random.default_rng(6)
    forbidden = 2                                  # where the draft puts most of its mass
    logits = np.log(np.maximum(P, 1e-30)).astype(np.float32)[None].repeat(2, axis=0)
    counts = {}
    for _ in range(40000):
        token = int(draft_rng.choice(len(Q), p=Q))
        tokens, probs = np.array([token]), Q[None].astype(np.float32)
        if token == forbidden:
            tokens, probs = tokens[:0], (probs if refuted_row else None)
        _, emitted = verify(logits, tokens, probs, sampler, "rejection", constraint=Forbids(forbidden))
        counts[(emitted[0],)] = counts.get((emitted[0],), 0) + 1
    allowed = np.where(np.arange(len(P)) == forbidden, 0.0, P)
    expected = {(i,): p / allowed.sum() for i, p in enumerate(allowed) if p > 0}
    assert (goodness_of_fit(counts, expected) > ALPHA) == refuted_row


@pytest.mark.parametrize("acceptance", ["rejection", "match"])
def test_one_step_emits_the_target_distribution_whatever_the_draft(acceptance):
    counts, rate = first_tokens(acceptance)
    expected = {(i,): float(p) for i, p in enumerate(P) if p > 0}
    assert goodness_of_fit(counts, expected) > ALPHA
    assert (4,) not in counts                       # never a token the target rules out
    if acceptance == "rejection":
        assert rate == pytest.approx(np.minimum(P, Q).sum(), abs=0.01)   # the optimum, sum of min(p, q)


def test_the_goodness_of_fit_test_catches_a_lossy_acceptance():
    counts, _ = first_tokens("rejection", n=4000)
    skewed = dict(counts)
    skewed[(2,)] = skewed.get((2,), 0) + 400        # 10 % too many of one token
    expected = {(i,): float(p) for i, p in enumerate(P) if p > 0}
    assert goodness_of_fit(skewed, expected) < ALPHA


# --- llama.cpp's chain: bias, penalties, top-k, top-p, min-p, temperature ---------------------------------------

def test_the_bias_and_the_penalties_follow_llama_cpp():
    """llama_sampler_penalties: a positive logit is divided by the repeat penalty, a negative one multiplied; then
    the frequency penalty per occurrence and the presence penalty once, over the last repeat_last_n tokens."""
    params = SamplingParams(temperature=1.0, repeat_penalty=2.0, repeat_last_n=4, frequency_penalty=0.5,
                            presence_penalty=0.25, logit_bias={"0": -1.0, "5": 3.0})
    logits = np.array([4.0, -2.0, 1.0, 3.0, 0.0, -1.0], dtype=np.float32)
    history = np.array([3, 3, 0, 1, 1, 2], dtype=np.int32)      # the window is the last four: 0, 1, 1, 2
    adjusted = TokenSampler(params).adjusted(logits, history)
    assert adjusted == pytest.approx([(4 - 1) / 2 - 0.5 - 0.25,      # biased first, then penalised once
                                      -2 * 2 - 2 * 0.5 - 0.25,       # negative: multiplied; twice in the window
                                      1 / 2 - 0.5 - 0.25,
                                      3.0,                           # only before the window
                                      0.0,
                                      -1 + 3.0])                     # biased, never seen
    assert logits[0] == 4.0                                          # the model's own logits stay as they were
    off = SamplingParams(temperature=1.0, repeat_penalty=2.0, repeat_last_n=0)
    assert TokenSampler(off).adjusted(logits, history) is logits
    whole = TokenSampler(SamplingParams(repeat_penalty=2.0, repeat_last_n=-1)).adjusted(logits, history)
    assert whole[3] == pytest.approx(1.5)                            # -1: the whole history


def test_top_p_and_min_p_cut_at_temperature_one_and_temperature_comes_last():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05])).astype(np.float32)
    hot = TokenSampler(SamplingParams(temperature=5.0, top_k=0, top_p=0.8, min_p=0.0))
    ids, probs = hot.candidates(logits)
    assert list(ids) == [0, 1]                                       # 0.5 + 0.3 >= 0.8, whatever the temperature
    assert probs == pytest.approx(np.array([0.5, 0.3]) ** 0.2 / (np.array([0.5, 0.3]) ** 0.2).sum())
    min_p = TokenSampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.25))
    assert list(min_p.candidates(logits)[0]) == [0, 1, 2]             # 0.05 < 0.25 * 0.5 <= 0.15


def test_greedy_takes_the_best_token_after_the_bias_and_the_penalties():
    logits = np.array([1.0, 2.0, 1.5], dtype=np.float32)
    history = np.array([1], dtype=np.int32)
    assert TokenSampler(SamplingParams()).choose(logits, history) == 1
    assert TokenSampler(SamplingParams(repeat_penalty=1.5)).choose(logits, history) == 2     # 2 / 1.5 < 1.5
    assert TokenSampler(SamplingParams(logit_bias={"0": 5.0})).choose(logits, history) == 0


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_each_draft_position_is_judged_after_the_draft_tokens_before_it(temperature):
    """Verifying a draft at once emits what choosing one position at a time would, the history growing by each
    token: the penalties see the draft's earlier tokens."""
    rng = np.random.default_rng(3)
    params = SamplingParams(temperature=temperature, top_k=0, repeat_penalty=3.0, frequency_penalty=1.0,
                            presence_penalty=0.5, repeat_last_n=8, logit_bias={"2": 0.5}, seed=9)
    for _ in range(200):
        history = rng.integers(0, 12, size=10).astype(np.int32)
        logits = rng.normal(0, 2, size=(5, 12)).astype(np.float32)
        one_by_one, tokens = TokenSampler(params), []
        for row in logits:
            tokens.append(one_by_one.choose(row, np.concatenate([history, np.array(tokens, np.int32)])))
        draft = np.array(tokens[:4], dtype=np.int32)
        draft[rng.integers(0, 5):] += 1          # wrong from a random position on (or never)
        draft %= 12
        n, emitted = verify(logits, draft, None, TokenSampler(params), "match", history)
        assert emitted == tokens[:n + 1]
        assert n == next((i for i in range(4) if draft[i] != tokens[i]), 4)


def test_a_logit_bias_names_token_ids_within_bounds():
    with pytest.raises(ParamError, match="key 'x': expected a token id"):
        SamplingParams(logit_bias={"x": 1.0})
    with pytest.raises(ParamError, match=r"token 3: expected a number in \[-100, 100\], got 101"):
        SamplingParams(logit_bias={"3": 101})
    with pytest.raises(ParamError, match=r"token 12 is not in the vocabulary \(ids 0 to 11\)"):
        TokenSampler(SamplingParams(logit_bias={"12": 1.0})).check_vocabulary(12)


# --- llama.cpp's infill sampler -----------------------------------------------------------------------------------

class PieceVocab:
    """A vocabulary of given pieces and end-of-generation tokens, counting the pieces asked for."""

    def __init__(self, pieces, eog=(), eos: int = -1, eot: int = -1):
        self.pieces, self.eog, self.eos, self.eot = list(pieces), set(eog), eos, eot
        self.asked = 0

    def piece(self, token: int, special: bool = False) -> bytes:
        assert not special                        # llama.cpp's infill renders special tokens empty
        self.asked += 1
        return self.pieces[token]

    def is_eog(self, token: int) -> bool:
        return token in self.eog


UNCUT = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


def infill_of(p, vocab, **settings) -> dict[int, float]:
    """The infill distribution over tokens with probabilities ``p`` (logits log p, nothing cut before)."""
    sampler = TokenSampler(SamplingParams(**(UNCUT | settings), infill=True), vocab=vocab)
    ids, probs = sampler.candidates(np.log(np.maximum(np.array(p, dtype=np.float64), 1e-300)).astype(np.float32))
    assert probs.sum() == pytest.approx(1.0)
    assert list(probs) == sorted(probs, reverse=True)       # still most likely first
    return {int(t): float(q) for t, q in zip(ids, probs) if q > 1e-12}


def llama_cpp_infill(ids, logits, vocab) -> dict[int, float]:
    """llama_sampler_infill_apply on candidates sorted by logit, line by line, then the softmax that
    llama_sampler_dist_apply takes over the logits it leaves: the distribution llama.cpp draws from."""
    inf = math.inf
    p = np.exp(np.asarray(logits, dtype=np.float64) - logits[0])
    p = p / p.sum()                                           # llama_sampler_softmax_impl
    cur = [{"id": int(t), "logit": float(lg), "p": float(q)} for t, lg, q in zip(ids, logits, p)]
    eog = np.array([vocab.is_eog(c["id"]) for c in cur])
    p_eog, p_txt = float(p[eog].sum()), float(p[~eog].sum())

    def dist(kept):
        if len(kept) == 1:
            return {kept[0]["id"]: 1.0}
        top = max(c["logit"] for c in kept)
        weights = {c["id"]: math.exp(c["logit"] - top) for c in kept}
        total = sum(weights.values())
        return {t: w / total for t, w in weights.items() if w > 0}

    if 3 * p_eog * len(cur) > p_txt:
        return dist([c for c in cur if vocab.is_eog(c["id"])])
    for i0 in range(len(cur)):
        for i1 in range(len(cur)):
            if cur[i0]["logit"] == -inf:
                break
            if i0 == i1 or cur[i1]["logit"] == -inf:
                continue
            b0, b1 = vocab.pieces[cur[i0]["id"]], vocab.pieces[cur[i1]["id"]]
            if len(b0) > 0 and len(b0) <= len(b1) and b1[:len(b0)] == b0:
                dst, src = i0, i1
                if cur[i1]["p"] > cur[i0]["p"]:
                    dst, src = src, dst
                cur[dst]["p"] += cur[src]["p"]
                cur[src]["logit"], cur[src]["p"] = -inf, 0.0
    kept, n_non_eog, p_sum = [], 0, 0.0
    for c in cur:
        is_eog = vocab.is_eog(c["id"])
        if c["p"] < 0.2 and not is_eog:
            continue
        n_non_eog += not is_eog
        p_sum += c["p"]
        kept.append(c)
    if n_non_eog == 0:
        return dist([{"id": vocab.eot if vocab.eot >= 0 else vocab.eos, "logit": 1.0}])
    for c in kept:
        c["p"] /= p_sum
    thold = 1.0 / (n_non_eog + 1)
    return dist([c for c in kept if not (c["p"] < thold and not vocab.is_eog(c["id"]))])


def test_infill_ends_the_turn_when_end_of_generation_is_likely_enough():
    vocab = PieceVocab([b"a", b"b", b"", b""], eog={2, 3}, eos=2)
    # 3 * 0.1 * 4 = 1.2 > 0.9: only the end-of-generation tokens, renormalized
    assert infill_of([0.5, 0.4, 0.06, 0.04], vocab) == pytest.approx({2: 0.6, 3: 0.4})
    # 3 * 0.02 * 4 = 0.24 <= 0.98: text stays, and an end-of-generation token stays however unlikely
    assert infill_of([0.6, 0.38, 0.015, 0.005], vocab) == pytest.approx({0: 0.6, 1: 0.38, 2: 0.015, 3: 0.005})


def test_infill_counts_every_candidate_in_the_end_of_generation_rule():
    """llama.cpp compares with n = every candidate left, masked ones too (a grammar's -inf under top_k)."""
    vocab = PieceVocab([b"a", b"b", b"", b"c", b"d"], eog={2}, eos=2)
    logits = np.log(np.array([0.5, 0.42, 0.08, 1.0, 1.0])).astype(np.float32)
    assert infill_of(np.exp(logits[:3]), vocab) == pytest.approx({0: 0.5, 1: 0.42, 2: 0.08})   # 0.72 <= 0.92
    logits[3:] = -np.inf                                       # 3 * 0.08 * 5 > 0.92: the end of the turn
    sampler = TokenSampler(SamplingParams(**UNCUT, infill=True), vocab=vocab)
    assert [a.tolist() for a in sampler.candidates(logits)] == [[2], [1.0]]


@pytest.mark.parametrize("fo,foo,survivor", [(0.15, 0.12, 1), (0.12, 0.15, 2)], ids=["into fo", "into foo"])
def test_infill_merges_a_token_into_a_likelier_one_it_is_a_prefix_of_or_spells_a_prefix_of(fo, foo, survivor):
    """Alone neither "fo" nor "foo" reaches 0.2; merged into the likelier, it does, and is then drawn with its
    own probability (llama.cpp's dist sampler recomputes the softmax from the logits infill leaves)."""
    vocab = PieceVocab([b"bar", b"fo", b"foo", b"x", b"y", b""], eog={5}, eos=5)
    rest = (1.0 - 0.45 - fo - foo) / 2
    p_survivor = max(fo, foo)
    assert infill_of([0.45, fo, foo, rest, rest, 0.0], vocab) == pytest.approx(
        {0: 0.45 / (0.45 + p_survivor), survivor: p_survivor / (0.45 + p_survivor)})
    unrelated = PieceVocab([b"bar", b"fo", b"go", b"x", b"y", b""], eog={5}, eos=5)
    assert infill_of([0.45, fo, foo, rest, rest, 0.0], unrelated) == {0: 1.0}


def test_infill_keeps_text_tokens_of_at_least_a_fifth_then_of_one_over_n_plus_one():
    vocab = PieceVocab([b"a", b"b", b"c", b"d", b"e"], eos=4)
    # 0.19 and 0.05 go at 0.2; renormalized over 0.76 the rest are >= 1/4 and stay
    assert set(infill_of([0.3, 0.25, 0.21, 0.19, 0.05], vocab)) == {0, 1, 2}
    # both reach 0.2, but renormalized 0.21 / 0.81 < 1/3
    assert infill_of([0.6, 0.21, 0.19], vocab) == {0: 1.0}
    # exactly 0.2 stays, as llama.cpp drops only p < 0.2
    assert infill_of([0.2] * 5, vocab) == pytest.approx({t: 0.2 for t in range(5)})


@pytest.mark.parametrize("eot,end", [(-1, 7), (6, 6)], ids=["eos without an eot", "eot"])
def test_infill_without_a_likely_text_token_ends_the_turn(eot, end):
    vocab = PieceVocab([b"a", b"b", b"c", b"d", b"e", b"f", b"", b""], eog={6, 7}, eos=7, eot=eot)
    assert infill_of([1 / 6] * 6, vocab) == {end: 1.0}      # none reaches 0.2, and the end token was no candidate


def test_infill_leaves_greedy_decoding_alone():
    vocab = PieceVocab([b"a", b"", b"ab"], eog={1}, eos=1)
    logits = np.log(np.array([0.4, 0.35, 0.25])).astype(np.float32)   # infill would end the turn
    params = SamplingParams(infill=True)
    sampler = TokenSampler(params, vocab=vocab)
    assert sampler.chooses_as_argmax
    assert sampler.choose(logits, np.empty(0, np.int32)) == 0
    assert verify(logits[None].repeat(2, axis=0), np.array([0]), None, sampler, "rejection") == (1, [0, 0])
    assert infill_of(np.exp(logits), vocab) == {1: 1.0}


def test_infill_needs_the_vocabulary_except_for_a_drafter():
    with pytest.raises(ParamError, match="^infill: .*vocabulary"):
        TokenSampler(SamplingParams(temperature=1.0, infill=True))
    with pytest.raises(ParamError, match="^infill: .*end-of-turn"):
        TokenSampler(SamplingParams(infill=True), vocab=PieceVocab([b"a"]))
    logits = np.log(np.array([0.5, 0.3, 0.2])).astype(np.float32)
    drafter = TokenSampler(SamplingParams(**UNCUT, infill=True), 1)         # a drafter's stream: drafts without
    plain = TokenSampler(SamplingParams(**UNCUT), 1)
    assert all(np.array_equal(a, b) for a, b in zip(drafter.candidates(logits), plain.candidates(logits)))


def test_infill_asks_the_vocabulary_once_per_token():
    vocab = PieceVocab([b"a", b"ab", b"b", b""], eog={3}, eos=3)
    sampler = TokenSampler(SamplingParams(**UNCUT, infill=True), vocab=vocab)
    logits = np.log(np.array([0.4, 0.3, 0.25, 0.05])).astype(np.float32)
    first = sampler.candidates(logits)
    for _ in range(5):
        again = sampler.candidates(logits)
        assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert vocab.asked == 4


def test_rejection_sampling_under_infill_emits_the_infill_distribution():
    vocab = PieceVocab([b"the", b"th", b"a", b"x", b""], eog={4}, eos=4)
    target = np.array([0.3, 0.12, 0.28, 0.27, 0.03])
    expected = infill_of(target, vocab)
    assert set(expected) == {0, 2, 3, 4}                      # "th" merged into "the"; the EOG token stays
    sampler = TokenSampler(SamplingParams(**UNCUT, infill=True, seed=3), vocab=vocab)
    q = np.full(5, 0.2)                                       # the draft proposes every token alike
    draft_rng = np.random.default_rng(4)
    logits = np.log(target).astype(np.float32)[None].repeat(2, axis=0)
    counts = {}
    for _ in range(20000):
        token = int(draft_rng.choice(5, p=q))
        _, emitted = verify(logits, np.array([token]), q[None].astype(np.float32), sampler, "rejection")
        counts[(emitted[0],)] = counts.get((emitted[0],), 0) + 1
    assert (1,) not in counts
    assert goodness_of_fit(counts, {(t,): p for t, p in expected.items()}) > ALPHA


ALPHABET_PIECES = st.lists(st.binary(max_size=3).map(lambda b: bytes(b"ab"[x % 2] for x in b)), min_size=1,
                           max_size=16)


@settings(max_examples=300, deadline=None)
@given(pieces=ALPHABET_PIECES, data=st.data())
def test_infill_matches_a_transcription_of_llama_cpp(pieces, data):
    """Random vocabularies over a two-letter alphabet (prefixes everywhere, empty pieces too) and random
    logits, with ties, masked tokens (-inf) and tokens of probability 0 (so far below the best that exp
    underflows), under random cuts and temperatures."""
    n = len(pieces)
    eog = data.draw(st.sets(st.integers(0, n - 1), max_size=2))
    eos = data.draw(st.integers(0, n - 1))
    eot = data.draw(st.sampled_from([-1, eos, data.draw(st.integers(0, n - 1))]))
    vocab = PieceVocab(pieces, eog, eos, eot)
    value = st.one_of(*[st.floats(-6.0, 6.0)] * 3, *[st.sampled_from([0.0, 1.0, -1.0])] * 2, st.just(-np.inf),
                      st.just(-2000.0))
    logits = np.array(data.draw(st.lists(value, min_size=n, max_size=n)), dtype=np.float32)
    logits[data.draw(st.integers(0, n - 1))] = data.draw(st.floats(-6.0, 6.0))     # at least one finite
    params = SamplingParams(temperature=data.draw(st.sampled_from([0.3, 1.0, 2.5, 5.0])),
                            top_k=data.draw(st.one_of(st.just(0), st.integers(0, n))),
                            top_p=data.draw(st.sampled_from([1.0, 1.0, 0.9])),
                            min_p=data.draw(st.sampled_from([0.0, 0.0, 0.05])), infill=True)
    ids, _ = TokenSampler(replace(params, infill=False)).candidates(logits)
    raw = logits[ids].astype(np.float64)
    expected = llama_cpp_infill(ids, (raw - raw[0]) / params.temperature, vocab)

    got_ids, got = TokenSampler(params, vocab=vocab).candidates(logits)
    assert got.sum() == pytest.approx(1.0)
    assert np.all(np.diff(got) <= 1e-15)                      # most likely first
    result = {int(t): float(p) for t, p in zip(got_ids, got) if p > 0}
    assert result == pytest.approx(expected, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("pieces,p,expected", [
    ([b"b", b"a", b"ab", b"abc"], [0.34, 0.26, 0.22, 0.18], {0: 0.34 / 0.6, 1: 0.26 / 0.6}),
    ([b"x", b"ab", b"a", b"aa"], [0.35, 0.3, 0.2, 0.15], {0: 0.35 / 0.65, 1: 0.3 / 0.65}),
], ids=["a takes ab, then abc", "a goes into ab before it meets aa"])
def test_infill_merges_prefixes_in_llama_cpp_loop_order(pieces, p, expected):
    """Each token, in candidate order, meets the candidates its piece is a prefix of in candidate order: it takes
    the less likely ones until it meets a likelier one, which takes it. Survivors keep their own p."""
    info = {t: (piece, False) for t, piece in enumerate(pieces)}
    ids, p = np.arange(len(pieces)), np.array(p)
    ids_out, p_out = infill_candidates(ids, p, info.__getitem__, end=9)
    assert dict(zip(ids_out.tolist(), p_out.tolist())) == pytest.approx(expected)
    assert llama_cpp_infill(ids, np.log(p), PieceVocab(pieces)) == pytest.approx(expected)


# --- whole generations on a synthetic model ---------------------------------------------------------------------

SAMPLING = dict(temperature=1.0, top_k=3, top_p=1.0)
LENGTH = 3
PROMPT = "the quick brown fox"


@pytest.fixture(scope="module")
def engine(tmp_path_factory, target_path, draft_path):
    config = tmp_path_factory.mktemp("sampling") / "config.toml"
    config.write_text(f"""
[target]
model = "{target_path}"
n_ctx = 256
[sampling]
temperature = 1.0
top_k = 3
top_p = 1.0
[speculative]
adaptive = false
[[drafter]]
type = "draft-model"
model = "{draft_path}"
p_min = 0.0
""")
    with Engine.from_config(config) as engine:
        yield engine


def exact_distribution(engine: Engine, settings: dict, grammar: GrammarSpec | None = None) -> dict:
    """Every sequence of LENGTH tokens (or ending in end-of-generation) and its probability under the target,
    from one-token-at-a-time evaluation; under ``grammar``, among the tokens it allows at each position."""
    sampler = TokenSampler(SamplingParams(**SAMPLING, **settings))
    prompt = engine.prompt_tokens(PROMPT, raw=True)
    context = engine.context
    result = {}

    def expand(prefix: tuple, probability: float) -> None:
        if len(prefix) == LENGTH or (prefix and engine.vocab.is_eog(prefix[-1])):
            result[tuple(t for t in prefix if not engine.vocab.is_eog(t))] = probability
            return
        context.clear()
        history = np.concatenate([prompt, np.array(prefix, dtype=np.int32)])
        logits = sampler.adjusted(context.decode(history, 0)[-1], history)
        if grammar is not None:
            constraint = Constraint(grammar, engine.vocab)
            for token in prefix:
                constraint.advance(token)
            logits = constraint.masked(logits)
        for token, p in zip(*sampler.candidates(logits)):
            if p == 0.0:
                continue
            expand(prefix + (int(token),), probability * float(p))

    expand((), 1.0)
    return result


def sampled(engine: Engine, n: int, max_tokens: int = LENGTH, **options) -> tuple[dict, float]:
    counts, accepted, drafted = {}, 0, 0
    for seed in range(n):
        result = engine.generate(PROMPT, raw=True, max_tokens=max_tokens, seed=seed, **options)
        key = tuple(result.tokens)
        counts[key] = counts.get(key, 0) + 1
        accepted += result.stats.n_accepted
        drafted += result.stats.n_drafted
    return counts, accepted / max(drafted, 1)


@pytest.fixture(scope="module")
def exact(engine):
    distribution = exact_distribution(engine, {})
    assert sum(distribution.values()) == pytest.approx(1.0)
    assert len(distribution) >= 9                   # a test over a real spread of sequences
    return distribution


@pytest.fixture(scope="module")
def every_transformation(engine, exact):
    """Settings that use every step of llama.cpp's chain, the favourite first token biased down, and the exact
    distribution under them (a different one: each step changes it)."""
    favourite = max(exact, key=exact.get)[0]
    settings = dict(min_p=0.2, repeat_penalty=1.6, repeat_last_n=6, presence_penalty=0.4, frequency_penalty=0.3,
                    logit_bias={str(favourite): -1.5})
    distribution = exact_distribution(engine, settings)
    assert sum(distribution.values()) == pytest.approx(1.0) and len(distribution) >= 9
    assert max(abs(distribution.get(k, 0.0) - exact.get(k, 0.0)) for k in distribution | exact) > 0.02
    return settings, distribution


@pytest.fixture(scope="module", params=["temperature and top-k", "bias, penalties and min-p"])
def target(request, exact):
    """Sampling settings beyond the config's and the exact distribution under them."""
    return ({}, exact) if request.param == "temperature and top-k" else request.getfixturevalue("every_transformation")


@pytest.mark.slow
@pytest.mark.parametrize("options", [dict(speculative=False), dict(acceptance="rejection"),
                                     dict(acceptance="match")], ids=["plain", "rejection", "match"])
def test_generated_sequences_follow_the_target_distribution(engine, target, options):
    settings, distribution = target
    counts, rate = sampled(engine, 2000, **options, **settings)
    assert goodness_of_fit(counts, distribution) > ALPHA, counts
    if options.get("speculative", True):
        assert rate > 0.2, "drafts were hardly accepted: the test would not exercise acceptance"


@pytest.fixture(scope="module")
def under_a_grammar(engine, exact):
    """A grammar that forbids every token spelling the favourite first token's first character, and the exact
    distribution under it (another one: the favourite sequences are gone)."""
    favourite = engine.vocab.piece(max(exact, key=exact.get)[0]).decode()
    grammar = GrammarSpec("lark", "start: /[^\\x{%x}]*/" % ord(favourite.strip()[:1] or favourite[0]))
    distribution = exact_distribution(engine, {}, grammar)
    assert sum(distribution.values()) == pytest.approx(1.0) and len(distribution) >= 9
    assert max(abs(distribution.get(k, 0.0) - exact.get(k, 0.0)) for k in distribution | exact) > 0.02
    return grammar, distribution


@pytest.mark.slow
@pytest.mark.parametrize("options", [dict(speculative=False), dict(acceptance="rejection"),
                                     dict(acceptance="match")], ids=["plain", "rejection", "match"])
def test_sampling_under_a_grammar_follows_the_constrained_distribution(engine, under_a_grammar, options):
    grammar, distribution = under_a_grammar
    counts, rate = sampled(engine, 2000, grammar=grammar, **options)
    assert goodness_of_fit(counts, distribution) > ALPHA, counts
    if options.get("speculative", True):
        assert rate > 0.2, "drafts were hardly accepted: the test would not exercise acceptance"


@pytest.mark.slow
def test_a_lossy_acceptance_is_caught(engine, exact, monkeypatch):
    """Accepting every draft token (emitting the draft's distribution) must fail the same test."""

    def accept_everything(logits, tokens, draft_probs, sampler, acceptance="rejection", history=None,
                          constraint=None):
        last = sampler.choose(logits[len(tokens)], np.concatenate([history, tokens]))
        return len(tokens), [int(t) for t in tokens] + [last]

    monkeypatch.setattr(specframe.engine, "verify", accept_everything)
    counts, _ = sampled(engine, 2000, acceptance="rejection")
    assert goodness_of_fit(counts, exact) < ALPHA


@pytest.mark.slow
def test_rejection_sampling_accepts_more_draft_model_tokens_than_sample_and_match(engine):
    _, by_rejection = sampled(engine, 40, max_tokens=30, acceptance="rejection")
    _, by_matching = sampled(engine, 40, max_tokens=30, acceptance="match")
    assert by_rejection > 1.3 * by_matching, (by_rejection, by_matching)


def test_rejection_sampling_is_reproducible_with_a_seed(engine):
    first = engine.generate(PROMPT, raw=True, max_tokens=40, seed=11)
    again = engine.generate(PROMPT, raw=True, max_tokens=40, seed=11)
    other = engine.generate(PROMPT, raw=True, max_tokens=40, seed=12)
    assert first.tokens == again.tokens != other.tokens
    assert first.stats.n_drafted > 0


class BadProbabilities(specframe.Drafter):
    """Drafts the token the target likes best after the prompt, with a 'distribution' that is not one."""

    name = "bad-probabilities"

    def __init__(self, flaw: str, token: int, n_vocab: int):
        super().__init__(None, None)
        self.flaw, self.token, self.n_vocab = flaw, token, n_vocab

    def draft(self, history, n_max):
        probs = np.zeros((1, self.n_vocab), dtype=np.float32)
        if self.flaw == "nan":
            probs[:] = np.nan
        elif self.flaw == "all ones":
            probs[:] = 1.0
        else:                                   # q = 2 at the drafted token
            probs[0, self.token] = 2.0
        return specframe.Draft.of([self.token], probs)


@pytest.mark.slow
@pytest.mark.parametrize("flaw,problem", [("nan", "draft probs must be finite and non-negative"),
                                          ("all ones", "each row of draft probs must sum to 1, one sums to"),
                                          ("q = 2", "each row of draft probs must sum to 1, one sums to 2")],
                         ids=["nan", "all ones", "q = 2"])
def test_draft_probabilities_that_are_not_a_distribution_cannot_bias_sampling(engine, exact, flaw, problem):
    favourite = max(exact, key=exact.get)[0]
    counts = {}
    for seed in range(2000):
        drafter = BadProbabilities(flaw, favourite, engine.vocab.n_tokens)
        result = engine.generate(PROMPT, raw=True, max_tokens=LENGTH, seed=seed, acceptance="rejection",
                                 chain=engine.chain_of({"bad": drafter}))
        counts[tuple(result.tokens)] = counts.get(tuple(result.tokens), 0) + 1
    assert problem in result.stats.drafters["bad"]["disabled"]
    assert goodness_of_fit(counts, exact) > ALPHA, counts
