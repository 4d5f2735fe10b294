"""Plugin hook specifications. Built-in drafters implement them exactly as third-party plugins do."""

import pluggy

hookspec = pluggy.HookspecMarker("specframe")
hookimpl = pluggy.HookimplMarker("specframe")


@hookspec
def register_drafters(register):
    """Register drafter types: call ``register(DrafterSubclass)`` once for each."""
