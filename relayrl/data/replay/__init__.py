"""Replay: a storage (preallocated ring of named arrays) composed with a sampler (uniform or prioritized)."""

from relayrl.data.replay.base import MEMORY_PARAMETERS, Replay, ReplaySpec
from relayrl.data.replay.buffer import ReplayBuffer
from relayrl.data.replay.episodes import EpisodeBuffer
from relayrl.data.replay.framestorage import FrameStorage, choose_layout
from relayrl.data.replay.sampler import PrioritizedSampler, UniformSampler
from relayrl.data.replay.storage import ArrayStorage

REPLAY_FILE = "replay.safetensors"  # an off-policy run's replay snapshot, beside its last checkpoint
SHARD_FILE = "replay_shard{k}.safetensors"  # replay shard k's snapshot there instead, with replay shards

__all__ = ["MEMORY_PARAMETERS", "REPLAY_FILE", "SHARD_FILE", "ArrayStorage", "EpisodeBuffer", "FrameStorage", "PrioritizedSampler", "Replay", "ReplayBuffer", "ReplaySpec", "UniformSampler", "choose_layout"]
