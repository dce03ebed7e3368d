"""How a run is stopped from outside, and which stops are its own.

``StopRequest``: the event Ctrl-C and SIGTERM set, saying which (the summary's ``stop_reason``);
``stop_on_sigterm``: a scheduler's SIGTERM turned into that request. ``STOPPED``: the reasons of a run stopped from
outside (it writes its last checkpoint); ``LIMITS``: the run's own budgets (a final evaluation when reached), which
the Trainer checks (training/trainer.py).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Any, Iterator

log = logging.getLogger("relayrl")


class StopRequest(threading.Event):
    """A stop event that says why: ``request("terminated")`` (SIGTERM) or ``request("interrupted")``
    (Ctrl-C, and what a plain ``threading.Event`` means). The summary's ``stop_reason`` is the reason."""

    def __init__(self) -> None:
        super().__init__()
        self.reason = "interrupted"

    def request(self, reason: str) -> None:
        self.reason = reason
        self.set()


STOPPED = ("interrupted", "terminated")  # stop reasons of a run stopped from outside, with its last checkpoint
LIMITS = ("total_steps", "train_iter", "time_limit")  # the run's own budgets: a final evaluation when reached


@contextlib.contextmanager
def stop_on_sigterm(stop: StopRequest) -> Iterator[None]:
    """Within: a SIGTERM (a scheduler's stop: Slurm, Kubernetes, systemd) requests ``stop`` as
    "terminated" instead of ending the process; a second one ends it at once. Installed only where
    SIGTERM has Python's default action and only in the main thread (the one that can take signals),
    so a program's own handler is left alone."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        stop.request("terminated")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        log.warning("SIGTERM: stopping after this iteration (saving the last checkpoint and the summary)")

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
