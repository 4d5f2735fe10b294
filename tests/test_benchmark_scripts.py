"""Benchmark scripts' own logic: the peers benchmark's reading of llama.cpp's logs, the replay's ceilings."""

import argparse
import importlib.util
import pathlib
import sys
import time

import numpy as np
import pytest

from specframe.drafting import NO_DRAFT, ChainEntry, Draft, Drafter, DrafterChain, DrafterStats
from specframe.drafting.pass_cost import PassCost

BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # its dataclasses look their module up while it loads
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.fixture(scope="module")
def peers():
    yield from load("peers_run", BENCHMARKS / "peers" / "run.py")


@pytest.fixture(scope="module")
def replay():
    yield from load("replay", BENCHMARKS / "replay.py")


@pytest.fixture(scope="module")
def serving():
    yield from load("serving", BENCHMARKS / "serving.py")


def test_llama_server_gets_the_configs_n_gram_parameters(serving, write_config, target_path):
    """The comparison is fair only if llama-server drafts with the same settings: ngram-mod's n_min 8 (llama.cpp's
    default is 48) and the others as the config sets them."""
    from specframe.config import load_config

    config = load_config(write_config(f"""
        [target]
        model = "{target_path}"
        [[drafter]]
        type = "ngram-simple"
        n = 8
        [[drafter]]
        type = "ngram-mod"
        n_min = 8
        """))
    command = " ".join(serving.llama_server_command(pathlib.Path("llama-server"), config, 8080))
    assert "--spec-type ngram-simple,ngram-mod" in command
    assert "--spec-ngram-simple-size-n 8 --spec-ngram-simple-size-m 48" in command
    assert "--spec-ngram-mod-n-match 24 --spec-ngram-mod-n-min 8 --spec-ngram-mod-n-max 64" in command


def test_the_session_peer_is_llama_server_drafting_with_ngram_mod_alone(serving, write_config, target_path):
    """Against sessions llama-server drafts with ngram-mod, the drafter llama.cpp keeps across requests: with the
    config's parameters for it, or llama.cpp's defaults (--peer-defaults, or a config without ngram-mod)."""
    from specframe.config import load_config

    table = f'[target]\nmodel = "{target_path}"\n[[drafter]]\ntype = "ngram-simple"\n'
    config = load_config(write_config(table + '[[drafter]]\ntype = "ngram-mod"\nn_min = 8\n'))

    def command(config, defaults):
        return " ".join(serving.llama_server_command(pathlib.Path("llama-server"),
                                                     serving.ngram_mod_peer(config, defaults), 8080))

    ours = command(config, False)
    assert ours.endswith("--spec-ngram-mod-n-match 24 --spec-ngram-mod-n-min 8 --spec-ngram-mod-n-max 64 "
                         "--spec-type ngram-mod") and "ngram-simple" not in ours
    defaults = "--spec-ngram-mod-n-match 24 --spec-ngram-mod-n-min 48 --spec-ngram-mod-n-max 64 --spec-type ngram-mod"
    assert command(config, True).endswith(defaults)
    assert command(load_config(write_config(table, "other.toml")), False).endswith(defaults)
    assert f"-m {target_path} " in ours and "-np 4" in ours


