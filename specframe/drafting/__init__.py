"""The drafter protocol and the priority chain that runs drafters."""

from specframe.drafting.chain import ChainEntry, DrafterChain, DrafterStats
from specframe.drafting.protocol import NO_DRAFT, Draft, Drafter, DrafterEnv, NoParams

__all__ = ["ChainEntry", "Draft", "Drafter", "DrafterChain", "DrafterEnv", "DrafterStats", "NO_DRAFT", "NoParams"]
