# examples/robot/memory.py
"""Your own memory (TMRL's Memory): a ring of numpy arrays, one per column, allocated at the first transitions.
relayrl builds it by keyword and calls add (the transitions the workers sent), sample (a minibatch per update),
len, stats, and save/load with the checkpoints."""

import numpy as np
from safetensors.numpy import load_file, save_file

from relayrl.data.replay import Replay


class Memory(Replay):
    def __init__(self, *, capacity, observation_space, action_space, seed, batch_size):
        self.capacity, self.rng = capacity, np.random.default_rng(seed)
        self.columns, self.next, self.size = {}, 0, 0

    def add(self, batch):
        n = len(batch["obs"])
        if not self.columns:  # one array per column, as the first transitions have them
            self.columns = {k: np.zeros((self.capacity, *np.shape(v)[1:]), np.asarray(v).dtype)
                            for k, v in batch.items()}
        rows = (self.next + np.arange(n)) % self.capacity
        for key, column in self.columns.items():
            column[rows] = batch[key]
        self.next, self.size = (self.next + n) % self.capacity, min(self.capacity, self.size + n)

    def sample(self, n, version=None):
        if self.size == 0:
            return None
        rows = self.rng.integers(0, self.size, n)
        return {key: column[rows] for key, column in self.columns.items()}

    def __len__(self):
        return self.size

    def stats(self):
        return {"replay/size": float(self.size)}

    def save(self, path):
        save_file({**{k: v[:self.size] for k, v in self.columns.items()}, "_next": np.array([self.next])}, str(path))

    def load(self, path):
        arrays = load_file(str(path))
        next_row = int(arrays.pop("_next")[0])
        self.columns, self.next, self.size = {}, 0, 0
        if arrays:
            self.add(arrays)  # (rows back where they were)
        self.next = next_row
