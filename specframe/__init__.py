"""specframe: speculative decoding on llama.cpp's libllama, with drafters as plugins."""

from specframe.drafting import NO_DRAFT, Draft, Drafter, DrafterEnv
from specframe.drafting.incremental import IncrementalDrafter
from specframe.errors import ConfigError, ModelError, ParamError, SpecframeError
from specframe.hookspecs import hookimpl
from specframe.model_settings import ModelSettings
from specframe.params import param

__all__ = ["ConfigError", "Draft", "Drafter", "DrafterEnv", "IncrementalDrafter", "ModelError", "ModelSettings",
           "NO_DRAFT", "ParamError", "SpecframeError", "hookimpl", "param"]
