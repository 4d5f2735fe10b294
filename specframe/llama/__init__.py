"""The only package that touches libllama: a cffi binding and Pythonic wrappers around it."""

from specframe.llama._native import LlamaLibraryError, library_prefix, native
from specframe.llama.context import Batch, Context, ContextFullError, DecodeError, Segment, default_threads
from specframe.llama.model import Model, Vocab, offload_devices


def system_info() -> str:
    ffi, lib = native()
    return ffi.string(lib.llama_print_system_info()).decode()


__all__ = [
    "Batch", "Context", "ContextFullError", "DecodeError", "LlamaLibraryError", "Model", "Segment", "Vocab",
    "default_threads", "library_prefix", "native", "offload_devices", "system_info",
]
