"""ggml's tiled K-quant matmul switch (specframe.llama.kernels): chosen once per process, before any pass, and part
of what stored timings are keyed by. That it reaches ggml is shown on a real model (test_real_models.py). And what
a user is told of the kernels a model's weights run on (AMX builds: test_build_llama.py)."""

import logging
import os

import pytest

from specframe.llama import kernels

AVX2 = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | LLAMAFILE = 1 | REPACK = 1 | "
AVX512 = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | LLAMAFILE = 1 | "
ARM = "CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | DOTPROD = 1 | REPACK = 1 | "


@pytest.fixture
def fresh_process(monkeypatch):
    """The switch as in a process that has not chosen yet, with a build whose features the test names."""
    monkeypatch.setattr(kernels, "_chosen", None)
    monkeypatch.delenv(kernels.TILED_MATMUL_VARIABLE, raising=False)

    def build(features: str) -> None:
        monkeypatch.setattr(kernels, "system_info", lambda: features)
    return build


@pytest.mark.parametrize("features, variable, setting, on, variable_after", [
    (AVX2, None, "auto", False, "0"),       # measured slower with AVX2 kernels: off
    (AVX512, None, "auto", True, None),     # ggml's default elsewhere, left to ggml
    (ARM, None, "auto", True, None),        # no tiled kernels there
    (AVX2, "1", "auto", True, "1"),         # the user's environment stands under auto
    (AVX512, "0", "auto", False, "0"),
    (AVX2, None, "on", True, "1"),          # the config's explicit choice over both
    (AVX512, None, "off", False, "0"),
    (AVX2, "0", "on", True, "1"),
])
def test_the_first_choice_sets_the_variable_ggml_reads(fresh_process, monkeypatch, features, variable, setting, on,
                                                       variable_after):
    fresh_process(features)
    if variable is not None:
        monkeypatch.setenv(kernels.TILED_MATMUL_VARIABLE, variable)
    assert kernels.choose_tiled_matmul(setting) is on
    assert kernels.tiled_matmul_on() is on
    assert os.environ.get(kernels.TILED_MATMUL_VARIABLE) == variable_after


def test_a_later_engine_cannot_change_the_process_choice(fresh_process, caplog):
    fresh_process(AVX2)
    assert kernels.choose_tiled_matmul("off") is False
    with caplog.at_level(logging.WARNING, logger="specframe.llama"):
        assert kernels.choose_tiled_matmul("on") is False
        assert kernels.choose_tiled_matmul("auto") is False
        assert kernels.choose_tiled_matmul("off") is False
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and 'cpu_tiled_matmul = "on" cannot take effect' in warnings[0]
    assert "GGML_CPU_TILED_MM" in warnings[0]


@pytest.mark.parametrize("value, on", [("1", True), (" 2", True), ("0", False), ("", False), ("yes", False),
                                       ("-1", True), ("1x", True)])
def test_an_unchosen_switch_reads_the_environment_as_ggml_does(fresh_process, monkeypatch, value, on):
    """ggml takes atoi() of the variable: anything without a leading non-zero number turns the kernels off."""
    monkeypatch.setenv(kernels.TILED_MATMUL_VARIABLE, value)
    assert kernels.tiled_matmul_on() is on


def test_stored_timings_are_keyed_by_the_choice(fresh_process, monkeypatch):
    fresh_process(AVX512)
    on = kernels.timing_identity()
    monkeypatch.setenv(kernels.TILED_MATMUL_VARIABLE, "0")
    off = kernels.timing_identity()
    assert on != off and on.endswith("tiled_matmul=on") and off.endswith("tiled_matmul=off")


def test_this_build_reports_its_cpu_features():
    assert "CPU :" in kernels.system_info()


def test_a_report_names_the_kernels_of_both_sides(fresh_process):
    fresh_process(AVX2)
    kernels.choose_tiled_matmul("auto")
    assert kernels.kernels_beside({}) == ("ggml's tiled K-quant matmul off in specframe, GGML_CPU_TILED_MM unset "
                                          "(ggml's default: on) for llama.cpp's tools")
    assert kernels.kernels_beside({"GGML_CPU_TILED_MM": "0"}).endswith("GGML_CPU_TILED_MM=0 for llama.cpp's tools")


AMX_BUILD = AVX512 + "AMX_INT8 = 1 | "


@pytest.mark.parametrize("features, cpu_amx, buffers, says", [
    (AVX512, False, {"CPU_REPACK": 812.0, "CPU_Mapped": 120.5}, None),
    (AVX512, True, {"CPU_REPACK": 812.0}, "this CPU has AMX, this build has no AMX kernels: ./build_llama.sh --amx"),
    (AMX_BUILD, True, {"AMX": 700.0, "CPU_Mapped": 232.5}, "AMX kernels run (--amx build)"),
    (AMX_BUILD, True, {"CPU_Mapped": 932.5}, "AMX kernels built, but no weights went to them"),
    (AMX_BUILD, False, {"CPU_Mapped": 932.5}, "AMX kernels built, but this CPU has no amx_int8"),
])
def test_the_kernel_line_names_the_weights_buffers_and_what_amx_changes(fresh_process, monkeypatch, features,
                                                                         cpu_amx, buffers, says):
    fresh_process(features)
    monkeypatch.setattr(kernels, "cpu_has_amx", lambda: cpu_amx)
    line = kernels.describe_kernels(buffers)
    weights = "weights in " + ", ".join(f"{name} {mib:.1f} MiB" for name, mib in buffers.items())
    assert line == weights if says is None else line.startswith(f"{weights}; {says}")
    assert "\n" not in line


@pytest.mark.parametrize("use_mmap, buffer", [(True, "CPU_Mapped"), (False, "CPU")])
def test_a_model_knows_where_its_weights_went_whatever_logging_shows(tmp_path, caplog, use_mmap, buffer):
    """From llama.cpp's log of the load, read at any logging level (here: warnings only)."""
    import gguf

    from specframe.llama import Model, offload_devices
    from specframe.model_settings import ModelSettings
    from specframe.testing.synthetic import SyntheticShape, write_synthetic_model

    if offload_devices():
        pytest.skip("a GPU build puts weights in its GPU's buffers")
    path = write_synthetic_model(tmp_path / "q8.gguf", quantize=True, shape=SyntheticShape(n_embd=256, n_ff=512))
    tensors = gguf.GGUFReader(path).tensors
    mib = sum(int(t.n_bytes) for t in tensors) / 2**20
    caplog.set_level(logging.WARNING, logger="specframe.llama")
    with Model(path, ModelSettings(use_mmap=use_mmap, use_extra_bufts=False)) as model:
        buffers = model.weight_buffers
    assert list(buffers) == [buffer]
    assert abs(buffers[buffer] - mib) <= 0.005 + len(tensors) * 64 / 2**20    # logged to 0.01 MiB, plus alignment
    assert not any("model buffer size" in r.getMessage() for r in caplog.records)
