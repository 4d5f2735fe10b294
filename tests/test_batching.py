"""Several sequences in one engine, one per slot, stepped together: each is verified and rolled back on its own,
and on the synthetic float32 model each request's greedy output is the same alone or beside three others."""

import time

import numpy as np
import pytest
from chains import COPYING_DRAFTERS
from third_party_drafter import THIRD_PARTY

from specframe.bench.oracle import OracleDrafter
from specframe.config import load_config
from specframe.drafting.pass_cost import PassCost
from specframe.engine import Engine
from specframe.testing.lossless import compare

PROMPTS = ["the quick brown fox jumps over the lazy dog and the quick brown fox",
           "one two three four one two three four one two",
           "alpha beta gamma delta alpha beta gamma",
           "hello world, hello world, hello"]
CHAIN = THIRD_PARTY + COPYING_DRAFTERS + """
[[drafter]]
type = "draft-model"
model = "{draft}"
p_min = 0.2
[[drafter]]
type = "last-match"
"""


@pytest.fixture
def engines(write_config, target_path, draft_path):
    made = []

    def make(slots: int, speculative: str = "adaptive = false", n_batch: int = 512, kv_unified: bool = False,
             backend_sampling: str = "auto") -> Engine:
        config = write_config(f"""
            [target]
            model = "{target_path}"
            n_ctx = 512
            n_batch = {n_batch}
            threads = 1
            kv_unified = {str(kv_unified).lower()}
            backend_sampling = "{backend_sampling}"
            [generation]
            max_tokens = 120
            [speculative]
            {speculative}
            """ + CHAIN.format(draft=draft_path))
        engine = Engine(load_config(config), slots=slots)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


@pytest.mark.parametrize("speculative, backend_sampling", [("adaptive = false", "auto"), ("adaptive = true", "auto"),
                                                            ("adaptive = false", "on")])
def test_greedy_output_is_the_same_alone_or_beside_three_others(engines, together, speculative, backend_sampling):
    """``backend_sampling = "on"``: every slot's greedy choices made in the graph, the traced plain runs' on the
    host."""
    engine = engines(4, speculative, backend_sampling=backend_sampling)
    plain = [engine.generate(p, raw=True, speculative=False, track_margins=True) for p in PROMPTS]
    alone = [engine.generate(p, raw=True) for p in PROMPTS]
    batched = together(engine, PROMPTS)
    for p, a, b in zip(plain, alone, batched):
        assert compare(p, a).identical and compare(p, b).identical
        assert b.text == p.text and len(b.tokens) == 120
    if speculative == "adaptive = false":   # cost-aware lengths draft little on a model whose passes cost per token
        assert all(r.stats.n_accepted > 0 and r.stats.n_target_passes < 120 for r in batched)
    assert all(engine.context.chooses_on_device(slot) == (backend_sampling == "on") for slot in range(4))


def test_with_one_kv_buffer_for_every_slot_a_pass_is_one_batch_and_output_differs_only_at_near_ties(engines,
                                                                                                    together):
    """kv_unified: attention sums over every slot's cells, masked, so rounding may differ from alone; drafts are
    still verified and rolled back per sequence."""
    engine = engines(4, kv_unified=True)
    assert engine.context.one_batch
    plain = [engine.generate(p, raw=True, speculative=False, track_margins=True) for p in PROMPTS]
    batched = together(engine, PROMPTS, stagger=1)
    for p, b in zip(plain, batched):
        verdict = compare(p, b)
        assert verdict.ok, verdict
        assert len(b.tokens) == 120
    assert sum(r.stats.n_accepted for r in batched) > 0


def test_a_long_draft_beside_a_single_token_is_verified_in_a_call_of_its_own(engines, monkeypatch):
    """Where 16 tokens cost less than 15 (as on a Xeon), one llama_decode over a 16-token verification and a single
    token would cost 2 tokens, then 15; the engine makes two calls, and each slot's output is still plain
    decoding's. A drafter that knows the first slot's reply makes long drafts; the second decodes plainly."""
    engine = engines(2, "adaptive = true")
    table = {n: 0.030 + 0.004 * n for n in range(1, 18)} | {16: 0.050, 34: 0.200}
    PassCost.__init__(engine.calibration.cost, table, measured_at=time.time(), other_load=0.0)
    monkeypatch.setattr(PassCost, "observe", lambda *_, **__: None)  # this model's passes are not the table's
    prompts = [engine.prompt_tokens(p, raw=True) for p in PROMPTS[:2]]
    plain = [engine.generate(p, speculative=False, max_tokens=60).tokens for p in prompts]
    calls = []
    decode_batch = engine.context.decode_batch
    monkeypatch.setattr(engine.context, "decode_batch", lambda segments: calls.append(
        [(s.seq, len(s.tokens)) for s in segments]) or decode_batch(segments))
    knowing = OracleDrafter(np.concatenate([prompts[0], plain[0]]), engine.drafters.env)
    running = [engine.start(prompts[0], slot=0, max_tokens=60, chain=engine.chain_of({"knowing": knowing})),
               engine.start(prompts[1], slot=1, max_tokens=60, speculative=False)]
    while any(s.stop_reason is None for s in running):
        engine.step([s for s in running if s.stop_reason is None])
    assert [engine.finish(s).tokens for s in running] == plain
    assert [(0, 16)] in calls
    assert not [c for c in calls if {n for _, n in c} == {1, 16}]   # never one call over 16 tokens and 1


