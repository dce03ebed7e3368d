"""On-policy learning through the relay, the trainer's side: the worker pool over the relay with PPO (one rollout per
published version from --workers distinct workers) and APPO (whatever arrived within the lag
limit), rollout checks and their refusals, observation moments, and the env's spaces taken from
the workers (net.remote_env). Real ZeroMQ sockets: a relay in a thread, worker RelayClients."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from relayrl.config import build_config
from relayrl.errors import RelayRLError
from relayrl.net import wire
from relayrl.net.client import RelayClient
from relayrl.envs.space_data import space_to_data
from relayrl.net.backend import relay_pool
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.runtime.pool import WorkerPool
from relayrl.testing.relay import deliver, running_relay

OBS = gym.make("CartPole-v1").observation_space
ACT = gym.make("CartPole-v1").action_space
SPACES = {"observation": space_to_data(OBS), "action": space_to_data(ACT)}
T, N = 16, 2  # ppo.num_steps, env.num_envs of these tests


def rollout(seed: int = 0, steps: int = T, envs: int = N) -> dict[str, np.ndarray]:
    """A [T, n] rollout as a relayrl PPO worker on CartPole-v1 sends it (data/rollout.py)."""
    rng = np.random.default_rng(seed)
    shape = (steps, envs)
    return {"obs": rng.standard_normal((*shape, 4)).astype(np.float32), "action": rng.integers(0, 2, shape),
            "logp": np.full(shape, -0.69, np.float32), "value": rng.random(shape, dtype=np.float32),
            "reward": np.ones(shape, np.float32), "terminated": np.zeros(shape, bool),
            "truncated": np.zeros(shape, bool), "next_value": rng.random(shape, dtype=np.float32)}


def config(algo: str, address: str, *sets: str):
    return build_config(algo, None, ["net.heartbeat_s=0.1", "net.timeout_s=5", "net.connect_timeout_s=10",
                                     f"{algo}.num_steps={T}", f"env.num_envs={N}", *sets],
                        {"net.server": address, "env.id": "CartPole-v1"})


def chunk(sender: str, seq: int, version: int, batch: dict | None = None, **meta) -> wire.Message:
    batch = rollout(seq) if batch is None else batch
    steps = int(batch["reward"].size) if batch else 0
    return wire.decode(wire.encode(wire.SAMPLES, sender=sender, incarnation=1, seq=seq, version=version,
                                   arrays=batch, meta={"env_steps": steps, "spaces": SPACES, **meta}))


def moments_of(obs: np.ndarray) -> dict:
    stats = RunningMeanStd((4,))
    stats.update(obs.reshape(-1, 4))
    return {"count": stats.count, "mean": stats.mean.tolist(), "var": stats.var.tolist()}


@pytest.fixture
def relay():
    with running_relay() as r:
        yield r


@pytest.fixture
def make_source(relay):
    sources = []

    def make(algo: str = "ppo", *sets: str, spaces: bool = True) -> WorkerPool:
        source = relay_pool(config(algo, relay.address, *sets), *((OBS, ACT) if spaces else ()))
        sources.append(source)
        return source

    yield make
    for source in sources:
        source.close()


# ---------------------------------------------------------------- PPO: versions, workers, columns


def test_ppo_joins_one_rollout_of_the_published_version_per_worker_in_worker_order(make_source):
    source = make_source("ppo", "workers=2")
    source.publish({"w": np.zeros(1)}, 3)
    b1, a1 = rollout(1), rollout(2)
    assert deliver(source, [chunk("b", 0, 2), chunk("b", 1, 4),  # other versions: dropped, counted, not refused
                            chunk("b", 2, 3, b1), chunk("b", 3, 3),  # the second of one worker: surplus
                            ]) == ({}, 0)  # one worker's rollout of the two needed
    batch, steps = deliver(source, [chunk("a", 0, 3, a1, returns=[12.0], lengths=[12])])
    assert steps == 2 * T * N and batch["reward"].shape == (T, 2 * N)
    np.testing.assert_array_equal(batch["obs"][:, :N], b1["obs"])  # "b" first: it sent first (worker id 0)
    np.testing.assert_array_equal(batch["obs"][:, N:], a1["obs"])
    np.testing.assert_array_equal(batch["column"], np.broadcast_to(np.arange(2 * N), (T, 2 * N)))
    assert source.counts["other_version"] == 2 and source.counts["surplus"] == 1
    assert source.backend.counts["refused"] == 0 and source.counts["chunks"] == 2 and source.env_steps == steps
    assert source.pop_episodes() == ([12.0], [12])
    assert source.poll() == ({}, 0)  # consumed
    assert source.stats()["workers/other_version"] == 2


def test_ppo_pull_waits_for_the_rollouts_of_the_version_just_published(make_source, relay):
    """Through the relay: pull() returns only once both workers sent a rollout of the current version;
    a chunk from a worker with another version is acknowledged and the worker is told nothing."""
    source = make_source("ppo", "workers=2")
    workers = [RelayClient(relay.address, "worker", name=f"w{k}", heartbeat_s=0.1, timeout_s=5) for k in range(2)]
    try:
        source.reset(0)
        assert all(w.wait_connected(10) for w in workers)
        source.publish({"w": np.zeros(1)}, 7)
        workers[0].send_samples(rollout(0), 6, {"env_steps": T * N})  # collected before the broadcast
        workers[0].send_samples(rollout(1), 7, {"env_steps": T * N})

        def later():
            time.sleep(0.5)
            workers[1].send_samples(rollout(2), 7, {"env_steps": T * N})

        thread = threading.Thread(target=later)
        start = time.monotonic()
        thread.start()
        batch, steps = source.pull()
        assert time.monotonic() - start >= 0.4 and steps == 2 * T * N and batch["obs"].shape == (T, 2 * N, 4)
        thread.join()
        deadline = time.monotonic() + 10
        while workers[0].unacknowledged() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert workers[0].unacknowledged() == 0 and workers[0].stats["chunks_refused"] == 0
        assert source.counts["other_version"] == 1
    finally:
        for w in workers:
            w.close(timeout=0.5)


def test_pull_ends_with_an_error_when_the_source_is_closed_while_it_waits(make_source):
    source = make_source("ppo")
    source.reset(0)
    source.publish({"w": np.zeros(1)}, 0)
    errors = []

    def pull():
        try:
            source.pull()
        except RelayRLError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=pull)
    thread.start()
    time.sleep(0.3)
    source.close()
    thread.join(timeout=10)
    assert not thread.is_alive() and errors and "closed while the trainer waited for rollouts" in errors[0]


# ---------------------------------------------------------------- APPO: lag, slots


def test_appo_takes_what_arrived_within_the_lag_with_a_column_slot_per_worker(make_source):
    source = make_source("appo", "workers=2", "max_policy_lag=2")
    source.publish({"w": np.zeros(1)}, 10)
    batch, steps = deliver(source, [chunk("x", 0, 9), chunk("y", 0, 10), chunk("z", 0, 8), chunk("x", 1, 10),
                                    chunk("old", 0, 7),  # 3 versions behind: its env steps count, not learned from
                                    chunk("future", 0, 11)])  # a version this trainer never published (a previous run's)
    assert steps == 5 * T * N  # x, y, z, x, old
    assert batch["reward"].shape == (T, 4 * N)
    # slots by first appearance modulo --workers: x 0, y 1, z 0 (x's two chunks: both at slot 0)
    assert batch["column"][0].tolist() == [0, 1, 2, 3, 0, 1, 0, 1]
    assert source.counts["too_old"] == 1 and source.counts["other_version"] == 1
    stats = source.stats()
    assert stats["workers/lag_max"] == 3 and stats["workers/chunks"] == 5
    assert source.poll() == ({}, 0)


# ---------------------------------------------------------------- what is refused


def _bad_rollout(case: str) -> tuple[dict, dict]:
    batch, meta = rollout(), {}
    if case == "other num_steps":
        batch = rollout(steps=8)
    elif case == "other num_envs":
        batch = rollout(envs=3)
    elif case == "no logp":
        del batch["logp"]
    elif case == "extra hidden":
        batch["hidden"] = np.zeros((T, N, 8), np.float32)
    elif case == "float actions":
        batch["action"] = batch["action"].astype(np.float32)
    elif case == "obs width":
        batch["obs"] = np.zeros((T, N, 5), np.float32)
    elif case == "leading axes differ":
        batch["value"] = batch["value"][:, :1]
    elif case == "NaN value":
        batch["value"][3, 1] = np.nan
    elif case == "env_steps":
        meta["env_steps"] = 5
    elif case == "other action space":
        meta["spaces"] = {**SPACES, "action": space_to_data(gym.spaces.Discrete(3))}
    elif case == "moments without obs_norm":
        meta["obs_moments"] = moments_of(batch["obs"])
    else:
        raise AssertionError(case)
    return batch, meta


ROLLOUT_CASES = [
    ("other num_steps", "shape", "a rollout of 8 steps x 2 envs, the trainer's is 16 x 2", "--set ppo.num_steps=16"),
    ("other num_envs", "shape", "a rollout of 16 steps x 3 envs, the trainer's is 16 x 2", "--set env.num_envs=2"),
    ("no logp", "missing", "lacks ['logp']", "--env, --algo"),
    ("extra hidden", "extra", "['hidden'], which the trainer does not know", "--env, --algo"),
    ("float actions", "dtype", "action has dtype float32, expected int64", "--env, --algo"),
    ("obs width", "shape", "observation width 5, expected 4 (CartPole-v1, ppo)", "--env, --algo"),
    ("leading axes differ", "rows", "value 16x1", "net.compressor"),
    ("NaN value", "nonfinite", "1 of its 32 value values are not finite", "check its weights"),
    ("env_steps", "env_steps", "meta.env_steps is 5, its rollout holds 16 x 2 = 32 steps", "net.compressor"),
    ("other action space", "spaces", "action Discrete(3); the trainer's are observation Box(", "--env, --algo"),
    ("moments without obs_norm", "moments", "the trainer's ppo policy does not (ppo.obs_norm=false)",
     "the trainer's ppo.obs_norm"),
]


@pytest.mark.parametrize("case, cause, says, fix", ROLLOUT_CASES, ids=[c[0] for c in ROLLOUT_CASES])
def test_a_rollout_the_trainer_cannot_use_is_refused_by_cause(make_source, capsys, case, cause, says, fix):
    source = make_source("ppo")
    source.publish({"w": np.zeros(1)}, 0)
    batch, meta = _bad_rollout(case)
    assert deliver(source, [chunk("robot", 0, 0, batch, **meta)]) == ({}, 0)
    assert source.backend.refused == {cause: 1} and source.env_steps == 0
    err = capsys.readouterr().err
    assert f"refused chunk 0 of worker 'robot' ({cause})" in err and says in err and fix in err, err


MOMENT_CASES = [
    ("missing", None, "carries no meta.obs_moments (the worker acts on raw observations)"),
    ("not a map", [1, 2], "must be a map of count, mean and var"),
    ("zero count", {"count": 0, "mean": [0] * 4, "var": [1] * 4}, "count is 0, not a number > 0"),
    ("bool count", {"count": True, "mean": [0] * 4, "var": [1] * 4}, "count is True"),
    ("wrong shape", {"count": 3, "mean": [0] * 3, "var": [1] * 4}, "mean has shape (3,), the observations' is (4,)"),
    ("nan mean", {"count": 3, "mean": [0, float("nan"), 0, 0], "var": [1] * 4}, "mean holds values that are not"),
    ("negative var", {"count": 3, "mean": [0] * 4, "var": [1, -1, 1, 1]}, "var holds negative values"),
    ("strings", {"count": 3, "mean": ["a"] * 4, "var": [1] * 4}, "mean is not an array of numbers"),
]


@pytest.mark.parametrize("case, moments, says", MOMENT_CASES, ids=[c[0] for c in MOMENT_CASES])
def test_observation_moments_must_come_and_be_sound_when_the_trainer_normalises(make_source, capsys, case,
                                                                               moments, says):
    source = make_source("ppo", "ppo.obs_norm=true")
    source.publish({"w": np.zeros(1)}, 0)
    meta = {} if moments is None else {"obs_moments": moments}
    deliver(source, [chunk("robot", 0, 0, **meta)])
    assert source.backend.refused == {"moments": 1} and source.pop_observation_moments() is None
    assert says in capsys.readouterr().err


def test_merged_observation_moments_equal_those_of_the_pooled_observations(make_source):
    source = make_source("ppo", "ppo.obs_norm=true", "workers=3")
    source.publish({"w": np.zeros(1)}, 0)
    batches = [rollout(seed) for seed in range(3)]
    for k, batch in enumerate(batches):
        batch["obs"] = batch["obs"] * (k + 1) + 3 * k  # three workers that see different things
    rollout_, _ = deliver(source, [chunk(f"w{k}", 0, 0, b, obs_moments=moments_of(b["obs"]))
                                   for k, b in enumerate(batches)])
    assert rollout_["reward"].shape == (T, 3 * N)
    merged = source.pop_observation_moments()
    pooled = np.concatenate([b["obs"].reshape(-1, 4) for b in batches]).astype(np.float64)
    assert float(merged["count"]) == len(pooled)
    np.testing.assert_allclose(merged["mean"], pooled.mean(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(merged["var"], pooled.var(axis=0), rtol=1e-6, atol=1e-6)
    assert source.pop_observation_moments() is None  # popped


def test_moments_of_a_dropped_rollout_are_not_merged(make_source):
    source = make_source("ppo", "ppo.obs_norm=true")
    source.publish({"w": np.zeros(1)}, 1)
    batch = rollout()
    deliver(source, [chunk("w0", 0, 0, batch, obs_moments=moments_of(batch["obs"]))])  # version 0: not learned from
    assert source.counts["other_version"] == 1 and source.pop_observation_moments() is None


def test_an_announcement_carries_spaces_and_no_rollout(make_source, capsys):
    """An on-policy worker waiting for its first weights says which env it runs: nothing is learned
    or refused; an announcement that claims env steps is refused."""
    source = make_source("ppo")
    source.publish({"w": np.zeros(1)}, 0)
    assert deliver(source, [chunk("w0", 0, -1, {}), chunk("w1", 0, -1, {}, env_steps=5)]) == ({}, 0)
    assert source.backend.counts["refused"] == 1 and source.backend.refused == {"empty": 1} and source.env_steps == 0
    assert "an on-policy chunk carries its whole rollout" in capsys.readouterr().err


def test_test_episode_returns_are_popped_for_an_evaluator_and_logged(make_source):
    source = make_source("appo")
    source.publish({"w": np.zeros(1)}, 0)
    deliver(source, [chunk("w0", 0, 0, test_returns=[200.0, 180.0]), chunk("w1", 0, -1, {}, test_returns=[50.0])])
    assert source.backend.pop_test_returns() == [200.0, 180.0, 50.0] and source.backend.pop_test_returns() == []
    assert source.stats()["net/test_return"] == pytest.approx(430 / 3)


# ---------------------------------------------------------------- the env's spaces from the workers


def test_remote_env_takes_the_spaces_from_the_first_chunk_and_keeps_it(make_source, relay, capsys):
    source = make_source("ppo", "net.remote_env=true", spaces=False)
    assert source.backend.observation_space is None
    worker = RelayClient(relay.address, "worker", name="robot", heartbeat_s=0.1, timeout_s=5)
    try:
        assert worker.wait_connected(10)
        worker.send_samples({}, -1, {"env_steps": 0})  # an older worker's chunk: no spaces
        first = rollout(5)
        worker.send_samples(first, 0, {"env_steps": T * N, "spaces": SPACES})
        obs_space, act_space = source.backend.await_spaces(timeout=10)
        assert obs_space == OBS and act_space == ACT and source.backend.action_space == ACT
        assert "the env's spaces, from worker 'robot'" in capsys.readouterr().err
        source.publish({"w": np.zeros(1)}, 0)
        batch, steps = source.pull()  # the chunk that brought the spaces is learned from
        np.testing.assert_array_equal(batch["obs"], first["obs"])
        assert steps == T * N
    finally:
        worker.close(timeout=0.5)


def test_remote_env_without_workers_times_out_naming_the_fix(make_source):
    source = make_source("ppo", "net.remote_env=true", spaces=False)
    with pytest.raises(RelayRLError, match=r"no worker described its env's spaces .* within 1 s: start "
                                           r"`relayrl worker --server .* or drop --remote-env"):
        source.backend.await_spaces(timeout=1)


def test_make_relay_source_with_remote_env_builds_no_env(relay, monkeypatch):
    from relayrl.net.backend import make_relay_source

    def no_env(*args, **kwargs):
        raise AssertionError("the trainer built the env")

    monkeypatch.setattr("relayrl.envs.registry.make", no_env)
    worker = RelayClient(relay.address, "worker", name="robot", heartbeat_s=0.1, timeout_s=5)
    try:
        assert worker.wait_connected(10)
        worker.send_samples({}, -1, {"env_steps": 0, "spaces": SPACES})
        cfg = build_config("ppo", None, ["net.heartbeat_s=0.1", "net.connect_timeout_s=10", "workers=2"],
                           {"net.server": relay.address, "net.remote_env": True, "env.id": "NotHere-v0"})
        source, _, spaces = make_relay_source(cfg)
        try:
            assert spaces == (OBS, ACT)
            assert source.backend.observation_space == OBS and source.backend.action_space == ACT and source.backend.num_workers == 2
        finally:
            source.close()
    finally:
        worker.close(timeout=0.5)


def test_a_trainer_waiting_for_rollouts_says_which_it_has(make_source, relay, monkeypatch, capsys):
    monkeypatch.setattr("relayrl.net.backend.WAITING_NOTICE_S", 0.3)
    source = make_source("ppo", "workers=2")
    worker = RelayClient(relay.address, "worker", name="w0", heartbeat_s=0.1, timeout_s=5)
    try:
        source.reset(0)
        assert worker.wait_connected(10)
        source.publish({"w": np.zeros(1)}, 4)
        worker.send_samples(rollout(), 4, {"env_steps": T * N})
        thread = threading.Thread(target=lambda: pytest.raises(RelayRLError, source.pull), daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while "nothing more" not in capsys.readouterr().err and time.monotonic() < deadline:
            time.sleep(0.2)
        source.close()
        thread.join(timeout=10)
    finally:
        worker.close(timeout=0.5)
    assert time.monotonic() < deadline, "no notice"


def test_a_trainer_waiting_for_rollouts_names_what_came(make_source):
    source = make_source("ppo", "workers=2")
    source.publish({"w": np.zeros(1)}, 4)
    deliver(source, [chunk("w0", 0, 4)])
    assert source._waiting_for() == "1 of the 2 rollouts of policy version 4 (--workers 2) came (w0), nothing more"
