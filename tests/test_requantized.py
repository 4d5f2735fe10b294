"""Re-quantizing a draft model: made once through libllama's quantizer, cached, and the output stays the target's."""

import collections

import gguf

from specframe.engine import Engine
from specframe.llama.quantize import RECIPE
from specframe.requantized import requantized
from specframe.testing.lossless import compare


def tensor_types(path) -> collections.Counter:
    return collections.Counter(t.tensor_type.name for t in gguf.GGUFReader(path).tensors)


def tensor_type(path, name: str) -> str:
    (tensor,) = [t for t in gguf.GGUFReader(path).tensors if t.name == name]
    return tensor.tensor_type.name


def test_a_model_is_requantized_once_and_cached_by_its_hash(draft_path):
    made = requantized(draft_path, "q4_0")
    made.unlink()
    earlier = made.with_name(made.name.replace(f".r{RECIPE}.gguf", ".gguf"))   # the first recipe's name
    earlier.write_bytes(b"GGUF")
    made = requantized(draft_path, "q4_0")
    assert not earlier.exists()
    types = tensor_types(made)
    assert types["Q4_0"] > 0 and "F32" in tensor_types(draft_path)
    assert tensor_type(made, "output.weight") == "Q4_0" != tensor_type(draft_path, "output.weight")
    stamp = made.stat().st_mtime_ns
    assert requantized(draft_path, "q4_0") == made and made.stat().st_mtime_ns == stamp
    assert requantized(draft_path, "iq4_nl") != made
    assert not list(made.parent.glob("*.partial"))


def test_a_requantized_draft_model_drafts_and_the_output_is_the_targets(write_config, target_path, draft_path):
    config = write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 512
        [speculative]
        adaptive = false
        [[drafter]]
        type = "draft-model"
        model = "{draft_path}"
        p_min = 0.2
        quantize = "q4_0"
        threads_batch = 1
        """)
    with Engine.from_config(config) as engine:
        plain = engine.generate("the quick brown fox", raw=True, max_tokens=60, speculative=False,
                                track_margins=True)
        spec = engine.generate("the quick brown fox", raw=True, max_tokens=60)
        assert compare(plain, spec).identical
        stats = spec.stats.drafters["draft-model"]
        assert stats["note"] == "re-quantized to q4_0" and stats["accepted_tokens"] > 0
