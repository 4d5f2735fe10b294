"""The hardware settings of a model ([target] and a draft-model table) reach libllama.

Where libllama reports a setting back, the test reads it there: llama_n_threads, llama_n_ubatch, or what libllama
logs as it loads a model or makes a context (the KV cache types, Flash Attention, the load mode, the tensors kept
on the CPU). GPU settings cannot be seen on a CPU-only build: those tests read the parameters our code hands to
llama_model_load_from_file (``model_params``, the one place that fills them).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import pathlib
import re

import numpy as np
import pytest

from specframe.calibration import Calibration
from specframe.config import load_config
from specframe.engine import Engine
from specframe.errors import ConfigError
from specframe.llama import Context, Model, native
from specframe.llama.context import context_params
from specframe.llama.model import expert_patterns, model_params
from specframe.model_settings import KV_CACHE_TYPES, ModelSettings
from specframe.testing.synthetic import SyntheticShape, write_synthetic_model

REPO = pathlib.Path(__file__).resolve().parents[1]
PROMPT = "the quick brown fox jumps over the lazy dog"
HEAD_32 = SyntheticShape(n_head=2, n_head_kv=1)   # quantized KV blocks hold 32 values: a head must be a multiple


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A target and a same-vocabulary draft whose heads quantized KV caches fit, and a mixture of experts."""
    folder = tmp_path_factory.mktemp("settings-models")
    return {"target": write_synthetic_model(folder / "target.gguf", shape=HEAD_32),
            "draft": write_synthetic_model(folder / "draft.gguf", shape=HEAD_32, noise=0.15, noise_seed=7),
            "moe": write_synthetic_model(folder / "moe.gguf", shape=SyntheticShape(n_expert=4))}


@pytest.fixture
def config_of(write_config, models):
    """A config on the synthetic target with ``target`` appended to [target] and ``rest`` after it."""

    def make(target: str = "", rest: str = "") -> pathlib.Path:
        return write_config(f'[target]\nmodel = "{models["target"]}"\nn_ctx = 256\nthreads = 1\n{target}\n{rest}')

    return make


def draft_table(models, keys: str = "") -> str:
    return f'[[drafter]]\ntype = "draft-model"\nmodel = "{models["draft"]}"\np_min = 0.0\n{keys}\n'


@pytest.fixture
def llama_log(caplog):
    """``llama_log(make)``: what libllama logged while ``make()`` ran (its debug lines included), and the result."""

    def capture(make):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="specframe.llama"):
            result = make()
        return caplog.text, result

    return capture


# --- threads, batch ---------------------------------------------------------------------------------------------

def test_threads_reach_the_target_and_the_draft_context(config_of, models):
    path = config_of("threads_batch = 2", draft_table(models, "threads = 2\nthreads_batch = 3"))
    with Engine.from_config(path) as engine:
        assert (engine.context.n_threads, engine.context.n_threads_batch) == (1, 2)
        engine.prepare_drafters()                                          # the draft model, loaded now
        draft = engine.drafters.chain().entries[0].drafter.context
        assert (draft.n_threads, draft.n_threads_batch) == (2, 3)


def test_a_draft_takes_the_targets_settings_it_leaves_out(config_of, models):
    config = load_config(config_of("threads_batch = 2\nn_gpu_layers = -1\ntype_k = \"q8_0\"",
                                   draft_table(models, "n_gpu_layers = 0")))
    draft = config.drafters[0].params
    assert (draft.threads, draft.threads_batch, draft.type_k, draft.n_gpu_layers) == (1, 2, "q8_0", 0)
    with Engine(config) as engine:
        engine.prepare_drafters()
        context = engine.drafters.chain().entries[0].drafter.context
        assert (context.n_threads, context.n_threads_batch) == (1, 2)


@pytest.mark.parametrize("n_ubatch,expected", [(0, 64), (8, 8), (64, 64), (1000, 64)])
def test_n_ubatch_reaches_libllama_and_never_exceeds_the_batch(models, n_ubatch, expected):
    with Model(models["target"], ModelSettings(threads=1, n_ubatch=n_ubatch)) as model, \
            Context(model, n_ctx=256, n_batch=64) as context:
        assert (context.n_batch, context.n_ubatch) == (64, expected)
        tokens = model.vocab.tokenize(PROMPT)     # in several physical batches when n_ubatch = 8
        assert len(tokens) > 8 and np.isfinite(context.decode(tokens, 0, all_logits=True)).all()


def test_n_max_at_the_batch_size_is_one_line_naming_both_keys(config_of, models):
    """Chosen: refuse (not clamp). The last token and n_max drafted ones are verified in one batch."""
    with pytest.raises(ConfigError) as info:
        load_config(config_of("n_batch = 16", "[speculative]\nn_max = 16\n" + draft_table(models)))
    message = str(info.value)
    assert "\n" not in message and "speculative.n_max: 16 drafted tokens" in message
    assert "[target] n_batch = 16" in message and "expected n_max <= 15" in message
    load_config(config_of("n_batch = 16", "[speculative]\nn_max = 15\n" + draft_table(models)))


