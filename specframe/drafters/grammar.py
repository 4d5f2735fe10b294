"""grammar: drafts what the request's grammar forces next.

Where only one text can come next (a key of a JSON schema, a closing bracket, ``"arguments": `` in a tool call),
the grammar has decided it, not the model: SGLang jumps forward over such text without asking the target; here it
is drafted and verified like any draft, so the output stays the target's own (the target may spell the forced
text with other tokens). Without a grammar, or where the grammar leaves the choice open, it drafts nothing; it
indexes nothing, so a call costs what llguidance takes to find the forced tokens.
"""

from __future__ import annotations

import numpy as np

from specframe.drafting import NO_DRAFT, Draft, Drafter
from specframe.drafting.protocol import Constraint
from specframe.hookspecs import hookimpl
from specframe.sampling import SamplingParams


class GrammarDrafter(Drafter):
    name = "grammar"

    def __init__(self, params, env):
        super().__init__(params, env)
        self._constraint: Constraint | None = None

    def begin(self, prompt: np.ndarray, sampling: SamplingParams | None = None,
              constraint: Constraint | None = None) -> None:
        self.sampling = sampling
        self._constraint = constraint

    def draft(self, history: np.ndarray, n_max: int) -> Draft:
        if self._constraint is None:
            return NO_DRAFT
        forced = self._constraint.forced()
        return Draft.of(forced[:n_max]) if forced.size else NO_DRAFT


@hookimpl
def register_drafters(register):
    register(GrammarDrafter)
