"""Plain decoding vs each configured drafter alone vs the whole chain, on the same target, greedy, one process.

    python benchmarks/strategies.py [--config config.example.toml] [--max-tokens 192] [--repeat 1] [--json OUT]

Prints tokens/s, speedup over plain, acceptance, mean accepted length and tokens per target pass per workload.
"""

import argparse
import json
import pathlib
import statistics
import sys

from specframe.bench.workloads import workload
from specframe.engine import Engine
from specframe.lossless import compare

HERE = pathlib.Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(HERE.parent / "config.example.toml"))
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    rows = []
    with Engine.from_config(args.config) as engine:
        names = [d.name for d in engine.config.drafters]
        strategies = [("plain", None)] + [(n, [n]) for n in names] + ([("chain", names)] if len(names) > 1 else [])
        engine.generate("warm up", max_tokens=4, speculative=False)
        for name in ("code-editing", "code-generation"):
            prompt = workload(name).prompt
            plain_result = None
            for label, drafters in strategies:
                runs = []
                for _ in range(args.repeat):
                    result = engine.generate(prompt, max_tokens=args.max_tokens, speculative=drafters is not None,
                                             drafters=drafters, track_margins=drafters is None)
                    runs.append(result)
                result = runs[0]
                if drafters is None:
                    plain_result = result
                s = result.stats
                rows.append({
                    "workload": name, "strategy": label, "tokens": s.n_generated,
                    "tokens_per_second": statistics.median(r.stats.tokens_per_second for r in runs),
                    "acceptance_rate": s.acceptance_rate, "mean_accepted_length": s.mean_accepted_length,
                    "tokens_per_pass": s.tokens_per_pass,
                    "lossless": str(compare(plain_result, result, engine)) if drafters is not None else "-",
                })
                print(f"{name:16} {label:14} {rows[-1]['tokens_per_second']:6.2f} tokens/s", file=sys.stderr)
    base = {r["workload"]: r["tokens_per_second"] for r in rows if r["strategy"] == "plain"}
    print(f"{'workload':16} {'strategy':14} {'tok/s':>7} {'speedup':>8} {'accept':>7} {'acc/draft':>9} "
          f"{'tok/pass':>8}  lossless check")
    for r in rows:
        r["speedup"] = r["tokens_per_second"] / base[r["workload"]]
        print(f"{r['workload']:16} {r['strategy']:14} {r['tokens_per_second']:7.2f} {r['speedup']:7.2f}x "
              f"{100 * r['acceptance_rate']:6.1f}% {r['mean_accepted_length']:9.2f} {r['tokens_per_pass']:8.2f}  "
              f"{r['lossless']}")
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
