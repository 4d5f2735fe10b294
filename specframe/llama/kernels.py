"""ggml's process-wide choice of CPU kernels for K-quant weights: the tiled matmul (GGML_CPU_TILED_MM); and which
kernels a build has and a model's weights get (Intel AMX: ./build_llama.sh --amx).

ggml multiplies a K-quant weight it did not repack (in a Q4_K_M model: the Q6_K output and some layers' ffn_down and
attn_v) by 8 or more rows at once with its tiled kernels. On a 2-core AMD EPYC whose ggml kernels are AVX2, with
Qwen2.5-Coder 1.5B Q4_K_M, they made a pass over 8 tokens 306 ms against 218 ms without (12: 388 against 320, 16:
399 against 356) while prompts of 64-512 tokens ran 6% faster: a draft's verification and a server's slots live in
that range. ggml reads the switch from the environment once, at the first such multiplication, so a process runs with
the choice made first.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Mapping

from specframe.llama._native import library_prefix, native
from specframe.params import forced

log = logging.getLogger("specframe.llama")

TILED_MATMUL_VARIABLE = "GGML_CPU_TILED_MM"

_chosen: bool | None = None   # settled for this process by choose_tiled_matmul


def choose_tiled_matmul(setting: str) -> bool:
    """Settle the switch for this process from ``[target] cpu_tiled_matmul`` and return whether the tiled kernels
    run. "auto": off where ggml's CPU kernels are AVX2 at most (measured slower there, see above), else what the
    environment says (ggml's default: on). A later engine of the same process asking otherwise is warned about."""
    global _chosen
    wanted = forced(setting)
    if _chosen is None:
        if wanted is None and TILED_MATMUL_VARIABLE not in os.environ and _avx2_at_most():
            wanted = False
        if wanted is not None:
            os.environ[TILED_MATMUL_VARIABLE] = "1" if wanted else "0"
            log.info("ggml's tiled matmul for K-quants %s (cpu_tiled_matmul = \"%s\")", "on" if wanted else "off",
                     setting)
        _chosen = tiled_matmul_on()
    elif wanted is not None and wanted != _chosen:
        log.warning("cpu_tiled_matmul = \"%s\" cannot take effect: this process already runs ggml's tiled matmul "
                    "%s (ggml reads %s once per process)", setting, "on" if _chosen else "off",
                    TILED_MATMUL_VARIABLE)
    return _chosen


def tiled_matmul_on() -> bool:
    """Whether this process runs the tiled kernels: as settled, else as ggml will read the environment (atoi)."""
    if _chosen is not None:
        return _chosen
    value = os.environ.get(TILED_MATMUL_VARIABLE)
    if value is None:
        return True
    number = re.match(r"\s*[+-]?\d+", value)
    return number is not None and int(number.group()) != 0


def timing_identity() -> str:
    """What a timing stored on disk depends on beyond the model and its settings: the build and the kernels."""
    return f"{library_prefix()}:tiled_matmul={'on' if tiled_matmul_on() else 'off'}"


def kernels_beside(environment: Mapping[str, str]) -> str:
    """For a benchmark's report: the kernels this process ran, and those of tools it started with ``environment``
    (llama.cpp's own: the variable as the benchmark found it, not as an engine here set it)."""
    theirs = environment.get(TILED_MATMUL_VARIABLE)
    return (f"ggml's tiled K-quant matmul {'on' if tiled_matmul_on() else 'off'} in specframe, "
            + (f"{TILED_MATMUL_VARIABLE} unset (ggml's default: on)" if theirs is None
               else f"{TILED_MATMUL_VARIABLE}={theirs}") + " for llama.cpp's tools")


def system_info() -> str:
    """libllama's line of the build's backends and their features (e.g. "CPU : ... AVX2 = 1 | ...")."""
    ffi, lib = native()
    return ffi.string(lib.llama_print_system_info()).decode()


def amx_built() -> bool:
    """Whether this build has ggml's AMX kernels (./build_llama.sh --amx)."""
    return "AMX_INT8" in _build_features()


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX-INT8, as Linux lists it (elsewhere: no)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return any(line.startswith("flags") and "amx_int8" in line.split() for line in cpuinfo)
    except OSError:
        return False


def describe_kernels(weight_buffers: Mapping[str, float]) -> str:
    """One line for a user: the ggml buffer types a model's weights went to (each names the kernels that multiply
    by them: CPU_REPACK, AMX, CPU_Mapped...) and what AMX would change."""
    weights = ", ".join(f"{name} {mib:.1f} MiB" for name, mib in weight_buffers.items()) or "none reported"
    built, here = amx_built(), cpu_has_amx()
    if built and not here:
        amx = "AMX kernels built, but this CPU has no amx_int8: ggml's other kernels run"
    elif built and "AMX" not in weight_buffers:
        amx = ("AMX kernels built, but no weights went to them (they take Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K and "
               "IQ4_XS, with use_extra_bufts on)")
    elif built:
        amx = ("AMX kernels run (--amx build): passes of several tokens cost less than without them, single "
               "tokens more (README.md, Building libllama)")
    elif here:
        amx = ("this CPU has AMX, this build has no AMX kernels: ./build_llama.sh --amx may verify drafts faster "
               "and decode single tokens slower (README.md, Building libllama)")
    else:
        return f"weights in {weights}"
    return f"weights in {weights}; {amx}"


def _build_features() -> set[str]:
    """The features this build's CPU kernels have ("AVX2", "AVX512", "AMX_INT8"...)."""
    return set(re.findall(r"(\w+) = 1", system_info()))


def _avx2_at_most() -> bool:
    """Whether the build's CPU kernels are x86's AVX2 without AVX-512."""
    features = _build_features()
    return "AVX2" in features and "AVX512" not in features
