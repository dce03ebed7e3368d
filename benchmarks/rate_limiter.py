"""The samples-per-insert rate limiter over whole runs: the measured ratio and who waited.

DQN on CartPole (``relayrl-test/SlowCartPole-v0`` for slowed workers), 2 mp worker processes x 2 envs, the
replay in the learner or in 2 shard processes (``replay_shards: 2``), ``dqn.samples_per_insert: 1`` with
``dqn.spi_tolerance: 0.1`` (error buffer 0.1 x 1 x start_training sampled rows), batch_size 32,
start_training 1000. Cases:

- ``slow workers``: every env step sleeps ``--sleep-us`` (a robot, a remote simulator): the learner waits;
- ``slow learner``: a learner hook sleeps ``--learner-sleep-s`` after every round: the workers wait;
- ``local, slow learner``: the same learner, with the local collector (no workers): it collects less.

Printed per case: the samples per insert measured over the run (sampled rows / transitions stored past
start_training), the final diff against the error buffer, each side's waits and seconds waited, and env
steps per second.

    python benchmarks/rate_limiter.py --total-steps 6000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from relayrl.config import build_config
from relayrl.io.metrics import read_metrics
from relayrl.runtime import make_pool
from relayrl.training.trainer import run_trainer

SLOW_ENV = "relayrl.testing.envs:relayrl-test/SlowCartPole-v0"


def run_case(env: str, kwargs: str, workers: bool, learner_sleep_s: float, total_steps: int, shards: int) -> dict:
    overrides = [f"env.id={env}", f"env.kwargs={kwargs}", "env.num_envs=2", "dqn.batch_size=32",
                 f"dqn.replay_shards={shards}",
                 "dqn.start_training=1000", "dqn.samples_per_insert=1.0", "dqn.spi_tolerance=0.1",
                 "dqn.hidden_sizes=[64]", "eval.freq=0", "eval.episodes=1", "eval.num_envs=1"]
    if workers:
        overrides += ["backend=mp", "workers=2"]
    config = build_config("dqn", None, overrides, {"total_steps": total_steps, "seed": 0})
    hooks = [("after_iter", lambda ctx: time.sleep(learner_sleep_s), {})] if learner_sleep_s else []
    with tempfile.TemporaryDirectory() as tmp:
        pool = make_pool(config) if workers else None
        try:
            summary = run_trainer(config, run_dir=Path(tmp) / "run", tensorboard=False, quiet=True, hooks=hooks,
                                  **({"samples": pool} if pool is not None else {}))
        finally:
            if pool is not None:
                pool.close()
        last = [row for row in read_metrics(Path(tmp) / "run") if "limiter/samples_per_insert" in row][-1]
    return {"spi": last["limiter/samples_per_insert"], "diff": last["limiter/diff"],
            "buffer": last["limiter/error_buffer"], "lw": last["limiter/learner_waits"],
            "lws": last["limiter/learner_wait_s"], "iw": last["limiter/insert_waits"],
            "iws": last["limiter/insert_wait_s"], "steps_s": summary["env_steps_per_s"],
            "updates": summary["updates"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--total-steps", type=int, default=6000)
    parser.add_argument("--sleep-us", type=float, default=1000.0)
    parser.add_argument("--learner-sleep-s", type=float, default=0.05)
    args = parser.parse_args()
    slow_env = f"{{sleep_us: {args.sleep_us}, busy_us: 0}}"
    cases = [("slow workers (mp)", SLOW_ENV, slow_env, True, 0.0, 0),
             ("slow learner (mp)", "CartPole-v1", "{}", True, args.learner_sleep_s, 0),
             ("slow workers (mp, 2 shards)", SLOW_ENV, slow_env, True, 0.0, 2),
             ("slow learner (mp, 2 shards)", "CartPole-v1", "{}", True, args.learner_sleep_s, 2),
             ("slow learner (local)", "CartPole-v1", "{}", False, args.learner_sleep_s, 0)]
    print("| case | measured SPI | final diff / error buffer | learner waits (s) | insert waits (s) "
          "| updates | env steps/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, env, kwargs, workers, sleep, shards in cases:
        r = run_case(env, kwargs, workers, sleep, args.total_steps, shards)
        print(f"| {name} | {r['spi']:.4f} | {r['diff']:+.0f} / {r['buffer']:.0f} | {r['lw']:.0f} ({r['lws']:.2f}) "
              f"| {r['iw']:.0f} ({r['iws']:.2f}) | {r['updates']} | {r['steps_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
