"""The simulator bridge: external simulators exchange observations and actions with the trainer
through shared memory (specification: docs/bridge-protocol.md).

- ``BridgeEnv``: the trainer side (launch or attach to a simulator; behaviours of many agents).
- ``BridgeInstances``: the same over N launched copies of a simulator (or one attached editor).
- ``World``: the simulator side in Python (the C version is in ``relayrl/bridge/c``).
"""

from relayrl.bridge.env import BridgeEnv, DecisionSteps, TerminalSteps
from relayrl.bridge.errors import BridgeClosed, BridgeError, BridgeTimeout, PeerDied, VersionMismatch
from relayrl.bridge.instances import BridgeInstances
from relayrl.bridge.layout import BehaviourSpec, ObsSpec
from relayrl.bridge.sidechannel import EngineConfigurationChannel, EnvironmentParametersChannel, SideChannel
from relayrl.bridge.world import World

__all__ = ["BridgeEnv", "BridgeInstances", "World", "BehaviourSpec", "ObsSpec", "DecisionSteps", "TerminalSteps", "SideChannel",
           "EngineConfigurationChannel", "EnvironmentParametersChannel", "BridgeError", "BridgeClosed",
           "BridgeTimeout", "PeerDied", "VersionMismatch"]
