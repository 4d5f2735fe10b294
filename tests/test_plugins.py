"""Plugin discovery: built-ins, the example package's entry point, config modules, SPECFRAME_LOAD_PLUGINS."""

import textwrap

from specframe.plugins import load_plugins


def test_builtin_drafters_are_registered_through_the_hook():
    types = load_plugins().drafter_types()
    for name in ("prompt-lookup", "ngram-simple", "draft-model"):
        assert types[name].package == "specframe (built-in)"
        assert types[name].plugin.startswith("specframe.drafters.")


def test_the_example_plugin_is_discovered_through_its_entry_point():
    cycle = load_plugins().drafter_types()["cycle"]
    assert cycle.package == "specframe-cycle" and cycle.plugin == "cycle"
    params = cycle.describe()["parameters"]
    assert [(p["name"], p["default"]) for p in params] == [("max_period", 16), ("min_repeats", 2)]


def test_an_installed_plugin_also_named_in_the_config_is_loaded_once():
    plugins = load_plugins(["specframe_cycle"])     # the module behind the 'cycle' entry point
    cycle = plugins.drafter_types()["cycle"]
    assert cycle.plugin == "cycle" and cycle.package == "specframe-cycle"


def test_load_plugins_env_pins_the_installed_set(monkeypatch):
    monkeypatch.setenv("SPECFRAME_LOAD_PLUGINS", "")
    assert "cycle" not in load_plugins().drafter_types()
    monkeypatch.setenv("SPECFRAME_LOAD_PLUGINS", "specframe-cycle")
    assert "cycle" in load_plugins().drafter_types()


BROKEN = '''
from specframe import Drafter, hookimpl

class NoDraft(Drafter):
    name = "no-draft"

class Clash(Drafter):
    name = "prompt-lookup"
    def draft(self, history, n_max):
        return None

@hookimpl
def register_drafters(register):
    register(NoDraft)
    register(Clash)
    register(object)
'''


def test_invalid_registrations_are_reported_and_skipped(tmp_path, monkeypatch, caplog):
    (tmp_path / "broken_plugin.py").write_text(textwrap.dedent(BROKEN))
    monkeypatch.syspath_prepend(str(tmp_path))
    types = load_plugins(["broken_plugin"]).drafter_types()
    assert "no-draft" not in types
    assert types["prompt-lookup"].package == "specframe (built-in)"     # the built-in is not replaced
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "does not implement draft()" in messages
    assert "already registered by plugin 'specframe.drafters.prompt_lookup'" in messages
    assert "not a subclass of specframe.Drafter" in messages
