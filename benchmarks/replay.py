"""Drafters replayed on known replies, priced by the stored pass-cost table: comparisons without the machine's noise.

    python benchmarks/replay.py [--config config.example.toml] [--workload NAME ...] [--stdlib N]
                                [--drafters TYPE[,TYPE...] ...] [--pass-ms N:MS[,N:MS...]] [--own-time]

Each prompt's plain greedy reply is generated once with the config's target (and kept, by prompt, in the cache under
replay/). Then, pass by pass, a drafter set drafts as if the target were decoding: each draft is checked against the
reply and the pass is priced by the stored table (`specframe calibrate` shows it), so two sets are compared on the
same tokens, free of timing noise and of the near-ties batched verification breaks (each pass is priced at its
depth). The prompts are the built-in workloads and ``--stdlib`` more made from the Python standard library:
functions to refactor, module docstrings to quote from.

Beside the sets, three ceilings: the oracle drafts the reply's next tokens; the copy ceiling drafts the longest stretch
of them found anywhere in the prompt or the reply so far, what a drafter that always copied from the right place
would bring; the best draft verifies, of the drafts the config's draftless drafters made at that step, the one with
the most right tokens, cut where it goes wrong: what a chain that knew which of its drafts to trust, and how far,
would bring. What lies between the oracle and the copy ceiling is tokens only a model predicts (type hints added, a
name changed, new words); between the copy ceiling and the best draft, copies the drafters do not find; between the
best draft and the chain, drafts the chain does not trust enough, or too much. Each draft of a ceiling is cut to the
length with the most tokens per second.

The sets: each draftless drafter of the config alone, their chain, and each ``--drafters`` list at its defaults
(drafters that run a model are left out: their cost is their own calls' time, not the table's). Each prompt's chain
starts from what earlier runs' drafts were worth and adds its own, as a run does (the acceptance memory in the cache:
specframe/drafting/acceptance_memory.py), so a second replay can choose better than the first.

Where passes are short (a GPU's take about 2 ms), the chain's own time a step decides as much as its drafts:
``--pass-ms`` prices the passes by a table given in milliseconds instead of the stored one (an H100's shape, from
its runs: ``1:1.8,2:1.9,4:1.9,8:2.1,16:2.4,17:2.5``), and ``--own-time`` adds to each pass of a set the time its
chain spent choosing the draft and hearing the outcome, as measured here (replayed without decoding, Python runs
faster than between real passes: about 3.5x on the 2-core CPUs).
"""

import argparse
import ast
import hashlib
import importlib
import json
import math
import pathlib
import sysconfig
import time

import numpy as np

from specframe.bench.workloads import BUILTIN, workloads
from specframe.drafting import DrafterChain
from specframe.drafting.gain import best_cut
from specframe.drafting.pass_cost import PassCost, PassCostError, check_table
from specframe.engine import Engine
from specframe.files import atomic_write
from specframe.paths import cache_dir
from specframe.plugins import load_plugins
from specframe.prefix import common_prefix

STDLIB_CODE = ("textwrap", "shlex", "csv", "fractions", "statistics", "calendar", "heapq", "bisect", "colorsys",
               "difflib", "fnmatch", "glob", "gzip", "netrc", "quopri", "sched", "string", "zipapp", "base64", "getopt",
               "locale", "random", "shutil", "dis", "inspect", "platform", "uuid", "zipfile", "ftplib")
STDLIB_PROSE = ("argparse", "logging", "subprocess", "pickle", "tarfile", "optparse", "imaplib", "doctest", "pydoc",
                "zipfile", "smtplib", "ftplib", "json", "unittest", "csv", "sched", "shelve", "heapq", "string", "ssl",
                "socketserver", "typing", "getopt", "inspect", "tempfile", "configparser", "statistics")
EDITS = ("add type hints to every parameter and return value",
         "rename `{name}` to `{name}_checked` and add a docstring",
         "replace every single-letter variable name with a descriptive one")


