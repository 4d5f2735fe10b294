"""What a grammar costs per token on the target's vocabulary (Qwen2.5's 151,936 tokens by default), with llguidance
(specframe's engine) and with libllama's own grammar sampler.

    python benchmarks/grammar_mask.py [--model qwen2.5-coder-1.5b-instruct-q4_k_m] [--workload json-extraction]
                                      [--repeat 5]

The workload's answer is made once by plain constrained greedy decoding; then, with no model running, its tokens are
replayed through the grammar state (grammar.Constraint) and each operation timed at every position, the median over
positions and repeats: ``allows`` (is the target's best token allowed: all a greedy position needs when it is),
``masked`` (the vocabulary's mask applied to a row of logits: where it is not, and at every sampled position),
``forced`` (what the grammar drafter drafts), ``admissible`` (a 16-token draft checked, as the chain cuts drafts)
and ``advance`` (the emitted token consumed). Then the same answer through one grammar both engines read,
benchmarks/json.gbnf (any JSON object): llguidance's and libllama's ``allows`` (libllama: a one-candidate array, as
llama.cpp checks a sampled token), ``masked`` (libllama: the whole vocabulary as candidates) and ``advance``.
Not a test: run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import time

import numpy as np

from specframe.bench.runner import grammar_of
from specframe.bench.workloads import workload
from specframe.config import load_config
from specframe.engine import Engine
from specframe.grammar import Constraint, GrammarSpec
from specframe.llama.grammar_sampler import LlamaGrammar
from specframe.overrides import Override


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    parser.add_argument("--workload", default="json-extraction")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    config = load_config(None, overrides=[Override("target.model", args.model, "--model")])
    with Engine(config) as engine:
        w = workload(args.workload)
        grammar = grammar_of(engine, w.schema, w.tools)
        assert grammar is not None, f"{args.workload} has no grammar"
        answer = engine.generate(engine.prompt_tokens(w.prompt, tools=w.tools), grammar=grammar, speculative=False,
                                 max_tokens=w.max_tokens).tokens
        row = np.random.default_rng(0).standard_normal(engine.vocab.n_tokens).astype(np.float32)
        started = time.perf_counter()
        Constraint(grammar, engine.vocab)
        compile_ms = 1e3 * (time.perf_counter() - started)
        timings: dict[str, list[float]] = {}
        gbnf = (pathlib.Path(__file__).parent / "json.gbnf").read_text()
        for _ in range(args.repeat):
            schema, llguidance, llama = (Constraint(grammar, engine.vocab),
                                         Constraint(GrammarSpec("gbnf", gbnf), engine.vocab),
                                         LlamaGrammar(engine.vocab, gbnf))
            for i, token in enumerate(answer):
                draft = np.asarray(answer[i:i + 16], dtype=np.int32)
                operations = {
                    "llguidance, the schema: allows": (schema.allows, token),
                    "llguidance, the schema: masked": (schema.masked, row),
                    "llguidance, the schema: forced": (schema.forced,),
                    "llguidance, the schema: admissible (16 tokens)": (schema.admissible, draft),
                    "llguidance, the schema: advance": (schema.advance, token),
                    "llguidance, json.gbnf: allows": (llguidance.allows, token),
                    "llguidance, json.gbnf: masked": (llguidance.masked, row),
                    "llguidance, json.gbnf: advance": (llguidance.advance, token),
                    "libllama, json.gbnf: allows": (llama.allows, token),
                    "libllama, json.gbnf: masked": (llama.masked, row),
                    "libllama, json.gbnf: advance": (llama.accept, token)}
                for name, (call, *arguments) in operations.items():
                    start = time.perf_counter()
                    call(*arguments)
                    timings.setdefault(name, []).append(time.perf_counter() - start)
            llama.close()
    print(f"{args.workload} on {args.model}: {engine.vocab.n_tokens} tokens in the vocabulary, {len(answer)} positions "
          f"x {args.repeat}; grammar state made in {compile_ms:.1f} ms")
    print("| grammar engine and operation | median µs | p90 µs |\n|---|---:|---:|")
    for name, seconds in timings.items():
        print(f"| {name} | {1e6 * statistics.median(seconds):.1f} | "
              f"{1e6 * statistics.quantiles(seconds, n=10)[-1]:.1f} |")


if __name__ == "__main__":
    main()
