"""How far two token sequences agree: the one comparison behind verifying drafts, scoring them and reusing memory."""

from __future__ import annotations

import numpy as np

SHORT = 64   # sequences compared in Python at most this long: numpy's calls cost more on a draft's few tokens


def common_prefix(a: np.ndarray | list[int], b: np.ndarray | list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` (arrays or lists) share (at most the shorter's length)."""
    n = min(len(a), len(b))
    if n <= SHORT:
        same = 0
        for x, y in zip(_listed(a, n), _listed(b, n)):
            if x != y:
                break
            same += 1
        return same
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def _listed(tokens: np.ndarray | list[int], n: int) -> list[int]:
    """The first ``n`` of ``tokens`` as Python ints."""
    if isinstance(tokens, np.ndarray):
        return (tokens if len(tokens) <= SHORT else tokens[:n]).tolist()
    return tokens


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
