"""Declaring configuration fields: ``param`` attaches documentation and bounds to a dataclass field.

The config loader enforces them and ``specframe plugins`` shows them, for built-in and third-party drafters alike.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field


def param(default=dataclasses.MISSING, *, help: str = "", min=None, max=None, choices=None, model: bool = False):
    """A configuration field. ``model=True`` marks a model reference: a catalog name or a path to a GGUF file,
    relative to the config file."""
    metadata = {"help": help, "min": min, "max": max, "choices": choices, "model": model}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)
