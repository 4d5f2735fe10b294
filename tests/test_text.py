"""Streaming text: whole UTF-8 characters, stop strings held back until decided."""

from specframe.text import TextStream


def feed(stream, pieces):
    return [stream.push(p) for p in pieces]


def test_multibyte_characters_split_across_tokens_come_out_whole():
    data = "東京 🎉".encode()
    stream = TextStream()
    out = feed(stream, [data[i:i + 1] for i in range(len(data))])
    assert "".join(out) + stream.finish() == "東京 🎉"
    assert all(piece in ("", "東", "京", " ", "🎉") for piece in out)


def test_invalid_bytes_become_replacement_characters():
    stream = TextStream()
    assert "".join(feed(stream, [b"a\xff", b"b"])) + stream.finish() == "a\ufffdb"


def test_stop_string_across_pieces_is_never_emitted():
    stream = TextStream(["</answer>"])
    out = feed(stream, [b"42 </", b"ans", b"wer> more"])
    assert out == ["42 ", "", ""] and stream.stopped
    assert stream.push(b"later") == "" and stream.finish() == ""


def test_text_that_only_looked_like_a_stop_is_released():
    stream = TextStream(["STOP"])
    assert feed(stream, [b"go ST", b"OP", b""]) == ["go ", "", ""]
    stream = TextStream(["STOP"])
    assert feed(stream, [b"go ST", b"ART"]) == ["go ", "START"]
    assert stream.finish() == ""
    stream = TextStream(["STOP"])
    assert stream.push(b"end ST") == "end " and stream.finish() == "ST"
