"""Choosing target tokens from logits, and accepting drafts: greedy, sample-and-match, rejection sampling.

Logits are transformed in llama.cpp's order (common/sampling.cpp's default chain): logit bias, then repetition
penalties over the last ``repeat_last_n`` tokens of the history, then top-k, top-p and min-p (cut at temperature
1), then temperature, then, with ``infill``, llama.cpp's infill sampler (``infill_candidates``). Greedy decoding
takes the best token after the bias and the penalties, as llama.cpp's does (there temperature 0 leaves one
candidate, which infill keeps).
The penalties depend on the tokens before each position, so a draft's position i is judged after the history and
the draft's tokens before i: exactly as plain decoding would have judged it, had it emitted those tokens.

Sampling draws one uniform number per emitted token, by inverse CDF, in the order tokens are emitted. So with
the same seed, sample-and-match emits the same tokens as plain sampling would: acceptance re-uses the draw the
target would have made anyway. For a drafter without a distribution (q one-hot at its token) that is exactly
lossless rejection sampling too: the draft token stands with probability p(d), and otherwise the draw falls on
another token with probability proportional to p.

For drafts that carry their distribution q, rejection sampling (Leviathan et al. 2023, Chen et al. 2023) accepts
d with probability min(1, p(d) / q(d)), else samples from norm(max(0, p - q)), and after a fully accepted draft
samples one bonus token from p: the emitted tokens follow the target's distribution exactly, and more draft
tokens stand than under sample-and-match when q is close to p. A draft model computes q with the same
transformations as p (``TokenSampler.adjusted`` and ``candidates`` over the same history), infill only when
its sampler is given the vocabulary (q need not equal p for the output to follow p).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Protocol

import numpy as np

from specframe.errors import ParamError
from specframe.llama.scans import greedy_choices
from specframe.params import INT32_MAX, param, within_bounds

if TYPE_CHECKING:
    from specframe.grammar import Constraint

ACCEPTANCE_MODES = ("rejection", "match")
TARGET_STREAM = 0           # the random stream of the target's sampler; drafters' samplers use others


NO_TOKENS = np.empty(0, dtype=np.int32)
LOGIT_BIAS_LIMIT = 100.0   # OpenAI's bound: -100 bans a token, 100 all but forces it


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = param(0.0, min=0.0, max=100.0, help="0 = greedy")
    top_k: int = param(40, min=0, max=INT32_MAX, help="0 = whole vocabulary")
    top_p: float = param(0.95, min=0.0, max=1.0)
    min_p: float = param(0.05, min=0.0, max=1.0, help="drop tokens less likely than this share of the likeliest")
    repeat_penalty: float = param(1.0, min=0.0, max=100.0,
                                  help="divide a positive logit (multiply a negative one) of each token among the "
                                       "last repeat_last_n; 1 = off")
    repeat_last_n: int = param(64, min=-1, max=INT32_MAX, help="tokens the penalties look back on; -1 = the whole "
                                                               "history, 0 = penalties off")
    presence_penalty: float = param(0.0, min=-2.0, max=2.0, help="subtracted from each token among the last "
                                                                 "repeat_last_n")
    frequency_penalty: float = param(0.0, min=-2.0, max=2.0, help="subtracted once per occurrence among the last "
                                                                  "repeat_last_n")
    logit_bias: dict[str, float] = param({}, help='added to a token\'s logit, by token id: {"15" = -100} bans '
                                                  f"token 15; each in [-{LOGIT_BIAS_LIMIT:g}, {LOGIT_BIAS_LIMIT:g}]")
    seed: int = param(0, min=0, max=2**64 - 1)
    grammar: str = param("", help="GBNF grammar the output must match (llama.cpp's --grammar)")
    grammar_file: str = param("", help="file holding a GBNF grammar, relative to the config")
    json_schema: str = param("", help="JSON schema the output must match: the schema's JSON, or a file holding it")
    infill: bool = param(False, help="llama.cpp's infill sampler, applied last (editors' \"samplers\": [..., "
                                     "\"infill\"]): end the turn when an end-of-generation token is likely enough, "
                                     "merge each token into a likelier one its text is a prefix of (or that is a "
                                     "prefix of it), keep only the clearly likely ones")

    def __post_init__(self):
        for key, bias in self.logit_bias.items():
            if not str(key).isdigit():
                raise ParamError("logit_bias", f"key {key!r}: expected a token id (a non-negative integer)")
            if not within_bounds(bias, {"min": -LOGIT_BIAS_LIMIT, "max": LOGIT_BIAS_LIMIT}):
                raise ParamError("logit_bias", f"token {key}: expected a number in [-{LOGIT_BIAS_LIMIT:g}, "
                                               f"{LOGIT_BIAS_LIMIT:g}], got {bias!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def penalized(self) -> bool:
        """Whether the tokens before a position change its logits."""
        return self.repeat_last_n != 0 and (self.repeat_penalty != 1.0 or self.presence_penalty != 0.0
                                            or self.frequency_penalty != 0.0)

    @property
    def transforms_logits(self) -> bool:
        """Whether logits are changed before choosing (a bias or penalties), so a greedy choice is not argmax."""
        return self.penalized or bool(self.logit_bias)


SAMPLING_KEYS = frozenset(f.name for f in fields(SamplingParams))


class InfillVocab(Protocol):
    """What the infill sampler needs of a vocabulary (specframe.llama.Vocab has it). An ``eot`` attribute, where
    there is one and it is not -1, names the end-of-turn token; else ``eos`` stands for it."""

    eos: int

    def piece(self, token: int, special: bool = False) -> bytes: ...

    def is_eog(self, token: int) -> bool: ...


class TokenSampler:
    """Samples with the given settings from its own random stream: ``stream`` tells apart the samplers of one
    request (the target's is TARGET_STREAM) so a drafter's draws never shift the target's.

    ``vocab`` is the model's vocabulary, which ``infill`` needs (token pieces, end-of-generation tokens). The
    target's sampler must have it, as it decides the output. A drafter's sampler (another stream) without one
    drafts from the distribution before infill, by choice: its q only proposes tokens, and rejection sampling
    (or matching) emits the target's distribution whatever q is; a q closer to p is only accepted more often."""

    def __init__(self, params: SamplingParams, stream: int = TARGET_STREAM, *, vocab: InfillVocab | None = None):
        self.params = params
        self.rng = np.random.default_rng((params.seed, stream))
        self._bias_ids = np.array([int(k) for k in params.logit_bias], dtype=np.int64)
        self._bias = np.array(list(params.logit_bias.values()), dtype=np.float32)
        if params.infill and vocab is None and stream == TARGET_STREAM:
            raise ParamError("infill", "the infill sampler needs the model's vocabulary (token pieces and "
                                       "end-of-generation tokens); this sampler was built without one")
        self._infill = InfillState(vocab) if params.infill and vocab is not None else None

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    @property
    def chooses_as_argmax(self) -> bool:
        """Whether a position's token is its row's first largest logit, as the model's own greedy sampler picks
        it (which can then run on the device: Context.choose_on_device)."""
        return self.params.greedy and not self.params.transforms_logits

    def check_vocabulary(self, n_vocab: int) -> None:
        """A biased token id must exist in the model's vocabulary."""
        if self._bias_ids.size and int(self._bias_ids.max()) >= n_vocab:
            raise ParamError("logit_bias", f"token {int(self._bias_ids.max())} is not in the vocabulary "
                                           f"(ids 0 to {n_vocab - 1})")

    def adjusted(self, logits: np.ndarray, history: np.ndarray,
                 drafted: np.ndarray | Sequence[int] = NO_TOKENS) -> np.ndarray:
        """``logits`` after the logit bias and the repetition penalties (llama.cpp's llama_sampler_penalties) for
        the position that follows ``history`` and then ``drafted`` (draft tokens not in the history yet);
        ``logits`` itself when nothing changes it."""
        params = self.params
        if not params.transforms_logits:
            return logits
        logits = logits.astype(np.float32, copy=True)
        if self._bias_ids.size:
            logits[self._bias_ids] += self._bias
        if params.penalized:
            ids, counts = np.unique(self._window(history, drafted), return_counts=True)
            ids = ids[ids < logits.size]
            counts = counts[:ids.size]
            values = logits[ids]
            values = np.where(values <= 0, values * params.repeat_penalty, values / params.repeat_penalty)
            logits[ids] = values - counts * params.frequency_penalty - params.presence_penalty
        return logits

    def _window(self, history: np.ndarray, drafted: np.ndarray | Sequence[int]) -> np.ndarray:
        """The tokens the penalties look back on: the last ``repeat_last_n`` of the history and then the drafted
        ones (all of them for -1), without joining the whole history."""
        last_n = self.params.repeat_last_n
        recent = history if last_n < 0 else history[max(0, len(history) - last_n):]
        recent = np.concatenate([recent, np.asarray(drafted, dtype=np.int32)])
        return recent if last_n < 0 else recent[max(0, len(recent) - last_n):]

    def candidates(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids (most likely first) and their probabilities after top-k, top-p and min-p (both measured at
        temperature 1, as llama.cpp's chain applies temperature after them), then temperature, then infill."""
        params = self.params
        if 0 < params.top_k < logits.size:
            ids = np.argpartition(logits, -params.top_k)[-params.top_k:]
        else:
            ids = np.arange(logits.size)
        raw = logits[ids].astype(np.float64)
        order = np.argsort(-raw, kind="stable")
        ids, raw = ids[order], raw[order]
        keep = ids.size
        if params.top_p < 1.0:
            weights = np.exp(raw - raw[0])
            keep = int(np.searchsorted(np.cumsum(weights / weights.sum()), params.top_p)) + 1
        if params.min_p > 0.0:
            keep = min(keep, int(np.count_nonzero(raw >= raw[0] + np.log(params.min_p))))
        ids, raw = ids[:max(1, keep)], raw[:max(1, keep)]
        weights = np.exp((raw - raw[0]) / params.temperature)
        probs = weights / weights.sum()
        if self._infill is not None:
            return self._infill.apply(ids, probs)
        return ids, probs

    def draw(self, ids: np.ndarray, probs: np.ndarray) -> int:
        """One token of a distribution over ``ids``, by inverse CDF with one uniform number."""
        index = int(np.searchsorted(np.cumsum(probs), self.rng.random() * probs.sum(), side="right"))
        return int(ids[min(index, ids.size - 1)])

    def choose(self, logits: np.ndarray, history: np.ndarray) -> int:
        """The token for a position after ``history``, from its row of logits: the best one when greedy, else a
        draw."""
        logits = self.adjusted(logits, history)
        if self.greedy:
            return int(np.argmax(logits))
        return self.draw(*self.candidates(logits))


INFILL_KEEP = 0.2      # llama.cpp's first threshold: a text token this likely (after merging) stays


class InfillState:
    """llama.cpp's infill sampler for one vocabulary, with the pieces and end-of-generation flags of the tokens
    it has seen (so repeated positions do not ask the vocabulary again)."""

    def __init__(self, vocab: InfillVocab):
        self.vocab = vocab
        # The token that ends an unsure completion: llama.cpp's EOT, else EOS. specframe.llama.Vocab binds no
        # llama_vocab_eot (llama.h declares it), so there EOS stands in, as llama.cpp's fallback does.
        eot = int(getattr(vocab, "eot", -1))
        self.end = eot if eot >= 0 else int(vocab.eos)
        if self.end < 0:
            raise ParamError("infill", "the model's vocabulary has neither an end-of-turn nor an end-of-text token")
        self._tokens: dict[int, tuple[bytes, bool]] = {}

    def token(self, token: int) -> tuple[bytes, bool]:
        """A token's piece (its bytes in output text, special tokens rendered empty as llama.cpp's infill asks
        for them) and whether it ends generation."""
        known = self._tokens.get(token)
        if known is None:
            known = self._tokens[token] = (self.vocab.piece(token, special=False), self.vocab.is_eog(token))
        return known

    def apply(self, ids: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return infill_candidates(ids, probs, self.token, self.end)


def infill_candidates(ids: np.ndarray, probs: np.ndarray, token_info: Callable[[int], tuple[bytes, bool]],
                      end: int) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp's infill sampler (src/llama-sampler.cpp, llama_sampler_infill_apply) on the candidates ``ids``
    (most likely first) with their ``probs``, then the distribution llama.cpp's dist sampler draws from.
    ``token_info(token)`` gives the token's piece (special=False) and whether it ends generation; ``end`` is
    the end-of-turn token.

    1. When 3 * p(end-of-generation tokens) * n_candidates > p(the others): only the end-of-generation tokens.
    2. For each pair (i0, i1) in llama.cpp's loop order where i0's piece is non-empty and a prefix of i1's, the
       less likely of the two is merged into the other (its probability added, the token dropped).
    3. Text tokens under 0.2 after merging go; none left: the end-of-turn token alone. Then, renormalized, text
       tokens under 1 / (n_text + 1) go. End-of-generation tokens stay throughout.

    The result is what llama.cpp samples: its dist sampler recomputes the softmax from the logits, which infill
    leaves as they were (merged-away tokens at -inf), so merging decides which tokens stay but each keeps its
    own probability, renormalized. Zero-probability candidates take no part in merging: a merge with one never
    moves probability nor drops a token of positive probability, so skipping them changes nothing that is
    sampled. Merging looks up each token's extensions among the candidates sorted by piece: O(n log n) plus the
    (candidate, extension) pairs, not llama.cpp's n^2 comparisons; with top_k = 0 (the whole vocabulary) that
    is still every token's piece and a Python loop over those pairs, slow but exact."""
    n = ids.size
    info = [token_info(token) for token in ids.tolist()]
    eog = np.fromiter((is_eog for _, is_eog in info), dtype=bool, count=n)
    p_eog = float(probs[eog].sum())
    if 3.0 * p_eog * n > float(probs[~eog].sum()):
        keep = eog & (probs > 0)
        return ids[keep], probs[keep] / probs[keep].sum()

    live = np.flatnonzero(probs > 0)
    p = probs[live].tolist()                  # merged probabilities, as llama.cpp's loop leaves them
    pieces = [info[i][0] for i in live.tolist()]
    m = len(pieces)
    by_piece = sorted(range(m), key=pieces.__getitem__)
    sorted_pieces = [pieces[j] for j in by_piece]
    alive = [True] * m
    for i0 in range(m):
        prefix = pieces[i0]
        if not alive[i0] or not prefix:
            continue
        extensions = []                       # candidates whose piece starts with i0's: a run in piece order
        k = bisect_left(sorted_pieces, prefix)
        while k < m and sorted_pieces[k].startswith(prefix):
            if by_piece[k] != i0:
                extensions.append(by_piece[k])
            k += 1
        for i1 in sorted(extensions):         # llama.cpp's inner loop order
            if not alive[i1]:
                continue
            if p[i1] > p[i0]:                 # merge into the likelier; i0 on a tie
                p[i1] += p[i0]
                p[i0], alive[i0] = 0.0, False
                break                         # llama.cpp's inner loop stops once i0 is gone
            p[i0] += p[i1]
            p[i1], alive[i1] = 0.0, False

    live_eog = eog[live].tolist()
    kept = [i for i in range(m) if alive[i] and (live_eog[i] or p[i] >= INFILL_KEEP)]
    n_text = sum(not live_eog[i] for i in kept)
    if n_text == 0:
        return np.array([end], dtype=ids.dtype), np.ones(1, dtype=probs.dtype)
    total = sum(p[i] for i in kept)
    threshold = 1.0 / (n_text + 1)
    kept = [i for i in kept if live_eog[i] or p[i] / total >= threshold]
    chosen = live[kept]
    return ids[chosen], probs[chosen] / probs[chosen].sum()


def verify(logits: np.ndarray, tokens: np.ndarray, draft_probs: np.ndarray | None, sampler: TokenSampler,
           acceptance: str = "rejection", history: np.ndarray = NO_TOKENS,
           constraint: Constraint | None = None) -> tuple[int, list[int]]:
    """Accept a prefix of the drafted ``tokens`` from the target's ``logits`` (one row per position, the last
    after the whole draft; for a greedy sampler that does not change logits, each row's choice can come made, as
    token ids in a list or an array, up to the first that rejects its token); return (n_accepted, emitted tokens):
    the accepted ones plus the target's own token at the first rejection or after a fully accepted draft.
    ``history`` is the tokens before the draft, which the repetition penalties look back on (needed only when they
    are on).

    With a ``constraint`` (a grammar, at the position before the draft; the draft is admissible) each position
    chooses among the tokens the grammar allows there, and the constraint advances on every emitted token.
    ``draft_probs`` may hold one row more than ``tokens``: the draft was cut at a token drawn from that row which
    the grammar forbids, so that position draws from the residual, as rejecting the token would have."""
    k = len(tokens)
    if sampler.chooses_as_argmax and constraint is None:
        # in Python over a few ints rather than in numpy: after a CPU pass numpy's code is out of the caches
        choices = (logits if isinstance(logits, list) else logits.tolist() if logits.ndim == 1
                   else greedy_choices(logits[:k + 1], tokens))
        n = 0
        if k:
            drafted = tokens.tolist()
            while n < k and choices[n] == drafted[n]:
                n += 1
        return n, choices[:n + 1]
    rejection_probs = draft_probs if acceptance == "rejection" else None
    emitted = []
    for i in range(k + 1):
        row = sampler.adjusted(logits[i], history, tokens[:i])
        if sampler.greedy:
            token = int(np.argmax(row))
            if constraint is not None and not constraint.allows(token):
                token = int(np.argmax(constraint.masked(row)))
            accepted = i < k and token == tokens[i]
        else:
            if constraint is not None:
                row = constraint.masked(row)
            ids, probs = sampler.candidates(row)
            if i < k and rejection_probs is not None:
                token, accepted = _reject_or_accept(sampler, ids, probs, int(tokens[i]), rejection_probs[i])
            elif rejection_probs is not None and i < len(rejection_probs):   # a draft token the grammar refuted
                token, accepted = _draw_residual(sampler, ids, probs, rejection_probs[i]), False
            else:
                token = sampler.draw(ids, probs)
                accepted = i < k and token == tokens[i]
        emitted.append(token)
        if constraint is not None:
            constraint.advance(token)
        if not accepted:
            return i, emitted
    raise AssertionError("unreachable: the last row is never accepted")


def _reject_or_accept(sampler: TokenSampler, ids: np.ndarray, p: np.ndarray, drafted: int,
                      q: np.ndarray) -> tuple[int, bool]:
    """One step of speculative sampling: keep ``drafted`` with probability min(1, p/q), else draw from the
    residual max(0, p - q) (which is p itself where q puts no mass)."""
    where = np.flatnonzero(ids == drafted)
    p_drafted = float(p[where[0]]) if where.size else 0.0
    q_drafted = float(q[drafted])
    if q_drafted > 0 and sampler.rng.random() * q_drafted < p_drafted:
        return drafted, True
    return _draw_residual(sampler, ids, p, q), False


def _draw_residual(sampler: TokenSampler, ids: np.ndarray, p: np.ndarray, q: np.ndarray) -> int:
    """A draw from max(0, p - q), normalized: what follows a rejected draft token drawn from q."""
    residual = np.maximum(p - q[ids], 0.0)
    if residual.sum() <= 0.0:     # p <= q everywhere on p's support: only when p == q, where rejection is moot
        residual = p
    return sampler.draw(ids, residual)


@dataclass(frozen=True)
class TokenLogprob:
    """An emitted token's log-probability under the target, and the likeliest tokens' at its position."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]    # (token, log-probability), likeliest first


def log_probabilities(rows: np.ndarray, tokens: Sequence[int], n_top: int) -> list[TokenLogprob]:
    """Each token's log-probability in its row of the target's logits (the model's own distribution, before any
    sampling setting or grammar, as OpenAI's and vLLM's logprobs are), with the ``n_top`` likeliest."""
    rows = np.asarray(rows, dtype=np.float32)
    peak = rows.max(axis=1, keepdims=True)
    log_totals = peak[:, 0] + np.log(np.exp(rows - peak).sum(axis=1))
    entries = []
    for row, token, log_total in zip(rows, tokens, log_totals):
        top: tuple[tuple[int, float], ...] = ()
        if n_top:
            best = np.argpartition(-row, n_top)[:n_top]
            best = best[np.argsort(-row[best], kind="stable")]
            top = tuple((int(t), float(row[t] - log_total)) for t in best)
        entries.append(TokenLogprob(int(token), float(row[token] - log_total), top))
    return entries
