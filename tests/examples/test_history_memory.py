"""examples/history_memory.py: the memory that keeps each frame once gives back exactly the stacks the env gave
(real MinAtar frames through Gymnasium's FrameStackObservation, several envs interleaved, one-step and n-step
transitions), in at most 1/K of the bytes of storing the stacks, and DQN trains with it end to end."""

import json

import numpy as np
import pytest

import relayrl
from examples.history_memory import CONFIG, ENV, K, HistoryMemory
from relayrl.envs.registry import make


def transitions(n_envs: int, steps: int, n_step: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Transitions of ``n_envs`` frame-stacked envs stepped together with random actions, in the order a vector
    collector adds them (step by step, envs interleaved); next_obs is ``n_step`` steps on (or the episode's last)."""
    envs = [make(ENV, frame_stack=K) for _ in range(n_envs)]
    rng = np.random.default_rng(seed)
    episodes = [[(env.reset(seed=seed + i)[0],)] for i, env in enumerate(envs)]  # per env: its current episode
    out: dict[str, list] = {"obs": [], "action": [], "next_obs": [], "terminated": [], "reward": []}
    for _ in range(steps):
        for i, env in enumerate(envs):
            action = int(rng.integers(env.action_space.n))
            obs, _, terminated, truncated, _ = env.step(action)
            episodes[i][-1] += (action,)
            episodes[i].append((obs,))
            done = terminated or truncated
            trail = episodes[i]
            ready = range(len(trail) - 1 - n_step, len(trail) - 1) if done else [len(trail) - 1 - n_step]
            for t in ready:
                if t >= 0:
                    out["obs"].append(trail[t][0]), out["action"].append(trail[t][1])
                    out["next_obs"].append(trail[-1][0] if done else trail[t + n_step][0])
                    out["terminated"].append(float(terminated)), out["reward"].append(0.0)
            if done:
                episodes[i] = [(env.reset()[0],)]
    arrays = {key: np.asarray(value) for key, value in out.items()}
    arrays["obs"], arrays["next_obs"] = arrays["obs"].astype(np.uint8), arrays["next_obs"].astype(np.uint8)
    for key in ("terminated", "reward"):
        arrays[key] = arrays[key].astype(np.float32)
    arrays["row"] = np.arange(len(arrays["obs"]))  # which transition each sampled one is
    return arrays


@pytest.mark.parametrize("n_envs, n_step", [(1, 1), (3, 1), (3, 3)])
def test_sampled_stacks_equal_the_stacks_the_env_gave_in_a_quarter_of_the_bytes(n_envs, n_step):
    data = transitions(n_envs, 400, n_step)
    env = make(ENV, frame_stack=K)
    memory = HistoryMemory(capacity=10_000, observation_space=env.observation_space, action_space=env.action_space,
                           seed=0, batch_size=32)
    for start in range(0, len(data["obs"]), 64):  # in chunks, as a collector adds them
        memory.add({key: value[start:start + 64] for key, value in data.items()})
    assert len(memory) == len(data["obs"])
    batch = memory.sample(512)
    assert set(batch) == set(data)
    for key, value in data.items():
        assert batch[key].dtype == value.dtype and batch[key].shape[1:] == value.shape[1:], key
        assert np.array_equal(batch[key], value[batch["row"]]), key
    stacked = data["obs"][0].nbytes + data["next_obs"][0].nbytes
    assert memory.bytes_per_transition() <= stacked / K


def test_dqn_trains_with_the_history_memory(tmp_path):
    config = {**CONFIG, "dqn": {**CONFIG["dqn"], "start_training": 100, "batch_size": 16},
              "eval": {"freq": 0, "episodes": 2}}
    run = relayrl.train("dqn", ENV, config, total_steps=300, run_dir=tmp_path / "run", seed=0)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["updates"] > 0 and summary["env_steps"] >= 300
    assert "examples.history_memory:HistoryMemory" in (tmp_path / "run" / "config.yaml").read_text()
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("train/replay/frames", 0) > 0 for m in metrics)  # the replay was the history memory
    assert run.summary["updates"] == summary["updates"]
