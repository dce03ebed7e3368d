"""A customised main: envs, a collector, a replay buffer, an algorithm and an evaluator in a plain loop.

relayrl.train() does this (plus checkpoints, logging, resume and workers); here every part is in sight.

    python examples/custom_loop.py [--total-steps N]
"""

import argparse

import torch

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.data.replay import ReplayBuffer
from relayrl.envs import make_vec
from relayrl.training.evaluator import Evaluator
from relayrl.training.collector import OffPolicyCollector


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total-steps", type=int, default=40_000)
    args = parser.parse_args()

    torch.manual_seed(0)  # the networks' initial weights (and epsilon's draws: they follow torch's seed)
    cfg = build_config("dqn").dqn  # DQN's defaults; build_config("dqn", {"dqn": {...}}) changes them
    venv = make_vec("CartPole-v1", num_envs=4)
    algo = get_algo("dqn").build_algorithm(cfg, venv.single_observation_space, venv.single_action_space, venv.num_envs)
    collector = OffPolicyCollector(venv, algo.policy, cfg.n_step_for(agents=False), cfg.gamma, steps_per_pull=cfg.steps_per_iteration)
    buffer = ReplayBuffer(cfg.buffer_size, seed=0)
    evaluator = Evaluator(make_vec("CartPole-v1", num_envs=5), episodes=10, seed=10_000)

    collector.reset(seed=0)
    env_steps, updates, next_eval = 0, 0, 5_000
    while env_steps < args.total_steps:
        transitions, steps = collector.pull()  # steps_per_iteration vector steps, as n-step transitions
        buffer.add(transitions)
        env_steps += steps
        algo.set_progress(env_steps, args.total_steps)  # the epsilon schedule
        if len(buffer) >= max(cfg.start_training, cfg.batch_size):
            for _ in range(int(steps * cfg.updates_per_step)):
                algo.learn(buffer.sample(cfg.batch_size))
                updates += 1
        if env_steps >= next_eval:
            result = evaluator.evaluate(algo.policy)
            print(f"{env_steps} env steps, {updates} updates: eval return {result.mean:.1f}")
            next_eval += 5_000
    venv.close()
    evaluator.venv.close()


if __name__ == "__main__":
    main()
