"""The decoding loop on a synthetic float32 model: speculation must not change the output."""

import sys
import textwrap
import time

import numpy as np
import pytest
from third_party_drafter import THIRD_PARTY

from specframe.bench.oracle import oracle_chain, settled_reference
from specframe.drafters.draft_model import MOVED_RUN_MIN, DraftModelDrafter, DraftModelParams
from specframe.drafting import DrafterEnv
from specframe.drafting.pass_cost import PassCost
from specframe.engine import Engine
from specframe.errors import SpecframeError
from specframe.stats_text import format_stats
from specframe.testing.lossless import compare
from specframe.testing.synthetic import SyntheticShape, write_synthetic_model

PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"

DRAFTERS = {
    "prompt-lookup": '[[drafter]]\ntype = "prompt-lookup"\n',
    "copy-cursor": '[[drafter]]\ntype = "copy-cursor"\n',
    "ngram-simple": '[[drafter]]\ntype = "ngram-simple"\nn = 2\nm = 8\n',
    "draft-model": '[[drafter]]\ntype = "draft-model"\nmodel = "{draft}"\np_min = 0.2\n',
    "draft-model (token mapping)": '[[drafter]]\ntype = "draft-model"\nmodel = "{shuffled_draft}"\np_min = 0.2\n',
    "ngram-map-k": '[[drafter]]\ntype = "ngram-map-k"\nn = 2\nm = 6\n',
    "ngram-map-k4v": '[[drafter]]\ntype = "ngram-map-k4v"\nn = 2\nm = 3\n',
    "ngram-mod": '[[drafter]]\ntype = "ngram-mod"\nn_match = 3\nn_min = 2\nn_max = 8\n',
    "ngram-cache": '[[drafter]]\ntype = "ngram-cache"\n',
    "last-match (a third-party plugin)": THIRD_PARTY + '[[drafter]]\ntype = "last-match"\n',
    "whole chain": ('[[drafter]]\ntype = "draft-model"\nmodel = "{draft}"\np_min = 0.2\n'
                    '[[drafter]]\ntype = "ngram-simple"\nn = 2\nm = 8\n'
                    '[[drafter]]\ntype = "prompt-lookup"\n'),
}


@pytest.fixture
def engine_for(write_config, target_path, draft_path, shuffled_draft_path):
    engines = []

    def make(drafters: str = "", extra: str = "", n_ctx: int = 1024, max_tokens: int = 200,
             speculative: str = "adaptive = false", target_extra: str = "") -> Engine:
        """Adaptive draft lengths are off unless asked for: these tests need drafts accepted and rejected."""
        config = write_config(f"""
            [target]
            model = "{target_path}"
            n_ctx = {n_ctx}
            {target_extra}
            [generation]
            max_tokens = {max_tokens}
            [speculative]
            """ + speculative + "\n" + extra + "\n"
            + drafters.format(draft=draft_path, shuffled_draft=shuffled_draft_path))
        engine = Engine.from_config(config)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.mark.parametrize("drafters", DRAFTERS.values(), ids=DRAFTERS.keys())
def test_speculative_greedy_output_is_plain_greedy_output(engine_for, drafters):
    engine = engine_for(drafters)
    plain = engine.generate(PROMPT, speculative=False, raw=True, track_margins=True)
    spec = engine.generate(PROMPT, raw=True)
    verdict = compare(plain, spec)
    assert verdict.identical, str(verdict)        # float32 synthetic model: exactly the same
    assert spec.text == plain.text
    stats = spec.stats
    assert stats.n_accepted > 0, "no draft was accepted: the test would not exercise acceptance"
    assert stats.n_accepted < stats.n_drafted, "no draft was rejected: the test would not exercise rollback"
    assert stats.n_target_passes < plain.stats.n_target_passes
    assert stats.n_generated == len(spec.tokens) == 200
    assert sum(d["accepted_tokens"] for d in stats.drafters.values()) == stats.n_accepted


def test_sample_and_match_reproduces_plain_sampling_with_the_same_seed(engine_for):
    engine = engine_for(DRAFTERS["whole chain"])
    for seed in (1, 2):
        plain = engine.generate(PROMPT, speculative=False, raw=True, temperature=0.9, seed=seed)
        spec = engine.generate(PROMPT, raw=True, temperature=0.9, seed=seed, acceptance="match")
        assert spec.tokens == plain.tokens
        assert spec.stats.n_accepted > 0
    other = engine.generate(PROMPT, speculative=False, raw=True, temperature=0.9, seed=3)
    assert other.tokens != plain.tokens


