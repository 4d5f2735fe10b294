"""An editor session through /infill: specframe serve against llama-server --cache-reuse, request by request.

    python benchmarks/editor.py [--config specframe/presets/fim-qwen-1.5b-spec.toml] [--file F] [--extra F ...]
                                [--requests 24] [--start-line N] [--n-predict 64] [--cache-reuse 256] [--slots 1]
                                [--seed 0] [--peers DIR | --no-peer] [--out benchmarks/EDITOR.md]

The session (specframe.testing.editor_session) is what llama.vscode and llama.vim send while a user writes --file
from --start-line downward: --requests completions, each with the cursor on a line after its first few characters
(the editors' 256 lines of prefix, 64 of suffix, the line's typed part as the prompt, its indentation as n_indent),
the cursor 1 to 3 lines further down at each; and llama.vim's ring buffer of chunks (32 lines) of the --extra files
as input_extra, with a warm-up request (n_predict 0, no samplers) whenever a chunk joins it.

Method:

- Greedy: every completion has temperature 0 (the temperature sampler before infill), which llama.cpp applies as
  greedy, so both servers produce the target's greedy completion and their texts are compared request by request
  (they differ only where batched arithmetic flips a near-tie).
- No time caps: the editors' t_max_prompt_ms / t_max_predict_ms are not sent, so whole completions are compared,
  not what each server managed within 500 ms. The warm-ups' response_fields filter is dropped so that their
  timings come back (it changes what the answer shows, nothing of the work).
- The same build of llama.cpp, the same models (llama-server: -md with the config's draft model, quantized as the
  config says, and the n-gram types llama.cpp has), the same n_batch (-b, and -ub as specframe's physical batch:
  llama.cpp's FIM presets use -b 1024 -ub 1024), the same context per slot, threads and --slots (default 1: an
  editor is one client), and both reuse cached chunks of at least --cache-reuse tokens that moved in the prompt
  (--cache-reuse on both).
- Each server runs alone on 127.0.0.1, gets one throwaway request, then the session's requests one after another,
  each sent when the previous one's answer is in (POST /infill, not streamed).
- Per request: the wall time from sending it to the whole answer (latency), the tokens predicted, the prompt tokens
  the server evaluated (timings.prompt_n) and took from its cache (timings.cache_n), and the text.

Timings are meaningful only on an otherwise idle machine. Goals reported against: specframe's median completion
latency at most 0.7x llama-server's, and no more prompt tokens evaluated per completion than llama-server.
Builds llama-server first when needed (benchmarks/peers/build.sh --server-only). Writes the Markdown report (--out)
and the same as JSON beside it (every request's figures and text; the bodies are made again from the file, whose
hash the report gives, and the seed); the servers' logs go to a temporary folder.
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Callable

import httpx
from serving import (
    REPO,
    BenchError,
    free_port,
    llama_server,
    llama_server_command,
    p90,
    run_meta,
    running,
    say,
    specframe_command,
    write_report,
)

from specframe.config import Config, load_config
from specframe.testing.editor_session import COMPLETION, EditorRequest, editor_requests

HERE = pathlib.Path(__file__).resolve().parent
PRESET = REPO / "specframe" / "presets" / "fim-qwen-1.5b-spec.toml"
FILE = REPO / "specframe" / "drafting" / "chain.py"
EXTRAS = (REPO / "specframe" / "drafting" / "protocol.py", REPO / "specframe" / "sequence.py")
N_PREFIX, N_SUFFIX, CHUNK_LINES, RING_CHUNKS = 256, 64, 32, 16     # the editors' (editor_requests' defaults)
LATENCY_GOAL = 0.7          # specframe's median completion latency over llama-server's, at most
PROMPT_GOAL = 1.0           # specframe's mean prompt tokens evaluated per completion over llama-server's, at most
THROWAWAY = {"input_prefix": "def add(a, b):\n", "input_suffix": "\n\nprint(add(1, 2))\n", "input_extra": [],
             "prompt": "    return", "n_predict": 8, "temperature": 0.0, "cache_prompt": True,
             "samplers": ["top_k", "top_p", "temperature", "infill"]}


@dataclass
class Outcome:
    request: int              # its place in the session, from 1
    kind: str                 # "warm-up" or "completion"
    line: int | None          # the cursor's line (a completion's)
    seconds: float            # sent -> whole answer
    predicted_n: int
    prompt_n: int | None      # prompt tokens evaluated
    cache_n: int | None       # prompt tokens taken from the cache
    prompt_ms: float | None   # the server's own times
    predicted_ms: float | None
    stop_type: str | None
    truncated: bool | None
    content: str


@dataclass
class Summary:
    server: str
    completions: int
    latency_median: float
    latency_p90: float
    prompt_n_mean: float | None
    prompt_n_median: float | None
    cache_n_mean: float | None
    predicted: int
    completion_seconds: float
    tokens_per_second: float     # tokens predicted over the completions' whole latency


# --- the session -----------------------------------------------------------------------------------------------

def session(args: argparse.Namespace) -> list[EditorRequest]:
    """The editor's requests, greedy and without time caps, as sent (warm-ups without their response filter)."""
    made = editor_requests(args.file, args.extra, start_line=args.start_line, requests=args.requests,
                           n_prefix=N_PREFIX, n_suffix=N_SUFFIX, chunk_lines=CHUNK_LINES, ring_chunks=RING_CHUNKS,
                           n_predict=args.n_predict, seed=args.seed, greedy=True, time_limits=False, root=REPO)
    return [EditorRequest(r.kind, {k: v for k, v in r.body.items() if k != "response_fields"}, r.line, r.column)
            for r in made]


