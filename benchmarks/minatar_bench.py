"""PPO and DQN on MinAtar: relayrl against Stable-Baselines3 given the same small CNN and settings.

Both libraries train on the same env object (relayrl's ``MinAtar/<Game>-v1``: MinAtar's boolean
[10, 10, C] planes) with the same network (relayrl's ``SmallCNN``, MinAtar's: 16 3x3 filters, a
linear layer to 128; SB3 gets it as its features extractor through ``policy_kwargs``) and the same
hyperparameters (below; MinAtar/CleanRL-style values, not either library's CartPole defaults). PPO's actor
and critic share the CNN on both sides (each library's default with an image encoder); each learner uses
its default torch threads (relayrl: one per core for images; SB3: torch's default). Both
evaluate ``--eval-episodes`` deterministic episodes every ``--eval-every`` env steps; a run's curve is
(env steps, wall time since training began, eval mean return). Each run is a fresh process, and the
runs alternate between the libraries seed by seed, so both see the same machine conditions.

The table: for a target return both libraries reach (``--target``, else the highest return that every
run of both sides reached), the median wall time and env steps to it, and the ratio relayrl / SB3.

    python benchmarks/minatar_bench.py --algo ppo --game Breakout --seeds 0 1 2 --steps 100000
    python benchmarks/minatar_bench.py --algo dqn --game Breakout --seeds 0 1 2 --steps 100000 --plot out.png
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import Comparison, sb3_same_cnn

# Shared settings (relayrl key -> SB3 argument in the functions below).
PPO = {"env.num_envs": 8, "ppo.num_steps": 128, "ppo.epochs": 4, "ppo.batch_size": 256, "ppo.actor_lr": 2.5e-4,
       "ppo.critic_lr": 2.5e-4, "ppo.anneal_lr": False, "ppo.clip": 0.2, "ppo.entropy_coef": 0.01,
       "ppo.gamma": 0.99, "ppo.gae_lambda": 0.95, "ppo.grad_clip": 0.5, "ppo.normalize_reward": False,
       "ppo.hidden_sizes": [64, 64], "ppo.activation": "tanh"}
DQN = {"env.num_envs": 1, "dqn.buffer_size": 100_000, "dqn.batch_size": 32, "dqn.start_training": 5_000,
       "dqn.updates_per_step": 0.25, "dqn.steps_per_iteration": 4, "dqn.lr": 1e-4, "dqn.gamma": 0.99, "dqn.n_step": 1,
       "dqn.target_update_period": 250, "dqn.double": False, "dqn.dueling": False, "dqn.grad_clip": 10.0,
       "dqn.epsilon_start": 1.0, "dqn.epsilon_end": 0.05, "dqn.epsilon_decay_steps": 50_000,
       "dqn.hidden_sizes": []}


def relayrl_curve(algo: str, sets: dict, seed: int, args: argparse.Namespace) -> dict:
    """relayrl's ``algo`` with ``sets`` on ``MinAtar/<--game>-v1`` for ``--steps``, evaluated as the options say."""
    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    sets = {**sets, "eval.freq": args.eval_every, "eval.episodes": args.eval_episodes, "eval.num_envs": 1}
    config = build_config(algo, None, [f"{k}={json.dumps(v)}" for k, v in sets.items()],
                          {"env.id": f"MinAtar/{args.game}-v1", "seed": seed, "total_steps": args.steps})
    with tempfile.TemporaryDirectory() as tmp:
        run_trainer(config, run_dir=tmp, tensorboard=False, quiet=True)
        events = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    return {"curve": [(e["env_steps"], e["wall_time_s"], e["eval/return_mean"]) for e in events
                      if e["event"] == "eval"]}


def run_relayrl(seed: int, args: argparse.Namespace) -> dict:
    return relayrl_curve(args.algo, PPO if args.algo == "ppo" else DQN, seed, args)


