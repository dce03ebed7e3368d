"""relayrl.io.checkpoint: safetensors + JSON checkpoints, atomic, pickle-free, clear errors."""

from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pytest
import torch

from relayrl.errors import CheckpointError
from relayrl.io.checkpoint import FORMAT_VERSION, load_checkpoint, resolve_checkpoint, save_checkpoint


def nested_state() -> dict:
    gen = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    return {
        "model": {
            "fc.weight": torch.randn(3, 4, generator=gen),
            "fc.bias": torch.randn(3, generator=gen, dtype=torch.float64),
            "steps": torch.tensor(7, dtype=torch.int64),  # 0-d tensor
            "half": torch.randn(5, generator=gen).to(torch.bfloat16),
            "mask": torch.tensor([True, False, True]),
        },
        "optim": {  # int keys, as in torch optimizer state_dicts
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2, 2)}, 1: {"step": torch.tensor(4.0)}},
            "param_groups": [{"lr": 3e-4, "eps": 1e-8, "params": [0, 1], "foreach": None, "amsgrad": False}],
        },
        "normalizer": {
            "mean": rng.normal(size=(4,)).astype(np.float64),
            "var": rng.random((4,), dtype=np.float32),
            "count": np.array(12.5),  # 0-d array stays 0-d
            "ids": np.arange(6, dtype=np.int32).reshape(2, 3),
            "flags": np.array([True, False]),
            "bytes": np.arange(4, dtype=np.uint8),
            "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        },
        "counters": {"env_steps": 123456789012, "updates": 0, "ratio": 0.1 + 0.2, "neg": -1.5e-300},
        "nothing": None,
        "name": "ppo",
        "flag": True,
        "history": [1, 2.5, None, "x", [3, {"deep": np.float32(1.5)}], torch.arange(3)],
        "empty": {},
        "empty_list": [],
    }


def assert_same(expected, actual, where="state"):
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), where
        assert actual.dtype == expected.dtype, where
        assert actual.shape == expected.shape, where
        assert torch.equal(actual, expected), where
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), where
        assert actual.dtype == expected.dtype, where
        assert actual.shape == expected.shape, where
        assert np.array_equal(actual, expected), where
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), where
        assert list(actual.keys()) == list(expected.keys()), where  # int keys stay int, order kept
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, list) and len(actual) == len(expected), where
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, f"{where}[{i}]")
    elif isinstance(expected, (np.floating, np.integer)):
        assert actual == expected.item() and type(actual) is type(expected.item()), where
    else:
        assert type(actual) is type(expected), where
        assert actual == expected, where


# ------------------------------------------------------------------------------------------- round trips


def test_nested_state_round_trip_is_bit_identical(tmp_path):
    state = nested_state()
    path = save_checkpoint(tmp_path / "ckpt", state, {"algo": "ppo", "env": "CartPole-v1"})
    loaded = load_checkpoint(path)
    assert loaded.path == path
    assert_same(state, loaded.state)
    # int keys come back as ints, not strings
    assert set(loaded.state["optim"]["state"]) == {0, 1}
    assert loaded.state["normalizer"]["count"].ndim == 0
    assert loaded.meta["algo"] == "ppo" and loaded.meta["env"] == "CartPole-v1"
    assert loaded.meta["format"] == FORMAT_VERSION
    assert "state" not in loaded.meta


def test_saved_tensors_are_snapshots_not_views(tmp_path):
    tensor, array = torch.zeros(3), np.zeros(3)
    path = save_checkpoint(tmp_path / "snap", {"t": tensor, "a": array}, {})
    tensor += 1
    array += 1
    loaded = load_checkpoint(path).state
    assert torch.equal(loaded["t"], torch.zeros(3))
    assert np.array_equal(loaded["a"], np.zeros(3))


def test_float_values_in_tree_round_trip_exactly(tmp_path):
    values = [0.1, 1 / 3, 2.0**-1074, 1.7976931348623157e308, -0.0, 12345678901234567890]
    loaded = load_checkpoint(save_checkpoint(tmp_path / "floats", {"v": values}, {})).state
    assert loaded["v"] == values
    assert all(type(a) is type(b) for a, b in zip(loaded["v"], values))
    assert str(loaded["v"][4]) == "-0.0"


