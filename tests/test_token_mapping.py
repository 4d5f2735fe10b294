"""Token mapping: a target history carried into another vocabulary through text, and draft tokens carried back."""

import numpy as np
import pytest

from specframe.drafting.token_mapping import Replacements, TokenMapping, complete_utf8
from specframe.llama import Model
from specframe.testing.synthetic import write_synthetic_model

TEXT = ("def add(first, second):\n    \"\"\"Sum of two numbers — naïve, 東京 🎉\"\"\"\n"
        "    return first + second\n\nprint(add(2, 3))  # the answer\n")


def test_replacements_hold_back_what_could_grow_into_a_key():
    table = Replacements({"<|im_start|>": "<start_of_turn>", "<|im_end|>": "<end_of_turn>", "<|im": "X"})
    assert table.apply(b"a<|im_start|>b<|im_end|>") == b"a<start_of_turn>b<end_of_turn>"
    assert table.stable(b"text <|im_st") == len(b"text ")
    assert table.stable(b"text <") == len(b"text ")
    assert table.stable(b"text <|im_start|>") == len(b"text <|im_start|>")
    assert table.inverse().apply(b"<end_of_turn>") == b"<|im_end|>"
    assert Replacements({}).stable(b"<|") == 2


def test_complete_utf8_cuts_before_a_split_character():
    data = "aé東🎉".encode()
    assert complete_utf8(data) == len(data)
    for cut in range(1, len(data)):
        head = data[:cut]
        assert head[:complete_utf8(head)].decode("utf-8")              # whole characters only
        assert len(head) - complete_utf8(head) < 4


@pytest.fixture(scope="module")
def vocabs(tmp_path_factory):
    """Two synthetic SentencePiece vocabularies: the same pieces under other ids (a shuffled copy)."""
    folder = tmp_path_factory.mktemp("mapping")
    with Model(write_synthetic_model(folder / "a.gguf"), vocab_only=True) as a, \
            Model(write_synthetic_model(folder / "b.gguf", shuffle_vocab=3), vocab_only=True) as b:
        assert a.vocab.incompatibility(b.vocab) is not None
        yield a.vocab, b.vocab


def feed(mapping: TokenMapping, history: np.ndarray, steps) -> tuple[np.ndarray, list[int]]:
    """Give the history to ``mapping`` in growing prefixes; return the final draft tokens and each call's
    count of unchanged tokens."""
    unchanged, tokens = [], None
    for end in steps:
        tokens, same = mapping.update(history[:end])
        unchanged.append(same)
    return tokens.copy(), unchanged


def mapped_text(vocab, tokens) -> bytes:
    return b"".join(vocab.piece(int(t), special=True) for t in tokens if t != vocab.bos)


def tokens_for(vocab, text: str) -> np.ndarray:
    """Tokens whose pieces spell exactly ``text`` (longest piece first), as a model continuing a text emits
    them: tokenize() would add SentencePiece's space prefix."""
    table = {}
    for token in range(vocab.n_tokens):
        if not vocab.is_control(token):
            table.setdefault(vocab.piece(token), token)
    data, out, i = text.encode(), [], 0
    while i < len(data):
        n = next(n for n in range(min(8, len(data) - i), 0, -1) if data[i:i + n] in table)
        out.append(table[data[i:i + n]])
        i += n
    return np.array(out, dtype=np.int32)


@pytest.mark.parametrize("stride", [1, 3, 17])
def test_the_draft_view_grows_with_the_history_and_equals_a_fresh_tokenization(vocabs, stride):
    target, draft = vocabs
    history = target.tokenize(TEXT)
    mapping = TokenMapping(target, draft, {})
    feed(mapping, history, range(1, len(history) + 1, stride))
    tokens, _ = mapping.update(history)
    assert np.array_equal(tokens, draft.tokenize(TEXT))
    assert mapped_text(draft, tokens) == mapped_text(target, history)


def test_each_update_tokenizes_only_a_short_tail_again(vocabs):
    """With a space prefix, tokenizing restarts at a space: a few tokens back, never the whole history."""
    target, draft = vocabs
    history = target.tokenize(TEXT * 4)
    mapping = TokenMapping(target, draft, {})
    redone = []
    for end in range(1, len(history) + 1):
        tokens, unchanged = mapping.update(history[:end])
        redone.append(len(tokens) - unchanged)
    quarter = len(redone) // 4                    # the same text four times: the work must not grow
    assert max(redone[3 * quarter:]) <= max(redone[quarter:2 * quarter]) <= 24
    assert sum(redone) <= 10 * len(history)


def test_a_character_split_across_tokens_is_held_back_until_complete(vocabs):
    target, draft = vocabs
    history = target.tokenize("price: 東京")
    pieces = [target.piece(int(t)) for t in history]
    split = next(i for i, p in enumerate(pieces) if p and p[0] >= 0xE0)      # the first byte of 東 alone
    mapping = TokenMapping(target, draft, {})
    tokens, _ = mapping.update(history[:split + 1])
    assert mapped_text(draft, tokens) == b" price: "     # the lead byte waits
    # A proposal must complete the held character; the rest comes back as target tokens.
    rest = "東京 is big"
    back = mapping.back(tokens_for(draft, rest), history[:split + 1], 64, complete=True)
    assert mapped_text(target, back) == rest.encode()[1:]
    assert mapping.back(tokens_for(draft, " nope"), history[:split + 1], 64, complete=True).size == 0


def test_draft_tokens_come_back_as_target_tokens_that_continue_the_history(vocabs):
    target, draft = vocabs
    text = "the prime numbers are"
    history = target.tokenize(text)
    mapping = TokenMapping(target, draft, {})
    mapping.update(history)
    proposal = tokens_for(draft, " two, three and five")
    back = mapping.back(proposal, history, 64, complete=True)
    whole = target.tokenize(text + " two, three and five")
    assert np.array_equal(np.concatenate([history, back]), whole)
    # Unless the draft ended the turn, its last target token is dropped; n_max cuts.
    assert np.array_equal(mapping.back(proposal, history, 64, complete=False), back[:-1])
    assert np.array_equal(mapping.back(proposal, history, 2, complete=True), back[:2])


def test_a_proposal_that_merges_into_the_last_token_is_tokenized_on_its_own(vocabs):
    target, draft = vocabs
    history = target.tokenize("the pri")                 # ends inside a word
    mapping = TokenMapping(target, draft, {})
    mapping.update(history)
    back = mapping.back(tokens_for(draft, "me"), history, 64, complete=True)
    assert mapped_text(target, history) + mapped_text(target, back) == b" the prime"


def test_replacements_translate_both_ways(vocabs):
    target, draft = vocabs
    history = target.tokenize("<|im_start|>user\nhi<|im_end|>\n")
    mapping = TokenMapping(target, draft, {"<|im_start|>": "[[", "<|im_end|>": "]]"})
    tokens, _ = mapping.update(history)
    assert mapped_text(draft, tokens) == b" [[user\nhi]]\n"
    back = mapping.back(tokens_for(draft, "[[assistant"), history, 64, complete=True)
    assert mapped_text(target, back).endswith(b"<|im_start|>assistant")
