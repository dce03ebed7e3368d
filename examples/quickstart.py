"""Train PPO on CartPole from Python, then deploy the policy with predict().

    python examples/quickstart.py [--total-steps N] [--run-dir DIR]
"""

import argparse

import gymnasium as gym

import relayrl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args()

    run = relayrl.train("ppo", "CartPole-v1", {"ppo": {"epochs": 5}, "eval": {"freq": 4096}},
                        total_steps=args.total_steps, run_dir=args.run_dir, seed=0)
    print(f"best eval return {run.summary['best_eval_return']:.1f}, written to {run.run_dir}")

    policy = relayrl.load(run.run_dir)  # the policy only: no optimisers, no critic targets
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
