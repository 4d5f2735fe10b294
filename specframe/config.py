"""TOML configuration -> validated, frozen dataclasses.

Every error is one line naming the file, the key and what was expected. Each section, and each drafter's
parameters, is checked against its dataclass by ``validation.build_dataclass``, so third-party drafters get the
same checks for free: field types, plus the bounds and choices declared with ``specframe.param``.
"""

from __future__ import annotations

import os
import pathlib
import sys
from dataclasses import dataclass
from typing import Sequence

from specframe.drafting.chain import ARBITRATIONS
from specframe.errors import ConfigError, ParamError, SpecframeError
from specframe.files import file_problem, read_text
from specframe.model_settings import ModelSettings
from specframe.overrides import Layer, apply_overrides
from specframe.params import AUTO_ON_OFF, INT32_MAX, MAX_DRAFT_TOKENS, param
from specframe.plugins import DrafterType, Plugins, load_plugins
from specframe.sampling import ACCEPTANCE_MODES, SamplingParams
from specframe.validation import NO_FILE, Where, build_dataclass

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class TargetConfig(ModelSettings):
    model: str = param(help="catalog name (specframe models list), Hugging Face reference (hf:OWNER/REPO[:QUANT]) "
                            "or path to a GGUF file", model=True)
    n_ctx: int = param(4096, min=16, max=INT32_MAX, help="context size in tokens")
    n_batch: int = param(512, min=1, max=INT32_MAX, help="largest batch fed to llama_decode at once")
    backend_sampling: str = param("auto", choices=AUTO_ON_OFF,
                                  help="greedy choices made in the model's graph (llama.cpp's --backend-sampling): "
                                       "verifying a draft then copies token ids, not rows of logits, off the device "
                                       "(auto: where the model runs on a GPU; on a CPU the host's scan is faster)")
    cpu_tiled_matmul: str = param("auto", choices=AUTO_ON_OFF,
                                  help="ggml's tiled CPU kernels for K-quant weights it does not repack, taken from "
                                       "8 rows on (GGML_CPU_TILED_MM; one choice per process, the draft model's "
                                       "too): auto is off where the CPU kernels are AVX2 at most, on which they "
                                       "made passes of 8-17 tokens 11-40% slower and prompts 6% faster")


@dataclass(frozen=True)
class SpeculativeConfig:
    enabled: bool = param(True, help="false decodes plainly")
    n_max: int = param(16, min=0, max=MAX_DRAFT_TOKENS, help="most tokens verified per step beyond the first")
    n_min: int = param(0, min=0, max=MAX_DRAFT_TOKENS,
                       help="drafts shorter than this are dropped and the next drafter is asked")
    adaptive: bool = param(True, help="draft only as many tokens as measured costs and acceptance make worthwhile")
    arbitration: str = param("gain", choices=ARBITRATIONS,
                             help="which draft to verify: the one with the most expected tokens per second "
                                  "(gain), or the first non-empty one in order (priority, llama.cpp's rule)")
    acceptance: str = param("rejection", choices=ACCEPTANCE_MODES,
                            help="at temperature > 0: rejection sampling with the drafts' distributions, or "
                                 "sample-and-match (the target samples, a draft token stands if it was sampled)")
    order: list = param([], help="drafter names in priority order (default: draftless drafters first)")


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = param(512, min=1, max=INT32_MAX, help="most tokens to generate (the context may end it first)")
    stop: list = param([], help="stop strings")
    system: str = param("", help="system prompt for chat templates")


