"""SIGINT and SIGTERM end a run alike: as ``Interrupted``, a KeyboardInterrupt, which the decoding loop turns into
a result with the text so far. What drafters persist is still saved (``SignalHandling.held``), and the exit code
says which signal it was: 128 + its number, 130 for Ctrl-C and 143 for SIGTERM.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A SIGINT or SIGTERM arrived."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalHandling:
    """While installed, SIGINT and SIGTERM raise ``Interrupted``; ``received`` keeps the last one's number."""

    def __init__(self):
        self.received: int | None = None
        self._holding = False

    def _handle(self, signum: int, _frame) -> None:
        self.received = signum
        if not self._holding:
            raise Interrupted(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Within: a signal is only noted, so that a save in progress is never cut short."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False

    @property
    def exit_code(self) -> int:
        """The shell's code for a run ended by the signal received (SIGINT's when there was none)."""
        return 128 + (self.received or signal.SIGINT)

    @property
    def name(self) -> str:
        return signal.Signals(self.received or signal.SIGINT).name


@contextlib.contextmanager
def signals_interrupt() -> Iterator[SignalHandling]:
    """Install the handlers for the duration (in the main thread; elsewhere signals stay as they are)."""
    handling = SignalHandling()
    try:
        previous = {signum: signal.signal(signum, handling._handle) for signum in SIGNALS}
    except ValueError:   # not the main thread: only it can handle signals
        previous = {}
    try:
        yield handling
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
