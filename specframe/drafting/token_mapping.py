"""Token mapping (llama.cpp's former spec-replace; "universal assisted decoding" in HF): a draft model whose
vocabulary differs from the target's drafts through text.

The target's committed tokens become text; configured TARGET->DRAFT string replacements turn it into the draft's
dialect (chat-template markers are the usual case); the draft's tokenizer reads it. The draft's proposal comes
back the same way reversed: draft tokens -> text -> DRAFT->TARGET replacements -> the target's tokenizer, cut to
n_max. Both directions are incremental: the text only grows at its end, so only its last few tokens (which new
text can merge with) are tokenized again, and the draft model keeps the KV entries of every token that did not
change.

Text is handled as bytes, so a character split across tokens never breaks: an incomplete UTF-8 sequence at the
end of the history, or a possible start of a replacement key, is held back until the next tokens complete it.
"""

from __future__ import annotations

import re
from typing import Mapping

import numpy as np

from specframe.llama import Vocab

RETOKENIZE_TOKENS = 4   # the last tokens tokenized again when text is appended: merges reach no further back
_EMPTY = np.empty(0, dtype=np.int32)


def complete_utf8(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:                      # ASCII: complete
            return len(data)
        if byte >= 0xC0:                     # a lead byte: complete if its continuation bytes are all there
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


class Replacements:
    """String replacements applied in one pass (the longest key first at each position)."""

    def __init__(self, pairs: Mapping[str, str]):
        self._table = {k.encode(): v.encode() for k, v in pairs.items() if k}
        keys = sorted(self._table, key=len, reverse=True)
        self._pattern = re.compile(b"|".join(map(re.escape, keys))) if keys else None
        self._prefixes = {key[:n] for key in keys for n in range(1, len(key))}
        self._longest = max(map(len, keys), default=0)

    def apply(self, data: bytes) -> bytes:
        if self._pattern is None:
            return data
        return self._pattern.sub(lambda m: self._table[m.group()], data)

    def stable(self, data: bytes) -> int:
        """How much of ``data`` can be replaced now: the rest could still grow into a key."""
        for n in range(min(self._longest - 1, len(data)), 0, -1):
            if data[-n:] in self._prefixes:
                return len(data) - n
        return len(data)

    def inverse(self) -> "Replacements":
        return Replacements({v.decode(): k.decode() for k, v in self._table.items() if v})


class Tokenizer:
    """A vocabulary's tokenizer applied to pieces of a longer text."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        probe = vocab.tokenize("a", add_special=False, parse_special=False)
        # SentencePiece's add_space_prefix: a tokenized text is read as if it began with a space.
        self.space_prefix = probe.size == 1 and vocab.piece(int(probe[0])) == b" a"

    def continuation(self, data: bytes, offset: int) -> tuple[np.ndarray, np.ndarray]:
        """The tokens of ``data``, which follows ``offset`` bytes of earlier text (0: it starts the text, and
        gets BOS as the model asks), and the offset at which each token's text ends."""
        vocab = self.vocab
        skip_space = offset > 0 and self.space_prefix      # restart() put a space first: the prefix stands for it
        tokens = vocab.tokenize(data[1:] if skip_space else data, add_special=offset == 0, parse_special=True)
        lengths = np.fromiter((len(vocab.piece(int(t), special=True)) for t in tokens), np.int64, len(tokens))
        if offset == 0 and vocab.add_bos and tokens.size and tokens[0] == vocab.bos:
            lengths[0] = 0
        surplus = int(lengths.sum()) - len(data)
        if surplus > 0 and lengths.size:                    # a space prefixed at the very start
            first = int(np.argmax(lengths > 0))
            lengths[first] -= min(surplus, lengths[first])
        return tokens, offset + np.cumsum(lengths)

    def restart(self, text: bytes | bytearray, ends: np.ndarray, n: int, back: int = RETOKENIZE_TOKENS) -> int:
        """The index of a token, about ``back`` tokens before the ``n``-th, from which tokenizing can start
        again: with a space prefix, only before a space."""
        index = max(0, n - back)
        while index and self.space_prefix and text[int(ends[index - 1]):int(ends[index - 1]) + 1] != b" ":
            index -= 1
        return index


class _Growable:
    """An int array that grows by doubling, for token ids and offsets appended one request at a time."""

    def __init__(self, dtype):
        self.data = np.empty(256, dtype=dtype)
        self.n = 0

    def put(self, index: int, values: np.ndarray) -> None:
        n = index + len(values)
        if n > self.data.size:
            self.data = np.resize(self.data, max(n, 2 * self.data.size))
        self.data[index:n] = values
        self.n = n

    def view(self) -> np.ndarray:
        return self.data[:self.n]


class TokenMapping:
    """A draft vocabulary's view of a target history, kept in step; and the way back for draft tokens."""

    def __init__(self, target: Vocab, draft: Vocab, replace: Mapping[str, str]):
        self.target, self.draft = Tokenizer(target), Tokenizer(draft)
        self.to_draft = Replacements(replace)
        self.to_target = self.to_draft.inverse()
        self.reset()

    def reset(self) -> None:
        self._target_text = bytearray()            # the committed target tokens as text
        self._target_ends = _Growable(np.int64)    # where each committed target token's text ends
        self._held = b""                           # target text not yet given to the draft (see module doc)
        self._draft_text = bytearray()             # the same text in the draft's dialect
        self._draft_tokens = _Growable(np.int32)
        self._draft_ends = _Growable(np.int64)

    def update(self, history: np.ndarray) -> tuple[np.ndarray, int]:
        """Take in the target tokens added to ``history``; return the draft's tokens for the whole history and
        how many leading ones are unchanged since the last call."""
        n_seen = self._target_ends.n
        if len(history) < n_seen:                  # a new request that skipped begin()
            self.reset()
            n_seen = 0
        pieces = [self._target_piece(int(t), n_seen + i) for i, t in enumerate(history[n_seen:])]
        if not self._target_text and self.target.space_prefix:
            first = next((i for i, piece in enumerate(pieces) if piece), None)
            if first is not None and pieces[first].startswith(b" "):
                pieces[first] = pieces[first][1:]     # the space SentencePiece prefixed, not part of the text
        ends = len(self._target_text) + np.cumsum([len(p) for p in pieces], dtype=np.int64)
        self._target_ends.put(n_seen, ends)
        data = b"".join(pieces)
        self._target_text += data
        pending = self._held + data
        ready = min(self.to_draft.stable(pending), complete_utf8(pending))
        self._held = pending[ready:]
        unchanged = self._append_draft_text(self.to_draft.apply(pending[:ready]))
        return self._draft_tokens.view(), unchanged

    def _target_piece(self, token: int, index: int) -> bytes:
        vocab = self.target.vocab
        if index == 0 and vocab.add_bos and token == vocab.bos:
            return b""
        return vocab.piece(token, special=True)

    def _append_draft_text(self, data: bytes) -> int:
        n = self._draft_tokens.n
        if not data:
            return n
        self._draft_text += data
        keep = self.draft.restart(self._draft_text, self._draft_ends.data, n)
        offset = int(self._draft_ends.data[keep - 1]) if keep else 0
        tokens, ends = self.draft.continuation(bytes(self._draft_text[offset:]), offset)
        self._draft_tokens.put(keep, tokens)
        self._draft_ends.put(keep, ends)
        return keep

    def back(self, draft_tokens, history: np.ndarray, n_max: int, complete: bool) -> np.ndarray:
        """Target tokens for the draft's proposal after ``history`` (what ``update`` last saw), at most
        ``n_max``. Unless the proposal is ``complete`` (it ended the turn), its last target token is dropped:
        the draft may have stopped inside a word that the target tokenizes as one longer token."""
        piece = self.draft.vocab.piece
        text = self.to_target.apply(b"".join(piece(int(t), special=True) for t in draft_tokens))
        if not text.startswith(self._held):       # the draft did not write what the target already has
            return _EMPTY
        text = text[len(self._held):]
        text = text[:complete_utf8(text)]
        if not text:
            return _EMPTY
        tokens = self._continuation(text, history)
        return (tokens if complete else tokens[:-1])[:n_max]

    def _continuation(self, text: bytes, history: np.ndarray) -> np.ndarray:
        """Tokenize the text of the last committed tokens plus ``text``; where that reproduces the committed
        tokens, what follows them continues the history. Otherwise (the proposal merges into the last committed
        token) tokenize ``text`` on its own."""
        target_text, ends = self._target_text, self._target_ends.data
        n = len(history)
        start = self.target.restart(target_text, ends, n)
        offset = int(ends[start - 1]) if start else 0
        if n:
            tokens, _ = self.target.continuation(bytes(target_text[offset:]) + text, offset)
            committed = history[start:]
            if len(tokens) > len(committed) and np.array_equal(tokens[:len(committed)], committed):
                return tokens[len(committed):]
        if self.target.space_prefix and not text.startswith(b" "):
            return _EMPTY                          # on its own it would gain a space the target did not write
        return self.target.continuation(text, max(1, len(target_text)))[0]
