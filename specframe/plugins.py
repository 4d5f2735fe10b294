"""Loading plugins and collecting the drafter types they register.

Sources, in order: the built-in drafters (plugins like any other), the ``specframe`` entry points of installed
packages (all of them, or only the distributions named in SPECFRAME_LOAD_PLUGINS, comma-separated, where an
empty value loads none), then modules named in a config's ``[plugins] modules``. An installed plugin that fails
to load is reported and skipped; a module the config names that fails to load is a configuration error. A plugin
fails to load when it defines a hook specframe does not have (a misspelt ``register_drafters``) or none at all.
Each drafter class is checked when it is registered (its name, Params, and the signatures of the protocol's
methods); a faulty one is reported, naming its plugin, and skipped.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import logging
import os
import re
import typing
from dataclasses import dataclass, field
from typing import Iterable

import pluggy

from specframe import hookspecs
from specframe.drafting.protocol import Drafter, signature_problem
from specframe.errors import ConfigError
from specframe.model_settings import ModelSettings
from specframe.params import config_fields, describe

log = logging.getLogger("specframe.plugins")

ENTRY_POINT_GROUP = "specframe"
BUILTIN_PLUGINS = (
    "specframe.drafters.prompt_lookup",
    "specframe.drafters.copy_cursor",
    "specframe.drafters.ngram_simple",
    "specframe.drafters.ngram_map",
    "specframe.drafters.ngram_mod",
    "specframe.drafters.ngram_cache",
    "specframe.drafters.suffix",
    "specframe.drafters.draft_model",
    "specframe.drafters.grammar",
)
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


@dataclass(frozen=True)
class DrafterType:
    """A registered drafter class and where it came from."""

    cls: type[Drafter]
    plugin: str
    package: str

    @property
    def name(self) -> str:
        return self.cls.name

    def describe(self) -> dict:
        """The drafter type as ``specframe plugins`` lists it: origin, summary and each config key."""
        params = []
        hints = typing.get_type_hints(self.cls.Params)
        from_target = ({f.name for f in dataclasses.fields(ModelSettings)}
                       if issubclass(self.cls.Params, ModelSettings) else set())
        for f in config_fields(self.cls.Params):
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            default = (f.default if f.default is not dataclasses.MISSING
                       else f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
            meta = f.metadata
            params.append({"name": f.name, "type": _type_name(f.type), "default": default, "required": required,
                           "from_target": f.name in from_target,
                           "min": meta.get("min"), "max": meta.get("max"), "choices": meta.get("choices"),
                           "expects": describe(hints[f.name], meta), "help": meta.get("help", "")})
        return {"type": self.name, "plugin": self.plugin, "package": self.package,
                "uses_model": self.cls.uses_model, "doc": (self.cls.__doc__ or "").strip().split("\n")[0],
                "parameters": params}


def _type_name(annotation) -> str:
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


@dataclass
class Plugins:
    """The loaded plugins, and the package each one came from."""

    manager: pluggy.PluginManager
    packages: dict[str, str]
    _drafter_types: dict[str, DrafterType] | None = field(default=None, init=False, repr=False)

    def drafter_types(self) -> dict[str, DrafterType]:
        """Every drafter type the plugins register, by name; collected (and faults reported) once."""
        if self._drafter_types is None:
            self._drafter_types = _collect_drafter_types(self)
        return self._drafter_types


def load_plugins(modules: Iterable[str] = ()) -> Plugins:
    pm = pluggy.PluginManager("specframe")
    pm.add_hookspecs(hookspecs)
    packages: dict[str, str] = {}
    for name in BUILTIN_PLUGINS:
        _register(pm, importlib.import_module(name), name)
        packages[name] = "specframe (built-in)"
    _load_entry_points(pm, packages)
    for name in modules:
        if pm.get_plugin(name) is not None:
            continue
        try:
            module = importlib.import_module(name)
            if pm.is_registered(module):    # installed too: loaded already through its entry point
                continue
            _register(pm, module, name)
        except (Exception, SystemExit) as exc:  # any failure of a named module is the config's to report
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())   # pluggy's messages span lines
            raise ConfigError(f"cannot load plugin module '{name}' ({reason})") from None
        top = name.split(".")[0]
        packages[name] = ", ".join(importlib.metadata.packages_distributions().get(top, [])) or top
    return Plugins(pm, packages)


def _register(pm: pluggy.PluginManager, plugin, name: str) -> None:
    """Register ``plugin``, or raise PluginValidationError (leaving it out) when it defines a hook specframe does
    not have, or none: pluggy would keep a misspelt hook without a word, and the plugin's drafters go missing."""
    pm.register(plugin, name=name)
    hooks = pm.get_hookcallers(plugin) or []
    try:
        pm.check_pending()
        if not hooks:
            raise pluggy.PluginValidationError(plugin, "it defines no hook: mark register_drafters with "
                                                       "@specframe.hookimpl")
    except pluggy.PluginValidationError:
        pm.unregister(plugin)
        unknown = [hook.name for hook in hooks if not hook.has_spec()]
        if not unknown:
            raise
        known = [hook for hook in vars(pm.hook) if not hook.startswith("_") and getattr(pm.hook, hook).has_spec()]
        close = difflib.get_close_matches(unknown[0], known, n=1)
        raise pluggy.PluginValidationError(plugin, f"unknown hook '{unknown[0]}'" + (
            f" (did you mean '{close[0]}'?)" if close else f" (specframe's hooks: {', '.join(known)})")) from None


