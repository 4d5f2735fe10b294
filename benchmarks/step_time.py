"""The engine's own time per target pass: what a step spends outside llama_decode, plain against speculative.

    python benchmarks/step_time.py [--config config.example.toml] [--workload NAME ...] [--max-tokens N]
                                   [--repeat 2]

In one engine, each workload's request runs plain and then with the config's drafters, --repeat times in turn, the
drafters made anew for each (as `specframe bench` runs them). Per run: the target passes, the milliseconds per pass
inside llama_decode and the rest (sampling, verification, the drafters, choosing the draft, bookkeeping). Beside a
CPU's pass of tens of milliseconds the rest is a percent or two; beside a GPU's of about two it decides whether
speculation can pay where nothing is drafted (docs/design.md, performance method). Not a test: meaningful on an
otherwise idle machine only.
"""

from __future__ import annotations

import argparse
import pathlib
import time
from dataclasses import dataclass

from specframe.bench.workloads import workloads
from specframe.engine import Engine


@dataclass
class StepTime:
    workload: str
    speculative: bool
    tokens: int
    passes: int
    decode_seconds: float
    wall_seconds: float

    @property
    def rest_seconds(self) -> float:
        return self.wall_seconds - self.decode_seconds

    def line(self) -> str:
        per_pass = 1e3 / max(self.passes, 1)
        return (f"{'speculative' if self.speculative else 'plain':11s} {self.workload:16s} {self.tokens:4d} tokens "
                f"{self.passes:4d} passes  ms per pass: decode {self.decode_seconds * per_pass:6.2f}  "
                f"rest {self.rest_seconds * per_pass:5.2f}  ({self.wall_seconds:.2f} s)")


class DecodeTimer:
    """Counts and times the engine's target passes (its calls to llama_decode)."""

    def __init__(self, engine: Engine):
        self.seconds, self.passes = 0.0, 0
        context = engine.context
        decode = context.decode_batch

        def timed(segments):
            start = time.perf_counter()
            try:
                return decode(segments)
            finally:
                self.seconds += time.perf_counter() - start
                self.passes += 1

        context.decode_batch = timed   # type: ignore[method-assign]


def measure(engine: Engine, timer: DecodeTimer, workload, speculative: bool) -> StepTime:
    """One request, timed from its first text on (the prompt's passes are not steps)."""
    engine.forget_drafters()
    generation = engine.stream(workload.prompt, max_tokens=workload.max_tokens, temperature=0.0,
                               speculative=speculative)
    pieces = iter(generation)
    next(pieces, None)
    timer.seconds, timer.passes, start = 0.0, 0, time.perf_counter()
    for _ in pieces:
        pass
    wall = time.perf_counter() - start
    return StepTime(workload.name, speculative, len(generation.result.tokens), timer.passes, timer.seconds, wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=pathlib.Path, default=pathlib.Path("config.example.toml"))
    parser.add_argument("--workload", nargs="+", default=(), metavar="NAME", help="default: every built-in one")
    parser.add_argument("--max-tokens", type=int, help="token budget of every workload (default: each its own)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each (default 2)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    with Engine.from_config(args.config) as engine:
        timer = DecodeTimer(engine)
        engine.generate("Say hello.", max_tokens=4, temperature=0.0)    # loads, and warms the graphs up
        for _ in range(args.repeat):
            for workload in workloads(tuple(args.workload), args.max_tokens):
                for speculative in (False, True):
                    print(measure(engine, timer, workload, speculative).line(), flush=True)


if __name__ == "__main__":
    main()
