"""Offline datasets: transitions read from disk for the offline algorithms (BC, IQL), and written by
``relayrl collect``. Nothing here unpickles: ``.npz`` files load with ``allow_pickle=False`` and replay
snapshots are safetensors + JSON.

    data = load_dataset("pendulum.npz", env.observation_space, env.action_space)   # checked, as replay stores it
    save_dataset("more.npz", transitions)                                           # never over an existing file

Three sources, by what ``path`` is:

- an ``.npz`` of named arrays, one row per transition: ``obs``, ``action`` (as the env takes it),
  ``reward``, ``next_obs``, ``terminated`` and optionally ``truncated`` (what ``relayrl collect`` writes);
- a relayrl replay snapshot: a run directory (its ``checkpoints/replay.safetensors``, written with every
  last checkpoint of an off-policy run, or with replay shards each shard's ``replay_shard<k>.safetensors``,
  read together) or one such file. It must hold one-step transitions (``n_step: 1``);
  its Box actions are the learner's, in [-1, 1] (SAC's and the other squashed policies' ``action``);
- a Minari dataset folder on disk (``data/main_data.hdf5``), read with the ``minari`` package when it is
  installed (it is no dependency of relayrl; nothing is downloaded).

``load_dataset`` checks every column against the env's spaces (a dataset of another env, a wrong dtype or
shape, a missing column, a value outside the action space: one ``DatasetError`` naming it, exit code 2) and
returns the transitions as replay stores them: observations in their stored dtype (data/dtypes.py), Box
actions scaled from the env's bounds to [-1, 1] (float32), Discrete actions as indices from 0 (int64),
``reward``, ``terminated`` and ``truncated`` as float32.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.data.dtypes import stored_dtype
from relayrl.data.replay import REPLAY_FILE, SHARD_FILE
from relayrl.errors import DatasetError, EnvError, install_hint
from relayrl.types import Batch

__all__ = ["REQUIRED", "load_dataset", "check_dataset", "save_dataset", "action_bounds"]

REQUIRED = ("obs", "action", "reward", "next_obs", "terminated")  # the columns every dataset has
OPTIONAL = ("truncated",)
ACTION_TOLERANCE = 1e-4  # of the action range: float error, not an action outside the space
FIX = ("give an .npz of the columns obs, action, reward, next_obs, terminated (and truncated), e.g. written by "
       "`relayrl collect RUN -o FILE.npz`, a run directory of an off-policy run (its checkpoints/replay.safetensors), "
       "or a Minari dataset folder")


def load_dataset(path: str | Path, obs_space: gym.Space, act_space: gym.Space) -> Batch:
    """The transitions at ``path`` (module docstring), checked against the env's spaces, as replay stores them."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"dataset {str(path)!r} not found: {FIX}")
    if path.is_dir():
        replays = _replay_files(path)
        if replays:  # one snapshot, or one per replay shard (their transitions together)
            arrays = [_read_replay(replay) for replay in replays]
            joined = {key: np.concatenate([a[key] for a in arrays]) for key in arrays[0]}
            return check_dataset(joined, obs_space, act_space, ", ".join(map(str, replays)), scaled_actions=True)
        if _is_minari(path):
            return check_dataset(_read_minari(path), obs_space, act_space, str(path))
        raise DatasetError(f"dataset {str(path)!r} is a folder with no replay snapshot (checkpoints/{REPLAY_FILE}) "
                           f"and no Minari dataset (data/main_data.hdf5) in it: {FIX}")
    if path.suffix == ".npz":
        return check_dataset(_read_npz(path), obs_space, act_space, str(path))
    if path.suffix == ".safetensors":
        return check_dataset(_read_replay(path), obs_space, act_space, str(path), scaled_actions=True)
    raise DatasetError(f"dataset {str(path)!r}: relayrl reads .npz files, replay snapshots (.safetensors) and Minari "
                       f"folders, not {path.suffix or 'files without a suffix'}: {FIX}")


def action_bounds(act_space: gym.spaces.Box, who: str) -> tuple[np.ndarray, np.ndarray]:
    """The (low, half range) that map a Box's actions to [-1, 1]; an EnvError for unbounded spaces."""
    if not (np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high))):
        raise EnvError(f"{who} learns actions scaled to the action bounds, which must be finite: {act_space}")
    return act_space.low.astype(np.float32), ((act_space.high - act_space.low) / 2).astype(np.float32)


