"""Where a run's experience comes from, chosen from its config; then the Trainer runs it.

``relayrl train`` and ``relayrl.train`` call ``run(config)``:

- ``env.id`` "bridge:COMMAND": a simulator's agents through shared memory (``relayrl.bridge``);
- ``env.id`` "pettingzoo:module:env_fn": PettingZoo ParallelEnv copies, agents as rows (``relayrl.envs.multiagent``);
  a turn-based (AEC) game: a policy per player (``relayrl.envs.turn_based``, ``run_behaviours``);
- ``net.server``: remote workers through a relay (``relayrl.net``);
- ``learners`` > 1: data-parallel learner processes, each on local envs of its own (``relayrl.training.learner_group``);
- ``workers`` > 1 or ``backend`` mp/ray: a pool of rollout workers (``relayrl.runtime``);
- otherwise local envs in this process (``relayrl.training``).
"""

from __future__ import annotations

from typing import Any, Callable

from relayrl.algos import get_algo
from relayrl.core import SampleSource
from relayrl.envs.agents import OneBehaviour
from relayrl.envs.multiagent import is_pettingzoo, multiagent_envs
from relayrl.envs.turn_based import is_turn_based, turn_based_envs
from relayrl.errors import ConfigError
from relayrl.io.metrics import check_tracking
from relayrl.options import RunConfig
from relayrl.training.evaluator import ReportedEvaluator
from relayrl.training.experience import AgentExperience, GymExperience, SourceExperience
from relayrl.training.overlap import check_overlap
from relayrl.training.trainer import Trainer


def run(config: RunConfig, **options: Any) -> dict[str, Any]:
    """Run ``config``: the Trainer on the experience it asks for; ``options`` are the Trainer's (run_dir, resume, ...)."""
    check_tracking(config.logging.wandb)  # before any env, worker or simulator starts
    if config.learners > 1:  # data-parallel learners, each on its own local envs (training/learner_group.py)
        from relayrl.training.learner_group import Supervisor, run_learners

        supervisor = Supervisor  # (local processes)
        if config.learner_placement == "ray":  # (a Ray actor each)
            from relayrl.training.ray_learners import RaySupervisor as supervisor
        return run_learners(config, supervisor, **options)
    on_policy = get_algo(config.algo).on_policy
    if config.overlap:  # (before any worker, relay or simulator starts; the Trainer checks the experience)
        check_overlap(config, on_policy)
    if config.env.id.startswith("bridge:"):  # an external simulator through shared memory
        from relayrl.bridge.agent_env import make_bridge_envs

        if config.net.server is not None or config.backend not in ("auto", "inline"):
            raise ConfigError("a bridge simulator trains in this process: drop --server/--backend (--workers N "
                              "launches N simulator instances, each on its own channel)")
        from relayrl.training.behaviours import behaviour_config, check_behaviour_names, run_behaviours

        train, evaluation = make_bridge_envs(config, stop=options.get("stop_event"))
        if config.selfplay.active:  # two teams: one policy against its own snapshots
            from relayrl.training.selfplay import run_self_play

            return run_self_play(config, train, evaluation, **options)
        if len(train.behaviours) > 1:  # every behaviour trains, each with a Trainer of its own
            return run_behaviours(config, train, evaluation, **options)
        name = next(iter(train.behaviours))
        if config.behaviours:  # the one behaviour's overrides
            try:
                check_behaviour_names(config, [name])
                config = behaviour_config(config, name)
            except BaseException:
                train.close()
                evaluation.close()
                raise
        return Trainer(config, AgentExperience(OneBehaviour(train, name), OneBehaviour(evaluation, name)),
                       **options).run()
    if is_pettingzoo(config.env.id):  # PettingZoo copies in this process, every agent a row
        if config.net.server is not None or config.workers != 1 or config.backend not in ("auto", "inline"):
            raise ConfigError(f"{config.env.id}: PettingZoo envs train in this process (their agents come and go, "
                              "which rollout workers do not carry yet): drop --server/--workers/--backend and "
                              "raise env.num_envs for more env copies")
        if is_turn_based(config.env.id, config.env.kwargs):  # a board game: each player trains a policy of its own
            from relayrl.training.behaviours import run_behaviours
            from relayrl.training.selfplay import run_self_play

            if config.selfplay.active:  # or one policy plays both, against its own snapshots
                return run_self_play(config, *turn_based_envs(config), **options)
            return run_behaviours(config, *turn_based_envs(config), **options)
        return Trainer(config, AgentExperience(*multiagent_envs(config)), **options).run()
    if config.net.server is not None:
        from relayrl.net.backend import make_relay_source

        source, relay, spaces = make_relay_source(config, stop=options.get("stop_event"))
        return _train_from(config, source, options, spaces=spaces, on_policy=on_policy,
                           test_returns=relay.pop_test_returns)
    if config.resolved_backend == "inline" and config.workers == 1:
        return Trainer(config, GymExperience(config, on_policy), **options).run()
    from relayrl.runtime import make_pool

    return _train_from(config, make_pool(config), options, on_policy=on_policy)


def _train_from(config: RunConfig, source: SampleSource, options: dict[str, Any], *, on_policy: bool,
                spaces: Any = None, test_returns: Callable[[], list[float]] | None = None) -> dict[str, Any]:
    """Train on a pool of workers, closing it whatever happens. ``spaces``: the env's, when only the
    workers have it; then ``test_returns`` gives their test episodes to evaluate on."""
    try:
        evaluator = None
        if spaces is not None and test_returns is not None:  # the env exists on the workers' machines only
            evaluator = ReportedEvaluator(test_returns, missing=(
                "relayrl: no test episodes from the workers to evaluate on (the trainer has no env of its own with "
                "--remote-env): run the workers with --set net.test_episode_interval=N (a deterministic episode "
                "every N training episodes)"))
        experience = SourceExperience(config, source, spaces=spaces, evaluator=evaluator, on_policy=on_policy)
        return Trainer(config, experience, **options).run()
    finally:
        source.close()
