"""libllama's own grammar sampler (``llama_sampler_init_grammar``), bound to be measured beside llguidance
(benchmarks/grammar_mask.py): at each position it judges a candidate array of the whole vocabulary."""

from __future__ import annotations

import numpy as np

from specframe.errors import ModelError
from specframe.llama._handle import Handle
from specframe.llama.model import Vocab

_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


class LlamaGrammar(Handle):
    """A GBNF grammar's state in libllama, over ``vocab``; ``masked`` a row of logits, ``accept`` the emitted token."""

    _what = "grammar sampler"

    def __init__(self, vocab: Vocab, gbnf: str, root: str = "root"):
        self._ffi, self._lib = vocab._ffi, vocab._lib
        self._vocab = vocab      # keeps the model alive
        handle = self._lib.llama_sampler_init_grammar(vocab._handle, gbnf.encode(), root.encode())
        if handle == self._ffi.NULL:
            raise ModelError("llama.cpp could not parse the grammar (run with --verbose for its reason)")
        self._handle = handle
        self._data = self._ffi.new("llama_token_data[]", vocab.n_tokens)
        self._rows = np.frombuffer(self._ffi.buffer(self._data), dtype=_TOKEN_DATA)
        self._array = self._ffi.new("llama_token_data_array *")

    def _free(self, handle) -> None:
        self._lib.llama_sampler_free(handle)

    def masked(self, row: np.ndarray) -> np.ndarray:
        """``row`` with every token the grammar forbids here at -inf, as llama.cpp's sampler leaves it."""
        self._rows["id"] = np.arange(row.size, dtype=np.int32)
        self._rows["logit"] = row
        self._array.data, self._array.size, self._array.selected, self._array.sorted = self._data, row.size, -1, False
        self._lib.llama_sampler_apply(self.handle, self._array)
        return self._rows["logit"].copy()

    def allows(self, token: int) -> bool:
        """Whether the grammar allows ``token`` here: a one-candidate array, as llama.cpp checks a sampled token."""
        self._rows[0] = (token, 0.0, 0.0)
        self._array.data, self._array.size, self._array.selected, self._array.sorted = self._data, 1, -1, False
        self._lib.llama_sampler_apply(self.handle, self._array)
        return bool(np.isfinite(self._rows["logit"][0]))

    def accept(self, token: int) -> None:
        self._lib.llama_sampler_accept(self.handle, token)
