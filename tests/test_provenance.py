"""Which drafter wrote which text: spans in the engine's results and streams, and the API's ``specframe`` extension,
on the synthetic float32 models (whose byte tokens split characters across tokens)."""

from __future__ import annotations

import collections
import json

import httpx
import pytest
from chains import COPYING_DRAFTERS
from test_server import PROMPTS, server_config, serving

from specframe.engine import Engine
from specframe.provenance import Provenance, Span, merged
from specframe.text import TextStream

PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"


def tokens_by_drafter(spans: list[Span]) -> dict:
    counts: collections.Counter = collections.Counter()
    for span in spans:
        counts[span.drafter] += span.tokens
    return dict(counts)


def accepted_by_drafter(drafters: dict) -> dict:
    return {name: d["accepted_tokens"] for name, d in drafters.items() if d["accepted_tokens"]}


def committed(pushes, stops=()):
    """Provenance of (bytes, source) tokens pushed through a TextStream, ended as a request ends."""
    text, provenance = TextStream(stops), Provenance()
    for data, source in pushes:
        provenance.add(text.push(data), source)
    provenance.end(text.finish(), streamed=True)
    return provenance


def test_a_character_split_across_two_drafters_goes_to_the_one_that_completed_it():
    e_acute = "é".encode()
    provenance = committed([(b"a", "copy"), (e_acute[:1], "copy"), (e_acute[1:], None), (b"b", None)])
    assert provenance.spans == [Span("a", "copy", 1), Span("", "copy", 1), Span("é", None, 1), Span("b", None, 1)]
    assert merged(provenance.spans) == [Span("a", "copy", 2), Span("éb", None, 2)]


def test_text_held_for_a_stop_string_keeps_every_tokens_count_and_the_tail_goes_to_the_last_source():
    provenance = committed([(b"x", None), (b"E", "model"), (b"N", "copy"), (b"Q", "copy")], stops=["END"])
    spans = merged(provenance.spans)
    assert "".join(s.text for s in spans) == "xENQ"       # no stop string: what was held comes out at the end
    assert tokens_by_drafter(spans) == {None: 1, "model": 1, "copy": 2}
    assert spans[-1] == Span("ENQ", "copy", 2)
    stopped = committed([(b"x", None), (b"E", "model"), (b"N", "copy"), (b"D", None)], stops=["END"])
    assert "".join(s.text for s in stopped.spans) == "x"
    assert tokens_by_drafter(stopped.spans) == {None: 2, "model": 1, "copy": 1}


def test_take_gives_each_span_once_and_a_cut_short_tail_is_not_streamed():
    provenance = Provenance()
    provenance.add("ab", "copy")
    provenance.add("c", "copy")
    provenance.add("", None)
    assert provenance.take() == [Span("abc", "copy", 2)] and provenance.take() == []
    provenance.end("d", streamed=False)
    assert provenance.take() == [] and merged(provenance.spans)[-1] == Span("d", None, 1)


