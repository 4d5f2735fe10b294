"""The peers benchmark's reading of llama.cpp's logs (benchmarks/peers/run.py)."""

import importlib.util
import pathlib
import sys

import pytest

RUN = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "peers" / "run.py"


@pytest.fixture(scope="module")
def peers():
    spec = importlib.util.spec_from_file_location("peers_run", RUN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # its dataclasses look their module up while it loads
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


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
