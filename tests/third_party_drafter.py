"""A third-party drafter plugin for the core tests, loaded the way a config's ``[plugins] modules`` loads one
(``THIRD_PARTY`` below): the core tests run whether or not any plugin package is installed."""

from dataclasses import dataclass

import numpy as np

from specframe import NO_DRAFT, Draft, Drafter, hookimpl, param

THIRD_PARTY = '[plugins]\nmodules = ["third_party_drafter"]\n'    # a config's line that loads this module


@dataclass(frozen=True)
class LastMatchParams:
    length: int = param(8, min=1, max=64, help="most tokens to copy")


class LastMatchDrafter(Drafter):
    """Drafts what followed the latest earlier occurrence of the last token (deliberately simple: it rescans)."""

    name = "last-match"
    Params = LastMatchParams

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        earlier = np.flatnonzero(history[:-1] == history[-1])
        if not earlier.size:
            return NO_DRAFT
        start = int(earlier[-1]) + 1
        return Draft.of(history[start:start + min(n_max, self.params.length)])


@hookimpl
def register_drafters(register):
    register(LastMatchDrafter)
