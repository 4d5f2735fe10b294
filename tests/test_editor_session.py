"""The scripted editor session (specframe.testing.editor_session): requests shaped as llama.vscode and llama.vim send
them to /infill, from real files. No model."""

import pathlib
import random

import pytest

from specframe.testing.editor_session import (
    COMPLETION,
    WARM_UP,
    editor_requests,
    editor_session,
    request_kind,
)


def source(path: pathlib.Path, seed: int, n: int) -> pathlib.Path:
    """A Python-like file of ``n`` distinct lines: indented bodies, blank lines between functions."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        if i % 12 == 0:
            lines += ["", f"def function_{seed}_{i}(argument, other=None):"]
        else:
            lines.append(" " * rng.choice((4, 8)) + f"value_{seed}_{i} = argument.method_{i}(other) + {rng.random()}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def files(tmp_path):
    return (source(tmp_path / "edited.py", 0, 600),
            [source(tmp_path / "one.py", 1, 200), source(tmp_path / "two.py", 2, 90)])


def test_a_session_is_shaped_as_the_editors_send_it(files):
    path, extras = files
    lines = path.read_text().split("\n")[:-1]
    text = path.read_text()
    extra_texts = {str(p): p.read_text() for p in extras}
    session = editor_requests(path, extras, requests=24, n_predict=64)
    completions = [r for r in session if r.kind == COMPLETION]
    warm_ups = [r for r in session if r.kind == WARM_UP]

    assert len(completions) == 24 and len(warm_ups) >= 4 and session[0].kind == WARM_UP
    assert [request_kind(r.body) for r in session] == [r.kind for r in session]
    assert editor_session(path, extras, requests=24, n_predict=64) == [r.body for r in session]
    cursor = [r.line for r in completions]
    assert cursor[0] == 257                              # by default the prefix is full from the first request
    # down 1 to 3 lines, then on past lines with nothing to type
    assert all(0 < b - a <= 3 or all(len(lines[i].strip()) <= 1 for i in range(a + 3, b - 1))
               for a, b in zip(cursor, cursor[1:]))

    for request in completions:
        body, line = request.body, lines[request.line - 1]
        # the prefix is the file's text up to where line L starts, at most 256 lines of it
        start = len("\n".join(lines[:request.line - 1]) + "\n")
        assert text[:start].endswith(body["input_prefix"]) and body["input_prefix"].endswith("\n")
        assert body["input_prefix"].count("\n") == min(256, request.line - 1)
        # the prompt is what the user typed of line L: its indentation and some of its text, never all of it
        assert line.startswith(body["prompt"]) and len(body["prompt"]) < len(line.rstrip())
        assert body["prompt"].strip() and len(body["prompt"]) == request.column
        assert body["n_indent"] == len(line) - len(line.lstrip())
        # the suffix: the rest of line L is deleted; the 64 lines below follow
        assert body["input_suffix"] == "\n" + "\n".join(lines[request.line:request.line + 64]) + "\n"
        assert body["n_predict"] == 64 and body["cache_prompt"] is True and body["stream"] is False
        assert body["temperature"] == 0.0 and body["samplers"] == ["top_k", "top_p", "temperature", "infill"]
        assert "t_max_prompt_ms" not in body and "t_max_predict_ms" not in body

    for request in session:
        chunks = request.body["input_extra"]
        assert 1 <= len(chunks) <= 16
        for chunk in chunks:             # each a run of whole lines of an extra file
            assert chunk["filename"] in extra_texts and chunk["text"].endswith("\n")
            assert ("\n" + chunk["text"]) in ("\n" + extra_texts[chunk["filename"]])
            assert chunk["text"].count("\n") == 32
    for warm_up in warm_ups:
        assert warm_up.body == {"input_prefix": "", "input_suffix": "", "input_extra": warm_up.body["input_extra"],
                                "prompt": "", "n_predict": 0, "samplers": [], "cache_prompt": True,
                                "response_fields": [""]}
    # a warm-up carries the ring the next completion sends
    for before, after in zip(session, session[1:]):
        if before.kind == WARM_UP:
            assert after.kind == COMPLETION and after.body["input_extra"] == before.body["input_extra"]


def test_the_prefix_slides_and_the_ring_fills(files):
    path, extras = files
    session = editor_requests(path, extras, start_line=1, requests=60, n_prefix=40, n_suffix=8, chunk_every=(1, 1),
                              ring_chunks=5)
    completions = [r.body for r in session if r.kind == COMPLETION]
    sizes = [b["input_prefix"].count("\n") for b in completions]
    assert sizes[0] <= 1 and 40 in sizes and sizes[-1] == 40     # grows, then slides at 40 lines
    assert max(len(b["input_extra"]) for b in completions) == 5
    rings = [[c["text"] for c in b["input_extra"]] for b in completions]
    assert any(a != b and a[1:] == b[:-1] for a, b in zip(rings, rings[1:]))   # the oldest chunk left


def test_a_session_is_the_same_for_a_seed_and_another_for_another(files):
    path, extras = files
    first = editor_session(path, extras, requests=12, seed=3)
    assert editor_session(path, extras, requests=12, seed=3) == first
    assert editor_session(path, extras, requests=12, seed=4) != first


def test_the_clients_own_bodies_without_greedy_and_with_time_limits(files):
    path, extras = files
    session = editor_requests(path, extras, requests=10, greedy=False, time_limits=True, seed=7)
    completion = next(r.body for r in session if r.kind == COMPLETION)
    assert set(completion) == {"input_prefix", "input_suffix", "input_extra", "prompt", "n_predict", "top_k", "top_p",
                               "stream", "samplers", "cache_prompt", "n_indent", "t_max_prompt_ms",
                               "t_max_predict_ms", "seed"}
    assert completion["samplers"] == ["top_k", "top_p", "infill"] and completion["seed"] == 7
    assert (completion["top_k"], completion["top_p"]) == (40, 0.99)
    assert (completion["t_max_prompt_ms"], completion["t_max_predict_ms"]) == (500, 1000)
    warm_up = session[0].body
    assert (warm_up["t_max_prompt_ms"], warm_up["t_max_predict_ms"]) == (1, 1)


def test_a_session_without_extra_files_sends_no_warm_up(files):
    path, _ = files
    session = editor_requests(path, requests=10)
    assert [r.kind for r in session] == [COMPLETION] * 10
    assert all(r.body["input_extra"] == [] for r in session)


def test_filenames_are_relative_to_a_root_when_given(files, tmp_path):
    path, extras = files
    session = editor_session(path, extras, requests=10, root=tmp_path)
    assert {c["filename"] for b in session for c in b["input_extra"]} <= {"one.py", "two.py"}


def test_a_file_too_short_for_the_session_is_refused(files):
    path, extras = files
    n_lines = path.read_text().count("\n")
    with pytest.raises(ValueError, match="no line left"):
        editor_requests(path, extras, start_line=n_lines - 10, requests=10)


def test_a_real_module_of_this_repository_makes_a_session():
    repo = pathlib.Path(__file__).resolve().parent.parent
    session = editor_requests(repo / "specframe" / "drafting" / "chain.py",
                              [repo / "specframe" / "drafting" / "protocol.py", repo / "specframe" / "sequence.py"],
                              requests=24, n_predict=64, root=repo)
    assert sum(r.kind == COMPLETION for r in session) == 24
    assert {c["filename"] for r in session for c in r.body["input_extra"]} <= {"specframe/drafting/protocol.py",
                                                                             "specframe/sequence.py"}
