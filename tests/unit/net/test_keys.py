import stat

import pytest
import zmq.auth

from relayrl.errors import ConfigError
from relayrl.net import keys


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_trainer_keys_go_to_their_own_folder_and_roles_are_read_back(tmp_path):
    keys.generate(tmp_path, ["trainer", "robot1"])  # "trainer" is a trainer by default
    server = tmp_path / "server"
    assert [p.name for p in (server / "trainers").iterdir()] == ["trainer.key"]
    assert [p.name for p in (server / "authorized").iterdir()] == ["robot1.key"]
    roles = keys.load_server(server).roles()
    by_name = {keys.load_client(tmp_path / n).public.decode(): n for n in ("trainer", "robot1")}
    assert {by_name[k]: role for k, role in roles.items()} == {"trainer": "trainer", "robot1": "worker"}


def test_generate_writes_the_documented_layout_with_private_secrets(tmp_path):
    written = keys.generate(tmp_path, ["robot1", "pc-2"])
    assert set(written) == {tmp_path / "server", tmp_path / "robot1", tmp_path / "pc-2"}
    server = tmp_path / "server"
    assert (server / "server.key_secret").is_file()
    assert sorted(p.name for p in (server / "authorized").iterdir()) == ["pc-2.key", "robot1.key"]
    for name in ("robot1", "pc-2"):
        client = tmp_path / name
        assert sorted(p.name for p in client.iterdir()) == sorted([f"{name}.key_secret", "server.key"])
        assert not (client / f"{name}.key").exists()
        assert _mode(client) == 0o700 and _mode(client / f"{name}.key_secret") == 0o600
        # the public half at the server is the client's key; the client holds the server's public key
        public, secret = zmq.auth.load_certificate(str(client / f"{name}.key_secret"))
        assert secret is not None
        assert zmq.auth.load_certificate(str(server / "authorized" / f"{name}.key"))[0] == public
        assert zmq.auth.load_certificate(str(client / "server.key"))[0] == \
            zmq.auth.load_certificate(str(server / "server.key_secret"))[0]
    assert _mode(server) == 0o700 and _mode(server / "server.key_secret") == 0o600
    assert not any(p.name.startswith("tmp") for p in tmp_path.rglob("*"))  # no temporary folders left behind

    loaded_server = keys.load_server(server)
    loaded_client = keys.load_client(tmp_path / "robot1")
    assert loaded_client.server_public == loaded_server.public
    assert loaded_server.authorized == server / "authorized"
    assert loaded_client.public != keys.load_client(tmp_path / "pc-2").public


def test_a_client_added_later_is_appended_and_the_server_keys_stay(tmp_path):
    keys.generate(tmp_path, ["a"])
    server_before = (tmp_path / "server" / "server.key_secret").read_bytes()
    a_before = (tmp_path / "a" / "a.key_secret").read_bytes()
    assert keys.generate(tmp_path, ["b"]) == [tmp_path / "b"]
    assert (tmp_path / "server" / "server.key_secret").read_bytes() == server_before
    assert (tmp_path / "a" / "a.key_secret").read_bytes() == a_before
    assert sorted(p.name for p in (tmp_path / "server" / "authorized").iterdir()) == ["a.key", "b.key"]
    assert keys.load_client(tmp_path / "b").server_public == keys.load_server(tmp_path / "server").public


def test_a_duplicate_client_name_is_refused_and_its_keys_kept(tmp_path):
    keys.generate(tmp_path, ["a"])
    before = (tmp_path / "a" / "a.key_secret").read_bytes()
    with pytest.raises(ConfigError, match="already holds keys for 'a'"):
        keys.generate(tmp_path, ["a"])
    assert (tmp_path / "a" / "a.key_secret").read_bytes() == before


@pytest.mark.parametrize("name", ["", "server", "a/b", "../evil", ".", "..", "a b", "a\\b"])
def test_invalid_client_names_are_refused_before_anything_is_written(tmp_path, name):
    with pytest.raises(ConfigError, match="client name"):
        keys.generate(tmp_path / "keys", ["ok", name])
    assert not (tmp_path / "keys").exists()
    assert list(tmp_path.iterdir()) == []


def test_loading_missing_keys_says_how_to_create_them(tmp_path):
    for load, folder in ((keys.load_server, tmp_path / "nowhere"), (keys.load_client, tmp_path / "nowhere"),
                         (keys.load_server, tmp_path), (keys.load_client, tmp_path)):
        with pytest.raises(ConfigError, match="relayrl keys generate"):
            load(folder)
    keys.generate(tmp_path, ["a"])
    with pytest.raises(ConfigError, match="relayrl keys generate"):
        keys.load_client(tmp_path / "server")  # the server's folder is not a client's
    (tmp_path / "a" / "server.key").unlink()
    with pytest.raises(ConfigError, match="relayrl keys generate"):
        keys.load_client(tmp_path / "a")
    (tmp_path / "server" / "authorized" / "a.key").unlink()
    with pytest.raises(ConfigError, match="relayrl keys generate DIR --clients NAME"):
        keys.load_server(tmp_path / "server")
    (tmp_path / "server" / "server.key_secret").unlink()
    with pytest.raises(ConfigError, match="relayrl keys generate"):
        keys.load_server(tmp_path / "server")


def test_a_corrupt_key_file_is_a_config_error(tmp_path):
    keys.generate(tmp_path, ["a"])
    (tmp_path / "a" / "a.key_secret").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="a.key_secret"):
        keys.load_client(tmp_path / "a")
