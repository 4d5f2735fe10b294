"""The engine's own time per target pass: what a step spends outside llama_decode, plain against speculative.

    python benchmarks/step_time.py [--config config.example.toml] [--target MODEL] [--draftless]
                                   [--workload NAME ...] [--max-tokens N] [--repeat 2]

In one engine, each workload's request runs plain and then with the config's drafters, --repeat times in turn, the
drafters made anew for each (as `specframe bench` runs them). Per run: the target passes, the milliseconds per pass
inside llama_decode and the rest, and of the rest the drafter chain's (asking its drafters, choosing the draft,
hearing the outcome); the remainder is the engine's own (sampling, verification, bookkeeping). Beside a CPU's pass
of tens of milliseconds the rest is a percent or two; beside a GPU's of about two it decides whether speculation
can pay where nothing is drafted (docs/design.md, performance method). The engine's own measure of it,
``host_ms_per_pass`` (decoding outside llama_decode, over the whole request), is shown beside. ``--target`` runs
another target under the config's drafters (a catalog name or a GGUF path: the synthetic model shows the host's
time with its caches warm, as beside a GPU; on a CPU a real model's pass evicts them, see docs/design.md);
``--draftless`` leaves out the drafters that run a model. Then the floor: the host's time a pass of a loop that
only feeds the context one token and reads its greedy choice back. Last, the single-sequence passes of all the
runs by size, each timed against what the engine's pass-cost table prices it at: where `specframe bench` models a
speedup its runs do not reach, this says whether the table or the engine's own time is off. Not a test: meaningful
on an otherwise idle machine only. A GPU run sets the layers through the environment, e.g.
SPECFRAME_TARGET__N_GPU_LAYERS=99 SPECFRAME_DRAFTER__DRAFT_MODEL__N_GPU_LAYERS=99.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time
from dataclasses import dataclass

import numpy as np

from specframe.bench.workloads import workloads
from specframe.engine import Engine
from specframe.llama import Segment
from specframe.overrides import parse_set


@dataclass
class StepTime:
    workload: str
    speculative: bool
    tokens: int
    passes: int
    decode_seconds: float
    chain_seconds: float
    wall_seconds: float
    host_ms_per_pass: float   # the engine's own statistic (RequestStats.host_ms_per_pass)

    @property
    def rest_seconds(self) -> float:
        return self.wall_seconds - self.decode_seconds

    def line(self) -> str:
        per_pass = 1e3 / max(self.passes, 1)
        return (f"{'speculative' if self.speculative else 'plain':11s} {self.workload:16s} {self.tokens:4d} tokens "
                f"{self.passes:4d} passes  ms per pass: decode {self.decode_seconds * per_pass:6.2f}  "
                f"rest {self.rest_seconds * per_pass:5.2f} (chain {self.chain_seconds * per_pass:5.2f})  "
                f"host {self.host_ms_per_pass:.3f}  ({self.wall_seconds:.2f} s)")


class DecodeTimer:
    """Counts and times the engine's target passes (its calls to llama_decode), and keeps each single-sequence
    pass's size, depth and seconds beside what the pass-cost table in use prices it at, while ``recording``: a
    request's steps, not its prompt nor the calibration that may come first (its passes priced by a table not yet
    measured read as taking a twentieth of their price)."""

    def __init__(self, engine: Engine):
        self.seconds, self.passes = 0.0, 0
        self.recording = False
        self.priced: list[tuple[int, float, float]] = []   # (tokens, seconds taken, seconds the table says)
        context = engine.context
        decode = context.decode_batch

        def timed(segments):
            start = time.perf_counter()
            try:
                return decode(segments)
            finally:
                seconds = time.perf_counter() - start
                self.seconds += seconds
                self.passes += 1
                cost = engine.calibration.cost
                if self.recording and cost is not None and len(segments) == 1 and segments[0].n_logits:
                    n = len(segments[0].tokens)
                    self.priced.append((n, seconds, cost.seconds_at(n, segments[0].start_pos)))

        context.decode_batch = timed   # type: ignore[method-assign]

    def by_size(self) -> list[str]:
        """Per size, the passes and the median of their seconds over the table's price."""
        sizes = sorted({n for n, _, _ in self.priced})
        lines = []
        for size in sizes:
            ratios = [taken / priced for n, taken, priced in self.priced if n == size and priced > 0]
            lines.append(f"{size:3d} tokens  {len(ratios):5d} passes  taken / table: median "
                         f"{statistics.median(ratios):.2f}  (quartiles {np.quantile(ratios, 0.25):.2f}-"
                         f"{np.quantile(ratios, 0.75):.2f})")
        return lines


