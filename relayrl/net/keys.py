"""CURVE key pairs: ``relayrl keys generate DIR`` and the loaders the relay and its clients use.

``generate`` writes one folder per machine, each holding exactly what that machine needs:

    DIR/server/server.key_secret        the relay's key pair       -> relayrl serve --keys DIR/server
    DIR/server/authorized/NAME.key      public keys it accepts as workers
    DIR/server/trainers/NAME.key        public keys it accepts as trainers (only these may publish weights)
    DIR/NAME/NAME.key_secret            a client's key pair        -> relayrl worker --keys DIR/NAME
    DIR/NAME/server.key                 the relay's public key

Key files are ZeroMQ's certificate text format (read by ``zmq.auth.load_certificate``: parsed
text, never executed or unpickled). Secret files are created readable by their owner only.
Adding a client later: ``relayrl keys generate DIR --clients NAME`` adds its folder and its public
key to ``DIR/server/authorized`` (the relay reads that folder at start); ``--trainers NAME`` makes
the named clients trainers instead (their public keys go to ``DIR/server/trainers``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from relayrl.errors import ConfigError

SERVER = "server"


@dataclass(frozen=True)
class ServerKeys:
    public: bytes
    secret: bytes
    authorized: Path  # folder of the workers' public keys
    trainers: Path  # folder of the trainers' public keys

    def roles(self) -> dict[str, str]:
        """z85 public key -> "trainer" or "worker", for every key the relay accepts."""
        import zmq.auth

        out = {}
        for role, folder in (("worker", self.authorized), ("trainer", self.trainers)):
            for path in sorted(folder.glob("*.key")) if folder.is_dir() else []:
                try:
                    public, _ = zmq.auth.load_certificate(str(path))
                except (OSError, ValueError) as exc:
                    raise ConfigError(f"cannot read the key file {path}: {exc}") from None
                out[public.decode("ascii")] = role
        return out


@dataclass(frozen=True)
class ClientKeys:
    public: bytes
    secret: bytes
    server_public: bytes


def generate(folder: str | Path, clients: list[str], trainers: tuple[str, ...] = ("trainer",)) -> list[Path]:
    """Create the server's keys (unless present) and a key pair per client name; the clients named
    in ``trainers`` may act as trainers, the others as workers. Returns the folders written."""
    folder = Path(folder)
    for name in clients:
        if (not name or not all(c.isalnum() or c in "-_." for c in name) or name == SERVER
                or name in (".", "..")):  # "." / "..": DIR itself or its parent, not a folder of their own
            raise ConfigError(f"client name {name!r}: use letters, digits, '-', '_' or '.', and not {SERVER!r}, '.' or '..'")
    server_dir = folder / SERVER
    (server_dir / "authorized").mkdir(parents=True, exist_ok=True)
    (server_dir / "trainers").mkdir(parents=True, exist_ok=True)
    os.chmod(server_dir, 0o700)
    written = []
    if not (server_dir / f"{SERVER}.key_secret").is_file():
        _create(server_dir, SERVER)
        written.append(server_dir)
    for name in clients:
        client_dir = folder / name
        if (client_dir / f"{name}.key_secret").is_file():
            raise ConfigError(f"{client_dir} already holds keys for {name!r}: pick another name or delete it")
        client_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(client_dir, 0o700)
        _create(client_dir, name)
        shutil.copy(server_dir / f"{SERVER}.key", client_dir / f"{SERVER}.key")
        role_dir = "trainers" if name in trainers else "authorized"
        shutil.copy(client_dir / f"{name}.key", server_dir / role_dir / f"{name}.key")
        os.remove(client_dir / f"{name}.key")  # the pair is in .key_secret; the public half lives at the server
        written.append(client_dir)
    return written


def _create(folder: Path, name: str) -> None:
    import zmq.auth

    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        public, secret = zmq.auth.create_certificates(tmp, name)
        os.chmod(secret, 0o600)
        shutil.move(public, folder / f"{name}.key")
        shutil.move(secret, folder / f"{name}.key_secret")


def _load(path: Path) -> tuple[bytes, bytes | None]:
    import zmq.auth

    try:
        return zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the key file {path}: {exc}") from None


def load_server(folder: str | Path) -> ServerKeys:
    folder = Path(folder)
    secret_file, authorized, trainers = folder / f"{SERVER}.key_secret", folder / "authorized", folder / "trainers"
    if not secret_file.is_file():
        raise ConfigError(f"--keys {folder}: no {SERVER}.key_secret there; create keys with "
                          f"`relayrl keys generate DIR` and pass DIR/{SERVER}")
    if not any(d.is_dir() and any(d.glob("*.key")) for d in (authorized, trainers)):
        raise ConfigError(f"--keys {folder}: no client public keys in {authorized} or {trainers}; "
                          "`relayrl keys generate DIR --clients NAME` adds one")
    public, secret = _load(secret_file)
    if secret is None:
        raise ConfigError(f"{secret_file} holds no secret key")
    return ServerKeys(public, secret, authorized, trainers)


def load_client(folder: str | Path) -> ClientKeys:
    folder = Path(folder)
    secrets = [p for p in folder.glob("*.key_secret") if p.stem != SERVER]
    server_file = folder / f"{SERVER}.key"
    if len(secrets) != 1 or not server_file.is_file():
        raise ConfigError(f"--keys {folder}: expected one NAME.key_secret and {SERVER}.key there (found "
                          f"{sorted(p.name for p in folder.glob('*.key*'))}); pass the folder "
                          "`relayrl keys generate DIR --clients NAME` wrote for this machine, DIR/NAME")
    public, secret = _load(secrets[0])
    server_public, _ = _load(server_file)
    if secret is None:
        raise ConfigError(f"{secrets[0]} holds no secret key")
    return ClientKeys(public, secret, server_public)
