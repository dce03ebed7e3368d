"""relayrl.remote: the relay and a remote worker as Python objects (their loops are net/relay.py's and
net/remote_worker.py's, tested in tests/unit/net and tests/integration/test_relay.py)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from relayrl.errors import ConfigError, RelayRLError
from relayrl.remote import Relay, Worker

FAST = {"sac": {"hidden_sizes": [8]}, "net": {"connect_timeout_s": 1.0}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_worker_with_no_relay_at_its_address_stops_after_the_connect_timeout_naming_the_address():
    address = f"127.0.0.1:{free_port()}"
    worker = Worker("sac", "Pendulum-v1", FAST, server=address)
    started = time.monotonic()
    with pytest.raises(RelayRLError, match=rf"no answer from the relay at {address} within 1 s: is the relay "
                                           rf"running there \(Relay\(bind=\"{address}\"\)"):
        worker.run(log=None)
    assert time.monotonic() - started < 30  # (it stops: by itself, after its 1 s timeout)
    assert worker.worker.client.closed  # and let go of its socket and envs


def test_a_worker_needs_a_valid_relay_address():
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        Worker("sac", "Pendulum-v1", FAST, server="relay.example.org")
    with pytest.raises(ConfigError, match="needs the relay's address: server="):
        Worker("sac", "Pendulum-v1", FAST)


def test_the_relay_refuses_what_the_command_line_refuses_and_unknown_options():
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        Relay(bind="localhost")
    with pytest.raises(ConfigError, match="reachable from other machines"):
        Relay(bind="0.0.0.0:0")
    with pytest.raises(ConfigError, match="--max-queue 0"):
        Relay(bind="127.0.0.1:0", max_queue=0)
    with pytest.raises(ConfigError, match=r"Relay\(max_queues=...\): no such relay option; the options are .*"
                                          r"max_queue"):
        Relay(bind="127.0.0.1:0", max_queues=8)


def test_relay_serves_until_its_stop_event_and_a_worker_connects_to_its_address():
    relay = Relay(bind="127.0.0.1:0", heartbeat_s=0.1)
    assert relay.address.startswith("127.0.0.1:") and not relay.address.endswith(":0")
    stop = threading.Event()
    thread = threading.Thread(target=relay.serve, args=(stop, None), daemon=True)
    thread.start()
    try:
        worker = Worker("sac", "Pendulum-v1", FAST, server=relay.address)
        result: dict = {}
        worker_stop = threading.Event()
        runner = threading.Thread(target=lambda: result.update(worker.run(stop=worker_stop, log=None)), daemon=True)
        runner.start()
        assert worker.worker.client.wait_connected(10)  # the connect timeout (1 s) does not apply once connected
        time.sleep(1.5)
        assert runner.is_alive()  # no trainer: it waits for one, collecting nothing
        worker_stop.set()
        runner.join(10)
        assert not runner.is_alive() and result["env_steps"] == 0 and result["version"] == 0
        with pytest.raises(RelayRLError, match="has run and closed its connection and envs: make a new Worker"):
            worker.run(log=None)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
