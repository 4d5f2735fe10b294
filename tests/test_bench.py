"""The benchmark's parts: workloads, sessions and the oracle drafter (the bench command itself is in test_cli.py,
its session mode here)."""

import re
import time

import numpy as np
import pytest

from specframe.bench.oracle import OracleDrafter, settled_reference
from specframe.bench.workloads import (
    BUILTIN,
    BUILTIN_SESSIONS,
    STRUCTURED,
    Turn,
    session,
    sessions,
    workload,
    workloads,
)
from specframe.errors import SpecframeError
from specframe.testing import fake_env


def test_the_oracle_drafts_the_reference_and_rejoins_it_after_a_divergence():
    reference = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], dtype=np.int32)
    oracle = OracleDrafter(reference, fake_env())
    oracle.begin(reference[:3])
    assert oracle.draft(reference[:3], 4).tokens.tolist() == [4, 5, 6, 7]
    assert oracle.draft(reference[:8], 2).tokens.tolist() == [9, 10]
    diverged = np.array([1, 2, 3, 4, 5, 6, 7, 8, 99], dtype=np.int32)
    assert len(oracle.draft(diverged, 4)) == 0                      # nothing in the reference follows 99
    rejoined = np.array([1, 2, 3, 4, 5, 6, 7, 8, 99, 7, 8, 9, 10], dtype=np.int32)
    assert oracle.draft(rejoined, 4).tokens.tolist() == [11, 12]    # the text met the reference again


def test_a_reference_is_settled_on_the_reply_the_oracle_reproduces():
    """Where batched passes break a near-tie, the oracle's output parts from plain's reply and may never rejoin it:
    that output becomes the reference, until a run follows its reference to the end."""
    plain, batched = np.array([1, 2, 3, 4, 5]), np.array([1, 2, 3, 9, 8])
    asked = []

    def reply_to(reference):
        asked.append(reference.tolist())
        return batched

    assert settled_reference(reply_to, plain).tolist() == [1, 2, 3, 9, 8]
    assert asked == [[1, 2, 3, 4, 5], [1, 2, 3, 9, 8]]                # settled: the second run followed it
    outputs = iter([[1, 7], [1, 6], [1, 5], [1, 4]])
    assert settled_reference(lambda reference: next(outputs), plain, tries=3).tolist() == [1, 5]   # the last run's


def test_built_in_workloads_are_real_prompts_with_budgets(tmp_path):
    chosen = workloads()
    assert [w.name for w in chosen] == list(BUILTIN) == ["code-editing", "quoting", "code-generation", "open-prose"]
    assert all(len(w.prompt) > 40 and w.max_tokens >= 128 for w in chosen)
    own = tmp_path / "mine.txt"
    own.write_text("Summarise this.")
    assert workload(str(own), 50) == workload(str(own), 50) and workload(str(own), 50).name == "mine"
    (tmp_path / "empty.txt").write_text("  ")
    with pytest.raises(SpecframeError, match="empty"):
        workload(str(tmp_path / "empty.txt"))


def test_structured_workloads_hold_their_answers_to_a_schema_or_to_tools():
    extraction, call = workload("json-extraction"), workload("tool-call")
    assert list(STRUCTURED) == ["json-extraction", "tool-call"]
    assert "json-extraction" not in [w.name for w in workloads()]      # not in the default set
    assert len(extraction.schema["required"]) == 14 and extraction.tools is None
    assert call.schema is None and [t["function"]["name"] for t in call.tools][0] == "book_room"
    for field in ("Stornhaven", "1,850", "2031"):
        assert field in extraction.prompt


