"""The Ray backend on a real two-node Ray cluster (ray.cluster_utils.Cluster on this machine):
one node proxy per node, hosting that node's workers."""

import os
import signal
import time

import pytest

ray = pytest.importorskip("ray")

from relayrl.config import build_config  # noqa: E402
from relayrl.io.metrics import read_metrics  # noqa: E402
from relayrl.runtime import make_pool  # noqa: E402
from relayrl.training.trainer import run_trainer  # noqa: E402
from runtime_checks import SameWeights  # noqa: E402  (same folder)

pytestmark = pytest.mark.ray
PPO = ["backend=ray", "workers=2", "env.num_envs=4", "eval.freq=4096", "eval.episodes=5", "eval.num_envs=5"]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"node_a": 1}})
    c.add_node(num_cpus=2, resources={"node_b": 1})
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def _run(config, tmp_path, on_iteration=None):
    """Train with a pool the caller can reach: ``on_iteration(ctx, backend)`` after each iteration."""
    pool = make_pool(config)
    hooks = [("after_iter", lambda ctx: on_iteration(ctx, pool.backend), {})] if on_iteration else []
    info = []
    try:
        summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False, samples=pool,
                              hooks=hooks)
        info = pool.backend.info()
    finally:
        pool.close()
    return summary, pool.backend, info


def test_ppo_on_two_ray_nodes_solves_cartpole_with_one_proxy_per_node(cluster, tmp_path, monkeypatch):
    config = build_config("ppo", None, PPO, {"total_steps": 100_000, "seed": 0})
    check = SameWeights(config)
    check.install(monkeypatch)
    summary, backend, info = _run(config, tmp_path)
    assert summary["solved"] and summary["backend"] == "ray", summary
    assert len({p["node"] for p in info}) == 2  # a proxy on each node
    assert sorted(w for p in info for w in p["worker_pids"]) == [0, 1]  # hosting one worker each
    check.assert_synchronous(columns=2 * 4)  # synchronous: every rollout from the weights just published
    rows = [r for r in read_metrics(tmp_path / "run") if "workers/other_version" in r]
    assert rows and all(r["workers/other_version"] == 0 for r in rows)  # and no chunk of another version came


def test_weights_cross_to_each_node_once_per_version(cluster, tmp_path, monkeypatch):
    puts = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value, *a, **k: puts.append(1) or real_put(value, *a, **k))
    config = build_config("ppo", None, ["backend=ray", "workers=4", "env.num_envs=1", "ppo.num_steps=32",
                                        "eval.freq=0", "eval.episodes=2", "eval.num_envs=2"],
                          {"total_steps": 640, "seed": 0})
    summary, backend, info = _run(config, tmp_path)
    versions = summary["env_steps"] // (4 * 1 * 32)
    assert versions == 5 and len(puts) == versions  # one object-store put per version
    assert len(info) == 2 and all(p["versions_received"] == versions for p in info)  # one copy per node
    assert all(len(p["worker_pids"]) == 2 for p in info)  # each copy served two workers


@pytest.mark.extended  # (the killed-proxy test below kills a worker first and checks its restart too)
def test_a_killed_worker_process_is_restarted_by_its_node_proxy(cluster, tmp_path):
    config = build_config("ppo", None, PPO, {"total_steps": 100_000, "seed": 2})
    killed = []

    def kill_one(ctx, backend):
        if ctx.iteration == 3 and not killed:
            pid = backend.info()[0]["worker_pids"]
            pid = next(iter(pid.values()))
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    summary, backend, _ = _run(config, tmp_path, kill_one)
    assert killed and summary["solved"], summary
    assert backend.restarts >= 1 and any("exit code" in f for f in backend.failures)
    assert max(r.get("runtime/restarts", 0) for r in read_metrics(tmp_path / "run")) >= 1


def test_a_killed_node_proxy_is_replaced_and_the_run_still_solves(cluster, tmp_path):
    """A worker of proxy 1 is killed (its proxy restarts it), then proxy 1 itself: the replacement
    counts its restarts from 0, and runtime/restarts must still never go down."""
    config = build_config("ppo", None, PPO, {"total_steps": 100_000, "seed": 3})
    killed = []

    def kill_worker_then_proxy(ctx, backend):
        if ctx.iteration == 3 and not killed:
            os.kill(next(iter(backend.info()[1]["worker_pids"].values())), signal.SIGKILL)
            killed.append("worker")
        elif killed == ["worker"] and backend.restarts >= 1:  # the proxy has reported the restart
            ray.kill(backend.proxy(1))
            killed.append("proxy")

    summary, backend, info = _run(config, tmp_path, kill_worker_then_proxy)
    assert killed == ["worker", "proxy"] and summary["solved"], (killed, summary)
    assert any("node proxy 1" in f for f in backend.failures) and len(info) == 2
    assert any("exit code" in f for f in backend.failures)
    restarts = [r["runtime/restarts"] for r in read_metrics(tmp_path / "run") if "runtime/restarts" in r]
    assert restarts[-1] >= 2 and restarts == sorted(restarts)  # worker and proxy, never going down