def check_dataset(arrays: dict[str, np.ndarray], obs_space: gym.Space, act_space: gym.Space, source: str,
                  scaled_actions: bool = False) -> Batch:
    """``arrays`` checked against the spaces and converted as ``load_dataset`` returns them. ``scaled_actions``:
    Box actions are already in [-1, 1] (a replay snapshot), else they are the env's (scaled here)."""
    missing = [key for key in REQUIRED if key not in arrays]
    if missing:
        raise DatasetError(f"dataset {source!r} lacks the column(s) {', '.join(missing)} (it has "
                           f"{', '.join(sorted(arrays)) or 'none'}): {FIX}")
    n = len(np.asarray(arrays["obs"]))
    if n == 0:
        raise DatasetError(f"dataset {source!r} holds no transitions: {FIX}")
    out: Batch = {}
    obs_dtype = stored_dtype(obs_space.dtype)
    for key in ("obs", "next_obs"):
        array = _column(arrays, key, source, n, tuple(obs_space.shape or ()), obs_space)
        if _kind(array.dtype) != _kind(obs_dtype):
            raise DatasetError(f"dataset {source!r}: {key} has dtype {array.dtype}, the env observes {obs_space.dtype} "
                               f"({obs_space}): a dataset of another env, or convert the column")
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            raise DatasetError(f"dataset {source!r}: {key} holds NaN or infinite values")
        out[key] = array.astype(obs_dtype, copy=False)
    out["action"] = _actions(arrays, act_space, source, n, scaled_actions)
    reward = _column(arrays, "reward", source, n, (), act_space)
    if reward.dtype.kind not in "biuf" or not np.all(np.isfinite(reward)):
        raise DatasetError(f"dataset {source!r}: reward must be finite numbers, got dtype {reward.dtype}"
                           f"{'' if reward.dtype.kind not in 'biuf' else ' with NaN or infinite values'}")
    out["reward"] = reward.astype(np.float32)
    for key in ("terminated", "truncated"):
        if key not in arrays:
            out[key] = np.zeros(n, np.float32)
            continue
        flags = _column(arrays, key, source, n, (), act_space)
        if flags.dtype.kind not in "biu" or not np.isin(flags, (0, 1)).all():
            raise DatasetError(f"dataset {source!r}: {key} must be booleans (or 0/1), got dtype {flags.dtype}")
        out[key] = flags.astype(np.float32)
    if "discount" in arrays:  # a replay snapshot: one-step transitions all bootstrap with the same gamma
        discount = np.asarray(arrays["discount"]).reshape(-1)
        if len(np.unique(discount)) > 1:
            raise DatasetError(f"dataset {source!r} holds n-step transitions (their discounts differ: the run had "
                               "n_step > 1), and offline learning takes one-step ones: train the source run with "
                               "n_step=1, or write a dataset with `relayrl collect RUN -o FILE.npz`")
    return out


def _kind(dtype: np.dtype) -> str:
    return "float" if np.dtype(dtype).kind == "f" else "integer" if np.dtype(dtype).kind in "biu" else "other"


def _column(arrays: dict[str, np.ndarray], key: str, source: str, n: int, row: tuple[int, ...],
            space: gym.Space) -> np.ndarray:
    array = np.asarray(arrays[key])
    if array.shape != (n, *row):
        what = "rows" if array.shape[:1] != (n,) else "shape"
        raise DatasetError(f"dataset {source!r}: {key} has shape {array.shape}, expected {(n, *row)} ({n} transitions"
                           f"{f' of {space}' if row else ''}; wrong {what}): a dataset of another env, or a damaged one")
    return array


def _actions(arrays: dict[str, np.ndarray], act_space: gym.Space, source: str, n: int, scaled: bool) -> np.ndarray:
    if isinstance(act_space, gym.spaces.Discrete):
        action = _column(arrays, "action", source, n, (), act_space)
        if action.dtype.kind not in "iu":
            raise DatasetError(f"dataset {source!r}: action has dtype {action.dtype}, the env takes integer actions "
                               f"({act_space}): a dataset of another env")
        index = action.astype(np.int64) - (0 if scaled else int(act_space.start))
        if index.min() < 0 or index.max() >= act_space.n:
            raise DatasetError(f"dataset {source!r}: actions from {action.min()} to {action.max()} lie outside "
                               f"{act_space}: a dataset of another env")
        return index
    if not isinstance(act_space, gym.spaces.Box):
        raise EnvError(f"offline datasets hold Box or Discrete actions, not {act_space}")
    action = _column(arrays, "action", source, n, tuple(act_space.shape), act_space)
    if action.dtype.kind != "f":
        raise DatasetError(f"dataset {source!r}: action has dtype {action.dtype}, the env takes float actions "
                           f"({act_space}): a dataset of another env")
    low, scale = action_bounds(act_space, "offline learning")
    unit = action.astype(np.float32) if scaled else (action.astype(np.float32) - low) / scale - 1.0
    if not np.all(np.isfinite(unit)) or np.abs(unit).max() > 1 + ACTION_TOLERANCE:
        where = "[-1, 1] (a replay snapshot's actions are the learner's)" if scaled else f"the bounds of {act_space}"
        raise DatasetError(f"dataset {source!r}: actions outside {where}: a dataset of another env, or clip them "
                           "to the bounds first")
    return np.clip(unit, -1.0, 1.0)


# ---------------------------------------------------------------- readers


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise DatasetError(f"dataset {str(path)!r} holds Python objects, which relayrl never unpickles: save plain "
                               "numeric arrays (np.savez(path, obs=..., action=..., ...))") from None
        raise DatasetError(f"dataset {str(path)!r} is damaged or no .npz file ({exc}): write it again") from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise DatasetError(f"dataset {str(path)!r} is damaged or no .npz file ({type(exc).__name__}: {exc}): "
                           "write it again") from None


