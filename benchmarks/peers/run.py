"""specframe against its peers on this machine: llama.cpp's own tools and llama-cpp-python (docs/design.md,
performance method).

    python benchmarks/peers/run.py [--repeat 3] [--workload NAME ...] [--only GROUP ...] [--ngram-type TYPE ...]
                                   [--max-tokens N] [--cuda] [--peers DIR]
                                   [--out benchmarks/RESULTS.md]

GROUP: plain, draft-model, ngram, prompt-lookup (default: all). Builds the peers first when needed (build.sh), then
runs every comparison in one session: the same prompt tokens, models, threads, context and longest draft, greedy,
ours and the peer alternately, a repeat at a time (every other one reversed), medians over the repeats. Writes the
report (--out) and results.json beside this file.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from specframe.bench.workloads import workloads
from specframe.config import tomllib
from specframe.engine import Engine
from specframe.errors import SpecframeError
from specframe.llama import kernels_beside, library_prefix
from specframe.models import resolve_model

HERE = pathlib.Path(__file__).resolve().parent
# The environment llama.cpp's tools run in: as this benchmark started, before an engine here set ggml's kernel switch.
LAUNCH_ENVIRONMENT = dict(os.environ)
REPO = HERE.parents[1]
TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m"
N_CTX = 4096
GROUPS = ("plain", "draft-model", "ngram", "prompt-lookup", "default")
EXAMPLE_CONFIG = REPO / "config.example.toml"
BEST_NATIVE = "llama.cpp's best native type"      # the type fastest on the other repeats, timed on each repeat
FASTEST_NATIVE = "llama.cpp's fastest native run"  # the type whose median was fastest over the same repeats
NATIVE = ("llama-speculative-simple", "llama-lookup")
DRAFT_MODEL = {"n_max": 16, "p_min": 0.75}
PROMPT_LOOKUP = {"max_ngram": 2, "num_pred": 10}
# The longest draft llama.cpp makes per n-gram type at 0c1e570 with its defaults (size_m = 48, ngram-mod n_max = 64,
# ngram-cache hard-coded 8). Our drafters run with their defaults (llama.cpp's) under the same engine n_max.
NGRAM_N_MAX = {"ngram-simple": 48, "ngram-map-k": 48, "ngram-map-k4v": 48, "ngram-mod": 64, "ngram-cache": 8}
WARMUP_PROMPT = "Say hello."
# Each speedup is over the same implementation's plain decoding.
BASELINE = {"specframe": "specframe plain", "llama-speculative-simple": "llama-completion",
            "llama-lookup": "llama-completion", "llama-cpp-python": "llama-cpp-python plain"}


def say(message: str) -> None:
    print(f"[peers] {message}", file=sys.stderr, flush=True)


class PeerError(RuntimeError):
    pass


@dataclass(frozen=True)
class Prompt:
    workload: str
    tokens: list[int]     # specframe's prompt: the chat template applied
    text: str             # the same as text that tokenizes back to `tokens` (special tokens parsed)
    max_tokens: int


@dataclass(frozen=True)
class Measurement:
    tokens_per_second: float
    n_generated: int
    n_prompt: int | None = None
    n_drafted: int | None = None
    n_accepted: int | None = None

    @property
    def acceptance(self) -> float | None:
        return self.n_accepted / self.n_drafted if self.n_drafted else None


Runner = Callable[[Prompt], dict[str, Measurement]]   # one process or request -> measurements by label


@dataclass(frozen=True)
class Comparison:
    group: str
    name: str
    setup: str                            # how each side is run, for the report
    runners: list[tuple[str, Runner]]     # run in this order, alternating ours and the peer's
    pairs: list[tuple[str, str]]          # (ours, peer) measurement labels: the rows of its table


# --- ours ----------------------------------------------------------------------------------------------------------

class Ours:
    """specframe's engine, a fresh one per run (as each peer run is a fresh process), warmed up by one request."""

    def __init__(self, workdir: pathlib.Path, target: pathlib.Path, threads: int, gpu_layers: int = 0):
        self.workdir, self.target, self.threads, self.gpu_layers = workdir, target, threads, gpu_layers

    def config(self, name: str, drafter: dict | None = None, n_max: int = 16, adaptive: bool = True) -> pathlib.Path:
        lines = ["[target]", f"model = {json.dumps(str(self.target))}", f"n_ctx = {N_CTX}",
                 f"threads = {self.threads}", f"n_gpu_layers = {self.gpu_layers}", "", "[speculative]",
                 f"n_max = {n_max}",
                 f"adaptive = {json.dumps(adaptive)}"]
        if drafter:
            lines += ["", "[[drafter]]"] + [f"{key} = {json.dumps(value)}" for key, value in drafter.items()]
        path = self.workdir / f"{name}.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def plain(self) -> Runner:
        config = self.config("plain")

        def run(prompt: Prompt) -> dict[str, Measurement]:
            with Engine.from_config(config) as engine:
                engine.generate(WARMUP_PROMPT, max_tokens=4, speculative=False)
                stats = engine.generate(prompt.tokens, max_tokens=prompt.max_tokens, speculative=False).stats
            return {"specframe plain": Measurement(stats.tokens_per_second, stats.n_generated, stats.n_prompt_tokens),
                    "specframe prompt": Measurement(stats.prompt_tokens_per_second, 0, stats.n_prompt_tokens - 1)}
        return run

    def speculative(self, label: str, drafter: dict, n_max: int, adaptive: bool) -> Runner:
        config = self.config(label.replace(" ", "_"), drafter, n_max, adaptive)

        def run(prompt: Prompt) -> dict[str, Measurement]:
            with Engine.from_config(config) as engine:
                engine.generate(WARMUP_PROMPT, max_tokens=4)
                stats = engine.generate(prompt.tokens, max_tokens=prompt.max_tokens).stats
            return {label: Measurement(stats.tokens_per_second, stats.n_generated, stats.n_prompt_tokens,
                                       stats.n_drafted, stats.n_accepted)}
        return run

    def example(self, label: str) -> Runner:
        """The shipped config.example.toml as a user runs it, with this run's target, threads and context."""
        data = tomllib.loads(EXAMPLE_CONFIG.read_text())
        data["target"].update(model=str(self.target), threads=self.threads, n_ctx=N_CTX, n_gpu_layers=self.gpu_layers)
        path = self.workdir / "example.toml"
        path.write_text(_toml(data))

        def run(prompt: Prompt) -> dict[str, Measurement]:
            with Engine.from_config(path) as engine:
                engine.generate(WARMUP_PROMPT, max_tokens=4)
                stats = engine.generate(prompt.tokens, max_tokens=prompt.max_tokens, temperature=0.0).stats
            return {label: Measurement(stats.tokens_per_second, stats.n_generated, stats.n_prompt_tokens,
                                       stats.n_drafted, stats.n_accepted)}
        return run

    def both_modes(self, name: str, drafter: dict, n_max: int) -> list[tuple[str, Runner]]:
        """Ours with cost-aware draft lengths (the default) and with fixed ones (as llama.cpp drafts)."""
        return [(f"specframe {name}", self.speculative(f"specframe {name}", drafter, n_max, True)),
                (f"specframe {name} fixed", self.speculative(f"specframe {name} fixed", drafter, n_max, False))]


