#!/usr/bin/env python3
"""Compare specframe's n-gram drafters with llama.cpp's own (ngram_reference, built by build.sh).

    python benchmarks/reference/compare.py [--types ngram-simple,ngram-mod,...] [--cases N] [--seed S]
                                           [--allow TYPE:reason ...] [--begin drop-last|full] [--ref BINARY]

Test cases: random sequences over small vocabularies, repetitive sequences built by copying (and lightly editing)
earlier spans as in code editing, periodic sequences, and a few long (~4000 tokens) ones; each with random
parameters for the type and a random global n_max. Both sides run the same protocol (README.md): the first draft
sees the prompt, each step commits the accepted draft prefix plus the target's own next token taken from the true
continuation. A case is compared step by step up to its first difference (after it the histories diverge).

A difference is *documented* when an entry of DOCUMENTED below (a deliberate, explained divergence of ours, with a
test of whether it applies to that step) or an ``--allow TYPE:reason`` (every difference of TYPE) covers it.
Exit status: 0 when every difference is documented, 1 when some is not, 2 on errors (a case the reference
rejected, a drafter that raised).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import pathlib
import random
import subprocess
import sys
import time
from typing import Callable

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


# --- our drafters ----------------------------------------------------------------------------------------------

def _simple(p):
    from specframe.drafters.ngram_simple import NgramSimpleDrafter, NgramSimpleParams
    return NgramSimpleDrafter, NgramSimpleParams(n=p["size_n"], m=p["size_m"])


def _map(cls_name):
    def make(p):
        mod = importlib.import_module("specframe.drafters.ngram_map")
        return getattr(mod, cls_name), mod.NgramMapParams(n=p["size_n"], m=p["size_m"], min_hits=p["min_hits"])
    return make


def _mod(p):
    from specframe.drafters.ngram_mod import NgramModDrafter, NgramModParams
    return NgramModDrafter, NgramModParams(n_match=p["n_match"], n_min=p["n_min"], n_max=p["n_max"])


def _cache(p):
    from specframe.drafters.ngram_cache import NgramCacheDrafter, NgramCacheParams
    return NgramCacheDrafter, NgramCacheParams(n_draft=p["n_draft"], static=p["static"], dynamic=p["dynamic"])


OURS: dict[str, Callable[[dict], tuple]] = {
    "ngram-simple": _simple,
    "ngram-map-k": _map("NgramMapKDrafter"),
    "ngram-map-k4v": _map("NgramMapK4vDrafter"),
    "ngram-mod": _mod,
    "ngram-cache": _cache,
}
MODULES = {
    "ngram-simple": "specframe.drafters.ngram_simple",
    "ngram-map-k": "specframe.drafters.ngram_map",
    "ngram-map-k4v": "specframe.drafters.ngram_map",
    "ngram-mod": "specframe.drafters.ngram_mod",
    "ngram-cache": "specframe.drafters.ngram_cache",
}


# --- documented differences ------------------------------------------------------------------------------------

@dataclasses.dataclass
class Step:
    """One step where the two sides disagree."""
    case: dict
    index: int              # step number in the case
    history: np.ndarray     # the committed history the step drafted from (same on both sides up to here)
    ref: list[int]
    ours: list[int]
    ref_result: dict        # the reference's whole answer for the case (drafts, hist_len, n_accepted)


def _simple_match_at_0(s: Step) -> bool:
    """llama.cpp's backward search stops before position 0 (its 'no match' sentinel): when the only earlier
    occurrence of the pattern starts at 0 it drafts nothing, ours drafts what followed position 0."""
    n = s.case["params"]["size_n"]
    h = s.history
    return (not s.ref and len(s.ours) > 0 and len(h) > n and np.array_equal(h[:n], h[-n:])
            and s.ours == h[n:n + len(s.ours)].tolist())


def _mod_truncated_chain(s: Step) -> bool:
    """llama.cpp scores a draft's acceptance against the untruncated chain (n_draft_last is set before the wrapper
    cuts the draft to n_max); ours against the tokens drafted. The two verdicts (fraction < 0.25) can differ only
    after a step whose draft was cut (its length is that step's n_max, below the chain's params n_max) and whose
    accepted count a satisfies a >= 0.25 * len(draft) but a < 0.25 * params n_max; from there the pools may be
    reset at different times."""
    chain_max = s.case["params"]["n_max"]
    for j in range(s.index):
        draft, a = s.ref_result["drafts"][j], s.ref_result["n_accepted"][j]
        g = s.ref_result["hist_len"][j] - len(s.case["prompt"])
        n_step = min(s.case["n_max"], len(s.case["truth"]) - g - 1)
        if draft and len(draft) == n_step < chain_max and 4 * a >= len(draft) and 4 * a < chain_max:
            return True
    return False


# ngram-map-k / -k4v ---------------------------------------------------------------------------------------------

def _begin_size(s: Step) -> int:
    """How many tokens llama.cpp's begin() got."""
    return len(s.case["prompt"]) - (0 if s.case.get("begin") == "full" else 1)


