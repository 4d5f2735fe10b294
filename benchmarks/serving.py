"""specframe serve against llama.cpp's llama-server -np 4 on this machine (docs/design.md, performance method).

    python benchmarks/serving.py [--config config.example.toml] [--clients 1 2 4] [--requests 8]
                                 [--max-tokens N] [--peers DIR | --no-peer] [--out benchmarks/SERVING.md]

Each server runs alone on 127.0.0.1 with 4 slots, the config's target and context per slot, the same threads, one KV
buffer for all slots or one each (kv_unified: -kvu), the same draft model and n-gram types (llama-server: -md with the
config's draft-model file, --spec-type with the n-gram drafters llama.cpp has; prompt lookup and copy-cursor have no
llama.cpp counterpart). For each number of clients, that many clients send --requests streamed chat requests in all,
one after another each, cycling through the built-in workloads (greedy, each workload's token budget or --max-tokens).
Reported per server and client count: aggregate generated tokens per second (all tokens over the wall time), and the
median and 90th percentile of request latency and of time to the first text. Then a chat's second turn (the first
turn's answer plus a question) shows how much of its prompt each server found in its cache (cache_n) and evaluated
(prompt_n). A first row, "specframe run", is the same requests one after another on the engine in this process, as
`specframe run` answers them (drafters started cold for each): the speed a single client of the server should keep;
"plain" is the same without speculation, the speed nothing may fall below.

    python benchmarks/serving.py --sessions [NAME|FILE ...] [--config ...] [--peers DIR | --no-peer]
                                 [--peer-defaults] [--max-tokens N] [--out benchmarks/SERVING-SESSIONS.md]

Session mode: the sessions of `specframe bench --session` (specframe/bench/sessions/; all built-in ones when none is
named), one after another on each server, one client, each session's turns in order as a chat client sends them:
every request carries the system prompt, the earlier turns and that server's own answers to them (greedy, streamed).
What drafters learn from earlier requests stays in each server, as in use. The peer is llama-server drafting with
ngram-mod alone (--spec-type ngram-mod: llama.cpp's drafter that keeps a pool across requests), with the config's
ngram-mod parameters (llama.cpp's defaults with --peer-defaults, or when the config has no ngram-mod). Reported per
session and in total: completion tokens, wall time (each request sent -> its last event, prompts included), tokens
per second, specframe's over llama-server's, and how many answers the two servers wrote alike.

Not a test: timings are meaningful only on an otherwise idle machine. Builds llama-server first when needed
(benchmarks/peers/build.sh). Writes the Markdown report (--out) and the same as JSON beside it (every request);
the servers' logs go to a temporary folder, named at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import Iterator

import httpx

from specframe.bench.workloads import Session, sessions, workloads
from specframe.config import Config, load_config
from specframe.engine import Engine
from specframe.llama import default_threads, kernels_beside
from specframe.models import resolve_model
from specframe.overrides import DrafterTables
from specframe.requantized import requantized

HERE = pathlib.Path(__file__).resolve().parent
# The environment the servers run in: as this benchmark started, before an engine here set ggml's kernel switch.
LAUNCH_ENVIRONMENT = dict(os.environ)
REPO = HERE.parent
SLOTS = 4
LLAMA_CPP_NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
NGRAM_FLAGS = {   # our n-gram drafters' parameters, as llama-server takes them
    "ngram-simple": {"n": "--spec-ngram-simple-size-n", "m": "--spec-ngram-simple-size-m"},
    "ngram-map-k": {"n": "--spec-ngram-map-k-size-n", "m": "--spec-ngram-map-k-size-m",
                    "min_hits": "--spec-ngram-map-k-min-hits"},
    "ngram-map-k4v": {"n": "--spec-ngram-map-k4v-size-n", "m": "--spec-ngram-map-k4v-size-m",
                      "min_hits": "--spec-ngram-map-k4v-min-hits"},
    "ngram-mod": {"n_match": "--spec-ngram-mod-n-match", "n_min": "--spec-ngram-mod-n-min",
                  "n_max": "--spec-ngram-mod-n-max"},
}
SECOND_TURN = "Thank you. Now explain in one sentence what you changed or wrote."


def say(message: str) -> None:
    print(f"[serving] {message}", file=sys.stderr, flush=True)


class BenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class Request:
    workload: str
    message: str
    max_tokens: int


@dataclass
class Outcome:
    workload: str
    tokens: int
    seconds: float            # request sent -> last event
    first_text: float | None  # request sent -> first text


@dataclass
class TurnOutcome:
    server: str
    session: str
    turn: int                  # from 1
    tokens: int                # completion tokens
    seconds: float             # request sent -> last event
    prompt_n: int | None       # prompt tokens the server evaluated (its timings), the rest it had cached
    cache_n: int | None
    text: str


@dataclass
class Row:
    server: str
    clients: int
    requests: int
    tokens: int
    wall_seconds: float
    tokens_per_second: float
    latency_median: float
    latency_p90: float
    first_text_median: float | None


# --- the servers ---------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(name: str, command: list[str], port: int, log: pathlib.Path) -> Iterator[str]:
    """Start a server, wait until /health answers 200, yield its URL; stop it (SIGTERM, then SIGKILL) at the end."""
    url = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        say(f"starting {name}: {' '.join(command)}")
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, env=LAUNCH_ENVIRONMENT)
        try:
            deadline = time.monotonic() + 600            # a first run may fetch models and measure pass costs
            while True:
                if process.poll() is not None:
                    raise BenchError(f"{name} exited with {process.returncode} (log: {log})")
                try:
                    if httpx.get(url + "/health", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise BenchError(f"{name} did not get ready within 10 minutes (log: {log})")
                time.sleep(0.5)
            yield url
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def specframe_command(config_path: pathlib.Path, port: int, slots: int = SLOTS) -> list[str]:
    return [sys.executable, "-m", "specframe.cli", "serve", "--config", str(config_path), "--host", "127.0.0.1",
            "--port", str(port), "--slots", str(slots)]


def llama_server_command(binary: pathlib.Path, config: Config, port: int, slots: int = SLOTS) -> list[str]:
    """llama-server with ``slots`` slots of the config's context each, and the config's target, threads, KV buffer
    layout, draft model and n-gram types with their parameters."""
    t, speculative = config.target, config.speculative
    threads = t.threads or default_threads()
    command = [str(binary), "-m", str(resolve_model(t.model, config.directory)), "-c", str(t.n_ctx * slots),
               "-np", str(slots), "-t", str(threads), "-tb", str(threads), "-b", str(t.n_batch),
               "-ngl", str(t.n_gpu_layers), "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
    if t.kv_unified:
        command.append("-kvu")
    types = [d.type for d in config.drafters if d.type in LLAMA_CPP_NGRAM_TYPES]
    for drafter in config.drafters:
        if drafter.type == "draft-model":
            params = drafter.params
            model = resolve_model(params.model, config.directory)
            if params.quantize != "none":
                model = requantized(model, params.quantize)
            command += ["-md", str(model), "--spec-draft-n-max", str(min(params.n_max, speculative.n_max)),
                        "--spec-draft-n-min", str(params.n_min), "--spec-draft-p-min", str(params.p_min),
                        "-ngld", str(params.n_gpu_layers)]
            types.insert(0, "draft-simple")
        for name, flag in NGRAM_FLAGS.get(drafter.type, {}).items():
            command += [flag, str(getattr(drafter.params, name))]
    if types:
        command += ["--spec-type", ",".join(types)]
    return command


# --- the clients ---------------------------------------------------------------------------------------------------

def ask(url: str, request: Request, messages: list[dict] | None = None) -> tuple[Outcome, dict]:
    """One streamed, greedy chat request: its outcome, and its answer's text and timings."""
    body = {"messages": messages or [{"role": "user", "content": request.message}], "stream": True,
            "max_tokens": request.max_tokens, "temperature": 0.0, "stream_options": {"include_usage": True}}
    start, first, tokens, text, timings = time.perf_counter(), None, 0, [], {}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=3600) as response:
        if response.status_code != 200:
            raise BenchError(f"{url}: HTTP {response.status_code}: {response.read().decode(errors='replace')}")
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            for choice in chunk.get("choices") or []:
                if content := (choice.get("delta") or {}).get("content"):
                    first = first or time.perf_counter()
                    text.append(content)
            tokens = (chunk.get("usage") or {}).get("completion_tokens", tokens)
            timings = chunk.get("timings", timings)
    end = time.perf_counter()
    return Outcome(request.workload, tokens, end - start, first and first - start), {"text": "".join(text),
                                                                                     "timings": timings}