def test_every_sequence_is_rolled_back_on_its_own(engines, together):
    engine = engines(4)
    batched = together(engine, PROMPTS, stagger=1)
    rejected = [r.stats.n_drafted - r.stats.n_accepted for r in batched]
    assert all(n > 0 for n in rejected), "every sequence must have had drafts rejected"
    for prompt, result in zip(PROMPTS, batched):
        assert result.tokens == engine.generate(prompt, raw=True, speculative=False).tokens


def test_a_small_batch_holds_drafts_and_prompts_within_n_batch(engines, together):
    engine = engines(4, n_batch=24)           # four sequences of [last, 16 drafted] would need 68
    batched = together(engine, PROMPTS, stagger=1)
    for prompt, result in zip(PROMPTS, batched):
        assert result.tokens == engine.generate(prompt, raw=True, speculative=False).tokens


def test_a_slot_keeps_the_longest_shared_prefix_for_the_next_request(engines, together):
    engine = engines(2)
    first = engine.prompt_tokens(PROMPTS[0], raw=True)
    [done] = together(engine, [PROMPTS[0]])
    follow_up = engine.prompt_tokens(PROMPTS[0] + done.text + " and more", raw=True)
    assert engine.reusable(0, follow_up) >= len(first) and engine.reusable(1, follow_up) == 0
    sequence = engine.start(follow_up, slot=0, reuse=True, max_tokens=30)
    while sequence.stop_reason is None:
        engine.step([sequence])
    reused = engine.finish(sequence)
    assert reused.stats.n_cached_tokens >= len(first)
    fresh = engine.generate(follow_up, max_tokens=30, speculative=False)   # slot 0 again, from scratch
    assert reused.tokens == fresh.tokens


def test_slots_share_what_drafters_share_and_keep_the_rest_apart(engines):
    engine = engines(3)
    assert engine.prepare_drafters()                    # as a server does before it says it is ready
    chains = [engine.drafters.chain(slot=slot) for slot in range(3)]
    by_name = [{e.label: e.drafter for e in chain.entries} for chain in chains]
    mods = [d["ngram-mod"] for d in by_name]
    drafts = [d["draft-model"] for d in by_name]
    assert mods[0].pool is mods[1].pool is mods[2].pool                       # one pool, as in llama.cpp
    assert drafts[0].context is drafts[2].context and [d.seq for d in drafts] == [0, 1, 2]
    assert drafts[0].context.n_seq_max == 3
    third_party = [d["last-match"] for d in by_name]                          # a plugin knows nothing of slots
    assert len({id(d) for d in third_party}) == 3 and type(third_party[0]).__module__ == "third_party_drafter"


def test_the_lossless_check_replays_the_passes_a_request_shared(engines, together):
    import dataclasses

    from specframe.testing.lossless import _replay_chooses

    engine = engines(4)
    batched = together(engine, PROMPTS, stagger=1, traced=True)
    layouts = [p.layout for p in batched[1].passes]
    assert any(len(layout) == 4 for layout in layouts)                 # it shared passes with all three others
    for index in (0, 40, 119):                                          # the replay repeats the run's own choices
        assert _replay_chooses(engine, batched[1], index)
    plain = engine.generate(PROMPTS[1], raw=True, speculative=False, track_margins=True)
    index = max(range(5, 100), key=lambda i: plain.margins[i])        # where the target was sure
    wrong = (plain.tokens[index] + 1) % engine.vocab.n_tokens
    forged = dataclasses.replace(batched[1], tokens=plain.tokens[:index] + [wrong] + plain.tokens[index + 1:])
    assert "a real difference" in str(compare(plain, forged, engine))


def test_a_pass_over_several_sequences_holds_them_in_sequence_order(engines):
    """llama.cpp evaluates a batch over several sequences in parts over consecutive sequence ids, so a batch in
    slot order takes fewer parts than one in the order requests came."""
    from specframe.trace import Trace

    engine = engines(3)
    running = [engine.start(engine.prompt_tokens(prompt, raw=True), slot=slot, trace=Trace(), max_tokens=20)
               for slot, prompt in zip((2, 0, 1), PROMPTS)]
    while any(s.stop_reason is None for s in running):
        engine.step([s for s in running if s.stop_reason is None])
    layouts = [p.layout for s in running for p in engine.finish(s).passes]
    assert any(len(layout) == 3 for layout in layouts)
    assert all([seq for seq, *_ in layout] == sorted(seq for seq, *_ in layout) for layout in layouts)


def test_a_request_interrupted_inside_a_step_leaves_its_prefix_for_the_next(engines, monkeypatch):
    engine = engines(1)
    prompt = engine.prompt_tokens(PROMPTS[1], raw=True)
    verify, calls = engine._verify, []

    def interrupted(*args):   # Ctrl-C after the pass wrote [last, draft...] into memory, before verification
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return verify(*args)

    monkeypatch.setattr(engine, "_verify", interrupted)
    stopped = engine.generate(prompt, max_tokens=30)
    assert stopped.stop_reason == "interrupted" and stopped.tokens
    follow_up = engine.prompt_tokens(PROMPTS[1] + stopped.text + " and more", raw=True)
    assert engine.reusable(0, follow_up) >= len(prompt)