@pytest.fixture
def engine(write_config, target_path, draft_path):
    config = write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 1024
        [generation]
        max_tokens = 120
        [speculative]
        adaptive = false
        {COPYING_DRAFTERS}
        [[drafter]]
        type = "draft-model"
        model = "{draft_path}"
        p_min = 0.2
        """)
    with Engine.from_config(config) as engine:
        yield engine


def test_streamed_spans_make_the_text_and_count_each_drafters_accepted_tokens(engine):
    generation = engine.stream(PROMPT, raw=True)
    streamed = list(generation.spans())
    result = generation.result
    assert "".join(span.text for span in streamed) == result.text
    assert merged(streamed) == result.spans
    counts = tokens_by_drafter(result.spans)
    assert {name for name in counts if name is not None} == set(accepted_by_drafter(result.stats.drafters))
    assert len(counts) >= 3, "fewer than two drafters had drafts accepted: the test would not tell them apart"
    assert {name: n for name, n in counts.items() if name is not None} == accepted_by_drafter(result.stats.drafters)
    # Every verification pass emits one token of the target's own after what it accepted, up to max_tokens.
    assert result.stop_reason == "max_tokens" and counts[None] == result.stats.n_target_passes
    assert sum(counts.values()) == result.stats.n_generated


def test_drafted_tokens_past_a_stop_string_are_counted_in_spans_of_no_text(engine):
    plain = engine.generate(PROMPT, raw=True, speculative=False)
    stop = plain.text[40:43]
    result = engine.generate(PROMPT, raw=True, stop=[stop])
    assert result.stop_reason == "stop" and result.text == plain.text[:plain.text.index(stop)]
    assert "".join(span.text for span in result.spans) == result.text
    counts = tokens_by_drafter(result.spans)
    assert {name: n for name, n in counts.items() if name is not None} == accepted_by_drafter(result.stats.drafters)


# --- the API ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory, target_path, draft_path):
    config = server_config(tmp_path_factory.mktemp("spans") / "config.toml", target_path, draft_path, 512, 48,
                           "slots = 2")
    with serving(config) as running:
        yield running


def events(server, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", server.url + path, json=body | {"stream": True}, timeout=60) as response:
        assert response.status_code == 200
        lines = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


@pytest.mark.parametrize("path, key, body", [
    ("/v1/chat/completions", "content", {"messages": [{"role": "user", "content": PROMPTS[0]}]}),
    ("/v1/completions", "text", {"prompt": PROMPTS[1]}),
])
def test_each_streamed_chunk_carries_the_spans_of_its_text(server, path, key, body):
    body = body | {"max_tokens": 40, "temperature": 0, "specframe": {"spans": True}}
    chunks = events(server, path, body)
    texts, spans = [], []
    for chunk in chunks:
        choice = chunk["choices"][0]
        text = choice["delta"].get(key, "") if key == "content" else choice["text"]
        chunk_spans = [Span(**span) for span in choice.get("specframe", {}).get("spans", [])]
        assert "".join(span.text for span in chunk_spans) == text
        texts.append(text)
        spans += chunk_spans
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "length"
    counts = tokens_by_drafter(spans)
    assert {name: n for name, n in counts.items() if name is not None} == accepted_by_drafter(last["drafters"])
    assert sum(counts.values()) == last["timings"]["predicted_n"] == 40
    assert counts[None] == last["target_passes"] and sum(accepted_by_drafter(last["drafters"]).values()) > 0
    whole = httpx.post(server.url + path, json=body, timeout=60).json()
    choice = whole["choices"][0]
    text = choice["message"]["content"] if key == "content" else choice["text"]
    whole_spans = [Span(**span) for span in choice["specframe"]["spans"]]
    assert text == "".join(texts) == "".join(span.text for span in whole_spans)    # greedy: the same answer
    counts = tokens_by_drafter(whole_spans)
    assert {name: n for name, n in counts.items() if name is not None} == accepted_by_drafter(whole["drafters"])


def test_spans_are_asked_for_and_a_bad_value_or_tools_beside_them_is_a_400(server):
    body = {"messages": [{"role": "user", "content": PROMPTS[2]}], "max_tokens": 8}
    stream = server.client().chat.completions.create(model="target", stream=True,
                                                     extra_body={"specframe": {"spans": True}}, **body)
    chunks = [chunk for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    assert chunks and all("".join(span["text"] for span in chunk.choices[0].model_extra["specframe"]["spans"])
                          == chunk.choices[0].delta.content for chunk in chunks)
    plain = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60).json()
    assert "specframe" not in plain["choices"][0] and all("specframe" not in c["choices"][0]
                                                          for c in events(server, "/v1/chat/completions", body))
    bad = httpx.post(server.url + "/v1/chat/completions", json=body | {"specframe": {"spans": "yes"}}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "specframe.spans"
    unknown = httpx.post(server.url + "/v1/chat/completions", json=body | {"specframe": {"colour": True}}, timeout=60)
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "specframe.colour"
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with_tools = httpx.post(server.url + "/v1/chat/completions",
                            json=body | {"specframe": {"spans": True}, "tools": [tool]}, timeout=60)
    assert with_tools.status_code == 400 and with_tools.json()["error"]["param"] == "specframe.spans"
