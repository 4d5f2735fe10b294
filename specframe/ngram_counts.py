"""N-gram caches: counts of which token followed each 1- to 4-gram, counted from text or files, and their file format.

File format (version 1, little-endian), designed to be read with bounds checks and no pickle:

    offset  size          field
    0       8             magic b"SFNGRAM\\0"
    8       4             format version (uint32) = 1
    12      4             longest n-gram (uint32) = 4
    16      8             number of n-grams K (uint64)
    24      8             number of (token, count) pairs P (uint64)
    32      4             CRC-32 of everything after the header (uint32)
    36      4             reserved, 0
    40      16 K          n-grams: K x 4 int32 tokens, unused trailing slots -1
    ...     4 K           number of following tokens of each n-gram (uint32, > 0, summing to P)
    ...     8 P           pairs: int32 token (>= 0), int32 count (> 0), grouped by n-gram in n-gram order

A file whose length, counts or checksum disagree with its header is refused with a message naming it. Counts
saturate at the int32 limit instead of overflowing. Files are written atomically; ``add_to_file`` updates one
under a lock, so processes that add to the same file at once all count.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Callable, Iterable, Sequence

import numpy as np

from specframe.errors import SpecframeError
from specframe.files import atomic_write, locked

MAGIC = b"SFNGRAM\0"
VERSION = 1
NGRAM_MAX = 4
COUNT_MAX = 2**31 - 1   # counts are int32 in files: they saturate here
_HEADER = struct.Struct("<8sIIQQII")


class NgramCacheError(SpecframeError):
    """An n-gram cache file is missing, truncated, corrupt or of another version."""


class NgramCache:
    """Which token followed each n-gram, and how often."""

    def __init__(self):
        self.table: dict[tuple[int, ...], dict[int, int]] = {}

    def __len__(self) -> int:
        return len(self.table)

    def get(self, ngram: tuple[int, ...]) -> dict[int, int] | None:
        return self.table.get(ngram)

    def update(self, tokens: Sequence[int], start: int = 0, sizes: Iterable[int] = range(1, NGRAM_MAX + 1)) -> None:
        """Count, for each token at position >= ``start``, the n-grams of the given sizes that precede it."""
        table = self.table
        for size in sizes:
            for i in range(max(start, size), len(tokens)):
                part = table.get(key := tuple(tokens[i - size:i]))
                if part is None:
                    table[key] = {tokens[i]: 1}
                else:
                    part[tokens[i]] = min(part.get(tokens[i], 0) + 1, COUNT_MAX)

    def merge(self, other: "NgramCache") -> None:
        for key, part in other.table.items():
            mine = self.table.setdefault(key, {})
            for token, count in part.items():
                mine[token] = min(mine.get(token, 0) + count, COUNT_MAX)

    def cap(self, max_ngrams: int) -> None:
        """Past ``max_ngrams`` n-grams, keep the most observed three quarters of that (the first seen among
        equals), so that a cache that keeps learning stays bounded without pruning at every update."""
        if len(self.table) <= max_ngrams:
            return
        table = self.table
        ranked = sorted(table, key=lambda key: sum(table[key].values()), reverse=True)
        keep = set(ranked[:max_ngrams * 3 // 4])
        self.table = {key: part for key, part in table.items() if key in keep}

    def stats(self) -> dict:
        sizes = np.bincount([len(k) for k in self.table], minlength=NGRAM_MAX + 1)[1:]
        return {"ngrams": len(self.table), "pairs": sum(len(p) for p in self.table.values()),
                "observations": sum(sum(p.values()) for p in self.table.values()),
                "ngrams_by_size": {str(n + 1): int(c) for n, c in enumerate(sizes)}}

    # --- files ----------------------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically (a temporary file of its own renamed into place)."""
        keys = np.full((len(self.table), NGRAM_MAX), -1, dtype="<i4")
        lengths = np.empty(len(self.table), dtype="<u4")
        pairs: list[int] = []
        for row, (key, part) in enumerate(self.table.items()):
            keys[row, :len(key)] = key
            lengths[row] = len(part)
            pairs.extend(item for pair in part.items() for item in pair)
        body = keys.tobytes() + lengths.tobytes() + np.asarray(pairs, dtype="<i4").tobytes()
        header = _HEADER.pack(MAGIC, VERSION, NGRAM_MAX, len(self.table), len(pairs) // 2, zlib.crc32(body), 0)
        atomic_write(path, header + body)

    def add_to_file(self, path: str | os.PathLike, max_ngrams: int | None = None) -> None:
        """Add these counts to the cache file at ``path`` (created when missing), capped at ``max_ngrams``,
        holding its lock: another process adding to it at the same time loses nothing."""
        with locked(path):
            total = NgramCache.load(path) if os.path.exists(path) else NgramCache()
            total.merge(self)
            if max_ngrams is not None:
                total.cap(max_ngrams)
            total.save(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "NgramCache":
        name = os.fspath(path)
        try:
            with open(name, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise NgramCacheError(f"{name}: cannot read n-gram cache ({exc.strerror})") from None
        if len(data) < _HEADER.size or data[:8] != MAGIC:
            raise NgramCacheError(f"{name}: not a specframe n-gram cache (bad magic number)")
        magic, version, ngram_max, n_keys, n_pairs, crc, _ = _HEADER.unpack_from(data)
        if version != VERSION:
            raise NgramCacheError(f"{name}: n-gram cache format version {version}; this specframe reads {VERSION}")
        if ngram_max != NGRAM_MAX:
            raise NgramCacheError(f"{name}: n-grams of up to {ngram_max} tokens; expected {NGRAM_MAX}")
        expected = _HEADER.size + 16 * n_keys + 4 * n_keys + 8 * n_pairs
        if len(data) != expected:
            state = "truncated" if len(data) < expected else "has trailing data"
            raise NgramCacheError(f"{name}: {state}: {len(data)} bytes, the header announces {expected}")
        body = memoryview(data)[_HEADER.size:]
        if zlib.crc32(body) != crc:
            raise NgramCacheError(f"{name}: corrupt (checksum mismatch)")
        keys = np.frombuffer(body, dtype="<i4", count=4 * n_keys).reshape(n_keys, NGRAM_MAX)
        lengths = np.frombuffer(body, dtype="<u4", count=n_keys, offset=16 * n_keys)
        pairs = np.frombuffer(body, dtype="<i4", count=2 * n_pairs, offset=20 * n_keys).reshape(n_pairs, 2)
        if (lengths == 0).any() or int(lengths.sum(dtype=np.uint64)) != n_pairs:
            raise NgramCacheError(f"{name}: corrupt (token lists do not add up to {n_pairs} pairs)")
        if n_pairs and (pairs[:, 0].min() < 0 or pairs[:, 1].min() <= 0):
            raise NgramCacheError(f"{name}: corrupt (negative token id or non-positive count)")
        cache = cls()
        offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
        key_lists, pair_list = keys.tolist(), pairs.tolist()
        for row, key in enumerate(key_lists):
            size = NGRAM_MAX - key.count(-1)
            if size == 0 or -1 in key[:size]:
                raise NgramCacheError(f"{name}: corrupt (malformed n-gram at entry {row})")
            cache.table[tuple(key[:size])] = dict(pair_list[offsets[row]:offsets[row + 1]])
        return cache


def count_text_files(paths: Iterable[str | os.PathLike], tokenize: Callable[[str], np.ndarray],
                     sizes: Iterable[int] = (2,), progress: Callable[[int], object] = lambda n_bytes: None,
                     ) -> tuple[NgramCache, int]:
    """Count the n-grams of UTF-8 text files into a new cache; return it and the number of tokens read.

    Each file is read in chunks of about 1 MiB ended at a line break, so a corpus of any size fits in memory;
    n-grams run across chunks (not across files). ``progress`` hears the bytes of each chunk read.
    """
    cache, n_tokens, sizes = NgramCache(), 0, list(sizes)
    for path in paths:
        tail: list[int] = []                      # the last tokens, so n-grams run across chunks
        with open(path, encoding="utf-8", errors="replace") as f:
            while chunk := f.read(1 << 20):
                chunk += f.readline()             # end chunks at a line break
                tokens = tokenize(chunk).tolist()
                cache.update(tail + tokens, start=len(tail), sizes=sizes)
                tail = (tail + tokens)[-NGRAM_MAX:]
                n_tokens += len(tokens)
                progress(len(chunk.encode("utf-8", "replace")))
    return cache, n_tokens


def merge_files(paths: Iterable[str | os.PathLike]) -> NgramCache:
    """The sum of the counts of several cache files."""
    merged = NgramCache()
    for path in paths:
        merged.merge(NgramCache.load(path))
    return merged