def sb3_curve(algo: str, seed: int, args: argparse.Namespace) -> dict:
    """SB3's ``algo`` ("ppo" or "dqn") with the settings above, on the same env and CNN as relayrl: its curve."""
    import torch
    from stable_baselines3 import DQN as SB3DQN
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.callbacks import EvalCallback
    from stable_baselines3.common.env_util import make_vec_env

    from relayrl.envs.registry import make

    SameCNN = sb3_same_cnn()

    env_id, steps, eval_every, episodes = f"MinAtar/{args.game}-v1", args.steps, args.eval_every, args.eval_episodes
    curve: list[tuple[int, float, float]] = []
    start = [0.0]

    class Record(EvalCallback):
        def _on_step(self) -> bool:
            out = super()._on_step()
            if self.eval_freq > 0 and self.n_calls % self.eval_freq == 0:
                curve.append((self.num_timesteps, time.perf_counter() - start[0], float(self.last_mean_reward)))
            return out

    if algo == "ppo":
        env = make_vec_env(lambda: make(env_id), n_envs=8, seed=seed)
        model = SB3PPO("MlpPolicy", env, n_steps=128, batch_size=256, n_epochs=4, learning_rate=2.5e-4,
                       clip_range=0.2, ent_coef=0.01, gamma=0.99, gae_lambda=0.95, max_grad_norm=0.5, seed=seed,
                       device="cpu", policy_kwargs=dict(features_extractor_class=SameCNN,  # shared: both defaults
                                                        net_arch=dict(pi=[64, 64], vf=[64, 64]),
                                                        activation_fn=torch.nn.Tanh))
        freq = eval_every // 8
    else:
        env = make_vec_env(lambda: make(env_id), n_envs=1, seed=seed)
        model = SB3DQN("MlpPolicy", env, buffer_size=100_000, batch_size=32, learning_starts=5_000, train_freq=4,
                       gradient_steps=1, learning_rate=1e-4, gamma=0.99, target_update_interval=1_000,
                       exploration_initial_eps=1.0, exploration_final_eps=0.05,
                       exploration_fraction=50_000 / steps, max_grad_norm=10.0, seed=seed, device="cpu",
                       policy_kwargs=dict(features_extractor_class=SameCNN, net_arch=[]))
        freq = eval_every
    eval_env = make_vec_env(lambda: make(env_id), n_envs=1, seed=seed + 10_000)
    callback = Record(eval_env, eval_freq=freq, n_eval_episodes=episodes, deterministic=True, verbose=0)
    start[0] = time.perf_counter()
    model.learn(total_timesteps=steps, callback=callback)
    return {"curve": curve}


def run_sb3(seed: int, args: argparse.Namespace) -> dict:
    return sb3_curve(args.algo, seed, args)


def first_reaching(curve: list, target: float) -> tuple[float, float] | None:
    """(env steps, seconds) of the first evaluation at or above ``target``, or None."""
    return next(((s, t) for s, t, r in curve if r >= target), None)


def summarise(results: dict[str, list[dict]], target: float | None) -> None:
    if target is None:  # the highest return every run of both sides reached
        target = min(max(r for _, _, r in run["curve"]) for runs in results.values() for run in runs)
    print(f"\ntarget: eval mean return {target:g}")
    medians = {}
    for which, runs in results.items():
        hits = [first_reaching(run["curve"], target) for run in runs]
        steps = statistics.median(h[0] if h else float("inf") for h in hits)
        secs = statistics.median(h[1] if h else float("inf") for h in hits)
        final = statistics.median(run["curve"][-1][2] for run in runs)
        rate = statistics.median(run["curve"][-1][0] / run["curve"][-1][1] for run in runs)
        medians[which] = secs
        print(f"{which:>8}: median time to target {secs:.1f} s, env steps {steps:.0f}; final eval return "
              f"{final:.2f}; {rate:.0f} env steps/s over the run")
    print(f"ratio relayrl / sb3 (time to target): {medians['relayrl'] / medians['sb3']:.3f}")


def plot(results: dict[str, list[dict]], title: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for which, colour in (("relayrl", "tab:blue"), ("sb3", "tab:orange")):
        for i, run in enumerate(results[which]):
            steps, secs, ret = zip(*run["curve"])
            label = which if i == 0 else None
            axes[0].plot(steps, ret, color=colour, alpha=0.8, label=label)
            axes[1].plot(secs, ret, color=colour, alpha=0.8, label=label)
    axes[0].set_xlabel("env steps")
    axes[1].set_xlabel("wall time (s)")
    for ax in axes:
        ax.set_ylabel("eval mean return")
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


class Curves:
    """A row per run (its last evaluation and best return); then ``summarise``, ``--json`` and ``--plot``."""

    def __init__(self, title: Callable[[argparse.Namespace], str]):
        self.title = title

    def header(self) -> None:
        return None

    def row(self, seed: int, which: str, result: dict) -> str:
        last = result["curve"][-1]
        return (f"seed {seed} {which:>8}: {last[0]} env steps in {last[1]:.1f} s, final eval {last[2]:.2f}, "
                f"best {max(x[2] for x in result['curve']):.2f}")

    def summary(self, results: dict[str, list[dict]], args: argparse.Namespace) -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(results))
        summarise(results, args.target)
        if args.plot:
            plot(results, self.title(args), args.plot)


def curve_options(steps: int, eval_every: int) -> Callable[[argparse.ArgumentParser], None]:
    """The MinAtar scripts' options, with their defaults of ``--steps`` and ``--eval-every``."""

    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--game", default="Breakout")
        parser.add_argument("--steps", type=int, default=steps)
        parser.add_argument("--eval-every", type=int, default=eval_every)
        parser.add_argument("--eval-episodes", type=int, default=10)
        parser.add_argument("--target", type=float, default=None)
        parser.add_argument("--plot", default=None, help="write the curves to this PNG")
        parser.add_argument("--json", default=None, help="write the raw curves to this file")

    return options


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--algo", choices=["ppo", "dqn"], default="ppo")
    curve_options(100_000, 10_000)(parser)


if __name__ == "__main__":
    Comparison(__file__, __doc__, {"relayrl": run_relayrl, "sb3": run_sb3},
               Curves(lambda args: f"{args.algo.upper()} on MinAtar/{args.game}-v1, seeds {args.seeds}"),
               seeds=[0, 1, 2], options=options).main()
