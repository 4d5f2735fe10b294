"""The only package that touches libllama: a cffi binding and Pythonic wrappers around it."""

from specframe.llama._native import LlamaLibraryError, library_prefix, native
from specframe.llama.context import Batch, Context, ContextFullError, DecodeError, Segment, default_threads
from specframe.llama.kernels import (
    amx_built,
    choose_tiled_matmul,
    cpu_has_amx,
    describe_kernels,
    kernels_beside,
    system_info,
    tiled_matmul_on,
    timing_identity,
)
from specframe.llama.model import FimTokens, Model, Vocab, offload_devices

__all__ = [
    "Batch", "Context", "ContextFullError", "DecodeError", "FimTokens", "LlamaLibraryError", "Model", "Segment",
    "Vocab", "amx_built", "choose_tiled_matmul", "cpu_has_amx", "default_threads", "describe_kernels",
    "kernels_beside", "library_prefix", "native", "offload_devices", "system_info", "tiled_matmul_on",
    "timing_identity",
]