def test_a_session_through_serve_carries_the_servers_own_answers(serving, write_config, target_path, tmp_path,
                                                                 monkeypatch):
    """Each turn's request carries the system prompt, the earlier turns and the server's answers to them; each answer
    is the target's greedy answer to the conversation so far, and the server finds the earlier turns in its cache."""
    import os

    from chains import COPYING_DRAFTERS

    from specframe.bench.workloads import Session, Turn
    from specframe.engine import Engine

    config = write_config(f'[target]\nmodel = "{target_path}"\nn_ctx = 512\nthreads = 1\n{COPYING_DRAFTERS}')
    chat = Session("chat", "Answer briefly.", (Turn("the quick brown fox jumps over the lazy dog", 12),
                                               Turn("one two three four one two three four", 12),
                                               Turn("alpha beta gamma alpha beta gamma", 12)))
    sent = []
    ask = serving.ask

    def recording(url, request, messages=None):
        sent.append(messages)
        return ask(url, request, messages)

    monkeypatch.setattr(serving, "ask", recording)
    monkeypatch.setattr(serving, "LAUNCH_ENVIRONMENT", dict(os.environ))    # this test's cache
    port = serving.free_port()
    with serving.running("specframe", serving.specframe_command(config, port, slots=1), port,
                         tmp_path / "serve.log") as url:
        outcomes = serving.converse("specframe", url, chat)
    answers = [o.text for o in outcomes]
    system = {"role": "system", "content": "Answer briefly."}
    user = [{"role": "user", "content": turn.user} for turn in chat.turns]
    said = [{"role": "assistant", "content": answer} for answer in answers]
    assert sent == [[system, user[0]], [system, user[0], said[0], user[1]],
                    [system, user[0], said[0], user[1], said[1], user[2]]]
    with Engine.from_config(config) as engine:
        for messages, answer in zip(sent, answers):
            prompt = engine.vocab.tokenize(engine.chat_prompt(messages), add_special=True, parse_special=True)
            assert engine.generate(prompt, speculative=False, max_tokens=12, temperature=0.0).text == answer
    assert [(o.session, o.turn, o.server) for o in outcomes] == [("chat", n, "specframe") for n in (1, 2, 3)]
    assert all(0 < o.tokens <= 12 and o.seconds > 0 for o in outcomes)
    assert outcomes[0].cache_n == 0 and outcomes[1].cache_n > 0 and outcomes[2].cache_n > outcomes[1].cache_n


def test_the_session_report_compares_the_servers_session_by_session(serving):
    def turn(server, session, number, tokens, seconds, text):
        return serving.TurnOutcome(server, session, number, tokens, seconds, 10, 5 * number, text)

    outcomes = [turn("specframe", "a", 1, 100, 2.0, "x"), turn("specframe", "a", 2, 100, 2.0, "y"),
                turn("specframe", "b", 1, 50, 5.0, "z"),
                turn("llama-server ngram-mod", "a", 1, 100, 4.0, "x"),
                turn("llama-server ngram-mod", "a", 2, 100, 4.0, "w"),
                turn("llama-server ngram-mod", "b", 1, 50, 5.0, "z")]
    meta = {"command": "python serving.py --sessions", "date": "today", "cpu": "cpu", "threads": 2,
            "config": "c.toml", "kernels": "kernels",
            "commands": {"specframe": ["specframe", "serve"], "llama-server ngram-mod": ["llama-server"]}}
    text = serving.session_report(meta, outcomes)
    assert "| a | 2 | specframe | 200 | 4.0 | 50.00 | 20 | 15 |" in text
    assert "| **all** | 3 | llama-server ngram-mod | 250 | 13.0 | 19.23 | 30 | 20 |" in text
    assert "| a | 2.00x | 1 of 2 |" in text and "| b | 1.00x | 1 of 1 |" in text
    assert f"| **all** | {(250 / 9.0) / (250 / 13.0):.2f}x | 2 of 3 |" in text
    assert "- llama-server ngram-mod: `llama-server`" in text
    alone = serving.session_report(meta, outcomes[:3])
    assert "same answer text" not in alone and "| **all** | 3 | specframe | 250 | 9.0 |" in alone


LOG = """
encoded   40 tokens in    0.400 seconds, speed:  100.000 t/s
decoded  {n} tokens in   12.800 seconds, speed:   {speed:.3f} t/s

n_draft   = 48
n_predict = {n}
n_drafted = 96
n_accept  = 96
accept    = 100.000%
"""


def test_a_speculative_run_past_the_budget_counts_the_budgets_tokens(peers):
    """llama-speculative-simple stops only after verifying a draft: a last draft accepted whole may run 48 tokens
    past a budget of 192. The time is what making the budget took, so the rate counts 192 tokens, not 240."""
    over = peers.LlamaCpp._speculative_measurement(LOG.format(n=240, speed=240 / 12.8), "tool", 192)
    assert over.tokens_per_second == pytest.approx(192 / 12.8) and over.n_generated == 240
    assert over.n_prompt == 40 and over.acceptance == 1.0
    within = peers.LlamaCpp._speculative_measurement(LOG.format(n=150, speed=150 / 12.8), "tool", 192)
    assert within.tokens_per_second == pytest.approx(150 / 12.8)


