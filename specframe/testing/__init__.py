"""Tools for testing specframe and drafters written for it: tiny synthetic GGUF models that run through the real
libllama in milliseconds (no download), and the check that speculative output is the target's own (a greedy
speculative run against a plain one, where only near-ties and the arithmetic of batching may differ)."""

from specframe.testing.lossless import NEAR_TIE, LosslessVerdict, compare
from specframe.testing.synthetic import SyntheticShape, write_synthetic_model

__all__ = ["NEAR_TIE", "LosslessVerdict", "SyntheticShape", "compare", "write_synthetic_model"]
