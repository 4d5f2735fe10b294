"""Config values set over the file's: from the command line (``--set``, llama.cpp's short flags) and from
``SPECFRAME_*`` environment variables.

They are applied to the TOML data before it is validated, so that an override gets every check a file's value
gets; what each one set is recorded, so that an error names the flag or variable at fault instead of the file.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from dataclasses import dataclass
from typing import Iterable, Mapping, Union

from specframe.errors import ConfigError, printable
from specframe.sampling import LOGIT_BIAS_LIMIT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ENV_PREFIX = "SPECFRAME_"
ENV_SEPARATOR = "__"   # SPECFRAME_TARGET__N_CTX, SPECFRAME_DRAFTER__NGRAM_SIMPLE__N; other SPECFRAME_* are not config


@dataclass(frozen=True)
class Override:
    """Set ``key`` (``section.key``, or ``drafter.NAME.key``) to ``value``; ``origin`` is how errors name it."""

    key: str
    value: object
    origin: str


@dataclass(frozen=True)
class DrafterTables:
    """Which drafter tables exist: the file's replaced by one table of defaults per type (``replace``), or a table
    of defaults added for each type the config lacks."""

    types: tuple[str, ...]
    replace: bool
    origin: str


Layer = Union[Override, DrafterTables]


def parse_value(text: str):
    """A TOML value (``8``, ``0.7``, ``true``, ``"x"``, ``[1, 2]``); text that is not one is that text."""
    try:
        parsed = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return text
    return parsed["v"] if list(parsed) == ["v"] else text


def parse_set(text: str) -> Override:
    """``--set section.key=value``."""
    key, equals, value = text.partition("=")
    if not equals or "." not in key.strip(". "):
        raise ConfigError(printable(f"--set {text}: expected section.key=value (or drafter.NAME.key=value)"))
    return Override(key.strip(), parse_value(value.strip()), f"--set {text}")


_LOGIT_BIAS = re.compile(r"\s*(\d+)\s*([+-])\s*(inf|\d+(?:\.\d*)?|\.\d+)\s*", re.IGNORECASE)


def parse_logit_bias(texts: Iterable[str]) -> Override:
    """llama.cpp's ``-l TOKEN_ID(+|-)BIAS``, repeatable (``-l 15043+1 -l 29-inf``): one table of biases, which
    replaces ``[sampling] logit_bias``. ``inf`` is the largest bias allowed, which bans (or forces) the token."""
    texts = list(texts)
    origin = " ".join(f"-l {text}" for text in texts)
    biases: dict[str, float] = {}
    for text in texts:
        match = _LOGIT_BIAS.fullmatch(text)
        if match is None:
            raise ConfigError(printable(f"-l {text}: expected TOKEN_ID+BIAS or TOKEN_ID-BIAS, e.g. 15043+1 or "
                                        "15043-inf"))
        token, sign, amount = match.groups()
        size = LOGIT_BIAS_LIMIT if amount.lower() == "inf" else float(amount)   # llama.cpp's inf: the bound
        biases[str(int(token))] = size if sign == "+" else -size
    return Override("sampling.logit_bias", biases, origin)


def environment_overrides(environ: Mapping[str, str] = os.environ) -> list[Override]:
    """``SPECFRAME_SECTION__KEY=value`` and ``SPECFRAME_DRAFTER__NAME__KEY=value`` (case-insensitive; ``_`` in
    NAME also matches ``-``), in name order."""
    overrides = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or ENV_SEPARATOR not in name:
            continue
        parts = name[len(ENV_PREFIX):].lower().split(ENV_SEPARATOR)
        origin = f"{name}={environ[name]}"
        if len(parts) != (3 if parts[0] == "drafter" else 2) or not all(parts):
            raise ConfigError(printable(f"{origin}: expected {ENV_PREFIX}SECTION{ENV_SEPARATOR}KEY or "
                                        f"{ENV_PREFIX}DRAFTER{ENV_SEPARATOR}NAME{ENV_SEPARATOR}KEY"))
        overrides.append(Override(".".join(parts), parse_value(environ[name]), origin))
    return overrides


def layered(flags: Iterable[Layer], environment: Iterable[Override]) -> list[Layer]:
    """The order to apply overrides in so that a flag beats a variable: the flags that decide which drafters exist
    first (so that variables and flags can address them), then the variables, then the flags' values."""
    flags = list(flags)
    tables = [f for f in flags if isinstance(f, DrafterTables)]
    return [*tables, *environment, *[f for f in flags if not isinstance(f, DrafterTables)]]


