"""How far two token sequences agree: the one comparison behind verifying drafts, scoring them and reusing memory."""

from __future__ import annotations

import numpy as np


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens ``a`` and ``b`` share (at most the shorter's length)."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def reusable_chunks(held: np.ndarray, prompt: np.ndarray, min_chunk: int) -> tuple[int, list[tuple[int, int, int]]]:
    """What a memory holding ``held`` can keep of ``prompt`` (llama-server's --cache-reuse): the common prefix, then
    runs of at least ``min_chunk`` tokens found further on in ``held``, each moved down to follow what is kept.
    Returns (tokens kept, moves as (start in held, length, position in the prompt)); the kept tokens are always a
    prefix of ``prompt``. ``min_chunk`` 0: the common prefix alone."""
    kept = common_prefix(held, prompt)
    moves: list[tuple[int, int, int]] = []
    if min_chunk <= 0:
        return kept, moves
    source = kept
    while source < len(held) and kept < len(prompt):
        starts = np.flatnonzero(held[source:] == prompt[kept])   # only where a run can begin
        if not starts.size:
            break
        source += int(starts[0])
        n = common_prefix(held[source:], prompt[kept:])
        if n >= min_chunk:
            moves.append((source, n, kept))
            source += n
            kept += n
        else:
            source += 1
    return kept, moves