# --- KV cache, Flash Attention ---------------------------------------------------------------------------------

@pytest.mark.parametrize("type_k,type_v", [(t, "f16") for t in KV_CACHE_TYPES] + [("f16", t) for t in KV_CACHE_TYPES])
def test_kv_cache_types_reach_libllama(models, llama_log, type_k, type_v):
    settings = ModelSettings(threads=1, type_k=type_k, type_v=type_v)
    _, lib = native()
    params = context_params(settings, n_ctx=64, n_batch=16, n_seq_max=1)
    assert (params.type_k, params.type_v) == (getattr(lib, f"GGML_TYPE_{type_k.upper()}"),
                                              getattr(lib, f"GGML_TYPE_{type_v.upper()}"))
    with Model(models["target"], settings) as model:
        log, context = llama_log(lambda: Context(model, n_ctx=64, n_batch=16))
        with context:
            assert re.search(rf"K \({type_k}\): .*, V \({type_v}\): ", log), log
            assert np.isfinite(context.decode(model.vocab.tokenize(PROMPT), 0)).all()


@pytest.mark.parametrize("flash_attn,reported", [("on", "enabled"), ("off", "disabled"), ("auto", "auto")])
def test_flash_attn_reaches_libllama(models, llama_log, flash_attn, reported):
    _, lib = native()
    settings = ModelSettings(threads=1, flash_attn=flash_attn)
    expected = {"on": lib.LLAMA_FLASH_ATTN_TYPE_ENABLED, "off": lib.LLAMA_FLASH_ATTN_TYPE_DISABLED,
                "auto": lib.LLAMA_FLASH_ATTN_TYPE_AUTO}[flash_attn]
    assert context_params(settings, n_ctx=64, n_batch=16, n_seq_max=1).flash_attn_type == expected
    with Model(models["target"], settings) as model:
        log, context = llama_log(lambda: Context(model, n_ctx=64, n_batch=16))
        context.close()
    assert re.search(rf"flash_attn += {reported}\b", log), log


def test_flash_attn_and_a_q8_0_kv_cache_keep_greedy_output(config_of, models):
    """Greedy tokens as with the default cache (f16, auto), plainly and with a draft model whose own KV cache
    is quantized: llama.cpp's recipe. On this model no position comes near a tie at these settings."""

    def tokens(target: str, rest: str = "[speculative]\nenabled = false\n") -> list[int]:
        with Engine.from_config(config_of(target, "[generation]\nmax_tokens = 48\n" + rest)) as engine:
            return engine.generate(PROMPT, raw=True).tokens

    baseline = tokens("")
    assert len(baseline) == 48
    for target in ['flash_attn = "on"', 'flash_attn = "off"', 'type_k = "q8_0"',
                   'type_k = "q8_0"\nflash_attn = "off"', 'type_k = "q8_0"\ntype_v = "q8_0"']:
        assert tokens(target) == baseline, target
    assert tokens("", draft_table(models, 'type_k = "q8_0"\ntype_v = "q8_0"')) == baseline


# --- loading -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("use_mmap,use_mlock,mode", [(True, False, "mmap"), (False, False, "none"),
                                                     (False, True, "mlock"), (True, True, "mmap\\+mlock")])
def test_use_mmap_and_use_mlock_reach_libllama_as_its_load_mode(models, llama_log, use_mmap, use_mlock, mode):
    log, model = llama_log(lambda: Model(models["target"], ModelSettings(use_mmap=use_mmap, use_mlock=use_mlock)))
    with model:
        assert re.search(rf"\(load_mode = {mode}\)", log), log


def test_use_extra_bufts_reaches_libllama(tmp_path, llama_log):
    """With it, libllama tries its repacked CPU layouts (CPU_REPACK) for the quantized weights; without, never."""
    path = write_synthetic_model(tmp_path / "q8.gguf", quantize=True)
    for extra, mentioned in [(True, True), (False, False)]:
        assert model_params(ModelSettings(use_extra_bufts=extra))[0].use_extra_bufts == extra
        log, model = llama_log(functools.partial(Model, path, ModelSettings(use_extra_bufts=extra)))
        model.close()
        assert ("CPU_REPACK" in log) == mentioned


# --- MoE experts on the CPU ----------------------------------------------------------------------------------------

def overridden(log: str) -> set[str]:
    return set(re.findall(r"tensor (\S+) \(.*\) buffer type overridden to CPU", log))


def experts(*layers: int) -> set[str]:
    return {f"blk.{i}.ffn_{kind}_exps.weight" for i in layers for kind in ("gate", "up", "down")}


