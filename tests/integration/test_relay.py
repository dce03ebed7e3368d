"""Relay, trainer and workers as real processes on real sockets: delivery across a relay restart,
SAC learning through the relay, and two network namespaces acting as two hosts."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from relayrl.config import build_config
from relayrl.io.metrics import read_metrics
from relayrl.net.backend import relay_pool

from relay_procs import SLOW_PENDULUM, finish, free_port, relayrl, stop, tails, wait_listening  # same folder


def worker_totals(output: str) -> dict[str, int]:
    match = re.search(r"worker done: (\d+) env steps, (\d+) chunks sent, (\d+) acknowledged, (\d+) refused by the "
                      r"trainer, (\d+) dropped from the backlog, (\d+) dropped by the relay, (\d+) reconnects", output)
    assert match, output[-2000:]
    keys = ("env_steps", "sent", "acked", "refused", "backlog_drops", "relay_drops", "reconnects")
    return dict(zip(keys, map(int, match.groups())))


def test_nothing_lost_or_duplicated_across_a_relay_restart(tmp_path):
    """Two worker processes stream a known number of steps; the relay process is killed (SIGKILL) and
    restarted on the same port mid-stream; the trainer must end with every chunk of every worker
    exactly once (contiguous sequence numbers) and exactly the env steps the workers made."""
    port, steps = free_port(), 2000
    address = f"127.0.0.1:{port}"
    relay = relayrl("serve", "--bind", address, "--heartbeat", "0.1")
    net = ["net.heartbeat_s=0.2", "net.timeout_s=1.0", "net.backlog=2048"]  # > the 500 chunks a worker makes
    workers = []
    config = build_config("sac", None, [*net, "net.connect_timeout_s=60"],
                          {"env.id": SLOW_PENDULUM, "net.server": address})
    source = None
    try:
        wait_listening(relay)
        source = relay_pool(config, *_spaces())
        source.reset(0)
        source.publish(_sac_weights(config), 0)  # (workers collect only with the weights of the trainer's run)
        for k in range(2):
            sets = [f"--set={s}" for s in [*net, "env.num_envs=1", "sac.steps_per_iteration=4",
                                             "env.kwargs={sleep_us: 1000, busy_us: 0}",
                                             f"net.weights_dir={tmp_path / f'w{k}'}"]]
            workers.append(relayrl("worker", "--server", address, "--env", SLOW_PENDULUM, "--name", f"w{k}",
                                   "--max-steps", str(steps), *sets))
        received, restarted = 0, False
        deadline = time.monotonic() + 120
        while received < 2 * steps and time.monotonic() < deadline:
            batch, got = source.pull()
            received += got
            assert got == (len(batch["reward"]) if batch else 0)  # one transition per env step
            if not restarted and received > steps // 2:
                os.killpg(relay.pid, signal.SIGKILL)  # mid-stream, chunks queued and in flight are lost
                relay.wait()
                time.sleep(1.5)  # workers hold what they collected in their backlogs (up to net.window chunks)
                relay = relayrl("serve", "--bind", address, "--heartbeat", "0.1")
                wait_listening(relay)
                restarted = True
        assert restarted
        outputs = [finish(w, timeout=60) for w in workers]
        assert received == 2 * steps, f"trainer got {received} env steps of {2 * steps}"
        for k, output in enumerate(outputs):
            totals = worker_totals(output)
            assert totals["env_steps"] == steps
            assert totals["backlog_drops"] == 0 and totals["relay_drops"] == 0 and totals["refused"] == 0
            assert totals["reconnects"] >= 1, output[-1500:]
            seen = source.backend.seen.get(f"w{k}", source.backend.seen.newest(f"w{k}"))
            assert seen.floor == totals["acked"] and len(seen) == 0  # seqs 0..n-1, each once
        assert source.backend.counts["refused"] == 0
    finally:
        if source is not None:
            source.close()
        stop(relay, *workers)


def _sac_weights(config):
    from relayrl.algos import get_algo

    return get_algo("sac").build_policy(config.algo_config, *_spaces()).get_weights()


def _spaces():
    from relayrl.envs.registry import make

    env = make("Pendulum-v1")
    spaces = (env.observation_space, env.action_space)
    env.close()
    return spaces


def _env_steps_logged(run_dir) -> int:
    """The trainer's progress: the largest env_steps in its metrics.jsonl so far (0 before any)."""
    path = run_dir / "metrics.jsonl"
    steps = 0
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            steps = max(steps, int(json.loads(line)["env_steps"]))
        except (ValueError, KeyError):  # a line still being written
            pass
    return steps


