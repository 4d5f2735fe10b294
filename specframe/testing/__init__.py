"""Tools for testing specframe and drafters written for it: tiny synthetic GGUF models that run through the real
libllama in milliseconds (no download); the check that speculative output is the target's own (a greedy speculative
run against a plain one, where only near-ties and the arithmetic of batching may differ); and, for drafter authors,
a run of a drafter through the protocol that reports what it would trip on."""

from specframe.testing.drafter_check import DrafterReport, assert_drafter_ok, check_drafter, fake_env
from specframe.testing.lossless import NEAR_TIE, LosslessVerdict, compare
from specframe.testing.synthetic import SyntheticShape, write_synthetic_model

__all__ = ["NEAR_TIE", "DrafterReport", "LosslessVerdict", "SyntheticShape", "assert_drafter_ok", "check_drafter",
           "compare", "fake_env", "write_synthetic_model"]