def _replay_files(folder: Path) -> list[Path]:
    """The run's replay snapshot, or its replay shards' (shard 0, 1, ...), in ``checkpoints/`` or ``folder``."""
    for where in (folder / "checkpoints", folder):
        if (where / REPLAY_FILE).is_file():
            return [where / REPLAY_FILE]
        shards = []
        while (where / SHARD_FILE.format(k=len(shards))).is_file():
            shards.append(where / SHARD_FILE.format(k=len(shards)))
        if shards:
            return shards
    return []


def _read_replay(path: Path) -> dict[str, np.ndarray]:
    """The transitions a replay snapshot holds, oldest first (the evicted ones left out)."""
    from relayrl.data.replay.framestorage import FrameStorage
    from relayrl.data.replay.storage import ArrayStorage
    from relayrl.errors import CheckpointError
    from relayrl.io.checkpoint import load_checkpoint

    try:
        ckpt = load_checkpoint(path)
    except CheckpointError:
        raise DatasetError(f"dataset {str(path)!r} is damaged or not a safetensors file: use the replay snapshot of "
                           "another run, or an .npz dataset") from None
    if ckpt.meta.get("kind") != "replay_buffer":
        raise DatasetError(f"dataset {str(path)!r} is a checkpoint, not a replay snapshot: give the run directory or "
                           f"its checkpoints/{REPLAY_FILE}")
    try:
        capacity, layout = int(ckpt.meta["capacity"]), ckpt.meta.get("layout", "plain")
        storage = ArrayStorage(capacity) if layout == "plain" else FrameStorage(capacity)
        storage.load_state_dict(ckpt.state["storage"])
        rows = storage.oldest_rows()
        live = ckpt.state.get("live")
        if live is not None:
            rows = rows[np.asarray(live, bool)[rows]]
        return storage.get(rows)
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise DatasetError(f"replay snapshot {str(path)!r} is damaged ({type(exc).__name__}: {exc}): use another "
                           "run's, or an .npz dataset") from None


def _is_minari(folder: Path) -> bool:
    return (folder / "data" / "main_data.hdf5").is_file() or (folder / "main_data.hdf5").is_file()


def _read_minari(folder: Path) -> dict[str, np.ndarray]:
    """A Minari dataset folder's episodes as transitions (observations[:-1] -> observations[1:])."""
    try:
        from minari.dataset.minari_dataset import MinariDataset
    except ImportError:
        raise DatasetError(f"dataset {str(folder)!r} is a Minari dataset, which relayrl reads with the minari "
                           f"package, not installed here: `{install_hint('offline')}` (minari with its HDF5 reader; "
                           "no download happens: the folder is read as it is), or convert it to an .npz of "
                           "transitions") from None
    data = folder / "data" if (folder / "data" / "main_data.hdf5").is_file() else folder
    try:
        columns: dict[str, list[np.ndarray]] = {key: [] for key in (*REQUIRED, "truncated")}
        for episode in MinariDataset(str(data)).iterate_episodes():
            obs = np.asarray(episode.observations)
            columns["obs"].append(obs[:-1])
            columns["next_obs"].append(obs[1:])
            columns["action"].append(np.asarray(episode.actions))
            columns["reward"].append(np.asarray(episode.rewards))
            columns["terminated"].append(np.asarray(episode.terminations))
            columns["truncated"].append(np.asarray(episode.truncations))
    except Exception as exc:  # (h5py and minari raise many kinds; any of them means the folder cannot be read)
        raise DatasetError(f"Minari dataset {str(folder)!r} cannot be read ({type(exc).__name__}: {exc}): a Dict "
                           "observation space or a damaged folder; convert it to an .npz of transitions") from None
    if not columns["obs"]:
        raise DatasetError(f"Minari dataset {str(folder)!r} holds no episodes")
    return {key: np.concatenate(parts) for key, parts in columns.items()}


# ---------------------------------------------------------------- writing


def save_dataset(path: str | Path, transitions: dict[str, Any]) -> Path:
    """Write ``transitions`` (equally long arrays) as an ``.npz`` at ``path``, which must not exist yet: a
    dataset is someone's result, never overwritten. Written whole or not at all (a temp file, then a rename)."""
    from relayrl.io.atomic import atomic_write_bytes

    path = Path(path)
    if path.suffix != ".npz":
        raise DatasetError(f"dataset {str(path)!r}: name it FILE.npz (relayrl writes datasets as .npz files)")
    if path.exists():
        raise DatasetError(f"{str(path)!r} exists already, and relayrl never overwrites a dataset: choose another "
                           "name, or move that file away")
    if not path.parent.is_dir():
        raise DatasetError(f"cannot write {str(path)!r}: the folder {str(path.parent)!r} does not exist")
    buffer = io.BytesIO()
    np.savez(buffer, **{key: np.asarray(value) for key, value in transitions.items()})
    atomic_write_bytes(path, buffer.getvalue())
    return path
