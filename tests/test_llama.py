"""The binding and wrappers on a real (synthetic) model: tokenizer, decoding, KV rollback, errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specframe.errors import ModelError, SpecframeError
from specframe.llama import Context, ContextFullError, Model, Segment
from specframe.llama._native import native
from specframe.llama.scans import top2_margins
from specframe.testing.synthetic import write_synthetic_model


@pytest.fixture(scope="module")
def model(target_path):
    with Model(target_path) as m:
        yield m


def test_tokenize_roundtrip_with_multibyte_text(model):
    text = "hello world, naïve café — 東京 🎉"
    tokens = model.vocab.tokenize(text)
    assert tokens.dtype == np.int32 and tokens[0] == model.vocab.bos
    assert model.vocab.detokenize(tokens, remove_special=True) in (text, " " + text)  # SPM's prefix space
    # Pieces carry SentencePiece's space prefix; byte tokens split the multi-byte characters.
    pieces = [model.vocab.piece(int(t)) for t in tokens[1:]]
    assert any(len(p) == 1 and p[0] >= 0x80 for p in pieces)
    assert b"".join(pieces).decode() == " " + text


def test_bos_is_added_when_the_model_asks(model):
    vocab = model.vocab
    assert vocab.add_bos and vocab.tokenize("hi")[0] == vocab.bos
    assert vocab.tokenize("hi", add_special=False)[0] != vocab.bos
    assert vocab.is_eog(vocab.eos) and not vocab.is_eog(vocab.tokenize("a", add_special=False)[0])


def test_chat_template_is_applied(model):
    text = model.apply_chat_template([("user", "hi there")])
    assert text == "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"


def test_decode_returns_logits_for_every_position(model):
    with Context(model, n_ctx=64, n_batch=16) as ctx:
        tokens = model.vocab.tokenize("the cat sat")
        logits = ctx.decode(tokens, 0, all_logits=True)
        assert logits.shape == (len(tokens), model.vocab.n_tokens)
        assert logits.dtype == np.float32 and np.isfinite(logits).all()
        assert ctx.n_past == len(tokens)


def test_long_input_is_split_into_batches(model):
    tokens = model.vocab.tokenize("abc def ghi " * 20)
    assert len(tokens) > 16
    with Context(model, n_ctx=256, n_batch=16) as chunked, Context(model, n_ctx=256, n_batch=256) as whole:
        split = chunked.decode(tokens, 0).copy()
        at_once = whole.decode(tokens, 0)
        # Different batch shapes take different CPU kernels: equal up to rounding, same choice.
        np.testing.assert_allclose(split, at_once, atol=0.05)
        assert split.argmax() == at_once.argmax()


def test_rollback_leaves_the_context_as_if_only_accepted_tokens_were_decoded(model):
    """Decode a prefix and a rejected draft, roll back, continue: logits equal a context that never saw it."""
    prefix = model.vocab.tokenize("speculative decoding keeps")
    rejected = model.vocab.tokenize(" something wrong here", add_special=False)
    accepted = model.vocab.tokenize(" the output", add_special=False)
    with Context(model, n_ctx=128) as spec, Context(model, n_ctx=128) as plain:
        spec.decode(prefix, 0)
        spec.decode(np.concatenate([accepted[:2], rejected]), len(prefix), all_logits=True)
        spec.truncate(len(prefix) + 2)
        assert spec.n_past == len(prefix) + 2
        got = spec.decode(accepted[2:], len(prefix) + 2, all_logits=True).copy()
        plain.decode(np.concatenate([prefix, accepted[:2]]), 0)
        want = plain.decode(accepted[2:], len(prefix) + 2, all_logits=True)
        np.testing.assert_array_equal(got, want)


def test_bad_token_ids_raise_instead_of_crashing(model):
    with Context(model, n_ctx=32) as ctx:
        with pytest.raises(ValueError, match="token ids"):
            ctx.decode([model.vocab.n_tokens], 0)
        with pytest.raises(ValueError, match="token ids"):
            ctx.decode([-1], 0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.vocab.piece(10**9)


def test_context_full_is_reported(model):
    with Context(model, n_ctx=32) as ctx:   # llama.cpp rounds n_ctx up (to 256 here)
        with pytest.raises(ContextFullError, match=f"n_ctx={ctx.n_ctx}"):
            ctx.decode(np.full(ctx.n_ctx + 1, 5, dtype=np.int32), 0)
        ctx.decode(np.full(ctx.n_ctx - 1, 5, dtype=np.int32), 0)
        with pytest.raises(ContextFullError):
            ctx.decode([5, 5], ctx.n_ctx - 1)


def test_missing_and_invalid_model_files_give_clear_errors(tmp_path):
    with pytest.raises(ModelError, match="not found"):
        Model(tmp_path / "nope.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelError, match="could not load"):
        Model(junk)


def test_closing_a_model_closes_its_contexts_first(target_path):
    model = Model(target_path)
    ctx = Context(model, n_ctx=32)
    model.close()
    with pytest.raises(SpecframeError, match="is closed"):
        ctx.decode([5], 0)
    for use_of_its_memory in (ctx.clear, lambda: ctx.truncate(0), ctx.positions, lambda: ctx.can_move):
        with pytest.raises(SpecframeError, match="is closed"):    # not a call through a freed pointer
            use_of_its_memory()
    ctx.close()
    model.close()   # idempotent


def test_vocab_compatibility_follows_llama_cpp(model, draft_path, tmp_path):
    with Model(draft_path, vocab_only=True) as same:
        assert model.vocab.incompatibility(same.vocab) is None
    from specframe.testing.synthetic import SyntheticShape
    other = write_synthetic_model(tmp_path / "other.gguf", shape=SyntheticShape(n_layer=1))
    with Model(other, vocab_only=True) as m:
        assert model.vocab.incompatibility(m.vocab) is None   # weights differ, vocabulary does not


def test_sequences_in_one_batch_are_evaluated_and_rolled_back_apart(model):
    a = model.vocab.tokenize("speculative decoding keeps")
    b = model.vocab.tokenize("the quick brown fox jumps over")
    more = model.vocab.tokenize(" the output", add_special=False)
    with Context(model, n_ctx=64, n_seq_max=2) as both, Context(model, n_ctx=64) as alone:
        assert both.n_ctx == 256 and both.n_seq_max == 2        # per sequence, rounded up as llama.cpp does
        rows_a, rows_b = both.decode_batch([Segment(0, a, 0, len(a)), Segment(1, b, 0, 1)])
        assert rows_a.shape == (len(a), model.vocab.n_tokens) and rows_b.shape == (1, model.vocab.n_tokens)
        want_b = alone.decode(b, 0)
        np.testing.assert_array_equal(rows_b, want_b)            # a buffer of its own: the same arithmetic
        both.truncate(2, seq=0)                                  # sequence 0 only
        assert both.positions(0) == 2 and both.positions(1) == len(b)
        (got,) = both.decode_batch([Segment(0, more, 2, len(more))])
        got = got.copy()
        alone.clear()
        want = alone.decode(np.concatenate([a[:2], more]), 0, all_logits=True)[2:]
        np.testing.assert_array_equal(got, want)
        with pytest.raises(ValueError, match="sequence 2"):
            both.decode_batch([Segment(2, a, 0, 1)])


def test_greedy_choices_made_on_the_host_stop_at_the_first_that_differs_from_the_next_token(model):
    """The host's choices (hot_loops.c) are the rows' argmax, up to the first row whose choice is not the token fed
    after it: a segment fed its own greedy continuation gets every row's, one fed a wrong token after its k-th row
    gets k + 1; other sequences' rows come out as logits."""
    prompt = model.vocab.tokenize("speculative decoding keeps")
    other = model.vocab.tokenize("the quick brown fox jumps over")
    with Context(model, n_ctx=64, n_seq_max=2) as context:
        context.decode(prompt[:-1], 0)
        fed = np.full(6, prompt[-1], dtype=np.int32)
        for _ in range(6):      # each pass makes one more fed token the choice of the row before it
            context.truncate(len(prompt) - 1)
            (rows,) = context.decode_batch([Segment(0, fed, len(prompt) - 1, 6)])
            want = rows.argmax(axis=1).tolist()
            fed = np.array([prompt[-1], *want[:5]], dtype=np.int32)
        assert fed[1:].tolist() == want[:5]
        context.choose_on_host(0, True)
        context.truncate(len(prompt) - 1)
        (mine,) = context.decode_batch([Segment(0, fed, len(prompt) - 1, 6)])
        assert mine == want
        context.truncate(len(prompt) - 1)
        mine, theirs = context.decode_batch([Segment(0, fed, len(prompt) - 1, 6), Segment(1, other, 0, 2)])
        assert isinstance(mine, list) and 1 <= len(mine) <= 6 and theirs.shape == (2, model.vocab.n_tokens)
        wrong = fed.copy()
        wrong[3] = (wrong[3] + 1) % model.vocab.n_tokens      # row 2's choice is not the token fed after it
        context.truncate(len(prompt) - 1)
        (mine,) = context.decode_batch([Segment(0, wrong, len(prompt) - 1, 6)])
        assert mine == want[:3]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 300), st.data())
