"""Model and Vocab: a loaded GGUF file and its tokenizer."""

from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specframe.errors import ModelError, ParamError
from specframe.files import file_problem
from specframe.llama._handle import Handle
from specframe.llama._native import captured_log, native, raise_pending_interrupt
from specframe.model_settings import NO_DEVICE, ModelSettings

VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}


# llama.cpp's -cmoe / -ncmoe: the expert weights of MoE layers (LLM_FFN_EXPS_REGEX in its common/common.h).
_EXPERTS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
_LOAD_MODES = {(True, False): "LLAMA_LOAD_MODE_AUTO", (True, True): "LLAMA_LOAD_MODE_MMAP_MLOCK",
               (False, False): "LLAMA_LOAD_MODE_NONE", (False, True): "LLAMA_LOAD_MODE_MLOCK"}   # (mmap, mlock)
# llama.cpp's load reports each buffer of weights: "load_tensors:   CPU_REPACK model buffer size =   612.00 MiB".
_WEIGHT_BUFFER = re.compile(r"(\S+) model buffer size = *([0-9.]+) MiB")


def offload_devices() -> dict[str, str]:
    """The devices of this build a model can be offloaded to (every one but the CPU): name -> description."""
    ffi, lib = native()
    return {name: ffi.string(lib.ggml_backend_dev_description(device)).decode()
            for name, device in _offload_devices().items()}


def _offload_devices() -> dict:
    """name -> ggml device, as llama.cpp's --device takes them (ggml's registry, less the CPU)."""
    ffi, lib = native()
    devices = (lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count()))
    return {ffi.string(lib.ggml_backend_dev_name(d)).decode(): d for d in devices
            if lib.ggml_backend_dev_type(d) != lib.GGML_BACKEND_DEVICE_TYPE_CPU}


def expert_patterns(settings: ModelSettings) -> list[str]:
    """The tensor name patterns whose weights ``cpu_moe`` / ``n_cpu_moe`` keep on the CPU."""
    patterns = [_EXPERTS] if settings.cpu_moe else []
    if settings.n_cpu_moe:
        patterns.append(r"blk\.(" + "|".join(map(str, range(settings.n_cpu_moe))) + ")" + _EXPERTS)
    return patterns


def model_params(settings: ModelSettings, vocab_only: bool = False) -> tuple[object, list]:
    """libllama's model parameters for ``settings``, and the C arrays they point into (keep them as long as the
    model). Raises ParamError naming the key of a setting this build cannot honour."""
    ffi, lib = native()
    params = lib.llama_model_default_params()
    keep: list = []
    params.n_gpu_layers = settings.n_gpu_layers
    params.split_mode = getattr(lib, f"LLAMA_SPLIT_MODE_{settings.split_mode.upper()}")
    params.main_gpu = settings.main_gpu
    params.load_mode = getattr(lib, _LOAD_MODES[settings.use_mmap, settings.use_mlock])
    params.use_extra_bufts = settings.use_extra_bufts
    params.vocab_only = vocab_only
    if settings.tensor_split:
        width = lib.llama_max_devices()
        if len(settings.tensor_split) > width:
            raise ParamError("tensor_split", f"this build splits over at most {width} devices, got "
                                             f"{len(settings.tensor_split)} shares")
        shares = ffi.new("float[]", width)
        shares[0:len(settings.tensor_split)] = [float(x) for x in settings.tensor_split]
        params.tensor_split = shares
        keep.append(shares)
    if settings.device:
        params.devices = _devices(settings.device, keep)
    patterns = expert_patterns(settings)
    if patterns:
        overrides = ffi.new("struct llama_model_tensor_buft_override[]", len(patterns) + 1)  # ends with {NULL, NULL}
        cpu = lib.ggml_backend_cpu_buffer_type()   # the one llama.cpp's loader compares with: CPU, extra bufts too
        for entry, pattern in zip(overrides, patterns):
            keep.append(ffi.new("char[]", pattern.encode()))
            entry.pattern, entry.buft = keep[-1], cpu
        params.tensor_buft_overrides = overrides
        keep.append(overrides)
    return params, keep


