"""Context and Batch: evaluation state (the KV memory) of one model, and the token batches fed to it."""

from __future__ import annotations

import os

import numpy as np

from specframe.errors import SpecframeError
from specframe.llama._handle import Handle
from specframe.llama._native import raise_pending_interrupt
from specframe.llama.model import Model


class ContextFullError(SpecframeError):
    """The context has no room for more tokens."""


class DecodeError(SpecframeError):
    """llama_decode failed."""


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


class Batch:
    """A llama_batch for one sequence whose token, position and output arrays are numpy views."""

    def __init__(self, model: Model, capacity: int):
        self._ffi, self._lib = model._ffi, model._lib
        self.capacity = capacity
        self._batch = self._lib.llama_batch_init(capacity, 0, 1)
        b, ffi = self._batch, self._ffi
        self.tokens = np.frombuffer(ffi.buffer(b.token, 4 * capacity), dtype=np.int32)
        self.positions = np.frombuffer(ffi.buffer(b.pos, 4 * capacity), dtype=np.int32)
        self.outputs = np.frombuffer(ffi.buffer(b.logits, capacity), dtype=np.int8)
        np.frombuffer(ffi.buffer(b.n_seq_id, 4 * capacity), dtype=np.int32)[:] = 1
        for i in range(capacity):
            b.seq_id[i][0] = 0

    def fill(self, tokens: np.ndarray, start_pos: int, all_outputs: bool) -> None:
        n = len(tokens)
        self.tokens[:n] = tokens
        self.positions[:n] = np.arange(start_pos, start_pos + n, dtype=np.int32)
        self.outputs[:n] = 1 if all_outputs else 0
        self.outputs[n - 1] = 1
        self._batch.n_tokens = n

    @property
    def struct(self):
        return self._batch

    def close(self) -> None:
        if self._batch is not None:
            self.tokens = self.positions = self.outputs = None
            self._lib.llama_batch_free(self._batch)
            self._batch = None


class Context(Handle):
    """Evaluation state of a model over one token sequence (sequence 0).

    ``decode`` feeds tokens at explicit positions and returns their logits as a numpy view into llama.cpp's
    buffer (valid until the next decode); ``truncate`` drops KV entries, which is how rejected drafts are undone.
    """

    _what = "context"

    def __init__(self, model: Model, *, n_ctx: int = 4096, n_batch: int = 512, n_threads: int | None = None,
                 n_threads_batch: int | None = None):
        """``n_threads`` evaluate single tokens; ``n_threads_batch`` (default: the same) every batch of more than
        one token, as llama.cpp uses them."""
        self._ffi, self._lib = model._ffi, model._lib
        self.model = model
        threads = n_threads or default_threads()
        params = self._lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        params.n_threads = threads
        params.n_threads_batch = n_threads_batch or threads
        params.no_perf = True
        handle = self._lib.llama_init_from_model(model.handle, params)
        if handle == self._ffi.NULL:
            raise_pending_interrupt()
            raise SpecframeError(f"llama.cpp could not create a context of {n_ctx} tokens for {model.path} "
                                 "(out of memory? try a smaller n_ctx)")
        self._handle = handle
        self._memory = self._lib.llama_get_memory(handle)
        self.n_ctx: int = self._lib.llama_n_ctx(handle)
        self.n_batch: int = self._lib.llama_n_batch(handle)
        self.n_vocab: int = model.vocab.n_tokens
        self._batch = Batch(model, self.n_batch)
        model._register_context(self)
        raise_pending_interrupt()

    def decode(self, tokens, start_pos: int, *, all_logits: bool = False) -> np.ndarray:
        """Evaluate ``tokens`` at positions ``start_pos...``; return float32 logits of shape (n_out, n_vocab):
        one row per token when ``all_logits``, else the last token's row only. Longer inputs than the batch size
        are split (then only the last token's logits can be had)."""
        tokens = np.asarray(tokens, dtype=np.int32)
        n = len(tokens)
        if n == 0:
            raise ValueError("decode needs at least one token")
        if int(tokens.min()) < 0 or int(tokens.max()) >= self.n_vocab:
            raise ValueError(f"token ids must lie in [0, {self.n_vocab})")
        if start_pos < 0 or start_pos + n > self.n_ctx:
            raise ContextFullError(f"the context is full: {start_pos + n} tokens do not fit in n_ctx={self.n_ctx}")
        if all_logits and n > self.n_batch:
            raise ValueError(f"logits for every token need at most n_batch={self.n_batch} tokens, got {n}")
        handle = self.handle
        for offset in range(0, n, self.n_batch):
            chunk = tokens[offset:offset + self.n_batch]
            self._batch.fill(chunk, start_pos + offset, all_logits)
            status = self._lib.llama_decode(handle, self._batch.struct)
            raise_pending_interrupt()
            if status == 1:
                raise ContextFullError(f"no room in the KV memory for {len(chunk)} more tokens (n_ctx={self.n_ctx})")
            if status != 0:
                raise DecodeError(f"llama_decode failed with status {status}")
        n_out = n if all_logits else 1
        raw = self._lib.llama_get_logits(handle)
        return np.frombuffer(self._ffi.buffer(raw, 4 * n_out * self.n_vocab), dtype=np.float32).reshape(n_out, self.n_vocab)

    def truncate(self, n_keep: int) -> None:
        """Keep the first ``n_keep`` positions of the KV memory and drop everything after them."""
        if not self._lib.llama_memory_seq_rm(self._memory, 0, n_keep, -1):
            raise SpecframeError(f"{self.model.path}: this model's memory cannot be rolled back to a position "
                                 "(recurrent models cannot), so it cannot verify drafts")

    def clear(self) -> None:
        self._lib.llama_memory_clear(self._memory, True)

    @property
    def n_past(self) -> int:
        """Number of positions held in the KV memory (highest position + 1)."""
        return int(self._lib.llama_memory_seq_pos_max(self._memory, 0)) + 1

    def _free(self, handle) -> None:
        self._batch.close()
        self._lib.llama_free(handle)
