"""What drafters' first tokens were worth in earlier runs: a new run's estimates start from it.

Each run estimates how likely a draft's first token is to stand by the draft's run and context support (gain.py),
and those pairs are many: a reply of a few hundred tokens ends before its own estimates of most of them have seen
enough drafts, and taken cautiously over little evidence they hold right drafts back. Over the replayed prompts
of the built-in workloads and the standard library (benchmarks/replay.py), copy-cursor's first token stood 27% of
the time after a one-token match where a run's estimates said 18%, and 61% where its copy had carried on for a token
where they said 45%. So the counts of drafts and of first tokens right, by run bucket and support level, are kept on
disk for each drafter type, its settings and the target model, and a new run starts from them (at most
gain.LEARNED_WEIGHT drafts' worth per pair). Each save keeps KEPT_PER_SAVE of what was stored before, so the memory
follows the text a user decodes now. Choices only: the target verifies every draft, so the output cannot change.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import pathlib

from specframe.files import atomic_write, locked
from specframe.paths import cache_dir

log = logging.getLogger("specframe.drafting")

KEPT_PER_SAVE = 0.9   # the share of the stored counts a save keeps beside the run's own: about ten runs'
LEAST_DRAFTS = 0.01   # a pair whose counts have faded under this many drafts is dropped

Counts = dict[tuple[int, int], tuple[float, float]]   # (run bucket, support level) -> (drafts, first tokens right)


def memory_folder() -> pathlib.Path:
    return cache_dir() / "acceptance"


class AcceptanceMemory:
    """The counts stored for one drafter (``identity``: its type, settings and target)."""

    def __init__(self, identity: str, folder: pathlib.Path | None = None):
        key = hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.path = (folder or memory_folder()) / f"{key}.json"

    def load(self) -> Counts:
        """The stored counts; none when there are none or the file is unreadable (it is then written anew)."""
        try:
            pairs = json.loads(self.path.read_bytes())["first_token"]
            counts = {(int(run), int(support)): (float(drafts), float(right)) for run, support, drafts, right in pairs}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.info("acceptance memory %s is ignored: unreadable (%s: %s)", self.path, type(exc).__name__, exc)
            return {}
        if not all(math.isfinite(drafts) and 0 <= right <= drafts for drafts, right in counts.values()):
            log.info("acceptance memory %s is ignored: expected 0 <= first tokens right <= drafts", self.path)
            return {}
        return counts

    def save(self, tallies: list[dict]) -> None:
        """Add runs' counts (one per slot's record) to what is stored, which fades first (under a lock: the
        benchmark's processes save the same drafters' counts)."""
        if not any(tallies):
            return
        try:
            with locked(self.path):
                counts = {pair: (KEPT_PER_SAVE * drafts, KEPT_PER_SAVE * right)
                          for pair, (drafts, right) in self.load().items()}
                for tally in tallies:
                    for pair, (drafts, right) in tally.items():
                        old_drafts, old_right = counts.get(pair, (0.0, 0.0))
                        counts[pair] = (old_drafts + drafts, old_right + right)
                pairs = [[run, support, drafts, right] for (run, support), (drafts, right) in sorted(counts.items())
                         if drafts >= LEAST_DRAFTS]
                atomic_write(self.path, json.dumps({"first_token": pairs}).encode())
        except OSError as exc:
            log.warning("could not store what the drafts were worth in %s: %s", self.path, exc)
