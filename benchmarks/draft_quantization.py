"""How fast a draft model drafts, and how often it is right, in its own quantization and re-quantized, whole and
with its output layer cut.

    python benchmarks/draft_quantization.py [--config config.example.toml] [--drafter draft-model]
        [--types none q4_0 iq4_nl] [--heads 0 32768] [--workload code-editing ...] [--max-tokens N]

For each type (``none``: the model as published; else the draft-model ``quantize`` setting) and head (the ``head``
setting, 0: the whole vocabulary): the draft's time for
a single-token pass and a 16-token pass at a 400-token depth (medians), then, per workload, greedy runs of the
configured target with that draft alone, at fixed lengths (``adaptive = false``: acceptance and tokens per pass
are the draft's own) and cost-aware ones (the default), against plain decoding in the same process.
"""

import argparse
import dataclasses
import itertools
import pathlib
import statistics
import time

import numpy as np

from specframe.bench.workloads import workloads
from specframe.config import load_config
from specframe.engine import Engine
from specframe.llama import Context, Model, default_threads
from specframe.model_settings import ModelSettings
from specframe.models import resolve_model
from specframe.pruned_head import InputEmbeddings, inputs_table, pruned_head
from specframe.requantized import requantized

HERE = pathlib.Path(__file__).resolve().parent


def pass_times(path: pathlib.Path, threads: int, cut: bool) -> tuple[float, float]:
    """Median seconds of a single-token pass and of a 16-token pass (logits at every position); a ``cut`` model is
    fed input embeddings, as the drafter feeds it."""
    inputs = InputEmbeddings(inputs_table(path)) if cut else None

    def fed(tokens: np.ndarray) -> np.ndarray:
        return inputs(tokens) if inputs is not None else tokens

    with Model(path, ModelSettings(threads=threads)) as model:
        context = Context(model, n_ctx=1024)
        depth = 400
        context.decode(fed(np.arange(1000, 1000 + depth, dtype=np.int32)), 0)
        singles, batches = [], []
        for _ in range(3):
            for i in range(16):
                start = time.perf_counter()
                context.decode(fed(np.array([1234], dtype=np.int32)), depth + i)
                singles.append(time.perf_counter() - start)
            context.truncate(depth)
            start = time.perf_counter()
            context.decode(fed(np.full(16, 1234, dtype=np.int32)), depth, all_logits=True)
            batches.append(time.perf_counter() - start)
            context.truncate(depth)
        return statistics.median(singles), statistics.median(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(HERE.parent / "config.example.toml"))
    parser.add_argument("--drafter", default="draft-model", help="the configured draft-model drafter's name")
    parser.add_argument("--types", nargs="+", default=["none", "q4_0", "iq4_nl"])
    parser.add_argument("--heads", nargs="+", type=int, default=[0], help="output layers cut to these many tokens "
                                                                           "(0: the whole vocabulary)")
    parser.add_argument("--workload", action="append", default=[])
    parser.add_argument("--max-tokens", type=int)
    args = parser.parse_args()
    config = load_config(args.config)
    (drafter,) = [d for d in config.drafters if d.name == args.drafter]
    source = resolve_model(drafter.params.model, config.directory)
    threads = drafter.params.threads or config.target.threads or default_threads()
    print(f"{'type':14} {'workload':16} {'lengths':8} {'tok/s':>7} {'speedup':>7} {'accept':>7} {'tok/pass':>8} "
          f"{'drafting':>8}")
    for quant_type, head in itertools.product(args.types, args.heads):
        path = source if quant_type == "none" else requantized(source, quant_type)
        path = pruned_head(path, head) if head else path
        variant = f"{quant_type}/{head}" if head else quant_type
        single, batch = pass_times(path, threads, cut=bool(head))
        print(f"{variant:14} draft pass: {single * 1e3:.1f} ms for 1 token ({1 / single:.0f} tokens/s), "
              f"{batch * 1e3:.1f} ms for 16", flush=True)
        params = dataclasses.replace(drafter.params, quantize=quant_type, head=head)
        drafters = (dataclasses.replace(drafter, params=params),)
        engines = {lengths: Engine(dataclasses.replace(
            config, drafters=drafters, speculative=dataclasses.replace(config.speculative, adaptive=adaptive)))
            for lengths, adaptive in (("fixed", False), ("adaptive", True))}
        try:
            for workload in workloads(args.workload, args.max_tokens):
                plain = engines["fixed"].generate(workload.prompt, max_tokens=workload.max_tokens,
                                                  speculative=False, temperature=0.0).stats
                for lengths, engine in engines.items():
                    s = engine.generate(workload.prompt, max_tokens=workload.max_tokens, temperature=0.0).stats
                    drafting = sum(d["draft_ms"] for d in s.drafters.values()) / 1e3 / s.generation_seconds
                    print(f"{variant:14} {workload.name:16} {lengths:8} {s.tokens_per_second:7.2f} "
                          f"{s.tokens_per_second / plain.tokens_per_second:6.2f}x {100 * s.acceptance_rate:6.1f}% "
                          f"{s.tokens_per_pass:8.2f} {100 * drafting:7.1f}%", flush=True)
        finally:
            for engine in engines.values():
                engine.close()


if __name__ == "__main__":
    main()