def stdlib_prompts(count: int) -> dict[str, tuple[str, int]]:
    """Up to ``count`` prompts (name -> text, token budget), two in three refactoring a function, one in three quoting
    a module's docstring."""
    functions = []
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    for module in STDLIB_CODE:
        source = (stdlib / f"{module}.py").read_text(encoding="utf-8")
        for node in ast.parse(source).body:
            segment = ast.get_source_segment(source, node) if isinstance(node, ast.FunctionDef) else None
            if segment and 12 <= segment.count("\n") <= 30 and '"""' not in segment:
                functions.append((f"edit {module}.{node.name}", node.name, segment))
    passages = []
    for module in STDLIB_PROSE:
        paragraphs = [p for p in (importlib.import_module(module).__doc__ or "").split("\n\n") if len(p) > 300]
        if paragraphs:
            passages.append((f"quote {module}", " ".join(paragraphs[0].split())))
    prompts = {}
    for i, (label, name, code) in enumerate(functions[:count - count // 3]):
        task = EDITS[i % len(EDITS)].format(name=name)
        prompts[label] = (f"Refactor this code: {task}. Reply with the complete refactored code only.\n\n"
                          f"```python\n{code}\n```", 256)
    for label, passage in passages[:count // 3]:
        prompts[label] = ("Read the passage, then quote, word for word, its two sentences that matter most to a new "
                          f"user, and then explain in one sentence why.\n\nPassage:\n{passage}", 128)
    return prompts


def reference_reply(engine: Engine, prompt: np.ndarray, max_tokens: int) -> np.ndarray:
    """The plain greedy reply, kept in the cache by target and prompt."""
    key = hashlib.sha256(f"{engine.model.path}|{max_tokens}|{prompt.tolist()}".encode()).hexdigest()[:16]
    path = cache_dir() / "replay" / f"{key}.json"
    if path.exists():
        return np.asarray(json.loads(path.read_text()), dtype=np.int32)
    reply = engine.generate(prompt, speculative=False, max_tokens=max_tokens, temperature=0.0)
    tokens = np.asarray(reply.tokens, dtype=np.int32)
    atomic_write(path, json.dumps(tokens.tolist()).encode())
    return tokens


def longest_copy(tokens: np.ndarray, start: int, n_max: int) -> int:
    """The longest prefix (at most ``n_max``) of ``tokens[start:]`` that occurs in ``tokens[:start]``: a drafter
    can copy only what the history holds."""
    ahead = tokens[start:start + n_max]
    sources = np.flatnonzero(tokens[:start] == tokens[start])
    return max((common_prefix(tokens[source:start], ahead) for source in sources), default=0)


def plain_seconds(cost: PassCost, n_prompt: int, end: int) -> float:
    """Plain decoding's seconds for the reply: a single pass at each of its depths."""
    return sum(cost.seconds_at(1, depth) for depth in range(n_prompt, end))


def knowing(n_prompt: int, tokens: np.ndarray, cost: PassCost, n_max: int, known, heard=None) -> float:
    """Plain decoding's seconds for the reply over those of the passes a drafter needs that knows, at each position,
    ``known(at, room)`` of the reply's next tokens (at most ``room``), each draft cut to the length with the most
    tokens per second; ``heard(at, k)`` is told each pass's cut."""
    seconds, at, end = 0.0, n_prompt, len(tokens)
    while at < end:
        cost.at_depth(at)
        length = known(at, min(n_max, end - at - 1))
        k = best_cut(np.ones(length), cost)[0] if length else 0
        if heard is not None:
            heard(at, k)
        seconds += cost.seconds(1 + k)
        at += k + 1
    return plain_seconds(cost, n_prompt, end) / seconds


def ceiling(n_prompt: int, tokens: np.ndarray, cost: PassCost, n_max: int, copy_only: bool) -> float:
    """The oracle's speedup, or the copy ceiling's (``copy_only``)."""
    return knowing(n_prompt, tokens, cost, n_max,
                   lambda at, room: longest_copy(tokens, at, room) if copy_only else room)


def best_draft(chain: DrafterChain, n_prompt: int, tokens: np.ndarray, cost: PassCost, n_max: int) -> float:
    """The speedup of verifying, at each step, the chain's drafter's draft with the most right tokens, cut where it
    goes wrong. The chain hears what each pass emitted, as in ``replayed``, so its drafters draft on as they would."""
    chain.cost = cost
    chain.begin(tokens[:n_prompt])
    chosen = np.empty(0, dtype=np.int32)

    def known(at: int, room: int) -> int:
        nonlocal chosen
        chosen = chain.draft(tokens[:at], room).tokens
        return max((common_prefix(draft[:room], tokens[at:]) for draft in chain.step_drafts().values()), default=0)

    def heard(at: int, k: int) -> None:
        chain.accept(min(common_prefix(chosen, tokens[at:]), k), tokens[at:at + k + 1])

    return knowing(n_prompt, tokens, cost, n_max, known, heard)


def replayed(chain: DrafterChain, n_prompt: int, tokens: np.ndarray, cost: PassCost, n_max: int,
             own_time: bool = False) -> float:
    """Plain decoding's seconds for the reply over those of the passes the chain's drafts take, and with
    ``own_time`` the chain's own time choosing them and hearing the outcome."""
    chain.cost = cost
    chain.begin(tokens[:n_prompt])
    seconds, at, end = 0.0, n_prompt, len(tokens)
    while at < end:
        cost.at_depth(at)
        start = time.perf_counter()
        draft = chain.draft(tokens[:at], min(n_max, end - at - 1)).tokens
        accepted = common_prefix(draft, tokens[at:])
        chain.accept(accepted, tokens[at:at + accepted + 1])
        seconds += cost.seconds(1 + len(draft)) + (time.perf_counter() - start if own_time else 0.0)
        at += accepted + 1
    return plain_seconds(cost, n_prompt, end) / seconds


def pass_table(text: str) -> PassCost:
    """A pass-cost table from ``N:MS[,N:MS...]`` (tokens: milliseconds), or a one-line error naming the fault."""
    try:
        seconds = {int(n): float(ms) / 1e3 for n, ms in (pair.split(":") for pair in text.split(","))}
        check_table(seconds, gpu=True)
    except (ValueError, PassCostError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc} (expected N:MS[,N:MS...] with 1:MS among them, "
                                         "e.g. 1:1.8,16:2.4)") from None
    return PassCost(seconds, gpu=True)


def draftless(engine: Engine) -> list[str]:
    """The names of the config's drafters that run no model."""
    types = load_plugins().drafter_types()
    return [d.name for d in engine.config.drafters if not types[d.type].cls.uses_model]


def drafter_sets(engine: Engine, extra: list[str]) -> dict[str, object]:
    """Set label -> a function making a fresh chain of it."""
    types = load_plugins().drafter_types()
    names = draftless(engine)
    sets: dict[str, object] = {name: (lambda one=[name]: engine.chain(one)) for name in names}
    if len(names) > 1:
        sets["chain of " + ", ".join(names)] = lambda: engine.chain(names)
    for spec in extra:
        chosen = [t.strip() for t in spec.split(",") if t.strip()]
        unknown = [t for t in chosen if t not in types or types[t].cls.uses_model]
        if unknown:
            raise SystemExit(f"--drafters {spec}: {', '.join(unknown)} is not a draftless drafter type; expected "
                             + ", ".join(t for t in types if not types[t].cls.uses_model))
        sets[spec] = lambda chosen=chosen: engine.chain_of(
            {t: types[t].cls(types[t].cls.Params(), engine.drafters.env) for t in chosen})
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config.example.toml")
    parser.add_argument("--workload", action="append", default=[], help=f"built-in ({', '.join(BUILTIN)}) or file")
    parser.add_argument("--stdlib", type=int, default=16,
                        help="prompts made from the standard library (default 16, at most about 65)")
    parser.add_argument("--drafters", action="append", default=[], metavar="TYPE[,TYPE...]",
                        help="a drafter set to replay too, its types at their defaults (repeatable)")
    parser.add_argument("--pass-ms", type=pass_table, metavar="N:MS[,N:MS...]",
                        help="price passes by this table (tokens: milliseconds) instead of the stored one")
    parser.add_argument("--own-time", action="store_true",
                        help="add each step's time of the chain's own, as measured here, to the sets' passes")
    args = parser.parse_args()
    with Engine.from_config(args.config) as engine:
        cost = args.pass_ms or engine.pass_cost_store.load()
        if cost is None:
            raise SystemExit(f"no stored pass-cost table for {args.config}'s target: run `specframe calibrate` first "
                             "(or give one with --pass-ms)")
        cost.confirmed = True     # no pass runs here that could confirm it: the passes are priced by it as it is
        n_max = engine.config.speculative.n_max
        prompts = {w.name: (w.prompt, w.max_tokens) for w in workloads(args.workload)} | stdlib_prompts(args.stdlib)
        sets = drafter_sets(engine, args.drafters)
        own = draftless(engine)
        print(f"pass-cost table{' given' if args.pass_ms else ''}: single pass {1e3 * cost.seconds(1):.1f} ms; "
              f"n_max {n_max}; modeled speedup over plain decoding"
              + ("; the sets' own time counted" if args.own_time else ""))
        columns = ["oracle", "copy ceiling", "best draft", *sets]
        print(" | ".join(["prompt", "tokens", *columns]))
        speedups: dict[str, list[float]] = {c: [] for c in columns}
        for label, (text, budget) in prompts.items():
            prompt = engine.prompt_tokens(text)
            tokens = np.concatenate([prompt, reference_reply(engine, prompt, budget)])
            row = [ceiling(len(prompt), tokens, cost, n_max, copy_only=False),
                   ceiling(len(prompt), tokens, cost, n_max, copy_only=True)]
            engine.forget_drafters()
            row.append(best_draft(engine.chain(own), len(prompt), tokens, cost, n_max))
            for make in sets.values():
                engine.forget_drafters()
                row.append(replayed(make(), len(prompt), tokens, cost, n_max, args.own_time))
            for column, value in zip(columns, row):
                speedups[column].append(value)
            print(" | ".join([label, str(len(tokens) - len(prompt)), *(f"{v:.2f}x" for v in row)]))
        print(" | ".join(["geometric mean", "", *(f"{math.exp(np.mean(np.log(speedups[c]))):.2f}x"
                                                   for c in columns)]))


if __name__ == "__main__":
    main()
