"""The Ray backend on a real two-node Ray cluster (ray.cluster_utils.Cluster on this machine)."""

import pytest

ray = pytest.importorskip("ray")

from relayrl.config import build_config  # noqa: E402
from relayrl.io.metrics import read_metrics  # noqa: E402
from relayrl.runtime import make_pool  # noqa: E402
from relayrl.train.loop import train as train_local  # noqa: E402

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"node_a": 1}})
    c.add_node(num_cpus=2, resources={"node_b": 1})
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def _run(config, tmp_path, hooks=()):
    pool = make_pool(config)
    try:
        summary = train_local(config, run_dir=tmp_path / "run", tensorboard=False, samples=pool,
                              publish=pool.publish, hooks=hooks)
    finally:
        nodes = {ray.get(pool.backend.actor(k).node_id.remote()) for k in range(config.workers)} \
            if pool.backend._actors else set()
        pool.close()
    return summary, pool, nodes


def test_ppo_on_two_ray_nodes_solves_cartpole(cluster, tmp_path):
    config = build_config("ppo", None, ["backend=ray", "workers=2", "env.num_envs=4", "eval.freq=4096",
                                        "eval.episodes=5", "eval.num_envs=5"], {"total_steps": 100_000, "seed": 0})
    summary, pool, nodes = _run(config, tmp_path)
    assert summary["solved"] and summary["backend"] == "ray", summary
    assert len(nodes) == 2  # one worker on each node
    rows = [r for r in read_metrics(tmp_path / "run") if "runtime/lag_max" in r]
    assert rows and all(r["runtime/lag_max"] == 0 and r["runtime/rejected"] == 0 for r in rows)


def test_a_killed_ray_actor_is_replaced_and_the_run_still_solves(cluster, tmp_path):
    config = build_config("ppo", None, ["backend=ray", "workers=2", "env.num_envs=4", "eval.freq=4096",
                                        "eval.episodes=5", "eval.num_envs=5"], {"total_steps": 100_000, "seed": 3})
    holder = {}

    def kill_one(ctx):
        if ctx.iteration == 3 and "done" not in holder:
            ray.kill(holder["pool"].backend.actor(0))
            holder["done"] = True

    from relayrl.runtime import make_pool as _make

    pool = _make(config)
    holder["pool"] = pool
    try:
        summary = train_local(config, run_dir=tmp_path / "run", tensorboard=False, samples=pool,
                              publish=pool.publish, hooks=[("after_iter", kill_one, {})])
    finally:
        pool.close()
    assert holder.get("done") and summary["solved"], summary
    assert pool.backend.restarts >= 1


def test_sac_collects_asynchronously_on_ray_workers(cluster, tmp_path):
    config = build_config("sac", None, ["backend=ray", "workers=2", "sac.start_training=300", "sac.hidden_sizes=[32,32]",
                                        "eval.freq=0", "eval.episodes=2", "eval.num_envs=2"],
                          {"total_steps": 2000, "seed": 0})
    summary, pool, nodes = _run(config, tmp_path)
    assert summary["env_steps"] >= 2000 and summary["updates"] > 0
    assert len(nodes) == 2


def test_a_hung_ray_actor_is_replaced(cluster, tmp_path):
    import os
    import signal

    config = build_config("ppo", None, ["backend=ray", "workers=2", "env.num_envs=4", "eval.freq=4096",
                                        "eval.episodes=5", "eval.num_envs=5", "worker_timeout=3"],
                          {"total_steps": 100_000, "seed": 5})
    pool = make_pool(config)
    frozen = []

    def freeze_one(ctx):
        if ctx.iteration == 3 and not frozen:
            pid = ray.get(pool.backend.actor(1).pid.remote())
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)

    try:
        summary = train_local(config, run_dir=tmp_path / "run", tensorboard=False, samples=pool,
                              publish=pool.publish, hooks=[("after_iter", freeze_one, {})])
    finally:
        pool.close()
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert frozen and summary["solved"], summary
    assert any("no progress for 3 s" in f for f in pool.backend.failures)


@pytest.mark.parametrize("algo,sets", [
    ("dqn", ["env.num_envs=2", "dqn.start_training=200", "dqn.hidden_sizes=[16]"]),
    ("appo", ["env.num_envs=2", "appo.num_steps=32"]),
])
def test_dqn_and_appo_run_on_ray_workers(cluster, tmp_path, algo, sets):
    config = build_config(algo, None, sets + ["backend=ray", "workers=2", "eval.freq=0", "eval.episodes=2",
                                              "eval.num_envs=2"], {"total_steps": 1000, "seed": 0})
    summary, pool, nodes = _run(config, tmp_path)
    assert summary["env_steps"] >= 1000 and summary["updates"] > 0 and len(nodes) == 2


def test_weights_enter_the_object_store_once_per_version(cluster, tmp_path, monkeypatch):
    puts = []
    real_put = ray.put

    def counting_put(value, *args, **kwargs):
        puts.append(1)
        return real_put(value, *args, **kwargs)

    monkeypatch.setattr(ray, "put", counting_put)
    config = build_config("ppo", None, ["backend=ray", "workers=2", "env.num_envs=2", "ppo.num_steps=32",
                                        "eval.freq=0", "eval.episodes=2", "eval.num_envs=2"],
                          {"total_steps": 640, "seed": 0})
    summary, pool, nodes = _run(config, tmp_path)
    rollouts = summary["env_steps"] // (2 * 2 * 32)  # each collected by both workers, on two nodes
    assert rollouts == 5 and len(puts) == rollouts  # one put per version, not one per worker
    assert len(nodes) == 2
