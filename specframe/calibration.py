"""The target's pass-cost table in an engine: the one in hand, else the stored one, else measured now.

What a pass costs belongs to the model file, the build and its CPU kernels (kernels.py), the machine, the threads, the
batch size and the other model settings (GPU offload, KV cache...), so the table is stored under a key of those
(pass_cost.py says how it is measured, checked, stored and healed). Sizes: every
pass over one sequence's ``[last, draft...]`` up to 17 tokens (where the batch kernels' steps make costs jagged),
then every eighth size and n_max + 1 (a drafter that drafts 64 tokens must not cost ten minutes of timing 65 sizes
on a slow CPU: the sizes between are interpolated), and, when several sequences are decoded together, the passes
over ``slots`` full batches; a pass's cost depends on its number of tokens, not on how many sequences they belong
to, so every size is timed as one sequence's batch.
"""

from __future__ import annotations

import hashlib
import logging
import pathlib
import time

import numpy as np

from specframe.drafting.catch_up import forget_model_rates
from specframe.drafting.pass_cost import DEPTH_STEP, MIN_DEPTH_STEP, PassCost, PassCostStore
from specframe.llama import Context, timing_identity
from specframe.model_settings import ModelSettings
from specframe.paths import cache_dir

log = logging.getLogger("specframe.engine")

DENSE_SIZES = 17    # every pass size up to this one is measured,
SPARSE_STEP = 8     # and beyond it every eighth (24, 32, ...) and the longest


class Calibration:
    def __init__(self, context: Context, identity: str, adaptive: bool):
        self.context = context
        self.store = PassCostStore(cache_dir() / "pass-cost", hashlib.sha256(identity.encode()).hexdigest()[:16])
        self.cost: PassCost | None = PassCost() if adaptive else None

    @staticmethod
    def identity(model_path: str, n_threads: int, n_batch: int, settings: ModelSettings) -> str:
        path = pathlib.Path(model_path)
        stat = path.stat()
        return (f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{n_threads}:{n_batch}:"
                f"{settings.settings_table()}:{timing_identity()}")

    @staticmethod
    def sizes(n_max: int, slots: int, room: int) -> list[int]:
        """The pass sizes to know, at most ``room`` tokens."""
        full = n_max + 1
        wanted = {*range(1, min(full, DENSE_SIZES) + 1), *range(DENSE_SIZES + SPARSE_STEP - 1, full, SPARSE_STEP),
                  min(full, room), *(full * k for k in range(2, slots + 1))}
        return sorted(n for n in wanted if n <= room)

    def ensure(self, sizes: list[int], seq: int = 0, n_past: int = 0) -> None:
        """Have a trustworthy cost for every size: the table in hand, else the stored one, else measured now on
        sequence ``seq`` after its first ``n_past`` positions (which are kept)."""
        cost = self.cost
        if cost is None or (cost.covers(sizes) and not cost.stale):   # None: not adaptive, no table to have
            return
        with self.store.locked():   # another process starting at the same time measures once
            stored = None if cost.stale else self.store.load()
            if stored is not None and stored.covers(sizes):
                PassCost.__init__(cost, stored.measured, measured_at=stored.measured_at, other_load=stored.other_load,
                                  confirmed=stored.confirmed, gpu=stored.gpu, per_position=stored.per_position,
                                  depth=stored.depth)
                return
            if cost.stale:
                log.info("measuring the pass costs again: %s", cost.stale_reason)
            self._measure(cost, sizes, seq, n_past)
            self.store.save(cost)

    def calibrate(self, sizes: list[int], reset: bool = False) -> PassCost:
        """Have the table now, on an empty context (``reset``: measured again even when a stored one is good). A
        stored table is spot-checked (PassCost.spot_check) and measured again if found wrong: a server's slots
        rarely run a pass over one sequence alone, the only pass that can confirm it later."""
        if reset:
            self.store.reset()
            forget_model_rates()     # the draft models' speeds on this machine are timed again too
        self.cost = self.cost or PassCost()
        if reset:
            self.cost.stale_reason = "asked to measure again"
        self.context.clear()
        self.ensure(sizes)
        if not self.cost.confirmed:
            self.cost.at_depth(0)
            self.cost.spot_check(self._pass_runner(max(sizes), 0, 0), [min(max(sizes), DENSE_SIZES)])
            self.ensure(sizes)
        return self.cost

    def heal(self, sizes: list[int], seq: int, n_past: int) -> None:
        """``ensure``, but a table the loop found stale is first spot-checked on sequence ``seq`` after ``n_past``
        positions, and measured again only if that finds it stale too (PassCost.recheck)."""
        cost, largest = self.cost, max(sizes)
        if cost is not None and cost.stale:
            cost.at_depth(n_past)
            cost.recheck(self._pass_runner(largest, seq, n_past), min(largest, DENSE_SIZES), largest)
        self.ensure(sizes, seq, n_past)

    def _measure(self, cost: PassCost, sizes: list[int], seq: int, n_past: int) -> None:
        """Calibrate on sequence ``seq`` after ``n_past`` positions, and DEPTH_STEP deeper where the context has
        room (filled for the purpose, then rolled back)."""
        largest, ctx = max(sizes), self.context
        positions = min(DEPTH_STEP, ctx.n_batch, ctx.n_ctx - n_past - largest)
        deeper = None
        if positions >= MIN_DEPTH_STEP:
            deeper = (positions, self._depth_runner(largest, seq, n_past, positions))
        try:
            cost.calibrate(self._pass_runner(largest, seq, n_past), sizes, gpu=ctx.model.offloaded, depth=n_past,
                           deeper=deeper)
        finally:
            ctx.truncate(n_past, seq)

    def _pass_runner(self, largest: int, seq: int, n_past: int):
        """``run_pass(n) -> seconds``: one pass over ``n`` filler tokens on sequence ``seq`` after its first
        ``n_past`` positions, rolled back after."""
        run_at = self._depth_runner(largest, seq, n_past, 0)
        return lambda n: run_at(n, 0)

    def _depth_runner(self, largest: int, seq: int, n_past: int, positions: int):
        """``run_at(n, offset) -> seconds``: one pass over ``n`` filler tokens on sequence ``seq`` after its first
        ``n_past`` positions and ``offset`` more of filler, rolled back to them after. The ``positions`` of filler
        are decoded once, untimed, at the first pass; offsets must then only shrink (the memory is truncated to
        each: nothing is decoded again)."""
        ctx = self.context
        filler = np.full(largest + positions, ctx.model.vocab.bos if ctx.model.vocab.bos >= 0 else 0, dtype=np.int32)
        filled = not positions

        def run_at(n: int, offset: int) -> float:
            nonlocal filled
            if not filled:
                ctx.decode(filler[:positions], n_past, seq=seq)
                filled = True
            start_pos = n_past + offset
            ctx.truncate(start_pos, seq)
            start = time.perf_counter()
            ctx.decode(filler[:n], start_pos, all_logits=True, seq=seq)
            seconds = time.perf_counter() - start
            ctx.truncate(start_pos, seq)
            return seconds

        return run_at
