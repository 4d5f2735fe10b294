"""`specframe chat`: a conversation with the engine in a terminal, the target's memory kept from turn to turn.

Each turn renders the whole conversation with the model's chat template and starts a request with ``reuse``: the
slot's memory still holds the previous turns, prompt and answer, so the engine evaluates only from where the new
prompt first differs, which is the new message and the template's framing (or a little earlier, where the
answer's text tokenizes otherwise than the tokens the model produced). The engine knows nothing of the chat.
Drafters are the engine's, kept across turns as a server keeps them across requests; each turn begins them with
the whole prompt.

A model without a chat template, or with one llama.cpp cannot apply, gets plain "System:", "User:" and
"Assistant:" lines, and "\\nUser:" as a stop string so that the model does not write the user's part.

Ctrl-C stops the answer: what was printed so far stays in the conversation (the model sees it next turn; /regen
answers again). Ctrl-C at the prompt, or a second one while an answer is stopping, ends the chat as /exit and
Ctrl-D do (exit status 0); SIGTERM ends it with 143.
"""

from __future__ import annotations

import os
import re
import signal
import sys

import click

from specframe.engine import Engine
from specframe.errors import ModelError, SpecframeError, printable
from specframe.files import read_text
from specframe.interruption import Interrupted, SignalHandling
from specframe.results import GenerationResult
from specframe.tint import Tint

PROMPT = "> "
COMMANDS = "/exit, /clear (forget the conversation), /regen (answer again), /read FILE (goes with the next message)"
PLAIN_ROLES = {"system": "System", "user": "User", "assistant": "Assistant"}


class Template:
    """How the conversation becomes prompt text: the model's chat template, or the plain fallback."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self.plain = engine.model.chat_template is None or not _applies(engine)
        self.stops = ["\nUser:"] if self.plain else []

    def render(self, messages: list[tuple[str, str]]) -> str:
        """The prompt for the assistant's next answer."""
        if not self.plain:
            return self._engine.chat_prompt([{"role": role, "content": text} for role, text in messages])
        # An answer goes back as the model wrote it after "Assistant:", so that its tokens are found in memory.
        return "".join(f"{PLAIN_ROLES[role]}:{text if role == 'assistant' else ' ' + text}\n"
                       for role, text in messages) + "Assistant:"


def _applies(engine: Engine) -> bool:
    try:
        engine.chat_prompt([{"role": "user", "content": "hello"}])
    except ModelError:
        return False
    return True


