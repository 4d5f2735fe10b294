"""Benchmark runs: plain decoding, each configured drafter alone, the whole chain and the oracle, greedy, on the
same target and workloads, in one process, repeats interleaved so that drifts of the machine hit all alike."""

from __future__ import annotations

import resource
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from specframe.bench.oracle import OracleDrafter
from specframe.bench.workloads import Workload
from specframe.engine import Engine, GenerationResult
from specframe.lossless import compare

PLAIN, CHAIN, ORACLE = "plain", "chain", "oracle"


@dataclass
class BenchRow:
    workload: str
    strategy: str
    tokens: int                          # generated tokens (the first run)
    tokens_per_second: float             # median over repeats
    speedup: float                       # over plain decoding
    oracle_fraction: float | None        # speedup / the oracle's speedup
    acceptance_rate: float | None
    mean_accepted_length: float | None   # accepted tokens per draft that went to the target
    passes_per_token: float              # target forward passes per generated token
    drafting_share: float                # share of generation time spent drafting
    peak_rss_mib: float                  # peak resident memory during the strategy's runs
    lossless: str                        # the first run against plain greedy output (DESIGN.md §3)

    def as_dict(self) -> dict:
        return asdict(self)


def strategies(engine: Engine) -> list[str]:
    """Plain, each configured drafter alone, the chain when there are several, and the oracle."""
    names = [d.name for d in engine.config.drafters]
    return [PLAIN, *names, *([CHAIN] if len(names) > 1 else []), ORACLE]


def run_bench(engine: Engine, workloads: list[Workload], repeat: int = 1,
              progress: Callable[[str], None] = lambda label: None) -> list[BenchRow]:
    """Measure every strategy on every workload; ``progress`` is called after each run with its label."""
    names = strategies(engine)
    rows = []
    for workload in workloads:
        prompt = engine.prompt_tokens(workload.prompt)
        runs: dict[str, list[GenerationResult]] = {name: [] for name in names}
        peaks = {name: 0.0 for name in names}
        for _ in range(repeat):
            for name in names:
                _reset_peak_rss()
                runs[name].append(_run(engine, name, prompt, workload.max_tokens, runs[PLAIN]))
                peaks[name] = max(peaks[name], _peak_rss_mib())
                progress(f"{workload.name}: {name}")
        rows += _rows(engine, workload.name, runs, peaks)
    return rows


def _run(engine: Engine, name: str, prompt: np.ndarray, max_tokens: int,
         plain_runs: list[GenerationResult]) -> GenerationResult:
    options = dict(max_tokens=max_tokens, temperature=0.0)
    if name == PLAIN:
        return engine.generate(prompt, speculative=False, track_margins=not plain_runs, **options)
    if name == ORACLE:
        reference = np.concatenate([prompt, np.asarray(plain_runs[0].tokens, dtype=np.int32)])
        return engine.generate(prompt, chain=engine.chain_of({ORACLE: OracleDrafter(reference)}), **options)
    return engine.generate(prompt, drafters=None if name == CHAIN else [name], **options)


def _rows(engine: Engine, workload: str, runs: dict[str, list[GenerationResult]],
          peaks: dict[str, float]) -> list[BenchRow]:
    speed = {name: statistics.median(r.stats.tokens_per_second for r in results) for name, results in runs.items()}
    plain = runs[PLAIN][0]
    oracle_speedup = speed[ORACLE] / speed[PLAIN]
    rows = []
    for name, results in runs.items():
        first = results[0]
        s = first.stats
        speculative = name != PLAIN
        drafting = sum(d["draft_ms"] + d["accept_ms"] for d in s.drafters.values()) / 1e3
        speedup = speed[name] / speed[PLAIN]
        rows.append(BenchRow(
            workload=workload, strategy=name, tokens=s.n_generated, tokens_per_second=speed[name],
            speedup=speedup, oracle_fraction=speedup / oracle_speedup if speculative else None,
            acceptance_rate=s.acceptance_rate if speculative else None,
            mean_accepted_length=s.mean_accepted_length if speculative else None,
            passes_per_token=s.n_target_passes / max(1, s.n_generated),
            drafting_share=drafting / s.generation_seconds if s.generation_seconds else 0.0,
            peak_rss_mib=peaks[name], lossless=_lossless(plain, first, engine) if speculative else "-"))
    return rows


def _lossless(plain: GenerationResult, result: GenerationResult, engine: Engine) -> str:
    verdict = compare(plain, result, engine)
    if verdict.identical:
        return "identical"
    kind = "near-tie" if verdict.near_tie else "batching" if verdict.ok else "DIFFERS"
    return f"{kind} at {verdict.diverged_at}"


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
