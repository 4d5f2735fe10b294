"""An editor's session on the real Qwen2.5-Coder 1.5B with its 0.5B draft, as llama.vscode and llama.vim send it
to `specframe serve` (/infill), with prompt memory reused as llama-server's --cache-reuse reuses it."""

from __future__ import annotations

import dataclasses
import pathlib

import httpx
import numpy as np
import pytest
from test_server import serving

from specframe.config import load_config
from specframe.engine import Engine
from specframe.infill import ExtraChunk, infill_prompt
from specframe.models import preset_path
from specframe.prefix import common_prefix
from specframe.sequence import EditorLimits
from specframe.testing.editor_session import COMPLETION, editor_requests
from specframe.testing.lossless import compare

pytestmark = pytest.mark.real_model
REPO = pathlib.Path(__file__).resolve().parent.parent
N_PREDICT = 16
CACHE_REUSE = 64     # runs this long are moved: the suffix window (16 lines) as well as the prefix
# Batched and one-at-a-time passes of this Q4_K_M model differ by up to 0.75 in a logit on a CPU (testing/lossless.py):
# where the speculative completion leaves plain decoding, plain decoding's top two must be that close.
QUANTIZED_TIE = 0.75


@pytest.fixture(scope="module")
def config_path(tmp_path_factory) -> pathlib.Path:
    """The editor preset, its context and batch halved (the prefix is cut to 3/4 of a batch, so by tokens: the
    window slides token by token, as the editors' 256 lines make it slide in a 1024-token batch), one slot, runs of
    64 tokens moved."""
    text = preset_path("fim-qwen-1.5b-spec").read_text()
    path = tmp_path_factory.mktemp("editor") / "config.toml"
    path.write_text(text.replace("n_ctx = 8192", "n_ctx = 2048").replace("n_batch = 1024", "n_batch = 512")
                    .replace("n_ubatch = 1024", "n_ubatch = 512").replace("slots = 2", "slots = 1")
                    .replace("cache_reuse = 256", f"cache_reuse = {CACHE_REUSE}")
                    + "\n[speculative]\nadaptive = false\n")
    return path


@pytest.fixture(scope="module")
def session():
    """Ten requests: eight completions down a real Python file, two warm-ups as chunks of other files join llama.vim's
    ring on the way."""
    return editor_requests(REPO / "specframe" / "sequence.py", [REPO / "specframe" / "text.py",
                                                                 REPO / "specframe" / "prefix.py"],
                           start_line=61, requests=8, n_prefix=60, n_suffix=16, chunk_lines=12, ring_chunks=2,
                           chunk_every=(4, 5), n_predict=N_PREDICT, root=REPO)


@pytest.fixture(scope="module")
def server(config_path):
    with serving(config_path, max_seconds=600) as running:
        yield running


def prompt_tokens(engine: Engine, body: dict) -> np.ndarray:
    return infill_prompt(engine.vocab, body["input_prefix"], body["input_suffix"], body["prompt"],
                         [ExtraChunk(c["text"], c["filename"]) for c in body["input_extra"]],
                         n_batch=engine.context.n_batch, n_ctx=engine.context.n_ctx)


def whole(body: dict) -> dict:
    """A request of the session answered with every field, its tokens too (a warm-up asks for none)."""
    return {key: value for key, value in body.items() if key != "response_fields"} | {"return_tokens": True}


def test_an_editor_session_is_plain_decoding_and_evaluates_only_what_changed(config_path, session, server):
    config = load_config(config_path)
    replies = [httpx.post(server.url + "/infill", json=whole(r.body), timeout=600).json() for r in session]
    completions = [(r, reply) for r, reply in zip(session, replies) if r.kind == COMPLETION]
    assert len(session) == 10 and len(completions) == 8
    plain_config = dataclasses.replace(config, speculative=dataclasses.replace(config.speculative, enabled=False))
    with Engine(plain_config) as engine:
        held, previous = np.empty(0, dtype=np.int32), None
        for request, reply in zip(session, replies):
            tokens = prompt_tokens(engine, request.body)
            # Plain decoding of the same prompt in the same memory: the runs the server moved, moved alike.
            plain = engine.generate(tokens, reuse=True, reuse_chunks=CACHE_REUSE,
                                    max_tokens=request.body["n_predict"], temperature=0.0,
                                    limits=EditorLimits(request.body.get("n_indent", 0)), track_margins=True)
            assert reply["tokens_evaluated"] == tokens.size     # llama-server's layout, token for token
            if request.kind != COMPLETION:
                assert reply["content"] == "" and reply["tokens_predicted"] == 0
                held, previous = tokens, request.kind
                continue
            if reply["content"] != plain.text:
                drafted = dataclasses.replace(plain, tokens=reply["tokens"])
                verdict = compare(plain, drafted, tie=QUANTIZED_TIE)
                assert verdict.ok, f"line {request.line}: {verdict}: {reply['content']!r} != {plain.text!r}"
            timings = reply["timings"]
            assert timings["cache_n"] + timings["prompt_n"] == tokens.size
            assert timings["cache_n"] == plain.stats.n_cached_tokens
            shared = common_prefix(held, tokens[:-1])
            assert timings["cache_n"] >= shared
            if previous == COMPLETION:   # the file is in memory: more is kept than the common prefix, little is new
                assert timings["cache_n"] > shared and timings["prompt_n"] < 0.4 * tokens.size, (request.line, timings)
            held, previous = tokens, request.kind
        assert all(reply["stop_type"] in ("eos", "limit") for _, reply in completions)


LLAMA_VIM_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
                    "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
                    "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated", "tokens_cached"]


def test_llama_vim_gets_the_fields_it_asks_for_and_its_warm_up_fills_the_cache(config_path, session, server):
    warm_up = next(r for r in session if r.kind != COMPLETION)
    completion = next(r for r in session if r.kind == COMPLETION)
    assert completion.body["input_extra"] == warm_up.body["input_extra"]
    url = server.url + "/infill"
    assert httpx.post(url, json=warm_up.body | {"response_fields": [""]}, timeout=600).json() == {}
    reply = httpx.post(url, json=completion.body | {"response_fields": LLAMA_VIM_FIELDS}, timeout=600).json()
    assert sorted(reply) == sorted(LLAMA_VIM_FIELDS) and reply["truncated"] is False
    assert 0 < reply["timings/predicted_n"] <= N_PREDICT
    with Engine(load_config(config_path)) as engine:   # the prompts as the server laid them out
        ready, asked = prompt_tokens(engine, warm_up.body), prompt_tokens(engine, completion.body)
    extra = ready[:list(ready).index(engine.vocab.fim.pre)]
    assert extra.size > 100 and common_prefix(ready, asked) >= extra.size
    # The chunks of other files were in memory: only what follows the warm-up's prompt was evaluated.
    assert reply["timings/prompt_n"] == asked.size - common_prefix(ready, asked[:-1])
    assert reply["tokens_cached"] == asked.size + reply["timings/predicted_n"]