class Chat:
    """One conversation on the engine's first slot, read from standard input a line at a time."""

    def __init__(self, engine: Engine, signals: SignalHandling, system: str = "", tint: Tint | None = None,
                 **options):
        """``tint`` colours each answer's drafted text by drafter (None: plain); ``options``: the engine's request
        options for every answer (max_tokens, temperature, seed, speculative)."""
        self.engine = engine
        self.tint = tint
        self.signals = signals
        self.system = system
        self.options = options
        self.template = Template(engine)
        self.stops = [*engine.config.generation.stop, *self.template.stops]
        self.turns: list[tuple[str, str]] = []    # (role, text): user and assistant in turn
        self.attached: list[str] = []             # files read for the next message
        self._reuse = True                        # False after /clear: the next answer starts on empty memory

    def run(self) -> None:
        """Talk until /exit, the end of input (Ctrl-D) or a Ctrl-C that stops no answer."""
        if sys.stdin.isatty():
            import readline  # noqa: F401 - line editing and history for input()
        template = "a plain User:/Assistant: template (the model has none llama.cpp applies)" \
            if self.template.plain else "its chat template"
        _note(f"chat with {os.path.basename(self.engine.model.path)}, {template}. Commands: {COMMANDS}. "
              "Ctrl-C stops an answer; Ctrl-C at the prompt or Ctrl-D exits.")
        self._load_drafters()
        try:
            while self.handle(input(PROMPT)):
                pass
        except EOFError:
            pass
        except KeyboardInterrupt as exc:
            if isinstance(exc, Interrupted) and exc.signum != signal.SIGINT:
                raise
        click.echo()

    def handle(self, line: str) -> bool:
        """Act on one line, a command or a message; False when the chat ends."""
        command, _, argument = line.strip().partition(" ")
        if not re.fullmatch(r"/[a-z]+", command):
            if not line.strip():
                return True
            self.turns.append(("user", "\n\n".join([*self.attached, line])))
            self.attached = []
            return self._answer()
        if command == "/exit":
            return False
        if command == "/clear":
            self.turns, self.attached, self._reuse = [], [], False
            _note("the conversation is forgotten")
        elif command == "/regen":
            if not self.turns:
                _error("/regen: there is no answer to give again yet")
                return True
            self.turns.pop()
            return self._answer()
        elif command == "/read":
            path = argument.strip()
            try:
                text = read_text(os.path.expanduser(path)) if path else None
            except SpecframeError as exc:
                _error(f"/read: {exc}")
                return True
            if text is None:
                _error("/read: name a file: /read FILE")
                return True
            self.attached.append(text)
            _note(f"{path}: {len(text)} characters, sent with your next message")
        else:
            _error(f"unknown command {command}; commands: {COMMANDS}")
        return True

    def _answer(self) -> bool:
        """Answer the last user message, streaming; False when a second Ctrl-C asked to end the chat."""
        messages = ([("system", self.system)] if self.system else []) + self.turns
        tokens = self.engine.vocab.tokenize(self.template.render(messages), add_special=True, parse_special=True)
        try:
            generation = self.engine.stream(tokens, reuse=self._reuse, stop=self.stops, **self.options)
        except SpecframeError as exc:   # the conversation no longer fits the context
            self.turns.pop()
            _error(f"{exc}; /clear starts a new conversation")
            return True
        self._reuse = True
        printed: list[str] = []
        stopper = _Stopper()
        previous = signal.signal(signal.SIGINT, stopper)
        try:
            try:
                for span in generation.spans():
                    printed.append(span.text)
                    click.echo(self.tint.paint(span) if self.tint else span.text, nl=False,
                               color=True if self.tint else None)
            except KeyboardInterrupt:   # raised here, not inside the engine's step (which ends the request itself)
                pass
            finally:
                stopper.armed = False
            result = generation.interrupt()
            self.turns.append(("assistant", "".join(printed)))
            click.echo()
            _note(summary(result))
            if self.tint:
                click.echo(self.tint.legend(result.spans), err=True, color=True)
        finally:
            signal.signal(signal.SIGINT, previous)
        if self.signals.received == signal.SIGTERM:
            raise Interrupted(signal.SIGTERM)
        return stopper.count < 2

    def _load_drafters(self) -> None:
        """Load the drafters and the pass-cost table now, not in the first answer (as the server does)."""
        engine = self.engine
        if not (self.options.get("speculative", True) and engine.config.speculative.enabled):
            return
        if engine.chain() is not None and engine.pass_cost is not None:
            if engine.pass_cost_store.load() is None:
                _note("measuring the target's pass costs, once for this model and machine...")
            engine.calibrate()


class _Stopper:
    """SIGINT while an answer streams: the first one stops it (a KeyboardInterrupt, which the engine turns into
    the end of the request), the later ones are counted: a second one ends the chat."""

    def __init__(self):
        self.count = 0
        self.armed = True

    def __call__(self, signum, frame) -> None:
        self.count += 1
        if self.armed and self.count == 1:
            raise KeyboardInterrupt


def summary(result: GenerationResult) -> str:
    """One turn's statistics in a line."""
    s = result.stats
    parts = [f"{s.n_generated} tokens, {s.tokens_per_second:.1f} tokens/s",
             f"prompt: {s.n_prompt_tokens - s.n_cached_tokens} evaluated, {s.n_cached_tokens} reused "
             f"({s.prompt_seconds:.2f} s)"]
    if s.drafters:
        parts.append(f"drafted {s.n_drafted}, accepted {s.n_accepted} ({100 * s.acceptance_rate:.0f} %)")
    parts.append(f"stop: {result.stop_reason}")
    return " | ".join(parts)


def _note(text: str) -> None:
    click.secho(text, dim=True, err=True)


def _error(text: str) -> None:
    click.secho(f"error: {printable(text)}", fg="red", err=True)
