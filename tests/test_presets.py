"""Presets: a named target and draft model that run and serve start from with one word (--preset NAME).

The presets that ship name real models (from the catalog or Hugging Face), which tests do not run: they are
checked to expand into the config they promise. The --preset option itself runs on a preset of synthetic models.
"""

import json

import pytest
from click.testing import CliRunner

from specframe.cli import main
from specframe.config import load_config
from specframe.errors import ModelError
from specframe.models import PRESETS, Preset, preset_path

DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m"


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("name, target, draft, settings", [
    ("qwen-coder-1.5b-spec", "qwen2.5-coder-1.5b-instruct-q4_k_m", DRAFT, {"quantize": "q4_0"}),
    ("qwen-coder-7b-spec", "hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M", DRAFT, {}),
    ("qwen-coder-14b-spec", "hf:Qwen/Qwen2.5-Coder-14B-Instruct-GGUF:Q4_K_M", DRAFT, {}),
    ("fim-qwen-7b-spec", "hf:ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF:Q8_0",
     "hf:ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF:Q8_0", {}),
    ("fim-qwen-14b-spec", "hf:ggml-org/Qwen2.5-Coder-14B-Q8_0-GGUF:Q8_0",
     "hf:ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF:Q8_0", {}),
    ("fim-qwen-1.5b-spec", "qwen2.5-coder-1.5b-instruct-q4_k_m", DRAFT, {"quantize": "q4_0"}),
])
def test_each_preset_expands_into_its_target_and_draft_model(name, target, draft, settings):
    config = load_config(preset_path(name))
    assert config.target.model == target
    (drafter,) = [d for d in config.drafters if d.type == "draft-model"]
    assert drafter.params.model == draft
    assert {key: getattr(drafter.params, key) for key in settings} == settings
    assert PRESETS[name].models == (target, draft) and PRESETS[name].description


@pytest.mark.parametrize("name", ["fim-qwen-1.5b-spec", "fim-qwen-7b-spec", "fim-qwen-14b-spec"])
def test_fim_presets_keep_llama_cpps_batch_port_and_cache_reuse(name):
    config = load_config(preset_path(name))
    assert config.target.n_batch == 1024 and config.server.port == 8012 and config.server.cache_reuse == 256


def test_an_unknown_preset_lists_the_known_ones():
    with pytest.raises(ModelError,
                       match=r"^unknown preset 'qwen'; presets: fim-qwen-1.5b-spec, .*qwen-coder-1.5b-spec"):
        preset_path("qwen")
    result = run("run", "--preset", "qwen", "-p", "hi")
    assert result.exit_code == 1 and result.stderr.startswith("Error: unknown preset 'qwen'")
    both = run("run", "--preset", "qwen-coder-1.5b-spec", "--config", "x.toml", "-p", "hi")
    assert both.exit_code == 2 and "give --config FILE or --preset NAME, not both" in both.stderr


@pytest.fixture
def tiny_preset(monkeypatch, tmp_path, target_path, draft_path):
    """A preset of the synthetic models, shipped as the real ones are: a config file with a comment first."""
    path = tmp_path / "tiny-spec.toml"
    path.write_text(f'# synthetic target and draft\n[target]\nmodel = "{target_path}"\nn_ctx = 512\n'
                    f'[speculative]\nadaptive = false\n'
                    f'[[drafter]]\ntype = "draft-model"\nmodel = "{draft_path}"\np_min = 0.2\n')
    monkeypatch.setitem(PRESETS, "tiny-spec", Preset("tiny-spec", path))
    return path


def test_run_starts_from_a_preset(tiny_preset):
    result = run("run", "--preset", "tiny-spec", "-p", "the quick brown fox", "--raw", "-n", "12", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert len(data["tokens"]) == 12 and data["stats"]["drafters"]["draft-model"]["drafts"] > 0


def test_serve_starts_from_a_preset(tiny_preset, monkeypatch):
    import specframe.serve.server

    served = []
    monkeypatch.setattr(specframe.serve.server, "serve", lambda config, **options: served.append(config))
    assert run("serve", "--preset", "tiny-spec").exit_code == 0
    assert served[0].path == tiny_preset and served[0].drafters[0].type == "draft-model"


def test_models_presets_says_which_need_the_network(hf_repo):
    rows = {r["name"]: r for r in json.loads(run("models", "presets", "--json").stdout)}
    assert set(rows) == set(PRESETS)
    assert rows["fim-qwen-7b-spec"]["needs_network"] and not rows["fim-qwen-7b-spec"]["cached"]
    assert not rows["qwen-coder-1.5b-spec"]["needs_network"]     # catalog models: fetched from PyPI on first use
    hf_repo("ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF", {"qwen2.5-coder-7b-q8_0.gguf": b"GGUF"})
    hf_repo("ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF", {"qwen2.5-coder-0.5b-q8_0.gguf": b"GGUF"})
    lines = run("models", "presets").stdout.splitlines()
    line = next(line for line in lines if line.startswith("fim-qwen-7b-spec"))
    assert "cached" in line and "llama.cpp's --fim-qwen-7b-spec" in line
    assert any(line.startswith("fim-qwen-14b-spec") and "needs Hugging Face" in line for line in lines)
