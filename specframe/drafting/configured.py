"""The drafters a config names, as an engine uses them: each created on first use and kept, one per slot.

A plain run never loads a draft model, and a request for one drafter creates only that one. An engine that decodes
several sequences together (a server's slots) gets one drafter of each type per slot (``Drafter.for_slots``),
with its own per-request state; what a drafter means to share across requests, it shares across slots.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Sequence

from specframe.drafting.acceptance_memory import AcceptanceMemory
from specframe.drafting.catch_up import ModelRateStore, catch_up_folder
from specframe.drafting.chain import ChainEntry, DrafterChain, DrafterStats
from specframe.drafting.pass_cost import PassCost
from specframe.drafting.protocol import Drafter, DrafterEnv
from specframe.errors import ParamError, SpecframeError
from specframe.llama import timing_identity

if TYPE_CHECKING:
    from specframe.config import Config, DrafterConfig

log = logging.getLogger("specframe.engine")


class ConfiguredDrafters:
    def __init__(self, config: "Config", env: DrafterEnv, n_vocab: int, slots: int = 1):
        self.config = config
        self.env = env
        self.n_vocab = n_vocab
        self.slots = slots
        self.cost: PassCost | None = None   # the pass-cost table chains choose draft lengths with, if any
        self._made: dict[str, list[ChainEntry] | None] = {}   # by name: one entry per slot; None when it failed

    def chain(self, names: Sequence[str] | None = None, slot: int = 0) -> DrafterChain | None:
        """The configured drafters (or those named) of one slot, in priority order; None when there are none."""
        if names is not None:
            unknown = set(names) - {d.name for d in self.config.drafters}
            if unknown:
                raise SpecframeError(f"no drafter named {', '.join(sorted(unknown))} in {self.config.source}")
        made = [self._entries(d) for d in self.config.ordered_drafters() if names is None or d.name in names]
        entries = [slots[slot] for slots in made if slots is not None]
        return self._new_chain(entries) if entries else None

    def prepare(self) -> bool:
        """Create and prepare every configured drafter of every slot (Drafter.prepare); whether there are any."""
        chains = [self.chain(slot=slot) for slot in range(self.slots)]
        for chain in chains:
            if chain is not None:
                chain.prepare()
        return chains[0] is not None

    def chain_of(self, drafters: dict[str, Drafter], plugin: str = "(not a plugin)") -> DrafterChain:
        """A chain of drafters made outside the config (the benchmark's oracle), with the config's settings."""
        return self._new_chain([ChainEntry(label, drafter, plugin, DrafterStats())
                                for label, drafter in drafters.items()])

    def _entries(self, drafter_cfg: "DrafterConfig") -> list[ChainEntry] | None:
        """One chain entry per slot for a configured drafter, created once; None when a third-party drafter
        cannot start."""
        if drafter_cfg.name not in self._made:
            drafter_type = drafter_cfg.drafter_type
            try:
                drafters = drafter_type.cls.for_slots(drafter_cfg.params, self.env, self.slots)
                if len(drafters) != self.slots:
                    raise TypeError(f"for_slots() made {len(drafters)} drafters for {self.slots} slots")
                self._made[drafter_cfg.name] = [self._entry(drafter_cfg, drafter) for drafter in drafters]
            except ParamError as exc:
                raise self.config.drafter_error(drafter_cfg, exc) from None
            except SpecframeError:
                raise
            except (Exception, SystemExit) as exc:  # a third-party drafter that cannot start is reported, not fatal
                log.warning("drafter '%s' (plugin %s) could not be created and is left out: %s: %s",
                            drafter_cfg.name, drafter_type.plugin, type(exc).__name__, exc)
                self._made[drafter_cfg.name] = None
        return self._made[drafter_cfg.name]

    def _entry(self, drafter_cfg: "DrafterConfig", drafter: Drafter) -> ChainEntry:
        """A chain entry, starting from what the same drafter's drafts were worth in earlier runs on the same
        target; a model's also with the catch-up and drafting rates an earlier run timed for the same settings."""
        entry = ChainEntry(drafter_cfg.name, drafter, drafter_cfg.drafter_type.plugin, DrafterStats())
        entry.acceptance_memory = AcceptanceMemory(f"{drafter_cfg.type}:{drafter_cfg.params!r}:"
                                                   f"{self.env.target.path}")
        entry.record.learn(entry.acceptance_memory.load())
        if drafter.uses_model:
            identity = (f"{drafter_cfg.type}:{drafter_cfg.params!r}:{self.env.n_threads}:{self.env.n_gpu_layers}:"
                        f"{timing_identity()}")
            key = hashlib.sha256(identity.encode()).hexdigest()[:16]
            entry.catch_up_store = ModelRateStore(catch_up_folder(), key)
            entry.record.catch_up = entry.catch_up_store.load()
            entry.drafting_store = ModelRateStore(catch_up_folder(), f"{key}-drafting")
            entry.record.assume_drafting_rate(entry.drafting_store.load(), self.config.speculative.n_max)
        return entry

    def _new_chain(self, entries: list[ChainEntry]) -> DrafterChain:
        speculative = self.config.speculative
        return DrafterChain(entries, self.n_vocab, speculative.n_min, self.cost, speculative.arbitration,
                            speculative.n_max)

    def _keep_what_was_measured(self) -> None:
        """Store each model's drafting rate as its calls timed it (ModelRateStore: not when the CPU was busy), and
        what each drafter's drafts were worth (AcceptanceMemory: one save for all its slots)."""
        for entry in self._all():
            timed = entry.record.drafting_rate(self.config.speculative.n_max)
            if entry.drafting_store is not None and timed is not None and entry.disabled is None:
                entry.drafting_store.save(*timed, self.cost.pace if self.cost is not None else 1.0)
        for slots in self._made.values():
            if slots is not None and slots[0].acceptance_memory is not None:
                slots[0].acceptance_memory.save([entry.record.tally for entry in slots])

    def _all(self) -> list[ChainEntry]:
        return [entry for slots in self._made.values() if slots is not None for entry in slots]

    def forget(self) -> None:
        """Close the drafters without saving what they learned (what the models' drafting costs on this machine and
        what the drafts were worth are kept): the next request creates them anew."""
        self._keep_what_was_measured()
        self._new_chain(self._all()).close()
        self._made.clear()

    def close(self) -> list[str]:
        """Save what the drafters persist and close them; return why the saves that failed did."""
        self._keep_what_was_measured()
        entries = self._all()
        failures = [failure for entry in entries if (failure := _save(entry))]
        self._new_chain(entries).close()
        self._made.clear()
        return failures


def _save(entry: ChainEntry) -> str | None:
    """Why the drafter could not save what it persists, or None when it saved (or has nothing to save)."""
    try:
        entry.drafter.save()
    except (Exception, SystemExit) as exc:
        reason = str(exc) if isinstance(exc, SpecframeError) else f"{type(exc).__name__}: {exc}"
        return f"drafter '{entry.label}' (plugin {entry.plugin}) could not save what it learned: {reason}"
    return None
