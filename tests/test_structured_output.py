"""Structured output and tool calls on the real Qwen2.5-Coder 1.5B with its 0.5B draft (config.example.toml),
through the engine and through `specframe serve` with the real `openai` client."""

from __future__ import annotations

import json
import pathlib
import re
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field
from test_server import serving

from specframe.engine import Engine
from specframe.grammar import GrammarSpec
from specframe.testing.lossless import compare

pytestmark = pytest.mark.real_model
REPO = pathlib.Path(__file__).resolve().parent.parent
GUIDE = (REPO / "docs" / "structured-output.md").read_text()

PARAGRAPH = ("Ada Lovelace (1815-1852) was an English mathematician and writer, chiefly known for her work on "
             "Charles Babbage's proposed Analytical Engine. She was the first to recognise that the machine had "
             "applications beyond pure calculation, and she published the first algorithm intended to be carried "
             "out by such a machine. She lived in London and had three children.")


class Person(BaseModel):
    name: str
    born: int
    died: int
    nationality: str
    occupation: str
    city: str
    children: int
    known_for: list[str] = Field(max_length=3)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather forecast for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city's name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "number", "description": "How many days ahead, 1 to 7"}},
        "required": ["city", "unit", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What will the weather be in Paris over the next 3 days, in celsius?"}]


class WeatherArguments(BaseModel):
    model_config = {"extra": "forbid"}
    city: str
    unit: Literal["celsius", "fahrenheit"]
    days: float


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("structured")
    path = folder / "config.toml"
    text = (REPO / "config.example.toml").read_text()
    path.write_text(text.replace("max_tokens = 256", "max_tokens = 160").replace("[speculative]\n",
                                                                                "[speculative]\nadaptive = false\n"))
    return path


def test_greedy_output_under_a_schema_is_the_same_with_and_without_drafts(config):
    schema = GrammarSpec.json_schema(Person.model_json_schema())
    prompt = f"Extract the person in this paragraph as JSON.\n\n{PARAGRAPH}"
    with Engine.from_config(config) as engine:
        plain = engine.generate(prompt, grammar=schema, speculative=False, track_margins=True)
        drafted = engine.generate(prompt, grammar=schema, track_margins=True)
        verdict = compare(plain, drafted, engine, grammar=schema)    # a replay needs the engine open
    person = Person.model_validate_json(plain.text)
    assert person.born == 1815 and person.died == 1852
    assert verdict.ok, verdict
    assert drafted.stats.drafters["grammar"]["accepted_tokens"] > 0
    assert drafted.stats.n_target_passes < plain.stats.n_target_passes


@pytest.fixture(scope="module")
def server(config):
    with serving(config, max_seconds=900, slots=2) as running:
        yield running


def test_parse_with_a_pydantic_model_returns_an_object_that_validates(server):
    completion = server.client().chat.completions.parse(
        model=server.model, temperature=0, response_format=Person,
        messages=[{"role": "user", "content": f"Extract the person in this paragraph.\n\n{PARAGRAPH}"}])
    person = completion.choices[0].message.parsed
    assert isinstance(person, Person) and person.name.startswith("Ada") and person.children == 3


def test_a_tool_call_round_trip(server):
    client = server.client()
    answer = client.chat.completions.create(model=server.model, temperature=0, messages=ASK, tools=[WEATHER, TIME])
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    arguments = WeatherArguments.model_validate_json(call.function.arguments)
    assert arguments.city == "Paris" and arguments.unit == "celsius" and arguments.days == 3

    streamed = client.chat.completions.create(model=server.model, temperature=0, messages=ASK,
                                              tools=[WEATHER, TIME], stream=True)
    calls: dict[int, dict] = {}
    finish = None
    for chunk in streamed:
        for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            entry = calls.setdefault(delta.index, {"name": "", "arguments": ""})
            entry["name"] += delta.function.name or ""
            entry["arguments"] += delta.function.arguments or ""
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]

    follow_up = ASK + [choice.message.model_dump(exclude_none=True),
                       {"role": "tool", "tool_call_id": call.id,
                        "content": json.dumps({"forecast": ["sunny, 21", "cloudy, 18", "rain, 15"]})}]
    reply = client.chat.completions.create(model=server.model, temperature=0, messages=follow_up,  # answer now
                                           tools=[WEATHER, TIME], tool_choice="none", max_tokens=80)
    assert reply.choices[0].finish_reason in ("stop", "length") and not reply.choices[0].message.tool_calls
    assert "sunny" in reply.choices[0].message.content.lower() or "21" in reply.choices[0].message.content


def test_tool_choice_none_required_and_named_behave_as_the_api_says(server):
    client = server.client()
    none = client.chat.completions.create(model=server.model, temperature=0, messages=ASK, tools=[WEATHER],
                                          tool_choice="none", max_tokens=40)
    assert not none.choices[0].message.tool_calls and none.choices[0].message.content
    hello = [{"role": "user", "content": "Say hello."}]
    required = client.chat.completions.create(model=server.model, temperature=0, messages=hello,
                                              tools=[WEATHER, TIME], tool_choice="required")
    assert required.choices[0].finish_reason == "tool_calls"
    assert len(required.choices[0].message.tool_calls) == 1      # parallel_tool_calls is off by default
    assert required.choices[0].message.tool_calls[0].function.name in ("get_weather", "get_time")
    several = client.chat.completions.create(model=server.model, temperature=0, messages=ASK, max_tokens=120,
                                             tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=True)
    assert len(several.choices[0].message.tool_calls) >= 1
    named = client.chat.completions.create(model=server.model, temperature=0, messages=ASK, tools=[WEATHER, TIME],
                                           tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = named.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_time"] and "city" in json.loads(calls[0].function.arguments)


def test_an_unknown_field_is_refused_by_the_real_server(server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(model=server.model, messages=ASK, extra_body={"mirostat": 2})
    assert caught.value.param == "mirostat"


def test_the_guide_s_examples_run_as_written(server, capsys):
    blocks = re.findall(r"```python\n(.*?)```", GUIDE, re.S)
    assert len(blocks) == 2
    for block in blocks:
        exec(block.replace("http://127.0.0.1:8080/v1", server.url + "/v1"), {})
    printed = capsys.readouterr().out
    assert "name='Marten Kell'" in printed and "crew=22" in printed
    assert "get_weather" in printed and '"city": "Paris"' in printed
