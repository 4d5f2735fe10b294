"""Fill-in-the-middle prompts, laid out as llama-server lays them out for editors (llama.vim, llama.vscode).

Repository-level layout (Qwen2.5-Coder's, arXiv 2409.12186), from the vocabulary's FIM tokens:

    [FIM_REP]myproject\\n [FIM_SEP]file0\\n text0 ... [FIM_SEP]filename\\n [BOS] [FIM_PRE]prefix prompt
    [FIM_SUF]suffix [FIM_MID]

(``prompt``: the current line up to the cursor; BOS where the vocabulary adds one).

The prefix keeps its last 3/4 of a batch of tokens, the suffix its first quarter less the prompt; the other files'
chunks fill what the context leaves after a batch (and twice the server's -n, when set), the newest last. A vocabulary
without FIM_REP/FIM_SEP gets the chunks after a plain separator. Being llama-server's to the token, an editor's
prompts are the same on either server, and so is what a slot's memory can keep of them from one request to the next.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specframe.errors import ParamError
from specframe.llama import Vocab

PROJECT_NAME = "myproject\n"      # llama-server's placeholders: editors send neither a project nor the file's name
FILE_NAME = "filename\n"
CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"   # between chunks, for a vocabulary without FIM_SEP


@dataclass(frozen=True)
class ExtraChunk:
    """Text of another file (or of this one, away from the cursor) the editor sends as context."""

    text: str
    filename: str = "tmp"


def infill_prompt(vocab: Vocab, prefix: str, suffix: str, prompt: str = "", extra: list[ExtraChunk] | None = None,
                  *, n_batch: int, n_ctx: int, n_predict: int = -1) -> np.ndarray:
    """The prompt's token ids. ``n_predict`` is the server's (llama-server's -n, -1 by default, as the server passes
    it): the room it keeps for generation out of the other files' chunks. ParamError (naming ``input_prefix``) for a
    model without FIM tokens."""
    fim = vocab.fim
    if fim.pre is None or fim.suf is None or fim.mid is None:
        raise ParamError("input_prefix", f"this model cannot fill in the middle: its vocabulary has no FIM "
                                         f"{', '.join(fim.missing)} token (use a code model such as Qwen2.5-Coder)")

    def tokens(text: str, special: bool = False) -> list[int]:
        return vocab.tokenize(text, add_special=False, parse_special=special).tolist() if text else []

    extra_tokens: list[int] = []
    if fim.rep is not None:
        extra_tokens += [fim.rep, *tokens(PROJECT_NAME)]
    for chunk in extra or []:
        if fim.sep is not None:
            extra_tokens += [fim.sep, *tokens(chunk.filename + "\n")]
        else:
            extra_tokens += tokens(CHUNK_SEPARATOR)
        extra_tokens += tokens(chunk.text)
    if fim.sep is not None:
        extra_tokens += [fim.sep, *tokens(FILE_NAME)]

    prefix_tokens, suffix_tokens, prompt_tokens = tokens(prefix), tokens(suffix), tokens(prompt, special=True)
    n_prefix = min(len(prefix_tokens), 3 * (n_batch // 4))
    n_suffix = min(len(suffix_tokens), max(0, n_batch // 4 - (2 + len(prompt_tokens))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra_tokens))
    layout = [*extra_tokens[len(extra_tokens) - n_extra:], *([vocab.bos] if vocab.add_bos else [])]
    layout += [fim.pre, *prefix_tokens[len(prefix_tokens) - n_prefix:], *prompt_tokens]
    layout += [fim.suf, *suffix_tokens[:n_suffix], fim.mid]
    return np.asarray(layout, dtype=np.int32)
