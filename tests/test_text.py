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


# --- an editor's indentation limit (llama-server's n_indent) -----------------------------------------------------

def test_a_line_indented_less_than_n_indent_stops_the_stream_and_is_cut():
    stream = TextStream(indent=4)
    out = feed(stream, [b"x = 1\n", b"    y = 2\n", b"  z = 3\n", b"    w"])
    assert "".join(out) == "x = 1\n    y = 2\n  " and stream.stopped and stream.underindented   # llama-server's cut
    assert stream.push(b"    more") == "" and stream.finish() == ""
    stream = TextStream(indent=4)
    assert stream.push(b"a\n    b\n   c") == "a\n    b\n   " and stream.underindented     # one space short


def test_the_first_line_is_free_and_tabs_count_as_indentation():
    stream = TextStream(indent=2)
    assert stream.push(b"return x") == "return x"      # the rest of the cursor's line
    assert stream.push(b"\n\t\tif y:\n  z") == "\n\t\tif y:\n  z" and not stream.stopped


def test_a_blank_line_stops_an_indented_completion():
    stream = TextStream(indent=4)
    assert feed(stream, [b"a\n", b"\n    b"]) == ["a\n", ""] and stream.underindented
    stream = TextStream(indent=4)
    assert stream.push(b"a\n  \n    b") == "a\n  " and stream.stopped       # as is a shallow one of whitespace
    stream = TextStream(indent=4)
    assert stream.push(b"a\n    \n    b") == "a\n    \n    b"   # deep enough, as llama-server counts it


def test_a_lines_whitespace_is_held_until_its_indentation_is_known():
    stream = TextStream(indent=4)
    assert feed(stream, [b"a\n", b"  ", b"  ", b"b"]) == ["a\n", "", "", "    b"]
    stream = TextStream(indent=4)
    assert feed(stream, [b"a\n  ", b"b"]) == ["a\n", "  "] and stream.stopped


def test_finish_releases_the_held_whitespace_of_a_stream_that_did_not_stop():
    stream = TextStream(indent=4)
    assert stream.push(b"a\n  ") == "a\n" and stream.finish() == "  "
    assert not stream.stopped and not stream.underindented


def test_an_underindented_line_before_a_stop_string_in_the_same_piece_is_cut_first():
    stream = TextStream(["END"], indent=4)
    assert stream.push(b"a\n  b END c") == "a\n  " and stream.underindented and stream.stop_word == ""
    stream = TextStream(["END"], indent=4)
    assert stream.push(b"a\n    b END c") == "a\n    b " and not stream.underindented and stream.stop_word == "END"


def test_without_n_indent_nothing_is_held_or_cut():
    stream = TextStream()
    assert feed(stream, [b"a\n", b"\n", b"b"]) == ["a\n", "\n", "b"] and not stream.stopped


def test_the_stop_string_that_stopped_the_stream_is_recorded():
    stream = TextStream(["END", "STOP"], indent=2)
    assert stream.push(b"go\n  on STOP END") == "go\n  on " and stream.stop_word == "STOP"
    assert stream.stopped and not stream.underindented
    stream = TextStream(["ab", "b"])
    assert stream.push(b"xab") == "x" and stream.stop_word == "ab"    # the earliest in the text
    assert TextStream(["x"]).stop_word == ""