def measure(name: str, url: str, requests: list[Request], clients: int) -> tuple[Row, list[Outcome]]:
    """``clients`` clients share the requests (client i sends i, i + clients, ...), each one after another."""
    outcomes: list[Outcome] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def client(mine: list[Request]) -> None:
        try:
            for request in mine:
                outcome, _ = ask(url, request)
                with lock:
                    outcomes.append(outcome)
        except BaseException as exc:   # reported after the others finish
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(requests[i::clients],)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if failures:
        raise BenchError(f"{name}: {failures[0]}")
    return summary(name, clients, outcomes, wall), outcomes


def p90(ordered: list[float]) -> float:
    """The 90th percentile of sorted values (the nearest rank at or below)."""
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def summary(name: str, clients: int, outcomes: list[Outcome], wall: float) -> Row:
    latencies = sorted(o.seconds for o in outcomes)
    firsts = [o.first_text for o in outcomes if o.first_text is not None]
    tokens = sum(o.tokens for o in outcomes)
    return Row(name, clients, len(outcomes), tokens, wall, tokens / wall, statistics.median(latencies),
               p90(latencies),
               statistics.median(firsts) if firsts else None)


def second_turn(url: str, request: Request) -> dict:
    """A chat's second turn: how much of its prompt the server kept from the first."""
    _, first = ask(url, request)
    messages = [{"role": "user", "content": request.message}, {"role": "assistant", "content": first["text"]},
                {"role": "user", "content": SECOND_TURN}]
    _, second = ask(url, Request(request.workload, SECOND_TURN, 32), messages)
    t1, t2 = first["timings"], second["timings"]
    return {"first_prompt_n": t1.get("prompt_n"), "first_predicted_n": t1.get("predicted_n"),
            "second_cache_n": t2.get("cache_n"), "second_prompt_n": t2.get("prompt_n")}