def _map_view(s: Step):
    """(n, m, eligible occurrences of the key, blind(j)): the key is the last n tokens; an occurrence is eligible
    when at least m + 1 tokens follow it before id_last (j <= cur_len - n - m - 1), as in both implementations.
    llama.cpp never finds an occurrence at 0 (its 'empty' index) nor one starting in [S - n - m, S] for a
    begin() of S tokens: its first scan covers [1, S - n - m - 1], the second (S, ...], and later calls only
    positions past the last one indexed."""
    n, m = s.case["params"]["size_n"], s.case["params"]["size_m"]
    h = s.history
    cur_len = len(h) - 1
    last = cur_len - n - m - 1
    if last < 0:
        return n, m, [], lambda j: True
    windows = np.lib.stride_tricks.sliding_window_view(h[:last + n], n)
    occ = np.flatnonzero((windows == h[-n:]).all(axis=1)).tolist()
    S = _begin_size(s)
    if S > n + m + 1:
        blind = lambda j: j == 0 or S - n - m <= j <= S   # noqa: E731
    else:
        blind = lambda j: j <= S                           # noqa: E731
    return n, m, occ, blind


def _map_hash(h: np.ndarray, j: int, n: int) -> int:
    """common_ngram_map_hash (32-bit LCG, factor 2654435761) modulo the key_map size 2^18."""
    x = 0
    for t in h[j:j + n].tolist():
        x = (x * 2654435761 + t) & 0xFFFFFFFF
    return x % 262144


def _map_collides(h: np.ndarray, occ: list[int], n: int, m: int) -> bool:
    """Another n-gram of the history shares the key's key_map slot (a slot keeps the first index written, and
    an index already passed is never scanned again, so the key can be lost)."""
    slot = _map_hash(h, occ[0], n)
    key = h[occ[0]:occ[0] + n]
    last = len(h) - 1 - n - m - 1
    return any(_map_hash(h, j, n) == slot and not np.array_equal(h[j:j + n], key) for j in range(1, last + 1))


def _follows(h: np.ndarray, j: int, n: int, draft: list[int]) -> bool:
    return bool(draft) and h[j + n:j + n + len(draft)].tolist() == draft


def _map_other_occurrence(s: Step) -> bool:
    """Ours drafts what followed the key's most recent eligible occurrence; llama.cpp what followed another one:
    the first indexed in its hash table (whose slots keep the first index written), or nothing when every
    occurrence lies where it never looks (position 0, the n + m + 1 positions before the end of begin()'s
    tokens) or when a colliding n-gram took the key's slot."""
    n, m, occ, blind = _map_view(s)
    if not occ or not _follows(s.history, occ[-1], n, s.ours):
        return False
    if not s.ref:
        return all(blind(j) for j in occ) or _map_collides(s.history, occ, n, m)
    if s.case["type"] == "ngram-map-k" and len(s.ref) != len(s.ours):
        return False   # the length learned per key (last accepted count) is the same on both sides so far
    return any(_follows(s.history, j, n, s.ref) for j in occ if j != occ[-1] and not blind(j))


def _k4v_statistics(s: Step) -> bool:
    """The key has several different m-token continuations, where the two count differently: llama.cpp counts
    only occurrences up to the one it matched, counts the previously matched one again at every count, and
    drafts what followed the matched occurrence even when another continuation is the dominant one; ours counts
    every eligible occurrence once (the first four distinct continuations tracked) and drafts the dominant one
    when it occurred at least twice as often as the others together. Checks that ours followed that rule."""
    n, m, occ, blind = _map_view(s)
    if not occ:
        return False
    h = s.history
    counts: dict[tuple, int] = {}
    for j in occ:
        c = tuple(h[j + n:j + n + m].tolist())
        if c in counts or len(counts) < 4:
            counts[c] = counts.get(c, 0) + 1
    if len(counts) == 1:   # one continuation: the counting rules cannot differ; min_hits may, when llama.cpp
        return s.case["params"]["min_hits"] > 1 and any(blind(j) for j in occ)   # misses some occurrences
    best = max(counts, key=counts.get)
    others = sum(counts.values()) - counts[best]
    dominant = others == 0 or counts[best] >= 2 * others
    if not s.ours:
        return True   # not dominant, or too few hits: either way what llama.cpp counted differs
    return dominant and list(best[:len(s.ours)]) == s.ours