def _devices(names: list[str], keep: list):
    """A NULL-terminated array of the named offload devices (["none"]: none at all)."""
    ffi, _ = native()
    by_name = _offload_devices()
    chosen = [] if names == [NO_DEVICE] else names
    for name in chosen:
        if name not in by_name:
            available = ", ".join(f"{n} ({d})" for n, d in offload_devices().items()) or "none (a CPU-only build)"
            raise ParamError("device", f"{name!r} is not a GPU of this libllama build; available: {available}; "
                                       f"or \"{NO_DEVICE}\" for the CPU alone")
    array = ffi.new("ggml_backend_dev_t[]", [by_name[n] for n in chosen] + [ffi.NULL])
    keep.append(array)
    return array


class Model(Handle):
    """A model loaded from a GGUF file; frees itself (and its contexts) on ``close`` or at the end of a ``with``."""

    _what = "model"

    def __init__(self, path: str | os.PathLike, settings: ModelSettings | None = None, *, vocab_only: bool = False):
        """``settings``: how libllama loads it (GPU offload, loading, MoE experts) and, by default, runs its
        contexts (threads, KV cache)."""
        self._ffi, self._lib = native()
        self.path = os.fspath(path)
        self.settings = settings or ModelSettings()
        self._check_file(self.path)
        params, self._params_memory = model_params(self.settings, vocab_only)   # libllama keeps pointers into it
        with captured_log() as load_log:
            handle = self._lib.llama_model_load_from_file(self.path.encode(), params)
        if handle == self._ffi.NULL:
            raise_pending_interrupt()
            raise ModelError(f"llama.cpp could not load {self.path}: not a GGUF model this build supports "
                             "(run with --verbose to see llama.cpp's reason)")
        self._handle = handle
        self._contexts: weakref.WeakSet = weakref.WeakSet()
        # Where the weights went, MiB by ggml buffer type (CPU_REPACK, AMX, CPU_Mapped, CUDA0...): the type
        # names the kernels that multiply by them.
        self.weight_buffers: dict[str, float] = {}
        for line in load_log:
            for name, mib in _WEIGHT_BUFFER.findall(line):
                self.weight_buffers[name] = self.weight_buffers.get(name, 0.0) + float(mib)
        self.vocab = Vocab(self, self._lib.llama_model_get_vocab(handle))
        raise_pending_interrupt()

    @staticmethod
    def check(path: str | os.PathLike, settings: ModelSettings) -> None:
        """Raise what loading would raise of a missing file or of settings this build cannot honour, without
        loading: a model loaded on first use is refused when it is configured."""
        Model._check_file(path)
        model_params(settings)

    @staticmethod
    def _check_file(path: str | os.PathLike) -> None:
        problem = file_problem(path)
        if problem:
            raise ModelError(f"model file {os.fspath(path)}: {problem}")

    def _register_context(self, context) -> None:
        self._contexts.add(context)

    def _free(self, handle) -> None:
        """Free the model after every context made from it."""
        for context in list(self._contexts):
            context.close()
        self._lib.llama_model_free(handle)

    @property
    def offloaded(self) -> bool:
        """Whether some of its layers run on a GPU (which replays a graph it captured for passes of one size in a
        row, where a CPU only reuses the graph it built: pass_cost.py)."""
        settings = self.settings
        return settings.n_gpu_layers != 0 and settings.device != [NO_DEVICE] and bool(_offload_devices())

    @property
    def chat_template(self) -> str | None:
        raw = self._lib.llama_model_chat_template(self.handle, self._ffi.NULL)
        return None if raw == self._ffi.NULL else self._ffi.string(raw).decode("utf-8", "replace")

    def apply_chat_template(self, messages: Sequence[tuple[str, str]], add_assistant: bool = True) -> str:
        """Format (role, content) messages with the model's own chat template (llama.cpp's built-in set)."""
        template = self._lib.llama_model_chat_template(self.handle, self._ffi.NULL)
        if template == self._ffi.NULL:
            raise ModelError(f"{self.path} has no chat template: pass --raw to send the prompt as it is")
        keep = [(self._ffi.new("char[]", r.encode()), self._ffi.new("char[]", c.encode())) for r, c in messages]
        chat = self._ffi.new("llama_chat_message[]", len(keep))
        for item, (role, content) in zip(chat, keep):
            item.role, item.content = role, content
        size = 2 * sum(len(c) + len(r) for r, c in messages) + 1024
        for _ in range(2):
            buf = self._ffi.new("char[]", size)
            n = self._lib.llama_chat_apply_template(template, chat, len(keep), add_assistant, buf, size)
            if n < 0:
                raise ModelError(f"llama.cpp does not support the chat template of {self.path}: pass --raw")
            if n <= size:
                return self._ffi.unpack(buf, n).decode("utf-8", "replace")
            size = n + 1
        raise ModelError("chat template output kept growing")  # pragma: no cover - llama.cpp reports exact sizes