def test_the_copy_ceiling_copies_only_what_the_history_holds(replay):
    prompt = [5, 6, 7, 8, 9, 1, 2]
    tokens = np.array(prompt + [6, 7, 8, 3, 1, 2, 1, 2, 1, 2], dtype=np.int32)
    assert replay.longest_copy(tokens, 7, 16) == 3          # 6 7 8 from the prompt, then 3 is new
    assert replay.longest_copy(tokens, 10, 16) == 0         # 3 never occurred before
    assert replay.longest_copy(tokens, 11, 16) == 2         # 1 2, and what follows isn't in the history yet
    assert replay.longest_copy(tokens, 11, 1) == 1
    assert replay.longest_copy(tokens, 11, 0) == 0          # the reply's last token: no room to draft


def test_the_ceilings_price_the_passes_a_knowing_drafter_needs(replay):
    cost = PassCost({1: 0.1, 2: 0.12, 4: 0.15, 8: 0.2, 16: 0.3, 17: 0.32})
    tokens = np.arange(40, dtype=np.int32)                      # nothing repeats: nothing to copy
    assert replay.ceiling(8, tokens, cost, 16, copy_only=True) == pytest.approx(1.0)
    # the oracle: 32 tokens in two 16-token passes (15 drafted, 0.3 s each), against 32 single passes
    assert replay.ceiling(8, tokens, cost, 16, copy_only=False) == pytest.approx(3.2 / 0.6)


class Reading(Drafter):
    """Drafts what the reply holds next, wrong from its token ``right`` on (never, when None), or nothing."""

    name = "reading"

    def __init__(self, reply, knows, right=None):
        super().__init__(None, None)
        self.reply, self.knows, self.right = reply, knows, right

    def draft(self, history, n_max):
        if not self.knows:
            return NO_DRAFT
        tokens = self.reply[len(history):len(history) + n_max].copy()
        if self.right is not None:
            tokens[self.right:] += 1000
        return Draft.of(tokens)


def test_a_replayed_chain_is_priced_by_the_passes_its_drafts_take(replay):
    cost = PassCost({1: 0.1, 2: 0.12, 4: 0.15, 8: 0.2, 16: 0.3, 17: 0.32})
    tokens = np.arange(200, dtype=np.int32)
    for knows, low, high in ((False, 1.0, 1.0), (True, 3.0, 3.2 / 0.6)):
        chain = DrafterChain([ChainEntry("d", Reading(tokens, knows), "test", DrafterStats())], 1000, cost=cost)
        speedup = replay.replayed(chain, 8, tokens, cost, 16)
        assert low <= speedup <= high + 1e-9
        assert chain.entries[0].stats.accepted_tokens == (0 if not knows else chain.entries[0].stats.drafted_tokens)


class Slow(Reading):
    """Reading, taking 5 ms a call: beside a GPU's 1.8 ms passes, a drafter not worth its calls."""

    def draft(self, history, n_max):
        time.sleep(0.005)
        return super().draft(history, n_max)


def test_a_replay_can_price_passes_by_a_table_given_and_count_the_chains_own_time(replay):
    gpu = replay.pass_table("1:1.8,2:1.9,16:2.4")
    assert gpu.seconds(1) == pytest.approx(0.0018) and gpu.seconds(16) == pytest.approx(0.0024)
    for bad, fault in (("1:x", "could not convert"), ("2:1.9", "no cost for a single-token pass"),
                       ("1:2,16:1", "less than one of a single")):
        with pytest.raises(argparse.ArgumentTypeError, match=fault):
            replay.pass_table(bad)
    tokens = np.arange(200, dtype=np.int32)
    speedups = []
    for own_time in (False, True):
        chain = DrafterChain([ChainEntry("d", Slow(tokens, knows=True), "test", DrafterStats())], 1000, cost=gpu)
        speedups.append(replay.replayed(chain, 8, tokens, gpu, 16, own_time))
    assert speedups[0] > 5 and speedups[1] < 0.5 * speedups[0]     # 5 ms a call outweighs the passes it saves


@pytest.fixture(scope="module")
def step_time():
    yield from load("step_time", BENCHMARKS / "step_time.py")


