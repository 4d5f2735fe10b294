"""Choosing target tokens from logits, and accepting drafts: greedy, sample-and-match, rejection sampling.

Logits are transformed in llama.cpp's order (common/sampling.cpp's default chain): logit bias, then repetition
penalties over the last ``repeat_last_n`` tokens of the history, then top-k, top-p and min-p (cut at temperature
1), then temperature. Greedy decoding takes the best token after the bias and the penalties, as llama.cpp's does.
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
transformations as p (``TokenSampler.adjusted`` and ``candidates`` over the same history).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from specframe.errors import ParamError
from specframe.params import INT32_MAX, param, within_bounds
from specframe.prefix import common_prefix

if TYPE_CHECKING:
    from specframe.grammar import Constraint

ACCEPTANCE_MODES = ("rejection", "match")


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


class TokenSampler:
    """Samples with the given settings from its own random stream: ``stream`` tells apart the samplers of one
    request (the target's is 0) so a drafter's draws never shift the target's."""

    def __init__(self, params: SamplingParams, stream: int = 0):
        self.params = params
        self.rng = np.random.default_rng((params.seed, stream))
        self._bias_ids = np.array([int(k) for k in params.logit_bias], dtype=np.int64)
        self._bias = np.array(list(params.logit_bias.values()), dtype=np.float32)

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
        temperature 1, as llama.cpp's chain applies temperature last), then temperature."""
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
        return ids, weights / weights.sum()

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


def verify(logits: np.ndarray, tokens: np.ndarray, draft_probs: np.ndarray | None, sampler: TokenSampler,
           acceptance: str = "rejection", history: np.ndarray = NO_TOKENS,
           constraint: Constraint | None = None) -> tuple[int, list[int]]:
    """Accept a prefix of the drafted ``tokens`` from the target's ``logits`` (one row per position, the last
    after the whole draft; for a greedy sampler that does not change logits, each row's choice can come made, as
    token ids); return (n_accepted, emitted tokens): the accepted ones plus the target's own token at the first
    rejection or after a fully accepted draft. ``history`` is the tokens before the draft, which the repetition
    penalties look back on (needed only when they are on).

    With a ``constraint`` (a grammar, at the position before the draft; the draft is admissible) each position
    chooses among the tokens the grammar allows there, and the constraint advances on every emitted token.
    ``draft_probs`` may hold one row more than ``tokens``: the draft was cut at a token drawn from that row which
    the grammar forbids, so that position draws from the residual, as rejecting the token would have."""
    k = len(tokens)
    if sampler.chooses_as_argmax and constraint is None:
        choices = logits[:k + 1] if logits.ndim == 1 else np.argmax(logits[:k + 1], axis=1)
        n = common_prefix(choices[:k], tokens)
        return n, choices[:n + 1].tolist()
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


def top2_margin(logits: np.ndarray) -> np.ndarray:
    """Gap between the best and second-best logit of each row: how close a greedy choice was to a tie."""
    top2 = np.partition(logits, -2, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]
