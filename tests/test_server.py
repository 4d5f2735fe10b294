"""specframe serve end to end, through the openai client, on the synthetic float32 model.

Every server here runs in this process (uvicorn in a thread, the engine in its own), listens on 127.0.0.1 on a
free port, and stops by itself after MAX_REQUESTS requests (uvicorn's limit_max_requests) or MAX_SECONDS,
whichever comes first, as well as at the end of its test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
from chains import COPYING_DRAFTERS
from prometheus_client.parser import text_string_to_metric_families

from specframe.config import load_config
from specframe.engine import Engine
from specframe.ngram_counts import NgramCache
from specframe.serve.server import Server, model_name

MAX_SECONDS = 120
MAX_REQUESTS = 60
PROMPTS = ["the quick brown fox jumps over the lazy dog and the quick brown fox",
           "one two three four one two three four one two",
           "alpha beta gamma delta alpha beta gamma",
           "hello world, hello world, hello"]


@dataclasses.dataclass
class Running:
    server: Server
    url: str

    def client(self, api_key: str = "none") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=60)

    @property
    def model(self) -> str:
        return self.server.app.state.model_name

    def metrics(self) -> dict[tuple[str, tuple], float]:
        """Every sample, by name and sorted labels (the model's label left out)."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "model_name"))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}


@contextlib.contextmanager
def serving(config_path, healthy: bool = True, max_seconds: float = MAX_SECONDS, **settings):
    """A server of the config with ``settings`` for its [server] table, once it listens (and, when ``healthy``,
    once its model is loaded); it stops by itself after ``max_seconds``."""
    config = load_config(config_path)
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, host="127.0.0.1", port=0,
                                                                    **settings))
    server = Server(config, limit_max_requests=MAX_REQUESTS)
    thread = threading.Thread(target=server.serve_forever, name="test-server", daemon=True)
    watchdog = threading.Timer(max_seconds, server.stop)
    thread.start()
    watchdog.start()
    try:
        deadline = time.monotonic() + max_seconds / 2
        while server.address is None or not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        url = "http://%s:%d" % server.address
        while healthy and httpx.get(url + "/health").status_code != 200:
            assert time.monotonic() < deadline, "the server did not load its model"
            time.sleep(0.5)     # each look counts toward MAX_REQUESTS: a real model loads for seconds
        yield Running(server, url)
    finally:
        server.stop()
        thread.join(max_seconds)
        watchdog.cancel()


def server_config(path, target_path, draft_path, n_ctx: int, max_tokens: int, server: str = ""):
    """A config of the synthetic target with the copying drafters and the synthetic draft model, fixed draft
    lengths; ``server``: the [server] table's lines."""
    path.write_text(f"""
[target]
model = "{target_path}"
n_ctx = {n_ctx}
threads = 1
[generation]
max_tokens = {max_tokens}
[speculative]
adaptive = false
[server]
{server}
{COPYING_DRAFTERS}
[[drafter]]
type = "draft-model"
model = "{draft_path}"
p_min = 0.2
""")
    return path


@pytest.fixture(scope="module")
def config_path(tmp_path_factory, target_path, draft_path):
    return server_config(tmp_path_factory.mktemp("serve") / "config.toml", target_path, draft_path, 512, 48,
                         "slots = 4")


@pytest.fixture(scope="module")
def plain(config_path):
    """Plain greedy decoding of a user message, as the server's chat template wraps it (a separate engine)."""
    with Engine.from_config(config_path) as engine:
        def answer(message: str, max_tokens: int = 48) -> str:
            return engine.generate(message, speculative=False, max_tokens=max_tokens, temperature=0.0).text

        yield answer


@pytest.fixture(scope="module")
def server(config_path):
    with serving(config_path) as running:
        yield running


def chat(client: openai.OpenAI, model: str, message: str, **options):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": message}],
                                          temperature=0, **options)


def test_models_lists_the_target(server):
    models = server.client().models.list().data
    assert [m.id for m in models] == ["target"] and models[0].owned_by == "specframe"


def test_a_chat_answer_is_the_targets_greedy_answer_with_statistics(server, plain):
    completion = chat(server.client(), "target", PROMPTS[0], max_tokens=40)
    choice = completion.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == plain(PROMPTS[0], 40)
    assert choice.finish_reason == "length"
    usage = completion.usage
    assert usage.completion_tokens == 40 and usage.total_tokens == usage.prompt_tokens + 40
    timings = completion.model_extra["timings"]
    assert timings["predicted_n"] == 40 and timings["prompt_n"] + timings["cache_n"] == usage.prompt_tokens
    assert 0 < timings["draft_n_accepted"] <= timings["draft_n"]
    drafters = completion.model_extra["drafters"]
    assert set(drafters) == {"prompt-lookup", "ngram-mod", "draft-model"}
    assert sum(d["accepted_tokens"] for d in drafters.values()) == timings["draft_n_accepted"]


