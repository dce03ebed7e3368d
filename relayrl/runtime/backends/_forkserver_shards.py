"""Imported by the fork server as well, when the run has replay shards (``process_context(shards=True)``).

A replay buffer's sum tree and storage loops are numba functions: each process that first uses
them loads them from numba's cache (about 0.5 s of CPU, several seconds on a loaded machine), which
every shard process paid again at every start and restart. Used once here, they are compiled in the
fork server and every shard forks with them ready. Nothing here may raise anything but ImportError
(see _forkserver.py).
"""

from __future__ import annotations

import numpy as np

from relayrl.data.replay import ReplayBuffer

try:
    for _sampler in ("uniform", "prioritized"):
        _buffer = ReplayBuffer(64, sampler=_sampler, seed=0)
        _buffer.add({"obs": np.zeros((8, 1), np.float32), "reward": np.zeros(8, np.float32)})
        _sample = _buffer.sample(4)
        _buffer.update_priorities(_sample["index"], np.ones(4))
    del _buffer, _sample, _sampler
except Exception:  # pragma: no cover - a warm-up that fails only costs the shards time
    pass
