"""Models by Hugging Face reference, as llama.cpp's ``-hf`` takes them: ``hf:OWNER/REPO[:QUANT]``.

Which file of a repository a reference means is llama.cpp's rule (common/download.cpp at 0c1e570,
``find_best_model``): among the GGUF model files (not ``mmproj``, ``imatrix`` or a speculative sidecar, and only
the first part of a split model), the first in the repository's listing whose path contains the quant followed by
``.`` or ``-``, case-insensitively; without a quant, Q4_K_M, then Q8_0, then the first model file. A split model
(``...-00001-of-00003.gguf``) is fetched whole and its first part is what libllama is given: libllama opens the
other parts beside it by name, so they are not joined into another copy.

Files come through ``huggingface_hub`` into its own cache (``HF_HOME`` / ``HF_HUB_CACHE``), with its progress
bars and ``HF_TOKEN``. When the repository cannot be listed (no network, ``HF_HUB_OFFLINE=1``, an error on the
Hub's side), the files are picked from what the cache holds of it, as llama.cpp does.
"""

from __future__ import annotations

import glob
import logging
import os
import pathlib
import re
from dataclasses import dataclass

from specframe.errors import ModelError, printable

PREFIX = "hf:"
DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")
FORM = "hf:OWNER/REPO[:QUANT], e.g. hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M"
# Hugging Face's repository ids: word characters, '-' and '.', not at either end of a part, no '--' or '..'.
_PART = r"(?!.*(?:--|\.\.))[A-Za-z0-9_](?:[\w.-]*[A-Za-z0-9_])?"
_REFERENCE = re.compile(rf"(?P<repo>{_PART}/{_PART})(?::(?P<quant>[A-Za-z0-9_-]+))?", re.ASCII)
_MAX_REPO_ID = 96
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")   # sidecars and calibration data

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HfRef:
    """A GGUF model in a Hugging Face repository: ``quant`` None means llama.cpp's default choice."""

    repo: str
    quant: str | None = None

    def __str__(self) -> str:
        return PREFIX + self.repo + (f":{self.quant}" if self.quant else "")


def parse_ref(spec: str, base_dir: pathlib.Path) -> HfRef | None:
    """``spec`` as a Hugging Face reference, None when it is none (a catalog name or a path).

    ``hf:`` always means one (a malformed one is an error). Without the prefix, ``OWNER/REPO[:QUANT]`` means one
    when no file or folder of that name exists (relative to ``base_dir``) and it does not end in ``.gguf``: a
    missing ``models/x.gguf`` stays a missing file."""
    if spec.startswith(PREFIX):
        return _reference(spec[len(PREFIX):], spec)
    if spec.lower().endswith(".gguf") or _REFERENCE.fullmatch(spec) is None \
            or (base_dir / os.path.expanduser(spec)).exists():
        return None
    return _reference(spec, spec)


def _reference(text: str, spec: str) -> HfRef:
    match = _REFERENCE.fullmatch(text)
    if match is None or len(match["repo"]) > _MAX_REPO_ID:
        raise ModelError(printable(f"model '{spec}': expected a Hugging Face reference {FORM}"))
    return HfRef(match["repo"], match["quant"])


@dataclass(frozen=True)
class _Split:
    prefix: str     # the name without ".gguf" and without the part suffix
    tag: str        # the quant as the name spells it, upper-cased ("" when none)
    index: int
    count: int


def _split(path: str) -> _Split:
    """llama.cpp's ``get_gguf_split_info``."""
    prefix, index, count = path.removesuffix(".gguf"), 1, 1
    match = _SPLIT.match(prefix)
    if match:
        prefix, index, count = match[1], int(match[2]), int(match[3])
    tag = _TAG.search(prefix)
    return _Split(prefix, tag[1].upper() if tag else "", index, count)


def _is_model(path: str) -> bool:
    name = path.rpartition("/")[2]
    return path.endswith(".gguf") and not any(word in name for word in _NOT_MODELS)


def quants(files: list[str]) -> list[str]:
    """The quants of the repository's model files, as their names spell them (upper-cased), in listing order."""
    found = [_split(f).tag for f in files if _is_model(f) and _split(f).index == 1]
    return list(dict.fromkeys(tag for tag in found if tag))


def pick_files(files: list[str], ref: HfRef) -> list[str]:
    """The files of ``files`` (a repository's listing) that ``ref`` means, in order: the model file, or every
    part of a split model, the first part first."""
    candidates = [f for f in files if _is_model(f) and _split(f).index == 1]
    for quant in [ref.quant] if ref.quant else DEFAULT_QUANTS:
        pattern = re.compile(re.escape(quant) + "[.-]", re.IGNORECASE)
        chosen = next((f for f in candidates if pattern.search(f)), None)
        if chosen is not None:
            return _parts(files, chosen, ref)
    if ref.quant is None and candidates:
        return _parts(files, candidates[0], ref)
    if not candidates:
        ggufs = [f for f in files if f.endswith(".gguf")]
        raise ModelError(printable(f"{ref}: the repository has no GGUF model file"
                                   + (f" (its GGUF files: {', '.join(ggufs)})" if ggufs else "")))
    raise ModelError(printable(f"{ref}: no GGUF file of quant {ref.quant} in the repository; its quants: "
                               f"{', '.join(quants(files)) or '(none named)'}"))


