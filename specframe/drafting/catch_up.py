"""How fast a draft model evaluates tokens in a batch and drafts them, remembered across runs.

A model drafter must evaluate the prompt (and any token it missed) before it can draft, and each token it drafts
costs a pass of its own. Where that costs more than its drafts could bring back (a CPU whose batches cost nearly
their tokens one by one), the chain does not start the model on the prompt at all (chain.py); to know that at a
run's first request, two rates timed in earlier runs are kept on disk, under a key of the drafter's type and
settings, the threads, the build and its CPU kernels: the seconds per token of its catching up (timed over a begin)
and of its drafting (fitted over its calls). They are kept at the pace of the pass-cost table (pass_cost.py): a rate
timed while the machine ran passes a fifth slower than the table says is stored a fifth faster, so that a later
run, which weighs it against the same table, does not find the model dearer or cheaper than it is for the moment
it was timed at. A rate timed while other processes used the CPU is not stored, and a stored one ages as the
pass-cost table does.
"""

from __future__ import annotations

import json
import logging
import pathlib
import time

from specframe.drafting.pass_cost import MAX_AGE_SECONDS, MAX_OTHER_LOAD
from specframe.files import atomic_write
from specframe.paths import cache_dir

log = logging.getLogger("specframe.drafting")


def catch_up_folder() -> pathlib.Path:
    return cache_dir() / "catch-up"


def forget_model_rates() -> None:
    """Every stored rate is timed again at the next run (``specframe calibrate --reset``)."""
    for stored in catch_up_folder().glob("*.json"):
        stored.unlink(missing_ok=True)


class ModelRateStore:
    """One of a model drafter's seconds-per-token rates on this machine (the key names the drafter, its settings and
    the rate)."""

    def __init__(self, folder: pathlib.Path, key: str):
        self.path = folder / f"{key}.json"

    def load(self) -> float:
        """The stored seconds per token, at the table's pace; 0.0 (unknown) when there is none, or it is unreadable
        or too old."""
        try:
            data = json.loads(self.path.read_bytes())
            seconds, measured_at = float(data["seconds_per_token"]), float(data["measured_at"])
        except FileNotFoundError:
            return 0.0
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.info("draft model rate %s is ignored: unreadable (%s: %s)", self.path, type(exc).__name__, exc)
            return 0.0
        if not 0 <= time.time() - measured_at <= MAX_AGE_SECONDS or not seconds > 0:
            return 0.0
        return seconds

    def save(self, seconds_per_token: float, other_load: float | None, pace: float = 1.0) -> None:
        """Store a rate timed while other processes used ``other_load`` cores (None: unknown), not when busy, and
        while the target's passes took ``pace`` times what the pass-cost table says (PassCost.pace)."""
        if other_load is not None and other_load > MAX_OTHER_LOAD:
            return
        data = {"seconds_per_token": seconds_per_token / pace, "measured_at": time.time(), "other_load": other_load}
        try:
            atomic_write(self.path, json.dumps(data).encode())
        except OSError as exc:
            log.warning("could not store the draft model's rate in %s: %s", self.path, exc)