# ngram-cache ---------------------------------------------------------------------------------------------------

_CACHE_LAX = ((2, 2, 1, 1), (66, 50, 50, 50))   # min observations, min share % for 1- to 4-grams (context)


def _cache_counts(chunks) -> dict:
    """n-gram (1..4 tokens) -> {next token: count}, counted within each chunk only (llama.cpp's
    common_ngram_cache_update on each chunk); tokens in first-seen order."""
    counts: dict[tuple, dict[int, int]] = {}
    for chunk in chunks:
        for size in range(1, 5):
            for i in range(size, len(chunk)):
                part = counts.setdefault(tuple(chunk[i - size:i]), {})
                part[chunk[i]] = part.get(chunk[i], 0) + 1
    return counts


def _cache_draft(history: list[int], counts: dict, n_draft: int, prefer: list[int]) -> tuple[list[int], bool]:
    """common_ngram_cache_draft with only a context cache. Ties go to the token ``prefer`` has at that position
    when it is among the tied, else to the first seen. Returns (draft, whether a tie was decided)."""
    draft: list[int] = []
    tied_any = False
    if len(history) < 2:
        return draft, tied_any
    while len(draft) < n_draft:
        seq = history + draft
        token = None
        for size in (4, 3, 2, 1):
            if len(seq) < size:
                continue
            part = counts.get(tuple(seq[-size:]))
            if not part:
                continue
            total, best = sum(part.values()), max(part.values())
            if total < _CACHE_LAX[0][size - 1] or 100 * best < _CACHE_LAX[1][size - 1] * total:
                continue
            tied = [t for t, c in part.items() if c == best]
            want = prefer[len(draft)] if len(draft) < len(prefer) else None
            token = want if want in tied else tied[0]
            tied_any |= len(tied) > 1
            break
        if token is None:
            break
        draft.append(token)
    return draft, tied_any


def _cache_explained(s: Step, reason: str) -> bool:
    """Model both sides in Python: llama.cpp's context cache fed chunk by chunk (the whole history at the first
    draft, then only the tokens committed since the previous draft, as a sequence of their own), ours counting
    every n-gram of the history, first-seen ties. The difference is explained when both models reproduce their
    side, and by ``reason`` 'chunks' when the two caches' counts differ, 'ties' when they do not."""
    if s.case["params"].get("static") or s.case["params"].get("dynamic"):
        return False
    h = s.history.tolist()
    lens = s.ref_result["hist_len"][:s.index + 1]
    chunks = [h[:lens[0]]] + [h[a:b] for a, b in zip(lens, lens[1:])]
    llama_counts, full_counts = _cache_counts(chunks), _cache_counts([h])
    n_draft = s.case["params"].get("n_draft", 8)
    n_step = len(s.case["truth"]) - (len(h) - len(s.case["prompt"])) - 1
    n_step = min(s.case["n_max"], n_step)
    ref_model, _ = _cache_draft(h, llama_counts, n_draft, s.ref)
    ours_model, _ = _cache_draft(h, full_counts, n_draft, [])
    if ref_model[:n_step] != s.ref or ours_model[:n_step] != s.ours:
        return False
    same_counts = llama_counts == full_counts
    return same_counts if reason == "ties" else not same_counts


# type -> [(reason, applies(step))]
DOCUMENTED: dict[str, list[tuple[str, Callable[[Step], bool]]]] = {
    "ngram-simple": [("llama.cpp never matches at position 0; ours does", _simple_match_at_0)],
    "ngram-map-k": [("different occurrence of the key: llama.cpp's hash table keeps the first indexed, its scans "
                     "skip position 0 and the n+m+1 positions before the end of begin()'s tokens; ours uses the "
                     "most recent", _map_other_occurrence)],
    "ngram-map-k4v": [("different occurrence of the key (see ngram-map-k)", _map_other_occurrence),
                      ("continuation statistics: llama.cpp counts up to the matched occurrence, recounts it, "
                       "drafts the matched occurrence's continuation; ours counts each once, drafts the dominant",
                       _k4v_statistics)],
    "ngram-mod": [("acceptance fraction of the untruncated chain (llama.cpp) vs of the drafted tokens (ours)",
                   _mod_truncated_chain)],
    "ngram-cache": [("llama.cpp's context cache misses n-grams that span two draft calls; ours counts them",
                     lambda s: _cache_explained(s, "chunks")),
                    ("a tie between candidates: llama.cpp takes unordered_map order, ours the first seen",
                     lambda s: _cache_explained(s, "ties"))],
}


