"""Chat templates rendered with jinja2 as transformers renders them, on Qwen2.5's own template
(tests/data/qwen2.5-chat-template.jinja: the ``tokenizer.chat_template`` of the catalog's
qwen2.5-coder-1.5b-instruct-q4_k_m, byte for byte)."""

import datetime
import json
import pathlib

import pytest

from specframe.chat_template import ChatTemplate
from specframe.errors import ModelError

QWEN_TEMPLATE = (pathlib.Path(__file__).parent / "data" / "qwen2.5-chat-template.jinja").read_text()
QWEN_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"
DEFAULT_SYSTEM = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Weather in a city; for <b>rain & snow</b> too",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
CALL = {"id": "call_0", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Zürich", "unit": "celsius"}'}}


@pytest.fixture(scope="module")
def qwen():
    return ChatTemplate(QWEN_TEMPLATE, eos_token="<|im_end|>")


def test_a_user_message_renders_as_chatml_with_qwens_default_system_prompt(qwen):
    text = qwen.render([{"role": "user", "content": "Hi <there> & you"}])
    assert text == DEFAULT_SYSTEM + "<|im_start|>user\nHi <there> & you<|im_end|>\n<|im_start|>assistant\n"
    assert qwen.render([{"role": "user", "content": "Hi"}], add_generation_prompt=False).endswith(
        "<|im_start|>user\nHi<|im_end|>\n")


def test_tools_are_listed_in_the_system_part_as_json_without_html_escapes(qwen):
    text = qwen.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}],
                       tools=[WEATHER_TOOL])
    listed = text[text.index("<tools>\n") + len("<tools>\n"):text.index("\n</tools>")]
    assert listed == json.dumps(WEATHER_TOOL, ensure_ascii=False)    # the whole entry, as transformers passes it
    assert "<b>rain & snow</b>" in listed and "\\u003c" not in text and "&amp;" not in text
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert text.endswith("<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n")


def test_an_assistants_tool_calls_and_the_tool_answers_render_as_qwen_writes_them(qwen):
    messages = [
        {"role": "user", "content": "Weather in Zürich and Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            CALL, {**CALL, "id": "call_1", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": '{"temperature": 3}'},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 9}'},
    ]
    original = json.dumps(messages)
    text = qwen.render(messages, tools=[WEATHER_TOOL])
    assert text.endswith(
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n"
        '<tool_response>\n{"temperature": 3}\n</tool_response>\n'
        '<tool_response>\n{"temperature": 9}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n")
    assert json.dumps(messages) == original                          # the caller's messages are untouched


def test_arguments_that_are_not_json_are_passed_as_the_text(qwen):
    call = {**CALL, "function": {"name": "f", "arguments": "not json"}}
    text = qwen.render([{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]}])
    assert '{"name": "f", "arguments": "not json"}' in text


def test_developer_is_system(qwen):
    messages = [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hi"}]
    assert qwen.render(messages).startswith("<|im_start|>system\nAnswer in French.<|im_end|>\n<|im_start|>user\n")


def test_what_the_template_says_about_tools(qwen):
    assert qwen.uses_tools and qwen.tool_call_markers == ("<tool_call>", "</tool_call>")
    plain = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert not plain.uses_tools and plain.tool_call_markers is None


def test_transformers_conventions():
    template = ChatTemplate(
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'skip' %}{% continue %}{% endif %}"
        "{{ m.content | tojson(indent=1) }}{% endfor %}|{{ strftime_now('%Y') }}|{{ flavour }}|"
        "{% generation %}{{ eos_token }}{% endgeneration %}\n",
        bos_token="<s>", eos_token="</s>")
    text = template.render([{"role": "user", "content": "<é>"}, {"role": "skip", "content": "no"}],
                           flavour="mint")
    assert text == f'<s>"<é>"|{datetime.date.today().year}|mint|</s>'     # trim_blocks: no newline after a tag


def test_a_template_that_does_not_compile_is_a_model_error():
    with pytest.raises(ModelError, match=r"^the model's chat template does not compile in jinja2: .*line 2") as e:
        ChatTemplate("{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    assert "\n" not in str(e.value)


def test_raise_exception_and_other_failures_are_model_errors(qwen):
    refusing = ChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must "
                            "alternate\nuser/assistant') }}{% endif %}")
    with pytest.raises(ModelError, match=r"^the model's chat template refused the messages: Conversation roles "
                                         r"must alternate user/assistant$"):
        refusing.render([{"role": "system", "content": "x"}])
    with pytest.raises(ModelError, match=r"^the model's chat template failed on the messages: TypeError") as e:
        qwen.render([{"role": "user", "content": None}])                # Qwen's template adds the content to text
    assert "\n" not in str(e.value)
    with pytest.raises(ModelError, match="SecurityError"):              # the sandbox holds
        ChatTemplate("{{ messages.__class__.__mro__ }}").render([])


@pytest.fixture(scope="module")
def qwen_model():
    """The catalog's Qwen2.5 1.5B, its vocabulary only (no weights, no inference), fetched on first use."""
    from specframe.llama import Model
    from specframe.models import resolve_model

    with Model(resolve_model(QWEN_MODEL), vocab_only=True) as model:
        yield model


@pytest.mark.real_model
def test_the_fixture_is_the_models_own_template(qwen_model):
    assert qwen_model.chat_template == QWEN_TEMPLATE


@pytest.mark.real_model
@pytest.mark.parametrize("turns", [
    [("system", "You write Python."), ("user", "Hello & <welcome>")],
    [("system", "S"), ("user", "Hi"), ("assistant", "Hello!\n  How can I help?"), ("user", "Sort a list.")],
], ids=["system-user", "multi-turn"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_without_tools_jinja_renders_what_llama_cpp_renders(qwen_model, qwen, turns, add_generation_prompt):
    messages = [{"role": role, "content": text} for role, text in turns]
    assert qwen.render(messages, add_generation_prompt=add_generation_prompt) == qwen_model.apply_chat_template(
        turns, add_assistant=add_generation_prompt)


@pytest.mark.real_model
def test_without_a_system_message_llama_cpp_leaves_out_qwens_default_one(qwen_model, qwen):
    """llama.cpp applies plain ChatML to Qwen2.5; the model's own template adds its default system prompt."""
    turns = [("user", "Hi")]
    assert qwen.render([{"role": "user", "content": "Hi"}]) == DEFAULT_SYSTEM + qwen_model.apply_chat_template(turns)


@pytest.mark.real_model
def test_qwens_markers_are_single_user_defined_tokens(qwen_model):
    """Not control tokens: the model's text shows them without special rendering, and llama.cpp reads them as the
    one token even without parse_special (so a user's message that writes one gets that token too)."""
    vocab = qwen_model.vocab
    for marker in ("<tool_call>", "</tool_call>"):
        [token] = vocab.tokenize(marker, add_special=False, parse_special=True)
        assert list(vocab.tokenize(marker, add_special=False, parse_special=False)) == [token]
        assert vocab.piece(int(token)) == marker.encode() and not vocab.is_control(int(token))