def _parts(files: list[str], first: str, ref: HfRef) -> list[str]:
    split = _split(first)
    if split.count == 1:
        return [first]
    by_index = {s.index: f for f in files if f.endswith(".gguf")
                for s in [_split(f)] if s.prefix == split.prefix and s.count == split.count}
    missing = [i for i in range(1, split.count + 1) if i not in by_index]
    if missing:
        raise ModelError(printable(f"{ref}: {first} is part 1 of {split.count}, but part(s) "
                                   f"{', '.join(map(str, missing))} are not in the repository"))
    return [by_index[i] for i in range(1, split.count + 1)]


def fetch(ref: HfRef, local_only: bool = False) -> pathlib.Path:
    """The local path of the model ``ref`` means (the first part of a split model), fetched into the Hugging Face
    cache when missing (``local_only``: only looked up there)."""
    from huggingface_hub import constants

    files, unlisted = None, None   # unlisted: why the repository is not listed on the Hub
    if constants.HF_HUB_OFFLINE:
        unlisted = "HF_HUB_OFFLINE is set"
    elif local_only:
        unlisted = f"run 'specframe models pull {ref}' to fetch it"
    else:
        try:
            files = _listing(ref)
        except _hub_errors() as exc:
            unlisted = f"the repository cannot be listed on Hugging Face: {_cause(exc)}"
    if files is None:   # as llama.cpp: pick among what the cache holds of the repository
        folder = _cached_snapshot(ref)
        if folder is None:
            raise ModelError(printable(f"{ref}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}); {unlisted}"))
        files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    chosen = pick_files(files, ref)
    path = _download(ref, chosen, local_only=unlisted is not None) / chosen[0]
    logger.info("%s: %s%s", ref, path, f" (part 1 of {len(chosen)})" if len(chosen) > 1 else "")
    return path


def _hub_errors() -> tuple[type[BaseException], ...]:
    """What huggingface_hub raises when the Hub cannot answer: its HTTP errors (the HTTP client's base error,
    connection errors included) and OS errors (its cache and offline errors derive from them)."""
    from huggingface_hub.errors import HTTPError

    return HTTPError, OSError


def _cause(exc: BaseException) -> str:
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if isinstance(exc, GatedRepoError):
        return "the repository is gated: accept its terms on huggingface.co and set HF_TOKEN"
    if isinstance(exc, RepositoryNotFoundError):
        return "no such repository, or a private one: set HF_TOKEN"
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__


def _listing(ref: HfRef) -> list[str]:
    from huggingface_hub import HfApi

    info = HfApi().model_info(ref.repo)
    return [s.rfilename for s in info.siblings or []]


def _cached_snapshot(ref: HfRef) -> pathlib.Path | None:
    """The cache's folder of the repository's main revision, None when it holds none. (Not snapshot_download's
    offline answer: it refuses a snapshot that holds only some of the repository's files, which is what fetching
    one model leaves.)"""
    for repo in _cached_repos():
        if repo.repo_id == ref.repo:
            return next((r.snapshot_path for r in repo.revisions if "main" in r.refs), None)
    return None


def _cached_repos() -> list:
    """The Hugging Face cache's model repositories (huggingface_hub's scan of it)."""
    from huggingface_hub import constants, scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:   # the cache named now: scan_cache_dir's default is the one named when it was imported
        return [repo for repo in scan_cache_dir(constants.HF_HUB_CACHE).repos if repo.repo_type == "model"]
    except CacheNotFound:
        return []


def _download(ref: HfRef, files: list[str], local_only: bool) -> pathlib.Path:
    """Fetch ``files`` (or find them in the cache) in one snapshot of the repository; return its folder."""
    from huggingface_hub import snapshot_download

    try:
        folder = pathlib.Path(snapshot_download(ref.repo, allow_patterns=[glob.escape(f) for f in files],
                                                local_files_only=local_only))
    except _hub_errors() as exc:
        raise ModelError(printable(f"{ref}: could not fetch {', '.join(files)}: {_cause(exc)}")) from None
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        raise ModelError(printable(f"{ref}: {', '.join(missing)} missing from {folder} after the download"))
    return folder


@dataclass(frozen=True)
class CachedModel:
    """A GGUF model in the Hugging Face cache (a split one counted whole)."""

    ref: HfRef
    filename: str       # in the repository; the first part of a split model
    parts: int
    size: int           # bytes, every part
    path: pathlib.Path


def cached_models() -> list[CachedModel]:
    """The GGUF models of the Hugging Face cache's model repositories, in every revision it holds."""
    found = []
    for repo in sorted(_cached_repos(), key=lambda r: r.repo_id):
        for revision in sorted(repo.revisions, key=lambda r: r.commit_hash):
            files = {f.file_path.relative_to(revision.snapshot_path).as_posix(): f for f in revision.files}
            for name in sorted(files):
                split = _split(name)
                if not _is_model(name) or split.index != 1:
                    continue
                parts = [files[f] for f in files if f.endswith(".gguf") and _split(f).prefix == split.prefix
                         and _split(f).count == split.count]
                found.append(CachedModel(HfRef(repo.repo_id, split.tag or None), name, len(parts),
                                         sum(p.size_on_disk for p in parts), revision.snapshot_path / name))
    return found