def send(url: str, index: int, request: EditorRequest) -> Outcome:
    """One request, not streamed: its outcome from the server's answer and the wall time."""
    start = time.perf_counter()
    response = httpx.post(url + "/infill", json=request.body, timeout=3600)
    seconds = time.perf_counter() - start
    if response.status_code != 200:
        raise BenchError(f"{url}/infill, request {index}: HTTP {response.status_code}: {response.text[:2000]}")
    return outcome(index, request, seconds, response.json())


def outcome(index: int, request: EditorRequest, seconds: float, answer: dict) -> Outcome:
    timings = answer.get("timings") or {}
    predicted = answer.get("tokens_predicted", timings.get("predicted_n"))
    return Outcome(index, request.kind, request.line, seconds, int(predicted or 0), timings.get("prompt_n"),
                   timings.get("cache_n"), timings.get("prompt_ms"), timings.get("predicted_ms"),
                   answer.get("stop_type"), answer.get("truncated"), answer.get("content") or "")


def bench_server(name: str, command: list[str], port: int, requests: list[EditorRequest],
                 log: pathlib.Path) -> list[Outcome]:
    with running(name, command, port, log) as url:
        send(url, 0, EditorRequest(COMPLETION, THROWAWAY))
        outcomes = []
        for index, request in enumerate(requests, 1):
            outcomes.append(send(url, index, request))
            o = outcomes[-1]
            say(f"{name}: {index}/{len(requests)} {o.kind} line {o.line}: {o.seconds:.2f} s, prompt_n {o.prompt_n}, "
                f"cache_n {o.cache_n}, {o.predicted_n} predicted")
    return outcomes


# --- the report ------------------------------------------------------------------------------------------------

def summarize(server: str, outcomes: list[Outcome]) -> Summary:
    """The completions' figures (the warm-ups are in the per-request table alone)."""
    done = [o for o in outcomes if o.kind == COMPLETION]
    if not done:
        raise BenchError(f"{server}: no completion request")
    latencies = sorted(o.seconds for o in done)
    prompts = [o.prompt_n for o in done if o.prompt_n is not None]
    cached = [o.cache_n for o in done if o.cache_n is not None]
    predicted, seconds = sum(o.predicted_n for o in done), sum(latencies)
    return Summary(server, len(done), statistics.median(latencies),
                   p90(latencies),
                   statistics.mean(prompts) if prompts else None, statistics.median(prompts) if prompts else None,
                   statistics.mean(cached) if cached else None, predicted, seconds, predicted / seconds)


def comparison(ours: list[Outcome], peer: list[Outcome], a: Summary, b: Summary) -> dict:
    """specframe over llama-server, the goals, and how many completions have the same text."""
    pairs = [(x, y) for x, y in zip(ours, peer) if x.kind == COMPLETION]
    latency = a.latency_median / b.latency_median
    prompt = (a.prompt_n_mean / b.prompt_n_mean if a.prompt_n_mean is not None and b.prompt_n_mean else None)
    return {"latency_median_ratio": latency, "latency_goal": LATENCY_GOAL, "latency_goal_met": latency <= LATENCY_GOAL,
            "prompt_n_mean_ratio": prompt, "prompt_goal": PROMPT_GOAL,
            "prompt_goal_met": prompt is not None and prompt <= PROMPT_GOAL,
            "same_text": sum(x.content == y.content for x, y in pairs), "compared": len(pairs)}


