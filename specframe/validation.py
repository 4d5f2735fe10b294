"""Checking a TOML table against the dataclass it fills, field by field, with one-line errors.

Generic over the dataclass: the config's sections and every drafter's ``Params`` (built-in or third-party) get
the same checks: unknown keys, field types, and the bounds, choices and model files declared with
``specframe.param``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import typing

from specframe.errors import ConfigError, ModelError, ParamError, printable
from specframe.files import file_problem
from specframe.hub import FORM
from specframe.models import model_reference
from specframe.params import config_fields, describe, within_bounds

NO_FILE = "(no config file)"


class Where:
    """Where a config's values came from, so that errors name it: ``at(key, problem)`` is the one-line error.

    A key set by a flag or variable (``origins``: key -> how to name it) is blamed on that, every other on the file
    (``path``; None when there is none). Relative paths are from ``directory``."""

    def __init__(self, path: pathlib.Path | None, directory: pathlib.Path, origins: dict[str, str] | None = None):
        self.path = path
        self.directory = directory
        self.origins = origins or {}

    def at(self, key: str, problem: str) -> str:
        return printable(f"{self.origin(key)}: {key}: {problem}")

    def origin(self, key: str) -> str:
        """What set ``key``: the most specific override that covers it, else the file."""
        covering = self._covering(key)
        if covering:
            return self.origins[max(covering, key=len)]
        return str(self.path) if self.path is not None else NO_FILE

    def overridden(self, key: str) -> bool:
        return bool(self._covering(key))

    def _covering(self, key: str) -> list[str]:
        return [k for k in self.origins if key == k or (key.startswith(k) and key[len(k)] in ".[ ")]


def build_dataclass(cls, table: dict, where: Where, section: str):
    """Instantiate ``cls`` from a TOML table, checking unknown keys, types, bounds, choices and model files."""
    fields = {f.name: f for f in config_fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in table:
        if key not in fields:
            allowed = ", ".join(fields) or "(no keys)"
            raise ConfigError(where.at(f"{section}.{key}", f"unknown key; expected one of: {allowed}"))
    values = {}
    for name, f in fields.items():
        key = f"{section}.{name}"
        if name not in table:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(where.at(key, f"missing; expected {describe(hints[name], f.metadata)}"))
            continue
        value = table[name]
        expected = describe(hints[name], f.metadata)
        if not _type_ok(value, hints[name]):
            raise ConfigError(where.at(key, f"expected {expected}, got {value!r}"))
        meta = f.metadata
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not within_bounds(value, meta):
            raise ConfigError(where.at(key, f"expected {expected}, got {value!r}"))
        if meta.get("choices") is not None and value not in meta["choices"]:
            raise ConfigError(where.at(key, f"expected {expected}, got {value!r}"))
        if meta.get("model"):
            _check_model(value, where, key)
        values[name] = float(value) if hints[name] is float else value
    try:
        return cls(**values)
    except ParamError as exc:   # a check across keys, in the dataclass's __post_init__
        raise ConfigError(where.at(f"{section}.{exc.key}", exc.problem)) from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(where.at(section, str(exc))) from None


def _check_model(value: str, where: Where, key: str) -> None:
    """A model setting names a catalog model, a well-formed Hugging Face reference or an existing file (nothing is
    fetched here)."""
    try:
        reference = model_reference(value, where.directory)
    except ModelError as exc:
        raise ConfigError(where.at(key, str(exc))) from None
    problem = file_problem(reference) if isinstance(reference, pathlib.Path) else None
    if problem:
        base = "the current directory" if where.overridden(key) else "the config's folder"
        raise ConfigError(where.at(key, f"model file {value!r} {problem} (relative paths are from {base}); expected "
                                        f"a GGUF path, a catalog name (specframe models list) or {FORM}"))


def _type_ok(value, annotation) -> bool:
    origin = typing.get_origin(annotation)
    if origin is typing.Union or type(annotation).__name__ == "UnionType":
        return any(_type_ok(value, a) for a in typing.get_args(annotation))
    base = origin or annotation
    if base is bool:
        return isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if base is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base is str:
        return isinstance(value, str)
    if base is list:   # list items and table keys name things: an empty one is a mistake
        (item,) = typing.get_args(annotation) or (str,)
        return isinstance(value, list) and all(_type_ok(v, item) and v != "" for v in value)
    if base is dict:
        key_type, value_type = typing.get_args(annotation) or (str, str)
        return isinstance(value, dict) and all(_type_ok(k, key_type) and k != "" and _type_ok(v, value_type)
                                               for k, v in value.items())
    if annotation is type(None):
        return value is None
    return isinstance(value, base)
