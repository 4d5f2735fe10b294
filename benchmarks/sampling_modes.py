"""Acceptance and speed of one drafter under each acceptance rule and draft-length policy, greedy and sampled.

    python benchmarks/sampling_modes.py [--config config.example.toml] [--drafter draft-model]
        [--workload code-generation ...] [--max-tokens 128] [--seeds 3] [--temperature 0.7]

For each workload: plain decoding, then the drafter with fixed draft lengths (adaptive = false, as llama.cpp
drafts) and with cost-aware lengths (adaptive = true), at temperature 0 and at --temperature with rejection
sampling and with sample-and-match. Sampled rows are means over --seeds seeds; all runs share one process and
interleave per seed.
"""

import argparse
import dataclasses
import pathlib
import statistics

from specframe.bench.workloads import workloads
from specframe.config import load_config
from specframe.engine import Engine

HERE = pathlib.Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(HERE.parent / "config.example.toml"))
    parser.add_argument("--drafter", default="draft-model", help="the configured drafter's name")
    parser.add_argument("--workload", action="append", default=[])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--temperature", type=float, default=0.7)
    args = parser.parse_args()
    config = load_config(args.config)
    fixed = Engine(dataclasses.replace(config, speculative=dataclasses.replace(config.speculative, adaptive=False)))
    adaptive = Engine(dataclasses.replace(config, speculative=dataclasses.replace(config.speculative, adaptive=True)))
    cases = [("plain", fixed, None, dict(speculative=False))]
    for lengths, engine in (("fixed", fixed), ("adaptive", adaptive)):
        cases += [(f"{lengths}", engine, "greedy", dict(temperature=0.0)),
                  (f"{lengths}", engine, "rejection", dict(acceptance="rejection")),
                  (f"{lengths}", engine, "match", dict(acceptance="match"))]
    print(f"{'workload':16} {'temp':>4} {'lengths':8} {'acceptance':10} {'tok/s':>7} {'speedup':>7} "
          f"{'accept':>7} {'tok/pass':>8}")
    try:
        for workload in workloads(args.workload, args.max_tokens):
            for temperature in (0.0, args.temperature):
                results = {}
                for seed in range(1 if temperature == 0 else args.seeds):
                    for label, engine, mode, options in cases:
                        if (mode == "greedy") != (temperature == 0) and mode is not None:
                            continue
                        options = {"temperature": temperature, **options} if mode != "greedy" else options
                        result = engine.generate(workload.prompt, max_tokens=workload.max_tokens, seed=seed,
                                                 drafters=[args.drafter], **options)
                        results.setdefault((label, mode), []).append(result.stats)
                plain = statistics.mean(s.tokens_per_second for s in results[("plain", None)])
                for (label, mode), stats in results.items():
                    speed = statistics.mean(s.tokens_per_second for s in stats)
                    accept = sum(s.n_accepted for s in stats) / max(1, sum(s.n_drafted for s in stats))
                    per_pass = sum(s.n_generated for s in stats) / sum(s.n_target_passes for s in stats)
                    print(f"{workload.name:16} {temperature:4.1f} {label:8} {mode or '-':10} {speed:7.2f} "
                          f"{speed / plain:6.2f}x {100 * accept:6.1f}% {per_pass:8.2f}", flush=True)
    finally:
        fixed.close()
        adaptive.close()


if __name__ == "__main__":
    main()