def _load_entry_points(pm: pluggy.PluginManager, packages: dict[str, str]) -> None:
    pinned = os.environ.get("SPECFRAME_LOAD_PLUGINS")
    wanted = None if pinned is None else {p.strip() for p in pinned.split(",") if p.strip()}
    seen = set()
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist else ep.module
        seen.add(dist)
        if (wanted is not None and dist not in wanted) or pm.get_plugin(ep.name) is not None:
            continue
        try:
            _register(pm, ep.load(), ep.name)
            packages[ep.name] = dist
        except (Exception, SystemExit) as exc:   # a plugin's sys.exit() must not end the run silently
            log.warning("plugin '%s' from package %s failed to load and is skipped: %s: %s",
                        ep.name, dist, type(exc).__name__, exc)
    for missing in sorted((wanted or set()) - seen):
        log.warning("SPECFRAME_LOAD_PLUGINS names '%s', but no installed package of that name has "
                    "'%s' entry points", missing, ENTRY_POINT_GROUP)


def _collect_drafter_types(plugins: Plugins) -> dict[str, DrafterType]:
    """Every drafter type the plugins register, by name. A faulty registration is reported and skipped."""
    types: dict[str, DrafterType] = {}
    for impl in plugins.manager.hook.register_drafters.get_hookimpls():  # registration order: built-ins first
        plugin = impl.plugin_name

        def register(cls, _plugin=plugin):
            problem = _check_drafter_class(cls)
            if problem:
                log.warning("plugin '%s' registered an invalid drafter %r (%s): skipped", _plugin, cls, problem)
            elif cls.name in types:
                log.warning("plugin '%s' registers drafter type '%s', already registered by plugin '%s': "
                            "skipped", _plugin, cls.name, types[cls.name].plugin)
            else:
                types[cls.name] = DrafterType(cls, _plugin, plugins.packages.get(_plugin, _plugin))

        try:
            impl.function(register=register)
        except (Exception, SystemExit) as exc:
            log.warning("plugin '%s' failed in register_drafters and is skipped: %s: %s",
                        plugin, type(exc).__name__, exc)
    return types


def _check_drafter_class(cls) -> str | None:
    if not (isinstance(cls, type) and issubclass(cls, Drafter)):
        return "not a subclass of specframe.Drafter"
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME.match(name):
        return "its 'name' must be a lowercase identifier such as 'my-drafter'"
    if not dataclasses.is_dataclass(cls.Params):
        return "its 'Params' must be a dataclass"
    if cls.draft is Drafter.draft:
        return "it does not implement draft()"
    return signature_problem(cls)
