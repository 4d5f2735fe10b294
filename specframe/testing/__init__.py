"""For drafter authors' tests: run a drafter through the protocol and report what it would trip on."""

from specframe.synthetic import write_synthetic_model
from specframe.testing.drafter_check import (
    DrafterReport,
    assert_drafter_ok,
    check_drafter,
    fake_env,
)

__all__ = ["DrafterReport", "assert_drafter_ok", "check_drafter", "fake_env", "write_synthetic_model"]
