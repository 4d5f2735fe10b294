"""How libllama runs a model: threads, GPU offload, KV cache, loading, MoE experts (llama.cpp's -t, -ngl, -ctk, ...).

One set of keys for the target (``[target]``) and for every drafter that runs a model (a ``draft-model`` table):
both config dataclasses inherit ``ModelSettings``, and specframe.llama turns it into libllama's model and context
parameters in one place. A drafter's table leaves out what it takes from the target (the loader fills those in).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from specframe.errors import ParamError
from specframe.params import AUTO_ON_OFF, INT32_MAX, MAX_THREADS, param

KV_CACHE_TYPES = ("f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")   # llama.cpp's -ctk set
QUANTIZED_KV_CACHE_TYPES = KV_CACHE_TYPES[3:]
SPLIT_MODES = ("layer", "none", "row")
MAX_DEVICES = 16          # llama_max_devices(): how many GPUs llama.cpp's tensor_split describes
MAX_MOE_LAYERS = 4096     # more layers than any model has; each is one alternative in one pattern
NO_DEVICE = "none"        # device = ["none"]: no GPU at all, as llama.cpp's --device none


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """The hardware settings of one model and its context."""

    threads: int = param(0, min=0, max=MAX_THREADS,
                         help="CPU threads for single-token passes (0: all cores; at most 4 per core)")
    threads_batch: int = param(0, min=0, max=MAX_THREADS, help="CPU threads for passes over several tokens "
                                                                "(0: threads)")
    n_gpu_layers: int = param(0, min=-1, max=INT32_MAX, help="layers to offload to the GPU (-1: all)")
    main_gpu: int = param(0, min=0, max=MAX_DEVICES - 1, help="the GPU that holds the model when split_mode = "
                                                             "\"none\" (an index into the GPUs used)")
    split_mode: str = param("layer", choices=SPLIT_MODES,
                            help="how to spread the model over several GPUs: by layers, by rows, or none "
                                 "(main_gpu only)")
    tensor_split: list[float] = param([], help="the share of the model each GPU gets, e.g. [3, 1] (empty: by "
                                               "free memory)")
    device: list[str] = param([], help="the GPUs to offload to, by name (e.g. [\"CUDA0\"]; [\"none\"]: no GPU; "
                                       "empty: every GPU)")
    type_k: str = param("f16", choices=KV_CACHE_TYPES, help="KV cache type of the keys")
    type_v: str = param("f16", choices=KV_CACHE_TYPES,
                        help="KV cache type of the values (a quantized one needs flash_attn)")
    flash_attn: str = param("auto", choices=AUTO_ON_OFF, help="Flash Attention (auto: where the device has it)")
    n_ubatch: int = param(0, min=0, max=INT32_MAX, help="physical batch: most tokens computed at once "
                                                         "(0: the batch size)")
    kv_unified: bool = param(False, help="one KV buffer for every slot (llama.cpp's --kv-unified): a pass over "
                                         "several sequences runs as one batch instead of in parts of equal "
                                         "lengths, faster beside other slots, but a sequence's logits then "
                                         "round as the others' cells fall")
    use_mmap: bool = param(True, help="map the model file into memory instead of reading it")
    use_mlock: bool = param(False, help="lock the model's weights in RAM (never swapped out)")
    use_extra_bufts: bool = param(True, help="repack CPU weights into the layouts of the fastest kernels")
    cpu_moe: bool = param(False, help="keep every MoE expert weight on the CPU")
    n_cpu_moe: int = param(0, min=0, max=MAX_MOE_LAYERS,
                           help="keep the MoE expert weights of the first N layers on the CPU")

    def __post_init__(self):
        if len(self.tensor_split) > MAX_DEVICES:
            raise ParamError("tensor_split", f"expected at most {MAX_DEVICES} shares (one per GPU), got "
                                             f"{len(self.tensor_split)}")
        for share in self.tensor_split:
            if not (math.isfinite(share) and share >= 0):
                raise ParamError("tensor_split", f"expected shares >= 0, got {share!r}")
        if NO_DEVICE in self.device and len(self.device) > 1:
            raise ParamError("device", f"\"{NO_DEVICE}\" means no GPU and stands alone, got {self.device!r}")
        if len(set(self.device)) < len(self.device):
            raise ParamError("device", f"names a GPU twice: {self.device!r}")
        gpus = [] if self.device == [NO_DEVICE] else self.device
        if self.split_mode == "none" and gpus and self.main_gpu >= len(gpus):
            raise ParamError("main_gpu", f"{self.main_gpu} is not an index into device = {self.device!r}; expected "
                                         f"main_gpu <= {len(gpus) - 1}")
        if self.type_v in QUANTIZED_KV_CACHE_TYPES and self.flash_attn == "off":
            raise ParamError("type_v", f"a quantized V cache ({self.type_v!r}) needs Flash Attention; expected "
                                       "flash_attn = \"on\" or \"auto\", or an unquantized type_v")

    def settings_table(self) -> dict:
        """These settings as config keys, out of a config dataclass that inherits them: what a drafter's table
        starts from before its own keys."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(ModelSettings)}