@dataclass(frozen=True)
class ServerConfig:
    host: str = param("127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    port: int = param(8080, min=0, max=65535, help="port to listen on (0: any free port)")
    slots: int = param(4, min=1, max=256, help="requests decoded together, one sequence each in one context")
    queue: int = param(64, min=0, max=1 << 20, help="requests waiting for a slot beyond which a request gets 503")
    cache_reuse: int = param(0, min=0, max=INT32_MAX,
                             help="keep runs of at least this many prompt tokens that a slot holds at other positions "
                                  "(moved into place, as llama-server's --cache-reuse; 0: the shared prefix only)")
    api_key: str = param("", help="clients must send 'Authorization: Bearer KEY' (empty: no key)")
    model_name: str = param("", help="the model id in /v1/models and responses (empty: the target's file name)")


@dataclass(frozen=True)
class PluginsConfig:
    modules: list = param([], help="Python modules to load as plugins")


@dataclass(frozen=True)
class DrafterConfig:
    name: str
    drafter_type: DrafterType   # the registered class that checked ``params`` and will make the drafter
    params: object

    @property
    def type(self) -> str:
        """The drafter type's name, the table's ``type`` key."""
        return self.drafter_type.name


@dataclass(frozen=True)
class Config:
    path: pathlib.Path | None        # None: no config file
    directory: pathlib.Path          # relative paths are from here: the file's folder, else the current directory
    target: TargetConfig
    sampling: SamplingParams
    speculative: SpeculativeConfig
    generation: GenerationConfig
    server: ServerConfig
    plugins: PluginsConfig
    drafters: tuple[DrafterConfig, ...]
    overrides: tuple[Layer, ...] = ()   # what was set over the file: load_config(path, overrides=...) again
    origins: tuple[tuple[str, str], ...] = ()   # (key, the flag or variable that set it), for errors

    @property
    def source(self) -> str:
        """How messages name the config: its file, or that there is none."""
        return str(self.path) if self.path is not None else NO_FILE

    def drafter_error(self, drafter: DrafterConfig, error: ParamError) -> ConfigError:
        """A drafter's complaint about one of its parameters, located in this file as the loader reports it."""
        section = drafter_section(self.drafters.index(drafter), drafter.type)
        return ConfigError(self.where().at(f"{section}.{error.key}", error.problem))

    def where(self) -> Where:
        """Where this config's values came from, to name them in errors found after loading."""
        return Where(self.path, self.directory, dict(self.origins))

    def ordered_drafters(self) -> list[DrafterConfig]:
        """The chain's priority order: [speculative] order, else draftless drafters first (config order kept)."""
        if self.speculative.order:
            by_name = {d.name: d for d in self.drafters}
            return [by_name[name] for name in self.speculative.order]
        return sorted(self.drafters, key=lambda d: d.drafter_type.cls.uses_model)


_SECTIONS = {"target": TargetConfig, "sampling": SamplingParams, "speculative": SpeculativeConfig,
             "generation": GenerationConfig, "server": ServerConfig, "plugins": PluginsConfig}


def load_config(path: str | os.PathLike | None, plugins: Plugins | None = None,
                overrides: Sequence[Layer] = ()) -> Config:
    """Read and validate a config file (None: none, every value from ``overrides`` or the defaults), with
    ``overrides`` applied in order over the file's values before they are checked (``overrides.layered`` orders
    flags and variables). Drafter parameters are checked against the drafter types of the plugins it names (loaded
    here unless ``plugins`` is given); each drafter keeps its type, and the config no plugins."""
    data, path = ({}, None) if path is None else _read(path)
    directory = path.parent if path is not None else pathlib.Path.cwd()
    data, origins = apply_overrides(data, overrides, _SECTIONS)
    where = Where(path, directory, _origin_keys(data, origins))
    unknown = set(data) - set(_SECTIONS) - {"drafter"}
    if unknown:
        raise ConfigError(where.at(sorted(unknown)[0], f"unknown section; expected one of "
                                                      f"{', '.join(sorted([*_SECTIONS, 'drafter']))}"))
    sections = {}
    for name, cls in _SECTIONS.items():
        table = data.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(where.at(name, "expected a table ([" + name + "])"))
        if name == "target" and "model" not in table:
            raise ConfigError(where.at("target.model", "missing; expected a catalog model name, a Hugging Face "
                                                       "reference or a GGUF path"))
        sections[name] = build_dataclass(cls, table, where, name)
    try:
        drafter_types = (plugins or load_plugins(sections["plugins"].modules)).drafter_types()
    except ConfigError as exc:
        raise ConfigError(where.at("plugins.modules", str(exc))) from None
    speculative, target = sections["speculative"], sections["target"]
    drafters = _drafters(data.get("drafter", []), drafter_types, where, target)
    batch = min(target.n_batch, target.n_ctx)   # llama.cpp never batches more tokens than the context holds
    if speculative.enabled and speculative.n_max + 1 > batch:
        limit = (f"[target] n_batch = {target.n_batch}" if target.n_batch <= target.n_ctx else
                 f"[target] n_ctx = {target.n_ctx} (a batch never holds more than the context)")
        raise ConfigError(where.at("speculative.n_max", f"{speculative.n_max} drafted tokens and the last one are "
                                                        f"verified in one batch, more than {limit}; expected "
                                                        f"n_max <= {batch - 1}"))
    names = [d.name for d in drafters]
    for i, name in enumerate(speculative.order):
        if name not in names:
            raise ConfigError(where.at(f"speculative.order[{i}]", f"'{name}' names no [[drafter]]; expected one "
                                                                   f"of {', '.join(names) or '(no drafters)'}"))
    if speculative.order and sorted(speculative.order) != sorted(names):
        raise ConfigError(where.at("speculative.order", f"must list every drafter once: {', '.join(names)}"))
    return Config(path, directory, target, sections["sampling"], speculative, sections["generation"],
                  sections["server"], sections["plugins"], tuple(drafters), tuple(overrides),
                  tuple(where.origins.items()))


def _read(path: str | os.PathLike) -> tuple[dict, pathlib.Path]:
    path = pathlib.Path(path).expanduser().resolve()
    if file_problem(path) == "not found":
        raise ConfigError(f"{path}: no such config file")
    try:
        return tomllib.loads(read_text(path)), path
    except SpecframeError as exc:
        raise ConfigError(str(exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def _origin_keys(data: dict, origins) -> dict[str, str]:
    """What each override set, under the names the checks give keys: ``target.n_ctx``, ``drafter[0].type``,
    ``drafter[0] (type 'ngram-simple').n`` (a drafter's position is known once every override is applied)."""
    keys = {}
    drafters = data.get("drafter")
    tables = drafters if isinstance(drafters, list) else []
    for place, key, origin in origins:
        if isinstance(place, str):
            keys[f"{place}.{key}"] = origin
            continue
        index = next((i for i, t in enumerate(tables) if t is place), None)
        if index is None:   # replaced by a later override
            continue
        if key is None:
            keys[f"drafter[{index}]"] = origin
        elif key in ("type", "name"):
            keys[f"drafter[{index}].{key}"] = origin
        else:
            keys[f"{drafter_section(index, place.get('type'))}.{key}"] = origin
    return keys


def _drafters(tables, types: dict[str, DrafterType], where: "Where", target: TargetConfig) -> list[DrafterConfig]:
    if not isinstance(tables, list):
        raise ConfigError(where.at("drafter", "expected an array of tables ([[drafter]])"))
    drafters, seen = [], set()
    known = ", ".join(sorted(types))
    for i, table in enumerate(tables):
        key = f"drafter[{i}]"
        if not isinstance(table, dict):
            raise ConfigError(where.at(key, "expected a table"))
        table = dict(table)
        type_name = table.pop("type", None)
        if type_name is None:
            raise ConfigError(where.at(f"{key}.type", f"missing; expected one of: {known}"))
        if not isinstance(type_name, str) or type_name not in types:
            raise ConfigError(where.at(f"{key}.type", f"unknown drafter type {type_name!r}; known types: {known}"))
        drafter_type = types[type_name]
        name = table.pop("name", type_name)
        if not isinstance(name, str) or not name or name in seen:
            raise ConfigError(where.at(f"{key}.name", f"expected a non-empty name not used by another drafter, "
                                                      f"got {name!r}"))
        seen.add(name)
        section = drafter_section(i, type_name)
        if issubclass(drafter_type.cls.Params, ModelSettings):   # what a drafter's model leaves out: the target's
            table = {**target.settings_table(), **table}
        params = build_dataclass(drafter_type.cls.Params, table, where, section)
        try:
            drafter_type.cls.check_params(params, where.directory)
        except ParamError as exc:
            raise ConfigError(where.at(f"{section}.{exc.key}", exc.problem)) from None
        except (Exception, SystemExit) as exc:   # a plugin's own bug, reported like its parameters
            raise ConfigError(where.at(section, f"the drafter's check_params raised {type(exc).__name__}: "
                                                f"{exc}")) from None
        drafters.append(DrafterConfig(name, drafter_type, params))
    return drafters


def drafter_section(index: int, type_name: str) -> str:
    """How errors name the table of the index-th [[drafter]]."""
    return f"drafter[{index}] (type '{type_name}')"