def test_a_hung_worker_is_replaced_by_its_node_proxy(cluster, tmp_path):
    config = build_config("ppo", None, PPO + ["worker_timeout=3"], {"total_steps": 100_000, "seed": 5})
    frozen = []

    def freeze_one(ctx, backend):
        if ctx.iteration == 3 and not frozen:
            pid = next(iter(backend.info()[1]["worker_pids"].values()))
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)

    summary, backend, _ = _run(config, tmp_path, freeze_one)
    assert frozen and summary["solved"], summary
    assert any("no progress for 3 s" in f for f in backend.failures)


@pytest.mark.parametrize("algo,sets", [
    pytest.param("sac", ["sac.start_training=300", "sac.hidden_sizes=[32,32]"], marks=pytest.mark.extended),
    ("dqn", ["env.num_envs=2", "dqn.start_training=200", "dqn.hidden_sizes=[16]"]),
    # (APPO's lagging workers are in the default suite on mp: test_runtime.py)
    pytest.param("appo", ["env.num_envs=2", "appo.num_steps=32"], marks=pytest.mark.extended),
    # issue 25's synchronous on-policy PQN: a rollout other than PPO's through the proxies (PPO's own tests above
    # take the same synchronous path through them in the default suite)
    pytest.param("pqn", ["env.num_envs=2", "pqn.num_steps=16", "pqn.hidden_sizes=[16]"], marks=pytest.mark.extended),
    pytest.param("a2c", ["env.num_envs=2", "a2c.num_steps=8"], marks=pytest.mark.extended),
    pytest.param("td3", ["td3.start_training=300", "td3.hidden_sizes=[16,16]"], marks=pytest.mark.extended),
    pytest.param("redq", ["redq.start_training=300", "redq.hidden_sizes=[16,16]", "redq.num_critics=3",
                          "redq.updates_per_step=1"], marks=pytest.mark.extended),
    pytest.param("crossq", ["crossq.start_training=300", "crossq.hidden_sizes=[16,16]",
                            "crossq.critic_hidden_sizes=[16,16]"], marks=pytest.mark.extended),
])
def test_asynchronous_algorithms_run_on_ray_workers(cluster, tmp_path, algo, sets):
    """(Also the synchronous on-policy algorithms other than PPO, whose own tests are above.)"""
    config = build_config(algo, None, sets + ["backend=ray", "workers=2", "eval.freq=0", "eval.episodes=2",
                                              "eval.num_envs=2"], {"total_steps": 1500, "seed": 0})
    summary, backend, info = _run(config, tmp_path)
    assert summary["env_steps"] >= 1500 and summary["updates"] > 0
    assert len({p["node"] for p in info}) == 2


APEX = ["backend=ray", "workers=2", "env.num_envs=4", "eval.freq=2500", "eval.episodes=5", "eval.num_envs=5"]


def _shard_metrics(run_dir):
    return [r for r in read_metrics(run_dir) if "train/replay/shard_restarts" in r]


def _kill_shard_once(at_steps, killed):
    def kill(ctx, backend):
        service = backend.service
        if not killed and ctx.env_steps >= at_steps and service.stats()["replay/shard0_size"] > 0:
            ray.kill(service.shards.actors[0])
            killed.append(ctx.env_steps)
    return kill


def _check_shards(run_dir, restarts, cfg):
    last = _shard_metrics(run_dir)[-1]
    # the samples-per-insert ratio holds across the service: updates_per_step x batch_size items per env step
    # from the env step at which the replay held start_training items
    expected = cfg.updates_per_step * cfg.batch_size * (last["env_steps"] - max(cfg.start_training, cfg.batch_size))
    assert abs(last["train/replay/sampled"] - expected) < 0.25 * expected, (last, expected)
    assert last["train/replay/shard_restarts"] == restarts
    assert last["train/replay/shard0_size"] > 0 and last["train/replay/shard1_size"] > 0  # both fed and sampled
    assert last["train/replay/inserted"] > 0 and last["train/replay/sampled"] > 0
    if restarts:  # what the kill cost (items after the last snapshot, chunks in flight), counted
        assert last["train/replay/lost_items"] + last["train/replay/lost_chunks"] > 0
    return last


