"""Check a fresh libllama build: load it, then evaluate a tiny quantized model (Q8_0 weights exercise the
quantized CPU kernels, the ones a wrong instruction-set choice crashes in) over several tokens in one pass and one
token a pass, which run different kernels: they must agree. An AMX build (--amx) on a CPU with AMX must also have
put weights in AMX buffers, whose multiplications only AMX kernels do."""

import sys
import tempfile

import numpy as np

from specframe.llama import (
    Context,
    Model,
    amx_built,
    cpu_has_amx,
    describe_kernels,
    library_prefix,
    system_info,
)
from specframe.testing.synthetic import write_synthetic_model

PROMPT = "hello world"   # 10 tokens: the batched kernels (AMX's tiles), where one token runs the vector ones


def say(line: str) -> None:
    print(f"[build_llama] {line}", file=sys.stderr)


def main() -> int:
    say(f"smoke test of {library_prefix()}")
    say(system_info())
    amx_here = amx_built() and cpu_has_amx()
    if amx_built() and not amx_here:
        say("AMX kernels could not be exercised here: this CPU has no amx_int8 (checking that the build runs "
            "without them)")
    with tempfile.TemporaryDirectory() as tmp:
        path = write_synthetic_model(f"{tmp}/smoke.gguf", quantize=True)
        with Model(path) as model:
            say(describe_kernels(model.weight_buffers))
            if amx_here and "AMX" not in model.weight_buffers:
                say("smoke test: an AMX build on a CPU with AMX, but llama.cpp logged no 'AMX model buffer size': "
                    "its AMX kernels did not run (Linux grants AMX to a process from 5.16 on)")
                return 1
            problem = evaluation_problem(model)
    if problem:
        say(f"smoke test: {problem}")
        return 1
    say("smoke test passed: a quantized model loads and evaluates" + (", with AMX kernels" if amx_here else ""))
    return 0


def evaluation_problem(model: Model) -> str | None:
    """What is wrong with the model's logits over PROMPT, evaluated in one pass and one token a pass; None: nothing."""
    tokens = model.vocab.tokenize(PROMPT)
    with Context(model, n_ctx=128, n_batch=32) as ctx:
        together = ctx.decode(tokens, 0, all_logits=True).copy()   # a view of llama.cpp's buffer, reused next pass
    with Context(model, n_ctx=128, n_batch=32) as ctx:
        one_by_one = np.concatenate([ctx.decode([token], position).copy() for position, token in enumerate(tokens)])
    if together.shape != (len(tokens), model.vocab.n_tokens) or not np.isfinite(together).all() \
            or not np.isfinite(one_by_one).all():
        return "the model produced invalid logits"
    apart = float(np.abs(together - one_by_one).max())
    if apart > 0.02 * float(np.ptp(together)):   # rounding differs between kernels; a wrong one is off by the range
        return (f"one pass over {len(tokens)} tokens and {len(tokens)} passes over one disagree (logits up to "
                f"{apart:.3g} apart): a kernel computes wrong values")
    return None


if __name__ == "__main__":
    sys.exit(main())
