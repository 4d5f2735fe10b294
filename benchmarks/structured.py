"""Structured output through the servers: specframe serve against llama-server on the same requests.

    python benchmarks/structured.py [--config config.example.toml] [--repeat 2] [--max-tokens N]
                                    [--peers DIR] [--out benchmarks/STRUCTURED.md]

The requests are `specframe bench`'s structured workloads as chat requests, greedy, one at a time, one slot:
json-extraction with `response_format` json_schema (the workload's schema), and tool-call with its tools
(tool_choice auto). Each goes to:

- specframe serve with the config (drafting), and with `speculative.enabled = false` (plain decoding, constrained);
  the latter also gets json-extraction's request without its schema (plain and free: what the grammar costs);
- llama-server `--jinja` (the same build of llama.cpp) without drafting, and with each speculative type it has:
  the config's draft model (draft-simple, its n_max and p_min) and its n-gram types at their defaults. Its best
  type for a workload is the one fastest over the same runs (chosen in hindsight, which favours it).

Servers run one after another, alone on 127.0.0.1, each restarted at every repeat, every other repeat in reverse
order. Speed is each server's own `timings.predicted_per_second`. Not a test: run it on an otherwise idle machine.
Writes the Markdown report (--out) and every request as JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass

import httpx
from serving import (
    LLAMA_CPP_NGRAM_TYPES,
    REPO,
    BenchError,
    free_port,
    llama_server,
    run_meta,
    running,
    say,
    write_report,
)

from specframe.bench.workloads import workload
from specframe.config import Config, load_config
from specframe.llama import default_threads
from specframe.models import resolve_model
from specframe.requantized import requantized

HERE = pathlib.Path(__file__).resolve().parent
WORKLOADS = ("json-extraction", "tool-call")
FREE = "json-extraction, free"      # the extraction's request without its schema


@dataclass
class Outcome:
    server: str
    workload: str
    repeat: int
    tokens: int
    tokens_per_second: float
    prompt_n: int
    draft_n: int
    draft_n_accepted: int
    finish_reason: str
    answer: str


def body(name: str, max_tokens: int | None) -> dict:
    """The chat request of a workload (FREE: json-extraction's without its schema)."""
    w = workload("json-extraction" if name == FREE else name, max_tokens)
    request = {"messages": [{"role": "user", "content": w.prompt}], "max_tokens": w.max_tokens, "temperature": 0}
    if w.schema is not None and name != FREE:
        request["response_format"] = {"type": "json_schema",
                                      "json_schema": {"name": "record", "schema": w.schema, "strict": True}}
    if w.tools is not None:
        request["tools"] = w.tools
    return request


def ask(url: str, server: str, name: str, repeat: int, max_tokens: int | None) -> Outcome:
    response = httpx.post(url + "/v1/chat/completions", json=body(name, max_tokens), timeout=600)
    if response.status_code != 200:
        raise BenchError(f"{server}: {name}: HTTP {response.status_code}: {response.text[:300]}")
    data = response.json()
    timings, choice = data["timings"], data["choices"][0]
    message = choice["message"]
    answer = message.get("content") or json.dumps(message.get("tool_calls"))
    return Outcome(server, name, repeat, timings["predicted_n"], timings["predicted_per_second"],
                   timings["prompt_n"] + timings.get("cache_n", 0), timings.get("draft_n", 0),
                   timings.get("draft_n_accepted", 0), choice["finish_reason"], answer)


def servers(config: Config, config_path: pathlib.Path, binary: pathlib.Path | None) -> dict[str, tuple[list, tuple]]:
    """name -> (command with PORT for its port, the workloads it is asked)."""
    ours = [sys.executable, "-m", "specframe.cli", "serve", "--config", str(config_path), "--host", "127.0.0.1",
            "--port", "PORT", "--slots", "1"]
    chosen: dict[str, tuple[list, tuple]] = {
        "specframe": (ours, WORKLOADS),
        "specframe plain": (ours + ["--set", "speculative.enabled=false"], WORKLOADS + (FREE,)),
    }
    if binary is None:
        return chosen
    t = config.target
    threads = t.threads or default_threads()
    base = [str(binary), "-m", str(resolve_model(t.model, config.directory)), "-c", str(t.n_ctx), "-np", "1",
            "-t", str(threads), "-tb", str(threads), "-b", str(t.n_batch), "--host", "127.0.0.1", "--port", "PORT",
            "--no-webui", "--jinja"]
    chosen["llama-server plain"] = (base, WORKLOADS)
    for drafter in config.drafters:
        if drafter.type == "draft-model":
            params = drafter.params
            model = resolve_model(params.model, config.directory)
            if params.quantize != "none":
                model = requantized(model, params.quantize)
            chosen["llama-server draft-simple"] = (base + [
                "-md", str(model), "--spec-draft-n-max", str(min(params.n_max, config.speculative.n_max)),
                "--spec-draft-p-min", str(params.p_min), "--spec-type", "draft-simple"], WORKLOADS)
    for kind in LLAMA_CPP_NGRAM_TYPES:
        chosen[f"llama-server {kind}"] = (base + ["--spec-type", kind], WORKLOADS)
    return chosen


def report(meta: dict, outcomes: list[Outcome]) -> str:
    speed: dict[tuple[str, str], float] = {}
    tokens: dict[tuple[str, str], int] = {}
    for key in {(o.server, o.workload) for o in outcomes}:
        runs = [o for o in outcomes if (o.server, o.workload) == key]
        speed[key] = statistics.median(o.tokens_per_second for o in runs)
        tokens[key] = runs[0].tokens
    lines = ["# Structured output: specframe serve vs llama-server", "",
             f"{meta['date']}, {meta['cpu']}, {meta['threads']} threads, `{meta['command']}`; median of "
             f"{meta['repeat']} runs per server and workload (each server restarted at every repeat).", "",
             "| server | workload | tokens | tok/s | drafted | accepted | prompt tokens |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for o in sorted({(o.server, o.workload): o for o in outcomes}.values(), key=lambda o: (o.workload, o.server)):
        lines.append(f"| {o.server} | {o.workload} | {tokens[o.server, o.workload]} | "
                     f"{speed[o.server, o.workload]:.2f} | {o.draft_n} | {o.draft_n_accepted} | {o.prompt_n} |")
    lines += ["", "| workload | specframe / its plain (constrained) | its plain constrained / free | "
              "specframe / llama-server's best type | llama-server's best type | its best / its plain |",
              "|---|---:|---:|---:|---|---:|"]
    for name in WORKLOADS:
        ours, plain = speed.get(("specframe", name)), speed.get(("specframe plain", name))
        if ours is None or plain is None:
            continue
        free = speed.get(("specframe plain", FREE))
        theirs = {s: v for (s, w), v in speed.items() if w == name and s.startswith("llama-server ")
                  and s != "llama-server plain"}
        best = max(theirs, key=theirs.__getitem__) if theirs else None
        their_plain = speed.get(("llama-server plain", name))
        lines.append(f"| {name} | {ours / plain:.2f}x | "
                     + (f"{plain / free:.2f}" if free and name == "json-extraction" else "-") + " | "
                     + (f"{ours / theirs[best]:.2f}x | {best.removeprefix('llama-server ')} | "
                        f"{theirs[best] / their_plain:.2f}x" if best and their_plain else "- | - | -") + " |")
    lines += ["", "Answers (first run):", ""]
    for o in outcomes:
        if o.repeat == 0:
            lines.append(f"- {o.server}, {o.workload} ({o.finish_reason}): `{o.answer[:300]}`")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=pathlib.Path, default=REPO / "config.example.toml")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--peers", type=pathlib.Path, metavar="DIR", help="the peers build (benchmarks/peers/build.sh)")
    parser.add_argument("--no-peer", action="store_true", help="measure specframe serve alone")
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "STRUCTURED.md")
    args = parser.parse_args()
    config = load_config(args.config)
    binary = None if args.no_peer else llama_server(args.peers)
    chosen = servers(config, args.config.resolve(), binary)
    logs = pathlib.Path(tempfile.mkdtemp(prefix="specframe-structured-"))
    outcomes: list[Outcome] = []
    for repeat in range(args.repeat):
        for name, (command, names) in (list(chosen.items()) if repeat % 2 == 0 else reversed(chosen.items())):
            port = free_port()
            with running(name, [str(port) if part == "PORT" else part for part in command], port,
                         logs / f"{name.replace(' ', '-')}-{repeat}.log") as url:
                for request in names:
                    outcomes.append(ask(url, name, request, repeat, args.max_tokens))
                    say(f"{name}, {request}: {outcomes[-1].tokens} tokens, {outcomes[-1].tokens_per_second:.2f} "
                        "tokens/s")
    meta = run_meta(config) | {"repeat": args.repeat,
                               "commands": {name: command for name, (command, _) in chosen.items()}}
    write_report(args.out, report(meta, outcomes), {"meta": meta, "requests": [asdict(o) for o in outcomes]}, logs)


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        sys.exit(f"[structured] error: {exc}")