def test_a_streamed_chat_opens_with_the_role_and_ends_with_the_reason_usage_and_done(server, plain):
    stream = chat(server.client(), "target", PROMPTS[1], max_tokens=30, stream=True,
                  stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain(PROMPTS[1], 30)
    finish, usage = chunks[-2], chunks[-1]
    assert finish.choices[0].finish_reason == "length" and finish.model_extra["timings"]["predicted_n"] == 30
    assert all(c.choices[0].finish_reason is None for c in chunks[:-2])
    assert usage.choices == [] and usage.usage.completion_tokens == 30
    # without include_usage there is no usage chunk, and the stream ends with a raw [DONE]
    with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": PROMPTS[1]}], "max_tokens": 5, "stream": True}) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and '"usage"' not in "".join(lines)
    assert response.headers["content-type"].startswith("text/event-stream")


def test_a_stop_string_cuts_the_answer_before_it(server, plain):
    reference = plain(PROMPTS[0], 48)
    stop = reference[20:24]
    completion = chat(server.client(), "target", PROMPTS[0], stop=[stop])
    assert completion.choices[0].message.content == reference[:reference.index(stop)]
    assert completion.choices[0].finish_reason == "stop"


def test_completions_continue_a_raw_prompt(server, config_path):
    with Engine.from_config(config_path) as engine:
        reference = engine.generate(PROMPTS[2], raw=True, speculative=False, max_tokens=20).text
    completion = server.client().completions.create(model="target", prompt=PROMPTS[2], max_tokens=20,
                                                    temperature=0)
    assert completion.choices[0].text == reference and completion.object == "text_completion"


@pytest.mark.parametrize("options, field", [
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"n": 2}, "n"),
    ({"top_p": 1.5}, "top_p"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"extra_body": {"min_p": -0.1}}, "min_p"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
    ({"extra_body": {"best_of": 2}}, "best_of"),
    ({"extra_body": {"stream": "yes"}}, "stream"),
    ({"extra_body": {"max_tokens": 1e20}}, "max_tokens"),
    ({"extra_body": {"max_tokens": 10**20}}, "max_tokens"),
    ({"extra_body": {"temperature": "0.5"}}, "temperature"),
    ({"messages": [{"role": "user", "content": "hi", "audio": {"id": "x"}}]}, "messages.0.audio"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"extra_body": {"grammar": "root ::= ("}}, "grammar"),
    ({"extra_body": {"grammar": 'root ::= "a"', "json_schema": {}}}, "grammar and json_schema"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),   # the template writes no calls
])
def test_a_bad_request_is_a_400_naming_the_field(server, options, field):
    arguments = {"model": "target", "messages": [{"role": "user", "content": "hi"}]} | options
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(**arguments)
    error = caught.value
    assert error.status_code == 400 and error.param == field and error.body["message"].startswith(field)
    assert error.type == "invalid_request_error"


