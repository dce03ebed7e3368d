"""``relayrl collect RUN --episodes N -o FILE.npz``: a saved policy's episodes, written as an offline dataset.

The run's policy (its best checkpoint, else the last: ``relayrl.load``'s) acts in its env for N whole
episodes, spread over up to 8 envs as the evaluator spreads them (each env runs its share of episodes to the
end, so short episodes are not favoured). The transitions go to an ``.npz`` that ``load_dataset`` reads
(data/datasets.py): obs, action (as the env takes it), reward, next_obs (the final observation where an
episode ended), terminated, truncated. The file must not exist yet, and is checked before any env starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from relayrl.data.datasets import save_dataset
from relayrl.envs.managers import make_vec
from relayrl.envs.native import in_process_manager
from relayrl.errors import ConfigError, DatasetError
from relayrl.io.checkpoint import load_checkpoint
from relayrl.training.saved_policy import load_policy

MAX_ENVS = 8


def collect_dataset(run: str | Path, episodes: int, out: str | Path, *, stochastic: bool = False, seed: int = 0,
                    env_id: str | None = None) -> dict[str, Any]:
    """Write ``episodes`` episodes of the policy saved in ``run`` (a run directory or checkpoint) to ``out``.

    ``stochastic``: act as the run's collectors did when the checkpoint was written (its exploration: SAC's
    sampled actions, DQN's epsilon at that step) instead of deterministically. Returns what was written:
    path, transitions, episodes, return_mean, return_min, return_max.
    """
    out = Path(out)
    if episodes < 1:
        raise ConfigError(f"--episodes {episodes}: collect at least 1 episode")
    if out.exists():  # before anything runs (save_dataset checks again when it writes)
        raise DatasetError(f"{str(out)!r} exists already, and relayrl never overwrites a dataset: choose another name, "
                           "or move that file away")
    if out.suffix != ".npz":
        raise DatasetError(f"dataset {str(out)!r}: name it FILE.npz (relayrl writes datasets as .npz files)")
    ckpt = load_checkpoint(run)
    policy, config, env_id = load_policy(ckpt, env_id)
    if policy.recurrent:
        raise ConfigError("relayrl collect writes one-step transitions, which a recurrent policy's state is not part "
                          "of: collect with a feed-forward policy")
    run_state = ckpt.meta.get("run", {})
    policy.set_progress(int(run_state.get("env_steps", config.total_steps)), config.total_steps)
    mode = "collect" if stochastic else "eval"
    cfg = config.env
    with make_vec(env_id, min(episodes, MAX_ENVS), env_kwargs=cfg.kwargs, max_episode_steps=cfg.max_episode_steps,
                  wrapping=cfg.wrapping(), manager=in_process_manager(cfg.manager, env_id, cfg.kwargs,
                                                                       cfg.wrapping())) as venv:
        columns, returns = _run(venv, policy, mode, episodes, seed)
    data = {key: np.concatenate(parts) for key, parts in columns.items()}
    save_dataset(out, data)
    return {"path": str(out), "transitions": len(data["obs"]), "episodes": len(returns),
            "return_mean": float(np.mean(returns)), "return_min": float(np.min(returns)),
            "return_max": float(np.max(returns)), "env": env_id, "checkpoint": str(ckpt.path)}


def _run(venv, policy, mode: str, episodes: int, seed: int) -> tuple[dict[str, list[np.ndarray]], list[float]]:
    n = venv.num_envs
    quota = np.full(n, episodes // n)
    quota[: episodes % n] += 1
    columns: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated",
                                                             "truncated")}
    returns: list[float] = []
    ep_return = np.zeros(n)
    obs = venv.reset(seed=seed)
    mask = venv.reset_action_mask()
    while quota.any():
        action = policy.act_masked(obs, mode, mask).env_action
        result = venv.step(action)
        done = result.terminated | result.truncated
        next_obs = np.where(done.reshape(-1, *[1] * (result.obs.ndim - 1)), result.final_obs, result.obs)
        keep = quota > 0  # envs whose share of episodes is not done yet
        for key, value in (("obs", obs), ("action", action), ("reward", result.reward), ("next_obs", next_obs),
                           ("terminated", result.terminated), ("truncated", result.truncated)):
            columns[key].append(np.asarray(value)[keep])
        ep_return += result.reward
        for k in np.flatnonzero(done & keep):
            returns.append(float(ep_return[k]))
            quota[k] -= 1
        ep_return[done] = 0
        obs, mask = result.obs, result.action_mask
    columns["terminated"] = [c.astype(bool) for c in columns["terminated"]]
    columns["truncated"] = [c.astype(bool) for c in columns["truncated"]]
    return columns, returns