def number(value: float | int | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def report(meta: dict, summaries: list[Summary], runs: dict[str, list[Outcome]], compared: dict | None) -> str:
    s = meta["session"]
    lines = [f"# Editor session: specframe serve vs llama-server --cache-reuse {s['cache_reuse']}", "",
             f"`{meta['command']}` on {meta['date']}; CPU: {meta['cpu']}; {meta['threads']} threads; config "
             f"`{meta['config']}`; {meta['kernels']}.", "",
             f"Session: `{s['file']}` ({s['file_lines']} lines, sha256 {s['file_sha256']}) written from line "
             f"{s['start_line']} on, {s['completions']} completions and {s['warm_ups']} warm-ups; "
             f"{s['n_prefix']} lines of prefix, {s['n_suffix']} of suffix, a ring of up to {s['ring_chunks']} chunks "
             f"of {s['chunk_lines']} lines of {', '.join(f'`{e}`' for e in s['extra']) or 'no file'}; "
             f"n_predict {s['n_predict']}, greedy, no time caps; {s['slots']} slot(s), cache reuse of chunks of "
             f">= {s['cache_reuse']} tokens; seed {s['seed']}. Completion requests only:", "",
             "| server | completions | latency median s | p90 s | prompt_n mean | prompt_n median | cache_n mean | "
             "predicted tokens | tokens/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in summaries:
        lines.append(f"| {m.server} | {m.completions} | {m.latency_median:.2f} | {m.latency_p90:.2f} | "
                     f"{number(m.prompt_n_mean)} | {number(m.prompt_n_median)} | {number(m.cache_n_mean)} | "
                     f"{m.predicted} | {m.tokens_per_second:.2f} |")
    lines += ["", "tokens/s: the completions' predicted tokens over their whole latency (prompt included)."]
    if compared:
        def verdict(met: bool) -> str:
            return "met" if met else "**not met**"

        prompt = compared["prompt_n_mean_ratio"]
        lines += ["", "| specframe / llama-server | ratio | goal |", "|---|---:|---|",
                  f"| median completion latency | {compared['latency_median_ratio']:.2f}x | <= "
                  f"{compared['latency_goal']:.2f}x: {verdict(compared['latency_goal_met'])} |",
                  f"| mean prompt tokens evaluated per completion | {number(prompt, 2)}x | <= "
                  f"{compared['prompt_goal']:.2f}x: {verdict(compared['prompt_goal_met'])} |", "",
                  f"Same completion text on both servers: {compared['same_text']} of {compared['compared']}."]
    names = list(runs)
    header = " | ".join(f"{n} prompt_n | {n} cache_n | {n} s" for n in names)
    lines += ["", "Every request:", "", f"| # | kind | line | {header} |" + (" same text |" if compared else ""),
              "|---:|---|---:|" + "---:|---:|---:|" * len(names) + ("---|" if compared else "")]
    for i, first in enumerate(runs[names[0]]):
        row = [runs[n][i] for n in names]
        cells = " | ".join(f"{number(o.prompt_n)} | {number(o.cache_n)} | {o.seconds:.2f}" for o in row)
        same = ""
        if compared:
            same = (" yes |" if row[0].content == row[1].content else " no |") if first.kind == COMPLETION else " |"
        lines.append(f"| {first.request} | {first.kind} | {number(first.line)} | {cells} |{same}")
    return "\n".join(lines) + "\n"


# --- main ------------------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=pathlib.Path, default=PRESET,
                        help="specframe's config (default: the preset fim-qwen-1.5b-spec)")
    parser.add_argument("--file", type=pathlib.Path, default=FILE,
                        help="the file the user writes (default: specframe/drafting/chain.py)")
    parser.add_argument("--extra", type=pathlib.Path, nargs="*", default=list(EXTRAS),
                        help="the other files whose chunks the ring buffer takes (default: "
                             "specframe/drafting/protocol.py specframe/sequence.py; none: no ring, no warm-ups)")
    parser.add_argument("--requests", type=int, default=24, help="completion requests (default 24; warm-ups besides)")
    parser.add_argument("--start-line", type=int,
                        help="the first completion's line, from 1 (default: 257, so that the prefix slides from the "
                             "first request on; 1 in a file too short for that)")
    parser.add_argument("--n-predict", type=int, default=64, help="tokens a completion may make (default 64)")
    parser.add_argument("--cache-reuse", type=int, default=256,
                        help="both servers' --cache-reuse: the shortest cached chunk shifted into place (default 256; "
                             "0: off)")
    parser.add_argument("--slots", type=int, default=1, help="both servers' slots (default 1: one editor)")
    parser.add_argument("--seed", type=int, default=0, help="the session's seed: cursor moves, typing, chunks")
    parser.add_argument("--peers", type=pathlib.Path, metavar="DIR",
                        help="the peers build (its server/llama-server) instead of running benchmarks/peers/build.sh")
    parser.add_argument("--no-peer", action="store_true", help="measure specframe serve alone")
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "EDITOR.md", help="Markdown report")
    args = parser.parse_args(argv)
    if args.requests < 1 or args.n_predict < 1 or args.slots < 1:
        parser.error("--requests, --n-predict and --slots must be >= 1")
    if args.cache_reuse < 0 or (args.start_line is not None and args.start_line < 1):
        parser.error("--cache-reuse must be >= 0 and --start-line >= 1")
    for path in [args.file, *args.extra]:
        if not path.is_file():
            parser.error(f"{path} is not a file")
    return args


