"""Models re-quantized into the layout this CPU runs fastest, made once and cached by the source's hash.

A small draft model spends most of a speculative run drafting, one token at a time. On x86, llama.cpp repacks
Q4_0 and IQ4_NL weights into its fastest matrix kernels, but K-quants only when a row holds whole 256-value
super-blocks: the 0.5B Qwen draft (hidden size 896) falls back to Q5_0 and Q8_0 there, which are not repacked.
Re-quantized into Q4_0 it drafts faster. Only the draft changes: the target verifies every token, so the output is
the target's whatever the draft.

A model in the models folder is re-quantized beside it (``requantized/``), where whoever shares that folder finds
it; any other file into specframe's cache, so that a private cache (a test's) never writes the shared folder.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Callable

from specframe.files import atomic_output, atomic_write, locked
from specframe.paths import cache_dir, models_dir


def requantized(source: pathlib.Path, quant_type: str, threads: int = 0) -> pathlib.Path:
    """``source`` re-quantized into ``quant_type`` (see specframe.llama.quantize.QUANT_TYPES), made on first use."""
    from specframe.llama.quantize import RECIPE, quantize

    return derived(source, quant_type, RECIPE, lambda partial, _: quantize(source, partial, quant_type, threads))


def derived(source: pathlib.Path, kind: str, recipe: int,
            make: Callable[[pathlib.Path, pathlib.Path], object]) -> pathlib.Path:
    """The model ``make(partial, destination)`` derives from ``source`` (writing ``partial``), made once and cached
    by the source's hash, ``kind`` and ``recipe``: it is written to a partial file and renamed, so a kill leaves no
    half-written model. Files beside it named after its stem (a table ``make`` writes there before the model) are
    the model's; an earlier recipe's model and files are removed."""
    copies = f"{source.stem}.{source_hash(source)[:16]}.{kind}."     # the name of every recipe's copy starts so
    destination = _folder(source) / f"{copies}r{recipe}.gguf"
    if destination.is_file():
        return destination
    with locked(destination):
        if not destination.is_file():                    # another process may have made it meanwhile
            with atomic_output(destination) as partial:
                make(partial, destination)
            for earlier in destination.parent.glob(f"{copies}*"):   # an earlier recipe's copy is never read again
                if not earlier.name.startswith(f"{destination.stem}.") and earlier.suffix in (".gguf", ".npy"):
                    earlier.unlink(missing_ok=True)
    return destination


def source_hash(path: pathlib.Path) -> str:
    """The sha256 of a file, remembered beside the cache by path, size and modification time."""
    stat = path.stat()
    identity = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    memo = _folder(path) / "source-hashes.json"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if identity not in known:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 24):
                digest.update(chunk)
        with locked(memo):
            try:
                known = json.loads(memo.read_text())
            except (OSError, ValueError):
                known = {}
            known[identity] = digest.hexdigest()
            atomic_write(memo, json.dumps(known, indent=1).encode())
    return known[identity]


def _folder(source: pathlib.Path) -> pathlib.Path:
    """Where re-quantized copies of ``source`` (and its remembered hash) go: beside the models folder's models,
    in specframe's cache for any other file."""
    shared = models_dir().resolve()
    return (shared if source.resolve().is_relative_to(shared) else cache_dir()) / "requantized"
