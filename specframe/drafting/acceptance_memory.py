"""What drafters' drafts were worth in earlier runs: a new run's estimates start from it.

Each run estimates how likely a draft's first token is to stand by the draft's run and context support (gain.py),
and those pairs are many: a reply of a few hundred tokens ends before its own estimates of most of them have seen
enough drafts, and taken cautiously over little evidence they hold right drafts back. Over the replayed prompts
of the built-in workloads and the standard library (benchmarks/replay.py), copy-cursor's first token stood 27% of
the time after a one-token match where a run's estimates said 18%, and 61% where its copy had carried on for a token
where they said 45%. So the counts of drafts and of first tokens right, by run bucket and support level, are kept on
disk for each drafter type, its settings and the target model, and a new run starts from them (at most
gain.LEARNED_WEIGHT drafts' worth per pair). So are the tokens after an accepted one (how many were judged, how many
stood, over how many drafts): a draft model's, right 98-100% of the time on code generation here, started each run
from a prior of 90% taken cautiously, and a run asks a model only where its drafts are expected to pay. Each save
keeps KEPT_PER_SAVE of what was stored before, so the memory follows the text a user decodes now. Choices only: the
target verifies every draft, so the output cannot change.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import pathlib
from dataclasses import dataclass, field

from specframe.files import atomic_write, locked
from specframe.paths import cache_dir

log = logging.getLogger("specframe.drafting")

KEPT_PER_SAVE = 0.9   # the share of the stored counts a save keeps beside the run's own: about ten runs'
LEAST_DRAFTS = 0.01   # a pair whose counts have faded under this many drafts is dropped

Counts = dict[tuple[int, int], tuple[float, float]]   # (run bucket, support level) -> (drafts, first tokens right)


@dataclass
class Learned:
    """Counts of one drafter's drafts: their first tokens by run and support, and the tokens after an accepted one."""

    first: Counts = field(default_factory=dict)
    later: tuple[float, float, float] = (0.0, 0.0, 0.0)   # (drafts, tokens after an accepted one judged, that stood)

    def __bool__(self) -> bool:
        return bool(self.first) or self.later[0] > 0


def memory_folder() -> pathlib.Path:
    return cache_dir() / "acceptance"


class AcceptanceMemory:
    """The counts stored for one drafter (``identity``: its type, settings and target)."""

    def __init__(self, identity: str, folder: pathlib.Path | None = None):
        key = hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.path = (folder or memory_folder()) / f"{key}.json"

    def load(self) -> Learned:
        """The stored counts; none when there are none or the file is unreadable (it is then written anew)."""
        try:
            data = json.loads(self.path.read_bytes())
            first = {(int(run), int(support)): (float(drafts), float(right))
                     for run, support, drafts, right in data["first_token"]}
            drafts, judged, stood = map(float, data.get("later_tokens", (0.0, 0.0, 0.0)))
        except FileNotFoundError:
            return Learned()
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.info("acceptance memory %s is ignored: unreadable (%s: %s)", self.path, type(exc).__name__, exc)
            return Learned()
        if not (all(math.isfinite(d) and 0 <= r <= d for d, r in first.values())
                and math.isfinite(judged) and 0 <= stood <= judged and math.isfinite(drafts) and drafts >= 0):
            log.info("acceptance memory %s is ignored: expected 0 <= tokens right <= tokens judged", self.path)
            return Learned()
        return Learned(first, (drafts, judged, stood))

    def save(self, tallies: list[Learned]) -> None:
        """Add runs' counts (one per slot's record) to what is stored, which fades first (under a lock: the
        benchmark's processes save the same drafters' counts)."""
        if not any(tallies):
            return
        try:
            with locked(self.path):
                stored = self.load()
                first = {pair: (KEPT_PER_SAVE * drafts, KEPT_PER_SAVE * right)
                         for pair, (drafts, right) in stored.first.items()}
                later = [KEPT_PER_SAVE * n for n in stored.later]
                for tally in tallies:
                    for pair, (drafts, right) in tally.first.items():
                        old_drafts, old_right = first.get(pair, (0.0, 0.0))
                        first[pair] = (old_drafts + drafts, old_right + right)
                    later = [old + new for old, new in zip(later, tally.later)]
                pairs = [[run, support, drafts, right] for (run, support), (drafts, right) in sorted(first.items())
                         if drafts >= LEAST_DRAFTS]
                atomic_write(self.path, json.dumps({"first_token": pairs, "later_tokens": later}).encode())
        except OSError as exc:
            log.warning("could not store what the drafts were worth in %s: %s", self.path, exc)
