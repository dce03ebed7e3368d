"""Checkpoints as safetensors + JSON: no pickle, so loading a file from someone else runs no code.

A checkpoint is one file, ``NAME.safetensors``: every tensor or array of the nested training state
under a dotted key, and in the safetensors header a JSON document (``meta``) holding the rest of
the tree (numbers, strings, lists) plus run information (algo, env, config, counters). A copy of
that JSON is written beside it as ``NAME.json`` for people and tools; loading reads only the
safetensors file. Both are written atomically (temp file + rename).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as st_save

from relayrl.errors import CheckpointError
from relayrl.io.atomic import atomic_write_bytes, atomic_write_text

FORMAT_VERSION = 1
_TENSOR, _ARRAY, _INTKEY = "__tensor__", "__ndarray__", "__int__:"


@dataclass
class Checkpoint:
    path: Path
    meta: dict[str, Any]
    state: dict[str, Any]


def flatten_state(tree: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """Split a nested state into a JSON-able tree and a flat ``{key: tensor}`` dict."""
    tensors: dict[str, torch.Tensor] = {}

    def unique(key: str) -> str:  # {1: a, "1": b} or {"a.b": x, "a": {"b": y}} give equal dotted paths
        name, n = key, 1
        while name in tensors:
            name, n = f"{key}#{n}", n + 1
        return name

    def walk(node: Any, key: str) -> Any:
        if isinstance(node, torch.Tensor):
            key = unique(key)
            tensors[key] = node.detach().cpu().clone().contiguous()
            return {_TENSOR: key}
        if isinstance(node, np.ndarray):
            key = unique(key)
            tensors[key] = torch.from_numpy(np.array(node, order="C", copy=True))  # keeps 0-d arrays 0-d
            return {_ARRAY: key}
        if isinstance(node, dict):
            for k in node:
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TypeError(f"cannot checkpoint a dict key {k!r} of type {type(k).__name__} at {key!r}: "
                                    "use str or int keys")
            return {(f"{_INTKEY}{k}" if isinstance(k, int) else str(k)): walk(v, f"{key}.{k}" if key else str(k))
                    for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [walk(v, f"{key}.{i}") for i, v in enumerate(node)]
        if isinstance(node, (np.floating, np.integer, np.bool_)):
            return node.item()
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        raise TypeError(f"cannot checkpoint a {type(node).__name__} at {key!r}")

    return walk(tree, ""), tensors


def unflatten_state(tree: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(tree, dict):
        if _TENSOR in tree:
            return tensors[tree[_TENSOR]]
        if _ARRAY in tree:
            return tensors[tree[_ARRAY]].numpy()
        return {(int(k[len(_INTKEY):]) if k.startswith(_INTKEY) else k): unflatten_state(v, tensors)
                for k, v in tree.items()}
    if isinstance(tree, list):
        return [unflatten_state(v, tensors) for v in tree]
    return tree


def save_checkpoint(path: Path, state: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write ``state`` (nested dicts of tensors, arrays, numbers) and ``meta`` to ``path``."""
    path = Path(path).with_suffix(".safetensors")
    tree, tensors = flatten_state(state)
    meta = {"format": FORMAT_VERSION, **meta, "state": tree}
    meta_json = json.dumps(meta)
    atomic_write_bytes(path, st_save(tensors, metadata={"relayrl": meta_json}))
    atomic_write_text(path.with_suffix(".json"), json.dumps(meta, indent=1))
    return path


def copy_checkpoint(source: Path, target: Path) -> Path:
    """Write checkpoint ``source`` again as ``target`` (both ``.safetensors``), with its JSON copy."""
    source, target = Path(source).with_suffix(".safetensors"), Path(target).with_suffix(".safetensors")
    atomic_write_bytes(target, source.read_bytes())
    write_json_copy(target)
    return target