def bench_server(name: str, command: list[str], port: int, requests: list[Request], clients: list[int],
                 log: pathlib.Path) -> tuple[list[Row], dict, list[dict]]:
    with running(name, command, port, log) as url:
        ask(url, Request("warm-up", "Say hello.", 4))
        rows, outcomes = [], []
        for n in clients:
            say(f"{name}: {n} client(s), {len(requests)} requests")
            row, done = measure(name, url, requests, n)
            say(f"{name}: {n} client(s): {row.tokens_per_second:.2f} tokens/s, median latency "
                f"{row.latency_median:.1f} s")
            rows.append(row)
            outcomes += [asdict(o) | {"clients": n} for o in done]
        turn = second_turn(url, requests[0])
    return rows, turn, outcomes


def bench_run(config_path: pathlib.Path, requests: list[Request], speculative: bool) -> Row:
    """The requests one after another as `specframe run` answers them (``speculative``: else as `run --no-spec`):
    generation time only, drafters cold."""
    with Engine.from_config(config_path) as engine:
        engine.generate("Say hello.", max_tokens=4, temperature=0.0)    # the servers get a warm-up too
        outcomes = []
        start = time.perf_counter()
        for request in requests:
            engine.forget_drafters()
            began = time.perf_counter()
            generation = engine.stream(request.message, max_tokens=request.max_tokens, temperature=0.0,
                                       speculative=speculative)
            first = next((time.perf_counter() for piece in generation if piece), None)
            for _ in generation:
                pass
            outcomes.append(Outcome(request.workload, len(generation.result.tokens), time.perf_counter() - began,
                                    first and first - began))
        name = "specframe run" if speculative else "plain (run --no-spec)"
        return summary(name, 1, outcomes, time.perf_counter() - start)


# --- sessions ------------------------------------------------------------------------------------------------------

