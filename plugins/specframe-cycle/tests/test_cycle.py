"""The tests a drafter plugin should have: its drafts on histories whose right draft is known, the protocol
checks of specframe.testing, and the plugin through specframe's engine on a tiny synthetic model."""

import textwrap

import numpy as np
import pytest
from specframe_cycle import CycleDrafter, CycleParams

from specframe.testing import assert_drafter_ok, fake_env, write_synthetic_model


def drafted(history, n_max=16, **params):
    drafter = CycleDrafter(CycleParams(**params), fake_env())
    drafter.begin(np.array(history[:1], dtype=np.int32))
    return drafter.draft(np.array(history, dtype=np.int32), n_max).tokens.tolist()


def test_drafts_the_repeated_block_again():
    assert drafted([9, 1, 2, 3, 1, 2, 3]) == [1, 2, 3, 1, 2, 3]          # twice the period at most
    assert drafted([9, 1, 2, 3, 1, 2, 3], n_max=4) == [1, 2, 3, 1]       # n_max caps it
    assert drafted([5, 7, 7]) == [7, 7]                                  # the shortest period first


def test_drafts_nothing_without_enough_repeats():
    assert drafted([1, 2, 3, 4, 1, 2, 3]) == []
    assert drafted([1, 2, 1, 2], min_repeats=3) == []
    assert drafted([1, 2, 1, 2, 1, 2], min_repeats=3) == [1, 2, 1, 2]
    assert drafted([1, 2, 3, 1, 2, 3], max_period=2) == []               # the block is longer than max_period


def test_passes_the_protocol_checks():
    assert_drafter_ok(CycleDrafter)
    assert_drafter_ok(CycleDrafter, CycleParams(max_period=64, min_repeats=4))


@pytest.fixture
def engine(tmp_path):
    from specframe.engine import Engine

    model = write_synthetic_model(tmp_path / "model.gguf", seed=0)
    config = tmp_path / "config.toml"
    config.write_text(textwrap.dedent(f"""
        [target]
        model = "{model}"
        n_ctx = 512
        [speculative]
        adaptive = false
        [generation]
        max_tokens = 120
        [[drafter]]
        type = "cycle"
    """))
    with Engine.from_config(config) as engine:
        yield engine


def test_speculation_with_the_plugin_leaves_the_output_unchanged(engine):
    """A random model falls into loops: the drafter's drafts are verified, and the output is plain decoding's."""
    prompt = "ab ab ab ab ab ab"
    plain = engine.generate(prompt, raw=True, speculative=False)
    spec = engine.generate(prompt, raw=True)
    assert spec.tokens == plain.tokens
    stats = spec.stats.drafters["cycle"]
    assert stats["accepted_tokens"] > 0 and "disabled" not in stats
