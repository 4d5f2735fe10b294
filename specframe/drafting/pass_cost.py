"""What one target pass costs by the number of tokens in it: measured robustly, checked, stored, aged and healed.

Every decision to draft weighs tokens expected to be accepted against the seconds of the pass that verifies them,
so a wrong table is worse than none: too cheap a table verifies drafts that lose, too dear a one turns speculation
off. Hence:

- **Calibration** times every size in interleaved rounds (forward, backward, forward...), after an untimed warm-up
  pass, and keeps for each size the least time of samples that agree (noise on a CPU only ever adds time). Sizes
  whose samples disagree get more rounds. Every pass is timed as decoding runs it, because llama.cpp keeps the
  last pass's graph for the next of the same shape: a CPU is spared building it again (0.3 ms of the 1.5B Qwen's
  34 ms on the EPYC, half of a tiny test model's pass), and the CUDA backend runs a pass right after one of another
  size directly, captures a graph on the second of a size in a row and replays it from the third (1.7 ms on an
  H200 for the 1.5B Qwen, 4.7 ms run directly). Plain decoding's single-token passes follow each other, while
  verification passes change size from step to step. So a single-token pass is timed after one untimed single (two
  on a GPU), a bigger one right after a single-token pass, and the engine's single-token passes are compared with the
  table only when as many came just before them. The other processes' CPU use during calibration is measured, and a
  table taken under load is used for the run but not stored.
- **Sanity bounds.** A pass over k tokens cannot cost less than one over a single token, nor, on a CPU, more
  (with slack) than k single passes; on a GPU it can (a pass of 2 tokens run directly costs 2.7 single passes
  replayed from a graph on the H200). A table that breaks them is impossible: it is measured again, and never
  stored or loaded.
- **Healing.** The engine reports every pass it times, and the table is judged on its shape, not its level:
  the choices weigh passes against each other, so a machine that runs every size alike slower or faster (its pace
  drifts: a busy neighbour, another power state) changes none of them, and measuring again would stall every
  request for seconds to find the same shape. The pace is what recent single-token passes take against the
  table. When the recent passes, whatever their sizes, take more than half again that pace (the median of their
  ratios to the table over the last few), or the last three passes over several tokens all do (single ones between
  them must not hide a table too cheap for every draft), or the last two of those take three times the pace (the
  table's level until a single-token pass is timed: each of them cost a run's long draft several passes' time),
  or one pass takes less than four fifths of the fastest
  recent single's ratio, the shape is wrong (a poisoned file, a table taken under another load) and the engine
  measures it again; so it does when the pace itself is off by more than ``GROSS``, which no drift of an idle machine
  explains. Until a single-token pass is timed against the table, its own level stands for the pace. Ratios pooled
  over sizes find a table that is too cheap within a few drafts even when every draft has another length. The
  loop's passes run among drafters' work, other sequences' and other processes', so a few slow ones can pass for a
  wrong shape (seen on the idle EPYC: five passes at 1.36 times the table, singles at 0.9, once in a dozen requests):
  a table the loop finds stale is first spot-checked as calibration times passes, over sizes the loop found off
  (a second or so, where measuring it again costs the request ~20 s), and measured again only if that finds it
  stale too (``recheck``). A table this process measured, or spot-checked and kept, is not judged again for
  ``REMEASURE_AFTER_SECONDS`` (a size found faster in the loop takes the observed time meanwhile).
- **Pace.** The table prices passes at the level it was measured at, while drafters' calls are timed in the
  seconds they take now, on the same cores: on a machine whose pace drifts (this Xeon's single pass took 67 ms
  when its table was measured and 70 to 95 ms an hour later), a draft model's calls then weigh up to a third more
  beside the passes than they do. So the prices the chain weighs (``seconds``, ``seconds_from``) are the table's
  times the pace: the median ratio of the last ``PACE_WINDOW`` passes the loop compared with it (1 until
  ``PACE_LEAST`` were, and within ``GROSS`` either way). The shape's tests compare with the table's own level.
- **Confirmation.** A stored table is not taken at its word for long drafts until a pass over several tokens has
  run at its pace: until then drafts are cut to ``UNCONFIRMED_DRAFT`` tokens. A table that is right loses next to
  nothing (the first drafts of a request are short while the drafters' estimates learn), and a table far too cheap
  is found by two short passes instead of two of the longest drafts, a dozen single passes each on a CPU whose
  batches cost nearly their tokens one by one.
- **Depth.** Attention reads every position of the context, so a pass costs more the deeper it runs, and its
  tokens more than a single one's (the 1.5B Qwen on the EPYC: a single pass 72.5 ms at position 0 and 83.7 ms at
  512, 16 tokens 509 and 652 ms, 7.0 single passes and 7.8). The table holds the depth it was measured at and
  what each token of a pass adds per position beyond it (``per_position``): calibration fills ``DEPTH_STEP``
  positions once and times the single pass and the largest at ``DEPTH_POINTS`` depths on the way back (each
  truncation is free), and takes the median of the slopes between them, so a burst of noise at one depth, which
  two points took for depth's cost (7 to 62 microseconds a token a position from run to run on a noisy day),
  does not decide it. The engine says at which depth the next pass runs (``at_depth``), and every price is taken
  there. A table priced at the prompt's depth alone had drafts verified at 1.2 to 1.6 times what it said, 500
  positions on.
- **Ageing.** A stored table records when it was taken and under what load; after ``MAX_AGE_SECONDS`` it is
  measured again.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import pathlib
import statistics
import time
from collections import deque
from typing import Callable, Iterable, Sequence

from specframe.files import atomic_write, locked

log = logging.getLogger("specframe.drafting")

FORMAT_VERSION = 4                   # 3: records whether a GPU ran the passes, and times them as decoding does;
                                     # 4: and what a token costs per position of depth
MAX_AGE_SECONDS = 7 * 24 * 3600      # a stored table is measured again after a week
MAX_OTHER_LOAD = 0.25                # other processes' CPU use (in cores) above which a calibration is not stored
LOAD_MIN_WALL_SECONDS = 0.25         # the shortest time over which that use can be told
AGREEMENT = 0.15                     # two samples of a size agree when within 15% of each other
MAX_ROUNDS = 5
FLOOR_SLACK = 0.85                   # t(k) >= 0.85 t(1): a bigger pass never costs less than a single token's
CEILING_SLACK = 1.5                  # t(k) <= 1.5 k t(1): nor more than k single passes, with slack
DRIFT = 1.5                          # passes slower than the pace by this factor, most of the last few: stale
FASTER = 1.25                        # one pass faster than the pace by this factor: stale (noise only adds time,
                                     # and loop passes run ~10% slower than measured ones, so it is never noise)
GROSS = 2.0                          # a pace this far off the table's level, either way: stale (a busy CPU)
PACE_WINDOW = 16                     # the last passes whose ratios to the table set the pace,
PACE_LEAST = 3                       # and how many are needed to tell it
DRIFT_WINDOW = 5                     # the last passes (any sizes, and single-token ones) whose ratios are compared
BATCH_WINDOW = 3                     # passes over several tokens in a row all this much slower than the pace: stale
GROSS_BATCHES = 2                    # or this many all GROSS * DRIFT slower (the pace taken as the table's level
                                     # until a single-token pass is timed): a table too cheap for every draft
UNCONFIRMED_DRAFT = 4                # the longest draft verified until a stored table is confirmed (EPYC: a pass
                                     # of 5 tokens costs 4.3 single ones, of 17, 13.9)
SPOT_CHECK_SECONDS = 0.1             # a spot check times passes for at least this long (the 1.5B on a CPU: its
MAX_SPOT_CHECK_ROUNDS = 100          # three rounds take 1.7 s; a tiny model's single pass 0.06 ms), in at most this
                                     # many rounds
REMEASURE_AFTER_SECONDS = 300.0      # after a measurement here, no other for this long: one costs ~20 s of
                                     # every request's time, and a slowdown of every size alike changes no choice
DEPTH_STEP = 256                     # calibration times the single pass and the largest up to this much deeper
                                     # too (the 1.5B on the EPYC: 16 tokens 87 ms dearer, a sixth; filling takes 5 s),
DEPTH_POINTS = 5                     # at this many depths, evenly spaced
MIN_DEPTH_STEP = 64                  # where the context leaves less room, the depth's cost is not measured (none)
DEEPEST_DISCOUNT = 0.5               # a pass shallower than the table's depth costs at least this share of its entry


def _slow_batches(ratios: list[float], pace: float, n_tokens: int, seconds: float, expected: float) -> str:
    """Why the table is stale when the last passes over several tokens, at ``ratios`` to it, were all too slow."""
    return (f"the last {len(ratios)} passes over several tokens took at least {min(ratios):.1f} times what the table "
            f"says, single-token passes {pace:.1f} times (the latest, of {n_tokens} token(s), {seconds * 1e3:.1f} ms "
            f"against {expected * 1e3:.1f} ms)")


def _warm_singles(gpu: bool) -> int:
    """Single-token passes in a row before the next one runs as plain decoding's do: its graph reused on a CPU,
    replayed on a GPU (see the module docstring)."""
    return 2 if gpu else 1


def _timed(run_pass: Callable[[int], float], n_tokens: int, gpu: bool) -> float:
    """One timed pass over ``n_tokens`` as decoding runs it: a single-token pass after _warm_singles untimed ones, a
    bigger one right after a single-token pass (its graph built anew, or on a GPU run directly)."""
    for _ in range(_warm_singles(gpu) if n_tokens == 1 else 1):
        run_pass(1)
    return run_pass(n_tokens)


class PassCostError(ValueError):
    """A pass-cost table that cannot be true."""


def check_table(seconds: dict[int, float], gpu: bool = False) -> None:
    """Raise PassCostError unless ``seconds`` (tokens -> seconds) is a possible table (on a ``gpu``, with no
    ceiling: see the module docstring)."""
    if 1 not in seconds:
        raise PassCostError("no cost for a single-token pass")
    for n, s in seconds.items():
        if not (isinstance(n, int) and n >= 1 and isinstance(s, float) and s == s and 0 < s < 3600):
            raise PassCostError(f"pass of {n!r} tokens: {s!r} seconds is not a positive duration")
    single = seconds[1]
    for n, s in seconds.items():
        if s < FLOOR_SLACK * single:
            raise PassCostError(f"a pass of {n} tokens ({s * 1e3:.1f} ms) would cost less than one of a single "
                                f"token ({single * 1e3:.1f} ms)")
        if not gpu and s > CEILING_SLACK * n * single:
            raise PassCostError(f"a pass of {n} tokens ({s * 1e3:.1f} ms) would cost more than {n} single-token "
                                f"passes ({single * 1e3:.1f} ms each)")


def within_bounds(n_tokens: int, seconds: float, single: float, gpu: bool = False) -> float:
    """``seconds`` for a pass of ``n_tokens``, moved as little as check_table's bounds require beside a single-token
    pass of ``single`` seconds."""
    floored = max(seconds, FLOOR_SLACK * single)
    return floored if gpu else min(floored, CEILING_SLACK * n_tokens * single)


class PassCost:
    """Seconds of one target pass by the number of tokens in it (sizes not measured are interpolated)."""

    def __init__(self, seconds: dict[int, float] | None = None, *, measured_at: float | None = None,
                 other_load: float | None = None, confirmed: bool = True, gpu: bool = False,
                 per_position: float = 0.0, depth: int = 0):
        self._seconds: dict[int, float] = dict(seconds or {})
        self.per_position = per_position   # seconds each token of a pass adds per position deeper than ``depth``,
        self.depth = depth                 # the context's depth the table was measured at
        self.position = depth              # the depth the next pass runs at (at_depth)
        self.gpu = gpu                  # measured on a GPU, which replays captured graphs (the module docstring)
        self.confirmed = confirmed      # measured here, or a pass over several tokens has run at its pace
        self._each: list[float] = []    # seconds() of every size from 0 on, filled by seconds_from
        self.measured_at = measured_at
        self.other_load = other_load
        self._recent_ratios: deque = deque(maxlen=DRIFT_WINDOW)
        self._pace_ratios: deque = deque(maxlen=PACE_WINDOW)
        self.pace = 1.0   # how much longer than the table says the loop's passes take now (``_update_pace``)
        self._recent_single_ratios: deque = deque(maxlen=DRIFT_WINDOW)     # the pace
        self._recent_batch_ratios: deque = deque(maxlen=BATCH_WINDOW)
        self._recent_batch_sizes: deque = deque(maxlen=BATCH_WINDOW)      # the sizes of those passes
        self._last_size, self._in_a_row = 0, 0          # the last observed pass's size, and how many in a row
        self._trusted_since: float | None = None        # monotonic time this process last measured it or kept it
        self.stale_reason: str | None = None

    @property
    def measured(self) -> dict[int, float]:
        return dict(sorted(self._seconds.items()))

    def covers(self, sizes: Iterable[int]) -> bool:
        return all(n in self._seconds for n in sizes)

    @property
    def stale(self) -> bool:
        return self.stale_reason is not None

    def at_depth(self, position: int) -> None:
        """Price the passes from now on as run after ``position`` positions of the context."""
        self.position = position

    def seconds(self, n_tokens: int) -> float:
        """Seconds a pass over ``n_tokens`` takes now, at the depth set by ``at_depth``."""
        return self.pace * self.seconds_at(n_tokens, self.position)

    def seconds_at(self, n_tokens: int, position: int) -> float:
        """The table's seconds of a pass over ``n_tokens`` run after ``position`` positions (at its own pace)."""
        return self._deepened(n_tokens, self._entry(n_tokens), position)

    def _deepened(self, n_tokens: int, entry: float, position: int) -> float:
        return max(DEEPEST_DISCOUNT * entry, entry + self.per_position * n_tokens * (position - self.depth))

    def _entry(self, n_tokens: int) -> float:
        """The table's seconds for ``n_tokens`` at its own depth, interpolated between measured sizes."""
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

    def draft_limit(self, n_max: int) -> int:
        """The longest draft worth verifying now: ``n_max``, or UNCONFIRMED_DRAFT while the table is unconfirmed."""
        return n_max if self.confirmed else min(n_max, UNCONFIRMED_DRAFT)

    def seconds_from(self, first: int, last: int) -> list[float]:
        """``seconds`` of each size from ``first`` to ``last`` tokens: the chain prices every length of every draft
        at every step, so the sizes are interpolated once per table, and only the depth's share and the pace are
        applied each time."""
        if len(self._each) <= last:
            self._each = [self._entry(n) for n in range(max(last + 1, 2 * len(self._each), 65))]
        entries = self._each[first:last + 1]
        if self.per_position and self.position != self.depth:
            entries = [self._deepened(n, entry, self.position) for n, entry in enumerate(entries, first)]
        pace = self.pace
        return entries if pace == 1.0 else [pace * entry for entry in entries]

    # --- healing ---------------------------------------------------------------------------------------------

    def observe(self, n_tokens: int, seconds: float, comparable: bool = True) -> None:
        """A pass the engine timed, compared with the table (``_compare``) when it is ``comparable`` (one
        sequence's verification) and ran as the table has it: a single-token pass right after one of another size
        builds its graph anew (on a GPU, runs directly), while the table has it reusing the last one's."""
        self._in_a_row = self._in_a_row + 1 if n_tokens == self._last_size else 1
        self._last_size = n_tokens
        if comparable and not (n_tokens == 1 and self._in_a_row <= _warm_singles(self.gpu)):
            self._compare(n_tokens, seconds)

    def _compare(self, n_tokens: int, seconds: float) -> None:
        """A pass timed as the table has it. A slower pass never changes the table (a warm-up pass, or one slowed
        by another process, must not poison it); shortly after a measurement a much faster one takes its size's
        entry, and otherwise observations only tell when the table has gone stale (see the module docstring).
        Noise only ever adds time, so one pass much faster than the pace proves the table wrong, while slower ones
        must be slow most of the last five."""
        if n_tokens not in self._seconds or self.stale:
            return
        expected = self.seconds_at(n_tokens, self.position)
        ratio = seconds / expected
        self._recent_ratios.append(ratio)
        self._pace_ratios.append(ratio)
        self._update_pace()
        (self._recent_single_ratios if n_tokens == 1 else self._recent_batch_ratios).append(ratio)
        if n_tokens > 1:
            self._recent_batch_sizes.append(n_tokens)
        lately = (self._trusted_since is not None
                  and time.monotonic() - self._trusted_since < REMEASURE_AFTER_SECONDS)
        if seconds * FASTER < expected and lately:
            # measured lately, yet this size runs faster in the loop (a GPU replays a captured graph): noise never
            # makes a pass faster
            entry = seconds + self._entry(n_tokens) - expected      # the observed time at the table's depth
            self._seconds[n_tokens], self._each = self._possible_entry(n_tokens, entry), self._each[:0]
            return
        if lately:
            return
        singles = self._recent_single_ratios
        fastest_single, pace = (min(singles), statistics.median(singles)) if singles else (1.0, 1.0)
        level = statistics.median(self._recent_ratios)
        full = len(self._recent_ratios) == DRIFT_WINDOW
        batches = self._recent_batch_ratios
        gross = list(batches)[-GROSS_BATCHES:]
        if ratio * FASTER < fastest_single:
            self.stale_reason = (f"a pass of {n_tokens} token(s) took {seconds * 1e3:.1f} ms, the table says "
                                 f"{expected * 1e3:.1f} ms" + (f" and single-token passes take {pace:.2f} times "
                                                              "what it says" if singles else ""))
        elif full and (level > DRIFT * pace or not 1 / GROSS <= level <= GROSS):
            self.stale_reason = (f"the last {DRIFT_WINDOW} passes took {level:.1f} times what the table says"
                                 + (f", single-token passes {pace:.1f} times" if singles else "")
                                 + f" (the latest, of {n_tokens} token(s), {seconds * 1e3:.1f} ms against "
                                 f"{expected * 1e3:.1f} ms)")
        elif singles and len(batches) == BATCH_WINDOW and min(batches) > DRIFT * pace:
            self.stale_reason = _slow_batches(list(batches), pace, n_tokens, seconds, expected)
        elif len(gross) == GROSS_BATCHES and min(gross) > GROSS * DRIFT * pace:
            self.stale_reason = _slow_batches(gross, pace, n_tokens, seconds, expected)
        elif n_tokens > 1 and ratio <= DRIFT * pace:
            self.confirmed = True

    def spot_check(self, run_pass: Callable[[int], float], sizes: Sequence[int], *, rounds: int = 3) -> None:
        """Time single-token passes and passes over each of ``sizes``, interleaved, as ``calibrate`` times them,
        after a warm-up: at least ``rounds`` of each, and more while the timed passes add up to under
        SPOT_CHECK_SECONDS (a tiny model's, or a GPU's, passes take a millisecond or less, and the first ones in a
        process run slower). Then observe them as the engine's passes are: the least single as the pace (noise only
        adds time, and one slow single would make every batch look too fast), then the last ``rounds`` rounds' (the
        warmest). A right table is confirmed, one far off is found stale, in a second or two."""
        run_pass(max(sizes))                                  # warm-up: first-touch costs are not a pass's cost
        singles: list[float] = []
        timed: list[list[float]] = []                         # a round's time of each size
        while len(timed) < rounds or (sum(singles) + sum(map(sum, timed)) < SPOT_CHECK_SECONDS
                                      and len(timed) < MAX_SPOT_CHECK_ROUNDS):
            singles.append(_timed(run_pass, 1, self.gpu))
            timed.append([_timed(run_pass, n, self.gpu) for n in sizes])
        self._compare(1, min(singles))
        for round_ in timed[-rounds:]:
            for n, seconds in zip(sizes, round_):
                self._compare(n, seconds)
        level = statistics.median(self._recent_ratios) if self._recent_ratios else 1.0
        if not self.stale and not 1 / GROSS <= level <= GROSS:
            # too few passes for the loop's test of the level, which the draft model's cost is weighed against
            self.stale_reason = f"a spot check's passes took {level:.2f} times what the table says"

    def recheck(self, run_pass: Callable[[int], float], fallback: int, room: int) -> None:
        """The loop found the table stale: spot-check it over the two largest of the last few bigger sizes the loop
        compared that fit in ``room`` tokens now (else ``fallback``), and keep it, unjudged for
        REMEASURE_AFTER_SECONDS, if that finds it right; else it stays stale, to be measured again (see the module
        docstring)."""
        reason = self.stale_reason
        sizes = sorted({n for n in self._recent_batch_sizes if n <= room})[-2:] or [fallback]
        self.stale_reason = None
        self._forget_observations()
        self.spot_check(run_pass, sizes)
        if self.stale:
            self.stale_reason = f"{reason}, and a spot check found {self.stale_reason}"
        else:
            self._trusted_since = time.monotonic()
            log.info("kept the pass costs: a spot check of %s token(s) found them right, though %s",
                     "/".join(map(str, sizes)), reason)

    def _forget_observations(self) -> None:
        for recent in (self._recent_ratios, self._recent_single_ratios, self._recent_batch_ratios,
                       self._recent_batch_sizes, self._pace_ratios):
            recent.clear()
        self._update_pace()

    def _update_pace(self) -> None:
        """The pace from the passes compared lately (see the module docstring): set once a pass is observed, not
        worked out at each price, as the chain prices every length of every draft at every step."""
        self.pace = (min(max(statistics.median(self._pace_ratios), 1 / GROSS), GROSS)
                     if len(self._pace_ratios) >= PACE_LEAST else 1.0)

    def _possible_entry(self, n_tokens: int, seconds: float) -> float:
        """``seconds`` for the entry of ``n_tokens``, moved as little as keeps the table possible (check_table): a
        single pass observed fast must not make the table's dearer sizes cost more than their tokens one by one."""
        if n_tokens != 1:
            return within_bounds(n_tokens, seconds, self._seconds[1], self.gpu)
        others = {n: s for n, s in self._seconds.items() if n != 1}
        low = 0.0 if self.gpu else max((s / (CEILING_SLACK * n) for n, s in others.items()), default=0.0)
        high = min((s / FLOOR_SLACK for s in others.values()), default=seconds)
        return min(max(seconds, low), high)

    # --- calibration -----------------------------------------------------------------------------------------

    def calibrate(self, run_pass: Callable[[int], float], sizes: Iterable[int], *, gpu: bool = False,
                  depth: int = 0, deeper: tuple[int, Callable[[int, int], float]] | None = None) -> None:
        """Measure every size with ``run_pass(n) -> seconds``, passes run after ``depth`` positions, and replace the
        table; see the module docstring (``gpu``: the model runs on a GPU, which replays captured graphs). A table
        measured impossible twice (a machine too busy to tell) is forced into the bounds, used for this run and not
        stored. ``deeper``, (positions, run_at) with ``run_at(n, offset) -> seconds`` timing a pass ``offset``
        positions deeper (up to ``positions``, deepest first), times what depth adds (none without it)."""
        sizes = sorted(set(sizes) | {1})
        run_pass(max(sizes))                                  # warm-up: first-touch costs are not a pass's cost
        for attempt in range(2):
            before, started = cpu_times(), time.monotonic()
            table = self._measure(run_pass, sizes, gpu)
            self.other_load = other_load(before, cpu_times(), time.monotonic() - started)
            try:
                check_table(table, gpu)
                break
            except PassCostError as exc:
                log.warning("the measured pass costs are impossible (%s)%s", exc,
                            ": measuring again" if attempt == 0 else ": bounded, used for this run, not stored")
        else:
            table = {n: within_bounds(n, s, table[1], gpu) for n, s in table.items()}
            self.other_load = float("inf")
        self.measured_at, self.gpu = time.time(), gpu
        self._seconds, self._each = table, self._each[:0]
        self.depth = self.position = depth
        self.per_position = self._measure_depth(*deeper, max(sizes), gpu) if deeper is not None else 0.0
        self._forget_observations()
        self._trusted_since = time.monotonic()
        self.stale_reason, self.confirmed = None, True

    def _measure_depth(self, positions: int, run_at: Callable[[int, int], float], largest: int, gpu: bool) -> float:
        """Seconds a token of a pass adds per position of depth: the single pass and the largest timed at
        DEPTH_POINTS depths from ``positions`` deeper back to the table's, each size's growth the median of the
        slopes between them (the largest weighs most: its growth is the clearest beside the noise)."""
        sizes = sorted({1, largest})
        offsets = [positions * k // (DEPTH_POINTS - 1) for k in range(DEPTH_POINTS - 1, -1, -1)]
        timed = [self._measure(functools.partial(_at_offset, run_at, offset), sizes, gpu) for offset in offsets]
        grown = 0.0
        for n in sizes:
            points = [(offset, seconds[n]) for offset, seconds in zip(offsets, timed)]
            slopes = [(b - a) / (q - p) for i, (p, a) in enumerate(points) for q, b in points[i + 1:] if q != p]
            grown += statistics.median(slopes)
        log.info("passes up to %d positions deeper: %s", positions, "; ".join(
            f"{n} token(s) " + ", ".join(f"{seconds[n] * 1e3:.1f}" for seconds in timed) + " ms" for n in sizes))
        return max(0.0, grown / sum(sizes))

    @staticmethod
    def _measure(run_pass: Callable[[int], float], sizes: list[int], gpu: bool) -> dict[int, float]:
        samples: dict[int, list[float]] = {n: [] for n in sizes}
        for round_ in range(MAX_ROUNDS):
            pending = [n for n in sizes if round_ < 2 or not _agreed(samples[n])]
            if not pending:
                break
            for n in (pending if round_ % 2 == 0 else reversed(pending)):
                samples[n].append(_timed(run_pass, n, gpu))
        return {n: _agreed(s) or min(s) for n, s in samples.items()}

    # --- storage ---------------------------------------------------------------------------------------------

    @property
    def storable(self) -> bool:
        return self.other_load is None or self.other_load <= MAX_OTHER_LOAD

    def to_json(self) -> str:
        return json.dumps({"version": FORMAT_VERSION, "measured_at": self.measured_at, "other_load": self.other_load,
                           "gpu": self.gpu, "depth": self.depth, "per_position": self.per_position,
                           "seconds": {str(n): s for n, s in self.measured.items()}}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "PassCost":
        """Parse a stored table; PassCostError when it is malformed, impossible, taken under load or too old."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
                raise PassCostError(f"not a version-{FORMAT_VERSION} pass-cost table")
            seconds = {int(n): float(s) for n, s in data["seconds"].items()}
            measured_at, other_load = float(data["measured_at"]), data.get("other_load")
            other_load = None if other_load is None else float(other_load)
            gpu = data["gpu"]
            if not isinstance(gpu, bool):
                raise TypeError(f"gpu is {gpu!r}, not true or false")
            depth, per_position = data["depth"], float(data["per_position"])
            if not isinstance(depth, int) or depth < 0:
                raise ValueError(f"depth is {depth!r}, not a position")
            if not 0.0 <= per_position < 1.0:
                raise ValueError(f"per_position is {per_position!r}, not seconds a token per position")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise PassCostError(f"unreadable ({type(exc).__name__}: {exc})") from None
        check_table(seconds, gpu)
        age = time.time() - measured_at
        if not 0 <= age <= MAX_AGE_SECONDS:
            raise PassCostError(f"measured {age / 86400:.1f} days ago")
        if other_load is not None and other_load > MAX_OTHER_LOAD:
            raise PassCostError(f"measured while other processes used {other_load:.2f} cores")
        return cls(seconds, measured_at=measured_at, other_load=other_load, confirmed=False, gpu=gpu,
                   per_position=per_position, depth=depth)


class PassCostStore:
    """Pass-cost tables on disk, one per model, build, machine and thread count (the key)."""

    def __init__(self, folder: pathlib.Path, key: str):
        self.path = folder / f"{key}.json"

    def load(self) -> PassCost | None:
        """The stored table, or None when there is none or it cannot be trusted (said in the log)."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return None
        try:
            return PassCost.from_json(data.decode("utf-8"))
        except (PassCostError, UnicodeDecodeError) as exc:
            # It can never become trustworthy again: deleted, so a run too busy to store its own table does not
            # leave it in place for the next one.
            log.info("pass-cost table %s is deleted and measured again: %s", self.path, exc)
            with contextlib.suppress(OSError):
                self.reset()
            return None

    def save(self, cost: PassCost) -> None:
        if not cost.storable:
            if cost.other_load != float("inf"):
                log.warning("the pass costs were measured while other processes used %.2f cores: used for this "
                            "run, not stored", cost.other_load)
            with contextlib.suppress(OSError):
                self.reset()     # a table is measured only when the stored one is missing or proved wrong
            return
        try:
            atomic_write(self.path, cost.to_json().encode())
        except OSError as exc:
            log.warning("could not store the measured pass costs in %s: %s", self.path, exc)
        self._prune()

    def _prune(self) -> None:
        """Tables of other models, builds or thread counts that nothing has refreshed for longer than a table
        lives are of no use: delete them, so the folder does not grow with every model file ever run."""
        now = time.time()
        for other in self.path.parent.glob("*.json"):
            try:
                if now - other.stat().st_mtime > MAX_AGE_SECONDS:
                    other.unlink()
            except OSError:
                pass

    def reset(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def locked(self):
        """Held while measuring, so that two processes starting together measure once (the second loads)."""
        return locked(self.path)


def _at_offset(run_at: Callable[[int, int], float], offset: int, n_tokens: int) -> float:
    return run_at(n_tokens, offset)


def _agreed(samples: list[float]) -> float | None:
    """The least of the samples that has another within AGREEMENT of it, or None."""
    ordered = sorted(samples)
    for low, high in zip(ordered, ordered[1:]):
        if high <= low * (1 + AGREEMENT):
            return low
    return None


def cpu_times() -> tuple[float, float] | None:
    """(CPU seconds used by every process, by this one) so far, from /proc; None where there is no /proc."""
    try:
        fields = pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        ticks = os.sysconf("SC_CLK_TCK")
        busy = sum(int(v) for i, v in enumerate(fields[:8]) if i not in (3, 4)) / ticks   # all but idle, iowait
        own = os.times()
        return busy, own.user + own.system
    except (OSError, ValueError, IndexError):
        return None


def others_busy(before, after) -> float | None:
    """CPU seconds other processes used between two ``cpu_times`` readings; None when unknown."""
    if before is None or after is None:
        return None
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1]))


def load_over(busy: float | None, wall: float) -> float | None:
    """Cores other processes kept busy, given their CPU seconds over ``wall`` seconds; None when unknown, or when the
    wall time is too short to tell (/proc counts in ticks of 10 ms: over a millisecond one tick reads as ten busy
    cores)."""
    if busy is None or wall < LOAD_MIN_WALL_SECONDS:
        return None
    return busy / wall


def other_load(before, after, wall: float) -> float | None:
    """Cores other processes kept busy between two ``cpu_times`` readings ``wall`` seconds apart (``load_over``)."""
    return load_over(others_busy(before, after), wall)
