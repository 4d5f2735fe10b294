"""The Hermes / Qwen2.5 tool-call format read from a whole answer and from a stream, which must agree."""

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specframe.tool_calls import ToolCall, ToolCallStream, parse_call, split_tool_calls

MARKERS = ("<tool_call>", "</tool_call>")
WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'


def calls_of(calls):
    return [(c.name, c.arguments) for c in calls]


def streamed(pieces, markers=MARKERS):
    stream = ToolCallStream(markers)
    events = [event for piece in pieces for event in stream.feed(piece)] + stream.finish()
    return "".join(e for e in events if isinstance(e, str)), [e for e in events if isinstance(e, ToolCall)]


def test_a_single_call_is_parsed_and_there_is_no_content():
    content, calls = split_tool_calls(WEATHER, MARKERS)
    assert content is None
    assert calls_of(calls) == [("get_weather", '{"city": "Paris", "unit": "celsius"}')]
    assert re.fullmatch(r"call_[0-9a-f]{24}", calls[0].id)
    assert calls[0].as_openai() == {"id": calls[0].id, "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}
    assert json.loads(calls[0].arguments) == {"city": "Paris", "unit": "celsius"}


def test_content_before_calls_and_several_calls():
    text = "Let me check both.\n" + WEATHER + "\n" + WEATHER.replace("Paris", "Zürich") + "\n"
    content, calls = split_tool_calls(text, MARKERS)
    assert content == "Let me check both."
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Paris", "Zürich"]
    assert "Zürich" in calls[1].arguments             # not escaped: ensure_ascii=False
    assert len({c.id for c in calls}) == 2


def test_text_without_calls_is_all_content():
    assert split_tool_calls("  Just an answer. <tool_ without a marker\n", MARKERS) == (
        "Just an answer. <tool_ without a marker", [])
    assert split_tool_calls("", MARKERS) == ("", [])


def test_a_block_that_is_not_a_call_stays_in_the_content():
    broken = "<tool_call>\n{not json}\n</tool_call>"
    nameless = '<tool_call>{"arguments": {}}</tool_call>'
    content, calls = split_tool_calls(f"a {broken} b {nameless} {WEATHER}", MARKERS)
    assert content == f"a {broken} b {nameless}"
    assert calls_of(calls) == [("get_weather", '{"city": "Paris", "unit": "celsius"}')]


def test_a_call_left_open_counts_if_its_json_is_complete():
    _, calls = split_tool_calls('<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n', MARKERS)
    assert calls_of(calls) == [("f", '{"x": 1}')]
    assert split_tool_calls('ok <tool_call>\n{"name": "f", "argum', MARKERS) == (
        'ok <tool_call>\n{"name": "f", "argum', [])


def test_arguments_missing_or_written_as_a_json_string():
    assert parse_call('{"name": "now"}').arguments == "{}"
    assert parse_call('{"name": "f", "arguments": "{\\"a\\": [1, 2]}"}').arguments == '{"a": [1, 2]}'
    assert parse_call('{"name": "f", "arguments": "plain"}').arguments == '"plain"'
    assert parse_call('["f"]') is None and parse_call('{"name": ""}') is None


def test_the_stream_holds_back_a_possible_marker_and_gives_each_call_when_it_closes():
    stream = ToolCallStream(MARKERS)
    assert stream.feed("Checking <tool") == ["Checking"]          # the space may be the content's end
    assert stream.feed("s> are fine. <") == [" <tools> are fine."]
    assert stream.feed("tool_call>\n{") == []
    [call] = stream.feed('"name": "f", "arguments": {}}\n</tool_call>\n')
    assert isinstance(call, ToolCall) and (call.name, call.arguments) == ("f", "{}")
    assert stream.finish() == []


def test_the_stream_gives_a_broken_block_and_a_partial_marker_as_content():
    stream = ToolCallStream(MARKERS)
    assert "".join(stream.feed("<tool_call>oops</tool_call> x <tool_c")) == "<tool_call>oops</tool_call> x"
    assert stream.finish() == [" <tool_c"]


def test_the_stream_parses_a_call_left_open_at_the_end():
    stream = ToolCallStream(MARKERS)
    assert stream.feed('<tool_call>{"name": "f", "arguments": {"q": "</tool"}}') == []
    [call] = stream.finish()
    assert isinstance(call, ToolCall) and call.arguments == '{"q": "</tool"}'


FRAGMENTS = [
    "Hello", " world", "\n", " ", "  \n", "<", "<tool", "_call>", "</", "</tool_call>", "<tool_call>",
    "tool_call>", '{"name": "f", "arguments": {"a": 1}}', '{"name": "g"}', '{"arguments": {}}', "{broken",
    '"x": "<tool_call>"', "é", "}", "<tool_call>\n", "\n</tool_call>",
]


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(st.sampled_from(FRAGMENTS), max_size=14), cuts=st.lists(st.integers(0, 200), max_size=12))
def test_streamed_equals_split_for_any_pieces(parts, cuts):
    text = "".join(parts)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    content, calls = split_tool_calls(text, MARKERS)
    streamed_content, streamed_calls = streamed(pieces)
    assert streamed_content == (content or "")
    assert calls_of(streamed_calls) == calls_of(calls)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="<>/_tolcab{}\": \nn", max_size=60))
def test_streamed_equals_split_on_arbitrary_text_one_character_at_a_time(text):
    content, calls = split_tool_calls(text, MARKERS)
    streamed_content, streamed_calls = streamed(list(text))
    assert streamed_content == (content or "")
    assert calls_of(streamed_calls) == calls_of(calls)


BARE = '```json\n{\n  "name": "get_weather",\n  "arguments": {"city": "Paris"}\n}\n```\n'


@given(st.lists(st.integers(min_value=0, max_value=len(BARE)), max_size=6))
def test_an_answer_that_is_a_bare_call_is_a_call_streamed_or_not(cuts):
    content, calls = split_tool_calls(BARE, MARKERS, ["get_weather"])
    assert content is None and [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather",
                                                                                        {"city": "Paris"})]
    stream = ToolCallStream(MARKERS, ["get_weather"])
    bounds = sorted(set(cuts) | {0, len(BARE)})
    events = [e for a, b in zip(bounds, bounds[1:]) for e in stream.feed(BARE[a:b])] + stream.finish()
    assert [(e.name, e.arguments) for e in events] == [(c.name, c.arguments) for c in calls]


@pytest.mark.parametrize("text", ['{"name": "get_time", "arguments": {}}', "```json\n[1, 2]\n```",
                                  'Call it: {"name": "get_weather", "arguments": {}}'])
def test_json_that_is_not_a_bare_call_to_an_offered_function_stays_content(text):
    assert split_tool_calls(text, MARKERS, ["get_weather"]) == (text.strip(), [])
    stream = ToolCallStream(MARKERS, ["get_weather"])
    events = stream.feed(text) + stream.finish()
    assert "".join(e for e in events if isinstance(e, str)) == text.strip()
