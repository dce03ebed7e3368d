"""relayrl.training.learner: hook ordering, frequency gating, learn() and its counters."""

from __future__ import annotations

import numpy as np
import pytest

from relayrl.core import Algorithm, SampleSource
from relayrl.training.learner import POSITIONS, HookContext, Learner


class FakeAlgo(Algorithm):
    """Records its calls; no policy to drive (set_progress does nothing)."""

    def __init__(self, updates_per_learn=None):
        self.calls = []
        self.updates_per_learn = updates_per_learn

    def learn(self, batch, progress=0.0):
        self.calls.append((batch, progress))
        metrics = {"loss": 0.5 * len(self.calls)}
        if self.updates_per_learn is not None:
            metrics["updates"] = self.updates_per_learn
        return metrics

    def set_progress(self, env_steps, total_steps):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def recorder(log, name):
    def hook(ctx):
        log.append((name, ctx.iteration))
    hook.__name__ = name
    return hook


def test_hooks_run_by_priority_with_stable_ties():
    learner = Learner(FakeAlgo())
    log = []
    for name, priority in [("a50", 50), ("b10", 10), ("c50", 50), ("d10", 10), ("e100", 100), ("f_default", None),
                           ("g0", 0)]:
        kwargs = {} if priority is None else {"priority": priority}
        learner.register_hook("after_iter", recorder(log, name), **kwargs)
    learner.learn(batch=None)
    assert [name for name, _ in log] == ["g0", "b10", "d10", "a50", "c50", "e100", "f_default"]


def test_positions_are_separate_and_run_only_when_called():
    learner = Learner(FakeAlgo())
    log = []
    for position in POSITIONS:
        learner.register_hook(position, recorder(log, position))
    learner.call_hooks("before_run")
    learner.learn(batch=None)
    learner.learn(batch=None)
    learner.call_hooks("after_run")
    assert log == [("before_run", 0), ("before_iter", 1), ("after_iter", 1), ("before_iter", 2),
                   ("after_iter", 2), ("after_run", 2)]


def test_freq_gates_iteration_hooks():
    learner = Learner(FakeAlgo())
    log = []
    learner.register_hook("after_iter", recorder(log, "every3"), freq=3)
    learner.register_hook("before_iter", recorder(log, "every2"), freq=2)
    learner.register_hook("after_iter", recorder(log, "every1"))
    for _ in range(7):
        learner.learn(batch=None)
    assert [it for name, it in log if name == "every3"] == [3, 6]
    assert [it for name, it in log if name == "every2"] == [2, 4, 6]
    assert [it for name, it in log if name == "every1"] == [1, 2, 3, 4, 5, 6, 7]


def test_freq_does_not_gate_run_hooks():
    learner = Learner(FakeAlgo(), HookContext(iteration=7))
    log = []
    learner.register_hook("before_run", recorder(log, "before"), freq=5)
    learner.register_hook("after_run", recorder(log, "after"), freq=3)
    learner.call_hooks("before_run")
    learner.call_hooks("after_run")
    assert log == [("before", 7), ("after", 7)]


def test_freq_counts_iterations_from_resumed_context():
    learner = Learner(FakeAlgo(), HookContext(iteration=4))
    log = []
    learner.register_hook("after_iter", recorder(log, "every5"), freq=5)
    for _ in range(7):
        learner.learn(batch=None)
    assert [it for _, it in log] == [5, 10]


def test_unknown_position_error():
    learner = Learner(FakeAlgo())
    with pytest.raises(ValueError) as info:
        learner.register_hook("after_iteration", lambda ctx: None)
    message = str(info.value)
    assert "'after_iteration'" in message
    for position in POSITIONS:
        assert position in message


@pytest.mark.parametrize("freq", [0, -1])
def test_bad_freq_error(freq):
    learner = Learner(FakeAlgo())
    with pytest.raises(ValueError, match=">= 1"):
        learner.register_hook("after_iter", lambda ctx: None, freq=freq)


def test_hook_name_defaults_to_function_name():
    learner = Learner(FakeAlgo())

    def save_best(ctx):
        pass

    learner.register_hook("after_run", save_best)
    learner.register_hook("after_run", save_best, name="custom")
    assert [h.name for h in learner._hooks["after_run"]] == ["save_best", "custom"]


def test_learn_calls_algo_learn_with_progress_and_updates_counters():
    algo = FakeAlgo()
    learner = Learner(algo)
    batch = {"obs": object()}
    metrics = learner.learn(batch, progress=0.25)
    assert algo.calls == [(batch, 0.25)]
    assert algo.calls[0][0] is batch
    assert metrics == {"loss": 0.5}
    assert learner.ctx.iteration == 1
    assert learner.ctx.updates == 1  # no "updates" in metrics: one update
    assert learner.ctx.metrics == {"loss": 0.5}
    learner.learn(batch, progress=0.5)
    assert algo.calls[-1][1] == 0.5
    assert (learner.ctx.iteration, learner.ctx.updates) == (2, 2)
    assert learner.ctx.metrics == {"loss": 1.0}
    assert learner.ctx.env_steps == 0  # env steps belong to the collector side