def test_adam_state_dict_round_trips_and_resumes_identically(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(16, 4), torch.randn(16, 2)

    def step(m, o):
        o.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        o.step()

    for _ in range(3):
        step(model, optim)
    saved = optim.state_dict()
    path = save_checkpoint(tmp_path / "adam", {"model": model.state_dict(), "optim": saved}, {})
    loaded = load_checkpoint(path).state

    assert set(loaded["optim"]["state"]) == set(saved["state"])  # int parameter ids
    for pid, pstate in saved["state"].items():
        for key, value in pstate.items():
            assert torch.equal(loaded["optim"]["state"][pid][key], value)
            assert loaded["optim"]["state"][pid][key].dtype == value.dtype
    assert loaded["optim"]["param_groups"][0]["params"] == saved["param_groups"][0]["params"]
    assert loaded["optim"]["param_groups"][0]["lr"] == saved["param_groups"][0]["lr"]

    fresh_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    fresh_model.load_state_dict(loaded["model"])
    fresh_optim = torch.optim.Adam(fresh_model.parameters(), lr=123.0)
    fresh_optim.load_state_dict(loaded["optim"])
    assert fresh_optim.param_groups[0]["lr"] == 1e-2
    # continuing training from the checkpoint matches continuing the original exactly
    for _ in range(2):
        step(model, optim)
        step(fresh_model, fresh_optim)
    for a, b in zip(model.parameters(), fresh_model.parameters()):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------------------------- file layout


def test_files_are_safetensors_plus_json_sidecar(tmp_path):
    path = save_checkpoint(tmp_path / "run" / "checkpoints" / "best", {"w": torch.ones(2), "n": 3},
                           {"algo": "ppo", "env": "CartPole-v1"})
    assert path == tmp_path / "run" / "checkpoints" / "best.safetensors"
    assert sorted(p.name for p in path.parent.iterdir()) == ["best.json", "best.safetensors"]

    data = path.read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    assert header["w"]["dtype"] == "F32" and header["w"]["shape"] == [2]
    meta_in_header = json.loads(header["__metadata__"]["relayrl"])

    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar == meta_in_header
    assert sidecar["algo"] == "ppo" and sidecar["format"] == FORMAT_VERSION
    assert sidecar["state"] == {"w": {"__tensor__": "w"}, "n": 3}


def test_json_suffix_or_bare_name_resolves_to_the_safetensors_file(tmp_path):
    path = save_checkpoint(tmp_path / "last.json", {"x": 1}, {})
    assert path.suffix == ".safetensors"
    assert load_checkpoint(tmp_path / "last.json").state == {"x": 1}
    assert load_checkpoint(tmp_path / "last").state == {"x": 1}


def test_no_pickle_in_file(tmp_path):
    path = save_checkpoint(tmp_path / "ckpt", nested_state(), {"algo": "ppo"})
    data = path.read_bytes()
    # pickle protocol 2+ starts with PROTO (0x80) and the protocol number; torch.save zips start with PK
    assert not (data[0] == 0x80 and 2 <= data[1] <= 5)
    assert not data.startswith(b"PK")
    (header_len,) = struct.unpack("<Q", data[:8])
    assert data[8:9] == b"{"
    json.loads(data[8:8 + header_len])  # a JSON header, as safetensors requires


def test_loading_uses_no_pickle(tmp_path, monkeypatch):
    state = nested_state()
    path = save_checkpoint(tmp_path / "ckpt", state, {"algo": "ppo"})

    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used while loading a checkpoint")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    loaded = load_checkpoint(path)
    assert_same(state, loaded.state)


# ------------------------------------------------------------------------------------------- atomicity


def test_no_temp_files_left_after_saves(tmp_path):
    for i in range(3):
        save_checkpoint(tmp_path / "last", {"i": i, "t": torch.full((2,), float(i))}, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.json", "last.safetensors"]
    assert load_checkpoint(tmp_path / "last.safetensors").state["i"] == 2


def test_failed_save_keeps_existing_checkpoint_unchanged(tmp_path):
    path = save_checkpoint(tmp_path / "best", {"w": torch.arange(4.0), "n": 1}, {"algo": "ppo"})
    before = path.read_bytes()
    sidecar_before = path.with_suffix(".json").read_bytes()

    with pytest.raises(TypeError, match="function"):
        save_checkpoint(tmp_path / "best", {"w": torch.zeros(4), "fn": lambda: 0}, {"algo": "ppo"})

    assert path.read_bytes() == before
    assert path.with_suffix(".json").read_bytes() == sidecar_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.json", "best.safetensors"]
    assert torch.equal(load_checkpoint(path).state["w"], torch.arange(4.0))


def test_unsupported_object_error_names_the_key(tmp_path):
    with pytest.raises(TypeError, match=r"object.*'a\.b'"):
        save_checkpoint(tmp_path / "x", {"a": {"b": object()}}, {})
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------- corrupt files


def _real_checkpoint_bytes(tmp_path) -> bytes:
    path = save_checkpoint(tmp_path / "real", {"w": torch.arange(64.0), "n": 1}, {"algo": "ppo"})
    return path.read_bytes()


@pytest.mark.parametrize("kind", ["random", "random_small_header", "empty", "truncated", "truncated_header",
                                  "last_byte_missing", "pickle"])
def test_corrupt_file_raises_checkpoint_error_naming_path(tmp_path, kind):
    real = _real_checkpoint_bytes(tmp_path)
    rng = np.random.default_rng(1)
    content = {
        "random": rng.bytes(512),
        "random_small_header": struct.pack("<Q", 40) + rng.bytes(200),
        "empty": b"",
        "truncated": real[: len(real) // 2],
        "truncated_header": real[:12],
        "last_byte_missing": real[:-1],
        "pickle": pickle.dumps({"w": [1, 2, 3]}),
    }[kind]
    bad = tmp_path / f"bad_{kind}.safetensors"
    bad.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(bad)
    assert str(bad) in str(info.value)


def test_safetensors_file_without_relayrl_metadata_is_refused(tmp_path):
    from safetensors.torch import save_file

    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.ones(2)}, str(foreign))
    with pytest.raises(CheckpointError, match="not a relayrl checkpoint") as info:
        load_checkpoint(foreign)
    assert str(foreign) in str(info.value)


def test_other_format_version_is_refused(tmp_path):
    from safetensors.torch import save_file

    future = tmp_path / "future.safetensors"
    save_file({"w": torch.ones(2)}, str(future),
              metadata={"relayrl": json.dumps({"format": FORMAT_VERSION + 1, "state": {}})})
    with pytest.raises(CheckpointError, match=f"format {FORMAT_VERSION + 1}") as info:
        load_checkpoint(future)
    assert str(future) in str(info.value)


def test_missing_file_raises_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="not found") as info:
        load_checkpoint(tmp_path / "nope.safetensors")
    assert "nope.safetensors" in str(info.value)


