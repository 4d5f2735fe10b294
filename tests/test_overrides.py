"""Overrides of the config from the command line (llama.cpp's flags, --set) and SPECFRAME_* variables: what each
sets, their precedence, their errors, and running without a config file, on the synthetic model."""

import json
import os

import pytest
from click.testing import CliRunner

from specframe.cli import main
from specframe.config import load_config
from specframe.errors import SpecframeError
from specframe.overrides import Override, environment_overrides, parse_value

REPEATING = "one two three four one two three four one two three four one two"


@pytest.fixture
def config(write_config, target_path, draft_path):
    return write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 1024
        [speculative]
        order = ["draft", "prompt-lookup"]
        [[drafter]]
        type = "prompt-lookup"
        [[drafter]]
        name = "draft"
        type = "draft-model"
        model = "{draft_path}"
        """)


def cli(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env)


class _Loaded(SpecframeError):
    pass


@pytest.fixture
def loaded(monkeypatch):
    """``loaded(command, *args, env=...)``: the config that command would run with (its engine or server is not
    started)."""
    from specframe.engine import Engine

    seen = []

    def capture(config, *args, **kwargs):
        seen.append(config)
        raise _Loaded("loaded")

    monkeypatch.setattr(Engine, "__init__", lambda self, config, *a, **k: capture(config))
    monkeypatch.setattr("specframe.serve.server.serve", capture)

    def load(*args, env=None):
        result = cli(*args, env=env)
        assert seen, result.output
        return seen.pop()

    return load


def draft_model(config):
    return next(d for d in config.drafters if d.type == "draft-model")


@pytest.mark.parametrize("flag,value,read", [
    ("-c", "2048", lambda c: c.target.n_ctx),
    ("-t", "3", lambda c: c.target.threads),
    ("-ngl", "2", lambda c: c.target.n_gpu_layers),
    ("--draft-max", "8", lambda c: c.speculative.n_max),
    ("--draft-min", "2", lambda c: c.speculative.n_min),
    ("--draft-p-min", "0.5", lambda c: draft_model(c).params.p_min),
    ("-n", "8", lambda c: c.generation.max_tokens),
    ("--temp", "0.7", lambda c: c.sampling.temperature),
    ("-s", "5", lambda c: c.sampling.seed),
    ("--top-k", "7", lambda c: c.sampling.top_k),
    ("--top-p", "0.8", lambda c: c.sampling.top_p),
    ("--min-p", "0.1", lambda c: c.sampling.min_p),
    ("--repeat-penalty", "1.1", lambda c: c.sampling.repeat_penalty),
    ("--repeat-last-n", "-1", lambda c: c.sampling.repeat_last_n),
    ("--presence-penalty", "0.5", lambda c: c.sampling.presence_penalty),
    ("--frequency-penalty", "-0.5", lambda c: c.sampling.frequency_penalty),
])
def test_each_flag_sets_its_config_key(loaded, config, flag, value, read):
    assert read(loaded("run", "--config", str(config), "-p", "hi", flag, value)) == parse_value(value)


def test_a_logit_bias_is_set_as_a_toml_table(loaded, config):
    read = loaded("run", "--config", str(config), "-p", "hi", "--set", 'sampling.logit_bias={"15" = -100}')
    assert read.sampling.logit_bias == {"15": -100.0}


@pytest.mark.parametrize("command", [["run", "-p", "hi"], ["chat"], ["serve"]])
def test_l_flags_make_one_logit_bias_table_as_llama_cpp_writes_them(loaded, config, command):
    read = loaded(*command, "--config", str(config), "-l", "15+1.5", "--logit-bias", "7-inf", "-l", "3 - 2")
    assert read.sampling.logit_bias == {"15": 1.5, "7": -100.0, "3": -2.0}


def test_an_l_flag_replaces_the_files_logit_bias(loaded, write_config, target_path):
    config = write_config(f"""
        [target]
        model = "{target_path}"
        [sampling]
        logit_bias = {{"15" = -100}}
        """)
    assert loaded("run", "--config", str(config), "-p", "hi", "-l", "9+2").sampling.logit_bias == {"9": 2.0}


def test_short_flags_of_one_and_several_letters_parse_together(loaded, config):
    loaded_config = loaded("run", "--config", str(config), "-p", "hi", "-n", "8", "-ngl", "2", "-c", "512", "-t", "1")
    assert (loaded_config.generation.max_tokens, loaded_config.target.n_gpu_layers) == (8, 2)
    assert (loaded_config.target.n_ctx, loaded_config.target.threads) == (512, 1)


def test_model_flags_set_the_target_and_the_draft_model(loaded, config, draft_path, target_path, tmp_path,
                                                        monkeypatch):
    monkeypatch.chdir(draft_path.parent)      # a model path on the command line is relative to the current folder
    swapped = loaded("run", "--config", str(config), "-p", "hi", "-m", draft_path.name, "-md", target_path.name)
    assert swapped.target.model == str(draft_path) and draft_model(swapped).params.model == str(target_path)
    assert draft_model(swapped).name == "draft" and len(swapped.drafters) == 2   # the file's draft model, its model set
    alone = loaded("run", "-m", target_path.name, "-md", draft_path.name, "--draft-p-min", "0.3", "-p", "hi")
    assert [d.type for d in alone.drafters] == ["draft-model"]                   # added where there was none
    assert draft_model(alone).params.model == str(draft_path) and draft_model(alone).params.p_min == 0.3


def test_ngld_sets_the_draft_models_gpu_layers(loaded, config):
    chosen = loaded("run", "--config", str(config), "-p", "hi", "-ngld", "3", "-ngl", "2")
    draft = next(d for d in chosen.drafters if d.type == "draft-model")
    assert draft.params.n_gpu_layers == 3 and chosen.target.n_gpu_layers == 2


def test_spec_type_replaces_the_drafters_with_defaults(loaded, config):
    chosen = loaded("run", "--config", str(config), "-p", "hi", "--spec-type", "ngram-simple,ngram-mod")
    assert [(d.name, d.type) for d in chosen.drafters] == [("ngram-simple", "ngram-simple"), ("ngram-mod", "ngram-mod")]
    assert chosen.drafters[0].params == chosen.drafters[0].drafter_type.cls.Params()
    assert chosen.speculative.order == []      # the file's order named the drafters it replaced


def test_set_takes_toml_values_and_bare_words(loaded, config):
    chosen = loaded("run", "--config", str(config), "-p", "hi",
                    "--set", "sampling.temperature=0.7", "--set", "speculative.adaptive=false",
                    "--set", 'generation.stop=["END", "\\n\\n"]', "--set", "generation.system=be brief",
                    "--set", 'server.model_name="7"', "--set", "drafter.prompt-lookup.max_ngram=3",
                    "--set", "drafter.draft.n_max=4", "--set", "drafter.draft-model.n_min=1")
    assert chosen.sampling.temperature == 0.7 and chosen.speculative.adaptive is False
    assert chosen.generation.stop == ["END", "\n\n"] and chosen.generation.system == "be brief"
    assert chosen.server.model_name == "7"
    assert chosen.drafters[0].params.max_ngram == 3
    assert (draft_model(chosen).params.n_max, draft_model(chosen).params.n_min) == (4, 1)   # by name, by type


def test_a_flag_beats_a_variable_which_beats_the_file(loaded, config):
    def n_ctx(*flags, env=None):
        return loaded("run", "--config", str(config), "-p", "hi", *flags, env=env).target.n_ctx

    env = {"SPECFRAME_TARGET__N_CTX": "2048"}
    assert n_ctx() == 1024
    assert n_ctx(env=env) == 2048
    assert n_ctx("-c", "512", env=env) == 512
    assert n_ctx("--set", "target.n_ctx=256", env=env) == 256
    assert n_ctx("-c", "512", "--set", "target.n_ctx=256") == 256            # --set comes after the short flags
    drafter_env = {"SPECFRAME_DRAFTER__PROMPT_LOOKUP__MAX_NGRAM": "3", "SPECFRAME_DRAFTER__DRAFT__P_MIN": "0.25"}
    varied = loaded("run", "--config", str(config), "-p", "hi", "--draft-p-min", "0.5", env=drafter_env)
    assert varied.drafters[0].params.max_ngram == 3 and draft_model(varied).params.p_min == 0.5
    replaced = loaded("run", "--config", str(config), "-p", "hi", "--spec-type", "prompt-lookup",
                      env={"SPECFRAME_DRAFTER__PROMPT_LOOKUP__MAX_NGRAM": "3"})
    assert replaced.drafters[0].params.max_ngram == 3      # variables address the drafters the flags made


def test_variables_are_read_by_their_scheme():
    environ = {"SPECFRAME_TARGET__N_CTX": "2048", "SPECFRAME_DRAFTER__NGRAM_SIMPLE__N": "8",
               "SPECFRAME_CACHE": "/elsewhere", "SPECFRAME_MODEL_SOURCE": "pypi", "OTHER__X": "1"}
    assert environment_overrides(environ) == [
        Override("drafter.ngram_simple.n", 8, "SPECFRAME_DRAFTER__NGRAM_SIMPLE__N=8"),
        Override("target.n_ctx", 2048, "SPECFRAME_TARGET__N_CTX=2048")]


def test_set_on_a_drafter_parameter_changes_what_it_drafts(target_path):
    def drafts(*sets):
        result = cli("run", "-m", str(target_path), "--spec-type", "ngram-simple", "-p", REPEATING, "--raw", "-n", "16",
                     "-t", "1", "--json", "--set", "speculative.adaptive=false", *sets)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["stats"]["drafters"]["ngram-simple"]["drafts"]

    assert drafts() == 0   # n = 12 and m = 48 want a longer history
    assert drafts("--set", "drafter.ngram-simple.n=1", "--set", "drafter.ngram-simple.m=4") > 0


def test_run_needs_no_config_file_with_a_model(target_path, monkeypatch):
    monkeypatch.chdir(target_path.parent)
    result = cli("run", "-m", target_path.name, "--spec-type", "ngram-simple", "-p", REPEATING, "--raw", "-n", "6",
                 "-t", "1", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["tokens"]) == 6 and list(data["stats"]["drafters"]) == ["ngram-simple"]
    assert load_config(None, overrides=[Override("target.model", target_path.name, "-m")]).directory == \
        target_path.parent


def test_serve_takes_the_same_flags(loaded, target_path):
    served = loaded("serve", "-m", str(target_path), "--port", "0", "--slots", "2", "-c", "512", "-n", "7",
                    "--spec-type", "ngram-mod", env={"SPECFRAME_SERVER__API_KEY": "k"})
    assert (served.server.port, served.server.slots, served.server.api_key) == (0, 2, "k")
    assert (served.target.n_ctx, served.generation.max_tokens, served.drafters[0].type) == (512, 7, "ngram-mod")


def test_bench_runs_its_strategies_with_the_overrides(target_path, tmp_path):
    out = tmp_path / "bench.json"
    result = cli("bench", "-m", str(target_path), "--spec-type", "ngram-simple", "-t", "1", "-w", "code-generation",
                 "-n", "8", "--set", "drafter.ngram-simple.n=2", "--json", str(out))
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["rows"]
    assert {row["strategy"] for row in rows} == {"plain", "ngram-simple", "oracle"}


def test_a_config_reloads_with_its_overrides(config):
    overrides = [Override("target.n_ctx", 512, "-c 512"), Override("drafter.draft.p_min", 0.5, "--draft-p-min 0.5")]
    first = load_config(config, overrides=overrides)
    assert load_config(first.path, overrides=first.overrides) == first


@pytest.mark.parametrize("args,env,message", [
    (["--set", "target.n_ctx=abc"], {},
     "--set target.n_ctx=abc: target.n_ctx: expected an integer in [16, 2147483647], got 'abc'"),
    (["--set", "target.n_ctx"], {}, "--set target.n_ctx: expected section.key=value (or drafter.NAME.key=value)"),
    (["--set", "targets.n_ctx=1"], {}, "--set targets.n_ctx=1: unknown setting 'targets.n_ctx'; expected one of "),
    (["--set", "target.nctx=1"], {}, "--set target.nctx=1: target.nctx: unknown key; expected one of: model, "),
    (["--set", "drafter.nope.n=1"], {},
     "--set drafter.nope.n=1: no [[drafter]] named 'nope'; expected one of: prompt-lookup, draft"),
    (["--set", "drafter.prompt-lookup.max_ngram=0"], {},
     "--set drafter.prompt-lookup.max_ngram=0: drafter[0] (type 'prompt-lookup').max_ngram: expected an integer in"),
    (["--spec-type", "ngram-simple,bogus"], {},
     "--spec-type ngram-simple,bogus: drafter[1].type: unknown drafter type 'bogus'; known types: "),
    (["--spec-type", "draft-model"], {}, "--spec-type draft-model: drafter[0] (type 'draft-model').model: missing"),
    (["-md", "nowhere.gguf"], {}, "-md nowhere.gguf: drafter[1] (type 'draft-model').model: model file "
                                  "'nowhere.gguf' not found (relative paths are from the current directory)"),
    (["-c", "8"], {}, "-c 8: target.n_ctx: expected an integer in [16, "),
    (["-l", "15"], {}, "-l 15: expected TOKEN_ID+BIAS or TOKEN_ID-BIAS, e.g. 15043+1 or 15043-inf"),
    (["-l", "1+2", "-l", "15+101"], {}, "-l 1+2 -l 15+101: sampling.logit_bias"),
    ([], {"SPECFRAME_TARGET__N_CTX": "0"}, "SPECFRAME_TARGET__N_CTX=0: target.n_ctx: expected an integer in [16, "),
    ([], {"SPECFRAME_TARGETS__N_CTX": "1"}, "SPECFRAME_TARGETS__N_CTX=1: unknown setting 'targets.n_ctx'"),
    ([], {"SPECFRAME_TARGET__N__CTX": "1"},
     "SPECFRAME_TARGET__N__CTX=1: expected SPECFRAME_SECTION__KEY or SPECFRAME_DRAFTER__NAME__KEY"),
])
def test_bad_overrides_are_one_line_naming_the_flag_or_variable(config, args, env, message):
    result = cli("run", "--config", str(config), "-p", "hi", *args, env=env)
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: " + message), result.stderr


def test_without_a_config_file_or_a_model_and_with_c_given_a_file(config):
    missing = cli("run", "-p", "hi")
    assert missing.exit_code == 2
    assert "give a config file (--config FILE) or a target model (-m MODEL)" in missing.stderr
    old = cli("run", "-c", str(config), "-p", "hi")
    assert old.exit_code == 2 and f"-c is the context size (as in llama.cpp); give the config file with --config " \
                                  f"{config}" in old.stderr
    assert os.path.isfile(config)