def test_a_killed_replay_shard_is_restarted_from_its_snapshot_and_no_process_outlives_the_run(cluster, tmp_path):
    """Ape-X DQN: the node proxies insert into two shard actors, the learner samples from both with
    priorities; shard 0 is killed after the first evaluation's checkpoint (which snapshots the
    shards), restarted from that snapshot, and what it held beyond it is counted as lost. When the run
    ends, the shards (the restarted one included), the node proxies and their workers are gone."""
    config = build_config("dqn", None, APEX + ["dqn.replay_shards=2", "dqn.prioritized=true", "dqn.start_training=500",
                                               "eval.freq=2000", "eval.episodes=2", "eval.num_envs=2"],
                          {"total_steps": 5000, "seed": 0})
    killed, pids = [], set()
    kill = _kill_shard_once(3000, killed)

    def kill_and_note_pids(ctx, backend):
        kill(ctx, backend)
        if killed and backend.service.restarts:  # after the restart: the new shard's process too
            pids.update(ray.get(a.info.remote())["pid"] for a in backend.service.shards.actors)
            pids.update(p["pid"] for p in backend.info())
            pids.update(w for p in backend.info() for w in p["worker_pids"].values())

    summary, backend, info = _run(config, tmp_path, kill_and_note_pids)
    assert killed and summary["updates"] > 1000, (killed, summary)
    assert summary["env_steps"] >= 5000 or summary["solved"], summary
    last = _check_shards(tmp_path / "run", restarts=1, cfg=config.algo_config)
    assert last["train/replay/size"] > 2000  # the snapshot came back (2,000+ items before the kill)
    assert len({p["node"] for p in info}) == 2
    assert len(pids) == 2 + 2 + 2  # shards, node proxies, workers
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if _alive(p)]


@pytest.mark.solve
def test_apex_dqn_with_two_replay_shards_solves_cartpole_through_a_killed_shard(cluster, tmp_path):
    config = build_config("dqn", None, APEX + ["dqn.replay_shards=2", "dqn.prioritized=true"],
                          {"total_steps": 80_000, "seed": 0})
    killed = []
    summary, backend, info = _run(config, tmp_path, _kill_shard_once(6000, killed))
    assert killed and summary["solved"], (killed, summary)
    _check_shards(tmp_path / "run", restarts=1, cfg=config.algo_config)


@pytest.mark.solve
def test_apex_sac_with_two_replay_shards_solves_pendulum(cluster, tmp_path):
    config = build_config("sac", None, ["backend=ray", "workers=2", "env.id=Pendulum-v1", "env.num_envs=2",
                                        "sac.replay_shards=2", "eval.freq=1000", "eval.episodes=5", "eval.num_envs=5"],
                          {"total_steps": 40_000, "seed": 0, "stop_value": -200})
    summary, backend, info = _run(config, tmp_path)
    assert summary["solved"], summary
    _check_shards(tmp_path / "run", restarts=0, cfg=config.algo_config)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has exited
        return f.read().split(") ")[-1][0] != "Z"


@pytest.mark.parametrize("sig, code", [
    (signal.SIGINT, 130),
    # (SIGTERM takes Ctrl-C's path into the same stop; its exit code 143 is in the default suite in test_exit_codes.py)
    pytest.param(signal.SIGTERM, 143, marks=pytest.mark.extended)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_a_run_with_replay_shards_and_every_process_goes(tmp_path, sig, code):
    """`relayrl train` on a local Ray with shards: Ctrl-C ends it with 130, and SIGTERM to the learner
    (Kubernetes' stop) with 143 (ray.init's own SIGTERM handler, sys.exit, is replaced by the run's), the
    last checkpoint (and the shards' snapshots) written, no traceback from any process, and no process it
    started (Ray's included) left behind. (A SIGTERM to the whole group also reaches Ray's raylet, which
    exits on it: docs/usage.md.) (Run after the
    tests on the two-node cluster, it also shows that a Ray already running on the machine does not stop
    a run without --ray-address from starting its own.)"""
    import subprocess
    import sys

    from test_runtime import _descendants_of, _gone, _wait_for  # (same folder)

    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "relayrl", "train", "dqn", "--backend", "ray", "--workers", "2",
                             "--quiet", "--no-tensorboard", "--run-dir", str(run_dir), "--total-steps", "10000000",
                             "--stop-value", "1e9",  # (stopped by the signal only: a lucky one-episode eval of 500 cannot end it)
                             "--set", "dqn.replay_shards=2", "--set", "dqn.start_training=200", "--set",
                             "eval.freq=1000", "--set", "eval.episodes=1", "--set", "eval.num_envs=1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(run_dir / "checkpoints" / "last.json", seconds=120)
        started = _descendants_of(proc.pid)
        assert len(started) >= 6  # Ray's own processes, the shards, the node proxy and its workers
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does: the whole process group
        else:
            proc.send_signal(sig)  # what Kubernetes does: the container's first process
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, out[-1000:] + err[-2000:]
    assert _gone(started, seconds=20), "processes outlived the stop"
    assert (run_dir / "checkpoints" / "replay_shard0.safetensors").is_file()
    assert "Traceback" not in err