def server_commands(args: argparse.Namespace, config: Config,
                    binary: pathlib.Path | None) -> dict[str, Callable[[int], list[str]]]:
    """Each server's command line for a port: specframe serve, and llama-server unless ``binary`` is None."""
    reuse = ["--cache-reuse", str(args.cache_reuse)]
    commands = {"specframe": lambda port: specframe_command(args.config.resolve(), port, args.slots) + reuse}
    if binary is not None:
        ubatch = config.target.n_ubatch or config.target.n_batch      # specframe's physical batch
        commands["llama-server"] = lambda port: (llama_server_command(binary, config, port, args.slots) + reuse
                                                 + ["-ub", str(ubatch)])
    return commands


def session_meta(args: argparse.Namespace, requests: list[EditorRequest]) -> dict:
    text = args.file.read_bytes()
    completions = [r for r in requests if r.kind == COMPLETION]
    return {"file": display(args.file), "file_lines": text.count(b"\n"),
            "file_sha256": hashlib.sha256(text).hexdigest()[:16], "extra": [display(p) for p in args.extra],
            "extra_sha256": [hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in args.extra],
            "start_line": completions[0].line, "completions": len(completions),
            "warm_ups": len(requests) - len(completions), "n_prefix": N_PREFIX, "n_suffix": N_SUFFIX,
            "chunk_lines": CHUNK_LINES, "ring_chunks": RING_CHUNKS, "n_predict": args.n_predict,
            "cache_reuse": args.cache_reuse, "slots": args.slots, "seed": args.seed, "greedy": True,
            "time_limits": False}


def display(path: pathlib.Path) -> str:
    path = path.resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main() -> None:
    args = parse_args()
    config = load_config(args.config)
    try:
        requests = session(args)
    except ValueError as exc:
        raise BenchError(str(exc)) from exc
    binary = None if args.no_peer else llama_server(args.peers, ("--server-only",))
    commands = server_commands(args, config, binary)
    logs = pathlib.Path(tempfile.mkdtemp(prefix="specframe-editor-"))
    runs: dict[str, list[Outcome]] = {}
    for name, command in commands.items():
        port = free_port()
        runs[name] = bench_server(name, command(port), port, requests, logs / f"{name}.log")
    summaries = [summarize(name, outcomes) for name, outcomes in runs.items()]
    compared = (comparison(runs["specframe"], runs["llama-server"], summaries[0], summaries[1])
                if "llama-server" in runs else None)
    meta = run_meta(config) | {"config": str(args.config), "session": session_meta(args, requests),
                               "commands": {name: command(0) for name, command in commands.items()}}
    write_report(args.out, report(meta, summaries, runs, compared),
                 {"meta": meta, "summaries": [asdict(s) for s in summaries], "comparison": compared,
                  "requests": {name: [asdict(o) for o in outcomes] for name, outcomes in runs.items()}}, logs)


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        sys.exit(f"[editor] error: {exc}")
