"""Shared fixtures: tiny synthetic models written at test time, configs, and the real models of MODELS.md."""

from __future__ import annotations

import pathlib
import textwrap

import pytest

from specframe.synthetic import write_synthetic_model


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def target_path(models_dir) -> pathlib.Path:
    """A float32 llama model with random weights (same tokenizer as ``draft_path``)."""
    return pathlib.Path(write_synthetic_model(models_dir / "target.gguf", seed=0))


@pytest.fixture(scope="session")
def draft_path(models_dir) -> pathlib.Path:
    """The target's weights plus noise: a same-vocabulary draft that mostly, not always, agrees."""
    return pathlib.Path(write_synthetic_model(models_dir / "draft.gguf", seed=0, noise=0.15, noise_seed=7))


@pytest.fixture(scope="session")
def shuffled_draft_path(models_dir) -> pathlib.Path:
    """``draft_path``'s model with its tokens under other ids: a draft that needs token mapping."""
    return pathlib.Path(write_synthetic_model(models_dir / "shuffled-draft.gguf", seed=0, noise=0.15, noise_seed=7,
                                              shuffle_vocab=3))


@pytest.fixture
def write_config(tmp_path):
    """Write a TOML config (dedented) into a fresh folder; return its path."""

    def write(text: str, name: str = "config.toml") -> pathlib.Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


def real_model(name: str) -> pathlib.Path:
    """A catalog model from MODELS.md, fetched (sha256-checked) into the user cache on first use."""
    from specframe.models import resolve_model

    return resolve_model(name)


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> pathlib.Path:
    """An empty SPECFRAME_CACHE for tests that write into the cache; libllama stays the user's build."""
    from specframe.llama import library_prefix

    monkeypatch.setenv("SPECFRAME_LLAMA_PREFIX", str(library_prefix()))
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECFRAME_CACHE", str(cache))
    return cache
