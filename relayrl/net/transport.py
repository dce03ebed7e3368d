"""ZeroMQ sockets for the relay (ROUTER) and its clients (DEALER), with CURVE when keys are given.

With keys, the relay runs ZeroMQ's authenticator (ZAP) over the folder of authorized client public
keys: a client whose key is not there fails the CURVE handshake and never gets a message through,
and everything on the wire is encrypted. ZeroMQ reconnects dropped TCP connections itself (with
its own exponential backoff between ``RECONNECT_IVL`` and ``RECONNECT_IVL_MAX``) and its ZMTP
heartbeats close connections whose peer has silently vanished.
"""

from __future__ import annotations

from typing import Any

import zmq

from relayrl.errors import ConfigError

HWM = 10_000  # messages per peer pipe; the relay's own queue is what bounds memory


def parse_address(address: str, bind: bool = False) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT``; a bind address may use port 0 (the system picks one)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not (0 if bind else 1) <= int(port) < 65536:
        raise ConfigError(f"address {address!r}: expected HOST:PORT, e.g. 127.0.0.1:5555 or relay.example.org:5555")
    return host.strip("[]"), int(port)


def _common(sock: zmq.Socket, max_bytes: int) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, max_bytes)  # libzmq drops a peer that sends a bigger frame
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.HEARTBEAT_IVL, 2000)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 10000)


class _Roles:
    """ZAP credentials: a key is accepted if it has a role (read once at start)."""

    def __init__(self, roles: dict[str, str]):
        self.roles = roles

    def callback(self, domain: str, key: bytes) -> bool:
        return key.decode("ascii", "replace") in self.roles


def server_socket(context: zmq.Context, bind: str, keys: str | None,
                  max_bytes: int) -> tuple[zmq.Socket, Any, dict[str, str] | None]:
    """A bound ROUTER socket, the authenticator thread and the role of each accepted public key
    (z85 text, what ZeroMQ reports as a message's User-Id) — the last two None without keys."""
    host, port = parse_address(bind, bind=True)
    server_keys = None
    if keys is not None:  # before the socket exists: bad keys raise ConfigError without leaking it
        from relayrl.net.keys import load_server

        server_keys = load_server(keys)
    sock = context.socket(zmq.ROUTER)
    _common(sock, max_bytes)
    auth, roles = None, None
    if server_keys is not None:
        from zmq.auth.thread import ThreadAuthenticator

        roles = server_keys.roles()
        auth = ThreadAuthenticator(context)
        auth.start()
        auth.configure_curve_callback(domain="*", credentials_provider=_Roles(roles))
        sock.curve_secretkey = server_keys.secret
        sock.curve_publickey = server_keys.public
        sock.curve_server = True
    host = "*" if host in ("0.0.0.0", "*") else host
    try:
        sock.bind(f"tcp://{'[' + host + ']' if ':' in host else host}:{port}")
    except zmq.ZMQError as exc:
        sock.close(linger=0)
        if auth is not None:
            auth.stop()
        raise ConfigError(f"cannot bind {bind}: {exc.strerror} (is another relay using port {port}? "
                          "pick another with --bind HOST:PORT)") from None
    return sock, auth, roles


def client_socket(context: zmq.Context, server: str, keys: str | None, max_bytes: int) -> zmq.Socket:
    """A DEALER connected to the relay (ephemeral local port: many clients per host need no setup)."""
    host, port = parse_address(server)
    sock = context.socket(zmq.DEALER)
    _common(sock, max_bytes)
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 5000)
    sock.setsockopt(zmq.IMMEDIATE, 1)  # no queueing for a relay that is not connected: sends fail, we keep them
    if keys is not None:
        from relayrl.net.keys import load_client

        client_keys = load_client(keys)
        sock.curve_secretkey = client_keys.secret
        sock.curve_publickey = client_keys.public
        sock.curve_serverkey = client_keys.server_public
    sock.connect(f"tcp://{'[' + host + ']' if ':' in host else host}:{port}")
    return sock
