"""A plugin's mistakes are caught when it loads, naming it; the drafter protocol hides nothing and old drafters
keep working. Each plugin here is a real module, loaded by the real loader."""

import logging
import sys

import numpy as np
import pytest

from specframe.drafting.chain import InvalidDraft, valid_draft
from specframe.engine import Engine
from specframe.errors import ConfigError
from specframe.plugins import load_plugins

PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"
BUILT_IN = ("prompt-lookup", "ngram-simple", "ngram-cache", "draft-model")


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# --- mistakes caught at load time ------------------------------------------------------------------------------

MISSPELT_HOOK = '''
from specframe import NO_DRAFT, Drafter, hookimpl

class Misspelt(Drafter):
    name = "misspelt"
    def draft(self, history, n_max):
        return NO_DRAFT

@hookimpl
def register_drafter(register):
    register(Misspelt)
'''


def test_a_misspelt_hook_in_a_config_module_is_a_config_error_naming_it(plugin_module):
    plugin_module("misspelt_plugin", MISSPELT_HOOK)
    with pytest.raises(ConfigError) as error:
        load_plugins(["misspelt_plugin"])
    assert str(error.value) == ("cannot load plugin module 'misspelt_plugin' (PluginValidationError: unknown hook "
                                "'register_drafter' (did you mean 'register_drafters'?))")


def test_a_misspelt_hook_in_an_installed_plugin_is_reported_and_skipped(installed_package, caplog):
    installed_package("misspelt-pkg", "misspelt_installed", MISSPELT_HOOK, entry_point="misspelt")
    plugins = load_plugins()
    types = plugins.drafter_types()
    assert "misspelt" not in types and plugins.manager.get_plugin("misspelt") is None
    assert all(name in types for name in BUILT_IN)
    assert ("plugin 'misspelt' from package misspelt-pkg failed to load and is skipped: PluginValidationError: "
            "unknown hook 'register_drafter' (did you mean 'register_drafters'?)") in warnings(caplog)


def test_a_plugin_without_the_hookimpl_marker_is_refused(plugin_module):
    plugin_module("unmarked_plugin", '''
        def register_drafters(register):
            pass
        ''')
    with pytest.raises(ConfigError, match="'unmarked_plugin' .*it defines no hook: mark register_drafters with "
                                          "@specframe.hookimpl"):
        load_plugins(["unmarked_plugin"])


BAD_SIGNATURES = '''
from specframe import NO_DRAFT, Drafter, hookimpl

class NoLength(Drafter):
    name = "no-length"
    def draft(self, history):
        return NO_DRAFT

class NoPrompt(Drafter):
    name = "no-prompt"
    def begin(self):
        pass
    def draft(self, history, n_max):
        return NO_DRAFT

class TwoCounts(Drafter):
    name = "two-counts"
    def draft(self, history, n_max):
        return NO_DRAFT
    def accept(self, n_accepted, n_drafted):
        pass

class Flexible(Drafter):
    name = "flexible"
    def begin(self, prompt, sampling=None, *rest):
        pass
    def draft(self, *args):
        return NO_DRAFT
    @staticmethod
    def accept(n_accepted):
        pass

@hookimpl
def register_drafters(register):
    for cls in (NoLength, NoPrompt, TwoCounts, Flexible):
        register(cls)
'''


def test_protocol_methods_the_chain_cannot_call_are_refused_at_registration(plugin_module, caplog):
    plugin_module("signatures_plugin", BAD_SIGNATURES)
    types = load_plugins(["signatures_plugin"]).drafter_types()
    assert "flexible" in types and all(name in types for name in BUILT_IN)
    assert not {"no-length", "no-prompt", "two-counts"} & set(types)
    problems = {message.split("<class 'signatures_plugin.")[1].split("'")[0]: message.split(">")[1]
                for message in warnings(caplog) if message.startswith("plugin 'signatures_plugin' registered")}
    assert problems == {
        "NoLength": " (draft(self, history) cannot be called as draft(history, n_max)): skipped",
        "NoPrompt": " (begin(self) cannot be called as begin(prompt, sampling) or begin(prompt) or "
                    "begin(prompt, sampling, constraint)): skipped",
        "TwoCounts": " (accept(self, n_accepted, n_drafted) cannot be called as accept(n_accepted)): skipped"}


def test_drafter_types_are_collected_once_and_a_clash_warned_once(plugin_module, caplog):
    plugin_module("clash_plugin", '''
        from specframe import NO_DRAFT, Drafter, hookimpl

        class Clash(Drafter):
            name = "prompt-lookup"
            def draft(self, history, n_max):
                return NO_DRAFT

        @hookimpl
        def register_drafters(register):
            register(Clash)
        ''')
    plugins = load_plugins(["clash_plugin"])
    first = plugins.drafter_types()
    assert plugins.drafter_types() is first
    assert first["prompt-lookup"].plugin == "specframe.drafters.prompt_lookup"
    clashes = [m for m in warnings(caplog) if "already registered" in m]
    assert clashes == [("plugin 'clash_plugin' registers drafter type 'prompt-lookup', already registered by plugin "
                        "'specframe.drafters.prompt_lookup': skipped")]


# --- what draft() may return -----------------------------------------------------------------------------------

