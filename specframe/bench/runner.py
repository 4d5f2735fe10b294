"""Benchmark runs: plain decoding, each configured drafter alone, the whole chain and the oracle, greedy, on the
same target and workloads. The strategies' runs of a round advance together, each in turn for a slice of time, so
that the machine's drifts (a cloud CPU's pace wanders by a tenth for ten seconds and more at a time) hit them alike
and each run's speed is set beside plain's in the same round.

A session (bench --session) is a workload of several requests, a conversation: a run makes them one after another,
its drafters started cold at the first and kept through the others, as a server keeps them. Every strategy is sent
the same requests, the conversation plain greedy decoding makes (untimed, before the rounds); its answers to them are
checked against plain's turn by turn."""

from __future__ import annotations

import dataclasses
import multiprocessing
import platform
import random
import re
import resource
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from specframe.bench.oracle import oracle_chain, settled_reference
from specframe.bench.workloads import Session, Workload
from specframe.config import Config
from specframe.drafting.pass_cost import PassCost
from specframe.engine import Engine
from specframe.errors import SpecframeError
from specframe.grammar import GrammarSpec
from specframe.llama.context import default_threads
from specframe.results import Generation, GenerationResult, RequestStats
from specframe.testing.lossless import compare

PLAIN, CHAIN, ORACLE = "plain", "chain", "oracle"
SLICE_SECONDS = 0.5   # a strategy's turn in a round: a few passes, far shorter than the machine's drifts
Request = tuple[np.ndarray, int, list[int]]   # a prompt, its token budget, the oracle's reference for its answer


@dataclass
class BenchRow:
    workload: str
    strategy: str
    tokens: int                          # generated tokens (the first run)
    tokens_per_second: float             # median over repeats
    round_tokens_per_second: list[float]  # each round's run, in round order
    spread: float | None                 # half the range of its speedups over the rounds, over their median; plain's:
                                         # of its tokens/s (None: one run)
    speedup: float                       # over plain decoding in the same round (median over rounds)
    modeled_speedup: float               # the same, each run's passes priced by the pass-cost table (no noise)
    oracle_fraction: float | None        # speedup / the oracle's speedup
    acceptance_rate: float | None
    mean_accepted_length: float | None   # accepted tokens per draft that went to the target
    passes_per_token: float              # target forward passes per generated token
    drafting_share: float                # share of generation time the drafter chain took (its drafters' calls too)
    host_ms_per_pass: float              # decoding time outside the target's passes, per pass (median over repeats)
    peak_rss_mib: float                  # peak resident memory of the strategy's process during its runs
    lossless: str                        # the first run against plain greedy output (docs/design.md)

    def as_dict(self) -> dict:
        return asdict(self)


