"""Cost of one off-policy update and one action, relayrl against Stable-Baselines3, same network and batch.

DQN on CartPole-v1 shapes (4 observations, 2 actions) and SAC on Pendulum-v1 shapes (3, 1), for the
hidden sizes and batch sizes given; the replay holds 10,000 random transitions on both sides, and each
figure is the median over ``--rounds`` rounds of ``--updates`` updates, the two libraries alternating
round by round in one process on one torch thread. Time per update includes sampling the batch from
the replay (SB3's ``train(gradient_steps=1)`` does too), so it is what the training loop pays.

    python benchmarks/offpolicy_update.py [--rounds 5] [--updates 300]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import gymnasium as gym
import numpy as np
import torch

FILL = 10_000


def per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def relayrl_side(algo_name: str, env_id: str, hidden: list[int], batch: int) -> tuple[Callable, Callable]:
    from relayrl.algos import get_algo
    from relayrl.config import build_config
    from relayrl.data.replay import ReplayBuffer

    env = gym.make(env_id)
    cfg = getattr(build_config(algo_name, None, [f"{algo_name}.hidden_sizes={hidden}",
                                                  f"{algo_name}.batch_size={batch}", f"{algo_name}.start_training=0"]),
                  algo_name)
    algo = get_algo(algo_name).algo_cls(cfg, env.observation_space, env.action_space, 1)
    algo.to(torch.device("cpu"))
    algo.set_progress(FILL, FILL * 10)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((FILL, *env.observation_space.shape)).astype(np.float32)
    if algo_name == "dqn":
        action = rng.integers(0, env.action_space.n, FILL)
    else:
        action = rng.uniform(-1, 1, (FILL, *env.action_space.shape)).astype(np.float32)
    buffer = ReplayBuffer(FILL, seed=0)
    buffer.add({"obs": obs, "action": action, "reward": rng.standard_normal(FILL).astype(np.float32),
                "next_obs": np.roll(obs, 1, 0), "terminated": np.zeros(FILL, np.float32),
                "discount": np.full(FILL, 0.99, np.float32)})
    one = obs[:1]

    def update() -> None:
        algo.learn(buffer.sample(batch))

    return update, lambda: algo.policy.act(one, "collect")


def sb3_side(algo_name: str, env_id: str, hidden: list[int], batch: int) -> tuple[Callable, Callable]:
    from stable_baselines3 import DQN, SAC
    from stable_baselines3.common.logger import configure

    env = gym.make(env_id)
    if algo_name == "dqn":  # RL Zoo's CartPole settings, one gradient step per train() call
        model = DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=batch, buffer_size=FILL, learning_starts=0,
                    target_update_interval=10, policy_kwargs={"net_arch": hidden}, device="cpu", seed=0)
    else:
        model = SAC("MlpPolicy", env, batch_size=batch, buffer_size=FILL, learning_starts=0,
                    policy_kwargs={"net_arch": hidden}, device="cpu", seed=0)
    model.set_logger(configure(None, [""]))
    rng = np.random.default_rng(0)
    o = env.reset(seed=0)[0][None]
    for _ in range(FILL):
        a = np.array([env.action_space.sample()])
        model.replay_buffer.add(o + rng.standard_normal(o.shape).astype(np.float32), o, a, np.array([1.0]),
                                np.array([False]), [{}])
    model._current_progress_remaining = 0.5

    def update() -> None:
        model.train(gradient_steps=1, batch_size=batch)

    return update, lambda: model.predict(o, deterministic=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cases = [("dqn", "CartPole-v1", [256, 256], 64), ("dqn", "CartPole-v1", [64, 64], 64),
             ("sac", "Pendulum-v1", [256, 256], 256), ("sac", "Pendulum-v1", [64, 64], 256)]
    print(f"{'case':<30}{'update relayrl':>16}{'SB3':>8}{'ratio':>8}{'act relayrl':>13}{'SB3':>8}{'ratio':>8}")
    for algo_name, env_id, hidden, batch in cases:
        sides = {"relayrl": relayrl_side(algo_name, env_id, hidden, batch),
                 "sb3": sb3_side(algo_name, env_id, hidden, batch)}
        times: dict[str, dict[str, list[float]]] = {s: {"update": [], "act": []} for s in sides}
        for side, (update, act) in sides.items():  # warm-up
            per_call(update, 50), per_call(act, 200)
        for _ in range(args.rounds):
            for side, (update, act) in sides.items():
                times[side]["update"].append(per_call(update, args.updates))
                times[side]["act"].append(per_call(act, args.updates * 3))
        med = {s: {k: statistics.median(v) for k, v in t.items()} for s, t in times.items()}
        name = f"{algo_name} {hidden[0]}x{len(hidden)} batch {batch}"
        print(f"{name:<30}{med['relayrl']['update']:>14.0f}us{med['sb3']['update']:>6.0f}us"
              f"{med['relayrl']['update'] / med['sb3']['update']:>8.2f}"
              f"{med['relayrl']['act']:>11.0f}us{med['sb3']['act']:>6.0f}us"
              f"{med['relayrl']['act'] / med['sb3']['act']:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
