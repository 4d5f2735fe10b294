"""Scans over token and logit arrays that run at every step, in C (hot_loops.c): after a CPU pass numpy's code is
out of the caches, and a scan of a few numpy calls cost more than the drafter that asked for it."""

from __future__ import annotations

import numpy as np

from specframe.llama._native import native

_TOKEN_ID = np.dtype(np.int32)


def as_token_ids(tokens: np.ndarray) -> np.ndarray:
    """``tokens`` as C reads them, contiguous int32: copied only where they are not so already (the engine's and
    the drafters' arrays are)."""
    if tokens.dtype is not _TOKEN_ID or not tokens.flags.c_contiguous:
        return np.ascontiguousarray(tokens, dtype=_TOKEN_ID)
    return tokens


def context_match(tokens: np.ndarray, next_token: int, longest: int) -> int:
    """The longest k <= ``longest`` such that the last k of ``tokens`` were followed by ``next_token`` earlier in
    them (0: not even the last one was)."""
    ffi, lib = native()
    return lib.specframe_context_match(ffi.from_buffer("llama_token[]", as_token_ids(tokens)), len(tokens),
                                       next_token, longest)


def greedy_choices(rows: np.ndarray, drafted: np.ndarray) -> list[int]:
    """The rows' greedy choices (each row's first largest logit) up to the first that is not the drafted token
    after it (row i is followed by ``drafted[i]``): greedy verification keeps nothing past it."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    ffi, lib = native()
    out = ffi.new("int32_t[]", len(rows))
    chosen = lib.specframe_greedy_choices(ffi.from_buffer("float[]", rows), len(rows), rows.shape[1],
                                          ffi.from_buffer("llama_token[]", as_token_ids(drafted)), out)
    return ffi.unpack(out, chosen)


def top2_margins(rows: np.ndarray) -> list[float]:
    """Each row's largest logit less its second largest: how close its greedy choice was to a tie. (numpy's
    partition took 0.8 ms a row of Qwen2.5's 151936 logits, a traced run's every token.)"""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    ffi, lib = native()
    out = ffi.new("float[]", len(rows))
    lib.specframe_top2_margins(ffi.from_buffer("float[]", rows), len(rows), rows.shape[1], out)
    return ffi.unpack(out, len(rows))
