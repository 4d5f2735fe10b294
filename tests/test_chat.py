"""`specframe chat` under a pseudo-terminal (pexpect) on the synthetic model: the memory kept across turns, the
commands, Ctrl-C, Ctrl-D and SIGTERM; and the plain template of a model without one."""

import os
import re
import signal
import sys
import time

import pexpect
import pytest
from chains import COPYING_DRAFTERS

from specframe.chat import Template
from specframe.engine import Engine
from specframe.testing.synthetic import write_synthetic_model

STATS = re.compile(r"(\d+) tokens, [\d.]+ tokens/s \| prompt: (\d+) evaluated, (\d+) reused .*?"
                   r"(?:drafted (\d+), accepted (\d+) .*?)?stop: (\w+)")
# Every target pass takes 20 ms longer, so that an answer of many tokens lasts long enough to be interrupted, and
# ending a request 1 s longer, so that a second Ctrl-C arrives while the answer stops.
SLOW = """
import sys, time
from specframe.engine import Engine
from specframe.llama.context import Context


def slower(function, seconds):
    def slow(*args, **kwargs):
        time.sleep(seconds)
        return function(*args, **kwargs)
    return slow


Context.decode_batch = slower(Context.decode_batch, 0.02)
Engine.finish = slower(Engine.finish, 1.0)
from specframe.cli import main
main(sys.argv[1:], prog_name="specframe")
"""


@pytest.fixture
def config(write_config, target_path):
    return write_config(f"""
        [target]
        model = "{target_path}"
        n_ctx = 2048
        threads = 1
        [generation]
        max_tokens = 40
        [speculative]
        adaptive = false
        {COPYING_DRAFTERS}""")


def chat(config, *options, slow: bool = False, term: str = "dumb") -> pexpect.spawn:
    program = ["-c", SLOW] if slow else ["-m", "specframe.cli"]
    environment = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {"TERM": term}
    child = pexpect.spawn(sys.executable, [*program, "chat", "--config", str(config), *options],
                          env=environment, encoding="utf-8", codec_errors="replace",
                          timeout=120, dimensions=(40, 400))
    child.expect_exact("Commands:")
    prompt(child)
    return child


def prompt(child) -> None:
    child.expect_exact("> ")


def turn(child, line: str) -> tuple[str, dict]:
    """Send a message (or command); the answer as printed and its statistics, once the prompt is back."""
    child.sendline(line)
    child.expect(STATS)
    numbers, stop = child.match.groups()[:-1], child.match.group(6)
    answer = child.before.split("\n", 1)[1]      # after the echo of the line
    prompt(child)
    names = ("generated", "evaluated", "reused", "drafted", "accepted")
    return answer, {name: int(n or 0) for name, n in zip(names, numbers)} | {"stop": stop}


def ended(child) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


LEGEND = re.compile(r"drafted and accepted, by drafter: (.*); the target's own tokens \(plain\): (\d+)")
TINTED = re.compile(r"\x1b\[(3\d|9\d)m(.*?)\x1b\[0m", re.S)   # a drafter's colour (tint.py), not the notes' dim


def test_color_tints_each_answer_s_drafted_text_with_a_legend_after_it(config):
    child = chat(config, "--color", term="xterm")
    first, _ = turn(child, "hello there, how are you")
    child.sendline("/regen")                                  # ngram-mod's pool holds the answer: it drafts it
    child.expect(STATS)
    answer = child.before.split("\n", 1)[1]
    child.expect(LEGEND)                                      # after the statistics
    counts, own = child.match.group(1), int(child.match.group(2))
    prompt(child)
    tinted = TINTED.findall(answer)
    accepted = {re.sub(r"\x1b\[\d+m", "", part).rsplit(" ", 1)[0]: int(part.rsplit(" ", 1)[1])
                for part in counts.split(", ")}
    assert tinted and set(accepted) == {"prompt-lookup", "ngram-mod"} and accepted["ngram-mod"] > 0
    assert sum(accepted.values()) + own == 40                # every token of the answer, drafted or the target's
    untinted = [TINTED.sub(r"\2", text).split("\x1b[2m")[0].strip() for text in (answer, first)]
    assert untinted[0] == untinted[1]                         # the same answer again, tinted where drafted
    child.sendline("/exit")
    assert ended(child) == 0


