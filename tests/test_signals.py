"""SIGINT and SIGTERM at every stage of `specframe run`: at load, during the prompt, during generation and while
the dynamic n-gram cache is saved. Each ends with the signal's exit code, the text so far, the statistics and the
cache file intact.

The signal is sent by the process to itself at a chosen call (the N-th call of a function), so each stage is hit
exactly, every time: at load, inside llama.cpp's log callback while the model loads.
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from specframe.ngram_counts import NgramCache

RUNNER = '''
import importlib, os, signal, sys

target, nth, signame, *args = sys.argv[1:]
module, _, attribute = target.partition(":")
owner = importlib.import_module(module)
*parents, name = attribute.split(".")
for parent in parents:
    owner = getattr(owner, parent)
original = getattr(owner, name)
calls = 0


def signalling(*a, **k):
    global calls
    calls += 1
    if calls == int(nth):
        os.kill(os.getpid(), getattr(signal, signame))
    return original(*a, **k)


setattr(owner, name, signalling)
from specframe.cli import main
main(args, prog_name="specframe")
'''

STAGES = {
    "load": "specframe.llama._native:log.isEnabledFor:1",          # inside libllama's callback, as the model loads
    "prompt": "specframe.llama.context:Context.decode_batch:1",     # the prefill
    "generation": "specframe.llama.context:Context.decode_batch:6",
    "save": "os:fsync:1",                                           # the dynamic cache is being written
}
PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"


@pytest.fixture
def setup(tmp_path, target_path):
    (tmp_path / "runner.py").write_text(RUNNER)
    seeded = NgramCache()
    seeded.update([5, 6, 7, 5, 6, 7, 5])
    seeded.save(tmp_path / "dynamic.ngc")
    (tmp_path / "config.toml").write_text(textwrap.dedent(f"""
        [target]
        model = "{target_path}"
        n_ctx = 512
        threads = 1
        [generation]
        max_tokens = 64
        [speculative]
        adaptive = false
        [[drafter]]
        type = "prompt-lookup"
        [[drafter]]
        type = "ngram-cache"
        dynamic = "dynamic.ngc"
        save_dynamic = true
        """))
    env = dict(os.environ, SPECFRAME_LOAD_PLUGINS="")
    return tmp_path, seeded, env


def specframe_run(folder, env, stage: str, signame: str) -> subprocess.CompletedProcess:
    target, nth = stage.rsplit(":", 1)
    return subprocess.run([sys.executable, str(folder / "runner.py"), target, nth, signame,
                           "run", "--config", str(folder / "config.toml"), "-p", PROMPT, "--raw"],
                          capture_output=True, env=env, timeout=300)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("stage", STAGES)
def test_a_signal_at_any_stage_ends_the_run_cleanly(setup, stage, signame):
    folder, seeded, env = setup
    uninterrupted = specframe_run(folder, env, "os:getpid:1000000", signame)    # never signals
    assert uninterrupted.returncode == 0, uninterrupted.stderr.decode()
    seeded = NgramCache.load(folder / "dynamic.ngc")                               # now with that run's n-grams

    result = specframe_run(folder, env, STAGES[stage], signame)
    stderr = result.stderr.decode()
    assert result.returncode == 128 + getattr(signal, signame), stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    if stage == "load":
        assert stderr.strip() == f"specframe: interrupted ({signame})" and result.stdout == b""
    else:   # the text so far and the statistics
        assert uninterrupted.stdout.startswith(result.stdout.rstrip(b"\n"))
        assert "stop: interrupted" in stderr or stage == "save"
        assert "stop: interrupted" not in stderr or len(result.stdout) < len(uninterrupted.stdout)
    if stage == "generation":
        assert result.stdout.strip()
    saved = NgramCache.load(folder / "dynamic.ngc")                                # intact
    assert all(saved.get(key) is not None for key in seeded.table)
    if stage in ("generation", "save"):                                            # what it learned was added
        assert sum(map(sum, (p.values() for p in saved.table.values()))) > \
            sum(map(sum, (p.values() for p in seeded.table.values())))
    leftovers = {p.name for p in folder.iterdir()} - {"runner.py", "config.toml", "dynamic.ngc", "dynamic.ngc.lock",
                                                      "cache"}
    assert not leftovers