def test_a_json_schema_response_format_and_a_grammar_hold_the_answer(server):
    schema = {"type": "object", "properties": {"word": {"type": "string", "maxLength": 8},
                                               "count": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["word", "count"], "additionalProperties": False}
    for stream in (False, True):
        completion = chat(server.client(), "target", PROMPTS[0], stream=stream, max_tokens=48, response_format={
            "type": "json_schema", "json_schema": {"name": "tally", "schema": schema, "strict": True}})
        text = ("".join(c.choices[0].delta.content or "" for c in completion if c.choices) if stream
                else completion.choices[0].message.content)
        record = json.loads(text)
        assert set(record) == {"word", "count"} and 0 <= record["count"] <= 9
    completion = chat(server.client(), "target", PROMPTS[1], max_tokens=8,
                      extra_body={"grammar": 'root ::= ("yes" | "no") "!"'})
    assert completion.choices[0].message.content in ("yes!", "no!")
    assert completion.choices[0].finish_reason == "stop"


def test_logprobs_cover_every_token_with_its_alternatives(server):
    completion = chat(server.client(), "target", PROMPTS[2], max_tokens=12, logprobs=True, top_logprobs=2)
    entries = completion.choices[0].logprobs.content
    assert len(entries) == completion.usage.completion_tokens == 12
    text = bytes(b for e in entries for b in e.bytes).decode("utf-8", "replace")   # a token may split a character
    assert text == completion.choices[0].message.content
    for entry in entries:
        assert len(entry.top_logprobs) == 2 and entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
        assert entry.logprob <= 0 and entry.top_logprobs[0].token == entry.token   # greedy: the likeliest
    streamed = chat(server.client(), "target", PROMPTS[2], max_tokens=12, logprobs=True, stream=True)
    tokens = [e.token for c in streamed if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert tokens == [e.token for e in entries]
    legacy = server.client().completions.create(model="target", prompt=PROMPTS[2], max_tokens=6, logprobs=3,
                                                temperature=0)
    logprobs = legacy.choices[0].logprobs
    assert len(logprobs.tokens) == 6 and all(1 <= len(top) <= 3 for top in logprobs.top_logprobs)   # keyed by text
    assert logprobs.text_offset[0] == 0 and logprobs.text_offset == sorted(logprobs.text_offset)


def test_other_errors_have_openai_s_shape(server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(model="target", prompt="word " * 600, max_tokens=4)
    assert caught.value.code == "context_length_exceeded" and "512 tokens per slot" in caught.value.body["message"]
    for response, status in [(httpx.post(server.url + "/v1/chat/completions", content=b"{", timeout=10), 400),
                             (httpx.get(server.url + "/v1/nothing", timeout=10), 404)]:
        assert response.status_code == status and set(response.json()["error"]) >= {"message", "type", "code"}


def test_two_concurrent_streams_each_get_their_own_answer(server, plain):
    texts: dict[int, str] = {}

    def stream(i: int) -> None:
        chunks = chat(server.client(), "target", PROMPTS[i], max_tokens=40, stream=True)
        texts[i] = "".join(c.choices[0].delta.content or "" for c in chunks)

    threads = [threading.Thread(target=stream, args=(i,)) for i in (0, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert texts == {0: plain(PROMPTS[0], 40), 3: plain(PROMPTS[3], 40)}


def test_greedy_answers_are_the_same_alone_or_beside_three_others(server, plain):
    client = server.client()
    alone = [chat(client, "target", p, max_tokens=48).choices[0].message.content for p in PROMPTS]
    together: dict[int, str] = {}
    barrier = threading.Barrier(len(PROMPTS))

    def ask(i: int) -> None:
        barrier.wait()
        together[i] = chat(client, "target", PROMPTS[i], max_tokens=48).choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [together[i] for i in range(len(PROMPTS))] == alone == [plain(p, 48) for p in PROMPTS]


def test_a_chat_s_next_turn_evaluates_only_its_new_tokens(server):
    client = server.client()
    first = [{"role": "user", "content": "tell me about the quick brown fox"}]
    answer = client.chat.completions.create(model="target", messages=first, max_tokens=24, temperature=0)
    turns = first + [{"role": "assistant", "content": answer.choices[0].message.content},
                     {"role": "user", "content": "and the lazy dog?"}]
    second = client.chat.completions.create(model="target", messages=turns, max_tokens=8, temperature=0)
    timings = second.model_extra["timings"]
    assert timings["cache_n"] >= answer.usage.prompt_tokens
    assert timings["prompt_n"] == second.usage.prompt_tokens - timings["cache_n"]
    assert second.usage.prompt_tokens_details.cached_tokens == timings["cache_n"]


def test_an_unrelated_request_leaves_a_conversation_s_slot_alone(config_path):
    with serving(config_path, slots=2) as running:
        client = running.client()
        first = [{"role": "user", "content": "tell me about the quick brown fox and the lazy dog"}]
        answer = client.chat.completions.create(model="target", messages=first, max_tokens=24, temperature=0)
        other = chat(client, "target", "something else", max_tokens=8)   # shares only the template's start
        assert other.model_extra["timings"]["cache_n"] == 0                  # it took the empty slot
        turns = first + [{"role": "assistant", "content": answer.choices[0].message.content},
                         {"role": "user", "content": "and then?"}]
        second = client.chat.completions.create(model="target", messages=turns, max_tokens=8, temperature=0)
        assert second.model_extra["timings"]["cache_n"] >= answer.usage.prompt_tokens


def test_a_request_asked_again_finds_its_slot_though_its_answer_outgrew_its_prompt(config_path):
    with serving(config_path, slots=2) as running:
        client = running.client()
        first = chat(client, "target", PROMPTS[0], max_tokens=96)
        again = chat(client, "target", PROMPTS[1], max_tokens=96)
        assert again.usage.completion_tokens > again.usage.prompt_tokens   # its slot keeps under half for it
        repeated = chat(client, "target", PROMPTS[1], max_tokens=8)      # the other slot is the least recent
        assert repeated.model_extra["timings"]["cache_n"] == again.usage.prompt_tokens - 1
        assert first.model_extra["timings"]["cache_n"] == 0


def test_metrics_count_drafts_per_drafter_and_position(server):
    chat(server.client(), "target", PROMPTS[1], max_tokens=40)
    samples = server.metrics()
    drafts = {labels: v for (name, labels), v in samples.items() if name == "specframe:spec_decode_num_drafts_total"}
    accepted = {labels: v for (name, labels), v in samples.items()
                if name == "specframe:spec_decode_num_accepted_tokens_total"}
    by_position = {labels: v for (name, labels), v in samples.items()
                   if name == "specframe:spec_decode_num_accepted_tokens_per_pos_total"}
    assert {dict(labels)["drafter"] for labels in drafts} == {"prompt-lookup", "ngram-mod", "draft-model"}
    assert sum(drafts.values()) > 0 and sum(accepted.values()) == sum(by_position.values()) > 0
    assert samples[("specframe:num_requests_running", ())] == 0
    assert samples[("specframe:generation_tokens_total", ())] >= 40


@pytest.fixture(scope="module")
def one_slot_config(tmp_path_factory, target_path):
    """One slot, no queue, plain decoding and room for long answers: a request holds the only slot for long."""
    path = tmp_path_factory.mktemp("one-slot") / "config.toml"
    path.write_text(f"""
[target]
model = "{target_path}"
n_ctx = 4096
threads = 1
[speculative]
enabled = false
[generation]
max_tokens = 4000
[server]
slots = 1
queue = 0
""")
    return path


def test_a_client_that_disconnects_frees_its_slot_and_a_full_queue_is_a_503(one_slot_config):
    with serving(one_slot_config) as running:
        client = running.client()
        stream = chat(client, "target", PROMPTS[0], stream=True)
        next(stream), next(stream)                          # the role, then text: the request holds the slot
        with pytest.raises(openai.InternalServerError) as caught:
            chat(client, "target", PROMPTS[1], max_tokens=4)
        assert caught.value.status_code == 503 and caught.value.code == "queue_full"
        stream.close()                                      # the client goes away mid-stream
        deadline = time.monotonic() + 10
        while running.metrics().get(("specframe:request_success_total", (("finished_reason", "abort"),))) != 1:
            assert time.monotonic() < deadline, "the request was not cancelled"
            time.sleep(0.05)
        assert running.metrics()[("specframe:num_requests_running", ())] == 0
        assert chat(client, "target", PROMPTS[1], max_tokens=4).usage.completion_tokens == 4


def test_a_client_that_gives_up_on_a_whole_answer_cancels_it(one_slot_config):
    with serving(one_slot_config) as running:
        body = {"messages": [{"role": "user", "content": PROMPTS[0]}]}         # up to 4000 tokens, not streamed
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(running.url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(10, read=0.5))
        deadline = time.monotonic() + 10
        while running.metrics().get(("specframe:request_success_total", (("finished_reason", "abort"),))) != 1:
            assert time.monotonic() < deadline, "the request was not cancelled"
            time.sleep(0.05)
        assert running.metrics()[("specframe:num_requests_running", ())] == 0


def test_sampling_options_and_max_completion_tokens_behave_as_in_run(one_slot_config):
    options = {"temperature": 0.9, "top_p": 0.8, "seed": 11, "presence_penalty": 0.5, "frequency_penalty": 0.3,
               "logit_bias": {"5": 2.0}}
    llama_server_options = {"top_k": 8, "min_p": 0.1, "repeat_penalty": 1.2, "repeat_last_n": 16}
    with Engine.from_config(one_slot_config) as engine:
        reference = [engine.generate(PROMPTS[2], max_tokens=24, **options | llama_server_options | {"seed": seed}).text
                     for seed in (11, 12)]
        unpenalized = engine.generate(PROMPTS[2], max_tokens=24, temperature=0.9, top_p=0.8, seed=11).text
    with serving(one_slot_config) as running:
        client = running.client()
        messages = [{"role": "user", "content": PROMPTS[2]}]
        sampled = [client.chat.completions.create(model="target", messages=messages, max_tokens=24,
                                                  extra_body=llama_server_options,
                                                  **options | {"seed": seed}).choices[0].message.content
                   for seed in (11, 12)]
        capped = client.chat.completions.create(model="target", messages=messages, temperature=0, max_tokens=30,
                                                max_completion_tokens=5)
    assert sampled == reference and reference[0] != reference[1] and unpenalized != reference[0]
    assert capped.usage.completion_tokens == 5 and capped.choices[0].finish_reason == "length"


def test_an_api_key_is_required_except_for_health(one_slot_config):
    with serving(one_slot_config, api_key="sesame") as running:
        with pytest.raises(openai.AuthenticationError):
            running.client("wrong").models.list()
        assert running.client("sesame").models.list().data[0].id == "target"
        assert httpx.get(running.url + "/metrics").status_code == 401
        assert httpx.get(running.url + "/health").json() == {"status": "ok"}


def test_health_is_503_while_the_model_loads(one_slot_config, monkeypatch):
    from specframe.serve import scheduler

    loaded = threading.Event()

    class SlowEngine(Engine):
        def __init__(self, *args, **kwargs):
            loaded.wait(30)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(scheduler, "Engine", SlowEngine)
    with serving(one_slot_config, healthy=False) as running:
        try:
            loading = httpx.get(running.url + "/health")
            assert loading.status_code == 503 and loading.json()["error"]["type"] == "unavailable_error"
            assert httpx.post(running.url + "/v1/completions", json={"prompt": "hi"}).status_code == 503
            loaded.set()
            deadline = time.monotonic() + 30
            while httpx.get(running.url + "/health").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            loaded.set()      # the engine thread must not wait for it when the server stops


RUNNER = """
import signal, sys
signal.alarm(int(sys.argv[1]))          # a server its test lost track of ends by itself
from specframe.cli import main
main(sys.argv[2:], prog_name="specframe")
"""


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_ends_the_requests_in_flight_saves_what_drafters_learned_and_exits(tmp_path, target_path, signame):
    (tmp_path / "runner.py").write_text(RUNNER)
    (tmp_path / "config.toml").write_text(f"""
[target]
model = "{target_path}"
n_ctx = 4096
threads = 1
[speculative]
adaptive = false
[generation]
max_tokens = 4000
[[drafter]]
type = "ngram-cache"
dynamic = "dynamic.ngc"
save_dynamic = true
""")
    process = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(MAX_SECONDS), "serve",
                                "--config", str(tmp_path / "config.toml"), "--port", "0", "--slots", "2"],
                               stderr=subprocess.PIPE, text=True)
    try:
        log = []
        while not (listening := re.search(r"listening on (http://\S+)", "".join(log))):
            line = process.stderr.readline()
            assert line, "".join(log)
            log.append(line)
        url = listening.group(1)
        while httpx.get(url + "/health").status_code != 200:
            time.sleep(0.05)
        body = {"messages": [{"role": "user", "content": PROMPTS[0]}], "stream": True}
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
            lines = response.iter_lines()
            first = [next(lines) for _ in range(4)]                    # the role and text: generation is under way
            process.send_signal(getattr(signal, signame))
            rest = [line for line in lines if line]
        assert first[0].startswith("data: ") and rest[-1] == "data: [DONE]"
        finish = json.loads(rest[-2][len("data: "):])
        assert finish["choices"][0]["finish_reason"] == "length" and finish["timings"]["predicted_n"] < 4000
        assert process.wait(60) == 128 + getattr(signal, signame)
        stderr = "".join(log) + process.stderr.read()
    finally:
        process.kill()
        process.wait()
    assert "drafted:" in stderr and "ngram-cache" in stderr and "Traceback" not in stderr   # per-request statistics
    assert len(NgramCache.load(tmp_path / "dynamic.ngc")) > 0


def test_the_model_id_is_the_catalog_name_or_the_file_name_without_gguf(one_slot_config):
    config = load_config(one_slot_config)
    for model, name in [("qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m"),
                        ("/models/target.gguf", "target")]:
        assert model_name(dataclasses.replace(config, target=dataclasses.replace(config.target, model=model))) == name


def test_serve_refuses_bad_options_in_one_line(one_slot_config):
    from click.testing import CliRunner

    from specframe.cli import main

    result = CliRunner().invoke(main, ["serve", "--config", str(one_slot_config), "--port", "70000"])
    assert result.exit_code == 1 and "--port 70000: server.port: expected an integer in [0, 65535]" in result.output
