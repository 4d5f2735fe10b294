"""An editor's session of fill-in-the-middle requests, as llama.vscode and llama.vim send them to ``POST /infill``.

The story, scripted from real files: the user writes the file ``path`` (which holds what they end up with) from
``start_line`` downward. At each completion request the cursor sits on a line L after the user typed its
indentation and the first few characters of its text; the rest of that line is what they are about to write, so it
is in neither the prompt nor the suffix (it is deleted). The lines above L and below it are the file's. Between
requests the cursor moves down 1 to 3 lines (to the next line with something to type), so the prefix grows and,
once it holds ``n_prefix`` lines, slides, and the suffix window slides with it.

The bodies are the clients':

- ``input_prefix``: the ``n_prefix`` lines above the cursor, joined with "\\n", plus a final "\\n";
- ``prompt``: the cursor's line up to the cursor;
- ``input_suffix``: the rest of the cursor's line (here "") + "\\n" + the ``n_suffix`` lines below, joined with
  "\\n", + "\\n";
- ``n_indent``: the cursor line's indentation, in characters (spaces and tabs alike, as llama-server counts it);
- ``input_extra``: llama.vim's ring buffer, up to ``ring_chunks`` chunks ``{"text", "filename"}`` of about
  ``chunk_lines`` lines of the other files (``extra_paths``). Every few completions a chunk joins it (chunks more than
  90% alike to it leave it, the oldest leaves a full one) and a warm-up request is sent
  first, as llama.vim does whenever a chunk joins: the ring alone, ``n_predict`` 0, no samplers, so that the server
  has the extra context evaluated before the next completion.

A completion's body is llama.vscode's (src/llama-server.ts): ``top_k`` 40, ``top_p`` 0.99, ``samplers`` top_k,
top_p, infill, not streamed, ``cache_prompt``, ``n_indent``. Two departures, each chosen by a keyword:

- ``greedy`` (the default) adds ``"temperature": 0.0`` and puts the temperature sampler before infill. llama.cpp
  applies temperature 0 as greedy (only the most likely token is left), so any two servers that read the prompt
  alike produce the target's greedy completion: their completions are comparable text for text. With
  ``greedy=False`` the body is llama.vscode's exactly, plus a fixed ``seed``.
- ``time_limits`` (off by default) sends llama.vscode's time caps, ``t_max_prompt_ms`` 500 and ``t_max_predict_ms``
  1000 (the warm-ups: 1 and 1). Off, no request carries them: a benchmark must compare whole completions, not what
  each server managed within a time cap.

Deterministic: the same arguments (``seed`` included) and the same files give the same requests.
"""

from __future__ import annotations

import os
import pathlib
import random
from dataclasses import dataclass
from typing import Iterable, Sequence

WARM_UP = "warm-up"
COMPLETION = "completion"
TOP_K, TOP_P = 40, 0.99                                       # llama.vscode's
INFILL_SAMPLERS = ["top_k", "top_p", "infill"]                # llama.vscode's
GREEDY_SAMPLERS = ["top_k", "top_p", "temperature", "infill"]
COMPLETION_TIME_LIMITS = {"t_max_prompt_ms": 500, "t_max_predict_ms": 1000}   # llama.vscode's defaults
WARM_UP_TIME_LIMITS = {"t_max_prompt_ms": 1, "t_max_predict_ms": 1}
ALIKE = 0.9        # llama.vim evicts ring chunks more alike than this (the share of lines two chunks have in common)
MIN_CHUNK_LINES = 3  # llama.vim does not pick smaller chunks


@dataclass(frozen=True)
class EditorRequest:
    """One request of a session: what it is, its body, and where the cursor was (a completion's)."""

    kind: str                  # WARM_UP or COMPLETION
    body: dict
    line: int | None = None    # the cursor's line, counting from 1 as editors do
    column: int | None = None  # characters on that line before the cursor (the prompt's length)


def request_kind(body: dict) -> str:
    """What a request body of a session is: "warm-up" (``n_predict`` 0: the ring buffer evaluated ahead of the next
    completion, nothing generated) or "completion"."""
    return WARM_UP if body.get("n_predict") == 0 else COMPLETION


def editor_session(path: str | os.PathLike, extra_paths: Iterable[str | os.PathLike] = (), **options) -> list[dict]:
    """The request bodies of an editor session in the order sent (see :func:`editor_requests` for the options)."""
    return [request.body for request in editor_requests(path, extra_paths, **options)]


