"""A drafter cannot harm the others or the output: it sees the history read-only, and its faults set it aside."""

import sys
import textwrap

import pytest

from specframe.engine import Engine
from specframe.errors import ConfigError, SpecframeError
from specframe.ngram_counts import NgramCache

PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"

PLUGIN = '''
from dataclasses import dataclass
from specframe import NO_DRAFT, Drafter, hookimpl, param

@dataclass(frozen=True)
class Params:
    fault: str = param("write", choices=("write", "exit", "exit-at-start", "exit-at-save", "check"))

class Rogue(Drafter):
    name = "rogue"
    Params = Params

    @classmethod
    def check_params(cls, params, config_dir):
        if params.fault == "check":
            raise RuntimeError("a bug in the plugin")

    def __init__(self, params, env):
        super().__init__(params, env)
        if params.fault == "exit-at-start":
            raise SystemExit(3)

    def save(self):
        if self.params.fault == "exit-at-save":
            raise SystemExit(0)

    def draft(self, history, n_max):
        if self.params.fault == "write":
            history[-1] = 0          # would change the token the target is fed next, and what others index
            history[:-1] = 7
            return NO_DRAFT
        if self.params.fault == "exit":
            raise SystemExit(0)
        return NO_DRAFT

@hookimpl
def register_drafters(register):
    register(Rogue)
'''


@pytest.fixture
def engine_with(write_config, target_path, tmp_path, monkeypatch):
    (tmp_path / "rogue_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    engines = []

    def make(rogue: str | None, cache: str) -> Engine:
        rogue_table = f'[[drafter]]\ntype = "rogue"\nfault = "{rogue}"\n' if rogue else ""
        config = write_config(textwrap.dedent(f"""
            [target]
            model = "{target_path}"
            n_ctx = 512
            threads = 1
            [generation]
            max_tokens = 60
            [speculative]
            adaptive = false
            [plugins]
            modules = ["rogue_plugin"]
            """) + rogue_table + textwrap.dedent(f"""
            [[drafter]]
            type = "ngram-cache"
            dynamic = "{cache}"
            save_dynamic = true
            [[drafter]]
            type = "prompt-lookup"
            """), name=f"{cache}.toml")
        engines.append(Engine.from_config(config))
        return engines[-1]

    yield make
    for engine in engines:
        engine.close()
    sys.modules.pop("rogue_plugin", None)


def test_a_drafter_that_writes_into_the_history_is_set_aside_and_harms_nothing(engine_with, tmp_path):
    clean = engine_with(None, "clean.ngc")
    rogue = engine_with("write", "rogue.ngc")
    expected, result = clean.generate(PROMPT, raw=True), rogue.generate(PROMPT, raw=True)
    assert result.tokens == expected.tokens
    assert "read-only" in result.stats.drafters["rogue"]["disabled"]
    assert result.stats.drafters["prompt-lookup"]["accepted_tokens"] > 0
    clean.close()
    rogue.close()
    assert NgramCache.load(tmp_path / "rogue.ngc").table == NgramCache.load(tmp_path / "clean.ngc").table


def test_a_drafter_raising_system_exit_is_set_aside(engine_with):
    clean = engine_with(None, "clean.ngc")
    rogue = engine_with("exit", "rogue.ngc")
    result = rogue.generate(PROMPT, raw=True)
    assert result.tokens == clean.generate(PROMPT, raw=True).tokens
    assert "SystemExit" in result.stats.drafters["rogue"]["disabled"]


def test_a_drafter_exiting_when_created_is_left_out_and_one_exiting_at_save_fails_the_run(engine_with, caplog):
    started = engine_with("exit-at-start", "start.ngc")
    result = started.generate(PROMPT, raw=True)
    assert "rogue" not in result.stats.drafters and result.stats.n_accepted > 0
    assert any("'rogue'" in r.getMessage() and "SystemExit: 3" in r.getMessage() for r in caplog.records)
    saving = engine_with("exit-at-save", "save.ngc")
    saving.generate(PROMPT, raw=True)
    with pytest.raises(SpecframeError, match="drafter 'rogue' .* could not save what it learned: SystemExit: 0"):
        saving.close()


def test_a_plugin_whose_parameter_check_raises_is_a_config_error(engine_with):
    with pytest.raises(ConfigError, match=r"drafter\[0\] \(type 'rogue'\): the drafter's check_params raised "
                                          "RuntimeError: a bug in the plugin"):
        engine_with("check", "check.ngc")