def test_the_host_greedy_choice_is_numpys_argmax(n_rows, width, data):
    """specframe_greedy_choices on rows with ties, infinities and widths off its block size: numpy.argmax's
    choice (the first largest) for every row, when each row's choice is the next token fed."""
    values = st.sampled_from([-np.inf, -2.5, -0.0, 0.0, 1.0, 1.5, np.inf]) | st.floats(-1e6, 1e6, width=32)
    rows = np.array(data.draw(st.lists(st.lists(values, min_size=width, max_size=width), min_size=n_rows,
                                       max_size=n_rows)), dtype=np.float32)
    want = rows.argmax(axis=1).astype(np.int32)
    ffi, lib = native()
    out = ffi.new("int32_t[]", n_rows)
    written = lib.specframe_greedy_choices(ffi.from_buffer("float[]", rows), n_rows, width,
                                           ffi.from_buffer("int32_t[]", want[:-1].copy()), out)
    assert ffi.unpack(out, written) == want.tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.integers(2, 200), st.data())
def test_a_rows_top2_margin_is_its_largest_less_its_second_largest(n_rows, width, data):
    """top2_margins (hot_loops.c) against numpy's partition: ties give 0, infinities and widths off the block size
    included."""
    values = st.sampled_from([-np.inf, -2.5, 0.0, 1.0, np.inf]) | st.floats(-1e6, 1e6, width=32)
    rows = np.array(data.draw(st.lists(st.lists(values, min_size=width, max_size=width), min_size=n_rows,
                                       max_size=n_rows)), dtype=np.float32)
    top2 = np.partition(rows, -2, axis=1)[:, -2:]
    with np.errstate(invalid="ignore"):       # inf - inf
        want = top2[:, 1] - top2[:, 0]
    np.testing.assert_array_equal(np.array(top2_margins(rows), dtype=np.float32), want)


def test_greedy_choices_made_on_the_device_are_the_rows_argmax(model):
    a = model.vocab.tokenize("speculative decoding keeps")
    b = model.vocab.tokenize("the quick brown fox jumps over")
    with Context(model, n_ctx=64, n_seq_max=2) as both, Context(model, n_ctx=64, n_seq_max=2) as host:
        segments = [Segment(0, a, 0, len(a)), Segment(1, b, 0, 2)]
        want_a, want_b = (rows.argmax(axis=1) for rows in host.decode_batch(segments))
        both.choose_on_device(0, True)           # sequence 0 on the device, sequence 1 as before
        assert both.chooses_on_device(0) and not both.chooses_on_device(1)
        got_a, rows_b = both.decode_batch(segments)
        assert got_a == want_a.tolist()
        assert rows_b.shape == (2, model.vocab.n_tokens)
        np.testing.assert_array_equal(rows_b.argmax(axis=1), want_b)
        both.choose_on_device(0, False)          # back to rows of logits
        both.truncate(0, 0)
        (rows_a,) = both.decode_batch([Segment(0, a, 0, len(a))])
        assert rows_a.shape == (len(a), model.vocab.n_tokens)
        np.testing.assert_array_equal(rows_a.argmax(axis=1), want_a)
