"""Benchmark runs: plain decoding, each configured drafter alone, the whole chain and the oracle, greedy, on the
same target and workloads, repeats interleaved so that drifts of the machine hit all strategies alike."""

from __future__ import annotations

import multiprocessing
import resource
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from specframe.bench.oracle import oracle_chain, settled_reference
from specframe.bench.workloads import Workload
from specframe.config import Config
from specframe.drafting.pass_cost import PassCost
from specframe.engine import Engine
from specframe.errors import SpecframeError
from specframe.results import GenerationResult
from specframe.testing.lossless import compare

PLAIN, CHAIN, ORACLE = "plain", "chain", "oracle"


@dataclass
class BenchRow:
    workload: str
    strategy: str
    tokens: int                          # generated tokens (the first run)
    tokens_per_second: float             # median over repeats
    spread: float | None                 # half the repeats' range of tokens/s, over their median (None: one run)
    speedup: float                       # over plain decoding
    modeled_speedup: float               # the same, each run's passes priced by the pass-cost table (no noise)
    oracle_fraction: float | None        # speedup / the oracle's speedup
    acceptance_rate: float | None
    mean_accepted_length: float | None   # accepted tokens per draft that went to the target
    passes_per_token: float              # target forward passes per generated token
    drafting_share: float                # share of generation time the drafter chain took (its drafters' calls too)
    peak_rss_mib: float                  # peak resident memory of the strategy's process during its runs
    lossless: str                        # the first run against plain greedy output (docs/design.md)

    def as_dict(self) -> dict:
        return asdict(self)


def strategies(config: Config) -> list[str]:
    """Plain, each configured drafter alone, the chain when there are several, and the oracle."""
    names = [d.name for d in config.drafters]
    return [PLAIN, *names, *([CHAIN] if len(names) > 1 else []), ORACLE]


def run_bench(config: Config, workloads: list[Workload], repeat: int = 1,
              progress: Callable[[str], None] = lambda label: None) -> tuple[list[BenchRow], PassCost]:
    """Measure every strategy on every workload; ``progress`` is called after each run with its label. Return the
    rows and the pass-cost table that priced the modeled speedups.

    Each strategy runs in a process of its own, so that the peak memory measured is its own (a draft model's
    weights, an n-gram pool), while the runs of all strategies still interleave. The processes start one after
    another: loads, warm-up passes and the pass-cost calibration of several at once would time each other."""
    names = strategies(config)
    processes: dict[str, StrategyProcess] = {}
    try:
        for name in names:
            processes[name] = StrategyProcess(config, name)
            processes[name].call("ready")
        table, per_position, depth = processes[ORACLE].call("pass_cost")
        cost = PassCost(table, per_position=per_position, depth=depth)
        rows = []
        for workload in workloads:
            prompt = processes[PLAIN].call("tokenize", workload.prompt)
            runs: dict[str, list[GenerationResult]] = {name: [] for name in names}
            peaks = dict.fromkeys(names, 0.0)
            reference = None     # the oracle's, settled from plain's first run (oracle.py)
            for _ in range(repeat):
                for name in names:
                    if name == ORACLE and reference is None:
                        reference = processes[ORACLE].call("settle", prompt, workload.max_tokens,
                                                           runs[PLAIN][0].tokens)
                    result, peak = processes[name].call("generate", prompt, workload.max_tokens,
                                                        reference if name == ORACLE else None)
                    runs[name].append(result)
                    peaks[name] = max(peaks[name], peak)
                    progress(f"{workload.name}: {name}")
            verdicts = {name: processes[PLAIN].call("compare", runs[PLAIN][0], results[0])
                        for name, results in runs.items() if name != PLAIN}
            rows += _rows(workload.name, runs, peaks, verdicts, cost)
        return rows, cost
    finally:
        for process in processes.values():
            process.close()


class StrategyProcess:
    """One strategy's engine in a process of its own, driven by calls over a pipe."""

    def __init__(self, config: Config, strategy: str):
        context = multiprocessing.get_context("spawn")     # a clean process: no inherited libllama state
        self.strategy = strategy
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, config.path, config.overrides, strategy),
                                        daemon=True)
        self._process.start()
        child.close()

    def call(self, command: str, *args):
        self._conn.send((command, args))
        try:
            status, value = self._conn.recv()
        except EOFError:
            raise SpecframeError(f"the benchmark process of strategy '{self.strategy}' died "
                                 f"(exit code {self._process.exitcode})") from None
        if status == "error":
            raise SpecframeError(f"strategy '{self.strategy}': {value}")
        return value

    def close(self) -> None:
        try:
            self._conn.send(("close", ()))
        except OSError:
            pass
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.terminate()