def test_turns_reuse_the_memory_and_commands_work(config, tmp_path):
    child = chat(config)
    _, first = turn(child, "hello there, how are you")
    assert first["reused"] == 0 and first["generated"] == 40
    answer, second = turn(child, "tell me more")
    # The first turn's prompt (at least) is in memory: only what is new is evaluated.
    assert second["reused"] >= first["evaluated"] and second["evaluated"] < second["reused"] + second["evaluated"]
    again, regen = turn(child, "/regen")
    assert again == answer                                  # greedy: the same answer
    assert regen["evaluated"] == 1                          # the same prompt: all of it in memory but its last token
    assert regen["accepted"] > second["accepted"]           # ngram-mod's pool kept the answer: drafters persist

    child.sendline("/read " + str(tmp_path / "missing.txt"))
    child.expect(r"error: /read: \S*missing.txt: not found")
    prompt(child)
    text = "the quick brown fox jumps over the lazy dog; " * 8
    (tmp_path / "fox.txt").write_text(text)
    child.sendline("/read " + str(tmp_path / "fox.txt"))
    child.expect_exact(f"fox.txt: {len(text)} characters, sent with your next message")
    prompt(child)
    _, read = turn(child, "what does the file say?")
    assert read["evaluated"] >= len(text) // 2              # a token of this vocabulary holds two characters at most

    child.sendline("/bogus")
    child.expect_exact("error: unknown command /bogus")
    prompt(child)
    child.sendline("/clear")
    child.expect_exact("the conversation is forgotten")
    prompt(child)
    _, cleared = turn(child, "hello there, how are you")
    assert cleared["reused"] == 0 and cleared["evaluated"] == first["evaluated"]
    child.sendline("/exit")
    assert ended(child) == 0


def test_ctrl_c_stops_the_answer_and_at_the_prompt_exits(config):
    child = chat(config, "--max-tokens", "1000", slow=True)
    child.sendline("tell me a long story")
    child.expect_exact("tell me a long story")
    child.expect(r"\S")                  # the answer is streaming
    child.sendintr()
    child.expect(STATS)
    generated, stop = child.match.group(1), child.match.group(6)
    assert stop == "interrupted" and int(generated) < 1000
    prompt(child)
    _, follow_up = turn(child, "go on")   # the stopped answer stays in the conversation, and in memory
    assert follow_up["reused"] > 0
    child.sendintr()
    assert ended(child) == 0


def test_a_second_ctrl_c_during_an_answer_exits(config):
    child = chat(config, "--max-tokens", "1000", slow=True)
    child.sendline("tell me a long story")
    child.expect_exact("tell me a long story")
    child.expect(r"\S")
    child.sendintr()
    time.sleep(0.3)                      # two presses, not one signal twice (Python would see one)
    child.sendintr()
    child.expect(STATS)                  # the answer stops, and the chat ends without a prompt
    assert ended(child) == 0 and "> " not in child.before


def test_ctrl_d_exits_and_sigterm_ends_with_its_code(config):
    child = chat(config)
    child.sendeof()
    assert ended(child) == 0
    child = chat(config, "--max-tokens", "1000", slow=True)
    child.sendline("tell me a long story")
    child.expect_exact("tell me a long story")
    child.expect(r"\S")
    child.kill(signal.SIGTERM)
    child.expect(STATS)
    assert ended(child) == 128 + signal.SIGTERM


def test_the_system_prompt_and_the_plain_template(config, tmp_path):
    child = chat(config, "--system", "You are terse.")
    _, with_system = turn(child, "hello there, how are you")
    child.sendline("/exit")
    ended(child)
    child = chat(config)
    _, without = turn(child, "hello there, how are you")
    child.sendline("/exit")
    ended(child)
    assert with_system["evaluated"] > without["evaluated"]

    base = tmp_path / "base.toml"
    base.write_text(f'[target]\nmodel = "{write_synthetic_model(tmp_path / "base.gguf", chat_template=None)}"\n')
    with Engine.from_config(base) as engine:
        plain = Template(engine)
        assert plain.plain and plain.stops == ["\nUser:"]
        assert (plain.render([("system", "Be terse."), ("user", "hi"), ("assistant", " hello"), ("user", "bye")])
                == "System: Be terse.\nUser: hi\nAssistant: hello\nUser: bye\nAssistant:")
