"""Your own memory (``<algo>.replay``) is the learner's replay whatever feeds it: here two mp worker processes.
(Through the relay: tests/examples/test_robot_tutorial.py, whose trainer learns into examples/robot/memory.py.)"""

import json
import sys
import textwrap

from relayrl.cli import main

MEMORY = '''
import numpy as np

from relayrl.data.replay import Replay

MEMORIES = []


class CountingMemory(Replay):
    def __init__(self, *, capacity, observation_space, action_space, seed, batch_size):
        self.rows, self.rng, self.added, self.sampled = [], np.random.default_rng(seed), 0, 0
        self.capacity = capacity
        MEMORIES.append(self)

    def add(self, batch):
        n = len(batch["obs"])
        self.added += n
        self.rows += [{k: np.asarray(v[i]) for k, v in batch.items()} for i in range(n)]
        del self.rows[:-self.capacity]

    def sample(self, n, version=None):
        if not self.rows:
            return None
        self.sampled += 1
        pick = self.rng.integers(0, len(self.rows), n)
        return {k: np.stack([self.rows[i][k] for i in pick]) for k in self.rows[0]}

    def __len__(self):
        return len(self.rows)

    def stats(self):
        return {"replay/added": float(self.added)}
'''


def test_own_memory_takes_the_transitions_of_two_mp_workers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "countmem.py").write_text(textwrap.dedent(MEMORY))
    monkeypatch.delitem(sys.modules, "countmem", raising=False)
    try:
        code = main(["train", "dqn", "--env", "CartPole-v1", "--backend", "mp", "--workers", "2", "--total-steps",
                     "600", "--set", "dqn.replay=countmem:CountingMemory", "--set", "dqn.start_training=64",
                     "--set", "dqn.batch_size=32", "--set", "eval.episodes=2", "--quiet", "--run-dir", "run"])
        assert code == 0
        _, memory = sys.modules["countmem"].MEMORIES  # (the first: the probe that checked the class)
    finally:
        sys.modules.pop("countmem", None)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["backend"] == "mp" and summary["env_steps"] >= 600
    assert memory.added >= 0.9 * summary["env_steps"]  # the workers' transitions (n-step: a few pend at the end)
    assert memory.sampled == summary["updates"] > 0  # every update sampled from it
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("train/replay/added", 0) > 0 for m in metrics)  # its stats() reach the metrics
