"""Cost-aware draft lengths: draft only as many tokens as are expected to pay for their verification.

A target pass over ``n`` tokens costs ``t(n)``; the engine measures it for every size (``VerifyCost``). A
drafter's tokens are accepted one after another with a per-token probability ``p`` until the first rejection (a
geometric model, estimated from its recent drafts with decaying counts), and each drafted token costs it ``c``
seconds. A step with ``k`` drafted tokens then yields ``1 + p + p^2 + ... + p^k`` tokens in ``t(1 + k) + c k``
seconds; the length chosen maximises that rate over ``0..min(n_max, cap)``, where the cap follows the last
drafts: it doubles after a fully accepted one and falls to one past the accepted tokens after a rejection, since
acceptance comes in runs (a copied passage ends, and the next long draft would be wasted). Zero means: do not
draft now. A drafter held at zero is still probed with a short draft (asked each step from then on until it
drafts), so its estimate can recover when the text turns repetitive; the interval doubles while probes do not
pay, since a probe is not free (a draft model must first catch up on the tokens it missed).
A drafter so slow that not even always-accepted drafts would pay is not probed at all: its catch-up costs alone
(which its measured cost includes) would make it slower than plain decoding.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

DECAY = 0.9            # weight of the past in the acceptance estimate, per draft
PROBE_EVERY = 16       # a drafter held at length 0 is asked for PROBE_LENGTH tokens after this many steps,
PROBE_MAX_EVERY = 512  # and after twice as many each time the probe did not earn it a real draft
PROBE_LENGTH = 2
START_CAP = 8          # the first drafts are asked for at most this many tokens


class VerifyCost:
    """Seconds of one target pass by the number of tokens in it.

    Measured per size, because the curve is irregular: CPU kernels switch with the batch size (on a 2-core AVX-512
    CPU with the 1.5B Q4_K_M target, 2 tokens cost 1.8 passes of one, 15 tokens 7.1 and 16 tokens 5.5). Each size
    keeps a moving average; a size not measured yet is interpolated from its neighbours, or extrapolated from the
    largest ones. ``calibrate`` measures every size once up front, so no size is judged by a guess.
    """

    def __init__(self, smoothing: float = 0.2):
        self.smoothing = smoothing
        self._seconds: dict[int, float] = {}

    @property
    def measured(self) -> dict[int, float]:
        return dict(sorted(self._seconds.items()))

    def observe(self, n_tokens: int, seconds: float) -> None:
        """Move the size's average toward ``seconds``, at most halfway to half or double it: a pass slowed by
        another process (or a calibration made under load) must not distort the table, while a lasting change
        still takes over in a few passes."""
        old = self._seconds.get(n_tokens)
        if old is None:
            self._seconds[n_tokens] = seconds
        else:
            self._seconds[n_tokens] = old + self.smoothing * (min(max(seconds, old / 2), 2 * old) - old)

    def merge(self, other: "VerifyCost") -> None:
        """Take the sizes ``other`` measured and this one has not."""
        for n, seconds in other._seconds.items():
            self._seconds.setdefault(n, seconds)

    def calibrate(self, run_pass, sizes) -> None:
        """Time ``run_pass(n)`` for each size not measured yet: the fastest of three for single tokens, whose
        cost every other size is compared with, of two for the others."""
        for n in sizes:
            if n not in self._seconds:
                self._seconds[n] = min(run_pass(n) for _ in range(3 if n == 1 else 2))

    def seconds(self, n_tokens: int) -> float:
        table = self._seconds
        if n_tokens in table:
            return table[n_tokens]
        if not table:
            return 1.0 + 0.5 * (n_tokens - 1)      # nothing measured: a guess of half a pass per extra token
        sizes = sorted(table)
        below = [n for n in sizes if n < n_tokens]
        above = [n for n in sizes if n > n_tokens]
        if below and above:
            lo, hi = below[-1], above[0]
            return table[lo] + (table[hi] - table[lo]) * (n_tokens - lo) / (hi - lo)
        near = below[-2:] if below else above[:2]
        if len(near) < 2:
            return table[near[0]] * n_tokens / near[0] if below else table[near[0]]
        (a, b), (ta, tb) = near, (table[near[0]], table[near[1]])
        slope = max(0.0, (tb - ta) / (b - a))
        return max(0.0, tb + slope * (n_tokens - b)) if below else max(0.0, ta - slope * (a - n_tokens))

    def save(self, path: pathlib.Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({str(n): s for n, s in self.measured.items()}))
        temporary.replace(path)

    @classmethod
    def load(cls, path: pathlib.Path) -> "VerifyCost":
        """The costs saved at ``path``; none when it is missing or unreadable (they are measured again)."""
        cost = cls()
        try:
            data = json.loads(path.read_text())
            cost._seconds = {int(n): float(s) for n, s in data.items() if int(n) > 0 and float(s) > 0}
        except (OSError, ValueError, TypeError, AttributeError):
            cost._seconds = {}
        return cost


@dataclass
class AcceptanceEstimate:
    """A drafter's per-token acceptance and drafting cost, from its recent drafts."""

    accepted: float = 3.0       # decayed count of accepted tokens (prior: p = 0.75, so a drafter gets tried)
    stops: float = 1.0          # decayed count of drafts that ended in a rejection
    seconds_per_token: float = 0.0
    costed: bool = False        # whether seconds_per_token has been measured yet
    skipped: int = 0            # steps held at length 0 since the last draft
    probe_every: int = PROBE_EVERY
    cap: int = START_CAP        # longest draft asked for now: doubles after a fully accepted draft, and falls to
                                # one past the accepted tokens after a rejection (acceptance comes in runs)

    @property
    def probing(self) -> bool:
        return self.skipped >= self.probe_every

    @property
    def per_token(self) -> float:
        return self.accepted / (self.accepted + self.stops)

    def update(self, n_asked: int, n_drafted: int, n_accepted: int, seconds: float) -> None:
        """A draft of ``n_drafted`` tokens, asked for ``n_asked``, of which ``n_accepted`` stood. A draft that
        stops short of what was asked counts like a rejection there: the estimate is of tokens that are both
        drafted and accepted, which is what a longer request buys."""
        if self.probing:             # the draft was a probe: the next one comes twice as late
            self.skipped = 0
            self.probe_every = min(2 * self.probe_every, PROBE_MAX_EVERY)
        self.accepted = DECAY * self.accepted + n_accepted
        self.stops = DECAY * self.stops + (n_accepted < n_asked)
        if n_accepted < n_drafted:
            self.cap = n_accepted + 1
        elif n_drafted == n_asked:
            self.cap = max(self.cap, 2 * n_asked)
        self._observe_cost(seconds / n_drafted)

    def update_empty(self, seconds: float) -> None:
        """A call that drafted nothing (no match, or a draft model stopped by p_min) still took its time, and a
        draft model spends most of it catching up on the history: charged as one drafted token, so a drafter
        whose mere asking does not pay stops being asked. The acceptance estimate is left alone."""
        self._observe_cost(seconds)

    def _observe_cost(self, per_token: float) -> None:
        if not self.costed:          # the first measurement replaces the prior, or a slow drafter looks cheap
            self.seconds_per_token, self.costed = per_token, True
        else:
            self.seconds_per_token += 0.2 * (per_token - self.seconds_per_token)

    def length(self, verify: VerifyCost, n_max: int) -> int:
        """The draft length, up to the cap, with the best expected tokens per second (0: do not draft)."""
        best = self._best_length(verify, min(n_max, self.cap), self.per_token)
        if best == 0:
            if self._best_length(verify, n_max, 1.0) == 0:
                return 0    # not even drafts that are always right would pay for their cost: a probe cannot help
            self.skipped += 1
            if self.probing:
                return min(PROBE_LENGTH, n_max)   # asked each step until it drafts: an n-gram drafter may
                                                  # have nothing to propose at the step the interval ends
        else:
            self.skipped = 0
            self.probe_every = PROBE_EVERY
        return best

    def _best_length(self, verify: VerifyCost, n_max: int, p: float) -> int:
        c = self.seconds_per_token
        best, best_rate = 0, 1.0 / verify.seconds(1)
        expected, term = 1.0, 1.0
        for k in range(1, n_max + 1):
            term *= p
            expected += term
            rate = expected / (verify.seconds(1 + k) + c * k)
            if rate > best_rate:
                best, best_rate = k, rate
        return best