def test_with_penalties_and_a_bias_greedy_output_changes_and_speculation_keeps_it(engine_for):
    engine = engine_for(DRAFTERS["whole chain"])
    unpenalized = engine.generate(PROMPT, speculative=False, raw=True)
    options = dict(repeat_penalty=1.3, repeat_last_n=32, frequency_penalty=0.2, presence_penalty=0.1,
                   logit_bias={str(unpenalized.tokens[5]): -2.0})
    plain = engine.generate(PROMPT, speculative=False, raw=True, track_margins=True, **options)
    spec = engine.generate(PROMPT, raw=True, **options)
    assert plain.tokens != unpenalized.tokens
    verdict = compare(plain, spec)
    assert verdict.identical, str(verdict)
    assert 0 < spec.stats.n_accepted < spec.stats.n_drafted


def test_streamed_pieces_make_the_text_and_keep_utf8_whole(engine_for):
    engine = engine_for(DRAFTERS["prompt-lookup"])
    generation = engine.stream(PROMPT, raw=True)
    pieces = list(generation)
    result = generation.result
    assert "".join(pieces) == result.text
    # The synthetic model emits byte tokens: characters split across tokens come out whole or as U+FFFD.
    raw = b"".join(engine.vocab.piece(t) for t in result.tokens)
    assert result.text == raw.decode("utf-8", "replace")


def test_stop_strings_cut_the_text_before_them(engine_for):
    engine = engine_for(DRAFTERS["whole chain"])
    plain = engine.generate(PROMPT, speculative=False, raw=True)
    stop = plain.text[60:64]
    cut = plain.text.index(stop)
    generation = engine.stream(PROMPT, raw=True, stop=[stop])
    streamed = "".join(generation)
    result = generation.result
    assert result.stop_reason == "stop"
    assert result.text == streamed == plain.text[:cut]


def test_max_tokens_is_exact_even_with_long_drafts(engine_for):
    engine = engine_for(DRAFTERS["whole chain"])
    for n in (1, 2, 7, 33):
        result = engine.generate(PROMPT, raw=True, max_tokens=n)
        assert len(result.tokens) == n and result.stop_reason == "max_tokens"


def test_a_full_context_stops_generation_with_a_reason(engine_for):
    engine = engine_for(DRAFTERS["whole chain"], n_ctx=256, max_tokens=1000)
    result = engine.generate(PROMPT, raw=True)
    assert result.stop_reason == "context_full"
    # Every position is used; the last token is chosen from the last position's logits and needs no slot.
    assert result.n_prompt_tokens + len(result.tokens) == engine.context.n_ctx + 1
    plain = engine.generate(PROMPT, raw=True, speculative=False)
    assert plain.tokens == result.tokens


def test_a_prompt_longer_than_the_context_is_refused(engine_for):
    from specframe.llama import ContextFullError

    engine = engine_for(n_ctx=256)
    with pytest.raises(ContextFullError, match="n_ctx"):
        engine.generate("word " * 400, raw=True)


def test_interrupting_keeps_the_text_so_far(engine_for):
    engine = engine_for(DRAFTERS["prompt-lookup"])
    plain = engine.generate(PROMPT, raw=True)
    generation = engine.stream(PROMPT, raw=True)
    iterator = iter(generation)
    first = next(iterator) + next(iterator)
    result = generation.interrupt()
    assert result.stop_reason == "interrupted"
    assert result.text.startswith(first) and plain.text.startswith(result.text)
    assert 0 < len(result.tokens) < len(plain.tokens)


def test_chat_template_wraps_the_prompt_unless_raw(engine_for):
    engine = engine_for()
    templated = engine.prompt_tokens("hello")
    raw = engine.prompt_tokens("hello", raw=True)
    assert len(templated) > len(raw)
    assert engine.vocab.detokenize(templated).count("im_start") == 2


FAULTY_PLUGIN = '''
from dataclasses import dataclass
import numpy as np
from specframe import Draft, Drafter, hookimpl, param

@dataclass(frozen=True)
class Params:
    mode: str = param("raise", choices=("raise", "bad-ids", "wrong-type"))

class Faulty(Drafter):
    name = "faulty"
    Params = Params
    calls = 0

    def draft(self, history, n_max):
        self.calls += 1
        if self.calls < 3:
            return Draft.of(history[-2:])          # harmless drafts first
        if self.params.mode == "raise":
            raise RuntimeError("boom")
        if self.params.mode == "bad-ids":
            return Draft.of([10**9, -5])
        return "1 2 3"                             # not token ids

@hookimpl
def register_drafters(register):
    register(Faulty)
'''


