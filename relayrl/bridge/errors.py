"""The bridge's errors. Each names what happened and what to do; ``reason`` is the close reason
(docs/bridge-protocol.md §6) the side that raises it writes into its closed byte (``BridgeClosed``: the
peer's reason; the side that raises it wrote 1), and ``exit_code`` is what the example simulators exit
with: 2 version mismatch (and a simulator command that cannot be started), 3 the peer died or timed out, 4 any
other error. ``BridgeClosed`` has
``exit_code`` 0, meaning no code of its own: whoever catches it chooses (the example simulators exit 4,
``relayrl train`` a non-zero failure code). A trainer's normal close is not an exception for a
simulator (``World.step`` returns "closed" and the examples exit 0)."""

from __future__ import annotations

from relayrl.bridge import layout as L
from relayrl.errors import RelayRLError


class BridgeError(RelayRLError):
    """The bridge cannot go on: the message says what happened and what to do."""

    exit_code = 4
    reason = L.PROTOCOL_ERROR


class BridgeClosed(BridgeError):
    """The peer closed the channel (its reason is in the message and ``reason``). For a trainer this is
    always an error (the simulator quit before the trainer did); a simulator sees one only when the
    trainer closed with an error reason or had already closed at attach."""

    exit_code = 0  # none of its own (module docstring): never the exit status of a trainer

    def __init__(self, message: str, reason: int):
        super().__init__(message)
        self.reason = reason


class BridgeTimeout(BridgeError, TimeoutError):
    exit_code = 3
    reason = L.TIMEOUT


class PeerDied(BridgeError):
    exit_code = 3
    reason = L.PEER_DIED


class SimulatorNotStarted(BridgeError):
    """The simulator's command could not be started (not found, not executable): bad input."""

    exit_code = 2


class VersionMismatch(BridgeError):
    exit_code = 2
    reason = L.VERSION_MISMATCH


def version_mismatch(simulator: tuple[int, int], trainer: tuple[int, int]) -> VersionMismatch:
    """The trainer's error for a simulator of another major version (both versions named)."""
    hint = " (0.0: it never wrote its version into the header, docs/bridge-protocol.md §5)" if simulator[0] == 0 else ""
    return VersionMismatch(f"the simulator speaks bridge protocol {simulator[0]}.{simulator[1]}{hint}, the trainer "
                           f"{trainer[0]}.{trainer[1]}: rebuild the simulator with an SDK of the trainer's major "
                           "version")


__all__ = ["BridgeError", "BridgeClosed", "BridgeTimeout", "PeerDied", "SimulatorNotStarted", "VersionMismatch",
           "version_mismatch"]
