"""ggml's process-wide choice of CPU kernels for K-quant weights: the tiled matmul (GGML_CPU_TILED_MM).

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


def _avx2_at_most() -> bool:
    """Whether the build's CPU kernels are x86's AVX2 without AVX-512."""
    features = set(re.findall(r"(\w+) = 1", system_info()))
    return "AVX2" in features and "AVX512" not in features
