"""Shared plumbing for the time-to-solve benchmarks: each run in a fresh process, results as JSON."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys


def launch(script: str, which: str, seed: int, *extra: str) -> dict:
    """Run ``script --child WHICH --seed SEED`` and return the dict it printed after ``RESULT ``."""
    proc = subprocess.run([sys.executable, script, "--child", which, "--seed", str(seed), *extra],
                          capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"{which} seed {seed} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def report(results: dict[str, list[dict]], target: float) -> None:
    """Print the medians of time and steps to the target and the ratio relayrl / peer."""
    def median(which: str, key: str) -> float:
        return statistics.median(r[key] if r[key] is not None else float("inf") for r in results[which])

    names = list(results)
    ours, peer = median(names[0], "time_s"), median(names[1], "time_s")
    print(f"\nmedian time to {target:g}: {names[0]} {ours:.2f} s, {names[1]} {peer:.2f} s, "
          f"ratio {names[0]}/{names[1]} {ours / peer:.3f}")
    print(f"median env steps to {target:g}: {names[0]} {median(names[0], 'steps'):.0f}, "
          f"{names[1]} {median(names[1], 'steps'):.0f}")


def row(seed: int, which: str, r: dict) -> str:
    t = "not solved" if r["time_s"] is None else f"{r['time_s']:.2f}"
    return f"{seed:>4} {which:>8} {t:>16} {str(r['steps']):>10} {r['updates']:>8}"


def run_relayrl(algo: str, seed: int, budget: int, stop: float, eval_every: int, eval_episodes: int,
                env_id: str = "CartPole-v1", sets: tuple[str, ...] = ()) -> dict:
    """relayrl's default config for ``algo`` (plus ``sets``) until ``stop``; the time counts from
    the start of training (envs and model built) to the end of the evaluation that reached it."""
    import tempfile

    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    config = build_config(algo, None, [f"eval.freq={eval_every}", f"eval.episodes={eval_episodes}", *sets],
                          {"env.id": env_id, "seed": seed, "total_steps": budget, "stop_value": stop})
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_trainer(config, run_dir=tmp, tensorboard=False)
    return {"time_s": summary["time_to_stop_value_s"], "steps": summary["env_steps_to_stop_value"],
            "updates": summary["updates"]}


def sb3_learn_until(model, eval_env, budget: int, stop: float, eval_every_calls: int, eval_episodes: int) -> dict:
    """``model.learn`` with SB3's EvalCallback stopping at ``stop``; timed like ``run_relayrl``."""
    import time

    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold

    solved: dict = {}

    class MarkSolved(StopTrainingOnRewardThreshold):
        def _on_step(self) -> bool:
            keep_going = super()._on_step()
            if not keep_going and not solved:
                solved.update(time=time.perf_counter(), steps=self.num_timesteps)
            return keep_going

    callback = EvalCallback(eval_env, callback_on_new_best=MarkSolved(reward_threshold=stop),
                            eval_freq=eval_every_calls, n_eval_episodes=eval_episodes, deterministic=True)
    start = time.perf_counter()
    model.learn(total_timesteps=budget, callback=callback)
    return {"time_s": solved["time"] - start if solved else None, "steps": solved.get("steps"),
            "updates": model._n_updates}