def _toml(data: dict) -> str:
    """A config dict as TOML: tables of scalars, lists and inline tables; [[drafter]] arrays."""
    def value(v) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"
        return json.dumps(v)

    lines = []
    for section, table in data.items():
        for entry in (table if isinstance(table, list) else [table]):
            lines.append(f"[[{section}]]" if isinstance(table, list) else f"[{section}]")
            lines += [f"{key} = {value(v)}" for key, v in entry.items()]
            lines.append("")
    return "\n".join(lines)


# --- llama.cpp's tools ---------------------------------------------------------------------------------------------

def _number(pattern: str, output: str, tool: str, cast=float):
    match = re.search(pattern, output, re.MULTILINE)
    if match is None:
        raise PeerError(f"{tool}: no match for /{pattern}/ in its output (has its log format changed?)")
    return cast(match.group(1))


class LlamaCpp:
    """llama.cpp's tools from the peers build, each run once per measurement; their own timings are parsed."""

    def __init__(self, bin_dir: pathlib.Path, target: pathlib.Path, draft: pathlib.Path, threads: int,
                 gpu_layers: int = 0):
        self.bin_dir, self.target, self.draft, self.threads = bin_dir, target, draft, threads
        self.gpu = ["-ngl", str(gpu_layers)]

    def _run(self, tool: str, args: list[str]) -> subprocess.CompletedProcess:
        path = self.bin_dir / tool
        if not path.is_file():
            raise PeerError(f"{path} is missing: run benchmarks/peers/build.sh")
        proc = subprocess.run([str(path), *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", env=LAUNCH_ENVIRONMENT)
        if proc.returncode != 0:
            tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise PeerError(f"{tool} exited with {proc.returncode}: {tail[0]}")
        return proc

    def _log(self, tool: str, args: list[str]) -> str:
        proc = self._run(tool, args)
        return proc.stdout + proc.stderr

    def _generation_args(self, prompt: Prompt) -> list[str]:
        # -p with --no-escape: the text exactly (-f would drop the template's final newline); greedy; no EOS override
        return ["-m", str(self.target), "-p", prompt.text, "--no-escape", "-c", str(N_CTX),
                "-t", str(self.threads), "-tb", str(self.threads), "--temp", "0", *self.gpu]

    def completion(self, prompt: Prompt) -> dict[str, Measurement]:
        """Plain generation. Its perf counters give the decode time alone and the whole loop's time."""
        out = self._log("llama-completion", self._generation_args(prompt) + [
            "-n", str(prompt.max_tokens), "-no-cnv", "--no-display-prompt"])
        tool = "llama-completion"
        prompt_ms = _number(r"prompt eval time =\s*([\d.]+) ms", out, tool)
        n_prompt = _number(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", out, tool, int)
        eval_ms = _number(r"\seval time =\s*([\d.]+) ms /\s*\d+ runs", out, tool)
        n_eval = _number(r"\seval time =\s*[\d.]+ ms /\s*(\d+) runs", out, tool, int)
        total_ms = _number(r"total time =\s*([\d.]+) ms", out, tool)
        # every token but the last is evaluated; an end-of-generation token is sampled (not counted) after the last
        n_generated = n_eval if "[end of text]" in out else n_eval + 1
        # the loop after the prompt: n_eval single-token passes, every sample, the tool's own bookkeeping
        return {"llama-completion": Measurement(1e3 * n_eval / (total_ms - prompt_ms), n_generated, n_prompt),
                "llama-completion decode only": Measurement(1e3 * n_eval / eval_ms, n_generated, n_prompt)}

    def bench(self, prompt: Prompt) -> dict[str, Measurement]:
        """llama-bench: tg of the same budget at the prompt's depth, and pp of the prompt."""
        n_prompt = len(prompt.tokens)
        tg = self._bench(["-p", "0", "-n", str(prompt.max_tokens), "-d", str(n_prompt)])
        pp = self._bench(["-p", str(n_prompt), "-n", "0"])
        return {"llama-bench tg": Measurement(tg["avg_ts"], tg["n_gen"], tg["n_depth"]),
                "llama-bench pp": Measurement(pp["avg_ts"], 0, pp["n_prompt"])}

    def _bench(self, test: list[str]) -> dict:
        args = ["-m", str(self.target), "-t", str(self.threads), "-r", "1", "-o", "json", *self.gpu, *test]
        return json.loads(self._run("llama-bench", args).stdout)[0]

    # llama-speculative-simple and llama-lookup stop once they have made more than -n tokens: they get one fewer
    # than the budget, so that they make at least (usually exactly) as many as ours. A last draft may still run past
    # the budget; their rate counts the budget's tokens only (the time is what making the budget took)

    def speculative_simple(self, prompt: Prompt, spec_args: list[str]) -> dict[str, Measurement]:
        out = self._log("llama-speculative-simple", self._generation_args(prompt) + [
            "-n", str(prompt.max_tokens - 1), *spec_args])
        return {"llama-speculative-simple": self._speculative_measurement(out, "llama-speculative-simple",
                                                                          prompt.max_tokens)}

    def lookup(self, prompt: Prompt, n_draft: int) -> dict[str, Measurement]:
        out = self._log("llama-lookup", self._generation_args(prompt) + [
            "-n", str(prompt.max_tokens - 1), "--spec-draft-n-max", str(n_draft)])
        return {"llama-lookup": self._speculative_measurement(out, "llama-lookup", prompt.max_tokens)}

    @staticmethod
    def _speculative_measurement(out: str, tool: str, budget: int) -> Measurement:
        """From `decoded N tokens in S seconds`, `n_drafted = D`, `n_accept = A` (speculative-simple, lookup); the
        rate counts at most ``budget`` tokens."""
        n_generated = _number(r"decoded\s+(\d+) tokens in", out, tool, int)
        seconds = _number(r"decoded\s+\d+ tokens in\s+([\d.]+) seconds", out, tool)
        return Measurement(min(n_generated, budget) / seconds, n_generated,
                           _number(r"encoded\s+(\d+) tokens", out, tool, int),
                           _number(r"n_drafted\s*=\s*(\d+)", out, tool, int),
                           _number(r"n_accept\s*=\s*(\d+)", out, tool, int))

    def runner(self, method: str, *args) -> Runner:
        return lambda prompt: getattr(self, method)(prompt, *args)


# --- llama-cpp-python ----------------------------------------------------------------------------------------------

class LlamaCppPython:
    """llama-cpp-python in the peers' venv, one subprocess per measurement (lcp_runner.py)."""

    def __init__(self, venv: pathlib.Path, target: pathlib.Path, threads: int, flash_attn: bool):
        self.python, self.target, self.threads, self.flash_attn = venv / "bin" / "python", target, threads, flash_attn

    def runner(self, label: str, prompt_lookup: dict | None) -> Runner:
        def run(prompt: Prompt) -> dict[str, Measurement]:
            if not self.python.is_file():
                raise PeerError(f"{self.python} is missing: run benchmarks/peers/build.sh")
            job = {"model": str(self.target), "tokens": prompt.tokens, "max_tokens": prompt.max_tokens,
                   "threads": self.threads, "n_ctx": N_CTX, "flash_attn": self.flash_attn,
                   "prompt_lookup": prompt_lookup}
            proc = subprocess.run([str(self.python), str(HERE / "lcp_runner.py")], input=json.dumps(job),
                                  capture_output=True, text=True, env=LAUNCH_ENVIRONMENT)
            if proc.returncode != 0:
                raise PeerError(f"llama-cpp-python exited with {proc.returncode}: "
                                f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            return {label: Measurement(out["tokens_per_second"], out["n_generated"], out["n_prompt"],
                                       out.get("n_drafted"), out.get("n_accepted"))}
        return run


# --- the comparisons -----------------------------------------------------------------------------------------------

def comparisons(groups: list[str], ours: Ours, cpp: LlamaCpp, lcp: LlamaCppPython,
                ngram_types: tuple[str, ...] = tuple(NGRAM_N_MAX)) -> list[Comparison]:
    found = []
    if "plain" in groups:
        found.append(Comparison(
            "plain", "plain decoding",
            "specframe `Engine.generate(speculative=False)` vs `llama-completion -no-cnv --temp 0` (its generation "
            "loop, and its decode time alone) and `llama-bench` (`tg` of the same budget at the prompt's depth "
            "`-d`, `pp` of the prompt). Ours/peer below 1 is the binding's overhead.",
            [("specframe", ours.plain()), ("llama-completion", cpp.runner("completion")),
             ("llama-bench", cpp.runner("bench"))],
            [("specframe plain", "llama-completion"), ("specframe plain", "llama-completion decode only"),
             ("specframe plain", "llama-bench tg"), ("specframe prompt", "llama-bench pp")]))
    if "draft-model" in groups:
        drafter = {"type": "draft-model", "model": str(cpp.draft), **DRAFT_MODEL}
        peer = ["--spec-type", "draft-simple", "-md", str(cpp.draft), "--spec-draft-n-max", str(DRAFT_MODEL["n_max"]),
                "--spec-draft-p-min", str(DRAFT_MODEL["p_min"]), "-ngld", cpp.gpu[1]]
        shown = " ".join(DRAFT if arg == str(cpp.draft) else arg for arg in peer)
        found.append(_speculative("draft-model", "draft-model", DRAFT_MODEL["n_max"],
                                  ours.both_modes("draft-model", drafter, DRAFT_MODEL["n_max"]), cpp, peer,
                                  f"`llama-speculative-simple {shown}`"))
    if "ngram" in groups:
        for kind in ngram_types:
            n_max = NGRAM_N_MAX[kind]
            peer = ["--spec-type", kind]
            setup = f"`llama-speculative-simple --spec-type {kind}`"
            extra = []
            if kind == "ngram-cache":
                extra = [("llama-lookup", cpp.runner("lookup", n_max))]
                setup += f" and `llama-lookup --spec-draft-n-max {n_max}`"
            found.append(_speculative("ngram", kind, n_max, ours.both_modes(kind, {"type": kind}, n_max), cpp, peer,
                                      setup, extra))
    if "default" in groups:
        found.append(Comparison(
            "default", "default config",
            f"specframe with `config.example.toml` as shipped (its drafters and settings; this run's threads and "
            f"n_ctx {N_CTX}) vs llama.cpp's native speculative runs of the same workload in this report "
            f"(`llama-speculative-simple` with each `--spec-type`, `llama-lookup`: the draft-model and ngram "
            f"comparisons, which must be run too). **{BEST_NATIVE}** is chosen apart from the runs it is timed by: "
            f"at each repeat, the type whose median over the other repeats was fastest, timed at that repeat "
            f"(medians over the repeats; with one repeat, the fastest). **{FASTEST_NATIVE}** is the type whose "
            f"median over all repeats was fastest: chosen and timed by the same runs, it reads high by the luck of "
            f"the draw, most where several types decode alike (a type none of whose drafts was accepted decoded "
            f"plainly; where no type's was, the acceptance column empty or 0%, it is the fastest of several plain "
            f"runs against one median of ours).",
            [("specframe default config", ours.example("specframe default config"))],
            [("specframe default config", BEST_NATIVE), ("specframe default config", FASTEST_NATIVE)]))
    if "prompt-lookup" in groups:
        ours_runners = ours.both_modes("prompt-lookup", {"type": "prompt-lookup", **PROMPT_LOOKUP},
                                       PROMPT_LOOKUP["num_pred"])
        peer = {"max_ngram_size": PROMPT_LOOKUP["max_ngram"], "num_pred_tokens": PROMPT_LOOKUP["num_pred"]}
        found.append(Comparison(
            "prompt-lookup", "prompt lookup",
            f"specframe `prompt-lookup` (max_ngram {PROMPT_LOOKUP['max_ngram']}, num_pred "
            f"{PROMPT_LOOKUP['num_pred']}, engine n_max {PROMPT_LOOKUP['num_pred']}) vs llama-cpp-python "
            f"`Llama(draft_model=LlamaPromptLookupDecoding(max_ngram_size={peer['max_ngram_size']}, "
            f"num_pred_tokens={peer['num_pred_tokens']}))`, and both plain (`temp=0`, token ids in).",
            [ours_runners[0], ("llama-cpp-python prompt lookup", lcp.runner("llama-cpp-python prompt lookup", peer)),
             ("specframe plain", ours.plain()), ("llama-cpp-python plain", lcp.runner("llama-cpp-python plain", None)),
             ours_runners[1]],
            [(ours_runners[0][0], "llama-cpp-python prompt lookup"),
             (ours_runners[1][0], "llama-cpp-python prompt lookup"), ("specframe plain", "llama-cpp-python plain")]))
    return found


def _speculative(group: str, name: str, n_max: int, ours_runners: list[tuple[str, Runner]], cpp: LlamaCpp,
                 peer_args: list[str], peer_setup: str, extra_peers: list[tuple[str, Runner]] = ()) -> Comparison:
    """Ours (cost-aware and fixed lengths) against llama-speculative-simple (and any extra peer), alternately."""
    peers = [("llama-speculative-simple", cpp.runner("speculative_simple", peer_args)), *extra_peers]
    order = [ours_runners[0], peers[0], ours_runners[1], *peers[1:]]
    pairs = [(mine, peer) for peer, _ in peers for mine, _ in ours_runners]
    setup = (f"specframe `{name}` at its defaults, engine n_max {n_max}, with cost-aware lengths (`adaptive = true`, "
             f"the default) and fixed ones (`fixed`) vs {peer_setup}.")
    return Comparison(group, name, setup, order, pairs)


# --- running -------------------------------------------------------------------------------------------------------

def templated_prompts(specs: list[str] | None, max_tokens: int | None, target: pathlib.Path) -> list[Prompt]:
    """Each workload's chat-templated prompt as ids and as text, checked to tokenize back to the same ids."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Ours(pathlib.Path(tmp), target, 1).config("tokenizer")
        with Engine.from_config(config) as engine:
            prompts = []
            for workload in workloads(specs or (), max_tokens):
                tokens = engine.prompt_tokens(workload.prompt)
                text = engine.vocab.detokenize(tokens, unparse_special=True)
                if engine.vocab.tokenize(text, add_special=True, parse_special=True).tolist() != tokens.tolist():
                    raise PeerError(f"workload {workload.name}: its templated text does not tokenize back to the "
                                    "same ids, so the llama.cpp tools would see another prompt")
                prompts.append(Prompt(workload.name, tokens.tolist(), text, workload.max_tokens))
    return prompts


def schedule(plan: list[Comparison], prompts: list[Prompt],
             repeat: int) -> Iterator[tuple[int, Comparison, Prompt, str, Runner]]:
    """Every run (round, comparison, prompt, label, runner) in the order made: a round at a time, a workload's runs of
    every comparison together, every other round reversed. The machine drifts over a session: runs compared must be
    made close together, and neither side always first."""
    for round_ in range(repeat):
        runs = [(comparison, prompt, name, runner) for prompt in prompts for comparison in plan
                for name, runner in comparison.runners]
        for run in reversed(runs) if round_ % 2 else runs:
            yield (round_, *run)


def measure(plan: list[Comparison], prompts: list[Prompt], repeat: int) -> list[dict]:
    records = []
    n_runs = sum(len(c.runners) for c in plan) * len(prompts) * repeat
    started = time.monotonic()
    for done, (round_, comparison, prompt, name, runner) in enumerate(schedule(plan, prompts, repeat), 1):
        busy = other_load()
        if busy:
            say(f"warning: {busy} other process(es) running: the next timings are unreliable")
        try:
            results = runner(prompt)
        except PeerError as exc:     # one failed run is a gap in the table, not a lost session
            say(f"warning: {name} failed on {prompt.workload}: {exc}")
            records.append({"comparison": comparison.name, "workload": prompt.workload,
                            "repeat": round_, "label": name, "tokens_per_second": None,
                            "n_generated": None, "n_prompt": None, "acceptance": None,
                            "error": str(exc), "other_load": busy})
            continue
        for label, m in results.items():
            if m.n_prompt is not None and m.n_generated and m.n_prompt != len(prompt.tokens):
                say(f"warning: {label} saw {m.n_prompt} prompt tokens, specframe {len(prompt.tokens)}")
            records.append({"comparison": comparison.name, "workload": prompt.workload,
                            "repeat": round_, "label": label, **dataclasses.asdict(m),
                            "acceptance": m.acceptance, "other_load": busy})
        shown = ", ".join(f"{label} {m.tokens_per_second:.2f} t/s" for label, m in results.items())
        say(f"[{done}/{n_runs} {_minutes(time.monotonic() - started)}] {comparison.name} "
            f"round {round_ + 1}/{repeat} {prompt.workload}: {shown}")
    return records


def other_load(samples: int = 5) -> int:
    """Runnable tasks besides this process, the least over a few samples of /proc/loadavg: more than 0 means
    something else is using the CPU."""
    counts = []
    for _ in range(samples):
        counts.append(int(pathlib.Path("/proc/loadavg").read_text().split()[3].split("/")[0]) - 1)
        time.sleep(0.05)
    return min(counts)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(plan: list[Comparison], prompts: list[Prompt], records: list[dict]) -> list[dict]:
    """One row per comparison, pair and workload: medians over the repeats, ratio, speedups over plain."""
    def runs(label, workload, comparison=None):
        return [r for r in records if r["label"] == label and r["workload"] == workload
                and (comparison is None or r["comparison"] == comparison)]

    def plain_speed(label, workload):
        baseline = next((b for prefix, b in BASELINE.items() if label.startswith(prefix)), None)
        if baseline is None or baseline == label:
            return None
        return _median(r["tokens_per_second"] for r in runs(baseline, workload))

    def fastest_native(workload, repeats=None):
        """The (comparison, label) of llama.cpp's speculative run of a workload whose median over ``repeats`` (all:
        None) was fastest, or None."""
        candidates = {(r["comparison"], r["label"]) for r in records if r["label"] in NATIVE}
        scored = [(_median(r["tokens_per_second"] for r in runs(label, workload, name)
                           if repeats is None or r["repeat"] in repeats), name, label)
                  for name, label in sorted(candidates)]
        scored = [entry for entry in scored if entry[0] is not None]
        return max(scored)[1:] if scored else None

    def native(peer_label, workload):
        """What the row names as its peer, and the runs it is timed by: the fastest type's runs, or (BEST_NATIVE)
        at each repeat, the run of the type fastest on the other repeats."""
        repeats = sorted({r["repeat"] for r in records if r["workload"] == workload and r["label"] in NATIVE})
        if peer_label == FASTEST_NATIVE or len(repeats) < 2:
            chosen = fastest_native(workload)
            if chosen is None:
                return "none measured", []
            name, label = chosen
            return f"{label} {name}", runs(label, workload, name)
        sample, names = [], []
        for repeat in repeats:
            chosen = fastest_native(workload, set(repeats) - {repeat})
            if chosen is None:
                continue
            name, label = chosen
            sample += [r for r in runs(label, workload, name) if r["repeat"] == repeat]
            names.append((repeat, f"{label} {name}"))
        if len({n for _, n in names}) == 1:
            return names[0][1], sample
        return ", ".join(f"{n} (repeat {repeat + 1})" for repeat, n in names) or "none measured", sample

    rows = []
    for comparison in plan:
        for ours_label, peer_label in comparison.pairs:
            for prompt in prompts:
                row = {"group": comparison.group, "comparison": comparison.name, "workload": prompt.workload,
                       "ours": ours_label, "peer": peer_label}
                for side, label in (("ours", ours_label), ("peer", peer_label)):
                    if label in (BEST_NATIVE, FASTEST_NATIVE):
                        shown, sample = native(label, prompt.workload)
                        row["peer"], label = f"{label}: {shown}", shown
                    else:
                        sample = runs(label, prompt.workload, comparison.name)
                    speed = _median(r["tokens_per_second"] for r in sample)
                    plain = plain_speed(label, prompt.workload) if comparison.group != "plain" else None
                    row[f"{side}_tokens_per_second"] = speed
                    row[f"{side}_speedup"] = speed / plain if speed and plain else None
                    row[f"{side}_acceptance"] = _median(r["acceptance"] for r in sample)
                    row[f"{side}_tokens"] = _median(r["n_generated"] or r["n_prompt"] for r in sample)
                ours_speed, peer_speed = row["ours_tokens_per_second"], row["peer_tokens_per_second"]
                row["ratio"] = ours_speed / peer_speed if ours_speed and peer_speed else None
                rows.append(row)
    return rows


# --- the report ----------------------------------------------------------------------------------------------------

def environment(peers_dir: pathlib.Path, threads: int, outputs: list[pathlib.Path], cuda: bool = False) -> dict:
    """Machine, build and versions, for the report's header; the tree counts as dirty for changes besides our
    own outputs."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = re.search(r"^Model name:\s*(.+)$", lscpu, re.MULTILINE)
    build_info = dict(line.split("=", 1) for line in (peers_dir / "build-info.txt").read_text().splitlines())
    peer_flags = _ggml_flags(peers_dir / "bin" / "cmake-args.txt")
    ours_flags = _ggml_flags(library_prefix() / "cmake-args.txt")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    excluded = [f":(exclude){path.resolve()}" for path in outputs]
    dirty = subprocess.run(["git", "status", "--porcelain", "--", ".", *excluded], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    gpu = (subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.strip() or "unknown") if cuda else None
    return {"cpu": cpu.group(1).strip() if cpu else "unknown", "gpu": gpu, "threads": threads,
            "kernel": os.uname().release,
            "cmake_flags": peer_flags, "libllama_flags_match": ours_flags == peer_flags,
            "libllama_prefix": str(library_prefix()), "llama_cpp_commit": build_info.get("commit"),
            "llama_cpp_python": build_info.get("llama-cpp-python"), "compiler": build_info.get("compiler"),
            # a copy of the tree (a GPU machine) names its commit in SPECFRAME_COMMIT: its git state may be stale
            "specframe_commit": os.environ.get("SPECFRAME_COMMIT") or commit.stdout.strip() or "unknown",
            "specframe_dirty": bool(dirty),
            "target": TARGET, "draft": DRAFT}


def _ggml_flags(path: pathlib.Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("-DGGML_")] if path.is_file() else []


def _fmt(value, pattern="{:.2f}") -> str:
    return "–" if value is None else pattern.format(value)


def _geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def report(meta: dict, plan: list[Comparison], prompts: list[Prompt], rows: list[dict]) -> str:
    env = meta["environment"]
    lines = [
        "# specframe and its peers", "",
        f"Written by `{meta['command']}` on {meta['date']} in {meta['duration']}: medians over {meta['repeat']} "
        "repeat(s) per run. Ours/peer above 1 means specframe is faster; speedup is over the same "
        "implementation's plain decoding (specframe plain, llama-completion, llama-cpp-python plain).", "",
        "## Setup", "",
        f"- Machine: {env['cpu']}, {env['threads']} cores, every tool at `threads = {env['threads']}`; "
        f"Linux {env['kernel']}."
        + (f" GPU: {env['gpu']}, every layer of the target and the draft on it (`-ngl 99 -ngld 99`, "
           "`n_gpu_layers = 99`)." if env.get("gpu") else ""),
        (f"- **Warning: {meta['disturbed']} of {meta['measurements']} measurements began while other processes were "
         "using the CPU: rerun on a quiet machine.**" if meta["disturbed"] else
         "- No other process was using the CPU when any run began."),
        f"- Build: llama.cpp `{env['llama_cpp_commit']}` (vendored by the llama-cpp-python "
        f"{env['llama_cpp_python']} sdist), Release, `{' '.join(env['cmake_flags'])}`, {env['compiler']}; the same "
        "for specframe's libllama, llama.cpp's tools and llama-cpp-python"
        + ("." if env["libllama_flags_match"] else
           f". **Warning: specframe's libllama ({env['libllama_prefix']}) was built with other flags.**"),
        f"- CPU kernels: {env['kernels']}.",
        f"- specframe: commit `{env['specframe_commit']}`"
        + (", with uncommitted changes." if env["specframe_dirty"] else ", clean tree."),
        f"- Models: target `{env['target']}`, draft `{env['draft']}`; n_ctx {N_CTX}; greedy.",
        "- Workloads: " + ", ".join(f"{p.workload} ({len(p.tokens)} prompt tokens, budget {p.max_tokens})"
                                    for p in prompts) + ".",
        "",
        "## Method", "",
        "- Every tool gets the same prompt tokens: specframe's chat-templated prompt, passed to the llama.cpp tools "
        "as text with special tokens parsed (`-p ... --no-escape`; checked to tokenize back to the same ids) and to "
        "llama-cpp-python as ids. Generation stops at an end-of-generation token or the budget.",
        "- Tokens/s is each tool's own measure of generation: generated tokens over the time from the pass over the "
        "last prompt token to the last token (specframe's engine, llama-speculative-simple, llama-lookup, "
        "llama-cpp-python as run by `lcp_runner.py`); llama-completion: its perf counters' time after the prompt; "
        "llama-bench: `tg` at the prompt's depth. A tool that ran past the budget (a last draft accepted beyond "
        "it) is counted for the budget's tokens over the time it took: the table's token counts show where. "
        "Acceptance is accepted / drafted tokens.",
        "- Each run is a fresh process (peers) or a fresh `Engine` (ours) with one warm-up. The runs go a repeat at "
        "a time, a workload's runs of every comparison together (ours, peer, ours fixed, ...), every other repeat "
        "in reverse order: runs compared are made minutes apart, and neither side always first.",
        "",
        "## Summary", "",
        "Geometric mean over the workloads.", "",
        "| comparison | ours | peer | ours t/s | peer t/s | ours/peer |", "|---|---|---|---:|---:|---:|",
    ]
    for comparison in plan:
        for ours_label, peer_label in comparison.pairs:
            pair = [r for r in rows if r["comparison"] == comparison.name and r["ours"] == ours_label
                    and r["peer"].startswith(peer_label)]
            lines.append(f"| {comparison.name} | {ours_label} | {peer_label} | "
                         f"{_fmt(_geomean(r['ours_tokens_per_second'] for r in pair))} | "
                         f"{_fmt(_geomean(r['peer_tokens_per_second'] for r in pair))} | "
                         f"{_fmt(_geomean(r['ratio'] for r in pair))} |")
    for comparison in plan:
        lines += ["", f"## {comparison.name}", "", comparison.setup, "",
                  "| workload | ours | peer | ours t/s | peer t/s | ours/peer | ours speedup | peer speedup "
                  "| ours acceptance | peer acceptance | tokens ours / peer (pp: prompt) |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in (r for r in rows if r["comparison"] == comparison.name):
            lines.append(
                f"| {r['workload']} | {r['ours']} | {r['peer']} | {_fmt(r['ours_tokens_per_second'])} | "
                f"{_fmt(r['peer_tokens_per_second'])} | {_fmt(r['ratio'])} | {_fmt(r['ours_speedup'], '{:.2f}x')} | "
                f"{_fmt(r['peer_speedup'], '{:.2f}x')} | {_fmt(r['ours_acceptance'], '{:.0%}')} | "
                f"{_fmt(r['peer_acceptance'], '{:.0%}')} | {_fmt(r['ours_tokens'], '{:.0f}')} / "
                f"{_fmt(r['peer_tokens'], '{:.0f}')} |")
    return "\n".join(lines) + "\n"


def gpu_section(path: pathlib.Path) -> str:
    """The machine and summary of the GPU report (run.py --cuda), to show beside this machine's."""
    text = path.read_text()
    machine = re.search(r"^- Machine: .*$", text, re.MULTILINE)
    written = re.search(r"^Written by .*?:", text, re.MULTILINE)
    summary = re.search(r"^## Summary\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    if not (machine and summary):
        return ""
    return "\n".join(["", "## On an NVIDIA GPU", "",
                      f"From [{path.name}]({path.name}) ({written.group(0)[:-1] if written else 'run.py --cuda'}).",
                      "", machine.group(0), "", summary.group(1).strip(), ""])


# --- main ----------------------------------------------------------------------------------------------------------

def build_peers(cuda: bool) -> pathlib.Path:
    """build.sh (builds nothing when the cache is complete); its last stdout line is the peers' folder."""
    proc = subprocess.run([str(HERE / "build.sh"), *(["--cuda", "--tools-only"] if cuda else [])],
                          stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise PeerError("benchmarks/peers/build.sh failed (see above)")
    return pathlib.Path(proc.stdout.strip().splitlines()[-1])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool per workload (default 3)")
    parser.add_argument("--workload", nargs="+", metavar="NAME", help="built-in workloads or prompt files "
                        "(default: all built-in)")
    parser.add_argument("--only", nargs="+", choices=GROUPS, default=list(GROUPS), metavar="GROUP",
                        help=f"comparisons to run: {', '.join(GROUPS)} (default: all)")
    parser.add_argument("--ngram-type", nargs="+", choices=list(NGRAM_N_MAX), default=list(NGRAM_N_MAX),
                        metavar="TYPE", help="the n-gram types the ngram group runs (default: all five; a GPU "
                        "lease may afford fewer)")
    parser.add_argument("--max-tokens", type=int, help="token budget for every workload (default: each its own)")
    parser.add_argument("--cuda", action="store_true", help="every layer of both models on the GPU, against "
                        "llama.cpp's tools built for CUDA (needs ./build_llama.sh --cuda; no llama-cpp-python: "
                        "the prompt-lookup group is left out)")
    parser.add_argument("--peers", type=pathlib.Path, metavar="DIR", help="llama.cpp's tools already built in "
                        "DIR (its bin/ and build-info.txt, as build.sh makes them) instead of building them")
    parser.add_argument("--out", type=pathlib.Path, help="Markdown report (default: benchmarks/RESULTS.md, with "
                        "--cuda benchmarks/RESULTS-cuda.md)")
    args = parser.parse_args()
    args.out = args.out or REPO / "benchmarks" / ("RESULTS-cuda.md" if args.cuda else "RESULTS.md")
    if args.cuda:
        args.only = [group for group in args.only if group != "prompt-lookup"]
    if args.repeat < 1 or (args.max_tokens is not None and args.max_tokens < 2):
        parser.error("--repeat must be >= 1 and --max-tokens >= 2")
    return args


def main() -> None:
    args = parse_args()
    started = time.monotonic()
    peers_dir = args.peers or build_peers(args.cuda)
    threads = len(os.sched_getaffinity(0))
    gpu_layers = 99 if args.cuda else 0
    results_json = HERE / ("results-cuda.json" if args.cuda else "results.json")
    target, draft = resolve_model(TARGET), resolve_model(DRAFT)
    prompts = templated_prompts(args.workload, args.max_tokens, target)
    env = environment(peers_dir, threads, [args.out, results_json], args.cuda)
    with tempfile.TemporaryDirectory() as tmp:
        # flash attention: llama.cpp's default "auto" turns it on for the CPU; llama-cpp-python's default is off
        plan = comparisons(args.only, Ours(pathlib.Path(tmp), target, threads, gpu_layers),
                           LlamaCpp(peers_dir / "bin", target, draft, threads, gpu_layers),
                           LlamaCppPython(peers_dir / "venv", target, threads, flash_attn=True),
                           args.ngram_type)
        records = measure(plan, prompts, args.repeat)
    rows = summarize(plan, prompts, records)
    meta = {"command": " ".join(["python", *sys.argv]), "date": datetime.date.today().isoformat(),
            "duration": _minutes(time.monotonic() - started), "repeat": args.repeat,
            "measurements": len(records), "disturbed": sum(1 for r in records if r["other_load"]),
            "environment": env | {"kernels": kernels_beside(LAUNCH_ENVIRONMENT)}}
    text = report(meta, plan, prompts, rows)
    cuda_report = HERE.parent / "RESULTS-cuda.md"
    if not args.cuda and cuda_report.is_file():
        text += gpu_section(cuda_report)
    args.out.write_text(text)
    results_json.write_text(json.dumps({"meta": meta, "rows": rows, "runs": records}, indent=1) + "\n")
    say(f"wrote {args.out} and {results_json}")


if __name__ == "__main__":
    try:
        main()
    except (PeerError, SpecframeError) as exc:
        sys.exit(f"[peers] error: {exc}")
