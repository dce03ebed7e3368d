"""The bridge's errors. Each names what happened and what to do; ``reason`` is the close reason
(docs/bridge-protocol.md §6) the side that raises it writes into its closed byte, and ``exit_code`` is
what the CLI and the example simulators exit with."""

from __future__ import annotations

from relayrl.bridge import layout as L
from relayrl.errors import RelayRLError


class BridgeError(RelayRLError):
    """The bridge cannot go on: the message says what happened and what to do."""

    exit_code = 4
    reason = L.PROTOCOL_ERROR


class BridgeClosed(BridgeError):
    """The peer closed the channel (its reason is in the message and ``reason``)."""

    exit_code = 0

    def __init__(self, message: str, reason: int):
        super().__init__(message)
        self.reason = reason


class BridgeTimeout(BridgeError, TimeoutError):
    exit_code = 3
    reason = L.TIMEOUT


class PeerDied(BridgeError):
    exit_code = 3
    reason = L.PEER_DIED


class VersionMismatch(BridgeError):
    exit_code = 2
    reason = L.VERSION_MISMATCH


def version_mismatch(simulator: tuple[int, int], trainer: tuple[int, int]) -> VersionMismatch:
    """The trainer's error for a simulator of another major version (both versions named)."""
    hint = " (0.0: it never wrote its version into the header, docs/bridge-protocol.md §5)" if simulator[0] == 0 else ""
    return VersionMismatch(f"the simulator speaks bridge protocol {simulator[0]}.{simulator[1]}{hint}, the trainer "
                           f"{trainer[0]}.{trainer[1]}: rebuild the simulator with an SDK of the trainer's major "
                           "version")


__all__ = ["BridgeError", "BridgeClosed", "BridgeTimeout", "PeerDied", "VersionMismatch", "version_mismatch"]