def editor_requests(path: str | os.PathLike, extra_paths: Iterable[str | os.PathLike] = (), *,
                    start_line: int | None = None, requests: int = 10, n_prefix: int = 256, n_suffix: int = 64,
                    chunk_lines: int = 32, ring_chunks: int = 16, chunk_every: tuple[int, int] = (2, 4),
                    typed: tuple[int, int] = (1, 8), n_predict: int = 128, seed: int = 0, greedy: bool = True,
                    time_limits: bool = False, root: str | os.PathLike | None = None) -> list[EditorRequest]:
    """An editor session of ``requests`` completions of ``path`` (warm-ups come in addition), in the order sent.

    ``start_line``: the first completion's line, counting from 1 (the next line with text to type, when that one has
    none); by default the line after the first ``n_prefix`` lines, so that the prefix slides from the first request
    on (line 1 when the file is too short for that). ``extra_paths``: the other files the ring buffer takes chunks
    of (none: no ring, no warm-ups); their ``filename`` is the path relative to ``root`` when given, else as given.
    ``chunk_every``: the range of completions between two chunks joining the ring (the first joins before the first
    completion). ``typed``: the range of characters typed on a line after its indentation, before the request (at
    most all but one of the line's). Raises ValueError when the file runs out before ``requests`` completions.
    """
    if requests < 1 or n_predict < 1 or n_prefix < 0 or n_suffix < 0 or chunk_lines < 1 or ring_chunks < 1:
        raise ValueError("requests, n_predict, chunk_lines and ring_chunks must be >= 1, n_prefix and n_suffix >= 0")
    if not 1 <= chunk_every[0] <= chunk_every[1] or not 1 <= typed[0] <= typed[1]:
        raise ValueError("chunk_every and typed must be ranges (low, high) with 1 <= low <= high")
    rng = random.Random(seed)
    lines = _lines(path)
    extras = [(_name(p, root), _lines(p)) for p in extra_paths]
    extras = [(name, text) for name, text in extras if len(text) >= MIN_CHUNK_LINES]
    if start_line is None:
        start_line = n_prefix + 1 if n_prefix + 1 + 3 * requests + n_suffix <= len(lines) else 1
    if start_line < 1:
        raise ValueError(f"start_line must be >= 1, not {start_line}")

    ring: list[dict] = []
    session: list[EditorRequest] = []
    cursor = start_line - 1                       # 0-based from here on
    next_chunk = 0                                # completions until a chunk joins the ring
    for made in range(requests):
        line = _typeable(lines, cursor, typed[0])
        if line is None:
            raise ValueError(f"{path}: no line left to type on for completion {made + 1} of {requests} (start_line "
                             f"{start_line}, {len(lines)} lines)")
        if extras and next_chunk == 0:
            if _join(ring, rng, extras, chunk_lines, ring_chunks):
                session.append(EditorRequest(WARM_UP, _warm_up(ring, time_limits)))
            next_chunk = rng.randint(*chunk_every)
        next_chunk -= 1

        text = lines[line]
        indent = _indent(text)
        column = indent + rng.randint(typed[0], min(typed[1], len(text.rstrip()) - indent - 1))
        body = {
            "input_prefix": "\n".join(lines[max(0, line - n_prefix):line]) + "\n",
            "input_suffix": "\n" + "\n".join(lines[line + 1:line + 1 + n_suffix]) + "\n",   # the line's rest: ""
            "input_extra": [dict(chunk) for chunk in ring],
            "prompt": text[:column],
            "n_predict": n_predict,
            "top_k": TOP_K,
            "top_p": TOP_P,
            "stream": False,
            "samplers": list(GREEDY_SAMPLERS if greedy else INFILL_SAMPLERS),
            "cache_prompt": True,
            "n_indent": indent,
        }
        if time_limits:
            body |= COMPLETION_TIME_LIMITS
        body |= {"temperature": 0.0} if greedy else {"seed": seed}
        session.append(EditorRequest(COMPLETION, body, line + 1, column))
        cursor = line + rng.randint(1, 3)
    return session


def _lines(path: str | os.PathLike) -> list[str]:
    """A file's lines as an editor shows them (no line ends; no empty line after a final newline)."""
    text = pathlib.Path(path).read_text(encoding="utf-8").replace("\r\n", "\n")
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _name(path: str | os.PathLike, root: str | os.PathLike | None) -> str:
    if root is None:
        return os.fspath(path)
    return pathlib.Path(os.path.relpath(pathlib.Path(path).resolve(), pathlib.Path(root).resolve())).as_posix()


def _typeable(lines: Sequence[str], line: int, least: int) -> int | None:
    """The first line from ``line`` on with more than ``least`` characters after its indentation: one the user can
    type ``least`` of and still have some left to complete."""
    for at in range(line, len(lines)):
        if len(lines[at].rstrip()) - _indent(lines[at]) > least:
            return at
    return None


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" \t"))


def _join(ring: list[dict], rng: random.Random, extras: list[tuple[str, list[str]]], chunk_lines: int,
          ring_chunks: int) -> bool:
    """A chunk of an extra file joins the ring (llama.vim's pick_chunk and ring_update): whether one did (not when
    every try drew one the ring holds)."""
    for _ in range(8):
        name, lines = extras[rng.randrange(len(extras))]
        if len(lines) <= chunk_lines:
            chunk = lines
        else:
            start = rng.randint(0, len(lines) - chunk_lines)
            chunk = lines[start:start + chunk_lines]
        text = "\n".join(chunk) + "\n"
        if any(c["text"] == text for c in ring):
            continue
        ring[:] = [c for c in ring if _alike(c["text"], text) <= ALIKE]
        if len(ring) >= ring_chunks:
            del ring[0]
        ring.append({"text": text, "filename": name})
        return True
    return False


def _alike(a: str, b: str) -> float:
    """llama.vim's chunk similarity: twice the lines in common over the lines of both."""
    la, lb = a.splitlines(), b.splitlines()
    other = set(lb)
    common = sum(1 for line in la if line in other)
    return 2 * common / max(1, len(la) + len(lb))


def _warm_up(ring: list[dict], time_limits: bool) -> dict:
    body = {"input_prefix": "", "input_suffix": "", "input_extra": [dict(chunk) for chunk in ring], "prompt": "",
            "n_predict": 0, "samplers": [], "cache_prompt": True}
    if time_limits:
        body |= WARM_UP_TIME_LIMITS
    return body | {"response_fields": [""]}
