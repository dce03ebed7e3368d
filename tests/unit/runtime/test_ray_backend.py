"""RayBackend's bookkeeping against a stand-in for Ray (no cluster): the real Ray backend runs in
tests/integration/test_runtime_ray.py."""

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("ray")

from relayrl.config import build_config  # noqa: E402
from relayrl.runtime.backends import ray as ray_backend  # noqa: E402
from relayrl.runtime.backends.ray import RayBackend  # noqa: E402
from relayrl.runtime.messages import Heartbeat, LoadParams  # noqa: E402


class ActorDied(Exception):
    pass


class _Ref:
    def __init__(self, result):
        self.result = result  # None: not ready yet


class _Method:
    def __init__(self, fn):
        self.remote = fn


class FakeProxy:
    """A node proxy whose long-poll replies are scripted: (chunks, heartbeat, failures), or an
    exception for a proxy that died."""

    def __init__(self, replies):
        self.replies, self.calls = list(replies), []
        self.publish = _Method(lambda *args: self.calls.append(("publish", args)))
        self.request = _Method(lambda *args: self.calls.append(("request", args)))
        self.receive = _Method(lambda: _Ref(self.replies.pop(0) if self.replies else None))


def reply(restarts, failures, depth=0):
    counters = {"restarts": restarts, "queue_depth": depth, "chunks": 0, "inserted_chunks": 0, "insert_failures": 0}
    return [], Heartbeat("proxy", 0, 0.0, counters), failures


def _get(ref):
    if isinstance(ref.result, Exception):
        raise ref.result
    return ref.result


@pytest.fixture
def fake_ray(monkeypatch):
    fake = SimpleNamespace(
        is_initialized=lambda: True, remote=lambda **options: (lambda cls: cls),
        nodes=lambda: [{"NodeID": "node-a", "Alive": True}, {"NodeID": "node-b", "Alive": True}],
        put=lambda value: _Ref(value), get=_get, kill=lambda actor: None,
        wait=lambda refs, num_returns, timeout: ([r for r in refs if r.result is not None][:num_returns],
                                                 [r for r in refs if r.result is None]),
        exceptions=SimpleNamespace(RayActorError=ActorDied, RayTaskError=type("TaskError", (Exception,), {})))
    monkeypatch.setattr(ray_backend, "ray", fake)
    return fake


def test_worker_restarts_stay_counted_when_their_node_proxy_is_replaced(fake_ray, monkeypatch):
    scripts = [[reply(2, ["worker 1: exit code -9"]), ActorDied("proxy 0 died")],  # proxy 0: 2 restarts, dies
               [reply(0, [])] * 4,  # proxy 1
               [reply(0, []), reply(1, ["worker 0: exit code -9"])]]  # proxy 0's replacement
    spawned = []
    monkeypatch.setattr(RayBackend, "_spawn", lambda self, k, restart=0: spawned.append(k) or
                        FakeProxy(scripts[len(spawned) - 1]))
    config = build_config("ppo", None, ["backend=ray", "workers=2", "env.num_envs=1"])
    backend = RayBackend(config, 2)
    backend.publish(LoadParams(0, {"w": np.zeros(1)}), env_steps=0)
    seen = []
    for _ in range(4):
        backend.receive(timeout=0.0)
        seen.append(backend.restarts)
    assert spawned == [0, 1, 0] and backend._proxy_restarts == 1
    # 2 worker restarts; proxy 0 replaced (+1); its replacement reports 0, then 1 restart of its own
    assert seen == [2, 3, 3, 4]
    assert backend.failures[:2] == ["worker 1: exit code -9", "node proxy 0 (node-a): proxy 0 died"]
    assert ("publish", (0, backend._weights[0], {"w": "array"}, 0)) in backend._proxies[0].calls


def test_off_policy_versions_reach_the_nodes_at_most_every_publish_interval(fake_ray, monkeypatch):
    puts = []
    fake_ray.put = lambda value: puts.append(value) or _Ref(value)
    proxies = []
    monkeypatch.setattr(RayBackend, "_spawn", lambda self, k, restart=0: proxies.append(FakeProxy([])) or proxies[-1])
    clock = [100.0]
    monkeypatch.setattr(ray_backend.time, "monotonic", lambda: clock[0])
    backend = RayBackend(build_config("dqn", None, ["backend=ray", "workers=2"]), 2)
    for version in range(5):  # five updates within one interval: the first goes, the rest wait
        backend.publish(LoadParams(version, {"w": np.full(1, version)}), env_steps=0)
    assert [int(p["w"][0]) for p in puts] == [0]
    clock[0] += 2 * ray_backend.PUBLISH_MIN_S
    backend.receive(timeout=0.0)  # the newest pending version goes once the interval has passed
    assert [int(p["w"][0]) for p in puts] == [0, 4]
    assert [c[1][0] for c in proxies[0].calls if c[0] == "publish"] == [0, 4]
    backend.receive(timeout=0.0)
    assert len(puts) == 2  # nothing pending: nothing sent


def test_on_policy_versions_are_never_held_back(fake_ray, monkeypatch):
    puts = []
    fake_ray.put = lambda value: puts.append(value) or _Ref(value)
    monkeypatch.setattr(RayBackend, "_spawn", lambda self, k, restart=0: FakeProxy([]))
    backend = RayBackend(build_config("ppo", None, ["backend=ray", "workers=2"]), 2)
    for version in range(3):
        backend.publish(LoadParams(version, {"w": np.zeros(1)}), env_steps=0)
    assert len(puts) == 3  # the workers wait for exactly this version
