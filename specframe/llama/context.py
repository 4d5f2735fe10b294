"""Context and Batch: evaluation state (the KV memory) of one model, and the token batches fed to it."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from specframe.errors import SpecframeError
from specframe.llama._handle import Handle
from specframe.llama._native import native, raise_pending_interrupt
from specframe.llama.model import Model
from specframe.llama.scans import as_token_ids
from specframe.model_settings import ModelSettings


class ContextFullError(SpecframeError):
    """The context has no room for more tokens."""


class DecodeError(SpecframeError):
    """llama_decode failed."""


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


_FLASH_ATTN = {"auto": "LLAMA_FLASH_ATTN_TYPE_AUTO", "on": "LLAMA_FLASH_ATTN_TYPE_ENABLED",
               "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED"}


def context_params(settings: ModelSettings, *, n_ctx: int, n_batch: int, n_seq_max: int):
    """libllama's context parameters: ``n_ctx`` tokens for each of ``n_seq_max`` sequences, with ``settings``'
    threads (0: all cores), KV cache types, Flash Attention and physical batch (0: ``n_batch``)."""
    _, lib = native()
    params = lib.llama_context_default_params()
    params.n_ctx = n_ctx * n_seq_max
    params.n_batch = n_batch
    params.n_ubatch = settings.n_ubatch or n_batch    # larger than n_batch: llama.cpp takes n_batch
    params.n_seq_max = n_seq_max
    params.n_threads = settings.threads or default_threads()
    params.n_threads_batch = settings.threads_batch or params.n_threads
    params.type_k = getattr(lib, f"GGML_TYPE_{settings.type_k.upper()}")
    params.type_v = getattr(lib, f"GGML_TYPE_{settings.type_v.upper()}")
    params.flash_attn_type = getattr(lib, _FLASH_ATTN[settings.flash_attn])
    params.kv_unified = settings.kv_unified
    params.no_perf = True
    params.n_outputs_max_per_seq = 0   # as many as n_outputs_max: a draft's verification on the device (greedy)
    return params


@dataclass(frozen=True)
class Segment:
    """Tokens of one sequence in a batch, at positions ``start_pos...``; logits are wanted for the last
    ``n_logits`` of them (0: none, as for a prompt chunk; all of them to verify a draft). ``tokens`` holds token
    ids, or a row of input embeddings per token (a model fed embeddings: specframe.pruned_head)."""

    seq: int
    tokens: np.ndarray
    start_pos: int
    n_logits: int


class Batch:
    """A llama_batch whose token, position, sequence and output arrays are numpy views (one sequence per token).
    With a ``width`` it takes input embeddings of that width instead of token ids (``tokens`` is then
    (capacity, width) float32)."""

    def __init__(self, model: Model, capacity: int, width: int = 0):
        self._ffi, self._lib = model._ffi, model._lib
        self.capacity = capacity
        self._batch = self._lib.llama_batch_init(capacity, width, 1)
        b, ffi = self._batch, self._ffi
        self._address = ffi.addressof(b)
        if width:
            self.tokens = np.frombuffer(ffi.buffer(b.embd, 4 * capacity * width), dtype=np.float32)
            self.tokens = self.tokens.reshape(capacity, width)
        else:
            self.tokens = np.frombuffer(ffi.buffer(b.token, 4 * capacity), dtype=np.int32)
        self.positions = np.frombuffer(ffi.buffer(b.pos, 4 * capacity), dtype=np.int32)
        self.outputs = np.frombuffer(ffi.buffer(b.logits, capacity), dtype=np.int8)
        np.frombuffer(ffi.buffer(b.n_seq_id, 4 * capacity), dtype=np.int32)[:] = 1
        # Each token's sequence id lives in an array of its own; point them all into one numpy array instead (the
        # originals are put back before llama_batch_free frees them).
        self.seqs = np.zeros(capacity, dtype=np.int32)
        seqs = ffi.from_buffer("llama_seq_id[]", self.seqs)
        self._own_seq_ids = [b.seq_id[i] for i in range(capacity)]
        for i in range(capacity):
            b.seq_id[i] = seqs + i
        self._seqs_buffer = seqs

    def fill(self, segments: list[Segment], n_vocab: int) -> int:
        """Lay the segments out one after another; return the number of tokens. A ValueError names a token id
        outside [0, ``n_vocab``)."""
        if self.tokens.ndim == 1:    # token ids: in C (hot_loops.c), a call per segment
            n = 0
            for s in segments:
                tokens = self._ffi.from_buffer("llama_token[]", as_token_ids(s.tokens))
                n = self._lib.specframe_batch_put(self._address, n, tokens, len(s.tokens), s.start_pos, s.seq,
                                                  s.n_logits, n_vocab)
                if n < 0:
                    raise ValueError(f"token ids must lie in [0, {n_vocab})")
            return n
        n = 0
        for s in segments:
            end = n + len(s.tokens)
            self.tokens[n:end] = s.tokens
            self.positions[n:end] = np.arange(s.start_pos, s.start_pos + len(s.tokens), dtype=np.int32)
            self.seqs[n:end] = s.seq
            self.outputs[n:end] = 0
            self.outputs[end - s.n_logits:end] = 1
            n = end
        self._batch.n_tokens = n
        return n

    @property
    def struct(self):
        return self._batch

    def close(self) -> None:
        if self._batch is not None:
            for i, own in enumerate(self._own_seq_ids):
                self._batch.seq_id[i] = own
            del self.tokens, self.positions, self.outputs, self.seqs, self._seqs_buffer   # views of freed memory
            del self._address
            self._lib.llama_batch_free(self._batch)
            self._batch = None


class Context(Handle):
    """Evaluation state of a model over ``n_seq_max`` token sequences (0, 1, ...), each of up to ``n_ctx`` tokens.

    ``decode`` feeds one sequence's tokens at explicit positions and ``decode_batch`` several sequences' in one
    pass; both return logits as numpy views into llama.cpp's buffer (valid until the next decode). ``truncate``
    drops a sequence's KV entries from a position on, which is how rejected drafts are undone. A sequence whose
    greedy choice is made on the device or the host (``choose_on_device``, ``choose_on_host``) gets each row's
    chosen token instead of its logits.
    """

    _what = "context"

    def __init__(self, model: Model, *, n_ctx: int = 4096, n_batch: int = 512, n_seq_max: int = 1,
                 settings: ModelSettings | None = None):
        """``n_ctx`` is per sequence; ``settings`` (default: the model's) gives the threads, the KV cache types,
        Flash Attention and the physical batch size.

        Each sequence has a KV buffer of its own, so a sequence's logits do not depend on what the others hold
        (a shared buffer makes attention sum over every sequence's cells, masked, and changes its rounding).
        llama.cpp evaluates a batch over several sequences in parts in which each has as many tokens, e.g. a
        sequence verifying 16 drafted tokens beside three verifying one in two: 4 x 1 tokens, then 15. With
        ``settings.kv_unified`` the sequences share one buffer and a batch is evaluated whole (``one_batch``)."""
        self._ffi, self._lib = model._ffi, model._lib
        self.model = model
        settings = settings or model.settings
        params = context_params(settings, n_ctx=n_ctx, n_batch=n_batch, n_seq_max=n_seq_max)
        handle = self._lib.llama_init_from_model(model.handle, params)
        if handle == self._ffi.NULL:
            raise_pending_interrupt()
            raise SpecframeError(f"llama.cpp could not create a context of {n_seq_max} x {n_ctx} tokens for "
                                 f"{model.path} (out of memory? try a smaller n_ctx; run with --verbose to see "
                                 "llama.cpp's reason)")
        self._handle = handle
        self._kv_memory = self._lib.llama_get_memory(handle)
        self.n_seq_max = n_seq_max
        self.one_batch: bool = n_seq_max == 1 or settings.kv_unified   # not in parts
        self.n_ctx: int = self._lib.llama_n_ctx(handle) // n_seq_max   # llama.cpp rounds it up (to 256)
        self.n_batch: int = self._lib.llama_n_batch(handle)
        self.n_ubatch: int = self._lib.llama_n_ubatch(handle)
        self.n_threads: int = self._lib.llama_n_threads(handle)
        self.n_threads_batch: int = self._lib.llama_n_threads_batch(handle)
        self.n_vocab: int = model.vocab.n_tokens
        self._batch = Batch(model, self.n_batch)
        self._embedding_batch: Batch | None = None    # made on the first decode of input embeddings
        self._device_samplers: dict[int, object] = {}   # sequence -> its greedy sampler chain in the graph
        self._host_choosers: set[int] = set()             # sequences whose greedy choices the host makes
        self._no_rows = np.empty((0, self.n_vocab), dtype=np.float32)   # a segment that asked for no logits
        self._choices = self._ffi.new("int32_t[]", self.n_batch)    # a segment's choices made on the host
        self.pass_seconds = 0.0     # the last decode_batch's time in llama_decode, its results waited for
        model._register_context(self)
        raise_pending_interrupt()

    def decode(self, tokens, start_pos: int, *, all_logits: bool = False, seq: int = 0):
        """Evaluate ``tokens`` of sequence ``seq`` at positions ``start_pos...``; return float32 logits of shape
        (n_out, n_vocab): one row per token when ``all_logits``, else the last token's row only (for a sequence
        whose greedy choices are made as the pass ends, those choices: ``decode_batch``). Longer inputs than the
        batch size are split (then only the last token's logits can be had). ``tokens``: token ids, or a (n, n_embd)
        array of input embeddings."""
        tokens = np.asarray(tokens, dtype=np.float32 if np.ndim(tokens) == 2 else np.int32)
        n = len(tokens)
        if n == 0:
            raise ValueError("decode needs at least one token")
        if all_logits and n > self.n_batch:
            raise ValueError(f"logits for every token need at most n_batch={self.n_batch} tokens, got {n}")
        self._check_room(start_pos, n)
        for offset in range(0, n, self.n_batch):
            chunk = tokens[offset:offset + self.n_batch]
            (logits,) = self.decode_batch([Segment(seq, chunk, start_pos + offset, len(chunk) if all_logits else 1)])
        return logits

    def choose_on_device(self, seq: int, on: bool) -> None:
        """Make sequence ``seq``'s greedy choice (the argmax of each row of logits) part of the model's graph, or
        stop. Its rows then never leave the device: on a GPU, copying the logits of a 16-token verification out
        and scanning them on the host costs as much as half a pass. The choice is the same token either way, a
        row's first largest logit. A change takes effect at the next decode, which first re-plans the graph."""
        if on == (seq in self._device_samplers):
            return
        lib = self._lib
        if on:
            chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
            if not lib.llama_set_sampler(self.handle, seq, chain):   # this backend cannot: rows come out as before
                lib.llama_sampler_free(chain)
                return
            self._device_samplers[seq] = chain
        else:
            lib.llama_set_sampler(self.handle, seq, self._ffi.NULL)
            lib.llama_sampler_free(self._device_samplers.pop(seq))

    def chooses_on_device(self, seq: int) -> bool:
        return seq in self._device_samplers

    def choose_on_host(self, seq: int, on: bool) -> None:
        """Have sequence ``seq``'s greedy choices made on the host as each pass ends, in C (hot_loops.c), where the
        device does not make them (``choose_on_device``): its rows then come out as token ids too, the same
        choice, a row's first largest logit, up to the first row whose choice differs from the token fed after it
        (greedy verification keeps nothing past it)."""
        if on:
            self._host_choosers.add(seq)
        else:
            self._host_choosers.discard(seq)

    def chooses_on_host(self, seq: int) -> bool:
        return seq in self._host_choosers

    def decode_batch(self, segments: list[Segment]) -> list:
        """Evaluate every segment in one llama_decode; return each segment's logits, (n_logits, n_vocab), a view
        valid until the next decode, or for a sequence that makes its greedy choice on the device or the host, its
        rows' choices, a list of token ids (``choose_on_host``: up to the first that differs from the next token)."""
        n = 0
        embedded = segments[0].tokens.ndim == 2
        for s in segments:
            if len(s.tokens) == 0:
                raise ValueError("decode needs at least one token")
            if (s.tokens.ndim == 2) != embedded:
                raise ValueError("a batch holds either token ids or input embeddings, not both")
            if not 0 <= s.seq < self.n_seq_max:
                raise ValueError(f"sequence {s.seq} is not in [0, {self.n_seq_max})")
            self._check_room(s.start_pos, len(s.tokens))
            n += len(s.tokens)
        if n > self.n_batch:
            raise ValueError(f"a batch holds at most n_batch={self.n_batch} tokens, got {n}")
        handle = self.handle
        batch = self._batch_of_embeddings(segments[0].tokens.shape[1]) if embedded else self._batch
        batch.fill(segments, self.n_vocab)
        started = time.perf_counter()
        status = self._lib.llama_decode(handle, batch.struct)
        raise_pending_interrupt()
        if status == 1:
            raise ContextFullError(f"no room in the KV memory for {n} more tokens (n_ctx={self.n_ctx})")
        if status != 0:
            raise DecodeError(f"llama_decode failed with status {status}")
        raw = self._lib.llama_get_logits(handle)     # waits for a GPU to finish the pass
        self.pass_seconds = time.perf_counter() - started
        outputs: list = []
        rows = None
        row = end = 0
        for s in segments:
            end += len(s.tokens)
            if not s.n_logits:
                outputs.append(self._no_rows)
            elif s.seq in self._device_samplers:
                sampled = self._lib.llama_get_sampled_token_ith
                outputs.append([sampled(handle, i) for i in range(end - s.n_logits, end)])
            elif s.seq in self._host_choosers:
                following = self._ffi.NULL if embedded else batch.struct.token + end - s.n_logits + 1
                chosen = self._lib.specframe_greedy_choices(raw + row * self.n_vocab, s.n_logits, self.n_vocab,
                                                            following, self._choices)
                outputs.append(self._ffi.unpack(self._choices, chosen))
            else:
                if rows is None:
                    n_out = sum(segment.n_logits for segment in segments)
                    rows = np.frombuffer(self._ffi.buffer(raw, 4 * n_out * self.n_vocab), dtype=np.float32)
                    rows = rows.reshape(n_out, self.n_vocab)
                outputs.append(rows[row:row + s.n_logits])
            row += s.n_logits
        return outputs

    def _batch_of_embeddings(self, width: int) -> Batch:
        if self._embedding_batch is None:
            self._embedding_batch = Batch(self.model, self.n_batch, width)
        if self._embedding_batch.tokens.shape[1] != width:
            raise ValueError(f"input embeddings of {self.model.path} are {self._embedding_batch.tokens.shape[1]} "
                             f"wide, got {width}")
        return self._embedding_batch

    def _check_room(self, start_pos: int, n: int) -> None:
        if start_pos < 0 or start_pos + n > self.n_ctx:
            raise ContextFullError(f"the context is full: {start_pos + n} tokens do not fit in n_ctx={self.n_ctx}")

    def truncate(self, n_keep: int, seq: int = 0) -> None:
        """Keep the first ``n_keep`` positions of sequence ``seq`` in the KV memory and drop everything after."""
        if not self._lib.llama_memory_seq_rm(self._memory, seq, n_keep, -1):
            raise SpecframeError(f"{self.model.path}: this model's memory cannot be rolled back to a position "
                                 "(recurrent models cannot), so it cannot verify drafts")

    @property
    def can_move(self) -> bool:
        """Whether held positions can be moved (``move``): not in recurrent models' memory."""
        return bool(self._lib.llama_memory_can_shift(self._memory))

    def move(self, seq: int, start: int, n: int, to: int) -> None:
        """Move sequence ``seq``'s positions ``[start, start + n)`` down to ``[to, to + n)``, dropping what held
        ``[to, start)``: their keys are rotated to the new positions (at the next decode), not evaluated again."""
        if not 0 <= to < start:
            raise ValueError(f"positions move down only: {start} -> {to}")
        lib = self._lib
        lib.llama_memory_seq_rm(self._memory, seq, to, start)
        lib.llama_memory_seq_add(self._memory, seq, start, start + n, to - start)

    @property
    def _memory(self):
        """The KV memory, reached through ``handle``: a closed context raises, its memory being freed with it."""
        return self._kv_memory if self.handle is not None else None

    def clear(self) -> None:
        self._lib.llama_memory_clear(self._memory, True)

    def positions(self, seq: int = 0) -> int:
        """Number of positions of sequence ``seq`` held in the KV memory (its highest position + 1)."""
        return int(self._lib.llama_memory_seq_pos_max(self._memory, seq)) + 1

    @property
    def n_past(self) -> int:
        return self.positions(0)

    def _free(self, handle) -> None:
        self._batch.close()
        if self._embedding_batch is not None:
            self._embedding_batch.close()
        self._lib.llama_free(handle)
        for chain in self._device_samplers.values():    # the context used them to its end
            self._lib.llama_sampler_free(chain)
        self._device_samplers.clear()
