"""Draft models whose output layer proposes only the vocabulary's first tokens, made once and cached.

A small draft model reads its whole output matrix for every token it drafts: the 0.5B Qwen's, in Q4_0, is 77 of the
278 MB it reads a token (151,936 rows of 896). Cut to the first 32,768 rows, it drafts a token in 8.3 ms against
10.5 on a Zen 4 EPYC (llama-bench, tg64). BPE vocabularies number their tokens in merge order, commonest first:
Qwen's first 32,768 hold 97-99% of the tokens of the built-in workloads' replies. A token past the cut is never
drafted, and the target emits it itself; the output is the target's whatever the draft proposes.

llama.cpp sizes the input matrix by the same vocabulary, so it is cut alike and the draft is fed input embeddings,
not token ids: the whole input matrix is kept beside the model (``.inputs.npy``, its rows as stored, in the source's
quantization) and the rows of the tokens fed are dequantized as they are (``InputEmbeddings``). The cut model has no
tokenizer of its own (llama.cpp's type "none"): it drafts token ids for a target whose vocabulary its source shares.
"""

from __future__ import annotations

import pathlib

import numpy as np

from specframe.errors import ModelError, ParamError
from specframe.files import atomic_output
from specframe.requantized import derived

RECIPE = 1      # bumped whenever the cut model or its inputs table change: earlier copies are made again
CUT = ("token_embd.weight", "output.weight")    # the matrices with a row per token of the vocabulary


def pruned_head(source: pathlib.Path, n_head: int) -> pathlib.Path:
    """``source`` with an output layer over the vocabulary's first ``n_head`` tokens, made on first use; its
    inputs table is ``inputs_table(path)``."""
    def make(partial: pathlib.Path, destination: pathlib.Path) -> None:
        _write(source, partial, destination, n_head)

    made = derived(source, f"head{n_head}", RECIPE, make)
    if not inputs_table(made).is_file():    # deleted by hand: the model is made again
        made.unlink(missing_ok=True)
        made = derived(source, f"head{n_head}", RECIPE, make)
    return made


def inputs_table(model: pathlib.Path) -> pathlib.Path:
    """Where a cut model's whole input matrix is kept."""
    return model.with_name(f"{model.stem}.inputs.npy")


class InputEmbeddings:
    """A cut model's input embeddings of any token of its source's vocabulary, dequantized row by row."""

    def __init__(self, path: pathlib.Path):
        from gguf import GGMLQuantizationType

        table = np.load(path, mmap_mode="r")
        (name,) = table.dtype.names          # the rows' type, as gguf names it
        self._type = GGMLQuantizationType[name]
        self._rows = table[name]
        self.n_vocab = len(self._rows)

    def __call__(self, tokens: np.ndarray) -> np.ndarray:
        """(len(tokens), n_embd) float32: the input embedding of each token."""
        from gguf.quants import dequantize

        return np.ascontiguousarray(dequantize(self._rows[tokens], self._type), dtype=np.float32)


def _write(source: pathlib.Path, partial: pathlib.Path, destination: pathlib.Path, n_head: int) -> None:
    """Write the inputs table (atomically, first), then the cut model to ``partial``."""
    import gguf

    reader = gguf.GGUFReader(source)
    if int(_field(reader, "split.count", 1)) > 1:
        raise ModelError(f"{source}: a split GGUF cannot be cut (head); merge it first (llama-gguf-split --merge)")
    tensors = {t.name: t for t in reader.tensors}
    embedding = tensors.get(CUT[0])
    if embedding is None:
        raise ModelError(f"{source}: no {CUT[0]} tensor; only a model with a token embedding can be cut (head)")
    n_vocab = int(embedding.shape[-1])
    if not 0 < n_head < n_vocab:
        raise ParamError("head", f"expected fewer than the {n_vocab} tokens of {source.name}'s vocabulary (0: the "
                                 f"whole vocabulary), got {n_head}")
    rows = embedding.data.view(np.uint8).reshape(n_vocab, -1)
    with atomic_output(inputs_table(destination)) as table_partial:
        table = np.lib.format.open_memmap(table_partial, mode="w+", shape=(n_vocab,),
                                          dtype=[(embedding.tensor_type.name, np.uint8, (rows.shape[1],))])
        table[embedding.tensor_type.name] = rows
        table.flush()
        del table
    arch = str(_field(reader, "general.architecture", ""))
    writer = gguf.GGUFWriter(partial, arch)
    for name, field in reader.fields.items():
        if name.startswith(("GGUF.", "tokenizer.")) or name in ("general.architecture", f"{arch}.vocab_size"):
            continue
        kind = field.types[0]
        writer.add_key_value(name, field.contents(), kind,
                             sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    writer.add_tokenizer_model("none")
    writer.add_vocab_size(n_head)
    for tensor in reader.tensors:
        data = tensor.data[:n_head] if tensor.name in CUT else tensor.data
        writer.add_tensor(tensor.name, np.ascontiguousarray(data), raw_shape=data.shape, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _field(reader, name: str, default):
    field = reader.fields.get(name)
    return default if field is None else field.contents()
