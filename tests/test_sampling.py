"""Lossless stochastic acceptance: the emitted tokens follow the target's distribution, with or without drafts.

Significance level: every goodness-of-fit test below rejects losslessness at p < ALPHA. The seeds are fixed,
so a run is reproducible; each test also shows it has the power to fail, on a deliberately lossy acceptance.
"""

import numpy as np
import pytest
from scipy.stats import chisquare

import specframe
import specframe.engine
from specframe.engine import Engine
from specframe.errors import ParamError
from specframe.grammar import Constraint, GrammarSpec
from specframe.sampling import SamplingParams, TokenSampler, verify

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
