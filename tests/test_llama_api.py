"""llama-server's own API on the synthetic float32 model: its cache-reuse algorithm against a transcription of
llama-server's loop, the sampler chains editors send, and the native endpoints (/completion, /infill, /tokenize,
/detokenize, /apply-template, /props, /slots) of one in-process server with two slots and cache_reuse 32."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_server import server_config, serving

from specframe.drafters.draft_model import MOVED_RUN_MIN
from specframe.engine import Engine
from specframe.errors import ParamError
from specframe.infill import ExtraChunk, infill_prompt
from specframe.llama.model import FimTokens
from specframe.prefix import common_prefix, reusable_chunks
from specframe.serve.llama_api import CompletionBody, sampler_chain
from specframe.serve.protocol import FieldError
from specframe.text import TextStream

# --- reusable_chunks: llama-server's --cache-reuse --------------------------------------------------------------


Moves = list[tuple[int, int, int]]   # (start in the memory, length, position in the prompt)


def llama_server_reuse(held: list[int], prompt: list[int], n_cache_reuse: int) -> tuple[int, Moves]:
    """tools/server/server-context.cpp's loop ("trying to reuse chunks"), transcribed statement by statement:
    n_past from the common prefix, then head_c / head_p walked, the cache's tokens rewritten as it moves them."""
    cache = list(held)
    n_past = 0
    while n_past < min(len(cache), len(prompt)) and cache[n_past] == prompt[n_past]:
        n_past += 1
    moves: Moves = []
    if n_cache_reuse > 0:
        head_c = head_p = n_past
        while head_c < len(cache) and head_p < len(prompt):
            n_match = 0
            while (head_c + n_match < len(cache) and head_p + n_match < len(prompt)
                   and cache[head_c + n_match] == prompt[head_p + n_match]):
                n_match += 1
            if n_match >= n_cache_reuse:
                moves.append((head_c, n_match, head_p))
                for i in range(n_match):
                    cache[head_p + i] = cache[head_c + i]
                    n_past += 1
                head_c += n_match
                head_p += n_match
            else:
                head_c += 1
    return n_past, moves


def memory_after(held: np.ndarray, moves: Moves, kept: int) -> list[int]:
    """The tokens a memory holding ``held`` at positions 0... holds after Context.move's two calls for each move
    (seq_rm [to, start), then seq_add [start, start + n) by to - start) and the truncation to ``kept``."""
    cells = {position: int(token) for position, token in enumerate(held)}
    for start, n, to in moves:
        assert 0 <= to < start, "positions move down only"
        cells = {p: t for p, t in cells.items() if not to <= p < start}
        cells = {(p + to - start if start <= p < start + n else p): t for p, t in cells.items()}
    kept_cells = {p: t for p, t in cells.items() if p < kept}
    assert sorted(kept_cells) == list(range(kept)), "a position below what is kept is missing"
    return [kept_cells[p] for p in range(kept)]


tokens = st.lists(st.integers(0, 2), max_size=40)   # three tokens: runs repeat


@st.composite
def edited(draw) -> tuple[list[int], list[int]]:
    """A held sequence and a prompt made of slices of it (a window that moved, lines cut) and new tokens."""
    held = draw(st.lists(st.integers(0, 5), min_size=1, max_size=60))
    prompt: list[int] = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            start = draw(st.integers(0, len(held) - 1))
            prompt += held[start:draw(st.integers(start, len(held)))]
        else:
            prompt += draw(st.lists(st.integers(0, 5), max_size=4))
    return held, prompt


def arrays(*lists: list[int]) -> list[np.ndarray]:
    return [np.asarray(values, dtype=np.int32) for values in lists]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.tuples(tokens, tokens), edited()), st.integers(0, 6))
def test_reusable_chunks_is_llama_servers_cache_reuse_loop(pair, min_chunk):
    held, prompt = pair
    kept, moves = reusable_chunks(*arrays(held, prompt), min_chunk)
    assert (kept, moves) == llama_server_reuse(held, prompt, min_chunk)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.tuples(tokens, tokens), edited()), st.integers(1, 6))
