"""Where specframe keeps what outlives a run: libllama builds and models, in a per-user cache."""

import os
import pathlib


def cache_dir() -> pathlib.Path:
    """$SPECFRAME_CACHE, else $XDG_CACHE_HOME/specframe, else ~/.cache/specframe."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(os.environ.get("SPECFRAME_CACHE") or os.path.join(base, "specframe"))


def models_dir() -> pathlib.Path:
    """$SPECFRAME_MODELS, else the cache's models folder."""
    explicit = os.environ.get("SPECFRAME_MODELS")
    return pathlib.Path(explicit) if explicit else cache_dir() / "models"