def test_step_time_splits_each_run_into_its_passes_and_the_rest(step_time, write_config, target_path):
    """A run's time inside llama_decode is counted pass by pass, the rest is the wall time less it; the passes
    priced against the table are the steps' (the table is measured in the first speculative request)."""
    from specframe.bench.workloads import Workload
    from specframe.engine import Engine

    config = write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 512
        [[drafter]]
        type = "copy-cursor"
        """)
    workload = Workload("repeat", "a b c d e f g h " * 8, 48)
    with Engine.from_config(config) as engine:
        timer = step_time.DecodeTimer(engine)
        plain = step_time.measure(engine, timer, workload, speculative=False)
        drafted = step_time.measure(engine, timer, workload, speculative=True)
        passes = timer.passes
        floor = step_time.floor_ms(engine, 16)
        assert floor > 0 and timer.passes == passes + 16 + 1     # its passes, and its prompt's
        assert engine.context.positions(0) == 0 and engine.kept(0) == 0      # the slot left empty
    for run in (plain, drafted):
        assert 0 < run.decode_seconds < run.wall_seconds and run.rest_seconds > 0
        assert 0 < run.host_ms_per_pass and f"host {run.host_ms_per_pass:.3f}" in run.line()
        assert run.workload == "repeat" and f"{run.passes:4d} passes" in run.line()
    assert 0 < plain.passes < plain.tokens       # a pass a token, after the first text
    assert 0 < drafted.passes <= plain.passes and drafted.tokens == plain.tokens
    # priced against the table: the steps' passes alone, not the prompts' nor the calibration's before the first
    assert len(timer.priced) == plain.passes + drafted.passes


def test_llama_cpps_tools_run_with_the_kernels_the_benchmark_found(peers, tmp_path, monkeypatch):
    """An engine in the benchmark's process sets ggml's tiled-matmul switch in its environment (cpu_tiled_matmul):
    llama.cpp's tools must not inherit it, and the report names both sides' kernels."""
    tool = tmp_path / "llama-tool"
    tool.write_text('#!/bin/sh\necho "switch=${GGML_CPU_TILED_MM-unset}"\n')
    tool.chmod(0o755)
    monkeypatch.setattr(peers, "LAUNCH_ENVIRONMENT", {k: v for k, v in peers.LAUNCH_ENVIRONMENT.items()
                                                      if k != "GGML_CPU_TILED_MM"})
    monkeypatch.setenv("GGML_CPU_TILED_MM", "0")     # as an engine here would set it
    run = peers.LlamaCpp(tmp_path, pathlib.Path("t.gguf"), pathlib.Path("d.gguf"), 2)._run("llama-tool", [])
    assert run.stdout.strip() == "switch=unset"
    assert peers.kernels_beside(peers.LAUNCH_ENVIRONMENT).endswith(
        "GGML_CPU_TILED_MM unset (ggml's default: on) for llama.cpp's tools")


def test_the_best_draft_ceiling_verifies_the_draft_with_the_most_right_tokens(replay):
    cost = PassCost({1: 0.1, 2: 0.12, 4: 0.15, 8: 0.2, 16: 0.3, 17: 0.32})
    tokens = np.arange(200, dtype=np.int32)

    def chain_of(*drafters):
        entries = [ChainEntry(f"d{i}", d, "test", DrafterStats()) for i, d in enumerate(drafters)]
        return DrafterChain(entries, 2000, cost=cost)

    chain = chain_of(Reading(tokens, True, right=0), Reading(tokens, True, right=3))
    chain.begin(tokens[:8])
    chain.draft(tokens[:8], 16)
    assert [len(d) for d in chain.step_drafts().values()] == [16, 16]      # as made, whichever was chosen
    chain.accept(0, tokens[8:9])
    assert chain.step_drafts() == {}

    oracle = replay.ceiling(8, tokens, cost, 16, copy_only=False)
    # whatever the chain would choose (the wrong drafter comes first), the ceiling verifies the right one
    assert replay.best_draft(chain_of(Reading(tokens, True, right=0), Reading(tokens, True)), 8, tokens, cost,
                             16) == pytest.approx(oracle)
    assert replay.best_draft(chain_of(Reading(tokens, True, right=0)), 8, tokens, cost, 16) == pytest.approx(1.0)
    three = replay.knowing(8, tokens, cost, 16, lambda at, room: min(3, room))
    partly = chain_of(Reading(tokens, True, right=0), Reading(tokens, True, right=3))
    assert replay.best_draft(partly, 8, tokens, cost, 16) == pytest.approx(three)
    assert 1.0 < three < oracle
    stats = [entry.stats for entry in partly.entries]
    assert all(s.accepted_tokens <= s.drafted_tokens for s in stats)     # told what the passes confirmed of its drafts


def test_llama_cpps_best_native_type_is_chosen_on_other_repeats_than_it_is_timed_by(peers):
    """Seven runs that decode alike differ by the luck of the draw: the type fastest over the same repeats reads
    high. The best native type is chosen, at each repeat, by the other repeats' runs."""
    def run(comparison, label, repeat, speed):
        return {"comparison": comparison, "workload": "w", "repeat": repeat, "label": label,
                "tokens_per_second": speed, "n_generated": 100, "n_prompt": 10, "acceptance": None}

    records = [run("default config", "specframe default config", 0, 30.0),
               run("default config", "specframe default config", 1, 30.0),
               run("plain decoding", "llama-completion", 0, 30.0), run("plain decoding", "llama-completion", 1, 30.0),
               # ngram-simple is lucky at repeat 0, ngram-mod at repeat 1: each is chosen for the other repeat
               run("ngram-simple", "llama-speculative-simple", 0, 36.0),
               run("ngram-simple", "llama-speculative-simple", 1, 29.0),
               run("ngram-mod", "llama-speculative-simple", 0, 30.0),
               run("ngram-mod", "llama-speculative-simple", 1, 34.0),
               run("ngram-cache", "llama-lookup", 0, 20.0), run("ngram-cache", "llama-lookup", 1, 20.0)]
    plan = [peers.Comparison("default", "default config", "", [],
                             [("specframe default config", peers.BEST_NATIVE),
                              ("specframe default config", peers.FASTEST_NATIVE)])]
    prompt = peers.Prompt("w", [1, 2], "ab", 100)
    best, fastest = peers.summarize(plan, [prompt], records)

    assert fastest["peer"] == f"{peers.FASTEST_NATIVE}: llama-speculative-simple ngram-simple"
    assert fastest["peer_tokens_per_second"] == pytest.approx(32.5) and fastest["ratio"] == pytest.approx(30 / 32.5)
    assert best["peer"] == (f"{peers.BEST_NATIVE}: llama-speculative-simple ngram-mod (repeat 1), "
                            "llama-speculative-simple ngram-simple (repeat 2)")
    assert best["peer_tokens_per_second"] == pytest.approx((30.0 + 29.0) / 2)
    assert best["ratio"] == pytest.approx(30 / 29.5) and best["peer_speedup"] == pytest.approx(29.5 / 30)

    one_repeat = [r for r in records if r["repeat"] == 0]     # nothing held out: the fastest
    best, fastest = peers.summarize(plan, [prompt], one_repeat)
    assert best["peer_tokens_per_second"] == fastest["peer_tokens_per_second"] == 36.0