# --- test cases ------------------------------------------------------------------------------------------------

def seq_random(rng: random.Random, length: int, vocab: int) -> list[int]:
    return [rng.randrange(vocab) for _ in range(length)]


def seq_editing(rng: random.Random, length: int, vocab: int) -> list[int]:
    """Code-editing-like: spans of earlier text copied again, some lightly edited, between fresh tokens."""
    seq = seq_random(rng, rng.randint(4, 40), vocab)
    p_copy = rng.uniform(0.5, 0.95)
    p_edit = rng.choice((0.0, 0.01, 0.03, 0.1))
    while len(seq) < length:
        if rng.random() < p_copy and len(seq) > 3:
            start = rng.randrange(len(seq) - 1)
            span = seq[start:start + rng.randint(3, 80)]
            seq += [rng.randrange(vocab) if rng.random() < p_edit else t for t in span]
        else:
            seq += seq_random(rng, rng.randint(1, 12), vocab)
    return seq[:length]


def seq_periodic(rng: random.Random, length: int, vocab: int) -> list[int]:
    """A short pattern repeated, with occasional glitches: long accepted drafts, then sudden rejections."""
    period = seq_random(rng, rng.randint(1, 30), vocab)
    p_glitch = rng.choice((0.0, 0.005, 0.02))
    return [rng.randrange(vocab) if rng.random() < p_glitch else period[i % len(period)] for i in range(length)]


def random_params(rng: random.Random, type_: str) -> dict:
    if type_ in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
        if rng.random() < 0.2:
            return {"size_n": 12, "size_m": 48, "min_hits": 1}
        n = rng.choice((1, 1, 2, 2, 3, 3, 4, 5, 6, 8))
        m = rng.choice((1, 2, 3, 4, 6, 8, 12, 16, 24, 48))
        return {"size_n": n, "size_m": m, "min_hits": rng.choice((1, 1, 1, 2, 3))}
    if type_ == "ngram-mod":
        if rng.random() < 0.2:
            return {"n_match": 24, "n_min": 48, "n_max": 64}
        n_match = rng.choice((1, 2, 3, 4, 6, 8, 12, 16))
        n_min = rng.choice((0, 1, 2, 4, 8))
        return {"n_match": n_match, "n_min": n_min, "n_max": n_min + rng.choice((1, 2, 4, 8, 16, 32))}
    if type_ == "ngram-cache":
        return {"n_draft": 8, "static": "", "dynamic": ""}
    raise ValueError(type_)


def make_cases(type_: str, n_cases: int, n_long: int, seed: int) -> list[dict]:
    rng = random.Random(f"{seed}:{type_}")
    cases = []
    for i in range(n_cases + n_long):
        long = i >= n_cases
        kind = rng.choice(("random", "editing", "editing", "periodic"))
        if long:
            kind = "editing" if i % 2 == 0 else "periodic"
        vocab = {"random": rng.choice((2, 3, 4, 6, 8, 16)),
                 "editing": rng.choice((8, 32, 256, 32000)),
                 "periodic": rng.choice((4, 64, 32000))}[kind]
        total = rng.randint(3800, 4200) if long else rng.randint(2, 400)
        seq = {"random": seq_random, "editing": seq_editing, "periodic": seq_periodic}[kind](rng, total, vocab)
        n_prompt = rng.randint(1, max(1, total - 1)) if rng.random() < 0.8 else rng.randint(1, min(total, 8))
        cases.append({
            "id": f"{type_}/{i}/{kind}/v{vocab}",
            "type": type_,
            "params": random_params(rng, type_),
            "n_max": rng.choice((1, 2, 3, 4, 8, 16, 16, 32, 64, 256)),
            "prompt": seq[:n_prompt],
            "truth": seq[n_prompt:],
        })
    return cases


# --- running ---------------------------------------------------------------------------------------------------

