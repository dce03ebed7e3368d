"""Sample compressor / decompressor pairs (TMRL's ``sample_compressor`` and the memory's rebuild).

A compressor runs on the worker (``net.compressor``) and maps a chunk of transitions to what goes
on the wire; the trainer's ``net.decompressor`` maps it back. ``net.crc_debug=true`` on both sides
checks the round trip: the worker sends a CRC32 of every original array and the trainer stops with
an error naming the first field that its decompressed chunk gets wrong.

``ActionBufferCompressor`` is TMRL's tutorial example in this form. A real-time env appends the
last k actions to each observation (``relayrl.envs.realtime``, flattened: ``[obs..., a_(t-k+1),
..., a_t]``), so ``next_obs`` repeats what the chunk already holds: its action buffer is ``obs``'s
shifted by one with ``action`` appended. The compressor drops that tail from ``next_obs``; the
decompressor rebuilds it. The buffer holds the actions the env received: SAC's batches hold its
actions in [-1, 1], scaled to the env's bounds on the way out, so for SAC give the env's action
space and the decompressor scales them the same way. Use it from a module of your own:

    # my_hooks.py
    import gymnasium as gym
    from relayrl.net.compress import ActionBufferCompressor
    codec = ActionBufferCompressor(act_buf_len=2, action_space=gym.make("MyRobot-v0").action_space)  # SAC
    compress, decompress = codec.compress, codec.decompress

    relayrl worker ... --set net.compressor=my_hooks:compress
    relayrl train sac ... --set net.decompressor=my_hooks:decompress
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from relayrl.types import Batch


class ActionBufferCompressor:
    def __init__(self, act_buf_len: int, action_space: gym.spaces.Box | None = None):
        """``action_space``: the env's, when the batches hold SAC's [-1, 1] actions (None: the
        batches hold the env's actions, as DQN's do)."""
        if act_buf_len < 1:
            raise ValueError(f"act_buf_len must be at least 1, got {act_buf_len}")
        self.k = act_buf_len
        self.low = self.scale = None
        if action_space is not None:  # exactly SACPolicy's arithmetic: the CRC check wants the same bits
            self.low = action_space.low.astype(np.float32).reshape(-1)
            self.scale = ((action_space.high - action_space.low) / 2).astype(np.float32).reshape(-1)

    def _tail(self, batch: Batch) -> int:
        return self.k * int(np.prod(batch["action"].shape[1:], dtype=np.int64))

    def compress(self, batch: Batch) -> Batch:
        out = {k: v for k, v in batch.items() if k != "next_obs"}
        out["next_obs_head"] = batch["next_obs"][:, :-self._tail(batch)]
        return out

    def decompress(self, batch: Batch) -> Batch:
        tail, n = self._tail(batch), len(batch["action"])
        action = batch["action"].reshape(n, -1)
        if self.low is not None:
            action = self.low + (action + 1) * self.scale
        action = action.astype(batch["obs"].dtype)
        buffer = np.concatenate([batch["obs"][:, batch["obs"].shape[1] - tail + action.shape[1]:], action], axis=1)
        out = {k: v for k, v in batch.items() if k != "next_obs_head"}
        out["next_obs"] = np.concatenate([batch["next_obs_head"], buffer], axis=1)
        return out
