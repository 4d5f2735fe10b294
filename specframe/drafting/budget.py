"""Cost-aware draft lengths: draft only as many tokens as are expected to pay for their verification.

A target pass over ``1 + k`` tokens costs ``t(k)``; the engine measures it (``VerifyCost``). A drafter's tokens are
accepted one after another with a per-token probability ``p`` until the first rejection (a geometric model,
estimated from its recent drafts with decaying counts), and each drafted token costs it ``c`` seconds. A step
with ``k`` drafted tokens then yields ``1 + p + p^2 + ... + p^k`` tokens in ``t(k) + c k`` seconds; the length
chosen maximises that rate over ``0..n_max``. Zero means: do not draft now. A drafter held at zero is still
probed with a short draft, so its estimate can recover when the text turns repetitive; the interval doubles
while probes do not pay, since a probe is not free (a draft model must first catch up on the tokens it missed).
"""

from __future__ import annotations

from dataclasses import dataclass

DECAY = 0.9            # weight of the past in the acceptance estimate, per draft
PROBE_EVERY = 16       # a drafter held at length 0 drafts PROBE_LENGTH tokens after this many steps,
PROBE_MAX_EVERY = 512  # and after twice as many each time the probe did not earn it a real draft
PROBE_LENGTH = 2


class VerifyCost:
    """Seconds of one target pass by the number of tokens in it: t(n) = base + slope (n - 1), both learnt as
    moving averages (one-token passes give the base, longer ones the slope)."""

    def __init__(self, smoothing: float = 0.2):
        self.smoothing = smoothing
        self.base: float | None = None
        self.slope: float | None = None

    def observe(self, n_tokens: int, seconds: float) -> None:
        if n_tokens == 1 or self.base is None:
            self.base = seconds if self.base is None else self.base + self.smoothing * (seconds - self.base)
            if n_tokens == 1:
                return
        per_token = max(0.0, (seconds - self.base) / (n_tokens - 1))
        self.slope = per_token if self.slope is None else self.slope + self.smoothing * (per_token - self.slope)

    def seconds(self, n_tokens: int) -> float:
        base = self.base or 1.0
        slope = self.slope if self.slope is not None else 0.5 * base   # until measured: half a pass per token
        return base + slope * (n_tokens - 1)


@dataclass
class AcceptanceEstimate:
    """A drafter's per-token acceptance and drafting cost, from its recent drafts."""

    accepted: float = 3.0       # decayed count of accepted tokens (prior: p = 0.75, so a drafter gets tried)
    stops: float = 1.0          # decayed count of drafts that ended in a rejection
    seconds_per_token: float = 0.0
    skipped: int = 0            # steps held at length 0 since the last draft
    probe_every: int = PROBE_EVERY

    @property
    def per_token(self) -> float:
        return self.accepted / (self.accepted + self.stops)

    def update(self, n_drafted: int, n_accepted: int, seconds: float) -> None:
        self.accepted = DECAY * self.accepted + n_accepted
        self.stops = DECAY * self.stops + (n_accepted < n_drafted)
        per_token = seconds / n_drafted
        self.seconds_per_token += 0.2 * (per_token - self.seconds_per_token)

    def length(self, verify: VerifyCost, n_max: int) -> int:
        """The draft length with the best expected tokens per second (0: do not draft)."""
        p, c = self.per_token, self.seconds_per_token
        best, best_rate = 0, 1.0 / verify.seconds(1)
        expected, term = 1.0, 1.0
        for k in range(1, n_max + 1):
            term *= p
            expected += term
            rate = expected / (verify.seconds(1 + k) + c * k)
            if rate > best_rate:
                best, best_rate = k, rate
        if best == 0:
            self.skipped += 1
            if self.skipped >= self.probe_every:
                self.skipped = 0
                self.probe_every = min(2 * self.probe_every, PROBE_MAX_EVERY)
                return min(PROBE_LENGTH, n_max)
        else:
            self.skipped = 0
            self.probe_every = PROBE_EVERY
        return best
