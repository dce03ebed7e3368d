"""Your own network: an encoder that relayrl puts the algorithm's heads on (docs/library.md, "Your own network").

``build(observation_space, action_space)`` returns a ``torch.nn.Module`` that maps a batch of observations
[n, *obs_shape] (float32) to features [n, F]. The config names it by reference, so every process that
builds the policy (rollout workers, ``relayrl eval``, ``relayrl.load``, a resumed run) imports it::

    ppo:
      encoder: examples.my_network:build   # or dqn.encoder, sac.encoder
      hidden_sizes: []                     # PPO's actor and critic heads: one linear layer on the features

Run as a script, it trains PPO on CartPole with this encoder, then loads the policy back and deploys it:

    python examples/my_network.py [--total-steps N] [--backend inline|mp] [--workers N] [--run-dir DIR]
"""

import argparse
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
from torch import nn


class LayerNormMLP(nn.Module):
    """Two tanh layers with LayerNorm after the first: features [n, width] from observations [n, *obs_shape]."""

    def __init__(self, obs_dim: int, width: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(obs_dim, width), nn.LayerNorm(width), nn.Tanh(),
                                 nn.Linear(width, width), nn.Tanh())

    def forward(self, obs):
        return self.net(obs)


def build(observation_space: gym.Space, action_space: gym.Space) -> nn.Module:
    """Called once per network the algorithm trains (PPO: the actor's and the critic's): a new module each call."""
    return LayerNormMLP(int(np.prod(observation_space.shape)))


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `examples` importable, in workers too
    import relayrl

    parser = argparse.ArgumentParser()
    parser.add_argument("--total-steps", type=int, default=30_000)
    parser.add_argument("--backend", default="inline")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args()

    config = {"ppo": {"encoder": "examples.my_network:build", "hidden_sizes": []},
              "eval": {"freq": 4096, "episodes": 5}}
    run = relayrl.train("ppo", "CartPole-v1", config, total_steps=args.total_steps, backend=args.backend,
                        workers=args.workers, run_dir=args.run_dir, seed=0)
    print(f"best eval return {run.summary['best_eval_return']:.1f}, written to {run.run_dir}")

    policy = relayrl.load(run.run_dir)  # rebuilds the encoder from the reference the checkpoint records
    print(f"rebuilt network: {type(policy.model.actor_encoder).__name__}")
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    episode_return, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy.predict(obs))
        episode_return += reward
        done = terminated or truncated
    print(f"one deployed episode: return {episode_return:.1f}")


if __name__ == "__main__":
    main()
