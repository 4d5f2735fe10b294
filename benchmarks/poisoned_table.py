"""Recovery from a poisoned pass-cost table: each run is a new engine, as the next run of a user would be.

    python benchmarks/poisoned_table.py [--config config.example.toml] [--workload code-editing ...]
        [--repeat 3] [--max-tokens N]

For each workload, greedy, in this order per repeat: a clean table (measured once before, as a user's is), then
each poisoned table stored in its place before the engine starts:

- ``impossible``: 4.4 s for a pass of 2 tokens and 0.08 s for one (measured while another process used the CPU);
- ``too dear``: every pass over k tokens costing 1.5 k single passes (possible, but no draft would ever pay);
- ``too cheap``: every pass costing what one over a single token does (every draft would seem to pay);
- ``slow machine``: the whole clean table three times too slow (a table taken under load, stored anyway).

Prints tokens/s (median), its ratio to the clean table's, the verified drafts, and the seconds spent measuring
the table again (apart from decoding, as the engine reports it).
"""

import argparse
import os
import pathlib
import statistics
import tempfile
import time

from specframe.bench.workloads import workloads
from specframe.drafting.pass_cost import PassCost
from specframe.engine import Engine
from specframe.llama import library_prefix
from specframe.paths import models_dir

HERE = pathlib.Path(__file__).resolve().parent


def poisons(clean: dict[int, float]) -> dict[str, dict[int, float]]:
    single = clean[1]
    return {"impossible": {1: 0.08, 2: 4.4},
            "too dear": {n: 1.5 * n * single for n in clean},
            "too cheap": {n: single for n in clean},
            "slow machine": {n: 3 * s for n, s in clean.items()}}


def store(engine: Engine, table: dict[int, float]) -> None:
    engine.pass_cost_store.path.parent.mkdir(parents=True, exist_ok=True)
    engine.pass_cost_store.path.write_text(PassCost(table, measured_at=time.time(), other_load=0.0).to_json())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(HERE.parent / "config.example.toml"))
    parser.add_argument("--workload", action="append", default=[])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-tokens", type=int)
    args = parser.parse_args()
    # A cache of its own (never the user's table), sharing only the libllama build and the models.
    os.environ.setdefault("SPECFRAME_LLAMA_PREFIX", str(library_prefix()))
    os.environ.setdefault("SPECFRAME_MODELS", str(models_dir()))
    os.environ["SPECFRAME_CACHE"] = tempfile.mkdtemp(prefix="specframe-poison-")
    with Engine.from_config(args.config) as engine:
        clean = engine.calibrate().measured
    results: dict[tuple[str, str], list] = {}
    for _ in range(args.repeat):
        for workload in workloads(args.workload or ["code-editing", "quoting"], args.max_tokens):
            for name, table in [("clean", clean), *poisons(clean).items()]:
                with Engine.from_config(args.config) as engine:
                    store(engine, table)
                    engine.generate("warm up", max_tokens=4, speculative=False)
                    stats = engine.generate(workload.prompt, max_tokens=workload.max_tokens, temperature=0.0).stats
                    results.setdefault((workload.name, name), []).append(stats)
                store(engine, clean)      # the next run starts from the clean table again
    print(f"{'workload':16} {'table':13} {'tok/s':>7} {'of clean':>8} {'drafts':>6} {'re-measured':>11}")
    for (workload, name), runs in results.items():
        speed = statistics.median(s.tokens_per_second for s in runs)
        clean_speed = statistics.median(s.tokens_per_second for s in results[(workload, "clean")])
        drafts = statistics.median(s.n_drafts for s in runs)
        calibration = statistics.median(s.calibration_seconds for s in runs)
        print(f"{workload:16} {name:13} {speed:7.2f} {speed / clean_speed:7.0%} {drafts:6.0f} {calibration:10.1f}s")


if __name__ == "__main__":
    main()