def converse(server: str, url: str, session: Session) -> list[TurnOutcome]:
    """A session's turns in order, as a chat client sends them: each request carries the system prompt, the earlier
    turns and the server's own answers to them."""
    messages = [{"role": "system", "content": session.system}] if session.system else []
    outcomes = []
    for number, turn in enumerate(session.turns, 1):
        messages.append({"role": "user", "content": turn.user})
        outcome, answer = ask(url, Request(session.name, turn.user, turn.max_tokens), list(messages))
        messages.append({"role": "assistant", "content": answer["text"]})
        timings = answer["timings"]
        outcomes.append(TurnOutcome(server, session.name, number, outcome.tokens, outcome.seconds,
                                    timings.get("prompt_n"), timings.get("cache_n"), answer["text"]))
    return outcomes


def ngram_mod_peer(config: Config, defaults: bool) -> Config:
    """The config as the session peer runs it: its target and settings, drafting with ngram-mod alone, with the
    config's parameters for it unless ``defaults`` (or the config has none): then llama.cpp's (specframe's are
    the same)."""
    if defaults or not any(d.type == "ngram-mod" for d in config.drafters):
        config = load_config(config.path, overrides=(*config.overrides,
                                                     DrafterTables(("ngram-mod",), True, "the session peer")))
    return dataclasses.replace(config, drafters=tuple(d for d in config.drafters if d.type == "ngram-mod"))


def bench_sessions(name: str, command: list[str], port: int, chosen: list[Session],
                   log: pathlib.Path) -> list[TurnOutcome]:
    with running(name, command, port, log) as url:
        ask(url, Request("warm-up", "Say hello.", 4))
        outcomes = []
        for session in chosen:
            outcomes += converse(name, url, session)
            done = [o for o in outcomes if o.session == session.name]
            tokens, seconds = sum(o.tokens for o in done), sum(o.seconds for o in done)
            say(f"{name}: session {session.name}: {tokens} tokens in {seconds:.1f} s ({tokens / seconds:.2f} tokens/s)")
    return outcomes