def test_moving_the_reusable_chunks_rebuilds_a_prefix_of_the_prompt(pair, min_chunk):
    held, prompt = arrays(*pair)
    kept, moves = reusable_chunks(held, prompt, min_chunk)
    assert common_prefix(held, prompt) <= kept <= len(prompt)
    assert memory_after(held, moves, kept) == prompt[:kept].tolist()
    destination = common_prefix(held, prompt)
    source = destination
    for start, n, to in moves:     # in order, each a run of at least min_chunk, laid end to end after the prefix
        assert n >= min_chunk and to == destination and start >= source
        destination, source = to + n, start + n
    assert destination == kept


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.tuples(tokens, tokens), edited()), st.integers(-2, 0))
def test_reusable_chunks_without_a_chunk_size_keeps_the_common_prefix_alone(pair, min_chunk):
    held, prompt = arrays(*pair)
    assert reusable_chunks(held, prompt, min_chunk) == (common_prefix(held, prompt), [])


def test_a_run_of_min_chunk_tokens_is_moved_and_one_token_shorter_is_not():
    held, prompt = arrays([7, 1, 2, 3, 4, 9], [1, 2, 3, 4, 8])
    assert reusable_chunks(held, prompt, 4) == (4, [(1, 4, 0)])
    assert reusable_chunks(held, prompt, 5) == (0, [])


def test_runs_are_sought_only_right_after_what_is_kept_as_llama_server_does():
    """A prompt token the memory does not hold ends the search: runs after it stay unused."""
    held, prompt = arrays([7, 1, 2, 3, 4, 9], [5, 1, 2, 3, 4, 8])
    assert reusable_chunks(held, prompt, 2) == (0, [])


# --- sampler chains --------------------------------------------------------------------------------------------