# ------------------------------------------------------------------------------------------- resolve


def test_resolve_prefers_best_then_last_in_run_dir(tmp_path):
    run = tmp_path / "run"
    ckpts = run / "checkpoints"
    save_checkpoint(ckpts / "last", {"which": "last"}, {})
    save_checkpoint(ckpts / "update_000000010", {"which": "periodic"}, {})
    assert resolve_checkpoint(run) == ckpts / "last.safetensors"
    assert load_checkpoint(run).state == {"which": "last"}

    save_checkpoint(ckpts / "best", {"which": "best"}, {})
    assert resolve_checkpoint(run) == ckpts / "best.safetensors"
    assert load_checkpoint(run).state == {"which": "best"}
    # the checkpoints folder itself also works, and prefer= changes the order
    assert resolve_checkpoint(ckpts) == ckpts / "best.safetensors"
    assert resolve_checkpoint(run, prefer=("last", "best")) == ckpts / "last.safetensors"


def test_resolve_errors_clearly_without_best_or_last(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    save_checkpoint(run / "checkpoints" / "update_000000010", {"x": 1}, {})
    with pytest.raises(CheckpointError) as info:
        resolve_checkpoint(run)
    message = str(info.value)
    assert "best or last" in message
    assert str(run / "checkpoints") in message
    with pytest.raises(CheckpointError):
        load_checkpoint(run)


def test_resolve_errors_on_empty_dir(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint") as info:
        resolve_checkpoint(tmp_path)
    assert str(tmp_path) in str(info.value)


# ------------------------------------------------------------------------------------------- known bugs


@pytest.mark.parametrize("state", [
    {1: torch.ones(1), "1": torch.zeros(1)},
    {"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}},
], ids=["int-vs-str-key", "dotted-key"])
def test_distinct_keys_never_share_a_tensor(tmp_path, state):
    loaded = load_checkpoint(save_checkpoint(tmp_path / "collide", state, {})).state
    assert_same(state, loaded)


def test_bool_dict_key_round_trips_or_is_refused_at_save(tmp_path):
    try:
        path = save_checkpoint(tmp_path / "boolkey", {True: 1}, {})
    except TypeError:
        return  # refusing at save time would be fine too
    assert load_checkpoint(path).state == {True: 1}


@pytest.mark.parametrize("meta", [
    {"format": FORMAT_VERSION},
    {"format": FORMAT_VERSION, "state": {"w": {"__tensor__": "missing"}}},
    [1, 2],
], ids=["no-state", "dangling-tensor", "json-list"])
def test_malformed_metadata_raises_checkpoint_error(tmp_path, meta):
    from safetensors.torch import save_file

    bad = tmp_path / "bad.safetensors"
    save_file({"w": torch.ones(2)}, str(bad), metadata={"relayrl": json.dumps(meta)})
    with pytest.raises(CheckpointError):
        load_checkpoint(bad)
