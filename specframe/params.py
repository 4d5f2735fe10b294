"""Declaring configuration fields: ``param`` attaches documentation and bounds to a dataclass field.

The config loader enforces them and ``specframe plugins`` shows them, for built-in and third-party drafters alike.
Every number a config can hold has an upper bound: what reaches a C struct must fit its type, and what sizes a
table or a loop must fit in memory and time.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import typing
from dataclasses import field

INT32_MAX = 2**31 - 1          # the largest value of the int32 / uint32 fields of llama.cpp's structs we fill
MAX_DRAFT_TOKENS = 1024        # the longest draft any setting may ask for: a verify pass holds n_vocab logits each
# More threads than this only slow llama.cpp down (they spin), and tens of thousands crash its OpenMP runtime.
MAX_THREADS = 4 * (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
AUTO_ON_OFF = ("auto", "on", "off")   # a switch the user may force, or leave to what specframe finds


def forced(setting: str) -> bool | None:
    """An AUTO_ON_OFF setting as forced on (True) or off (False), or None for "auto"."""
    return {"on": True, "off": False}.get(setting)


def param(default=dataclasses.MISSING, *, help: str = "", min=None, max=None, choices=None, model: bool = False):
    """A configuration field. ``model=True`` marks a model reference: a catalog name, a Hugging Face reference
    or a path to a GGUF file, relative to the config file."""
    metadata = {"help": help, "min": min, "max": max, "choices": choices, "model": model}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def config_fields(cls) -> list[dataclasses.Field]:
    """A config dataclass's fields as its keys are listed: its own first, then those it inherits (the model
    settings of a target or a draft model)."""
    own = inspect.get_annotations(cls)
    return sorted(dataclasses.fields(cls), key=lambda f: f.name not in own)


def within_bounds(value: int | float, metadata) -> bool:
    """Whether a number lies within the field's bounds; NaN never does, nor does infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return ((metadata.get("min") is None or value >= metadata["min"])
            and (metadata.get("max") is None or value <= metadata["max"]))


def describe(annotation, metadata) -> str:
    """What a field expects, in words: its type, bounds and choices ("an integer in [1, 64]")."""
    origin = typing.get_origin(annotation) or annotation
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
             dict: "a table of strings with non-empty keys"}
    if origin is list:
        (item,) = typing.get_args(annotation) or (str,)
        text = "a list of " + {float: "numbers", int: "integers"}.get(item, "non-empty strings")
    else:
        text = names.get(origin, getattr(origin, "__name__", str(origin)))
    low, high = metadata.get("min"), metadata.get("max")
    if low is not None and high is not None:
        text += f" in [{low}, {high}]"
    elif low is not None:
        text += f" >= {low}"
    elif high is not None:
        text += f" <= {high}"
    if metadata.get("choices") is not None:
        text += " (one of " + ", ".join(map(repr, metadata["choices"])) + ")"
    return text