@dataclass(frozen=True)
class FimTokens:
    """The vocabulary's fill-in-the-middle tokens (None: it has no such token)."""

    pre: int | None
    suf: int | None
    mid: int | None
    pad: int | None
    rep: int | None      # opens repository-level context (a project name, then files)
    sep: int | None      # precedes each file's name

    @property
    def missing(self) -> list[str]:
        """The tokens an infill prompt needs that the vocabulary lacks."""
        return [name for name in ("pre", "suf", "mid") if getattr(self, name) is None]


def _token_or_none(token: int) -> int | None:
    return None if token < 0 else int(token)   # LLAMA_TOKEN_NULL is -1


class Vocab:
    """The tokenizer of a model: token ids <-> text."""

    def __init__(self, model: Model, handle):
        self._model = model  # keeps the model (which owns the vocab) alive
        self._ffi, self._lib = model._ffi, model._lib
        self._handle = handle
        lib = self._lib
        self.n_tokens: int = lib.llama_vocab_n_tokens(handle)
        self.type: str = VOCAB_TYPES.get(int(lib.llama_vocab_type(handle)), "unknown")
        self.bos: int = lib.llama_vocab_bos(handle)
        self.eos: int = lib.llama_vocab_eos(handle)
        self.add_bos: bool = bool(lib.llama_vocab_get_add_bos(handle))
        self.add_eos: bool = bool(lib.llama_vocab_get_add_eos(handle))
        self.fim = FimTokens(*(_token_or_none(get(handle)) for get in (
            lib.llama_vocab_fim_pre, lib.llama_vocab_fim_suf, lib.llama_vocab_fim_mid, lib.llama_vocab_fim_pad,
            lib.llama_vocab_fim_rep, lib.llama_vocab_fim_sep)))
        self._piece_buf = self._ffi.new("char[]", 256)
        # Each token's piece and end-of-generation mark, looked up once: a step's commit reads them from
        # dictionaries, not through libllama's code, which a CPU pass evicts from the caches.
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._grammar_tokenizer = None

    def incompatibility(self, draft: "Vocab") -> str | None:
        """Why ``draft`` cannot draft token ids for this (target) vocabulary, or None when it can.

        llama.cpp's rule (common_speculative_are_compatible): same vocabulary type, same BOS/EOS where they are
        added, sizes within 128, and identical token text from id 5 on.
        """
        if self.type != draft.type:
            return f"vocabulary types differ ({self.type} vs {draft.type})"
        if self.add_bos != draft.add_bos or (self.add_bos and self.bos != draft.bos):
            return f"BOS handling differs (add {self.add_bos}/{draft.add_bos}, id {self.bos}/{draft.bos})"
        if self.add_eos != draft.add_eos or (self.add_eos and self.eos != draft.eos):
            return f"EOS handling differs (add {self.add_eos}/{draft.add_eos}, id {self.eos}/{draft.eos})"
        if abs(self.n_tokens - draft.n_tokens) > 128:
            return f"vocabulary sizes differ by more than 128 ({self.n_tokens} vs {draft.n_tokens})"
        get_text, mine, theirs = self._lib.llama_vocab_get_text, self._handle, draft._handle
        string = self._ffi.string
        for token in range(5, min(self.n_tokens, draft.n_tokens)):
            if string(get_text(mine, token)) != string(get_text(theirs, token)):
                return f"token {token} differs ({self.text(token)!r} vs {draft.text(token)!r})"
        return None

    def is_eog(self, token: int) -> bool:
        """End of generation: EOS, EOT and the other tokens the model marks as ending a turn."""
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(self._lib.llama_vocab_is_eog(self._handle, token))
        return eog

    def is_control(self, token: int) -> bool:
        return bool(self._lib.llama_vocab_is_control(self._handle, token))

    def text(self, token: int) -> bytes:
        """The token's text as stored in the vocabulary (e.g. with SentencePiece's ▁ or BPE's Ġ)."""
        self._check(token)
        return self._ffi.string(self._lib.llama_vocab_get_text(self._handle, token))

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes this token stands for in output text; may be part of a multi-byte character."""
        if not special and token in self._pieces:
            return self._pieces[token]
        self._check(token)
        n = self._lib.llama_token_to_piece(self._handle, token, self._piece_buf, 256, 0, special)
        if n < 0:
            buf = self._ffi.new("char[]", -n)
            n = self._lib.llama_token_to_piece(self._handle, token, buf, -n, 0, special)
            piece = self._ffi.unpack(buf, n)
        else:
            piece = self._ffi.unpack(self._piece_buf, n)
        if not special:
            self._pieces[token] = piece
        return piece

    def grammar_tokenizer(self):
        """This vocabulary as llguidance's ``LLTokenizer`` (made once per vocabulary, a pass over every token):
        each token's bytes, control tokens and ``<...>`` user-defined ones marked special (llguidance's 0xFF
        prefix, so that grammars name them as ``<[id]>`` and free text never spells them), libllama's own
        tokenizer for the text a grammar forces, and every end-of-generation token as an EOS."""
        if self._grammar_tokenizer is None:
            from llguidance import LLTokenizer

            lib, handle = self._lib, self._handle
            special = lib.LLAMA_TOKEN_ATTR_CONTROL
            user = lib.LLAMA_TOKEN_ATTR_USER_DEFINED
            tokens, eog = [], []
            for token in range(self.n_tokens):
                data = self.piece(token, special=True)
                attr = int(lib.llama_vocab_get_attr(handle, token))
                if attr & special or (attr & user and data.startswith(b"<") and data.endswith(b">")):
                    data = b"\xff" + data
                tokens.append(data)
                if lib.llama_vocab_is_eog(handle, token):
                    eog.append(token)
            address = self._ffi.cast("uintptr_t", handle)
            tokenize = self._ffi.cast("uintptr_t", self._ffi.addressof(lib, "llama_tokenize"))
            self._grammar_tokenizer = LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
                tokens=tokens, vocab_ptr=int(address),
                tokenize_fptr=int(tokenize), eos_token=eog or [self.eos], slices=None)
        return self._grammar_tokenizer

    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = True) -> np.ndarray:
        """Text (or UTF-8 bytes) -> int32 token ids; ``add_special`` adds BOS/EOS as the model asks,
        ``parse_special`` reads markers like <|im_start|> as the special tokens they name."""
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        capacity = len(data) + 8
        out = np.empty(capacity, dtype=np.int32)
        ptr = self._ffi.from_buffer("llama_token[]", out)
        n = self._lib.llama_tokenize(self._handle, data, len(data), ptr, capacity, add_special, parse_special)
        if n < 0:
            out = np.empty(-n, dtype=np.int32)
            ptr = self._ffi.from_buffer("llama_token[]", out)
            n = self._lib.llama_tokenize(self._handle, data, len(data), ptr, -n, add_special, parse_special)
            if n < 0:
                raise ModelError(f"tokenization of {len(data)} bytes failed")
        return out[:n].copy()

    def detokenize(self, tokens, remove_special: bool = False, unparse_special: bool = False) -> str:
        """Token ids -> text, with llama.cpp's handling of leading spaces."""
        array = np.ascontiguousarray(tokens, dtype=np.int32)
        if array.size == 0:
            return ""
        self._check_array(array)
        ptr = self._ffi.from_buffer("llama_token[]", array)
        size = max(64, 8 * array.size)
        for _ in range(2):
            buf = self._ffi.new("char[]", size)
            n = self._lib.llama_detokenize(self._handle, ptr, array.size, buf, size, remove_special, unparse_special)
            if n >= 0:
                return self._ffi.unpack(buf, n).decode("utf-8", "replace")
            size = -n
        raise ModelError("detokenization failed")  # pragma: no cover - llama.cpp reports exact sizes

    def _check(self, token: int) -> None:
        if not 0 <= token < self.n_tokens:
            raise ValueError(f"token id {token} is outside the vocabulary [0, {self.n_tokens})")

    def _check_array(self, tokens: np.ndarray) -> None:
        if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= self.n_tokens):
            bad = tokens[(tokens < 0) | (tokens >= self.n_tokens)][0]
            raise ValueError(f"token id {int(bad)} is outside the vocabulary [0, {self.n_tokens})")
