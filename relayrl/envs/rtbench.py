"""Benchmark mode of a real-time env (rtgym's ``benchmark``): run it for N steps, acting as a worker would, and
report its timings, so ``time_step_duration`` can be tuned before training (``relayrl worker --benchmark``).

    from relayrl.envs.registry import make
    from relayrl.envs.rtbench import benchmark, report

    env = make("relayrl.envs.realtime:relayrl/RealTimeDrone-v0", time_step_duration=0.02)
    print(report(benchmark(env, steps=200)))

``act(obs) -> action`` is timed as the policy's inference (None: random actions, which take no time); the
rest comes from the env's own statistics (``RealTimeEnv.timing``: docs/realtime.md).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, Callable

import gymnasium as gym

from relayrl.envs.realtime import OVERRUN_TOLERANCE, RealTimeEnv
from relayrl.envs.rtparts import RealTimeWarning, RunningStat
from relayrl.errors import EnvError

__all__ = ["benchmark", "report"]


def benchmark(env: gym.Env, steps: int, act: Callable[[Any], Any] | None = None, seed: int = 0) -> dict[str, float]:
    """Step ``env`` ``steps`` times (resetting at episode ends) and return its timings (seconds): the env's
    ``timing()`` plus ``policy_inference_mean`` / ``_max`` (the time ``act`` took)."""
    realtime = env.unwrapped
    if not isinstance(realtime, RealTimeEnv):
        raise EnvError(f"{env.spec.id if env.spec else type(realtime).__name__} is not a real-time env (a "
                       "relayrl.envs.realtime.RealTimeEnv): benchmark mode times the wall-clock time steps of one "
                       "(docs/realtime.md); time other envs with benchmarks/env_throughput.py")
    if steps < 1:
        raise EnvError(f"benchmark steps must be at least 1, got {steps}")
    inference = RunningStat()
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    with warnings.catch_warnings():  # (each late step warns; here they are counted and reported)
        warnings.simplefilter("ignore", RealTimeWarning)
        _run(env, steps, act, inference, obs)
    timing = realtime.timing()
    mean, _, worst = inference.summary()
    return {**timing, "policy_inference_mean": mean, "policy_inference_max": worst}


def _run(env: gym.Env, steps: int, act: Callable[[Any], Any] | None, inference: RunningStat, obs: Any) -> None:
    for _ in range(steps):
        if act is None:
            action = env.action_space.sample()
        else:
            start = time.perf_counter()
            action = act(obs)
            inference.add(time.perf_counter() - start)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()


def report(timing: dict[str, float]) -> str:
    """The timings as a table a person reads, in milliseconds, with what each should be."""
    nominal = timing["time_step_duration"]

    def ms(key: str) -> str:
        value = timing[key]
        return f"{1000 * value:8.2f} ms" if math.isfinite(value) else f"{'-':>8}   "

    rows = [
        ("time step (nominal)", f"{1000 * nominal:8.2f} ms", ""),
        ("step duration mean", ms("step_duration_mean"), "~ nominal"),
        ("step duration std / max", f"{ms('step_duration_std')} / {ms('step_duration_max').strip()}", ""),
        ("jitter (rms) / max", f"{ms('jitter')} / {ms('jitter_max').strip()}", "a few % of nominal"),
        ("observation capture offset", ms("obs_capture_offset_mean"), "~ start_obs_capture"),
        ("caller time between steps", ms("inference_mean"), "well under nominal"),
        ("  of which policy inference", ms("policy_inference_mean"),
         "" if math.isfinite(timing["policy_inference_mean"]) else "(random actions)"),
        ("step() blocked on the time step", ms("wait_mean"), "> 0: the caller keeps up"),
        (f"overruns (> nominal + {OVERRUN_TOLERANCE:.0%})", f"{timing['overruns']:8d}   "
         f"({timing['overrun_share']:.1%} of {int(timing['steps'])} steps)", "0, or a few"),
        ("late steps (clock re-anchored)", f"{timing['late_steps']:8d}", "0"),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{name:<{width}}  {value}   {hint}".rstrip() for name, value, hint in rows]
    verdict = ("the caller keeps up: time_step_duration could be shorter" if timing["wait_mean"] > 0.2 * nominal
               and not timing["late_steps"] else
               "the caller is the bottleneck: lengthen time_step_duration or speed up the policy"
               if timing["overrun_share"] > 0.05 or timing["late_steps"] else "timing is sound")
    return "\n".join(lines + [verdict])
