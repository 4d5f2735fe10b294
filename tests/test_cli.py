"""The command line on the synthetic model: run (text, --json, --no-spec), plugins, models, one-line errors."""

import io
import json
import os
import re
import subprocess
import sys

import pexpect
import pytest
from click.testing import CliRunner

from specframe.cli import main
from specframe.tint import wanted


@pytest.fixture
def config(write_config, target_path, draft_path):
    return write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 1024
        [generation]
        max_tokens = 40
        [speculative]
        adaptive = false        # fixed draft lengths: rejection sampling's draws then repeat with the seed
        [[drafter]]
        type = "prompt-lookup"
        [[drafter]]
        type = "draft-model"
        model = "{draft_path}"
        p_min = 0.2
        """)


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_run_json_reports_text_tokens_and_stats(config):
    result = run("run", "--config", str(config), "--prompt", "the quick brown fox", "--raw", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert len(data["tokens"]) == 40 and data["n_prompt_tokens"] > 0 and data["text"]
    stats = data["stats"]
    for key in ("n_drafted", "n_accepted", "acceptance_rate", "n_target_passes", "tokens_per_second"):
        assert key in stats
    assert set(stats["drafters"]) == {"prompt-lookup", "draft-model"}
    assert stats["n_accepted"] == sum(d["accepted_tokens"] for d in stats["drafters"].values())


def test_run_streams_text_to_stdout_and_statistics_to_stderr(config):
    spec = run("run", "--config", str(config), "-p", "the quick brown fox", "--raw")
    plain = run("run", "--config", str(config), "-p", "the quick brown fox", "--raw", "--no-spec")
    assert spec.exit_code == plain.exit_code == 0
    assert spec.stdout == plain.stdout                 # speculation does not change the answer
    assert "tokens/pass" in spec.stderr and "draft-model" in spec.stderr and "accepted" in spec.stderr
    assert "#held back" in spec.stderr
    assert "drafted" not in plain.stderr


def test_run_statistics_say_how_often_each_drafter_was_asked_won_and_accepted(config):
    spec = run("run", "--config", str(config), "-p", "the quick brown fox jumps over the lazy dog. the quick brown",
               "--raw", "-n", "48")
    assert spec.exit_code == 0
    lines = spec.stderr.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("drafter "))
    assert lines[header].split()[1:5] == ["#calls", "#gen", "drafts", "#won"]
    rows = {line.split()[0]: [int(cell) for cell in line.split()[1:8]] for line in lines[header + 1:header + 3]}
    assert set(rows) == {"prompt-lookup", "draft-model"}
    for calls, drafts, won, accepted_drafts, drafted_tokens, accepted_tokens, _ in rows.values():
        assert calls >= drafts >= won >= accepted_drafts and drafted_tokens >= accepted_tokens >= accepted_drafts
    assert sum(row[2] for row in rows.values()) > 0       # some draft was verified


def test_run_notes_token_mapping_in_the_statistics(write_config, target_path, shuffled_draft_path):
    config = write_config(f"""
        [target]
        model = "{target_path}"
        [[drafter]]
        type = "draft-model"
        model = "{shuffled_draft_path}"
        p_min = 0.2
        """)
    result = run("run", "--config", str(config), "-p", "the quick brown fox", "--raw", "-n", "20")
    assert result.exit_code == 0
    assert "(token mapping: token " in result.stderr and " differs " in result.stderr


def test_run_holds_its_output_to_a_json_schema_or_a_grammar_given_as_flags(config, tmp_path, monkeypatch):
    schema = tmp_path / "schema.json"
    schema.write_text('{"type": "object", "properties": {"n": {"type": "integer", "maximum": 99}}, "required": ["n"], '
                      '"additionalProperties": false}')
    monkeypatch.chdir(tmp_path)          # a file named on the command line is the shell's, not the config's
    for flags in (["-j", "schema.json"], ["--json-schema", schema.read_text()]):
        result = run("run", "--config", str(config), "--prompt", "the quick brown fox", "--raw", "--json", *flags)
        assert result.exit_code == 0, result.output
        assert list(json.loads(json.loads(result.stdout)["text"])) == ["n"]
    result = run("run", "--config", str(config), "--prompt", "the quick brown fox", "--raw", "--json",
                 "--grammar", 'root ::= "yes" | "no"')
    assert json.loads(result.stdout)["text"] in ("yes", "no")
    result = CliRunner().invoke(main, ["run", "--config", str(config), "-p", "x", "--grammar", "root ::= ("])
    assert result.exit_code != 0 and "sampling.grammar" in result.output and "Traceback" not in result.output


def test_run_options_override_the_config(config, tmp_path):
    prompt = tmp_path / "p.txt"
    prompt.write_text("the quick brown fox")

    def tokens(*options):
        out = run("run", "--config", str(config), "-f", str(prompt), "--raw", "--json", "-n", "5", *options)
        return tuple(json.loads(out.stdout)["tokens"])

    greedy = tokens("--temp", "0")
    sampled = {seed: tokens("--temp", "0.8", "-s", str(seed)) for seed in (3, 4, 5)}
    assert len(greedy) == 5 and all(len(t) == 5 for t in sampled.values())      # -n
    assert tokens("--temp", "0.8", "-s", "3") == sampled[3]                          # -s makes sampling repeatable
    assert len(set(sampled.values())) > 1                                        # ... and is not ignored
    assert any(t != greedy for t in sampled.values())                            # --temp is not ignored


def test_errors_are_one_line(config, write_config):
    bad = write_config('[target]\nmodel = "x.gguf"\n', name="bad.toml")
    result = run("run", "--config", str(bad), "-p", "hi")
    assert result.exit_code == 1
    assert result.stderr.strip().count("\n") == 0 and "target.model" in result.stderr
    both = run("run", "--config", str(config), "-p", "hi", "-f", str(bad))
    assert both.exit_code == 2 and "exactly one of --prompt" in both.stderr


def test_plugins_lists_every_drafter_with_its_parameters():
    result = run("plugins", "--json", "-m", "third_party_drafter")
    listing = {entry["type"]: entry for entry in json.loads(result.stdout)}
    assert {"prompt-lookup", "ngram-simple", "draft-model", "last-match"} <= set(listing)
    params = {p["name"]: p for p in listing["draft-model"]["parameters"]}
    assert params["p_min"]["default"] == 0.75 and params["model"]["required"]
    assert listing["last-match"]["package"] == "third_party_drafter"
    assert "prompt-lookup  (plugin specframe.drafters.prompt_lookup" in run("plugins").stdout


def test_models_list_and_unknown_names():
    listing = json.loads(run("models", "list", "--json").stdout)
    assert {m["name"] for m in listing} >= {"qwen2.5-coder-1.5b-instruct-q4_k_m", "smollm2-135m-instruct-q4_1"}
    result = run("models", "path", "no-such-model")
    assert result.exit_code == 1 and "unknown model 'no-such-model'; catalog models:" in result.stderr


def test_a_missing_library_is_one_line_that_says_how_to_build_it(config, tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, SPECFRAME_LLAMA_PREFIX=str(tmp_path / "no-build"))
    result = subprocess.run([sys.executable, "-m", "specframe.cli", "run", "--config", str(config), "-p", "hi"],
                            env=env, capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "./build_llama.sh" in result.stderr
    assert result.stderr.startswith("Error: no specframe binding")


def test_ngram_build_merge_and_stats(tmp_path, target_path):
    from specframe.ngram_counts import NgramCache

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("for i in range(10):\n    print(i)\n" * 50)
    built = run("ngram", "build", str(corpus), "--model", str(target_path), "-o", str(tmp_path / "a.ngc"))
    assert built.exit_code == 0, built.stderr
    cache = NgramCache.load(tmp_path / "a.ngc")
    assert len(cache) > 0 and all(len(k) == 2 for k in cache.table)
    run("ngram", "build", str(corpus), "--model", str(target_path), "-o", str(tmp_path / "b.ngc"), "--sizes", "1,2")
    merged = run("ngram", "merge", str(tmp_path / "a.ngc"), str(tmp_path / "b.ngc"), "-o", str(tmp_path / "c.ngc"))
    assert merged.exit_code == 0
    stats = json.loads(run("ngram", "stats", str(tmp_path / "c.ngc"), "--json").stdout)
    assert stats["ngrams_by_size"]["2"] == len(cache) and stats["ngrams_by_size"]["1"] > 0
    some_key = next(iter(cache.table))
    assert NgramCache.load(tmp_path / "c.ngc").get(some_key) == {t: 2 * c for t, c in cache.get(some_key).items()}
    (tmp_path / "bad.ngc").write_bytes(b"SFNGRAM\0" + b"\1" * 10)
    bad = run("ngram", "stats", str(tmp_path / "bad.ngc"))
    assert bad.exit_code == 1 and "bad.ngc" in bad.stderr and bad.stderr.count("\n") == 1


def test_bench_measures_every_strategy_against_plain_and_the_oracle(config, tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    prompt = tmp_path / "mine.txt"
    prompt.write_text("the quick brown fox jumps over the lazy dog, the quick brown fox")
    result = run("bench", "--config", str(config), "-w", "code-generation", "-w", str(prompt), "-n", "24", "-r", "2",
                 "--json", str(out), "--plot", str(png))
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0].split()
    assert header[:4] == ["workload", "strategy", "tokens", "tok/s"] and "lossless" in header
    rows = json.loads(out.read_text())["rows"]
    strategies = ("plain", "prompt-lookup", "draft-model", "chain", "oracle")
    assert [(r["workload"], r["strategy"]) for r in rows] == [
        (w, s) for w in ("code-generation", "mine") for s in strategies]
    for row in rows:
        assert row["tokens"] == 24 and row["tokens_per_second"] > 0 and row["peak_rss_mib"] > 0
        assert 0 <= row["spread"] < 1                      # two rounds: how far apart they lay
        assert len(row["round_tokens_per_second"]) == 2 and min(row["round_tokens_per_second"]) > 0
        if row["strategy"] == "plain":
            assert row["speedup"] == 1.0 and row["modeled_speedup"] == 1.0 and row["passes_per_token"] == 1.0
        else:
            assert row["lossless"] == "identical"          # float32 synthetic model: exactly plain's output
    oracles = [r for r in rows if r["strategy"] == "oracle"]
    assert all(r["acceptance_rate"] == 1.0 and r["oracle_fraction"] == 1.0 for r in oracles)
    assert all(r["passes_per_token"] < 0.5 for r in oracles)
    assert all(r["modeled_speedup"] > 1 for r in oracles)       # far fewer passes, priced by the table
    pricing = json.loads(out.read_text())["pass_cost"]              # what priced them, stated
    assert pricing["seconds"] == {} and "modeled: no pass-cost table (fixed draft lengths)" in result.stdout
    saved = json.loads(out.read_text())
    assert saved["date"] and "threads" in saved["machine"]          # what a remade plot's title states
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


CRIMSON = (220 / 255, 20 / 255, 60 / 255)   # the plot's colour for llama.cpp's best native type


def crimson_pixels(png) -> int:
    import matplotlib.image
    import numpy as np

    rgb = matplotlib.image.imread(png)[..., :3]
    return int((np.abs(rgb - CRIMSON).max(axis=-1) < 2 / 255).sum())


def test_a_saved_bench_is_plotted_again_with_llama_cpp_beside_it(config, tmp_path):
    out, live, again, beside = (tmp_path / name for name in ("bench.json", "live.png", "again.png", "peers.png"))
    result = run("bench", "--config", str(config), "-w", "code-editing", "-n", "12", "--json", str(out),
                 "--plot", str(live))
    assert result.exit_code == 0, result.output
    assert run("plot", str(out), "-o", str(again)).exit_code == 0
    assert again.read_bytes() == live.read_bytes()          # the saved rows draw exactly what the run drew
    peers = tmp_path / "results.json"
    peers.write_text(json.dumps({"meta": {"date": "2026-11-29", "environment": {"cpu": "AMD EPYC"}}, "rows": [
        {"group": "default", "workload": "code-editing", "peer": "llama.cpp's best native type: ngram-mod",
         "peer_speedup": 1.04, "ours_speedup": 1.16}]}))
    assert run("plot", str(out), "-o", str(beside), "--peers", str(peers)).exit_code == 0
    assert crimson_pixels(again) == 0 and crimson_pixels(beside) > 100


def test_plot_names_a_file_that_is_not_a_bench_and_a_missing_matplotlib(tmp_path, monkeypatch):
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"meta": {}, "rows": []}))
    for args, problem in ((["plot", str(wrong), "-o", str(tmp_path / "a.png")], "wrong.json: not a bench saved by"),
                          (["plot", str(wrong), "-o", str(tmp_path / "a.png"), "--peers", str(wrong)],
                           "wrong.json: no 'llama.cpp's best native type' rows")):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and problem in result.output and result.output.count("\n") == 1
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"rows": [{"workload": "w", "strategy": "plain", "speedup": 1.0}]}))
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # as if the 'plot' extra were not installed
    result = CliRunner().invoke(main, ["plot", str(bench), "-o", str(tmp_path / "a.png")])
    assert result.exit_code == 1 and "pip install 'specframe[plot]'" in result.output
    assert not (tmp_path / "a.png").exists()


def test_bench_holds_a_structured_workload_to_its_schema(config, tmp_path):
    out = tmp_path / "bench.json"
    result = run("bench", "--config", str(config), "-w", "json-extraction", "-n", "24", "--json", str(out))
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["rows"]
    assert {r["strategy"] for r in rows} == {"plain", "prompt-lookup", "draft-model", "chain", "oracle"}
    assert all(r["workload"] == "json-extraction" and r["tokens"] == 24 for r in rows)
    assert all(r["lossless"] == "identical" for r in rows if r["strategy"] != "plain")


def test_bench_names_an_unknown_workload(config):
    result = CliRunner().invoke(main, ["bench", "--config", str(config), "-w", "nonsense"])
    assert result.exit_code != 0 and "workload 'nonsense': neither a built-in workload" in result.output


def test_bench_only_runs_the_strategies_named_beside_plain_and_the_oracle(config, tmp_path):
    out = tmp_path / "bench.json"
    result = run("bench", "--config", str(config), "-w", "code-generation", "-n", "16", "--only", "chain",
                 "--json", str(out))
    assert result.exit_code == 0, result.output
    assert [r["strategy"] for r in json.loads(out.read_text())["rows"]] == ["plain", "chain", "oracle"]
    wrong = CliRunner().invoke(main, ["bench", "--config", str(config), "--only", "chain,ngram-mod"])
    assert wrong.exit_code != 0
    assert "--only ngram-mod: not a strategy of this config; expected one of prompt-lookup, draft-model, chain" in (
        wrong.output)



def test_calibrate_shows_the_table_stores_it_and_measures_again_on_reset(write_config, target_path, monkeypatch):
    # One thread: a tiny model's passes last a tenth of a millisecond, and two threads waiting on each other on a
    # busy 2-core machine make a batch look impossibly dear (the table is then used but not stored). Whether the
    # machine is busy is not this test's business (test_pass_cost covers a table taken under load). Nor is the spot
    # check's verdict on the stored table: on a busy CI machine its passes of a tenth of a millisecond drift apart by
    # more than the margins that find a real table stale (test_pass_cost covers those verdicts).
    monkeypatch.setattr("specframe.drafting.pass_cost.other_load", lambda *args: 0.0)
    for margin in ("FASTER", "DRIFT", "GROSS"):
        monkeypatch.setattr(f"specframe.drafting.pass_cost.{margin}", 1e3)
    config = write_config(f"""
        [target]
        model = "{target_path}"
        threads = 1
        """, name="calibrate.toml")
    first = run("calibrate", "--config", str(config), "--json")
    assert first.exit_code == 0, first.output
    table = json.loads(first.stdout)
    assert set(table["seconds"]) >= {str(n) for n in range(1, 18)} and table["stored"]
    assert table["depth"] == 0 and table["per_position"] >= 0.0      # what depth adds, timed 256 positions on
    assert sum(table["weight_buffers"].values()) > 0 and table["amx_built"] in (True, False)
    again = json.loads(run("calibrate", "--config", str(config), "--json").stdout)
    assert again["measured_at"] == table["measured_at"]          # stored: not measured again
    from specframe.drafting.catch_up import ModelRateStore, catch_up_folder

    rate = ModelRateStore(catch_up_folder(), "a-draft-model")
    rate.save(0.01, other_load=0.0)
    reset = json.loads(run("calibrate", "--config", str(config), "--reset", "--json").stdout)
    assert reset["measured_at"] > table["measured_at"]
    assert rate.load() == 0.0                                   # the draft models' rates are timed again too
    shown = run("calibrate", "--config", str(config))
    assert "x single pass" in shown.stdout and "\n    17 " in shown.stdout
    assert "at depth 0; each token of a pass adds" in shown.stdout
    kernels = next(line for line in shown.stdout.splitlines() if line.startswith("kernels: weights in "))
    assert all(f" {name} " in kernels for name in table["weight_buffers"])     # the same buffers as the JSON's


def test_bench_refuses_a_wrong_peers_report_before_it_runs(config, tmp_path, monkeypatch):
    wrong = tmp_path / "results.json"
    wrong.write_text(json.dumps({"rows": [{"peer": "llama-completion", "workload": "quoting"}]}))
    loaded = []
    monkeypatch.setattr("specframe.llama.model.Model.__init__", lambda *a, **k: loaded.append(a) or 1 / 0)
    png = str(tmp_path / "b.png")
    result = CliRunner().invoke(main, ["bench", "--config", str(config), "--plot", png, "--peers", str(wrong)])
    assert result.exit_code == 1 and "results.json: no 'llama.cpp's best native type' rows" in result.output
    result = CliRunner().invoke(main, ["bench", "--config", str(config), "--peers", str(wrong)])
    assert result.exit_code == 2 and "--peers goes with --plot" in result.output
    assert not loaded


REPEATING = "the quick brown fox jumps over the lazy dog. the quick brown"   # prompt lookup copies from it
ESCAPE = re.compile(r"\x1b\[(\d+)m(.*?)\x1b\[0m", re.S)


def spawned_run(config, *options, env=None):
    """specframe run in a pseudo-terminal: what it writes to the terminal (stdout and stderr)."""
    child = pexpect.spawn(sys.executable, ["-m", "specframe.cli", "run", "--config", str(config), "-p", REPEATING,
                                           "--raw", "-n", "48", *options],
                          env=env or terminal_environment(), encoding="utf-8", timeout=120, dimensions=(40, 400))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return child.before


def terminal_environment(**more) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    return env | {"TERM": "xterm"} | more


def test_run_color_tints_drafted_text_on_a_terminal_and_not_in_a_pipe(config):
    shown = spawned_run(config, "--color")
    tinted = ESCAPE.findall(shown)
    assert tinted and "drafted and accepted, by drafter: " in shown
    text = shown[:shown.index("prompt: ")]
    plain = subprocess.run([sys.executable, "-m", "specframe.cli", "run", "--config", str(config), "-p", REPEATING,
                            "--raw", "-n", "48", "--color"], capture_output=True, text=True, env=terminal_environment())
    assert plain.returncode == 0 and "\x1b[" not in plain.stdout + plain.stderr
    assert ESCAPE.sub(r"\2", text).replace("\r\n", "\n").strip() == plain.stdout.strip()   # the same text, tinted
    assert "\x1b[" not in spawned_run(config)                                       # off unless asked for


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("mode,stream,environment,tinted", [
    ("auto", Terminal(), {"TERM": "xterm"}, True),
    ("auto", io.StringIO(), {"TERM": "xterm"}, False),               # a pipe or a file
    ("auto", Terminal(), {"TERM": "xterm", "NO_COLOR": "1"}, False),  # no-color.org
    ("auto", Terminal(), {"TERM": "dumb"}, False),
    ("always", io.StringIO(), {"TERM": "dumb", "NO_COLOR": "1"}, True),
    ("never", Terminal(), {"TERM": "xterm"}, False),
])
def test_color_modes(mode, stream, environment, tinted, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert wanted(mode, stream) == tinted


def test_run_color_always_tints_each_drafter_s_accepted_tokens_as_the_legend_counts(config):
    result = run("run", "--config", str(config), "-p", REPEATING, "--raw", "-n", "48", "--color", "always")
    plain = run("run", "--config", str(config), "-p", REPEATING, "--raw", "-n", "48")
    assert result.exit_code == plain.exit_code == 0
    assert ESCAPE.sub(r"\2", result.stdout) == plain.stdout and "\x1b[" not in plain.stdout
    legend = re.search(r"drafted and accepted, by drafter: (.*); the target's own tokens \(plain\): (\d+)",
                       result.stderr)
    counts = {ESCAPE.sub(r"\2", part).rsplit(" ", 1)[0]: int(part.rsplit(" ", 1)[1])
              for part in legend[1].split(", ")}
    lines = result.stderr.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("drafter "))
    accepted = {line.split()[0]: int(line.split()[6]) for line in lines[header + 1:header + 3]}
    assert counts == accepted and sum(counts.values()) > 0      # what the statistics say each drafter wrote
    colours = {code for code, _ in ESCAPE.findall(result.stdout)}
    assert 1 <= len(colours) <= sum(1 for n in counts.values() if n)   # a colour of its own per drafter
