"""Average time of one draft() call at a given history length, for each draftless drafter at its defaults.

    python benchmarks/draft_cost.py [--history 4096] [--model qwen2.5-coder-1.5b-instruct-q4_k_m]

The history is real Python source (the interpreter's own standard library) tokenized with the model's
vocabulary. Each drafter begins with the first history - 512 tokens as the prompt, then the history grows by
1 to 4 tokens per call, as during generation; calls are timed while the history is within 256 tokens of the
target length.
"""

import argparse
import pathlib
import sysconfig
import time

import numpy as np

from specframe.llama import Model
from specframe.models import resolve_model
from specframe.plugins import load_plugins

DRAFTLESS = ["prompt-lookup", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "suffix"]


def source_tokens(model: Model, n: int) -> np.ndarray:
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    tokens: list[int] = []
    for path in sorted(stdlib.glob("*.py")):
        tokens.extend(model.vocab.tokenize(path.read_text(errors="replace"), add_special=False).tolist())
        if len(tokens) >= n:
            return np.array(tokens[:n], dtype=np.int32)
    raise SystemExit("not enough source text")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=int, default=4096)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    args = parser.parse_args()
    types = load_plugins().drafter_types()
    rng = np.random.default_rng(0)
    with Model(resolve_model(args.model), vocab_only=True) as model:
        tokens = source_tokens(model, args.history + 256)
    print(f"{'drafter':15} {'calls':>6} {'mean us/call':>13} {'max us':>8}   (history {args.history} +- 256 tokens)")
    for name in DRAFTLESS:
        cls = types[name].cls
        drafter = cls(cls.Params(), None)
        start = args.history - 512
        drafter.begin(tokens[:start])
        length, times = start, []
        while length < len(tokens):
            t0 = time.perf_counter()
            drafter.draft(tokens[:length], 16)
            elapsed = time.perf_counter() - t0
            if abs(length - args.history) <= 256:
                times.append(elapsed)
            length += int(rng.integers(1, 5))
        print(f"{name:15} {len(times):6d} {1e6 * np.mean(times):13.1f} {1e6 * np.max(times):8.1f}")


if __name__ == "__main__":
    main()