def test_built_in_sessions_are_conversations_that_repeat_earlier_text():
    """The agent loop asks six times for the whole module back; the document's questions and the review ask for
    quotes of what came before."""
    agent, document, review = sessions()
    assert [s.name for s in (agent, document, review)] == list(BUILTIN_SESSIONS)
    assert len(agent.turns) >= 6 and "```python" in agent.turns[0].user and "class Library" in agent.turns[0].user
    assert all("Reply with the whole file." in turn.user for turn in agent.turns)
    assert "With malice toward none" in document.turns[0].user and len(document.turns) >= 4
    assert all("quot" in turn.user.lower() for turn in document.turns[1:])
    assert len(review.turns) >= 3 and "plan" in review.turns[2].user
    assert all(s.system and all(t.max_tokens >= 200 for t in s.turns) for s in (agent, document, review))
    assert {t.max_tokens for t in session("agent-loop", 40).turns} == {40}      # -n replaces every budget


@pytest.mark.parametrize("text, fault", [
    ("", "turn: expected one or more [[turn]] tables"),
    ("max_tokens = 10\nturns = []", "turns: unknown key"),
    ("[[turn]]\nuser = 'hi'", "turn 1.max_tokens: missing"),
    ("max_tokens = 10\n[[turn]]\nuser = '  '", "turn 1.user: expected the user's message"),
    ("max_tokens = 10\n[[turn]]\nuser = 'a'\n[[turn]]\nuser = 'b'\nmax_tokens = 0",
     "turn 2.max_tokens: expected a whole number of tokens >= 1, got 0"),
    ("max_tokens = true\n[[turn]]\nuser = 'a'", "max_tokens: expected a whole number"),
    ("system = 3\nmax_tokens = 9\n[[turn]]\nuser = 'a'", "system: expected non-empty text"),
    ("max_tokens = 9\n[[turn]]\nuser = 'a'\nrole = 'x'", "turn 1.role: unknown key"),
    ("[[turn]\n", "not TOML"),
])
def test_a_bad_session_file_is_one_line_naming_the_field(tmp_path, text, fault):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(SpecframeError, match=re.escape(fault)) as caught:
        session(str(path))
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_session_file_sets_a_budget_for_every_turn_or_its_own(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("system = 'Be brief.'\nmax_tokens = 30\n[[turn]]\nuser = 'a'\n[[turn]]\nuser = 'b'\n"
                    "max_tokens = 50\n")
    mine = session(str(path))
    assert (mine.name, mine.system, mine.turns) == ("mine", "Be brief.", (Turn("a", 30), Turn("b", 50)))
    with pytest.raises(SpecframeError, match="neither a built-in session"):
        session("nonsense")


def test_the_oracle_drafts_its_longest_paying_cut_from_the_first_step():
    """The oracle's record starts certain: a fresh record's estimates over little evidence are taken low, so it
    would verify short drafts at first and measure less than the ceiling."""
    from specframe.drafting import ChainEntry, DrafterChain, DrafterStats
    from specframe.drafting.gain import DrafterRecord, best_cut
    from specframe.drafting.pass_cost import PassCost

    reference = np.arange(10, 210, dtype=np.int32)
    cost = PassCost({1: 0.030, 2: 0.033, 4: 0.039, 8: 0.060, 16: 0.087, 17: 0.095})   # a 2-core Xeon

    def first_draft(record: DrafterRecord) -> int:
        entry = ChainEntry("oracle", OracleDrafter(reference, fake_env()), "bench", DrafterStats(), record=record)
        chain = DrafterChain([entry], 1000, cost=cost)
        chain.begin(reference[:20])
        return len(chain.draft(reference[:20], 16))

    longest_paying = best_cut(np.ones(16), cost)[0]        # 15 here: a pass of 16 tokens is the cheapest per token
    assert first_draft(DrafterRecord.certain()) == longest_paying
    assert first_draft(DrafterRecord()) < longest_paying


def test_the_modeled_speed_prices_each_pass_at_its_depth():
    """A run's passes are priced where they ran: the same passes 2000 positions deeper take longer."""
    from specframe.bench.runner import _modeled_speed
    from specframe.drafting.pass_cost import PassCost
    from specframe.results import GenerationResult, RequestStats
    from specframe.trace import Pass

    cost = PassCost({1: 0.080, 5: 0.200}, per_position=20e-6, depth=0)

    def run_at(start: int) -> GenerationResult:
        passes = [Pass(((0, start + 5 * i, 5, 5),), 0, 5, 0.0) for i in range(4)]
        return GenerationResult(text="", tokens=[1] * 20, n_prompt_tokens=1, stop_reason="max_tokens",
                                stats=RequestStats(n_generated=20), passes=passes)

    shallow, deep = _modeled_speed(run_at(0), cost), _modeled_speed(run_at(2000), cost)
    assert shallow == pytest.approx(20 / sum(0.200 + 20e-6 * 5 * 5 * i for i in range(4)))
    assert deep == pytest.approx(20 / sum(0.200 + 20e-6 * 5 * (2000 + 5 * i) for i in range(4)))


def test_the_modeled_speed_takes_the_chains_time_at_the_tables_pace():
    """A run whose passes took a quarter longer than the table says ran its drafters a quarter slower too: their
    seconds count at the table's pace beside the passes priced by it, so the same run on a faster moment of the
    machine models alike."""
    from specframe.bench.runner import _modeled_speed
    from specframe.drafting.pass_cost import PassCost
    from specframe.results import GenerationResult, RequestStats
    from specframe.trace import Pass

    cost = PassCost({1: 0.080, 5: 0.200})

    def run_at_pace(pace: float) -> GenerationResult:
        passes = [Pass(((0, 5 * i, 5, 5),), 0, 5, pace * 0.200) for i in range(4)]
        return GenerationResult(text="", tokens=[1] * 20, n_prompt_tokens=1, stop_reason="max_tokens",
                                stats=RequestStats(n_generated=20, chain_seconds=pace * 0.4), passes=passes)

    assert _modeled_speed(run_at_pace(1.25), cost) == pytest.approx(20 / (4 * 0.200 + 0.4))
    assert _modeled_speed(run_at_pace(0.8), cost) == pytest.approx(_modeled_speed(run_at_pace(1.25), cost))


def test_the_bench_states_the_table_that_priced_its_modeled_speedups():
    from specframe.bench.presentation import format_pricing
    from specframe.drafting.pass_cost import PassCost

    cost = PassCost({n: 0.080 + 0.030 * (n - 1) for n in range(1, 18)}, per_position=20e-6, depth=270)
    assert format_pricing(cost) == (
        "modeled: each run's passes priced by the pass-cost table at their depth: a single pass 80.0 ms at depth "
        "270; in single passes 2 tokens 1.38, 4 tokens 2.12, 8 tokens 3.62, 16 tokens 6.62, 17 tokens 7.00; each "
        "token of a pass 20.00 ms more per 1000 positions deeper")


def test_the_bench_states_how_far_each_strategys_repeats_lay_apart():
    """Beside a median of noisy runs the table gives their spread: half their range over the median (plain's tokens/s;
    a strategy's speedups, round by round). A chain 0.92x plain where its rounds lay ±10% apart is noise, not a
    loss."""
    from specframe.bench.presentation import format_table
    from specframe.bench.runner import ORACLE, PLAIN, _rows
    from specframe.drafting.pass_cost import PassCost
    from specframe.results import GenerationResult, RequestStats
    from specframe.trace import Pass

    def run(seconds: float, passes: int) -> GenerationResult:
        return GenerationResult(text="", tokens=[1] * 20, n_prompt_tokens=1, stop_reason="max_tokens",
                                stats=RequestStats(n_generated=20, n_target_passes=passes, generation_seconds=seconds),
                                passes=[Pass(((0, 1 + i, 1, 1),), 0, 1, 0.1) for i in range(passes)])

    runs = {PLAIN: [run(2.0, 20), run(1.6, 20), run(2.5, 20)],     # 10, 12.5 and 8 tokens/s
            ORACLE: [run(1.0, 5)]}
    rows = _rows("w", runs, {PLAIN: 1.0, ORACLE: 1.0}, {}, PassCost({1: 0.1}))
    plain, oracle = rows
    assert plain.tokens_per_second == pytest.approx(10.0)
    assert plain.spread == pytest.approx((12.5 - 8.0) / 2 / 10.0)
    assert oracle.spread is None                                     # one run: no spread to tell
    table = format_table(rows).splitlines()
    assert table[0].split()[3:6] == ["tok/s", "speedup", "spread"]
    assert table[1].split()[3:6] == ["10.00", "1.00x", "±22%"] and table[2].split()[5] == "-"


def test_a_speedup_is_taken_round_by_round_against_plain_in_the_same_round():
    """The machine's pace drifts between rounds; a strategy's run set beside plain's of the same round keeps its
    speedup. Ratios of medians over rounds would mix a fast round's plain with a slow round's chain."""
    from specframe.bench.runner import CHAIN, ORACLE, PLAIN, _rows
    from specframe.drafting.pass_cost import PassCost
    from specframe.results import GenerationResult, RequestStats
    from specframe.trace import Pass

    def run(seconds: float) -> GenerationResult:
        return GenerationResult(text="", tokens=[1] * 20, n_prompt_tokens=1, stop_reason="max_tokens",
                                stats=RequestStats(n_generated=20, n_target_passes=10, generation_seconds=seconds),
                                passes=[Pass(((0, 1 + i, 1, 1),), 0, 1, 0.1) for i in range(10)])

    paces = [1.0, 1.3, 0.8]                                        # each round's machine, slower or faster
    runs = {PLAIN: [run(2.0 * p) for p in paces], CHAIN: [run(2.0 / 1.1 * p) for p in paces],   # 1.1x each round
            ORACLE: [run(1.0 * p) for p in paces]}
    rows = {r.strategy: r for r in _rows("w", runs, dict.fromkeys(runs, 1.0), {}, PassCost({1: 0.1}))}
    assert rows[CHAIN].speedup == pytest.approx(1.1) and rows[CHAIN].spread == pytest.approx(0.0)
    assert rows[CHAIN].round_tokens_per_second == pytest.approx([11 / p for p in paces])   # as measured, per round
    assert rows[ORACLE].speedup == pytest.approx(2.0)
    assert rows[CHAIN].oracle_fraction == pytest.approx(0.55)
    assert rows[PLAIN].spread == pytest.approx((10 / 0.8 - 10 / 1.3) / 2 / 10)   # plain's: the machine's drift


def test_a_run_advanced_in_slices_counts_none_of_its_waits(write_config, target_path):
    """The bench's strategies take turns: the seconds a run waits for its turn are not its decoding time, and being
    paused changes nothing in what it generates."""
    from specframe.bench.runner import PLAIN, MeasuredRun
    from specframe.engine import Engine

    config = write_config(f'[target]\nmodel = "{target_path}"\nn_ctx = 512\n[[drafter]]\ntype = "prompt-lookup"\n')
    with Engine.from_config(config) as engine:
        prompt = engine.prompt_tokens("the quick brown fox jumps over the lazy dog", raw=True)
        whole = engine.generate(prompt, speculative=False, max_tokens=24, temperature=0.0)
        run, waited, ended = MeasuredRun(engine, PLAIN), 0.0, None
        run.begin([(prompt, 24, [])])
        while ended is None:
            ended = run.advance(0.0)                 # a piece of text at a time
            if ended is None:
                time.sleep(0.05)
                waited += 0.05
        (result,), peak = ended
    assert result.tokens == whole.tokens and peak > 0
    assert waited >= 0.5                             # it was paused many times
    # Its own time: a pass right after a pause may take a few ms more (an idle CPU waking), the pauses not at all.
    assert result.stats.generation_seconds < waited / 2


SESSION = """
system = "Answer briefly."
max_tokens = 16
[[turn]]
user = "the quick brown fox jumps over the lazy dog"
[[turn]]
user = "one two three four one two three four"
[[turn]]
user = "alpha beta gamma alpha beta gamma"
"""


@pytest.fixture
def session_config(write_config, target_path):
    from chains import COPYING_DRAFTERS

    return write_config(f'[target]\nmodel = "{target_path}"\nn_ctx = 512\nthreads = 1\n'
                        f'[speculative]\nadaptive = false\n{COPYING_DRAFTERS}')     # fixed draft lengths


def test_a_sessions_requests_carry_the_conversation_with_plain_decodings_answers(session_config, tmp_path):
    from specframe.bench.runner import _conversation
    from specframe.engine import Engine

    (tmp_path / "chat.toml").write_text(SESSION)
    chat = session(str(tmp_path / "chat.toml"))
    with Engine.from_config(session_config) as engine:
        requests = _conversation(engine, chat)
        messages = [{"role": "system", "content": "Answer briefly."}]
        for (prompt, max_tokens, reference), turn in zip(requests, chat.turns):
            messages.append({"role": "user", "content": turn.user})
            assert engine.vocab.detokenize(prompt) == engine.vocab.detokenize(engine.vocab.tokenize(
                engine.chat_prompt(messages), add_special=True, parse_special=True))
            answer = engine.generate(prompt, speculative=False, max_tokens=16, temperature=0.0)
            assert max_tokens == 16 and reference == answer.tokens      # float32: the oracle follows plain's reply
            messages.append({"role": "assistant", "content": answer.text})
        assert all(len(later[0]) > len(earlier[0]) + 16 for earlier, later in zip(requests, requests[1:]))
        (tmp_path / "long.toml").write_text(SESSION.replace("max_tokens = 16", "max_tokens = 200"))
        with pytest.raises(SpecframeError, match=r"session long: turn 2: a prompt of \d+ tokens and an answer of "
                                                 r"up to 200 do not fit in n_ctx=512"):
            _conversation(engine, session(str(tmp_path / "long.toml")))


def test_a_sessions_turns_share_drafter_state_and_each_session_starts_cold(session_config):
    """ngram-mod keeps its pool across requests: asked the same prompt again within a session, it drafts the first
    answer it saw; a new session forgets it and drafts as the first turn did."""
    from specframe.bench.runner import MeasuredRun
    from specframe.engine import Engine

    with Engine.from_config(session_config) as engine:
        prompt = engine.prompt_tokens("the quick brown fox jumps over the lazy dog", raw=True)
        run = MeasuredRun(engine, "ngram-mod")

        def session_of(turns: int):
            run.begin([(prompt, 48, [])] * turns)
            ended = None
            while ended is None:
                ended = run.advance(0.05)
            return ended[0]

        first, again = session_of(2)
        (cold,) = session_of(1)
    assert first.tokens == again.tokens == cold.tokens
    assert again.stats.n_accepted >= len(again.tokens) - 8 > first.stats.n_accepted
    assert (cold.stats.n_drafted, cold.stats.n_accepted) == (first.stats.n_drafted, first.stats.n_accepted)


def test_bench_session_runs_every_strategy_over_whole_sessions(session_config, tmp_path):
    import json

    from click.testing import CliRunner

    from specframe.cli import main

    (tmp_path / "chat.toml").write_text(SESSION)
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(main, ["bench", "--session", "--config", str(session_config),
                                       "-w", str(tmp_path / "chat.toml"), "-n", "12", "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["rows"]
    assert [(r["workload"], r["strategy"]) for r in rows] == [
        ("chat", s) for s in ("plain", "prompt-lookup", "ngram-mod", "chain", "oracle")]
    for row in rows:
        assert row["tokens"] == 3 * 12 and row["tokens_per_second"] > 0      # three turns of 12 tokens
        assert row["lossless"] == ("-" if row["strategy"] == "plain" else "identical")
    oracle = rows[-1]
    assert oracle["acceptance_rate"] == 1.0 and oracle["passes_per_token"] < 0.5
    assert result.stdout.splitlines()[1].split()[:3] == ["chat", "plain", "36"]
    unknown = CliRunner().invoke(main, ["bench", "--session", "--config", str(session_config), "-w", "code-editing"])
    assert unknown.exit_code != 0 and "session 'code-editing': neither a built-in session" in unknown.output