def apply_overrides(data: dict, overrides: Iterable[Layer], sections: Iterable[str]):
    """``data`` (a config file's TOML) with ``overrides`` applied in order, and what each one set: a list of
    (place, key, origin), place being a section's name or a drafter's table (key None: the whole table)."""
    data = copy.deepcopy(data)
    sections = set(sections)
    origins: list[tuple[object, str | None, str]] = []
    for layer in overrides:
        if isinstance(layer, DrafterTables):
            origins += [(table, None, layer.origin) for table in _drafter_tables(data, layer)]
            continue
        section, _, rest = layer.key.partition(".")
        value = _from_here(layer.value) if rest.rpartition(".")[2] == "model" else layer.value
        if section == "drafter":
            name, _, key = rest.rpartition(".")
            if not name or not key:
                raise ConfigError(printable(f"{layer.origin}: expected drafter.NAME.key"))
            table = _drafter_named(_drafter_list(data, layer.origin), name, layer.origin)
            table[key] = value
            origins.append((table, key, layer.origin))
            continue
        if section not in sections or not rest or "." in rest:
            expected = ", ".join(f"{s}.KEY" for s in sorted(sections)) + ", drafter.NAME.KEY"
            raise ConfigError(printable(f"{layer.origin}: unknown setting '{layer.key}'; expected one of {expected}"))
        table = data.setdefault(section, {})
        if not isinstance(table, dict):
            raise ConfigError(printable(f"{layer.origin}: [{section}] in the config file is not a table"))
        table[rest] = value
        origins.append((section, rest, layer.origin))
    return data, origins


def _drafter_tables(data: dict, layer: DrafterTables) -> list[dict]:
    """Apply ``layer``; the tables it made."""
    tables = _drafter_list(data, layer.origin)
    if layer.replace:
        tables.clear()
        if isinstance(data.get("speculative"), dict):
            data["speculative"].pop("order", None)   # it named the file's drafters
    made = [{"type": t} for t in layer.types if layer.replace or not any(d.get("type") == t for d in tables)]
    tables += made
    return made


def _drafter_list(data: dict, origin: str) -> list[dict]:
    tables = data.setdefault("drafter", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(printable(f"{origin}: the config file's drafters are not an array of tables ([[drafter]])"))
    return tables


def _drafter_named(tables: list[dict], name: str, origin: str) -> dict:
    """The table named ``name``: by name (defaulted to its type), then by name ignoring case and ``-``/``_`` (for
    variables), then the only table of that type."""
    names = [t.get("name", t.get("type")) for t in tables]
    for matches in ([t for t, n in zip(tables, names) if n == name],
                    [t for t, n in zip(tables, names) if _loose(n) == _loose(name)],
                    [t for t in tables if _loose(t.get("type")) == _loose(name)]):
        if len(matches) == 1:
            return matches[0]
    known = ", ".join(map(str, names)) or "(no drafters)"
    raise ConfigError(printable(f"{origin}: no [[drafter]] named '{name}'; expected one of: {known}"))


def _loose(name) -> str:
    return str(name).lower().replace("-", "_")


def _from_here(value):
    """A model path given on the command line or in a variable is relative to the current directory, not to the
    config file's: made absolute when it names a file here (catalog names and others are left as they are)."""
    if isinstance(value, str) and os.path.isfile(os.path.expanduser(value)):
        return os.path.abspath(os.path.expanduser(value))
    return value