@pytest.mark.parametrize("settings,layers", [(ModelSettings(cpu_moe=True), (0, 1)),
                                             (ModelSettings(n_cpu_moe=1), (0,)),
                                             (ModelSettings(n_cpu_moe=2), (0, 1)),
                                             (ModelSettings(), ())])
def test_cpu_moe_keeps_the_expert_weights_of_those_layers_on_the_cpu(models, llama_log, settings, layers):
    settings = dataclasses.replace(settings, threads=1)
    log, model = llama_log(lambda: Model(models["moe"], settings))
    with model, Context(model, n_ctx=64, n_batch=16) as context:
        assert overridden(log) == experts(*layers)
        logits = context.decode(model.vocab.tokenize(PROMPT), 0).copy()
    with Model(models["moe"], ModelSettings(threads=1)) as plain, Context(plain, n_ctx=64, n_batch=16) as context:
        assert int(np.argmax(logits)) == int(np.argmax(context.decode(plain.vocab.tokenize(PROMPT), 0)))


def test_the_overrides_array_is_cpu_buffers_ending_in_null_and_kept_with_the_model(models):
    ffi, lib = native()
    settings = ModelSettings(cpu_moe=True, n_cpu_moe=3)
    params, keep = model_params(settings)
    patterns = expert_patterns(settings)
    assert patterns == [r"\.ffn_(up|down|gate|gate_up)_(ch|)exps",
                        r"blk\.(0|1|2)\.ffn_(up|down|gate|gate_up)_(ch|)exps"]
    entries = params.tensor_buft_overrides
    assert [ffi.string(entries[i].pattern).decode() for i in range(2)] == patterns
    assert entries[0].buft == entries[1].buft == lib.ggml_backend_cpu_buffer_type()
    assert entries[2].pattern == ffi.NULL and entries[2].buft == ffi.NULL
    owned = {int(ffi.cast("uintptr_t", ffi.cast("void *", k))) for k in keep}
    pointers = [entries, entries[0].pattern, entries[1].pattern]
    assert {int(ffi.cast("uintptr_t", ffi.cast("void *", p))) for p in pointers} <= owned
    with Model(models["moe"], settings) as model:
        del params, keep
        gc.collect()
        kept = model._params_memory        # what libllama was handed stays alive with the model
        assert ffi.string(kept[-1][0].pattern).decode() == patterns[0]


def test_no_overrides_leave_libllamas_default():
    ffi, _ = native()
    params, keep = model_params(ModelSettings())
    assert params.tensor_buft_overrides == ffi.NULL and params.devices == ffi.NULL and not keep


# --- GPU ---------------------------------------------------------------------------------------------------------

def test_gpu_settings_reach_the_model_params():
    ffi, lib = native()
    settings = ModelSettings(n_gpu_layers=-1, main_gpu=1, split_mode="row", tensor_split=[3, 1.5])
    params, _ = model_params(settings)
    assert (params.n_gpu_layers, params.main_gpu, params.split_mode) == (-1, 1, lib.LLAMA_SPLIT_MODE_ROW)
    shares = [params.tensor_split[i] for i in range(lib.llama_max_devices())]
    assert shares == [3.0, 1.5] + [0.0] * (lib.llama_max_devices() - 2)
    for mode in ("none", "layer"):
        expected = getattr(lib, f"LLAMA_SPLIT_MODE_{mode.upper()}")
        assert model_params(ModelSettings(split_mode=mode))[0].split_mode == expected
    assert model_params(ModelSettings())[0].tensor_split == ffi.NULL   # empty: llama.cpp splits by free memory


def test_gpu_settings_load_and_generate_on_a_cpu_only_build(config_of, models):
    gpu = 'n_gpu_layers = -1\nsplit_mode = "none"\nmain_gpu = 0\ntensor_split = [1, 1]\ndevice = ["none"]'
    config = config_of(gpu, "[generation]\nmax_tokens = 8\n" + draft_table(models, "n_gpu_layers = 0"))
    with Engine.from_config(config) as engine:
        assert len(engine.generate(PROMPT, raw=True).tokens) == 8


def test_device_names_become_a_null_terminated_device_array(monkeypatch):
    """``["none"]`` is llama.cpp's --device none (no GPU at all); names are looked up in ggml's device registry
    (here the CPU device stands in for a GPU, which this build lacks)."""
    ffi, lib = native()
    params, _ = model_params(ModelSettings(device=["none"]))
    assert params.devices[0] == ffi.NULL
    cpu = lib.ggml_backend_dev_get(0)
    monkeypatch.setattr("specframe.llama.model._offload_devices", lambda: {"GPU7": cpu})
    params, _ = model_params(ModelSettings(device=["GPU7"]))
    assert params.devices[0] == cpu and params.devices[1] == ffi.NULL


