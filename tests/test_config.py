"""Config files: valid ones load into frozen dataclasses; every mistake is one line naming file, key, expectation."""

import dataclasses
import pathlib
import re

import pytest

from specframe.config import load_config
from specframe.errors import ConfigError


def test_a_valid_config_loads_with_defaults_and_priority_order(write_config, target_path, draft_path):
    config = load_config(write_config(f"""
        [target]
        model = "{target_path}"
        [sampling]
        temperature = 1
        [[drafter]]
        type = "draft-model"
        model = "{draft_path}"
        [[drafter]]
        type = "ngram-simple"
        name = "short-ngrams"
        n = 3
        """))
    assert config.target.n_ctx == 4096 and config.sampling.temperature == 1.0
    assert isinstance(config.sampling.temperature, float)
    # draftless drafters go first unless [speculative] order says otherwise
    assert [d.name for d in config.ordered_drafters()] == ["short-ngrams", "draft-model"]
    assert [d.type for d in config.drafters] == ["draft-model", "ngram-simple"]
    assert config.drafters[1].drafter_type.plugin == "specframe.drafters.ngram_simple"
    assert config.drafters[1].params.n == 3 and config.drafters[1].params.m == 48
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.target.n_ctx = 1


def test_explicit_order_is_kept(write_config, target_path):
    config = load_config(write_config(f"""
        [target]
        model = "{target_path}"
        [speculative]
        order = ["b", "a"]
        [[drafter]]
        type = "prompt-lookup"
        name = "a"
        [[drafter]]
        type = "ngram-simple"
        name = "b"
        """))
    assert [d.name for d in config.ordered_drafters()] == ["b", "a"]


def test_relative_model_paths_are_read_from_the_config_folder(write_config, target_path, tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "t.gguf").write_bytes(target_path.read_bytes())
    config = load_config(write_config('[target]\nmodel = "models/t.gguf"\n'))
    assert config.target.model == "models/t.gguf" and config.directory == tmp_path


BAD = [
    ('[target]\nmodel = "{t}"\nn_ctx = "big"\n', "target.n_ctx: expected an integer in [16, 2147483647], got 'big'"),
    ('[target]\nmodel = "{t}"\nn_ctx = 8\n', "target.n_ctx: expected an integer in [16, 2147483647], got 8"),
    ('[target]\nmodel = "{t}"\ncontext = 8\n', "target.context: unknown key; expected one of: model, n_ctx"),
    ('[target]\nn_ctx = 512\n',
     "target.model: missing; expected a catalog model name, a Hugging Face reference or a GGUF path"),
    ('[target]\nmodel = "nope.gguf"\n', "target.model: model file 'nope.gguf' not found"),
    ('[target]\nmodel = "{t}"\n[sampling]\ntop_p = 1.5\n', "sampling.top_p: expected a number in [0.0, 1.0], got 1.5"),
    ('[target]\nmodel = "{t}"\n[speculative]\nenabled = "yes"\n', "speculative.enabled: expected true or false"),
    ('[target]\nmodel = "{t}"\n[tagret]\nx = 1\n', "tagret: unknown section; expected one of"),
    ('[target]\nmodel = "{t}"\n[[drafter]]\ntype = "eagle"\n',
     "drafter[0].type: unknown drafter type 'eagle'; known types: copy-cursor, draft-model, grammar, ngram-cache, "
     "ngram-map-k, ngram-map-k4v, ngram-mod, ngram-simple, prompt-lookup, suffix"),
    ('[target]\nmodel = "{t}"\n[[drafter]]\nn = 3\n', "drafter[0].type: missing; expected one of"),
    ('[target]\nmodel = "{t}"\n[[drafter]]\ntype = "ngram-simple"\nn = 0\n',
     "drafter[0] (type 'ngram-simple').n: expected an integer in [1, 256], got 0"),
    ('[target]\nmodel = "{t}"\n[[drafter]]\ntype = "ngram-simple"\nsize = 3\n',
     "drafter[0] (type 'ngram-simple').size: unknown key; expected one of: n, m"),
    ('[target]\nmodel = "{t}"\n[[drafter]]\ntype = "draft-model"\n',
     "drafter[0] (type 'draft-model').model: missing; expected a string"),
    ('[target]\nmodel = "{t}"\n[[drafter]]\ntype = "draft-model"\nmodel = "missing.gguf"\n',
     "drafter[0] (type 'draft-model').model: model file 'missing.gguf' not found"),
    ('[target]\nmodel = "{t}"\n[[drafter]]\ntype = "prompt-lookup"\n[[drafter]]\ntype = "prompt-lookup"\n',
     "drafter[1].name: expected a non-empty name not used by another drafter, got 'prompt-lookup'"),
    ('[target]\nmodel = "{t}"\n[speculative]\norder = ["x"]\n[[drafter]]\ntype = "prompt-lookup"\n',
     "speculative.order[0]: 'x' names no [[drafter]]; expected one of prompt-lookup"),
    ('[target]\nmodel = "{t}"\n[plugins]\nmodules = ["no_such_module_x"]\n',
     "plugins.modules: cannot load plugin module 'no_such_module_x' (ModuleNotFoundError"),
    ('[target\nmodel = 1\n', "invalid TOML"),
    ('[target]\nmodel = "{t}"\n[[drafter]]\ntype = "draft-model"\nmodel = "{t}"\n[drafter.replace]\n"<|im_end|>" = 1\n',
     "drafter[0] (type 'draft-model').replace: expected a table of strings with non-empty keys, got {'<|im_end|>': 1}"),
    ('[target]\nmodel = "{t}"\n[[drafter]]\ntype = "draft-model"\nmodel = "{t}"\ntoken_mapping = "yes"\n',
     "drafter[0] (type 'draft-model').token_mapping: expected a string (one of 'auto', 'always', 'never'), got 'yes'"),
    ('[target]\nmodel = "{t}"\ncpu_tiled_matmul = "yes"\n',
     "target.cpu_tiled_matmul: expected a string (one of 'auto', 'on', 'off'), got 'yes'"),
    ('[target]\nmodel = "{t}"\n[speculative]\nacceptance = "greedy"\n',
     "speculative.acceptance: expected a string (one of 'rejection', 'match'), got 'greedy'"),
]


@pytest.mark.parametrize("text,message", BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_mistakes_are_reported_in_one_line_with_file_key_and_expectation(write_config, target_path, text, message):
    path = write_config(text.replace("{t}", str(target_path)))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    error = str(info.value)
    assert "\n" not in error
    assert error.startswith(str(path))
    assert message in error


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.toml")


REPO = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted(REPO.glob("examples/*.toml")) + [REPO / "config.example.toml"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_config_loads(path):
    """The examples are configs users copy: each must validate (catalog models are named, not fetched)."""
    config = load_config(path)
    named = re.findall(r'^type = "([\w-]+)"', path.read_text(), re.M)
    assert named and [d.type for d in config.drafters] == named