def test_draft_results_none_and_sequences_of_ids_are_drafts_anything_else_is_invalid():
    assert len(valid_draft(None, 10, 4)) == 0
    for ids in ([3, 1, 4], (3, 1, 4), np.array([3, 1, 4], dtype=np.int64)):
        draft = valid_draft(ids, 10, 2)
        assert draft.tokens.dtype == np.int32 and draft.tokens.tolist() == [3, 1] and draft.probs is None
    assert len(valid_draft([], 10, 4)) == 0
    for wrong in ("314", [3.0, 1.0], [[3, 1]], {3: 1}, 3, [True, False], object()):
        with pytest.raises(InvalidDraft, match=f"draft\\(\\) returned {type(wrong).__name__}: expected a Draft"):
            valid_draft(wrong, 10, 4)
    with pytest.raises(InvalidDraft, match="outside the vocabulary"):
        valid_draft([3, 10], 10, 4)


# --- the protocol end to end, on the synthetic model -------------------------------------------------------------

DRAFTERS = '''
import numpy as np
from specframe import NO_DRAFT, Draft, Drafter, hookimpl

seen = []   # (drafter, what begin() learnt of the sampling, the vocabulary width it was given)


def looked_up(history, n_max):
    """What followed the last earlier occurrence of the history's last token."""
    earlier = np.flatnonzero(history[:-1] == history[-1])
    return history[earlier[-1] + 1:][:n_max].tolist() if earlier.size else []


class Legacy(Drafter):
    """Written before begin() took the sampling: it reads self.sampling, as the chain then set it."""
    name = "legacy"
    def begin(self, prompt):
        seen.append(("legacy", self.sampling, self.env.target.vocab.n_tokens))
    def draft(self, history, n_max):
        return Draft.of(looked_up(history, n_max))


class Explicit(Drafter):
    name = "explicit"
    def begin(self, prompt, sampling):
        seen.append(("explicit", sampling, self.env.n_vocab))
    def draft(self, history, n_max):
        return looked_up(history, n_max)      # a plain list of ids is a draft
    def describe(self):
        return "drafts what followed the last token before"


class Untyped(Drafter):
    name = "untyped"
    def draft(self, history, n_max):
        return [float(t) for t in looked_up(history, n_max)] or NO_DRAFT


@hookimpl
def register_drafters(register):
    for cls in (Legacy, Explicit, Untyped):
        register(cls)
'''


@pytest.fixture
def engine(plugin_module, write_config, target_path):
    plugin_module("protocol_plugin", DRAFTERS)
    config = write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 512
        threads = 1
        [generation]
        max_tokens = 60
        [speculative]
        adaptive = false
        [plugins]
        modules = ["protocol_plugin"]
        [[drafter]]
        type = "legacy"
        [[drafter]]
        type = "explicit"
        [[drafter]]
        type = "untyped"
        """)
    engine = Engine.from_config(config)
    yield engine
    engine.close()


def test_a_drafter_whose_begin_takes_only_the_prompt_keeps_working(engine):
    seen = sys.modules["protocol_plugin"].seen
    plain = engine.generate(PROMPT, raw=True, speculative=False)
    result = engine.generate(PROMPT, raw=True, drafters=["legacy"])
    assert result.tokens == plain.tokens
    stats = result.stats.drafters["legacy"]
    assert stats["accepted_tokens"] > 0 and "disabled" not in stats
    engine.generate(PROMPT, raw=True, drafters=["legacy"], temperature=0.8, acceptance="rejection")
    assert [(name, sampling and sampling.temperature) for name, sampling, _ in seen] == [("legacy", None),
                                                                                          ("legacy", 0.8)]


def test_begin_is_given_the_sampling_and_describe_shows_in_the_statistics(engine):
    seen = sys.modules["protocol_plugin"].seen
    plain = engine.generate(PROMPT, raw=True, speculative=False)
    result = engine.generate(PROMPT, raw=True, drafters=["explicit"])
    assert result.tokens == plain.tokens
    stats = result.stats.drafters["explicit"]
    assert stats["accepted_tokens"] > 0 and stats["note"] == "drafts what followed the last token before"
    engine.generate(PROMPT, raw=True, drafters=["explicit"], temperature=0.8, acceptance="rejection")
    engine.generate(PROMPT, raw=True, drafters=["explicit"], temperature=0.8, acceptance="match")
    assert [(name, sampling and sampling.temperature) for name, sampling, _ in seen] == [
        ("explicit", None), ("explicit", 0.8), ("explicit", None)]
    assert {n_vocab for _, _, n_vocab in seen} == {engine.vocab.n_tokens}


def test_a_draft_of_the_wrong_type_sets_the_drafter_aside_and_changes_nothing(engine):
    plain = engine.generate(PROMPT, raw=True, speculative=False)
    result = engine.generate(PROMPT, raw=True, drafters=["untyped", "explicit"])
    assert result.tokens == plain.tokens
    assert result.stats.drafters["untyped"]["disabled"] == ("draft() returned list: expected a Draft, NO_DRAFT, None "
                                                            "or a 1-D sequence of integer token ids")
    assert result.stats.drafters["explicit"]["accepted_tokens"] > 0
