"""Re-quantizing a GGUF model with libllama's own quantizer (llama_model_quantize)."""

from __future__ import annotations

import os

from specframe.errors import ModelError
from specframe.llama._native import native

# Target types a model may be re-quantized into: those x86 CPUs repack into their fastest matrix kernels
# (Q4_0, IQ4_NL), and Q8_0.
QUANT_TYPES = {"q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "iq4_nl": "LLAMA_FTYPE_MOSTLY_IQ4_NL",
               "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0"}
# Which tensors quantize() re-quantizes, and how: bumped whenever that changes, so that copies made by an earlier
# recipe are made again rather than reused (specframe.requantized names them by it).
RECIPE = 2


def quantize(source: str | os.PathLike, destination: str | os.PathLike, quant_type: str, threads: int = 0) -> None:
    """Write ``source`` re-quantized into ``quant_type`` (a key of QUANT_TYPES) to ``destination``: every matrix,
    already quantized ones too (allow_requantize), the output one included. A small model reads its output matrix
    for every token it drafts: the 0.5B Qwen's, left in Q8_0, is 145 of the 345 MB it reads per token, and in Q4_0
    the model drafts about a fifth faster, its drafts as often right."""
    if quant_type not in QUANT_TYPES:
        raise ModelError(f"quantization type {quant_type!r}: expected one of {', '.join(QUANT_TYPES)}")
    ffi, lib = native()
    params = ffi.new("llama_model_quantize_params *", lib.llama_model_quantize_default_params())
    params.nthread = threads
    params.ftype = getattr(lib, QUANT_TYPES[quant_type])
    params.allow_requantize = True
    params.quantize_output_tensor = True
    params.pure = True                       # every other tensor in the one type: no slower fallbacks
    status = lib.llama_model_quantize(os.fsencode(source), os.fsencode(destination), params)
    if status != 0:
        raise ModelError(f"llama.cpp could not re-quantize {source} into {quant_type} (status {status}; run with "
                         "--verbose to see its reason)")