def machine(config: Config) -> str:
    """What a bench ran on, as its saved report states it: the CPU's name, the threads, and the target's GPU
    layers when it has any."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            named = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read(), re.MULTILINE)
    except OSError:
        named = None
    cpu = named[1].strip() if named else platform.processor() or platform.machine() or "unknown CPU"
    gpu = config.target.n_gpu_layers
    return (f"{cpu}, {config.target.threads or default_threads()} threads"
            + (f", {'all' if gpu < 0 else gpu} target layers on the GPU" if gpu else ""))


def strategies(config: Config, only: Sequence[str] = ()) -> list[str]:
    """Plain, each configured drafter alone, the chain when there are several, and the oracle; ``only``: of the
    drafters and the chain, those named (plain and the oracle always run: they are what the others are set against)."""
    names = [d.name for d in config.drafters]
    names += [CHAIN] if len(names) > 1 else []
    unknown = [name for name in only if name not in names]
    if unknown:
        raise SpecframeError(f"--only {unknown[0]}: not a strategy of this config; expected one of {', '.join(names)}")
    return [PLAIN, *[name for name in names if not only or name in only], ORACLE]


def run_bench(config: Config, workloads: list[Workload] | list[Session], repeat: int = 1,
              progress: Callable[[str], None] = lambda label: None,
              only: Sequence[str] = ()) -> tuple[list[BenchRow], PassCost]:
    """Measure every strategy on every workload; ``progress`` is called after each run with its label. Return the
    rows and the pass-cost table that priced the modeled speedups.

    Each strategy runs in a process of its own, so that the peak memory measured is its own (a draft model's
    weights, an n-gram pool). In each round every strategy's run is begun, then the runs advance in turn, a slice of
    time each, until all have ended: the time a run waits for its turn is not its own. The processes start one after
    another: loads, warm-up passes and the pass-cost calibration of several at once would time each other.
    ``only``: as ``strategies``."""
    names = strategies(config, only)
    processes: dict[str, StrategyProcess] = {}
    try:
        for name in names:
            processes[name] = StrategyProcess(config, name)
            processes[name].call("ready")
        table, per_position, depth = processes[ORACLE].call("pass_cost")
        cost = PassCost(table, per_position=per_position, depth=depth)
        rows = []
        for workload in workloads:
            held = (workload.schema, workload.tools) if isinstance(workload, Workload) else (None, None)
            requests = _requests(processes, workload, held)
            runs: dict[str, list[list[GenerationResult]]] = {name: [] for name in names}   # each round's run
            peaks = dict.fromkeys(names, 0.0)
            for round_number in range(repeat):
                for name in names:
                    processes[name].call("begin", requests, held)
                running = _turns(names, round_number)
                while running:
                    for name in list(running):
                        ended = processes[name].call("advance", SLICE_SECONDS)
                        if ended is not None:
                            results, peak = ended
                            runs[name].append(results)
                            peaks[name] = max(peaks[name], peak)
                            running.remove(name)
                            progress(f"{workload.name}: {name}")
            verdicts = {name: _verdict([processes[PLAIN].call("compare", plain, result, held)
                                        for plain, result in zip(runs[PLAIN][0], rounds[0])])
                        for name, rounds in runs.items() if name != PLAIN}
            merged = {name: [_merged(results) for results in rounds] for name, rounds in runs.items()}
            rows += _rows(workload.name, merged, peaks, verdicts, cost)
        return rows, cost
    finally:
        for process in processes.values():
            process.close()


def _requests(processes: dict[str, StrategyProcess], workload: Workload | Session,
              held: tuple[dict | None, list | None]) -> list[Request]:
    """What a workload's runs send: its prompt, or a session's conversation (made by the oracle's process), each
    with its budget and the oracle's reference (oracle.py)."""
    if isinstance(workload, Session):
        return processes[ORACLE].call("converse", workload)
    prompt = processes[PLAIN].call("tokenize", workload.prompt, workload.tools)
    return [(prompt, workload.max_tokens, processes[ORACLE].call("settle", prompt, workload.max_tokens, held))]


def _turns(names: list[str], round_number: int) -> list[str]:
    """The order the strategies take turns in, shuffled anew each round (reproducibly): whatever a turn owes to the
    one before it (the previous process's threads winding down) falls on every strategy alike."""
    order = list(names)
    random.Random(round_number).shuffle(order)
    return order


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
    run = MeasuredRun(engine, strategy)
    handlers: dict[str, Callable[..., Any]] = {
        "ready": lambda: True,
        "tokenize": lambda prompt, tools: engine.prompt_tokens(prompt, tools=tools),
        "begin": run.begin,
        "advance": run.advance,
        "settle": lambda prompt, max_tokens, held: _settled(engine, prompt, max_tokens,
                                                            grammar_of(engine, *held))[1],
        "converse": lambda session: _conversation(engine, session),
        "compare": lambda plain, result, held: _lossless(plain, result, engine, grammar_of(engine, *held)),
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


def grammar_of(engine: Engine, schema: dict | None, tools: list | None) -> GrammarSpec | None:
    """What a workload's answer is held to: its JSON schema, or calls to its tools (tool_choice auto)."""
    if schema is not None:
        return GrammarSpec.json_schema(schema)
    if tools is not None:
        return engine.tool_grammar([tool["function"] for tool in tools], required=False, parallel=False)
    return None


def _settled(engine: Engine, prompt: np.ndarray, max_tokens: int,
             grammar: GrammarSpec | None) -> tuple[GenerationResult, list[int]]:
    """Plain greedy decoding's reply to a prompt, and the oracle's reference settled from it (oracle.py), in untimed
    runs."""
    reply = engine.generate(prompt, speculative=False, max_tokens=max_tokens, temperature=0.0, grammar=grammar)
    return reply, settled_reference(lambda known: np.asarray(engine.generate(
        prompt, chain=oracle_chain(engine, prompt, known), max_tokens=max_tokens, temperature=0.0,
        grammar=grammar).tokens), np.asarray(reply.tokens, dtype=np.int32)).tolist()


def _conversation(engine: Engine, session: Session) -> list[Request]:
    """A session's requests as a chat client sends them: each turn's prompt holds the system prompt, the earlier
    turns and the answers to them, plain greedy decoding's."""
    messages = [{"role": "system", "content": session.system}] if session.system else []
    requests = []
    for number, turn in enumerate(session.turns, 1):
        messages.append({"role": "user", "content": turn.user})
        prompt = engine.vocab.tokenize(engine.chat_prompt(messages), add_special=True, parse_special=True)
        if prompt.size + turn.max_tokens > engine.context.n_ctx:
            raise SpecframeError(f"session {session.name}: turn {number}: a prompt of {prompt.size} tokens and an "
                                 f"answer of up to {turn.max_tokens} do not fit in n_ctx={engine.context.n_ctx} "
                                 "(raise [target] n_ctx, or lower the turns' budgets with -n)")
        reply, reference = _settled(engine, prompt, turn.max_tokens, None)
        messages.append({"role": "assistant", "content": reply.text})
        requests.append((prompt, turn.max_tokens, reference))
    return requests


class MeasuredRun:
    """A strategy's greedy run of a workload's requests, one after another, advanced a slice at a time: started cold
    at its first slice (drafters and their estimates made anew, as in a new process, from what earlier runs' drafts
    were worth: acceptance_memory.py) and its drafters kept through its later requests, as a server keeps them; each
    request's decoding time without the waits between its slices, and the process's peak memory during the run
    (MiB)."""

    def __init__(self, engine: Engine, strategy: str):
        self.engine, self.strategy = engine, strategy
        self._requests: list[Request] = []
        self._grammar: GrammarSpec | None = None
        self._results: list[GenerationResult] = []
        self._generation: Generation | None = None
        self._waited = 0.0                  # seconds between slices, once the request's decoding has begun
        self._paused_at: float | None = None

    def begin(self, requests: list[Request], held: tuple[dict | None, list | None] = (None, None)) -> None:
        """The requests to make, in order; ``held``: the workload's schema and tools."""
        self._requests, self._grammar = list(requests), grammar_of(self.engine, *held)
        self._results, self._generation, self._paused_at = [], None, None

    def advance(self, seconds: float) -> tuple[list[GenerationResult], float] | None:
        """Decode for about ``seconds`` (whole steps); once the last request has ended, each request's result and
        the peak memory."""
        start = time.perf_counter()
        if self._paused_at is not None:
            self._waited += start - self._paused_at
            self._paused_at = None
        while len(self._results) < len(self._requests):
            if self._generation is None:
                self._start()
            assert self._generation is not None
            for _ in self._generation:  # each piece of text comes after a step of decoding (one generator throughout)
                if time.perf_counter() - start >= seconds:
                    self._paused_at = time.perf_counter()
                    return None
            result = self._generation.result
            assert result is not None
            result.stats.generation_seconds -= self._waited
            self._results.append(result)
            self._generation = None
        return self._results, _peak_rss_mib()

    def _start(self) -> None:
        """The next request; the drafters are forgotten before the first."""
        assert len(self._results) < len(self._requests), "advanced before begin"
        engine, name = self.engine, self.strategy
        prompt, max_tokens, reference = self._requests[len(self._results)]
        if not self._results:
            engine.forget_drafters()
            _reset_peak_rss()
        options: dict[str, Any] = dict(max_tokens=max_tokens, temperature=0.0, grammar=self._grammar)
        if name == PLAIN:
            options.update(speculative=False)
        elif name == ORACLE:
            options.update(chain=oracle_chain(engine, prompt, reference))
        elif name != CHAIN:
            options.update(drafters=[name])
        self._generation = engine.stream(prompt, track_margins=True, **options)   # traced for the lossless check
        self._waited, self._paused_at = 0.0, None


def _merged(results: list[GenerationResult]) -> GenerationResult:
    """A session's requests as one run, for its row: their tokens, passes and counts together."""
    if len(results) == 1:
        return results[0]
    numbers = [f.name for f in dataclasses.fields(RequestStats)
               if isinstance(getattr(results[0].stats, f.name), (int, float))]
    stats = RequestStats(**{name: sum(getattr(r.stats, name) for r in results) for name in numbers})
    return GenerationResult(text="".join(r.text for r in results), tokens=[t for r in results for t in r.tokens],
                            n_prompt_tokens=sum(r.n_prompt_tokens for r in results),
                            stop_reason=results[-1].stop_reason, stats=stats,
                            passes=[p for r in results for p in r.passes or []])


def _verdict(turns: list[str]) -> str:
    """A run's lossless verdict from its requests': a session's first that is not identical, with its turn."""
    if len(turns) == 1:
        return turns[0]
    return next((f"turn {n}: {verdict}" for n, verdict in enumerate(turns, 1) if verdict != "identical"),
                "identical")


def _rows(workload: str, runs: dict[str, list[GenerationResult]], peaks: dict[str, float],
          verdicts: dict[str, str], cost: PassCost) -> list[BenchRow]:
    speeds = {name: [r.stats.tokens_per_second for r in results] for name, results in runs.items()}
    speed = {name: statistics.median(each) for name, each in speeds.items()}
    speedups = {name: [s / p for s, p in zip(each, speeds[PLAIN]) if p] for name, each in speeds.items()}
    speedup = {name: statistics.median(each) if each else 0.0 for name, each in speedups.items()}
    modeled = {name: statistics.median(_modeled_speed(r, cost) for r in results) for name, results in runs.items()}
    rows = []
    for name, results in runs.items():
        s = results[0].stats
        speculative = name != PLAIN
        rows.append(BenchRow(
            workload=workload, strategy=name, tokens=s.n_generated, tokens_per_second=speed[name],
            round_tokens_per_second=speeds[name],
            spread=(_spread(speedups[name], speedup[name]) if speculative
                    else _spread(speeds[name], speed[name])),
            speedup=speedup[name], modeled_speedup=modeled[name] / modeled[PLAIN],
            oracle_fraction=speedup[name] / speedup[ORACLE] if speculative and speedup[ORACLE] else None,
            acceptance_rate=s.acceptance_rate if speculative else None,
            mean_accepted_length=s.mean_accepted_length if speculative else None,
            passes_per_token=s.n_target_passes / max(1, s.n_generated),
            drafting_share=s.chain_seconds / s.generation_seconds if s.generation_seconds else 0.0,
            host_ms_per_pass=statistics.median(r.stats.host_ms_per_pass for r in results),
            peak_rss_mib=peaks[name], lossless=verdicts.get(name, "-")))
    return rows


def _spread(values: list[float], middle: float) -> float | None:
    """How far a strategy's rounds lay apart: half the range of ``values`` (its speedups, or plain's tokens/s) over
    their median, ``middle``. Beside a speedup it tells a difference from the machine's noise."""
    return (max(values) - min(values)) / (2 * middle) if len(values) > 1 and middle else None


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


def _lossless(plain: GenerationResult, result: GenerationResult, engine: Engine, grammar: GrammarSpec | None) -> str:
    verdict = compare(plain, result, engine, grammar=grammar)
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