def write_json_copy(path: Path) -> None:
    """(Re)write the ``NAME.json`` copy of checkpoint ``NAME.safetensors``'s metadata, e.g. after a kill
    between the two files' writes."""
    path = Path(path).with_suffix(".safetensors")
    with safe_open(str(path), framework="pt") as f:
        meta = json.loads((f.metadata() or {})["relayrl"])
    atomic_write_text(path.with_suffix(".json"), json.dumps(meta, indent=1))


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Load a checkpoint file, or the best (else last) checkpoint of a run directory."""
    path = resolve_checkpoint(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            header = f.metadata() or {}
            tensors = {key: f.get_tensor(key) for key in f.keys()}
        meta = json.loads(header["relayrl"])
    except (SafetensorError, OSError, KeyError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} is unreadable or not a relayrl checkpoint ({exc}); "
                              "use another one, e.g. checkpoints/best or checkpoints/last of the run") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointError(f"checkpoint {str(path)!r} has format {found!r}, this relayrl reads "
                              f"format {FORMAT_VERSION}: use the relayrl version that wrote it")
    try:
        state = unflatten_state(meta.pop("state"), tensors)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} is damaged: its metadata does not match its tensors "
                              f"({type(exc).__name__}: {exc}); use another checkpoint of the run") from None
    return Checkpoint(path=path, meta=meta, state=state)


def load_newest(folder: str | Path, prefer: str = "last") -> tuple[Checkpoint, str | None]:
    """The checkpoint to resume from: ``prefer`` if it loads, else the readable checkpoint of ``folder``
    with the most env steps. Returns it with a note saying why it is not ``prefer`` (None when it is)."""
    folder = Path(folder)
    first = folder / f"{prefer}.safetensors"
    try:
        return load_checkpoint(first), None
    except CheckpointError as exc:
        why = f"{first.name} is missing" if not first.is_file() else f"{first.name} is unreadable ({exc})"
    found = []
    for path in sorted(folder.glob("*.safetensors")):
        if path == first:
            continue
        try:
            ckpt = load_checkpoint(path)
        except CheckpointError:
            continue
        run = ckpt.meta.get("run")
        if isinstance(run, dict):  # a training checkpoint (not e.g. the replay buffer)
            found.append((int(run.get("env_steps", 0)), int(run.get("updates", 0)), ckpt))
    if not found:
        raise CheckpointError(f"no checkpoint to resume from in {str(folder)!r} ({why}, and no other training "
                              "checkpoint there loads): the run was stopped before its first checkpoint; "
                              "start it again without --resume")
    steps, _, ckpt = max(found, key=lambda item: item[:2])
    return ckpt, f"{why}: resuming from {ckpt.path.name} (env step {steps})"


_SIZE = re.compile(r"size mismatch for (\S+): copying a param with shape torch\.Size\(\[([^\]]*)\]\) from "
                   r"checkpoint, the shape in current model is torch\.Size\(\[([^\]]*)\]\)")
_KEYS = re.compile(r"(Missing|Unexpected) key\(s\) in state_dict: (.*)")


def explain_load_error(exc: BaseException, limit: int = 3) -> str:
    """What torch's ``load_state_dict`` error says, on one line: which tensors differ and how
    (``actor.0.weight: [64, 4] in the checkpoint, [64, 6] here``), or which are missing/unexpected."""
    text = str(exc)
    parts = [f"{name}: [{saved}] in the checkpoint, [{here}] here" for name, saved, here in _SIZE.findall(text)]
    for kind, keys in _KEYS.findall(text):
        names = [k.strip().strip('"') for k in keys.split(",") if k.strip().strip('". ')]
        more = f" and {len(names) - limit} more" if len(names) > limit else ""
        parts.append(f"{kind.lower()} tensors {', '.join(names[:limit])}{more}")
    if not parts:
        return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    more = f"; and {len(parts) - limit} more" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


def resolve_checkpoint(path: str | Path, prefer: tuple[str, ...] = ("best", "last")) -> Path:
    path = Path(path)
    if path.is_dir():
        folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        for name in prefer:
            candidate = folder / f"{name}.safetensors"
            if candidate.is_file():
                return candidate
        raise CheckpointError(f"no checkpoint ({' or '.join(prefer)}) in {str(folder)!r}: "
                              "pass a run directory that has trained, or a .safetensors file")
    given = path
    if path.suffix in ("", ".json"):
        path = path.with_suffix(".safetensors")
    if not path.is_file():
        what = "run directory or checkpoint" if given.suffix == "" else "checkpoint"
        raise CheckpointError(f"{what} {str(given)!r} not found: pass a run directory or a .safetensors file")
    return path
