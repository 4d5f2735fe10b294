"""Check a fresh libllama build: load it, then evaluate a tiny quantized model (Q8_0 weights exercise the
quantized CPU kernels, the ones a wrong instruction-set choice crashes in)."""

import sys
import tempfile

import numpy as np

from specframe.llama import Context, Model, library_prefix, system_info
from specframe.testing.synthetic import write_synthetic_model


def main() -> int:
    print(f"[build_llama] smoke test of {library_prefix()}", file=sys.stderr)
    print(f"[build_llama] {system_info()}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_synthetic_model(f"{tmp}/smoke.gguf", quantize=True)
        with Model(path) as model, Context(model, n_ctx=128, n_batch=32) as ctx:
            tokens = model.vocab.tokenize("hello world")
            logits = ctx.decode(tokens, 0, all_logits=True)
            if logits.shape != (len(tokens), model.vocab.n_tokens) or not np.isfinite(logits).all():
                print("[build_llama] smoke test: the model produced invalid logits", file=sys.stderr)
                return 1
            nxt = int(np.argmax(logits[-1]))
            ctx.decode([nxt], len(tokens))
    print("[build_llama] smoke test passed: a quantized model loads and evaluates", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
