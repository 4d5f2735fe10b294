"""Plugin discovery: built-ins, installed packages' entry points, config modules, SPECFRAME_LOAD_PLUGINS."""

import importlib.metadata

import pytest

from specframe.plugins import load_plugins


def test_builtin_drafters_are_registered_through_the_hook():
    types = load_plugins().drafter_types()
    for name in ("prompt-lookup", "ngram-simple", "draft-model"):
        assert types[name].package == "specframe (built-in)"
        assert types[name].plugin.startswith("specframe.drafters.")


INSTALLED = '''
from dataclasses import dataclass
from specframe import NO_DRAFT, Drafter, hookimpl, param

@dataclass(frozen=True)
class EchoParams:
    width: int = param(3, min=1, max=9, help="how wide")

class Echo(Drafter):
    name = "echo"
    Params = EchoParams
    def draft(self, history, n_max):
        return NO_DRAFT

@hookimpl
def register_drafters(register):
    register(Echo)
'''


def test_an_installed_package_is_discovered_through_its_entry_point(installed_package):
    installed_package("specframe-echo", "specframe_echo", INSTALLED, entry_point="echo")
    echo = load_plugins().drafter_types()["echo"]
    assert echo.package == "specframe-echo" and echo.plugin == "echo"
    assert [(p["name"], p["default"]) for p in echo.describe()["parameters"]] == [("width", 3)]


def test_an_installed_plugin_also_named_in_the_config_is_loaded_once(installed_package):
    installed_package("specframe-echo", "specframe_echo", INSTALLED, entry_point="echo")
    plugins = load_plugins(["specframe_echo"])     # the module behind the 'echo' entry point
    echo = plugins.drafter_types()["echo"]
    assert echo.plugin == "echo" and echo.package == "specframe-echo"
    assert len(plugins.manager.get_plugins()) == len(load_plugins().manager.get_plugins())


def test_load_plugins_env_pins_the_installed_set(installed_package, monkeypatch):
    installed_package("specframe-echo", "specframe_echo", INSTALLED, entry_point="echo")
    assert "echo" in load_plugins().drafter_types()
    for pinned in ("", "another-package"):
        monkeypatch.setenv("SPECFRAME_LOAD_PLUGINS", pinned)
        assert "echo" not in load_plugins().drafter_types()


def test_a_config_module_registers_its_drafters():
    plugins = load_plugins(["third_party_drafter"])
    last_match = plugins.drafter_types()["last-match"]
    assert last_match.plugin == "third_party_drafter" and last_match.package == "third_party_drafter"


def _example_plugin_installed() -> bool:
    try:
        importlib.metadata.distribution("specframe-cycle")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.installed_plugin
@pytest.mark.skipif(not _example_plugin_installed(),
                    reason="the example plugin is not installed: pip install ./plugins/specframe-cycle")
def test_the_example_plugin_installed_by_pip_is_discovered_through_its_entry_point(monkeypatch):
    monkeypatch.delenv("SPECFRAME_LOAD_PLUGINS")      # everything installed, as a user's run sees it
    cycle = load_plugins().drafter_types()["cycle"]
    assert cycle.package == "specframe-cycle" and cycle.plugin == "cycle"
    assert [(p["name"], p["default"]) for p in cycle.describe()["parameters"]] == [("max_period", 16),
                                                                                   ("min_repeats", 2)]


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


def test_invalid_registrations_are_reported_and_skipped(plugin_module, caplog):
    plugin_module("broken_plugin", BROKEN)
    types = load_plugins(["broken_plugin"]).drafter_types()
    assert "no-draft" not in types
    assert types["prompt-lookup"].package == "specframe (built-in)"     # the built-in is not replaced
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "does not implement draft()" in messages
    assert "already registered by plugin 'specframe.drafters.prompt_lookup'" in messages
    assert "not a subclass of specframe.Drafter" in messages