def test_a_chain_of_top_k_top_p_and_infill_turns_the_rest_off():
    overrides = sampler_chain(["top_k", "top_p", "infill"])
    assert overrides == {"infill": True, "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                         "min_p": 0.0, "temperature": 1.0}


def test_sampler_letters_name_the_same_chain():
    assert sampler_chain("kpt") == sampler_chain(["top_k", "top_p", "temperature"])
    assert sampler_chain("kpt") == {"infill": False, "repeat_penalty": 1.0, "presence_penalty": 0.0,
                                    "frequency_penalty": 0.0, "min_p": 0.0}
    assert sampler_chain("dkypmxt") == sampler_chain(["top_k", "top_p", "min_p", "temperature"])   # no-ops pass


@pytest.mark.parametrize("samplers", [["mirostat_v3"], ["adaptive_p"], "ka", ["temperature", "top_k"],
                                      ["top_k", "top_k"], "z"])
def test_a_chain_specframe_cannot_apply_is_refused_naming_samplers(samplers):
    with pytest.raises(FieldError) as refused:
        sampler_chain(samplers)
    assert refused.value.field == "samplers"


def test_a_setting_the_body_gives_stands_whatever_the_chain_leaves_out():
    warm_up = CompletionBody.model_validate({"prompt": "x", "samplers": [], "temperature": 0.0}).options()
    assert warm_up["temperature"] == 0.0 and warm_up["infill"] is False and warm_up["top_k"] == 0
    chained = CompletionBody.model_validate({"prompt": "x", "samplers": ["top_k"], "top_k": 7}).options()
    assert chained["top_k"] == 7 and chained["temperature"] == 1.0
    plain = CompletionBody.model_validate({"prompt": "x", "temperature": 0.5}).options()
    assert plain["temperature"] == 0.5 and plain["infill"] is None and plain["top_k"] is None   # the config's


# --- infill prompts: llama-server's layout ---------------------------------------------------------------------

class FimVocab:
    """The synthetic vocabulary with FIM tokens given to it (ids of ordinary tokens stand for them)."""

    def __init__(self, vocab, fim: FimTokens):
        self.vocab, self.fim, self.bos, self.add_bos = vocab, fim, vocab.bos, vocab.add_bos

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> np.ndarray:
        return self.vocab.tokenize(text, add_special=add_special, parse_special=parse_special)


def llama_server_infill(vocab: FimVocab, prefix: str, suffix: str, extra: list[ExtraChunk], prompt: str,
                        n_batch: int, n_predict: int, n_ctx: int) -> list[int]:
    """tools/server/server-common.cpp's format_prompt_infill (spm_infill off), transcribed."""
    def tokenize(text: str, special: bool = False) -> list[int]:
        return vocab.tokenize(text, add_special=False, parse_special=special).tolist()

    fim = vocab.fim
    extra_tokens: list[int] = []
    if fim.rep is not None:
        extra_tokens += [fim.rep] + tokenize("myproject\n")
    for chunk in extra:
        if fim.sep is not None:
            extra_tokens += [fim.sep] + tokenize(chunk.filename + "\n")
        else:
            extra_tokens += tokenize("\n\n--- snippet ---\n\n")
        extra_tokens += tokenize(chunk.text)
    if fim.sep is not None:
        extra_tokens += [fim.sep] + tokenize("filename\n")
    tokens_prefix, tokens_suffix, tokens_prompt = tokenize(prefix), tokenize(suffix), tokenize(prompt, True)
    n_prefix_take = min(len(tokens_prefix), 3 * (n_batch // 4))
    n_suffix_take = min(len(tokens_suffix), max(0, n_batch // 4 - (2 + len(tokens_prompt))))
    n_extra_take = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra_tokens))
    tokens_prefix = tokens_prefix[len(tokens_prefix) - n_prefix_take:]
    tokens_suffix = tokens_suffix[:n_suffix_take]
    embd_inp = [fim.pre] + tokens_prefix + tokens_prompt
    embd_end = [fim.suf] + tokens_suffix
    if vocab.add_bos:
        embd_inp = [vocab.bos] + embd_inp
    embd_inp = extra_tokens[len(extra_tokens) - n_extra_take:] + embd_inp
    return embd_inp + embd_end + [fim.mid]


@pytest.mark.parametrize("fim", [FimTokens(300, 301, 302, None, 303, 304), FimTokens(300, 301, 302, None, None, None)],
                         ids=["repository tokens", "plain separators"])
@pytest.mark.parametrize("n_batch, n_predict, n_ctx", [(512, 16, 4096), (32, 16, 4096), (32, 16, 100), (16, 0, 40)])
def test_infill_prompts_are_llama_servers_to_the_token(target_model, fim, n_batch, n_predict, n_ctx):
    vocab = FimVocab(target_model.vocab, fim)
    prefix = "def total(values):\n    result = 0\n    for value in values:\n        result += "
    suffix = "\n    return result\n\nprint(total([1, 2, 3]))\n"
    extra = [ExtraChunk("import math\nimport sys\n", "util.py"), ExtraChunk("x = total(range(10))\n")]
    args = (prefix, suffix, "value", extra)
    laid_out = infill_prompt(vocab, *args, n_batch=n_batch, n_predict=n_predict, n_ctx=n_ctx)
    assert laid_out.tolist() == llama_server_infill(vocab, prefix, suffix, extra, "value", n_batch, n_predict, n_ctx)
    assert laid_out[-1] == fim.mid and fim.pre in laid_out and fim.suf in laid_out


def test_infill_on_a_vocabulary_without_fim_tokens_names_input_prefix(target_model):
    assert target_model.vocab.fim.missing == ["pre", "suf", "mid"]
    with pytest.raises(ParamError) as refused:
        infill_prompt(target_model.vocab, "a", "b", n_batch=512, n_predict=16, n_ctx=1024)
    assert refused.value.key == "input_prefix" and "pre, suf, mid" in refused.value.problem


# --- the server -------------------------------------------------------------------------------------------------

CONTINUE_STOPS = ["\n\n", "/src/", "#- coding: utf-8", "```"]


@pytest.fixture(scope="module")
def config_path(tmp_path_factory, target_path, draft_path):
    return server_config(tmp_path_factory.mktemp("llama-api") / "config.toml", target_path, draft_path, 1024, 24)


@pytest.fixture(scope="module")
def plain(config_path):
    """An engine of the same config, outside the server: the reference for greedy output and tokens."""
    with Engine.from_config(config_path) as engine:
        yield engine


@pytest.fixture(scope="module")
def server(config_path):
    with serving(config_path, slots=2, cache_reuse=32) as running:
        yield running


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def refused(response: httpx.Response, param: str) -> str:
    """The message of a 400 that names ``param``."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    return error["message"]


def greedy(engine: Engine, prompt, max_tokens: int, stop: list[str] | None = None):
    return engine.generate(prompt, raw=True, speculative=False, temperature=0.0, max_tokens=max_tokens,
                           stop=stop or [])


def test_tokenize_gives_the_vocabularys_ids_with_pieces_and_special_tokens_on_request(server, plain):
    text = "hello world"
    ids = plain.vocab.tokenize(text, add_special=False, parse_special=True).tolist()
    assert post(server, "/tokenize", {"content": text}).json() == {"tokens": ids}
    with_bos = post(server, "/tokenize", {"content": text, "add_special": True}).json()["tokens"]
    assert with_bos == plain.vocab.tokenize(text, add_special=True, parse_special=True).tolist()
    assert with_bos[0] == plain.vocab.bos and with_bos[1:] == ids
    pieces = post(server, "/tokenize", {"content": text, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == ids
    assert "".join(p["piece"] for p in pieces) == "".join(plain.vocab.piece(t).decode() for t in ids)
    split = post(server, "/tokenize", {"content": "é", "with_pieces": True}).json()["tokens"]   # byte fallback
    assert [p["piece"] for p in split][-2:] == [[0xC3], [0xA9]]


def test_detokenize_inverts_tokenize_and_refuses_an_id_outside_the_vocabulary(server, plain):
    text = "the quick brown fox"
    ids = post(server, "/tokenize", {"content": text}).json()["tokens"]
    content = post(server, "/detokenize", {"tokens": ids}).json()["content"]
    assert content == plain.vocab.detokenize(ids) and content.strip() == text
    refused(post(server, "/detokenize", {"tokens": [1, plain.vocab.n_tokens]}), "tokens")
    refused(post(server, "/detokenize", {"tokens": [-1]}), "tokens")


def test_apply_template_renders_the_chat_prompt(server, plain):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    prompt = post(server, "/apply-template", {"messages": messages}).json()["prompt"]
    assert prompt == plain.chat_prompt(messages) and prompt.endswith("<|im_start|>assistant\n")


def test_props_describe_the_context_slots_reuse_and_drafters(server, plain):
    props = httpx.get(server.url + "/props", timeout=30).json()
    assert props["default_generation_settings"]["n_ctx"] == plain.context.n_ctx == 1024   # per slot
    assert props["default_generation_settings"]["params"]["n_predict"] == 24
    assert props["total_slots"] == 2 and props["cache_reuse"] == 32 and props["infill"] is False
    assert [d["type"] for d in props["drafters"]] == ["prompt-lookup", "ngram-mod", "draft-model"]
    assert props["chat_template"] == plain.model.chat_template


def test_slots_lists_each_slot(server):
    slots = httpx.get(server.url + "/slots", timeout=30).json()
    assert [s["id"] for s in slots] == [0, 1] and all(s["n_ctx"] == 1024 for s in slots)
    assert not any(s["is_processing"] for s in slots)


def continue_body(prompt: str, n_predict: int) -> dict:
    """Continue's autocomplete body for llama.cpp (core/llm/llms/LlamaCpp.ts)."""
    return {"prompt": prompt, "stream": True, "n_predict": n_predict, "frequency_penalty": 0, "presence_penalty": 0,
            "min_p": 0.05, "stop": CONTINUE_STOPS, "top_k": 40, "top_p": 0.95, "temperature": 0}


def stream_chunks(server, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", server.url + path, json=body, timeout=60) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and "[DONE]" not in lines[-1]
    return [json.loads(line[len("data: "):]) for line in lines]


def test_continues_streamed_completion_is_plain_greedy_decoding_of_the_raw_prompt(server, plain):
    prompt = "def fib(n):\n    if n < 2:\n        return n\n    return"
    chunks = stream_chunks(server, "/completion", continue_body(prompt, 20))
    *texts, last = chunks
    assert texts and all(not c["stop"] and "content" in c for c in texts)
    assert last["stop"] is True and last["content"] == ""
    expected = greedy(plain, prompt, 20, CONTINUE_STOPS)
    assert "".join(c["content"] for c in texts) == expected.text
    assert last["tokens_predicted"] == len(expected.tokens) == last["timings"]["predicted_n"]
    assert last["tokens_evaluated"] == len(plain.prompt_tokens(prompt, raw=True))
    assert last["id_slot"] in (0, 1) and {c["id_slot"] for c in texts} == {last["id_slot"]}
    assert expected.stop_reason == "max_tokens" and last["stop_type"] == "limit" and last["stopping_word"] == ""


def test_a_stop_string_ends_the_completion_and_is_named(server, plain):
    prompt = "def fib(n):\n    if n < 2:\n        return n\n    return"
    stop = [" ,n^", " @"]                  # both in its greedy continuation, " @" first
    expected = greedy(plain, prompt, 20, stop)
    assert expected.stop_reason == "stop" and expected.text
    body = {"prompt": prompt, "n_predict": 20, "temperature": 0, "stop": stop}
    whole = post(server, "/completion", body).json()
    assert whole["content"] == expected.text and whole["stop_type"] == "word" and whole["stopping_word"] == " @"
    last = stream_chunks(server, "/completion", body | {"stream": True})[-1]
    assert last["stop_type"] == "word" and last["stopping_word"] == " @"


def test_a_whole_completion_returns_its_tokens_and_cuts_to_the_response_fields(server, plain):
    prompt = "alpha beta gamma delta"
    expected = greedy(plain, prompt, 12)
    whole = post(server, "/completion", {"prompt": prompt, "n_predict": 12, "temperature": 0,
                                         "return_tokens": True}).json()
    assert whole["content"] == expected.text and whole["tokens"] == expected.tokens and whole["stop"] is True
    assert whole["tokens_predicted"] == 12 and whole["stop_type"] == "limit"
    cut = post(server, "/completion", {"prompt": prompt, "n_predict": 12, "temperature": 0, "response_fields": [
        "content", "timings/predicted_n", "tokens_cached", "missing/field"]}).json()
    assert cut == {"content": expected.text, "timings/predicted_n": 12,
                   "tokens_cached": len(plain.prompt_tokens(prompt, raw=True)) + 12}


def test_a_whole_completion_names_the_slot_it_ran_in(server):
    whole = post(server, "/completion", {"prompt": "one two three", "n_predict": 2, "temperature": 0}).json()
    assert whole["id_slot"] in (0, 1)


def test_n_predict_0_evaluates_the_prompt_and_predicts_nothing(server, plain):
    prompt = "warm the slot with this prompt"
    whole = post(server, "/completion", {"prompt": prompt, "n_predict": 0, "id_slot": 1}).json()
    assert whole["content"] == "" and whole["tokens_predicted"] == 0 and whole["id_slot"] == 1
    n_prompt = len(plain.prompt_tokens(prompt, raw=True))
    again = post(server, "/completion", {"prompt": prompt, "n_predict": 4, "temperature": 0, "id_slot": 1}).json()
    assert again["timings"]["cache_n"] == n_prompt - 1 and again["timings"]["prompt_n"] == 1
    assert again["content"] == greedy(plain, prompt, 4).text
    assert httpx.get(server.url + "/slots", timeout=30).json()[1]["n_cached"] == n_prompt + 3


def test_id_slot_runs_the_request_in_that_slot_and_an_absent_slot_is_refused(server):
    for slot in (0, 1):
        body = {"prompt": "pick a slot", "n_predict": 3, "temperature": 0, "id_slot": slot}
        assert post(server, "/completion", body).json()["id_slot"] == slot
        assert stream_chunks(server, "/completion", body | {"stream": True})[-1]["id_slot"] == slot
    assert "id_slot" in refused(post(server, "/completion", {"prompt": "x", "id_slot": 2}), "id_slot")


def test_a_prompt_of_token_ids_is_used_as_it_is(server, plain):
    ids = plain.vocab.tokenize("hello world, hello", add_special=False, parse_special=True).tolist()
    whole = post(server, "/completion", {"prompt": ids, "n_predict": 8, "temperature": 0}).json()
    assert whole["content"] == greedy(plain, ids, 8).text and whole["tokens_evaluated"] == len(ids)
    refused(post(server, "/completion", {"prompt": [plain.vocab.n_tokens], "n_predict": 1}), "prompt")


LLAMA_VIM_WARM_UP = {"input_prefix": "", "input_suffix": "", "input_extra": [
    {"text": "x", "filename": "a.py", "time": [1, 2]}], "prompt": "", "n_predict": 0, "temperature": 0.0,
    "stream": False, "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 1, "t_max_predict_ms": 1,
    "response_fields": [""]}


@pytest.mark.parametrize("body", [
    {"input_prefix": "def f(x):\n    return ", "input_suffix": "\n", "n_predict": 8, "temperature": 0},
    LLAMA_VIM_WARM_UP], ids=["infill", "llama.vim's warm-up"])
def test_infill_on_a_model_without_fim_tokens_is_a_clear_400(server, body):
    message = refused(post(server, "/infill", body), "input_prefix")
    assert "cannot fill in the middle" in message and "FIM" in message


@pytest.mark.parametrize("samplers", [["mirostat_v3"], ["adaptive_p"], ["temperature", "top_k"]])
def test_a_sampler_chain_specframe_cannot_apply_is_a_400_naming_samplers(server, samplers):
    refused(post(server, "/completion", {"prompt": "x", "samplers": samplers}), "samplers")


def test_an_unknown_field_is_a_400_naming_it(server):
    assert refused(post(server, "/completion", {"prompt": "x", "n_keep_everything": 1}), "n_keep_everything")


def test_a_prompt_that_moved_is_reused_from_the_slots_memory(server, plain):
    """An editor's next prompt: the window dropped lines and gained new ones; the slot keeps the run it still holds
    (cache_reuse 32; the draft model moves its own, of at least 64), and speculation keeps the output of plain
    greedy decoding after the same reuse (a moved run is not a fresh evaluation on two layers: test_engine.py)."""
    rng = np.random.default_rng(11)
    n_vocab = plain.vocab.n_tokens
    first = rng.integers(3, n_vocab, 260).astype(np.int32)
    second = np.concatenate([first[:10], first[100:], rng.integers(3, n_vocab, 40)]).astype(np.int32)
    assert 260 - 100 >= MOVED_RUN_MIN
    body = {"n_predict": 6, "temperature": 0, "return_tokens": True}
    post(server, "/completion", body | {"prompt": first.tolist(), "cache_prompt": False, "id_slot": 0})
    again = post(server, "/completion", body | {"prompt": second.tolist()}).json()
    timings = again["timings"]
    assert again["id_slot"] == 0                   # the slot that holds the run
    assert timings["cache_n"] == 10 + 160 > common_prefix(first, second)
    assert timings["prompt_n"] == len(second) - timings["cache_n"] and again["tokens_evaluated"] == len(second)
    greedy(plain, first, 6)
    expected = plain.generate(second, reuse=True, reuse_chunks=32, speculative=False, temperature=0.0, max_tokens=6)
    assert expected.stats.n_cached_tokens == timings["cache_n"] and again["tokens"] == expected.tokens


def test_cache_prompt_false_evaluates_the_whole_prompt(server):
    body = {"prompt": "the same prompt twice", "n_predict": 2, "temperature": 0, "id_slot": 1}
    post(server, "/completion", body)
    assert post(server, "/completion", body | {"cache_prompt": False}).json()["timings"]["cache_n"] == 0
    assert post(server, "/completion", body).json()["timings"]["cache_n"] > 0


def test_n_indent_cuts_the_completion_at_the_first_shallower_line(server, plain):
    newline = next(t for t in range(plain.vocab.n_tokens) if plain.vocab.piece(t) == b"\n")
    body = {"prompt": "def f():", "n_predict": 8, "temperature": 0, "logit_bias": {str(newline): 100.0}}
    assert post(server, "/completions", body).json()["content"] == "\n" * 8      # llama-server's other route
    cut = post(server, "/completion", body | {"n_indent": 4}).json()
    assert cut["content"] == "\n" and cut["stop_type"] == "limit" and cut["tokens_predicted"] == 2


def test_streamed_chunks_carry_the_tokens_behind_their_text_and_count_every_token(server, plain):
    """The first token's text is an incomplete UTF-8 character, held back: its token goes with the next chunk."""
    prompt = "hello world, hello"
    expected = greedy(plain, prompt, 10)
    assert TextStream().push(plain.vocab.piece(expected.tokens[0])) == ""      # part of a character
    chunks = stream_chunks(server, "/completion", {"prompt": prompt, "n_predict": 10, "temperature": 0,
                                                   "stream": True, "return_tokens": True})
    *texts, last = chunks
    assert [token for chunk in texts for token in chunk["tokens"]] == expected.tokens
    sent = np.cumsum([len(chunk["tokens"]) for chunk in texts]).tolist()
    assert [chunk["tokens_predicted"] for chunk in texts] == sent
    assert last["tokens"] == [] and last["tokens_predicted"] == 10     # as llama-server: all sent before


def test_t_max_predict_ms_ends_the_completion_at_a_new_line_once_the_time_is_up(server, plain):
    newline = next(t for t in range(plain.vocab.n_tokens) if plain.vocab.piece(t) == b"\n")
    body = {"prompt": "def f():", "n_predict": 400, "temperature": 0, "logit_bias": {str(newline): 100.0},
            "t_max_predict_ms": 1}      # 400 tokens take well over a millisecond, even in drafts of 16
    timed = post(server, "/completion", body).json()
    assert timed["stop_type"] == "limit" and 0 < timed["tokens_predicted"] < 400
    assert timed["content"] == "\n" * timed["tokens_predicted"]