def test_learn_adds_reported_updates():
    learner = Learner(FakeAlgo(updates_per_learn=8.0), HookContext(updates=100, iteration=10, env_steps=5))
    learner.learn(None)
    learner.learn(None)
    assert learner.ctx.updates == 116 and isinstance(learner.ctx.updates, int)
    assert learner.ctx.iteration == 12
    assert learner.ctx.env_steps == 5


def test_hooks_see_fresh_counters_and_metrics():
    learner = Learner(FakeAlgo(updates_per_learn=3))
    seen = []
    learner.register_hook("before_iter", lambda ctx: seen.append(("before", ctx.iteration, ctx.updates,
                                                                  dict(ctx.metrics))))
    learner.register_hook("after_iter", lambda ctx: seen.append(("after", ctx.iteration, ctx.updates,
                                                                 dict(ctx.metrics))))
    learner.learn(None)
    learner.learn(None)
    assert seen == [
        ("before", 1, 0, {}),
        ("after", 1, 3, {"loss": 0.5, "updates": 3}),
        ("before", 2, 3, {"loss": 0.5, "updates": 3}),
        ("after", 2, 6, {"loss": 1.0, "updates": 3}),
    ]


def test_hook_can_request_stop_through_context():
    learner = Learner(FakeAlgo())

    def stopper(ctx):
        if ctx.iteration == 2:
            ctx.stop_reason = "stop_value"

    learner.register_hook("after_iter", stopper)
    learner.learn(None)
    assert learner.ctx.stop_reason is None
    learner.learn(None)
    assert learner.ctx.stop_reason == "stop_value"


class TrickleSource(SampleSource):
    """An external sample source (e.g. remote workers) that delivers few env steps per pull, some
    pulls none at all."""

    def __init__(self, pattern):
        self.pattern, self.pulls = pattern, 0

    def reset(self, seed):
        pass

    def pull(self):
        n = self.pattern[self.pulls % len(self.pattern)]
        self.pulls += 1
        return ({"obs": np.full((n, 2), float(self.pulls), np.float32)} if n else {}), n

    def pop_episodes(self):
        return [], []


@pytest.mark.parametrize("cap", [None, 0.5])
def test_max_training_steps_per_env_step_keeps_the_learner_behind_collection(cap):
    """Like the loop: gather (updates due, env steps), then learn; with a cap, updates never exceed
    cap x env steps delivered, even though updates_per_step asks for 4 per step."""
    from relayrl.options import ReplayLoopConfig
    from relayrl.training.offpolicy import ReplayRounds

    cfg = ReplayLoopConfig(buffer_size=1000, batch_size=4, start_training=8, updates_per_step=4.0,
                           max_training_steps_per_env_step=cap)
    source = ReplayRounds(FakeAlgo(), TrickleSource([3, 0, 1, 0, 0, 2]), cfg, seed=0, total_steps=10_000)
    learner = Learner(source.learning)
    for _ in range(60):
        due, steps = source.gather(learner.ctx.env_steps, learner.ctx.updates)
        learner.ctx.env_steps += steps
        learner.learn(due)
        if cap is not None:
            assert learner.ctx.updates <= cap * learner.ctx.env_steps
    env_steps, updates = learner.ctx.env_steps, learner.ctx.updates
    assert env_steps == 60
    if cap is None:  # the schedule alone: 4 updates per step once the buffer held start_training
        assert updates == 4 * (env_steps - 8)
    else:  # the cap binds: the learner paused, and caught up to the cap with each delivery
        assert updates == int(cap * env_steps)


class VersionedAlgo(FakeAlgo):
    """Each learn is one update: the policy's version counts them; records the versions it learned from."""

    class _Policy:
        version = 0

    def __init__(self):
        super().__init__()
        self.policy = self._Policy()
        self.seen: list[tuple[int, np.ndarray, np.ndarray]] = []  # (version, item ids, item versions)

    def learn(self, batch, progress=0.0):
        self.seen.append((self.policy.version, batch["index"].copy(), batch.get("version")))
        self.policy.version += 1
        return {"loss": 0.0}


@pytest.mark.parametrize("option", ["max_use", "max_staleness"])
def test_the_replay_eviction_options_of_the_config_reach_the_buffer(option):
    """max_use=1: no item is learned from in two updates; max_staleness=1: every update learns only from
    transitions stored under the policy version it updates. Either way the buffer counts evictions, and
    updates that find nothing left wait for new transitions instead of failing."""
    from relayrl.options import ReplayLoopConfig
    from relayrl.training.offpolicy import ReplayRounds

    cfg = ReplayLoopConfig(buffer_size=1000, batch_size=4, start_training=8, updates_per_step=1.0, **{option: 1})
    algo = VersionedAlgo()
    rounds = ReplayRounds(algo, TrickleSource([6]), cfg, seed=0, total_steps=10_000)
    learner = Learner(rounds.learning)
    for _ in range(40):
        due, steps = rounds.gather(learner.ctx.env_steps, learner.ctx.updates)
        learner.ctx.env_steps += steps
        learner.learn(due)
    assert len(algo.seen) > 10 and rounds.buffer.evicted > 0
    if option == "max_use":
        used: set[int] = set()
        for _, ids, _ in algo.seen:
            assert not used & set(ids.tolist())
            used |= set(ids.tolist())
    else:
        assert all((versions == version).all() for version, _, versions in algo.seen)