KILL_AT_STEPS = 4000  # past the warm-up (start_training 1000) and learning, far from solved


@pytest.mark.solve
def test_sac_learns_pendulum_through_the_relay_with_a_restart(tmp_path):
    """relayrl serve + relayrl train sac --server + two relayrl worker processes, all over CURVE;
    the relay is killed while training is under way and restarted; the trainer and both workers
    reconnect to the new relay, which carries their chunks, and the trainer still reaches -200."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    keys = tmp_path / "keys"
    subprocess.run([sys.executable, "-m", "relayrl", "keys", "generate", str(keys), "--clients",
                    "trainer,w0,w1"], check=True, capture_output=True)
    relay = relayrl("serve", "--bind", address, "--keys", str(keys / "server"))
    net = ["--set=net.heartbeat_s=0.2", "--set=net.timeout_s=2"]
    trainer = workers = None
    try:
        wait_listening(relay)
        trainer = relayrl("train", "sac", "--env", "Pendulum-v1", "--server", address, "--keys", str(keys / "trainer"),
                          "--run-dir", str(tmp_path / "run"), "--stop-value", "-200", "--total-steps", "30000",
                          "--quiet", "--no-tensorboard", "--set=sac.update_model_interval=20", *net)
        workers = [relayrl("worker", "--server", address, "--env", "Pendulum-v1", "--keys", str(keys / f"w{k}"),
                           "--name", f"w{k}", f"--set=net.weights_dir={tmp_path / f'w{k}'}",
                           "--set=net.max_steps_per_update=200", *net) for k in range(2)]
        run, deadline = tmp_path / "run", time.monotonic() + 300  # generous: a loaded machine starts slowly
        while _env_steps_logged(run) < KILL_AT_STEPS and time.monotonic() < deadline and trainer.poll() is None:
            time.sleep(0.5)
        at_kill = _env_steps_logged(run)
        assert at_kill >= KILL_AT_STEPS and trainer.poll() is None, tails(trainer, relay, *workers)
        assert not (run / "summary.json").exists()  # training is in progress, not over
        os.killpg(relay.pid, signal.SIGKILL)
        relay.wait()
        after = tmp_path / "relay-after.jsonl"
        relay = relayrl("serve", "--bind", address, "--keys", str(keys / "server"), "--metrics", str(after),
                        "--metrics-every", "1")
        wait_listening(relay)
        finish(trainer, timeout=400)
        assert trainer.returncode == 0, tails(trainer, relay, *workers)
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["solved"] and summary["backend"] == "relay", summary
        rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
        assert max(r.get("net/workers_seen", 0) for r in rows) == 2
        assert all(r.get("net/refused", 0) == 0 for r in rows)
        assert (tmp_path / "w0" / "latest.safetensors").is_file()  # workers kept the weights they got
        # the restarted relay saw the trainer and both workers again and carried chunks between them
        relay_rows = [json.loads(line) for line in after.read_text().splitlines()]
        assert max(r["workers"] for r in relay_rows) == 2 and max(r["trainer"] for r in relay_rows) == 1, relay_rows
        assert max(r["chunks_in"] for r in relay_rows) > 0 and max(r["chunks_out"] for r in relay_rows) > 0
        assert summary["env_steps"] > at_kill
    finally:
        stop(relay, trainer, *(workers or []))


def _netns_available() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = subprocess.run(["ip", "netns", "add", "relayrl-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns add failed here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", "relayrl-probe"], capture_output=True)
    return None


@pytest.fixture
def two_hosts():
    """Namespaces relayrl-a (10.77.0.1) and relayrl-b (10.77.0.2) joined by a veth pair."""
    reason = _netns_available()
    if reason:
        pytest.skip(reason)
    a, b = f"rrl-a{os.getpid()}", f"rrl-b{os.getpid()}"
    cmds = [f"ip netns add {a}", f"ip netns add {b}",
            f"ip link add va{os.getpid() % 10000} type veth peer name vb{os.getpid() % 10000}",
            f"ip link set va{os.getpid() % 10000} netns {a}", f"ip link set vb{os.getpid() % 10000} netns {b}",
            f"ip -n {a} addr add 10.77.0.1/24 dev va{os.getpid() % 10000}",
            f"ip -n {b} addr add 10.77.0.2/24 dev vb{os.getpid() % 10000}",
            f"ip -n {a} link set va{os.getpid() % 10000} up", f"ip -n {b} link set vb{os.getpid() % 10000} up",
            f"ip -n {a} link set lo up", f"ip -n {b} link set lo up"]
    try:
        for cmd in cmds:
            subprocess.run(cmd.split(), check=True, capture_output=True)
        yield a, b
    finally:
        subprocess.run(["ip", "netns", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", b], capture_output=True)


def test_two_hosts_in_network_namespaces(two_hosts, tmp_path):
    """The relay on host A binds its non-loopback address (refused without keys, then with CURVE
    keys); a trainer and a worker on host B train through it."""
    host_a, host_b = two_hosts
    address = "10.77.0.1:5555"
    refused = subprocess.run(["ip", "netns", "exec", host_a, sys.executable, "-m", "relayrl", "serve", "--bind",
                              address], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--keys" in refused.stderr and "--insecure" in refused.stderr
    keys = tmp_path / "keys"
    subprocess.run([sys.executable, "-m", "relayrl", "keys", "generate", str(keys), "--clients", "trainer,w0"],
                   check=True, capture_output=True)
    relay = relayrl("serve", "--bind", address, "--keys", str(keys / "server"), netns=host_a)
    trainer = worker = None
    try:
        wait_listening(relay)
        trainer = relayrl("train", "sac", "--env", "Pendulum-v1", "--server", address, "--keys", str(keys / "trainer"),
                          "--run-dir", str(tmp_path / "run"), "--total-steps", "1500", "--quiet", "--no-tensorboard",
                          "--set=eval.freq=0", "--set=eval.episodes=1", "--set=sac.start_training=500",
                          netns=host_b)
        worker = relayrl("worker", "--server", address, "--env", "Pendulum-v1", "--keys", str(keys / "w0"),
                         f"--set=net.weights_dir={tmp_path / 'w0'}", "--set=net.max_steps_per_update=400",
                         netns=host_b)
        finish(trainer, timeout=300)
        assert trainer.returncode == 0, tails(trainer, relay, worker)
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["env_steps"] >= 1500 and summary["updates"] > 0
    finally:
        stop(relay, trainer, *([worker] if worker else []))


def test_a_client_without_the_relays_keys_gets_nothing(tmp_path):
    """A worker holding keys the relay never authorized waits and never connects (and the trainer
    with good keys is unaffected)."""
    good, other = tmp_path / "good", tmp_path / "other"
    for folder in (good, other):
        subprocess.run([sys.executable, "-m", "relayrl", "keys", "generate", str(folder), "--clients", "w0"],
                       check=True, capture_output=True)
    from relayrl.net.client import RelayClient
    from relayrl.testing.relay import running_relay

    with running_relay(keys=str(good / "server")) as relay:
        stranger = RelayClient(relay.address, "worker", keys=str(other / "w0"), heartbeat_s=0.1, timeout_s=1)
        friend = RelayClient(relay.address, "worker", keys=str(good / "w0"), heartbeat_s=0.1, timeout_s=1)
        try:
            assert friend.wait_connected(10)
            assert not stranger.wait_connected(3)
            assert stranger.stats["bytes_in"] == 0
            assert relay.counters["chunks_in"] == 0 and len(relay.peers) == 1
        finally:
            stranger.close(timeout=0)
            friend.close(timeout=0)


def test_a_killed_trainer_resumes_and_keeps_the_samples_queued_meanwhile(tmp_path):
    """SIGKILL the trainer: the relay keeps queueing worker chunks; `--resume` with the same
    --server takes the trainer slot (after the relay notices the old one is gone) and finishes."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    relay = relayrl("serve", "--bind", address, "--peer-timeout", "2")
    run_dir = tmp_path / "run"
    common = ["--server", address, "--quiet", "--no-tensorboard", "--set=net.heartbeat_s=0.2",
              "--set=sac.start_training=200", "--set=eval.freq=400", "--set=eval.episodes=1",
              "--set=eval.num_envs=1", "--set=sac.update_model_interval=20", "--set=sac.hidden_sizes=[32,32]"]
    trainer = worker = None
    try:
        wait_listening(relay)
        trainer = relayrl("train", "sac", "--env", "Pendulum-v1", "--run-dir", str(run_dir),
                          "--total-steps", "100000", *common)
        worker = relayrl("worker", "--server", address, "--env", "Pendulum-v1", "--set=net.heartbeat_s=0.2",
                         f"--set=net.weights_dir={tmp_path / 'w0'}", "--set=net.max_steps_per_update=100",
                         "--set=sac.start_training=200", "--set=sac.hidden_sizes=[32,32]")
        deadline = time.monotonic() + 300  # generous: a loaded 2-core machine starts three Pythons slowly
        while not (run_dir / "checkpoints" / "last.json").is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (run_dir / "checkpoints" / "last.json").is_file(), tails(trainer, worker, relay)
        os.killpg(trainer.pid, signal.SIGKILL)
        trainer.wait()
        resumed = subprocess.run([sys.executable, "-m", "relayrl", "train", "sac", "--resume", str(run_dir),
                                  "--total-steps", "1600", *common], capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["env_steps"] >= 1600 and summary["backend"] == "relay"
        assert worker.poll() is None  # the worker rode through the trainer's restart
    finally:
        stop(relay, *[p for p in (trainer, worker) if p is not None])


REMOTE = {  # algorithm: (env, the options trainer and worker share, the trainer's own)
    "dqn": ("CartPole-v1", ["dqn.start_training=300"], ["dqn.update_model_interval=20"]),
    "td3": ("Pendulum-v1", ["td3.start_training=300", "td3.hidden_sizes=[16,16]"], ["td3.batch_size=64"]),
    "pqn": ("CartPole-v1", ["env.num_envs=4", "pqn.num_steps=16", "pqn.hidden_sizes=[16]"], []),
}


@pytest.mark.parametrize("algo", list(REMOTE))
def test_an_algorithm_trains_from_a_remote_worker(tmp_path, algo):
    """A trainer (this process) and a worker process through the relay: DQN's discrete actions, TD3's continuous
    ones (issue 25's off-policy algorithms send what SAC's workers send), PQN's rollouts (on-policy: the chunk checks
    take a rollout of max_a Q values as they take PPO's)."""
    from relayrl import launch
    from relayrl.testing.relay import running_relay

    env, shared, own = REMOTE[algo]
    with running_relay() as r:
        worker = relayrl("worker", "--server", r.address, "--env", env, "--algo", algo,
                         "--set=net.heartbeat_s=0.2", *[f"--set={s}" for s in shared],
                         "--set=net.max_steps_per_update=200", f"--set=net.weights_dir={tmp_path / 'w'}")
        try:
            config = build_config(algo, None, shared + own + ["eval.freq=0", "eval.episodes=2", "eval.num_envs=2",
                                                              "net.heartbeat_s=0.2"],
                                  {"env.id": env, "net.server": r.address, "total_steps": 1500})
            summary = launch.run(config, run_dir=tmp_path / "run", tensorboard=False)
            assert summary["backend"] == "relay" and summary["env_steps"] >= 1500 and summary["updates"] > 0
            assert (tmp_path / "w" / "latest.safetensors").is_file()
            rows = [r for r in read_metrics(tmp_path / "run") if "net/refused" in r]
            assert rows and rows[-1]["net/refused"] == 0  # every chunk passed the trainer's checks
        finally:
            stop(worker)
