"""Shared fixtures: tiny synthetic models written at test time, configs, and the catalog's real models."""

from __future__ import annotations

import pathlib
import sys
import textwrap

import pytest

from specframe.llama import Model
from specframe.testing.synthetic import write_synthetic_model


def _isolate(monkeypatch: pytest.MonkeyPatch, cache: pathlib.Path) -> None:
    """Point specframe's cache and Hugging Face's at ``cache``, keeping the user's libllama build and real models
    (shared, read-only), here and in the processes tests start."""
    import huggingface_hub.constants

    from specframe.llama import library_prefix
    from specframe.paths import models_dir

    shared_build, shared_models = library_prefix(), models_dir()
    monkeypatch.setenv("SPECFRAME_CACHE", str(cache))
    monkeypatch.setenv("HF_HOME", str(cache / "huggingface"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache / "huggingface" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache / "huggingface" / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("SPECFRAME_LLAMA_PREFIX", str(shared_build))
    monkeypatch.setenv("SPECFRAME_MODELS", str(shared_models))


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory):
    """A cache for what module- and session-scoped fixtures make (an engine, a server): they are set up before any
    test's own cache, and must not write the user's either."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _isolate(monkeypatch, tmp_path_factory.mktemp("session-cache"))
        yield


@pytest.fixture(autouse=True)
def private_cache(session_cache, tmp_path_factory, monkeypatch):
    """Every test gets an empty cache of its own (pass-cost tables, n-gram caches...): no test reads or writes the
    user's. Only the libllama build and the real models are shared, read-only, from the user's cache. Hugging Face
    is offline, with an empty cache of its own."""
    _isolate(monkeypatch, tmp_path_factory.mktemp("cache"))


@pytest.fixture(autouse=True)
def no_installed_plugins(monkeypatch):
    """The core tests see the built-in drafters and the plugins they load themselves (third_party_drafter.py,
    ``installed_package``), never the plugin packages that happen to be installed."""
    monkeypatch.setenv("SPECFRAME_LOAD_PLUGINS", "")


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """``plugin_module(module, source)``: write a plugin module where imports find it; return its folder. The
    module leaves sys.modules after the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(module: str, source: str) -> pathlib.Path:
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        written.append(module)
        return tmp_path

    yield write
    for module in written:
        sys.modules.pop(module, None)


@pytest.fixture
def installed_package(plugin_module, monkeypatch):
    """``installed_package(distribution, module, source, entry_point)``: a package as pip leaves it (a module and a
    dist-info folder with its ``specframe`` entry point) on sys.path, installing nothing; only that distribution's
    plugins load (SPECFRAME_LOAD_PLUGINS)."""

    def install(distribution: str, module: str, source: str, entry_point: str) -> None:
        info = plugin_module(module, source) / f"{distribution.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[specframe]\n{entry_point} = {module}\n")
        monkeypatch.setenv("SPECFRAME_LOAD_PLUGINS", distribution)

    return install


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def target_path(models_dir) -> pathlib.Path:
    """A float32 llama model with random weights (same tokenizer as ``draft_path``)."""
    return pathlib.Path(write_synthetic_model(models_dir / "target.gguf", seed=0))


@pytest.fixture(scope="module")
def target_model(target_path):
    """``target_path`` loaded: the target a drafter made outside an engine drafts for."""
    with Model(target_path) as model:
        yield model


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
def hf_repo():
    """``hf_repo(repo, {name: bytes})``: lay files out in the test's Hugging Face cache as huggingface_hub stores a
    download of them (content-addressed blobs, the snapshot's names as relative links to them, refs/main naming
    the revision); returns the snapshot folder."""
    import hashlib
    import os

    import huggingface_hub.constants

    def lay_out(repo: str, files: dict[str, bytes], revision: str = "0123456789abcdef" * 2 + "01234567"):
        folder = pathlib.Path(huggingface_hub.constants.HF_HUB_CACHE) / ("models--" + repo.replace("/", "--"))
        snapshot = folder / "snapshots" / revision
        for name, data in files.items():
            blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
            link = snapshot / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(revision)
        return snapshot

    return lay_out


@pytest.fixture
def write_config(tmp_path):
    """Write a TOML config (dedented) into a fresh folder; return its path."""

    def write(text: str, name: str = "config.toml") -> pathlib.Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


def real_model(name: str) -> pathlib.Path:
    """A catalog model (docs/models.md), fetched (sha256-checked) into the user cache on first use."""
    from specframe.models import resolve_model

    return resolve_model(name)


@pytest.fixture
def together():
    """``together(engine, prompts, stagger=3, traced=False, **options)``: the prompts (text, raw, or token ids)
    decoded together on slots 0, 1, ... of one engine, each starting ``stagger`` steps after the one before, so that
    prompts are read while others generate; their results in order (each with a trace when ``traced``)."""
    return _together


def _together(engine, prompts: list, stagger: int = 3, traced: bool = False, **options):
    from specframe.trace import Trace

    pending = [engine.prompt_tokens(p, raw=True) if isinstance(p, str) else p for p in prompts]
    running, steps = [], 0
    while pending or any(s.stop_reason is None for s in running):
        if pending and steps % stagger == 0:
            trace = Trace() if traced else None
            running.append(engine.start(pending.pop(0), slot=len(running), trace=trace, **options))
        engine.step([s for s in running if s.stop_reason is None])
        steps += 1
    return [engine.finish(s) for s in running]