def build_reference() -> str:
    proc = subprocess.run(["bash", str(HERE / "build.sh")], stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"compare: build.sh failed (exit {proc.returncode})")
    return proc.stdout.strip().splitlines()[-1]


def run_reference(binary: str, cases: list[dict], begin: str) -> list[dict]:
    lines = "".join(json.dumps(dict(c, begin=begin)) + "\n" for c in cases)
    proc = subprocess.run([binary], input=lines, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"compare: {binary} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    if len(out) != len(cases):
        sys.exit(f"compare: the reference answered {len(out)} lines for {len(cases)} cases")
    return out


def run_ours(cls, params, case: dict) -> dict:
    """The protocol of README.md, with the engine's calls: accept() only after a non-empty draft."""
    prompt = np.asarray(case["prompt"], dtype=np.int32)
    truth = case["truth"]
    history = np.empty(len(prompt) + len(truth), dtype=np.int32)   # append-only, as in the engine
    history[:len(prompt)] = prompt
    n_hist = len(prompt)
    drafter = cls(params, None)
    drafter.begin(prompt)
    drafts, hist_len, n_acc = [], [], []
    g = 0
    while g < len(truth):
        n_max = min(case["n_max"], len(truth) - g - 1)
        if n_max <= 0:
            history[n_hist] = truth[g]
            n_hist += 1
            g += 1
            continue
        draft = drafter.draft(history[:n_hist], n_max)
        tokens = [int(t) for t in np.asarray(draft.tokens)[:n_max]]   # the chain cuts drafts to n_max
        a = 0
        while a < len(tokens) and g + a < len(truth) and tokens[a] == truth[g + a]:
            a += 1
        if tokens:
            drafter.accept(a)
        drafts.append(tokens)
        hist_len.append(n_hist)
        n_acc.append(a)
        for _ in range(a + 1):
            history[n_hist] = truth[g]
            n_hist += 1
            g += 1
    return {"drafts": drafts, "hist_len": hist_len, "n_accepted": n_acc}


@dataclasses.dataclass
class Diff:
    case_id: str
    step: int
    hist_len: int
    ref: list[int]
    ours: list[int]
    reason: str | None      # None: undocumented


@dataclasses.dataclass
class TypeReport:
    type_: str
    cases: int = 0
    steps: int = 0
    steps_total: int = 0     # steps in the reference's runs, compared or not
    identical: int = 0
    ref_drafts: int = 0
    our_drafts: int = 0
    diffs: list[Diff] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    seconds_ours: float = 0.0


def compare_case(case: dict, ref: dict, ours: dict, allow: dict[str, str], report: TypeReport) -> None:
    type_ = case["type"]
    history = np.asarray(case["prompt"] + case["truth"], dtype=np.int32)
    n = min(len(ref["drafts"]), len(ours["drafts"]))
    for i in range(n):
        report.steps += 1
        r, o = ref["drafts"][i], ours["drafts"][i]
        hr, ho = ref["hist_len"][i], ours["hist_len"][i]
        report.ref_drafts += bool(r)
        report.our_drafts += bool(o)
        if hr == ho and r == o:
            report.identical += 1
            continue
        if hr != ho:   # cannot happen while the drafts so far were equal: the protocol is deterministic
            report.errors.append(f"{case['id']}: step {i}: history lengths differ ({hr} vs {ho})")
            return
        step = Step(case, i, history[:hr], r, o, ref)
        reason = next((why for why, applies in DOCUMENTED.get(type_, []) if applies(step)), None)
        if reason is None and type_ in allow:
            reason = f"--allow: {allow[type_]}"
        report.diffs.append(Diff(case["id"], i, hr, r, o, reason))
        return
    if len(ref["drafts"]) != len(ours["drafts"]):
        report.errors.append(f"{case['id']}: step counts differ ({len(ref['drafts'])} vs {len(ours['drafts'])})")


def short(tokens: list[int], limit: int = 16) -> str:
    if len(tokens) <= limit:
        return str(tokens)
    return "[" + ", ".join(map(str, tokens[:limit])) + f", ... ({len(tokens)} tokens)]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated types (default: all)")
    ap.add_argument("--cases", type=int, default=200, help="short cases per type (default 200)")
    ap.add_argument("--long", type=int, default=3, help="long (~4000 tokens) cases per type (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--allow", action="append", default=[], metavar="TYPE:reason",
                    help="count every difference of TYPE as documented, for the given reason (repeatable)")
    ap.add_argument("--begin", choices=("drop-last", "full"), default="drop-last",
                    help="what llama.cpp's begin() gets: the prompt minus its last token (default, as "
                         "speculative-simple and the server do) or the whole prompt")
    ap.add_argument("--show", type=int, default=5, help="differences shown per type (default 5)")
    ap.add_argument("--ref", help="the ngram_reference binary (default: run build.sh)")
    ap.add_argument("--save-cases", metavar="FILE", help="also write the cases as JSON lines (the binary's input)")
    args = ap.parse_args(argv)

    types = [t.strip() for t in args.types.split(",") if t.strip()]
    for t in types:
        if t not in TYPES:
            ap.error(f"unknown type '{t}' (expected some of {', '.join(TYPES)})")
    allow = {}
    for item in args.allow:
        type_, sep, reason = item.partition(":")
        if not sep or type_ not in TYPES or not reason.strip():
            ap.error(f"--allow wants TYPE:reason with TYPE one of {', '.join(TYPES)}, got '{item}'")
        allow[type_] = reason.strip()

    runnable = []
    for t in types:
        try:
            importlib.import_module(MODULES[t])
            OURS[t]({"size_n": 2, "size_m": 2, "min_hits": 1, "n_match": 2, "n_min": 0, "n_max": 2,
                     "n_draft": 8, "static": "", "dynamic": ""})
        except Exception as exc:   # not written yet, or a different API
            print(f"{t}: skipped: our drafter does not import ({type(exc).__name__}: {exc})")
            continue
        runnable.append(t)
    if not runnable:
        print("nothing to compare")
        return 2

    binary = args.ref or build_reference()
    all_cases = {t: make_cases(t, args.cases, args.long, args.seed) for t in runnable}
    for cases in all_cases.values():
        for c in cases:
            c["begin"] = args.begin
    if args.save_cases:
        with open(args.save_cases, "w") as f:
            for t in runnable:
                for c in all_cases[t]:
                    f.write(json.dumps(c) + "\n")

    status = 0
    for t in runnable:
        cases = all_cases[t]
        report = TypeReport(t, cases=len(cases))
        t0 = time.perf_counter()
        refs = run_reference(binary, cases, args.begin)
        t_ref = time.perf_counter() - t0
        for case, ref in zip(cases, refs):
            if "error" in ref:
                report.errors.append(f"{case['id']}: reference error: {ref['error']}")
                continue
            try:
                cls, params = OURS[t](case["params"])
                t0 = time.perf_counter()
                ours = run_ours(cls, params, case)
                report.seconds_ours += time.perf_counter() - t0
            except Exception as exc:
                report.errors.append(f"{case['id']}: our drafter raised {type(exc).__name__}: {exc}")
                continue
            report.steps_total += len(ref["drafts"])
            compare_case(case, ref, ours, allow, report)

        undocumented = [d for d in report.diffs if d.reason is None]
        documented = [d for d in report.diffs if d.reason is not None]
        n_diff_cases = len(report.diffs)
        print(f"\n== {t}: {report.cases} cases, {report.steps} steps compared (of {report.steps_total}; a case stops "
              f"at its first difference), {report.identical} identical; "
              f"cases with a difference: {n_diff_cases} ({len(documented)} documented, "
              f"{len(undocumented)} undocumented); errors: {len(report.errors)}")
        print(f"   non-empty drafts among compared steps: llama.cpp {report.ref_drafts}, ours {report.our_drafts}; "
              f"time: llama.cpp {t_ref:.2f} s (all cases), ours {report.seconds_ours:.2f} s")
        for d in (undocumented + documented)[:args.show]:
            tag = "UNDOCUMENTED" if d.reason is None else f"documented: {d.reason}"
            print(f"   - {d.case_id} step {d.step} (history {d.hist_len} tokens) [{tag}]\n"
                  f"       llama.cpp: {short(d.ref)}\n       ours:      {short(d.ours)}")
        reasons: dict[str, int] = {}
        for d in documented:
            reasons[d.reason] = reasons.get(d.reason, 0) + 1
        for why, count in reasons.items():
            print(f"   documented ({count} cases): {why}")
        for e in report.errors[:args.show]:
            print(f"   error: {e}")
        if report.errors:
            status = 2
        elif undocumented and status == 0:
            status = 1
    print(f"\nexit status {status}: " + {0: "no undocumented differences", 1: "undocumented differences",
                                          2: "errors"}[status])
    return status


if __name__ == "__main__":
    sys.exit(main())
