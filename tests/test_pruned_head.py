"""A draft model cut to the vocabulary's first tokens (head = N): the same logits for those tokens, fed input
embeddings; drafts within them; made once and cached; the output stays the target's."""

import numpy as np
import pytest
from test_drafters import draft_model

from specframe.engine import Engine
from specframe.errors import SpecframeError
from specframe.llama import Context, Model
from specframe.pruned_head import InputEmbeddings, inputs_table, pruned_head
from specframe.testing.lossless import compare

HEAD = 450     # of the synthetic vocabulary's 548 tokens: common text tokenizes past it too


def test_a_cut_model_fed_input_embeddings_gives_its_sources_logits_for_the_kept_tokens(draft_path):
    cut = pruned_head(draft_path, HEAD)
    inputs = InputEmbeddings(inputs_table(cut))
    with Model(draft_path) as source, Model(cut) as model:
        tokens = source.vocab.tokenize("the quick brown fox jumps over the lazy dog")
        assert inputs.n_vocab == source.vocab.n_tokens and model.vocab.n_tokens == HEAD and tokens.max() >= HEAD
        with Context(source, n_ctx=256) as whole, Context(model, n_ctx=256) as kept:
            expected = whole.decode(tokens, 0, all_logits=True)[:, :HEAD].copy()
            got = kept.decode(inputs(tokens), 0, all_logits=True)
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
            expected = whole.decode(tokens[-1:], len(tokens))[0, :HEAD].copy()    # one more, incrementally
            np.testing.assert_allclose(kept.decode(inputs(tokens[-1:]), len(tokens))[0], expected, rtol=0, atol=1e-4)


def test_a_cut_model_is_made_once_and_cached_with_its_inputs_table(draft_path):
    made = pruned_head(draft_path, HEAD)
    stamp = made.stat().st_mtime_ns
    assert pruned_head(draft_path, HEAD) == made and made.stat().st_mtime_ns == stamp
    inputs_table(made).unlink()                  # a table deleted by hand: the model is made again
    assert pruned_head(draft_path, HEAD) == made and inputs_table(made).is_file()
    assert pruned_head(draft_path, HEAD - 1) != made
    assert not list(made.parent.glob(".*partial"))


def test_a_cut_draft_drafts_as_its_source_up_to_a_token_past_the_cut(target_model, draft_path):
    """Greedy and without p_min, the cut draft's tokens are its source's until the source's choice lies past the
    cut; then the cut proposes a kept token. Its memory follows the history incrementally, as the source's."""
    whole = draft_model(target_model, draft_path, p_min=0.0, n_max=6)
    cut = draft_model(target_model, draft_path, p_min=0.0, n_max=6, head=HEAD)
    rng = np.random.default_rng(0)
    history = list(target_model.vocab.tokenize("the quick brown fox"))
    past_the_cut = 0
    for _ in range(16):
        expected = whole.draft(np.array(history, dtype=np.int32), 6).tokens.tolist()
        got = cut.draft(np.array(history, dtype=np.int32), 6).tokens.tolist()
        same = next((i for i, token in enumerate(expected) if token >= HEAD), len(expected))
        past_the_cut += same < len(expected)
        assert got[:same] == expected[:same] and max(got) < HEAD
        keep = int(rng.integers(0, len(got) + 1))       # the target accepts a prefix, then its own token
        history += got[:keep] + [int(rng.integers(3, 540))]
    assert past_the_cut > 0
    assert cut.describe() == f"output cut to the first {HEAD} tokens"
    whole.close()
    cut.close()


@pytest.mark.parametrize("sampling", ["temperature = 0.0", "temperature = 0.8\nseed = 3"], ids=["greedy", "sampled"])
def test_a_cut_draft_model_drafts_and_the_output_is_the_targets(write_config, target_path, draft_path, sampling):
    config = write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 512
        [sampling]
        {sampling}
        [speculative]
        adaptive = false
        [[drafter]]
        type = "draft-model"
        model = "{draft_path}"
        p_min = 0.2
        quantize = "q4_0"
        head = {HEAD}
        """)
    with Engine.from_config(config) as engine:
        spec = engine.generate("the quick brown fox", raw=True, max_tokens=60)
        stats = spec.stats.drafters["draft-model"]
        assert stats["note"] == f"re-quantized to q4_0; output cut to the first {HEAD} tokens"
        assert stats["accepted_tokens"] > 0
        if "0.0" in sampling:
            plain = engine.generate("the quick brown fox", raw=True, max_tokens=60, speculative=False,
                                    track_margins=True)
            assert compare(plain, spec).identical


@pytest.mark.parametrize("setting, problem", [
    ("head = 100000", "head: expected fewer than the 548 tokens of draft.gguf's vocabulary (0: the whole "
                      "vocabulary), got 100000"),
    ('head = 100\ntoken_mapping = "always"', "head: a cut output layer drafts the target's token ids"),
])
def test_a_cut_that_cannot_be_made_is_refused_in_one_line(write_config, target_path, draft_path, setting, problem):
    config = write_config(f"""
        [target]
        model = "{target_path}"
        [[drafter]]
        type = "draft-model"
        model = "{draft_path}"
        {setting}
        """)
    with pytest.raises(SpecframeError) as refused, Engine.from_config(config) as engine:
        engine.generate("the quick brown fox", raw=True, max_tokens=4)
    assert problem in str(refused.value) and "\n" not in str(refused.value)


def test_a_draft_of_another_vocabulary_cannot_be_cut(target_model, shuffled_draft_path):
    drafter = draft_model(target_model, shuffled_draft_path, head=HEAD)
    with pytest.raises(SpecframeError, match="cannot draft with a cut output layer .* set head = 0"):
        drafter.draft(np.array([1, 300, 301], dtype=np.int32), 4)
    drafter.close()
