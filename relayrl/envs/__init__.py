"""Environments: creation by id, stop values, and vector envs."""

from relayrl.envs import memory  # noqa: F401 (registers relayrl/CartPoleNoVel-v1)
from relayrl.envs.keyed import EnvManager, EnvState, Timestep
from relayrl.envs.managers import make_vec
from relayrl.envs.registry import make, spec_stop_value
from relayrl.envs.vector import SyncVectorEnv, VectorEnv

__all__ = ["make", "spec_stop_value", "SyncVectorEnv", "VectorEnv", "make_vec", "EnvManager", "EnvState", "Timestep"]
