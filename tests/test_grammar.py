"""Constrained generation on the synthetic float32 models: the grammar holds wherever the target chooses, drafts are
cut at their first forbidden token, the grammar drafter drafts what is forced, greedy output is the same with and
without drafts, and log-probabilities of drafted tokens are plain decoding's."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from specframe.drafting import Draft, Drafter
from specframe.engine import Engine
from specframe.errors import ConfigError, ParamError
from specframe.grammar import Constraint, GrammarError, GrammarSpec
from specframe.llama.grammar_sampler import LlamaGrammar
from specframe.testing.lossless import compare

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "kind": {"enum": ["fox", "dog"]},
                                           "legs": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "kind", "legs"], "additionalProperties": False}
PROMPT = "the quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def config(tmp_path_factory, target_path, draft_path):
    path = tmp_path_factory.mktemp("grammar") / "config.toml"
    path.write_text(f"""
[target]
model = "{target_path}"
n_ctx = 512
[generation]
max_tokens = 60
[speculative]
adaptive = false
[[drafter]]
type = "grammar"
[[drafter]]
type = "draft-model"
model = "{draft_path}"
p_min = 0.0
""")
    return path


@pytest.fixture(scope="module")
def engine(config):
    with Engine.from_config(config) as engine:
        yield engine


def test_greedy_output_under_a_schema_is_valid_and_the_same_with_and_without_drafts(engine):
    spec = GrammarSpec.json_schema(SCHEMA)
    plain = engine.generate(PROMPT, raw=True, grammar=spec, speculative=False, track_margins=True)
    drafted = engine.generate(PROMPT, raw=True, grammar=spec, track_margins=True)
    record = json.loads(plain.text)
    assert set(record) == {"name", "kind", "legs"} and record["kind"] in ("fox", "dog")
    assert plain.stop_reason == "eog"
    verdict = compare(plain, drafted, engine)
    assert verdict.ok, verdict
    assert drafted.stats.n_accepted > 0
    grammar = drafted.stats.drafters["grammar"]
    assert grammar["accepted_tokens"] > 0, "the forced keys were never drafted"
    free = engine.generate(PROMPT, raw=True, speculative=False)
    assert free.text != plain.text


def test_every_draft_is_cut_at_its_first_token_the_grammar_forbids(engine, target_path):
    forbidden = int(engine.vocab.tokenize("\n", add_special=False)[-1])   # not in compact JSON, nor in its strings

    class Tilde(Drafter):
        name = "tilde"

        def draft(self, history, n_max):
            return Draft.of([forbidden] * n_max)

    chain = engine.chain_of({"tilde": Tilde(None, None)})
    result = engine.generate(PROMPT, raw=True, grammar=GrammarSpec.json_schema(SCHEMA), chain=chain)
    stats = result.stats.drafters["tilde"]
    assert stats["calls"] > 0 and stats["drafted_tokens"] == 0
    json.loads(result.text)


def test_a_constraint_answers_admissibility_masks_and_forced_tokens(engine):
    constraint = Constraint(GrammarSpec.json_schema(SCHEMA), engine.vocab)
    assert engine.vocab.detokenize(constraint.forced()).startswith('{"name":')
    tokens = engine.vocab.tokenize('x{"name": "x", "kind": "cat"', add_special=False)[1:]   # no word start
    n = constraint.admissible(tokens)
    assert engine.vocab.detokenize(tokens[:n]).endswith('"kind": "') and n < len(tokens)
    row = np.zeros(engine.vocab.n_tokens, dtype=np.float32)
    allowed = np.flatnonzero(np.isfinite(constraint.masked(row)))
    assert allowed.size and all(b'{"name": "'.startswith(engine.vocab.piece(int(t))) for t in allowed)
    assert constraint.allows(int(allowed[0])) and not constraint.allows(int(tokens[-1]))


def test_a_lazy_grammar_waits_for_its_trigger(engine):
    trigger = int(engine.vocab.tokenize("x@", add_special=False)[-1])
    assert engine.vocab.piece(trigger) == b"@"
    constraint = Constraint(GrammarSpec("regex", "@[0-9]+", (trigger,)), engine.vocab)   # held from the trigger on
    free = engine.vocab.tokenize("any text", add_special=False)
    assert constraint.admissible(free) == len(free) and constraint.forced().size == 0
    digits, letters = (engine.vocab.tokenize(t, add_special=False)[1:] for t in ("x12", "xab"))   # no word start
    assert constraint.admissible(np.concatenate([free, [trigger], digits])) == len(free) + 1 + len(digits)
    assert constraint.admissible(np.concatenate([[trigger], letters])) == 1
    for token in np.concatenate([free, [trigger]]):
        constraint.advance(int(token))
    assert constraint.active and not constraint.allows(int(letters[0]))


def test_a_pattern_at_the_start_triggers_a_grammar_over_the_text_it_matched(engine):
    spell = lambda text: engine.vocab.tokenize("x" + text, add_special=False)[1:]   # noqa: E731 - no word start
    spec = GrammarSpec("lark", 'start: /[^{]*/ "{" /[0-9]+/ "}"', pattern=r"\A\s*(?:```\s*)?\{[0-9]")
    constraint = Constraint(spec, engine.vocab)
    assert constraint.admissible(spell("some {x} text")) == len(spell("some {x} text"))   # not at the start
    opening, rest = spell("``` {1"), spell("2}")
    n = constraint.admissible(np.concatenate([opening, rest, spell("x")]))
    assert n == len(opening) + len(rest)           # the grammar holds from the fence on, and ends at the brace
    for token in opening:
        constraint.advance(int(token))
    assert constraint.active and not constraint.allows(int(spell("x")[0]))


def test_log_probabilities_of_drafted_tokens_are_plain_decodings(engine):
    plain = engine.generate(PROMPT, raw=True, speculative=False, logprobs=3, max_tokens=24)
    drafted = engine.generate(PROMPT, raw=True, logprobs=3, max_tokens=24)
    assert drafted.tokens == plain.tokens and drafted.stats.n_accepted > 0
    assert [e.token for e in drafted.logprobs] == drafted.tokens
    for ours, theirs in zip(drafted.logprobs, plain.logprobs):
        assert ours.logprob == pytest.approx(theirs.logprob, abs=1e-3)
        assert [t for t, _ in ours.top] == [t for t, _ in theirs.top]
        assert ours.top[0][1] >= ours.logprob - 1e-6 and len(ours.top) == 3


@pytest.mark.parametrize("setting, problem", [
    ('grammar = "root ::= ("', "grammar"),
    ('json_schema = "{not json"', "json_schema"),
    ('grammar_file = "missing.gbnf"', "grammar_file"),
    ('grammar = "root ::= \\"a\\""\njson_schema = "{}"', "json_schema"),
])
def test_a_bad_grammar_in_the_config_is_one_line_naming_the_key(write_config, target_path, setting, problem):
    path = write_config(f'[target]\nmodel = "{target_path}"\n[sampling]\n{setting}\n')
    with pytest.raises(ConfigError) as caught:
        Engine.from_config(path)
    assert f"sampling.{problem}" in str(caught.value) and "\n" not in str(caught.value)


def test_a_grammar_file_in_the_config_constrains_run(write_config, target_path, tmp_path):
    (tmp_path / "yes-no.gbnf").write_text('root ::= "yes" | "no"\n')
    path = write_config(f'[target]\nmodel = "{target_path}"\n[sampling]\ngrammar_file = "yes-no.gbnf"\n')
    with Engine.from_config(path) as engine:
        assert engine.generate(PROMPT, raw=True).text in ("yes", "no")


def test_a_grammar_that_does_not_compile_is_refused_before_it_is_used(engine):
    with pytest.raises(GrammarError):
        _ = GrammarSpec("lark", "start: (").source
    with pytest.raises(ParamError) as caught:
        engine.start(engine.prompt_tokens(PROMPT, raw=True), grammar=GrammarSpec("regex", "(["))
    assert caught.value.key == "grammar"


def test_libllama_s_grammar_sampler_and_llguidance_allow_the_same_tokens(engine):
    """The binding of libllama's sampler (measured beside llguidance by benchmarks/grammar_mask.py) judges a GBNF
    grammar as llguidance does, position by position: llguidance never allows a token libllama forbids, and
    allows the same ones but where libllama also takes a lone space before a key's quote."""
    gbnf = (pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "json.gbnf").read_text()
    ours, theirs = Constraint(GrammarSpec("gbnf", gbnf), engine.vocab), LlamaGrammar(engine.vocab, gbnf)
    row = np.zeros(engine.vocab.n_tokens, dtype=np.float32)
    vocab = engine.vocab      # text tokens: the engines differ on byte-fallback spellings and empty pieces
    ascii_text = np.array([vocab.piece(t).isascii() and vocab.piece(t) != b"" and not vocab.text(t).startswith(b"<0x")
                           for t in range(vocab.n_tokens)])
    tokens = engine.vocab.tokenize('x{"a": [1, "b"], "c": null}', add_special=False)[1:]
    same = 0
    for token in tokens:
        allowed, also = (np.isfinite(grammar.masked(row)) & ascii_text for grammar in (ours, theirs))
        assert allowed.any() and not (allowed & ~also).any()
        same += np.array_equal(allowed, also)
        assert ours.allows(int(token)) and theirs.allows(int(token))
        ours.advance(int(token))
        theirs.accept(int(token))
    theirs.close()
    assert same >= len(tokens) - 1