def measure(engine: Engine, timer: DecodeTimer, workload, speculative: bool,
            drafters: list[str] | None = None) -> StepTime:
    """One request, timed from its first text on (the prompt's passes are not steps); ``drafters``: those of the
    config named (default: all)."""
    engine.forget_drafters()
    generation = engine.stream(workload.prompt, max_tokens=workload.max_tokens, temperature=0.0,
                               speculative=speculative, drafters=drafters)
    pieces = iter(generation)
    next(pieces, None)
    timer.seconds, timer.passes, timer.recording, start = 0.0, 0, True, time.perf_counter()
    for _ in pieces:
        pass
    wall = time.perf_counter() - start
    timer.recording = False
    result = generation.result
    assert result is not None
    # the chain's time of the whole request: its first step's, before the first text, is in it too (a step in 100s)
    return StepTime(workload.name, speculative, len(result.tokens), timer.passes, timer.seconds,
                    result.stats.chain_seconds, wall, result.stats.host_ms_per_pass)


def floor_ms(engine: Engine, n_passes: int = 256) -> float:
    """The least a step can spend outside the target's pass, in ms a pass: the target's context alone, fed one
    token a pass and its greedy choice read back (made on the host or the device as a plain request's would be),
    nothing drafted, committed or counted. What the engine spends beyond it is its own."""
    context, slot = engine.context, 0
    prompt = engine.prompt_tokens("Write a haiku about the sea.")
    engine.start(prompt, speculative=False)     # sets the slot's greedy choosing as a plain request does
    context.truncate(0, slot)
    context.decode(prompt[:-1], 0, seq=slot)
    token, position, outside = np.array(prompt[-1:], dtype=np.int32), len(prompt) - 1, 0.0
    start = time.perf_counter()
    for _ in range(n_passes):
        (choices,) = context.decode_batch([Segment(slot, token, position, 1)])
        outside -= context.pass_seconds
        token[0] = choices[0] if isinstance(choices, list) else int(np.argmax(choices[0]))
        position += 1
    outside += time.perf_counter() - start
    context.truncate(0, slot)
    return 1e3 * outside / n_passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=pathlib.Path, default=pathlib.Path("config.example.toml"))
    parser.add_argument("--workload", nargs="+", default=(), metavar="NAME", help="default: every built-in one")
    parser.add_argument("--max-tokens", type=int, help="token budget of every workload (default: each its own)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each (default 2)")
    parser.add_argument("--target", metavar="MODEL", help="the target instead of the config's")
    parser.add_argument("--draftless", action="store_true", help="only the config's drafters that run no model")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    overrides = [parse_set(f"target.model={json.dumps(args.target)}")] if args.target else []
    with Engine.from_config(args.config, overrides) as engine:
        timer = DecodeTimer(engine)
        chain = engine.chain()
        drafters = ([entry.label for entry in chain.entries if not entry.drafter.uses_model]
                    if args.draftless and chain is not None else None)
        engine.generate("Say hello.", max_tokens=4, temperature=0.0)    # loads, and warms the graphs up
        for _ in range(args.repeat):
            for workload in workloads(tuple(args.workload), args.max_tokens):
                for speculative in (False, True):
                    print(measure(engine, timer, workload, speculative, drafters).line(), flush=True)
        print(f"floor: {floor_ms(engine):.3f} ms a pass outside it (the context alone, one token a pass, "
              "its greedy choice read back)")
        print("single-sequence passes by size, against the pass-cost table:")
        print("\n".join(timer.by_size()))


if __name__ == "__main__":
    main()