def test_peer_runs_go_a_repeat_at_a_time_every_other_one_reversed(peers, monkeypatch):
    """The machine drifts over a session: taken a comparison at a time, the default config ran tens of minutes from
    the native types it is compared with, and ours always before its peer."""
    made = []

    def runner(label):
        def run(prompt):
            made.append((label, prompt.workload))
            return {label: peers.Measurement(20.0 + len(made), 100, len(prompt.tokens))}
        return run

    plan = [peers.Comparison("ngram", name, "", [(f"ours {name}", runner(f"ours {name}")),
                                                  (f"peer {name}", runner(f"peer {name}"))], [])
            for name in ("ngram-simple", "default config")]
    prompts = [peers.Prompt(workload, [1, 2], "ab", 100) for workload in ("w1", "w2")]
    monkeypatch.setattr(peers, "other_load", lambda: 0)
    records = peers.measure(plan, prompts, repeat=2)

    one_round = [(f"{side} {name}", workload) for workload in ("w1", "w2")
                 for name in ("ngram-simple", "default config") for side in ("ours", "peer")]
    assert made == one_round + one_round[::-1]
    assert [r["repeat"] for r in records] == [0] * 8 + [1] * 8
    assert all(r["comparison"] in r["label"] and r["workload"] == workload
               for r, (_, workload) in zip(records, made))


@pytest.fixture(scope="module")
def editor():
    """benchmarks/editor.py, which imports serving's helpers as it does when run from benchmarks/."""
    had_serving = "serving" in sys.modules
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield from load("editor", BENCHMARKS / "editor.py")
    finally:
        sys.path.remove(str(BENCHMARKS))
        if not had_serving:
            sys.modules.pop("serving", None)


