"""RolloutWorker: a VectorEnv and a copy of the policy; collects chunks stamped (worker, seq, version).

A plain object with no transport: the inline backend calls it directly, the mp backend runs it in a
process, the Ray backend in an actor. It takes new weights only between chunks, so every row of a
chunk comes from one policy version.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from relayrl.algos import get_algo
from relayrl.core import Policy
from relayrl.envs.managers import make_vec
from relayrl.envs.native import in_process_manager
from relayrl.options import RunConfig
from relayrl.runtime.messages import InsertTransitions, LoadParams
from relayrl.training.collector import OffPolicyCollector, OnPolicyCollector


class RolloutWorker:
    def __init__(self, worker_id: int, config: RunConfig, seed: int,
                 acting: Callable[[Policy], Policy] | None = None, env_threads: int | None = None):
        """``acting``: what acts instead of the policy, made from it (a scripted policy: policy/scripted.py);
        the policy still takes the weights and says how actions are stored. ``env_threads``: the stepping
        threads of a native manager that has them (ALE's vector env; default one per core): 1 in the mp
        backend's worker processes, where the processes are the parallelism."""
        entry = get_algo(config.algo)
        cfg = config.algo_config
        self.worker_id, self.on_policy, self.total_steps = worker_id, entry.on_policy, config.total_steps
        env = config.env
        manager = in_process_manager(env.manager, env.id, env.kwargs, env.wrapping())
        threads = {"threads": env_threads} if manager == "native" and env_threads else {}
        self.venv = make_vec(env.id, env.num_envs, env_kwargs=env.kwargs, max_episode_steps=env.max_episode_steps,
                             wrapping=env.wrapping(), manager=manager, max_restarts=env.max_restarts, **threads)
        try:
            self.policy = entry.build_policy(cfg, self.venv.single_observation_space, self.venv.single_action_space)
            self.policy.observe_only()  # statistics belong to the learner; workers use the copy it publishes
            actor = self.policy if acting is None else acting(self.policy)
            if self.on_policy:
                self.collector: Any = OnPolicyCollector(self.venv, actor, cfg.num_steps)
            else:
                self.collector = OffPolicyCollector(self.venv, actor, cfg.n_step_for(agents=False), cfg.gamma,
                                                    cfg.steps_per_iteration)
            self.collector.reset(seed)
        except BaseException:
            self.venv.close()
            raise
        self.seq = 0

    @property
    def version(self) -> int:
        return self.policy.version

    def load(self, params: LoadParams, env_steps: int = 0) -> None:
        self.policy.set_weights(params.weights, version=params.version)
        self.policy.set_progress(env_steps, self.total_steps)  # e.g. DQN's epsilon follows the run's env steps

    def collect(self) -> InsertTransitions:
        start = time.perf_counter()
        if self.on_policy:
            batch = self.collector.collect()
            steps = int(batch["reward"].size)
        else:
            batch, steps = self.collector.pull()
        returns, lengths = self.collector.pop_episodes()
        msg = InsertTransitions(self.worker_id, self.seq, self.policy.version, batch, steps,
                                tuple(returns), tuple(lengths), self.policy.pop_observation_moments(),
                                collect_s=time.perf_counter() - start)
        self.seq += 1
        return msg

    def close(self) -> None:
        self.venv.close()
