"""Hostile input ends in one clear line naming the file, key or value at fault: configs, options, plugins, files."""

import dataclasses
import json
import textwrap
import typing

import click
import numpy as np
import pytest
from click.testing import CliRunner

from specframe.cli import main
from specframe.config import load_config
from specframe.engine import Engine
from specframe.errors import ConfigError
from specframe.plugins import load_plugins


def run(*args):
    return CliRunner().invoke(main, list(args))


def one_line_error(result, *fragments):
    """The command failed with one error line that holds every fragment: alone on stderr, or (a usage error, exit
    code 2) after click's usage lines."""
    assert result.exit_code in (1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 or (result.exit_code == 2 and lines[0].startswith("Usage:")), result.stderr
    assert lines[-1].startswith("Error: ") and "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[-1]


@pytest.fixture
def config_with(write_config, target_path):
    """A config on the synthetic target with the given text appended to its [target] table."""

    def make(text: str = "", drafters: str = "") -> str:
        threads = "" if text.startswith("threads") else "threads = 1\n"   # one thread: the CPU is shared
        return str(write_config(f'[target]\nmodel = "{target_path}"\n{threads}' + textwrap.dedent(text)
                                + "\n" + textwrap.dedent(drafters)))

    return make


def config_error(path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


# --- numbers: bounds that C types, memory and time allow ---------------------------------------------------------

@pytest.mark.parametrize("key,value", [
    ("threads", 100000), ("threads", 2147483648), ("n_gpu_layers", 2147483648),
    ("n_ctx", 1099511627776), ("n_batch", 4294967296),
])
def test_target_integers_past_what_the_machine_or_c_types_allow_are_refused(config_with, key, value):
    message = config_error(config_with(f"{key} = {value}"))
    assert f"target.{key}: expected an integer in [" in message and f"got {value}" in message


def test_generation_max_tokens_past_int32_is_refused(config_with):
    message = config_error(config_with("[generation]\nmax_tokens = 10000000000000"))
    assert "generation.max_tokens: expected an integer in [1, 2147483647]" in message


def test_a_huge_max_tokens_through_the_api_runs_until_the_context_is_full(config_with):
    with Engine.from_config(config_with("n_ctx = 64\n[speculative]\nenabled = false")) as engine:
        result = engine.generate("the quick brown fox", raw=True, max_tokens=10**13)
        assert result.stop_reason == "context_full"
        assert result.n_prompt_tokens + len(result.tokens) == engine.context.n_ctx + 1


@pytest.mark.parametrize("key,value", [("temperature", "nan"), ("temperature", "inf"), ("top_p", "nan"),
                                       ("temperature", "1e308")])
def test_nan_and_infinity_are_refused_in_the_config(config_with, key, value):
    message = config_error(config_with(f"[sampling]\n{key} = {value}"))
    assert f"sampling.{key}: expected a number in [" in message


@pytest.mark.parametrize("option,value", [("--temp", "nan"), ("--temp", "inf"), ("--temp", "-1"),
                                          ("-n", "10000000000000"), ("-n", "0"), ("-s", "-1"), ("-t", "0.5")])
def test_nan_infinity_and_out_of_range_numbers_are_refused_on_the_command_line(config_with, option, value):
    result = run("run", "--config", config_with(), "-p", "hi", option, value)
    one_line_error(result, f"{option} {value}: ", f"got {value}")


def numeric_fields(cls):
    hints = typing.get_type_hints(cls)
    return [f for f in dataclasses.fields(cls) if hints[f.name] in (int, float)]


BUILTIN_TYPES = ["prompt-lookup", "copy-cursor", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
                 "ngram-cache", "suffix", "draft-model"]


@pytest.mark.parametrize("type_name", BUILTIN_TYPES)
def test_every_numeric_parameter_of_every_builtin_drafter_has_an_upper_bound_that_plugins_shows(type_name):
    drafter_type = load_plugins().drafter_types()[type_name]
    fields = numeric_fields(drafter_type.cls.Params)
    assert fields
    unbounded = [f.name for f in fields if f.metadata.get("max") is None]
    assert not unbounded, f"{type_name}: no upper bound on {unbounded}"
    listing = {p["name"]: p for p in drafter_type.describe()["parameters"]}
    shown = run("plugins").stdout
    for f in fields:
        assert listing[f.name]["max"] == f.metadata["max"]
        assert f"    {f.name}: {listing[f.name]['expects']}," in shown and f"{f.metadata['max']}]" in shown


def test_every_numeric_field_of_the_config_sections_has_an_upper_bound():
    from specframe.config import _SECTIONS

    unbounded = [f"{section}.{f.name}" for section, cls in _SECTIONS.items() for f in numeric_fields(cls)
                 if f.metadata.get("max") is None]
    assert not unbounded


def test_a_prompt_lookup_ngram_that_would_hang_is_refused_at_once(config_with):
    message = config_error(config_with(drafters='[[drafter]]\ntype = "prompt-lookup"\nmax_ngram = 1000000000\n'))
    assert "drafter[0] (type 'prompt-lookup').max_ngram: expected an integer in [1, 32]" in message


def test_drafts_longer_than_the_batch_are_a_config_error_naming_both_keys(config_with):
    small_batch = config_error(config_with("n_batch = 4", '[[drafter]]\ntype = "prompt-lookup"\n'))
    assert "speculative.n_max: 16 drafted tokens" in small_batch and "[target] n_batch = 4" in small_batch
    long_drafts = config_error(config_with("[speculative]\nn_max = 600", '[[drafter]]\ntype = "prompt-lookup"\n'))
    assert "speculative.n_max: 600" in long_drafts and "n_batch = 512" in long_drafts
    small_context = config_error(config_with("n_ctx = 16", '[[drafter]]\ntype = "prompt-lookup"\n'))
    assert "more than [target] n_ctx = 16 (a batch never holds more than the context)" in small_context
    load_config(config_with("n_batch = 17", '[[drafter]]\ntype = "prompt-lookup"\n'))        # 16 + 1 fit


def test_parameters_a_drafter_cannot_honour_are_config_errors(config_with, monkeypatch):
    huge_pool = config_error(config_with(drafters='[[drafter]]\ntype = "ngram-mod"\npool_size = 100000000000\n'))
    assert "drafter[0] (type 'ngram-mod').pool_size: expected an integer in [1024, " in huge_pool
    unreachable = config_error(config_with(drafters='[[drafter]]\ntype = "ngram-mod"\nn_min = 65\nn_max = 64\n'))
    assert "drafter[0] (type 'ngram-mod'): n_min = 65 can never be reached" in unreachable
    # Within the bounds but more than this machine has: a config error when the drafter is created, not a warning.
    path = config_with(drafters='[[drafter]]\ntype = "ngram-mod"\npool_size = 1073741824\n')

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("specframe.drafters.ngram_mod.np.full", no_memory)
    with Engine.from_config(path) as engine, pytest.raises(ConfigError) as info:
        engine.chain()
    assert str(info.value).startswith(f"{path}: drafter[0] (type 'ngram-mod').pool_size: 1073741824 slots need 4.0 GiB")


def test_a_logit_bias_that_names_no_token_is_a_config_error(config_with):
    not_an_id = config_error(config_with('[sampling]\nlogit_bias = { "the" = 1.0 }'))
    assert "sampling.logit_bias: key 'the': expected a token id" in not_an_id
    too_strong = config_error(config_with('[sampling]\nlogit_bias = { "3" = -1e9 }'))
    assert "sampling.logit_bias: token 3: expected a number in [-100, 100]" in too_strong
    with Engine.from_config(config_with()) as engine:
        n_vocab = engine.vocab.n_tokens
    path = config_with('[sampling]\nlogit_bias = { "99999999" = -100 }')
    with pytest.raises(ConfigError) as info:
        Engine.from_config(path)
    assert str(info.value) == (f"{path}: sampling.logit_bias: token 99999999 is not in the vocabulary (ids 0 to "
                               f"{n_vocab - 1})")


# --- text and paths -------------------------------------------------------------------------------------------------

def test_a_config_that_is_not_utf8_is_named_with_the_bad_byte(tmp_path, target_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(f'[target]\nmodel = "{target_path}"\n[generation]\nsystem = "caf\xe9"\n'.encode("latin-1"))
    message = config_error(path)
    assert "not UTF-8 text (byte 0xe9 at offset" in message


def test_a_binary_prompt_file_is_one_line(config_with, tmp_path):
    import sys

    noise = tmp_path / "noise.bin"
    noise.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    for path in (str(noise), sys.executable):
        one_line_error(run("run", "--config", config_with(), "-f", path), path, "not UTF-8 text")


def test_model_paths_that_cannot_be_files_are_one_line(config_with, tmp_path):
    long_name = config_error(_with_model(config_with, "m" * 5000 + ".gguf"))
    assert "target.model: model file 'mmm" in long_name and "file name too long" in long_name
    (tmp_path / "models.gguf").mkdir()
    directory = config_error(_with_model(config_with, "models.gguf"))
    assert "model file 'models.gguf' is a directory, not a file" in directory


def _with_model(config_with, model: str) -> str:
    path = config_with()
    text = open(path).read()
    start = text.index('model = "') + len('model = "')
    end = text.index('"', start)
    with open(path, "w") as f:
        f.write(text[:start] + model + text[end:])
    return path


def test_a_model_llama_cpp_cannot_load_is_one_line_naming_the_setting_without_its_log(config_with, tmp_path):
    import subprocess
    import sys

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    config = _with_model(config_with, str(broken))
    command = [sys.executable, "-m", "specframe.cli", "run", "--config", config, "-p", "hi"]
    quiet = subprocess.run(command, capture_output=True, text=True)
    assert quiet.returncode == 1 and quiet.stderr.count("\n") == 1, quiet.stderr     # a real process's stderr
    assert quiet.stderr.startswith(f"Error: {config}: target.model: llama.cpp could not load {broken}: not a GGUF")
    verbose = subprocess.run(command[:3] + ["-v"] + command[3:], capture_output=True, text=True)
    assert "failed to load model" in verbose.stderr                                   # llama.cpp's reason, on -v


# --- drafter tables and plugins ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ['["ngram-simple"]', '{ kind = "ngram-simple" }', "3"])
def test_a_drafter_type_that_is_not_a_string_is_named(config_with, value):
    message = config_error(config_with(drafters=f"[[drafter]]\ntype = {value}\n"))
    assert "drafter[0].type: unknown drafter type" in message and "known types:" in message


def test_empty_stop_strings_and_drafter_names_are_refused(config_with):
    stop = config_error(config_with('[generation]\nstop = ["", "x"]'))
    assert "generation.stop: expected a list of non-empty strings" in stop
    name = config_error(config_with(drafters='[[drafter]]\ntype = "prompt-lookup"\nname = ""\n'))
    assert "drafter[0].name: expected a non-empty name" in name


WRONG_HOOK = '''
from specframe import hookimpl

@hookimpl
def register_drafters(register, extra):
    pass
'''

EXITS = '''
import sys
sys.exit(0)
'''


@pytest.mark.parametrize("source,expected", [(WRONG_HOOK, "PluginValidationError"), (EXITS, "SystemExit: 0")])
def test_a_broken_config_plugin_is_a_config_error_naming_the_file(config_with, tmp_path, monkeypatch, source,
                                                                 expected):
    name = f"broken_{abs(hash(source))}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = config_with(f'[plugins]\nmodules = ["{name}"]')
    message = config_error(path)
    assert f"plugins.modules: cannot load plugin module '{name}' ({expected}" in message
    one_line_error(run("run", "--config", path, "-p", "hi"), "plugins.modules", expected)


def test_help_texts_cover_every_option():
    for command in (["models", "list"], ["ngram", "stats"], ["ngram", "merge"], ["ngram", "build"], ["run"],
                    ["bench"], ["plugins"]):
        context = main
        for name in command:
            context = context.commands[name]
        undocumented = [p.name for p in context.params if isinstance(p, click.Option) and not p.help]
        assert not undocumented, f"{' '.join(command)}: {undocumented}"


def test_plugins_json_lists_bounds():
    listing = {e["type"]: e for e in json.loads(run("plugins", "--json").stdout)}
    num_pred = next(p for p in listing["prompt-lookup"]["parameters"] if p["name"] == "num_pred")
    assert (num_pred["min"], num_pred["max"], num_pred["expects"]) == (1, 1024, "an integer in [1, 1024]")