def test_the_editor_benchmark_runs_both_servers_alike(editor, write_config, target_path):
    """The same slots, context per slot, batch and physical batch, and cache reuse on both servers; by default one
    slot (an editor is one client) and the editors' session of 24 completions, greedy, without time caps."""
    from specframe.config import load_config

    args = editor.parse_args([])
    assert (args.requests, args.n_predict, args.cache_reuse, args.slots) == (24, 64, 256, 1)
    assert args.config == editor.PRESET and args.file.is_file() and len(args.extra) == 2
    config = load_config(write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 4096
        n_batch = 1024
        """))
    commands = editor.server_commands(args, config, pathlib.Path("llama-server"))
    ours, theirs = " ".join(commands["specframe"](8080)), " ".join(commands["llama-server"](8081))
    assert "--port 8080 --slots 1 --cache-reuse 256" in ours
    assert "-c 4096 -np 1 " in theirs and "-b 1024 " in theirs and theirs.endswith("--cache-reuse 256 -ub 1024")
    assert list(editor.server_commands(args, config, None)) == ["specframe"]

    requests = editor.session(args)
    completions = [r for r in requests if r.kind == "completion"]
    assert len(completions) == 24 and requests[0].kind == "warm-up"
    assert all("response_fields" not in r.body and "t_max_predict_ms" not in r.body for r in requests)
    assert all(r.body["temperature"] == 0.0 and r.body["n_predict"] == 64 for r in completions)
    for bad in (["--requests", "0"], ["--slots", "0"], ["--cache-reuse", "-1"], ["--file", "no-such-file.py"]):
        with pytest.raises(SystemExit):
            editor.parse_args(bad)


def test_the_editor_report_compares_completions_and_states_the_goals(editor):
    def run(latencies, prompts, texts):
        outcomes = [editor.Outcome(1, "warm-up", None, 0.5, 0, 900, 0, 100.0, None, None, False, "")]
        for i, (seconds, prompt_n, text) in enumerate(zip(latencies, prompts, texts), 2):
            outcomes.append(editor.Outcome(i, "completion", 100 + i, seconds, 10, prompt_n, 800, 10.0, 50.0,
                                           "limit", False, text))
        return outcomes

    ours = run([0.2, 0.4, 0.6, 0.8], [10, 20, 30, 40], ["a", "b", "c", "d"])
    theirs = run([1.0, 1.0, 1.0, 1.0], [20, 20, 20, 20], ["a", "b", "x", "d"])
    a, b = editor.summarize("specframe", ours), editor.summarize("llama-server", theirs)
    assert (a.completions, a.latency_median, a.latency_p90, a.prompt_n_mean) == (4, 0.5, 0.8, 25)
    assert a.tokens_per_second == pytest.approx(40 / 2.0) and a.predicted == 40
    compared = editor.comparison(ours, theirs, a, b)
    assert compared["latency_median_ratio"] == pytest.approx(0.5) and compared["latency_goal_met"]
    assert compared["prompt_n_mean_ratio"] == pytest.approx(1.25) and not compared["prompt_goal_met"]
    assert (compared["same_text"], compared["compared"]) == (3, 4)

    session = {"file": "f.py", "file_lines": 300, "file_sha256": "0" * 16, "extra": ["g.py"], "start_line": 257,
               "completions": 4, "warm_ups": 1, "n_prefix": 256, "n_suffix": 64, "ring_chunks": 16,
               "chunk_lines": 32, "n_predict": 64, "cache_reuse": 256, "slots": 1, "seed": 0}
    meta = {"command": "python editor.py", "date": "today", "cpu": "cpu", "threads": 2, "config": "c.toml",
            "kernels": "kernels", "session": session}
    text = editor.report(meta, [a, b], {"specframe": ours, "llama-server": theirs}, compared)
    assert "| median completion latency | 0.50x | <= 0.70x: met |" in text
    assert "| mean prompt tokens evaluated per completion | 1.25x | <= 1.00x: **not met** |" in text
    assert "Same completion text on both servers: 3 of 4." in text
    assert "| 1 | warm-up | - | 900 | 0 | 0.50 | 900 | 0 | 0.50 | |" in text
    assert "| 4 | completion | 104 | 30 | 800 | 0.60 | 20 | 800 | 1.00 | no |" in text
    alone = editor.report(meta, [a], {"specframe": ours}, None)
    assert "specframe / llama-server" not in alone and "| 2 | completion | 102 | 10 | 800 | 0.20 |" in alone