@pytest.mark.parametrize("mode", ["raise", "bad-ids", "wrong-type"])
def test_a_faulty_drafter_is_set_aside_and_output_stays_correct(engine_for, tmp_path, monkeypatch, mode, caplog):
    (tmp_path / "faulty_plugin.py").write_text(textwrap.dedent(FAULTY_PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    engine = engine_for(f'[[drafter]]\ntype = "faulty"\nmode = "{mode}"\n' + DRAFTERS["prompt-lookup"],
                        extra='[plugins]\nmodules = ["faulty_plugin"]\n')
    plain = engine.generate(PROMPT, speculative=False, raw=True)
    spec = engine.generate(PROMPT, raw=True)
    assert spec.tokens == plain.tokens
    faulty = spec.stats.drafters["faulty"]
    assert "disabled" in faulty and faulty["calls"] == 3
    assert spec.stats.drafters["prompt-lookup"]["accepted_tokens"] > 0   # the rest of the chain carries on
    assert any("faulty" in r.getMessage() and "set aside" in r.getMessage() for r in caplog.records)
    sys.modules.pop("faulty_plugin", None)


def test_requests_can_use_a_subset_of_the_drafters(engine_for):
    engine = engine_for(DRAFTERS["whole chain"])
    only = engine.generate(PROMPT, raw=True, drafters=["prompt-lookup"])
    assert set(only.stats.drafters) == {"prompt-lookup"} and only.stats.n_accepted > 0
    with pytest.raises(SpecframeError, match="no drafter named nope"):
        engine.generate(PROMPT, raw=True, drafters=["nope"])


def test_speculative_n_min_passes_short_drafts_over(engine_for):
    engine = engine_for('[[drafter]]\ntype = "prompt-lookup"\nnum_pred = 3\n',
                        speculative="adaptive = false\nn_min = 4")
    result = engine.generate(PROMPT, raw=True)
    assert result.stats.n_drafted == 0 and result.stats.drafters["prompt-lookup"]["calls"] > 0


def test_the_lossless_check_tells_a_real_difference_from_batching(engine_for):
    import dataclasses

    engine = engine_for()
    plain = engine.generate(PROMPT, speculative=False, raw=True, max_tokens=30, track_margins=True)
    assert compare(plain, plain, engine).identical
    # A token changed where the target was sure: neither a near-tie nor reproducible by batching.
    index = max(range(5, 30), key=lambda i: plain.margins[i])
    wrong = (plain.tokens[index] + 1) % engine.vocab.n_tokens
    forged = dataclasses.replace(plain, tokens=plain.tokens[:index] + [wrong] + plain.tokens[index + 1:])
    verdict = compare(plain, forged, engine)
    assert verdict.diverged_at == index and not verdict.ok
    assert "real difference" in str(verdict)


def test_adaptive_draft_lengths_keep_the_output_and_hold_back_poor_drafters(engine_for):
    engine = engine_for(DRAFTERS["whole chain"], speculative="adaptive = true")
    plain = engine.generate(PROMPT, speculative=False, raw=True, track_margins=True)
    spec = engine.generate(PROMPT, raw=True)
    assert compare(plain, spec).identical
    assert set(engine.pass_cost.measured) >= set(range(1, 18))     # calibrated: every pass size n_max + 1
    drafters = spec.stats.drafters
    # A synthetic draft model as big as its target costs a pass per drafted token: held back, probed at the start.
    assert drafters["draft-model"]["held_back"] > 0 and drafters["draft-model"]["calls"] >= 1


def test_a_later_run_starts_from_what_the_drafts_were_worth_in_earlier_ones(engine_for):
    """What the drafts' first tokens were worth is stored when a run's drafters are forgotten or closed, and a later
    engine's drafters start from it; the output is the same."""
    from specframe.drafting.acceptance_memory import memory_folder

    prompt = " ".join([PROMPT] * 3)
    first = engine_for(DRAFTERS["copy-cursor"], speculative="adaptive = true")
    plain = first.generate(prompt, speculative=False, raw=True, max_tokens=40)
    assert first.generate(prompt, raw=True, max_tokens=40).tokens == plain.tokens
    memory = first.chain().entries[0].acceptance_memory
    first.forget_drafters()
    assert [memory.path] == list(memory_folder().glob("*.json"))
    counts = memory.load()
    assert sum(drafts for drafts, _ in counts.first.values()) >= 1 and counts.later[0] >= 1
    assert first.generate(prompt, raw=True, max_tokens=40).tokens == plain.tokens
    first.close()
    twice = memory.load()
    assert sum(drafts for drafts, _ in twice.first.values()) > sum(drafts for drafts, _ in counts.first.values())
    later = engine_for(DRAFTERS["copy-cursor"], speculative="adaptive = true")
    assert later.chain().entries[0].record.learned == twice
    assert later.generate(prompt, raw=True, max_tokens=40).tokens == plain.tokens


def test_a_draft_model_that_cannot_pay_for_the_prompt_is_not_begun_by_a_later_run(engine_for, monkeypatch):
    """The first run times the model's catching up over its begin and stores it; a later run (a new engine) that
    finds the prompt dearer than any draft could bring back leaves the model alone, and the output is the same."""
    import json

    from specframe.paths import cache_dir

    monkeypatch.setattr("specframe.drafting.chain.other_load", lambda *_: 0.0)   # the store, not this machine's load
    prompt = " ".join([PROMPT] * 3)
    first = engine_for(DRAFTERS["draft-model"], speculative="adaptive = true")
    plain = first.generate(prompt, speculative=False, raw=True, max_tokens=40)
    begun = first.generate(prompt, raw=True, max_tokens=40)
    assert begun.stats.drafters["draft-model"]["begin_ms"] > 0 and begun.tokens == plain.tokens
    assert begun.stats.drafters["draft-model"]["prepare_ms"] > 0                      # loaded on first use
    [stored] = (cache_dir() / "catch-up").glob("*.json")
    rate = json.loads(stored.read_text())
    assert rate["seconds_per_token"] > 0
    stored.write_text(json.dumps(rate | {"seconds_per_token": 10.0}))   # a CPU where catching up is dear
    later = engine_for(DRAFTERS["draft-model"], speculative="adaptive = true").generate(prompt, raw=True,
                                                                                       max_tokens=40)
    model = later.stats.drafters["draft-model"]
    assert model["begins_deferred"] == 1 and model["begin_ms"] == 0 and model["calls"] == 0
    assert model["prepare_ms"] == 0 and later.tokens == plain.tokens                  # nor was it loaded


def test_a_draft_model_whose_drafting_cannot_pay_is_not_begun_by_a_later_run(engine_for, monkeypatch):
    """The first run times the model's calls and stores its drafting rate when the engine closes. A later run whose
    prompt costs the model a little to catch up on (two single passes), which alone would not keep it from the
    prompt, leaves the model alone when that stored rate makes even a longest draft all right too dear; without
    the stored rate it begins the model as before."""
    import json

    from specframe.paths import cache_dir

    # the stores, not this machine's load: a rate timed while another process ran would not be stored
    monkeypatch.setattr("specframe.drafting.chain.other_load", lambda *_: 0.0)
    monkeypatch.setattr("specframe.drafting.chain.others_busy", lambda *_: 0.0)
    prompt = " ".join([PROMPT] * 3)
    first = engine_for(DRAFTERS["draft-model"], speculative="adaptive = true")
    plain = first.generate(prompt, speculative=False, raw=True, max_tokens=40)
    probed = first.generate(prompt, raw=True, max_tokens=40)
    assert probed.stats.drafters["draft-model"]["calls"] >= 1
    single, n_prompt = first.pass_cost.seconds(1), len(first.prompt_tokens(prompt, raw=True))
    first.close()
    folder = cache_dir() / "catch-up"
    [drafting] = folder.glob("*-drafting.json")
    [catch_up] = set(folder.glob("*.json")) - {drafting}
    assert json.loads(drafting.read_text())["seconds_per_token"] > 0
    rate = json.loads(catch_up.read_text())
    catch_up.write_text(json.dumps(rate | {"seconds_per_token": 2 * single / n_prompt}))
    drafting.write_text(json.dumps(rate | {"seconds_per_token": 10.0}))          # a CPU where drafting is dear

    def later_run() -> dict:
        engine = engine_for(DRAFTERS["draft-model"], speculative="adaptive = true")
        result = engine.generate(prompt, raw=True, max_tokens=40)
        assert result.tokens == plain.tokens
        return result.stats.drafters["draft-model"]

    model = later_run()
    assert model["begins_deferred"] == 1 and model["begin_ms"] == 0 and model["calls"] == 0
    drafting.unlink()
    model = later_run()
    assert model["begins_deferred"] == 0 and model["begin_ms"] > 0


def test_a_draft_of_another_vocabulary_drafts_through_token_mapping(engine_for):
    engine = engine_for(DRAFTERS["draft-model (token mapping)"])
    plain = engine.generate(PROMPT, speculative=False, raw=True, track_margins=True)
    spec = engine.generate(PROMPT, raw=True)
    assert spec.tokens == plain.tokens
    stats = spec.stats.drafters["draft-model"]
    assert stats["note"].startswith("token mapping: token") and stats["accepted_tokens"] > 0


def poison(engine, table: dict) -> None:
    """Store a pass-cost table for this engine's model, build and threads, as a file from an earlier run would."""
    import time

    engine.pass_cost_store.path.parent.mkdir(parents=True, exist_ok=True)
    engine.pass_cost_store.path.write_text(PassCost(table, measured_at=time.time(), other_load=0.0).to_json())


def test_an_impossible_stored_table_is_measured_again_and_speculation_goes_on(engine_for):
    """A drafter that knows the reply, and whose record says so (as the benchmark's oracle): with a sane table its
    drafts pay whatever its calls cost next to the synthetic model's 0.1 ms passes. Prompt lookup's drafts of random
    text seldom pay there; nor did a fresh record's, on a CPU whose measured table made its first estimates fall
    short, so that whether any draft was verified was a matter of timing."""
    plain = engine_for().generate(PROMPT, speculative=False, raw=True)
    engine = engine_for(speculative="adaptive = true")
    poison(engine, {1: 0.08, 2: 4.4})                     # measured while another process used the CPU
    result = engine.generate(PROMPT, raw=True, chain=oracle_chain(engine, engine.prompt_tokens(PROMPT, raw=True),
                                                                  plain.tokens))
    assert engine.pass_cost.seconds(2) < 1.0 and result.stats.n_accepted > len(plain.tokens) / 2
    stored = engine.pass_cost_store.path   # replaced by the measured table, or deleted if the CPU was too busy to store
    assert not stored.exists() or PassCost.from_json(stored.read_text()).seconds(2) < 1.0


def test_the_benchmarks_oracle_settles_a_reference_it_cannot_follow_on_the_reply_it_reproduces(engine_for):
    """A reference that parts from the model's reply (as plain's does where batched passes break a near-tie) is
    replaced by the oracle's own output, which the next run reproduces with every draft accepted: the ceiling the
    benchmark measures is then the oracle's, not that of a reference it left for good."""
    engine = engine_for(speculative="adaptive = true")
    prompt = engine.prompt_tokens(PROMPT, raw=True)
    plain = engine.generate(PROMPT, speculative=False, raw=True, track_margins=True)
    parted = np.array(plain.tokens, dtype=np.int32)
    parted[5:] = (parted[5:] + 1) % engine.model.vocab.n_tokens          # every token after the fifth is wrong
    runs = []

    def reply_to(known):
        runs.append(engine.generate(PROMPT, raw=True, chain=oracle_chain(engine, prompt, known), track_margins=True))
        return runs[-1].tokens

    settled = settled_reference(reply_to, parted)
    assert len(runs) >= 2 and np.array_equal(runs[-1].tokens, settled)
    assert compare(plain, runs[-1], engine).ok
    last = runs[-1].stats
    assert last.n_drafted > 0 and last.n_accepted == last.n_drafted      # followed to the end: nothing refuted


def test_a_stored_table_is_spot_checked_when_the_table_is_asked_for(engine_for):
    """As a server asks for it before its first request, whose slots then seldom run the single-sequence passes that
    could confirm it: a stored table that prices every pass over several tokens like 1.5 single passes a token
    (possible, far too dear here) is found wrong by a few passes and measured again."""
    engine = engine_for(speculative="adaptive = true")
    poison(engine, {n: 0.01 * (1 if n == 1 else 1.5 * n) for n in range(1, 18)})
    cost = engine.calibrate()
    assert cost.confirmed and cost.seconds(17) < 0.1
    stored = engine.pass_cost_store.path     # replaced, or deleted if the CPU was too busy to store the new one
    assert not stored.exists() or PassCost.from_json(stored.read_text()).seconds(17) < 0.1


def test_a_table_the_loop_found_stale_is_spot_checked_and_kept_not_measured_again(engine_for, monkeypatch, caplog):
    """Loop passes that looked off (a few batches at 1.6 times the table after this engine measured it) leave the
    table stale; the next request spot-checks it on its own passes instead of spending seconds measuring it again,
    and keeps it. (The spot check's verdict on passes of a tenth of a millisecond is set aside, as test_cli does:
    its margins are test_pass_cost's subject; this one's is that the engine checks before it measures.)"""
    from specframe.drafting import pass_cost

    engine = engine_for(DRAFTERS["prompt-lookup"], speculative="adaptive = true")
    cost = engine.calibrate()
    measured_at, table = cost.measured_at, cost.measured
    monkeypatch.setattr(pass_cost, "REMEASURE_AFTER_SECONDS", 0.0)     # judged by the loop at once
    for n in (1, 1, 1, 16, 9, 4, 12, 8):
        cost.observe(n, cost.seconds(n) * (1.0 if n == 1 else 1.6))
    assert cost.stale
    for margin in ("FASTER", "DRIFT", "GROSS"):
        monkeypatch.setattr(pass_cost, margin, 1e3)
    with caplog.at_level("INFO", logger="specframe.drafting"):
        engine.generate(PROMPT, raw=True)
    assert engine.pass_cost is cost and not cost.stale
    assert cost.measured_at == measured_at and cost.measured == table      # kept, not measured again
    assert any("kept the pass costs: a spot check of 9/16 token(s)" in r.getMessage() for r in caplog.records)


def test_a_first_runs_measuring_of_the_pass_costs_is_counted_apart_from_prompt_and_decoding(engine_for):
    engine = engine_for(DRAFTERS["prompt-lookup"], speculative="adaptive = true")
    assert engine.pass_cost_store.load() is None            # the first run on this machine: no table stored yet
    first = engine.generate(PROMPT, raw=True, max_tokens=8)
    stats = first.stats
    assert engine.pass_cost_store.load() is not None and stats.calibration_seconds > 0
    assert stats.prompt_seconds < stats.calibration_seconds / 2      # 17 prompt tokens against ~40 timed passes
    assert stats.prompt_seconds > 0 and stats.generation_seconds > 0
    text = format_stats(first)
    assert ("pass costs measured or checked in" in text) == (stats.calibration_seconds >= 0.1)
    assert ("a first run on this machine measures the pass costs" in text) == (stats.calibration_seconds >= 0.1)
    again = engine.generate(PROMPT, raw=True, max_tokens=8)
    assert again.stats.calibration_seconds < stats.calibration_seconds / 10   # the table is in hand
    assert "pass costs measured" not in format_stats(again)


def test_a_first_run_measures_what_depth_adds_at_its_prompt_and_prices_each_pass_where_it_runs(engine_for):
    """The table is taken after the first request's prompt, and again DEPTH_STEP positions of filler deeper, which
    is rolled back: the reply is plain decoding's. Each step then prices its draft at the sequence's own depth."""
    engine = engine_for(DRAFTERS["prompt-lookup"], speculative="adaptive = true")
    plain = engine.generate(PROMPT, raw=True, max_tokens=40, speculative=False)
    cost = engine.pass_cost
    depths = []
    at_depth = cost.at_depth
    cost.at_depth = lambda position: (depths.append(position), at_depth(position))
    result = engine.generate(PROMPT, raw=True, max_tokens=40)
    read = len(engine.prompt_tokens(PROMPT, raw=True)) - 1    # the prompt's last token goes with the first pass
    assert cost.depth == read and cost.per_position >= 0.0     # timed (a tiny model's attention: a little)
    assert engine.pass_cost_store.load().depth == read
    assert result.tokens == plain.tokens
    assert depths[0] == read and depths == sorted(set(depths))      # each step at its own depth, onwards
    assert len(depths) == result.stats.n_target_passes and depths[-1] < read + len(result.tokens)


def test_the_drafter_chains_own_time_is_counted_with_its_drafters_calls_in_it(engine_for):
    engine = engine_for(DRAFTERS["copy-cursor"] + DRAFTERS["ngram-simple"], speculative="adaptive = true")
    engine.generate(PROMPT, raw=True, max_tokens=8)              # the pass costs measured: the chain weighs drafts
    stats = engine.generate(PROMPT, raw=True, max_tokens=64).stats
    calls = sum(d["draft_ms"] + d["accept_ms"] for d in stats.drafters.values()) / 1e3
    assert 0 < calls <= stats.chain_seconds < stats.generation_seconds   # weighing and hearing on top of the calls
    assert "the drafter chain took" in format_stats(engine.generate(PROMPT, raw=True, max_tokens=8))
    assert engine.generate(PROMPT, raw=True, max_tokens=64, speculative=False).stats.chain_seconds == 0


def test_a_draft_models_load_on_first_use_is_counted_apart_from_prompt_and_decoding(engine_for, monkeypatch):
    from specframe.drafters.draft_model import DraftModelDrafter

    loading = DraftModelDrafter.prepare

    def slow_to_load(self):
        if not self._ready:
            time.sleep(1.0)           # a real draft model on a CPU: seconds
        loading(self)

    monkeypatch.setattr(DraftModelDrafter, "prepare", slow_to_load)
    engine = engine_for(DRAFTERS["draft-model"])
    first = engine.generate(PROMPT, raw=True, max_tokens=20)
    stats = first.stats
    assert stats.drafters["draft-model"]["prepare_ms"] >= 1000
    assert stats.preparing_seconds == pytest.approx(stats.drafters["draft-model"]["prepare_ms"] / 1e3)
    assert stats.prompt_seconds < 0.5 and stats.generation_seconds < 0.5     # the synthetic model's milliseconds
    text = format_stats(first)
    assert "drafters made ready in 1." in text
    assert "pass costs" not in text           # fixed draft lengths: no table measured, so no hint about one
    again = engine.generate(PROMPT, raw=True, max_tokens=20)                  # loaded already
    assert again.stats.preparing_seconds == 0 and "drafters made ready" not in format_stats(again)


def test_a_possible_but_wrong_table_heals_during_the_run(engine_for):
    engine = engine_for(DRAFTERS["prompt-lookup"], speculative="adaptive = true")
    poison(engine, {n: 0.5 + 0.01 * n for n in range(1, 18)})  # every pass half a second: off by a thousandfold
    result = engine.generate(PROMPT, raw=True)
    assert result.stats.calibration_seconds > 0 and engine.pass_cost.seconds(1) < 0.1
    assert result.stats.n_drafted > 0
    assert result.stats.generation_seconds < 5              # re-measured, not believed for the whole run


def test_greedy_verification_runs_on_the_device_unless_logits_are_needed(engine_for):
    engine = engine_for(DRAFTERS["whole chain"], target_extra='backend_sampling = "on"')
    on_device = engine.generate(PROMPT, raw=True)
    assert engine.context.chooses_on_device(0)
    traced = engine.generate(PROMPT, raw=True, track_margins=True)       # margins need the logits
    assert not engine.context.chooses_on_device(0)
    assert traced.tokens == on_device.tokens and on_device.stats.n_accepted > 0
    engine.generate(PROMPT, raw=True, temperature=0.9, max_tokens=8)   # sampling needs them too
    assert not engine.context.chooses_on_device(0)
    assert engine.generate(PROMPT, raw=True).tokens == on_device.tokens
    assert engine.context.chooses_on_device(0)


@pytest.mark.parametrize("setting", ['"off"', '"auto"'])
def test_off_or_on_a_cpu_the_host_scans_the_logits(engine_for, setting):
    engine = engine_for(DRAFTERS["ngram-simple"], target_extra=f"backend_sampling = {setting}")
    assert not engine.model.offloaded                       # this build: the CPU alone
    on_host = engine.generate(PROMPT, raw=True)
    assert not engine.context.chooses_on_device(0) and engine.context.chooses_on_host(0)
    traced = engine.generate(PROMPT, raw=True, track_margins=True)       # rows of logits, scanned in verify()
    assert not engine.context.chooses_on_host(0)
    assert traced.tokens == on_host.tokens and on_host.stats.n_accepted > 0



# --- keeping a slot's memory: moved runs (llama-server's --cache-reuse) and warm-ups ---------------------------
#
# A moved run's keys are rotated to their new positions, yet from the second layer on they were computed after the
# tokens that preceded the run where it was (dropped since): on a model of several layers a moved run is close to,
# not equal to, a fresh evaluation (as in llama-server). On one layer it is exact but for RoPE's rounding, which is
# what checks the moving itself; the two-layer target checks only what is kept.

@pytest.fixture(scope="module")
def one_layer_path(models_dir):
    return write_synthetic_model(models_dir / "one-layer.gguf", seed=0, shape=SyntheticShape(n_layer=1))


@pytest.fixture
def one_layer_engine(write_config, one_layer_path):
    """``one_layer_engine()``: an engine of the one-layer model whose memory holds float32 keys and values (no f16
    rounding), giving rows of logits rather than greedy choices."""
    engines = []

    def make() -> Engine:
        engine = Engine.from_config(write_config(f"""
            [target]
            model = "{one_layer_path}"
            n_ctx = 1024
            type_k = "f32"
            type_v = "f32"
            flash_attn = "off"
            """, name=f"one-layer-{len(engines)}.toml"))
        engine.context.choose_on_device(0, False)
        engine.context.choose_on_host(0, False)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


def moved_window(engine: Engine, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Prompt A of 300 random tokens, and B: A's first 20, A's last 200 (its middle 100 dropped), then 60 new."""
    rng = np.random.default_rng(seed)
    a = rng.integers(3, engine.vocab.n_tokens, 300).astype(np.int32)
    b = np.concatenate([a[:20], a[120:], rng.integers(3, engine.vocab.n_tokens, 60)]).astype(np.int32)
    return a, b


def test_a_run_held_further_on_is_moved_into_place_and_decodes_as_a_fresh_prompt(one_layer_engine):
    engine, fresh = one_layer_engine(), one_layer_engine()
    a, b = moved_window(engine)
    engine.generate(a, speculative=False, temperature=0.0, max_tokens=4)
    assert engine.reusable(0, b) == engine.reusable(0, b, 0) == 20         # the common prefix alone
    assert engine.reusable(0, b, 32) == 200 == engine.reusable(0, b, 180)   # and the run of 180 held at 120
    assert engine.reusable(0, b, 181) == 20
    sequence = engine.start(b, reuse=True, reuse_chunks=32)
    assert sequence.stats.n_cached_tokens == 200 and engine.context.positions(0) == 200
    engine.context.choose_on_host(0, False)       # the request chose greedily: rows of logits for this check
    moved = engine.context.decode(b[200:], 200, all_logits=True).copy()
    expected = fresh.context.decode(b, 0, all_logits=True)[200:]
    assert np.abs(moved - expected).max() < 1e-3


def test_a_reused_moved_prompt_continues_as_a_fresh_prompt_does(one_layer_engine):
    engine, fresh = one_layer_engine(), one_layer_engine()
    a, b = moved_window(engine, seed=6)
    engine.generate(a, speculative=False, temperature=0.0, max_tokens=4)
    reused = engine.generate(b, reuse=True, reuse_chunks=32, speculative=False, temperature=0.0, max_tokens=16)
    assert reused.stats.n_cached_tokens == 200
    assert reused.tokens == fresh.generate(b, speculative=False, temperature=0.0, max_tokens=16).tokens


def test_without_reuse_chunks_a_slot_keeps_only_the_common_prefix(engine_for):
    engine = engine_for(n_ctx=1024)
    a, b = moved_window(engine, seed=7)
    engine.generate(a, speculative=False, temperature=0.0, max_tokens=4)
    assert engine.generate(b, reuse=True, speculative=False, max_tokens=1).stats.n_cached_tokens == 20
    engine.generate(a, speculative=False, temperature=0.0, max_tokens=4)
    chunks = engine.generate(b, reuse=True, reuse_chunks=32, speculative=False, max_tokens=1)
    assert chunks.stats.n_cached_tokens == 200 and chunks.stats.n_prompt_tokens == 260


def test_a_draft_model_moves_the_long_runs_a_new_prompt_shares_and_drafts_as_for_a_fresh_one(
        target_model, one_layer_path, monkeypatch):
    env = DrafterEnv(target=target_model, n_ctx=512, n_threads=2, n_gpu_layers=0)
    params = DraftModelParams(model=str(one_layer_path), p_min=0.0, n_max=6, type_k="f32", type_v="f32",
                              flash_attn="off")
    drafter = DraftModelDrafter(params, env)
    rng = np.random.default_rng(3)
    a = rng.integers(3, target_model.vocab.n_tokens, 200).astype(np.int32)
    new = rng.integers(3, target_model.vocab.n_tokens, 20).astype(np.int32)
    drafter.begin(a)
    drafter.draft(a, 6)
    moves: list[tuple] = []
    move = drafter.context.move
    monkeypatch.setattr(drafter.context, "move", lambda *args: (moves.append(args), move(*args)))
    short = np.concatenate([a[:10], a[150:150 + MOVED_RUN_MIN - 1], new])     # a run one token too short
    drafter.begin(short)
    assert moves == []
    drafter.begin(a)
    long = np.concatenate([a[:10], a[90:], new])
    drafter.begin(long)
    assert moves == [(0, 90, 110, 10)]          # sequence 0's [90, 200) down to 10
    fresh = DraftModelDrafter(params, env)
    assert drafter.draft(long, 6).tokens.tolist() == fresh.draft(long, 6).tokens.tolist()
    drafter.close()
    fresh.close()


def test_max_tokens_0_evaluates_the_prompt_and_keeps_it_for_the_next_request(engine_for):
    engine, fresh = engine_for(DRAFTERS["whole chain"]), engine_for()
    prompt = engine.prompt_tokens(PROMPT, raw=True)
    warm_up = engine.generate(prompt, max_tokens=0)
    assert warm_up.tokens == [] and warm_up.text == "" and warm_up.stop_reason == "max_tokens"
    assert warm_up.stats.n_generated == 0
    assert engine.kept(0) == engine.context.positions(0) == prompt.size - 1   # the last is fed with the first draft
    after = engine.generate(prompt, reuse=True, temperature=0.0, max_tokens=12)
    assert after.stats.n_cached_tokens == prompt.size - 1
    assert after.tokens == fresh.generate(prompt, speculative=False, temperature=0.0, max_tokens=12).tokens


def test_max_tokens_0_on_a_one_token_prompt_ends_at_once(engine_for):
    engine = engine_for()
    result = engine.generate(np.array([engine.vocab.bos], dtype=np.int32), max_tokens=0)
    assert result.tokens == [] and result.stop_reason == "max_tokens" and engine.kept(0) == 0


def test_host_time_per_pass_is_decodings_time_outside_the_targets_passes(engine_for):
    """The target's passes are timed inside llama_decode; everything else of decoding (drafting, verifying, the
    text) is host time, shown per pass: a chain that spends time asking its drafters raises it by that time."""
    engine = engine_for(DRAFTERS["copy-cursor"] + DRAFTERS["ngram-simple"], speculative="adaptive = true")
    engine.generate(PROMPT, raw=True, max_tokens=8)              # the pass costs measured
    plain = engine.generate(PROMPT, raw=True, max_tokens=64, speculative=False).stats
    assert 0 < plain.target_seconds < plain.generation_seconds
    assert plain.host_ms_per_pass == pytest.approx(
        1e3 * (plain.generation_seconds - plain.target_seconds) / plain.n_target_passes)
    spec = engine.generate(PROMPT, raw=True, max_tokens=64).stats
    assert 0 < spec.target_seconds < spec.generation_seconds
    assert spec.host_ms_per_pass >= 1e3 * spec.chain_seconds / spec.n_target_passes   # the chain's share in it
    assert "host time each" in format_stats(engine.generate(PROMPT, raw=True, max_tokens=8))