@pytest.mark.parametrize("where", ["target", "draft"])
def test_an_unknown_device_is_one_line_naming_the_key_and_the_available_devices(config_of, models, where):
    device = 'device = ["CUDA7"]'
    path = config_of(device, draft_table(models)) if where == "target" else config_of("", draft_table(models, device))
    with pytest.raises(ConfigError) as info:
        with Engine.from_config(path) as engine:
            engine.drafters.chain()
    message = str(info.value)
    key = "target.device" if where == "target" else "drafter[0] (type 'draft-model').device"
    assert "\n" not in message and message.startswith(f"{path}: {key}: 'CUDA7' is not a GPU of this libllama build")
    assert "available: none (a CPU-only build)" in message and '"none" for the CPU alone' in message


# --- wrong values --------------------------------------------------------------------------------------------------

BAD = [
    ('type_k = "q3_k"', "type_k: expected a string (one of 'f16', 'f32', 'bf16', 'q8_0', 'q4_0'"),
    ('type_v = "q8_0"\nflash_attn = "off"', "type_v: a quantized V cache ('q8_0') needs Flash Attention"),
    ('flash_attn = "yes"', "flash_attn: expected a string (one of 'auto', 'on', 'off'), got 'yes'"),
    ('split_mode = "tensor"', "split_mode: expected a string (one of 'layer', 'none', 'row'), got 'tensor'"),
    ('tensor_split = ["a"]', "tensor_split: expected a list of numbers, got ['a']"),
    ("tensor_split = [-1]", "tensor_split: expected shares >= 0, got -1"),
    ("tensor_split = [nan]", "tensor_split: expected shares >= 0, got nan"),
    ("tensor_split = [" + ", ".join(["1"] * 17) + "]",
     "tensor_split: expected at most 16 shares (one per GPU), got 17"),
    ('device = ["none", "CUDA0"]', "device: \"none\" means no GPU and stands alone"),
    ('device = ["CUDA0", "CUDA0"]', "device: names a GPU twice"),
    ('device = "CUDA0"', "device: expected a list of non-empty strings, got 'CUDA0'"),
    ('device = ["CUDA0", "CUDA1"]\nsplit_mode = "none"\nmain_gpu = 2', "main_gpu: 2 is not an index into device"),
    ("main_gpu = 16", "main_gpu: expected an integer in [0, 15], got 16"),
    ("n_gpu_layers = -2", "n_gpu_layers: expected an integer in [-1, 2147483647], got -2"),
    ("n_ubatch = -1", "n_ubatch: expected an integer in [0, 2147483647], got -1"),
    ("n_cpu_moe = 5000", "n_cpu_moe: expected an integer in [0, 4096], got 5000"),
    ('cpu_moe = "yes"', "cpu_moe: expected true or false, got 'yes'"),
    ("use_mmap = 1", "use_mmap: expected true or false, got 1"),
    ("threads_batch = -1", "threads_batch: expected an integer in [0, "),
]


@pytest.mark.parametrize("where", ["target", "draft"])
@pytest.mark.parametrize("text,problem", BAD, ids=[b[0].split(" =")[0] + str(i) for i, b in enumerate(BAD)])
def test_a_bad_setting_is_one_line_naming_the_file_and_the_key(config_of, models, where, text, problem):
    path = config_of(text, draft_table(models)) if where == "target" else config_of("", draft_table(models, text))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    section = "target" if where == "target" else "drafter[0] (type 'draft-model')"
    assert "\n" not in message and message.startswith(f"{path}: {section}.{problem}"), message


def test_the_pass_cost_table_is_kept_per_setting(models):
    """Another KV type or Flash Attention changes what a pass costs: each has a table of its own."""
    keys = {Calibration.identity(models["target"], 1, 512, ModelSettings(**change))
            for change in ({}, {"type_k": "q8_0"}, {"flash_attn": "off"}, {"n_gpu_layers": -1})}
    assert len(keys) == 4


# --- where the keys are shown ----------------------------------------------------------------------------------

def test_every_setting_is_listed_by_plugins_and_in_the_reference():
    from click.testing import CliRunner

    from specframe.cli import main

    shown = CliRunner().invoke(main, ["plugins"]).stdout
    section = re.split(r"\n#{2,3} ", REPO.joinpath("docs", "reference.md").read_text().split("## Configuration\n",
                                                                                               1)[1])[0]
    for f in dataclasses.fields(ModelSettings):
        assert re.search(rf"^    {f.name}: .*, default: the target's - ", shown, re.M), f.name
        assert re.search(rf"\b{f.name}\b", section), f"docs/reference.md's configuration section lacks {f.name}"


@pytest.mark.parametrize("example", sorted(REPO.glob("examples/*.toml")), ids=lambda p: p.name)
def test_every_example_loads(example):
    load_config(example)