def _serve(conn, config_path, overrides, strategy: str) -> None:
    """The strategy process: build the engine (the config loaded again, with the same overrides), warm it up, then
    answer calls until told to close."""
    try:
        engine = Engine.from_config(config_path, overrides)
        engine.generate("warm up", max_tokens=4, speculative=False)
        if strategy != PLAIN and engine.pass_cost is not None:
            engine.calibrate()       # measured (or loaded) now, while no other strategy runs
    except Exception as exc:   # reported by the first call, in the parent
        failure = f"{type(exc).__name__}: {exc}"
        while conn.recv()[0] != "close":
            conn.send(("error", failure))
        return
    handlers: dict[str, Callable[..., Any]] = {
        "ready": lambda: True,
        "tokenize": engine.prompt_tokens,
        "generate": lambda prompt, max_tokens, reference: _measured(engine, strategy, prompt, max_tokens, reference),
        "settle": lambda prompt, max_tokens, reference: _settled(engine, prompt, max_tokens, reference),
        "compare": lambda plain, result: _lossless(plain, result, engine),
        "pass_cost": lambda: ((engine.pass_cost.measured, engine.pass_cost.per_position, engine.pass_cost.depth)
                              if engine.pass_cost is not None else ({}, 0.0, 0)),
    }
    with engine:
        while True:
            command, args = conn.recv()
            if command == "close":
                return
            try:
                conn.send(("ok", handlers[command](*args)))
            except Exception as exc:
                conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _settled(engine: Engine, prompt: np.ndarray, max_tokens: int, reference: list[int]) -> list[int]:
    """The oracle's reference for a workload, settled from plain's reply (oracle.py), in untimed runs."""
    return settled_reference(lambda known: np.asarray(engine.generate(
        prompt, chain=oracle_chain(engine, prompt, known), max_tokens=max_tokens, temperature=0.0).tokens),
        np.asarray(reference, dtype=np.int32)).tolist()


def _measured(engine: Engine, name: str, prompt: np.ndarray, max_tokens: int,
              reference: list[int] | None) -> tuple[GenerationResult, float]:
    """One greedy run of a strategy, cold (drafters and their estimates made anew, as in a new process, from
    what earlier runs' drafts were worth: acceptance_memory.py), and the process's peak memory during it (MiB)."""
    engine.forget_drafters()
    _reset_peak_rss()
    options = dict(max_tokens=max_tokens, temperature=0.0, track_margins=True)   # traced for the lossless check
    if name == PLAIN:
        result = engine.generate(prompt, speculative=False, **options)
    elif name == ORACLE:
        result = engine.generate(prompt, chain=oracle_chain(engine, prompt, reference), **options)
    else:
        result = engine.generate(prompt, drafters=None if name == CHAIN else [name], **options)
    return result, _peak_rss_mib()


def _rows(workload: str, runs: dict[str, list[GenerationResult]], peaks: dict[str, float],
          verdicts: dict[str, str], cost: PassCost) -> list[BenchRow]:
    speeds = {name: [r.stats.tokens_per_second for r in results] for name, results in runs.items()}
    speed = {name: statistics.median(each) for name, each in speeds.items()}
    modeled = {name: statistics.median(_modeled_speed(r, cost) for r in results) for name, results in runs.items()}
    oracle_speedup = speed[ORACLE] / speed[PLAIN]
    rows = []
    for name, results in runs.items():
        s = results[0].stats
        speculative = name != PLAIN
        speedup = speed[name] / speed[PLAIN]
        rows.append(BenchRow(
            workload=workload, strategy=name, tokens=s.n_generated, tokens_per_second=speed[name],
            spread=_spread(speeds[name], speed[name]),
            speedup=speedup, modeled_speedup=modeled[name] / modeled[PLAIN],
            oracle_fraction=speedup / oracle_speedup if speculative else None,
            acceptance_rate=s.acceptance_rate if speculative else None,
            mean_accepted_length=s.mean_accepted_length if speculative else None,
            passes_per_token=s.n_target_passes / max(1, s.n_generated),
            drafting_share=s.chain_seconds / s.generation_seconds if s.generation_seconds else 0.0,
            peak_rss_mib=peaks[name], lossless=verdicts.get(name, "-")))
    return rows


def _spread(speeds: list[float], middle: float) -> float | None:
    """How far a strategy's repeats lay apart: half their range over their median, ``middle``. Beside it a speedup
    tells a difference from the machine's noise (here identical runs of plain decoding differ by up to a fifth)."""
    return (max(speeds) - min(speeds)) / (2 * middle) if len(speeds) > 1 and middle else None


def _modeled_speed(result: GenerationResult, cost: PassCost) -> float:
    """Tokens per second had each of the run's target passes taken what the pass-cost table says at its depth, and
    the drafter chain its own measured time at the table's pace: the run's decisions without the machine's noise
    (here consecutive identical runs differ by up to a fifth). The chain's seconds are divided by the run's pace, the
    median ratio of its passes' wall time to their price: a draft model's calls, timed while this machine ran a fifth
    slower than its table, would otherwise weigh a fifth more beside passes priced at the table's pace."""
    verifying = [p for p in result.passes or [] if p.verifies]
    prices = [cost.seconds_at(p.size, p.layout[p.mine][1]) for p in verifying]
    paces = [p.seconds / price for p, price in zip(verifying, prices) if p.seconds > 0 and price > 0]
    seconds = sum(prices) + result.stats.chain_seconds / (statistics.median(paces) if paces else 1.0)
    return result.stats.n_generated / seconds if seconds else 0.0


def _lossless(plain: GenerationResult, result: GenerationResult, engine: Engine) -> str:
    verdict = compare(plain, result, engine)
    if verdict.identical:
        return "identical"
    cause = "near-tie" if verdict.near_tie else "batching" if verdict.ok else "DIFFERS"
    return f"{cause} at {verdict.diverged_at}"


def _reset_peak_rss() -> None:
    """Start a new peak-memory measurement (Linux: writing 5 to clear_refs resets VmHWM)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_rss_mib() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss     # the whole run's peak: kB, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 1024)