def session_report(meta: dict, outcomes: list[TurnOutcome]) -> str:
    servers = list(dict.fromkeys(o.server for o in outcomes))
    names = list(dict.fromkeys(o.session for o in outcomes))
    lines = [f"# Sessions: {' vs '.join(f'`{s}`' for s in servers)}", "",
             f"`{meta['command']}` on {meta['date']}; CPU: {meta['cpu']}; {meta['threads']} threads; "
             f"config `{meta['config']}`; {SLOTS} slots; one client; greedy, streamed; {meta['kernels']}.", "",
             *[f"- {server}: `{' '.join(command)}`" for server, command in meta["commands"].items()], "",
             "| session | turns | server | tokens | wall s | tok/s | prompt tokens evaluated | cached |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]

    def of(server: str, session: str | None) -> list[TurnOutcome]:
        return [o for o in outcomes if o.server == server and session in (None, o.session)]

    def speed(done: list[TurnOutcome]) -> float:
        return sum(o.tokens for o in done) / sum(o.seconds for o in done)

    def count(values) -> str:
        known = [v for v in values if v is not None]
        return str(sum(known)) if known else "-"

    for session in [*names, None]:
        for server in servers:
            done = of(server, session)
            lines.append(f"| {session or '**all**'} | {len(done)} | {server} | {sum(o.tokens for o in done)} | "
                         f"{sum(o.seconds for o in done):.1f} | {speed(done):.2f} | "
                         f"{count(o.prompt_n for o in done)} | {count(o.cache_n for o in done)} |")
    if len(servers) == 2:
        ours, theirs = servers
        lines += ["", f"| session | {ours} / {theirs} (tok/s) | same answer text |", "|---|---:|---:|"]
        for session in [*names, None]:
            pairs = list(zip(of(ours, session), of(theirs, session)))
            same = sum(a.text == b.text for a, b in pairs)
            lines.append(f"| {session or '**all**'} | {speed(of(ours, session)) / speed(of(theirs, session)):.2f}x | "
                         f"{same} of {len(pairs)} |")
    return "\n".join(lines) + "\n"


def main_sessions(args: argparse.Namespace, config: Config) -> None:
    chosen = sessions(args.sessions, args.max_tokens)
    servers = [("specframe", lambda port: specframe_command(args.config.resolve(), port))]
    if not args.no_peer:
        binary, peer = llama_server(args.peers, ("--server-only",)), ngram_mod_peer(config, args.peer_defaults)
        servers.append(("llama-server ngram-mod", lambda port: llama_server_command(binary, peer, port)))
    logs = pathlib.Path(tempfile.mkdtemp(prefix="specframe-sessions-"))
    outcomes = []
    for name, command in servers:
        port = free_port()
        outcomes += bench_sessions(name, command(port), port, chosen, logs / f"{name.split()[0]}.log")
    meta = run_meta(config) | {"config": str(args.config), "sessions": [s.name for s in chosen],
                               "commands": {name: command(0) for name, command in servers}}
    write_report(args.out or HERE / "SERVING-SESSIONS.md", session_report(meta, outcomes),
                 {"meta": meta, "turns": [asdict(o) for o in outcomes]}, logs)


# --- the report ----------------------------------------------------------------------------------------------------

def report(meta: dict, rows: list[Row], turns: dict[str, dict]) -> str:
    lines = [f"# Serving: specframe serve vs llama-server -np {SLOTS}", "",
             f"`{meta['command']}` on {meta['date']}; CPU: {meta['cpu']}; {meta['threads']} threads; "
             f"config `{meta['config']}`; {meta['requests']} requests per client count, a mix of "
             f"{', '.join(meta['workloads'])}; greedy, streamed; {meta['kernels']}.", "",
             "| server | clients | tokens | wall s | aggregate tok/s | x fewest clients | latency median s | p90 s | "
             "first text median s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    fewest = {server: min(r.clients for r in rows if r.server == server) for server in {r.server for r in rows}}
    single = {r.server: r.tokens_per_second for r in rows if r.clients == fewest[r.server]}
    for r in rows:
        first = f"{r.first_text_median:.2f}" if r.first_text_median is not None else "-"
        lines.append(f"| {r.server} | {r.clients} | {r.tokens} | {r.wall_seconds:.1f} | {r.tokens_per_second:.2f} | "
                     f"{r.tokens_per_second / single[r.server]:.2f}x | {r.latency_median:.1f} | "
                     f"{r.latency_p90:.1f} | {first} |")
    run = next((r for r in rows if r.server == "specframe run"), None)
    serve = next((r for r in rows if r.server == "specframe" and r.clients == 1), None)
    plain = next((r for r in rows if r.server.startswith("plain")), None)
    if plain:
        lines += ["", "Speed over plain decoding of the same requests, one client: " + ", ".join(
            f"{r.server} {r.tokens_per_second / plain.tokens_per_second:.2f}x" for r in rows
            if r.clients == 1 and r is not plain) + "."]
    if run and serve:
        ratio = serve.tokens_per_second / run.tokens_per_second
        lines += ["", (f"One client of `specframe serve` ran at {ratio:.2f}x the speed of the same requests "
                       "answered as `specframe run` answers them.")]
    servers = {r.server for r in rows}
    if {"specframe", "llama-server"} <= servers:
        lines += ["", "| clients | specframe / llama-server (aggregate tok/s) |", "|---:|---:|"]
        by = {(r.server, r.clients): r.tokens_per_second for r in rows}
        for n in sorted({r.clients for r in rows}):
            lines.append(f"| {n} | {by['specframe', n] / by['llama-server', n]:.2f}x |")
    lines += ["", "A chat's second turn (the first answer plus a question):", "",
              "| server | first turn prompt_n | first turn predicted_n | second turn cache_n | second turn prompt_n |",
              "|---|---:|---:|---:|---:|"]
    for server, t in turns.items():
        lines.append(f"| {server} | {t['first_prompt_n']} | {t['first_predicted_n']} | {t['second_cache_n']} | "
                     f"{t['second_prompt_n']} |")
    return "\n".join(lines) + "\n"


# --- main ----------------------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=pathlib.Path, default=REPO / "config.example.toml",
                        help="specframe's config (default: config.example.toml)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4], help="client counts (default 1 2 4)")
    parser.add_argument("--requests", type=int, default=8, help="requests per client count (default 8)")
    parser.add_argument("--max-tokens", type=int, help="token budget of every request (default: the workload's)")
    parser.add_argument("--peers", type=pathlib.Path, metavar="DIR",
                        help="the peers build (its server/llama-server) instead of running benchmarks/peers/build.sh")
    parser.add_argument("--no-peer", action="store_true", help="measure specframe serve alone")
    parser.add_argument("--sessions", nargs="*", metavar="NAME|FILE",
                        help="session mode: these sessions of specframe bench --session (none named: all built-in)")
    parser.add_argument("--peer-defaults", action="store_true",
                        help="session mode: llama-server's ngram-mod with llama.cpp's defaults, not the config's")
    parser.add_argument("--out", type=pathlib.Path,
                        help="Markdown report (default: benchmarks/SERVING.md, in session mode SERVING-SESSIONS.md)")
    args = parser.parse_args(argv)
    if args.requests < 1 or min(args.clients) < 1 or (args.max_tokens is not None and args.max_tokens < 1):
        parser.error("--requests, --clients and --max-tokens must be >= 1")
    return args


def llama_server(peers: pathlib.Path | None, build_flags: tuple[str, ...] = ()) -> pathlib.Path:
    """The peers build's llama-server: ``peers``'s, else benchmarks/peers/build.sh's (run with ``build_flags``, e.g.
    --server-only, which builds nothing when it is there already)."""
    if peers is None:
        proc = subprocess.run([str(HERE / "peers" / "build.sh"), *build_flags], stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise BenchError("benchmarks/peers/build.sh failed (see above)")
        peers = pathlib.Path(proc.stdout.strip().splitlines()[-1])
    binary = peers / "server" / "llama-server"
    if not binary.is_file():
        raise BenchError(f"{binary} is missing: run benchmarks/peers/build.sh")
    return binary


def write_report(out: pathlib.Path, markdown: str, data: dict, logs: pathlib.Path) -> None:
    """The Markdown report at ``out``, every figure as JSON beside it, and the report shown."""
    out.write_text(markdown)
    out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    print(markdown)
    say(f"wrote {out} and {out.with_suffix('.json')}; the servers' logs are in {logs}")


def run_meta(config: Config) -> dict:
    """What a report states of its run: the command, the date, the CPU, the threads and ggml's kernel choice."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = re.search(r"^Model name:\s*(.+)$", lscpu, re.MULTILINE)
    return {"command": " ".join(["python", *sys.argv]), "date": datetime.date.today().isoformat(),
            "cpu": cpu.group(1).strip() if cpu else "unknown", "threads": config.target.threads or default_threads(),
            "kernels": kernels_beside(LAUNCH_ENVIRONMENT)}


def main() -> None:
    args = parse_args()
    config = load_config(args.config)
    if args.sessions is not None:
        return main_sessions(args, config)
    chosen = workloads((), args.max_tokens)
    requests = [Request(w.name, w.prompt, w.max_tokens) for w in (chosen * args.requests)[:args.requests]]
    servers = [("specframe", lambda port: specframe_command(args.config.resolve(), port))]
    if not args.no_peer:
        binary = llama_server(args.peers)
        servers.append(("llama-server", lambda port: llama_server_command(binary, config, port)))
    rows, turns, runs = [], {}, []
    for speculative in (False, True):
        rows.append(bench_run(args.config, requests, speculative))
        say(f"{rows[-1].server}: the same requests in this process: {rows[-1].tokens_per_second:.2f} tokens/s")
    logs = pathlib.Path(tempfile.mkdtemp(prefix="specframe-serving-"))
    for name, command in servers:
        port = free_port()
        server_rows, turns[name], outcomes = bench_server(name, command(port), port, requests, args.clients,
                                                          logs / f"{name}.log")
        rows += server_rows
        runs += [o | {"server": name} for o in outcomes]
    meta = run_meta(config) | {"config": str(args.config), "requests": args.requests,
                               "workloads": [w.name for w in chosen],
                               "commands": {name: command(0) for name, command in servers}}
    write_report(args.out or HERE / "SERVING.md", report(meta, rows, turns),
                 {"meta": meta, "rows": [asdict(r) for r in rows], "second_turn": turns, "requests": runs}, logs)


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        sys.exit(f"[serving] error: {exc}")
