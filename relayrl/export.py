"""Export a trained policy for deployment: ``relayrl export RUN [--format onnx|torchscript] [--out FILE]``.

The file holds the deterministic policy as one graph, observation in, action out, as ``predict``
computes it: the observation normaliser with its statistics frozen (PPO/APPO ``obs_norm``), the
encoders' image scaling, the network, and the action's post-processing (argmax for Discrete actions;
for Box actions PPO's clip to the bounds, SAC's tanh squash scaled to them). Each policy builds that
graph itself (``Policy.export_graph``: a ``relayrl.policy.graph.PolicyGraph``); this module traces it,
checks it and writes it, knowing no algorithm. A robot runs it with onnxruntime or ``torch.jit.load``
alone, without relayrl::

    session = onnxruntime.InferenceSession("policy.onnx")
    action = session.run(None, {"obs": obs[None]})[0][0]      # obs: the env's dtype; a batch axis first

Inputs and outputs (a leading batch axis of any size): ``obs`` [n, *obs_shape] in the observation
space's dtype (uint8 images stay uint8) -> ``action`` [n, *action_shape] (int64 for Discrete, float32
for Box). A recurrent PPO policy takes and returns its state explicitly, as ``predict(obs, state)``
does: ``obs``, ``state`` [n, state_size] float32 (zeros at an episode's start) -> ``action``,
``next_state`` (the next call's ``state``). A hybrid action (relayrl/envs/hybrid.py: PPO, APPO, A2C) is two
outputs instead of ``action``: ``continuous_action`` [n, C] float32 (the Gaussian means clipped to the bounds)
and ``discrete_action`` [n, B] int64 (each branch's most likely option), before ``next_state``; ``predict``
returns the same pair as a tuple.
``FILE.json`` beside the file records the spaces, the names, shapes and dtypes of the inputs and
outputs, the format and the relayrl version.

``export`` checks the file it wrote against ``predict`` on a few observations (a batch size other
than the traced one) before it renames it into place, so a graph that does not match is never left
behind. ONNX uses PyTorch's TorchScript-based exporter (``dynamo=False``), which needs the ``onnx``
package only; the newer exporter would also need ``onnxscript``.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from relayrl.core import Policy
from relayrl.envs.packed import PackedDict
from relayrl.errors import ConfigError, RelayRLError, install_hint
from relayrl.io.atomic import atomic_write_text
from relayrl.policy.graph import PolicyGraph

Format = Literal["onnx", "torchscript"]
FORMATS: tuple[str, ...] = ("onnx", "torchscript")
SUFFIX = {"onnx": ".onnx", "torchscript": ".pt"}
EXTRA = f"the export extra: {install_hint('export')}"
TRACE_BATCH, CHECK_BATCH = 2, 5

__all__ = ["export_policy", "export_run", "FORMATS"]


@dataclass(frozen=True)
class Exported:
    path: Path
    sidecar: Path
    format: str


# ---------------------------------------------------------------- the graph


def _graph(policy: Policy) -> PolicyGraph:
    """The deterministic policy of ``policy`` (``Policy.export_graph``); a ConfigError for a policy it cannot export."""
    space = policy.observation_space
    if isinstance(space, PackedDict) and any(f.dtype != np.uint8 for f in space.fields):
        others = ", ".join(f"{f.name!r} ({f.dtype})" for f in space.fields if f.dtype != np.uint8)
        raise ConfigError(f"cannot export a policy of the Dict observation {space.space}: its keys {others} are "
                          "not uint8, and reading their packed bytes back (a dtype view) has no ONNX or TorchScript "
                          "op. Export works for array observations and for Dicts of uint8 keys (images); for this "
                          "policy, deploy with relayrl.load(RUN).predict")
    graph = policy.export_graph()
    if graph is None:
        name = type(policy).__name__
        raise ConfigError(f"cannot export a {name}: its export_graph() gives no graph (the relayrl.core.Policy "
                          f"default, None): define {name}.export_graph() returning a relayrl.policy.graph.PolicyGraph, "
                          "its deterministic forward as one torch module (relayrl/policy/graph.py shows one), or "
                          "deploy with relayrl.load(RUN).predict")
    if not (isinstance(graph, PolicyGraph) and isinstance(graph.module, nn.Module)):
        got = f"a PolicyGraph of a {type(graph.module).__name__}" if isinstance(graph, PolicyGraph) else \
            f"a {type(graph).__name__}"
        raise ConfigError(f"{type(policy).__name__}.export_graph() returned {got}: return "
                          "relayrl.policy.graph.PolicyGraph(module, post_processing) with module a torch.nn.Module")
    return graph


# ---------------------------------------------------------------- export


def export_policy(policy: Policy, path: str | Path, fmt: Format = "onnx",
                  info: dict[str, Any] | None = None) -> Exported:
    """Write ``policy``'s deterministic graph to ``path`` and its sidecar to ``path + ".json"`` (module docstring);
    ``info`` adds keys to the sidecar (the run's algo, env, checkpoint)."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "onnx":
        require_onnx()
    graph = _graph(policy)
    module = copy.deepcopy(graph.module).eval().requires_grad_(False)  # (a deployment's outputs need no grad)
    path = Path(path)
    inputs = {"obs": _example(policy.observation_space, TRACE_BATCH, 0)}
    if policy.recurrent:
        inputs["state"] = torch.zeros(TRACE_BATCH, policy.state_size)
    outputs = [*_action_names(graph), *(["next_state"] if policy.recurrent else [])]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _write(module, tuple(inputs.values()), list(inputs), outputs, tmp, fmt)
        _check(policy, tmp, fmt, outputs)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    sidecar = path.with_name(path.name + ".json")
    atomic_write_text(sidecar, json.dumps(_describe(policy, graph, fmt, path, inputs, outputs, info or {}), indent=2) + "\n")
    return Exported(path=path, sidecar=sidecar, format=fmt)


def export_run(run: str | Path, fmt: Format = "onnx", out: str | Path | None = None,
               behaviour: str | None = None) -> Exported:
    """``relayrl export``: the policy of a run directory (its best checkpoint, else the last) or of a
    checkpoint file, to ``out`` (default: ``RUN/policy.onnx`` or ``.pt``; beside a checkpoint file, its name;
    ``RUN/policy_<behaviour>.onnx`` for a behaviour of a run of several)."""
    from relayrl.version import __version__
    from relayrl.training.saved_policy import behaviour_checkpoint, load_policy

    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "onnx":
        require_onnx()  # before anything is read
    run = Path(run)
    ckpt, _ = behaviour_checkpoint(run, behaviour)
    policy, config, env_id = load_policy(ckpt)
    if out is None:
        name = f"policy_{behaviour}" if behaviour else "policy"
        out = run / f"{name}{SUFFIX[fmt]}" if run.is_dir() else ckpt.path.with_suffix(SUFFIX[fmt])
    info = {"algo": config.algo, "env": env_id, "checkpoint": str(ckpt.path),
            "env_steps": ckpt.meta.get("run", {}).get("env_steps"), "relayrl_version": __version__}
    return export_policy(policy, out, fmt, info)


def require_onnx() -> None:
    """Refuse ``--format onnx`` without onnx (the exporter writes with it) and onnxruntime (the check runs with it)."""
    missing = []
    for module in ("onnx", "onnxruntime"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigError(f"--format onnx needs {' and '.join(missing)}, not installed: install {EXTRA}; or export "
                          "with --format torchscript")


def _example(space: gym.Space, n: int, seed: int) -> torch.Tensor:
    """``n`` observations of ``space`` (in its dtype) as a tensor."""
    space = copy.deepcopy(space)  # seeding must not touch the policy's own space
    space.seed(seed)
    return torch.from_numpy(np.stack([np.asarray(space.sample(), dtype=space.dtype) for _ in range(n)]))


def _write(graph: nn.Module, args: tuple[torch.Tensor, ...], inputs: list[str], outputs: list[str], path: Path,
           fmt: str) -> None:
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice, tracer notes
            if fmt == "torchscript":
                torch.jit.save(torch.jit.trace(graph, args, check_trace=False), str(path))
            else:
                torch.onnx.export(graph, args, str(path), dynamo=False, input_names=inputs, output_names=outputs,
                                  dynamic_axes={name: {0: "batch"} for name in [*inputs, *outputs]},
                                  opset_version=17)
    except RelayRLError:
        raise
    except Exception as exc:  # an operation the tracer or the ONNX exporter does not handle (your own encoder?)
        raise ConfigError(f"cannot export this policy as {fmt}: {type(exc).__name__}: {str(exc).splitlines()[0]}"
                          + ("; try --format torchscript" if fmt == "onnx" else "")) from None


def _run_file(path: Path, fmt: str, obs: np.ndarray, state: np.ndarray | None) -> list[np.ndarray]:
    """Run an exported file as a deployment would."""
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript's: the format is what was asked for
            module = torch.jit.load(str(path))
        with torch.no_grad():
            out = module(torch.from_numpy(obs), *([] if state is None else [torch.from_numpy(state)]))
        return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {"obs": obs} if state is None else {"obs": obs, "state": state}
    return session.run(None, feed)


def _action_names(graph: PolicyGraph) -> list[str]:
    return ["action"] if graph.outputs is None else [output.name for output in graph.outputs]


def _check(policy: Policy, path: Path, fmt: str, outputs: list[str]) -> None:
    """The file's actions equal ``predict``'s on a batch of another size than the traced one."""
    obs = _example(policy.observation_space, CHECK_BATCH, 1).numpy()
    state = np.random.default_rng(0).normal(0, 0.5, (CHECK_BATCH, policy.state_size)).astype(np.float32) \
        if policy.recurrent else None
    expected = policy.predict(obs, state) if policy.recurrent else policy.predict(obs)
    actions, states = (expected[0], [expected[1]]) if policy.recurrent else (expected, [])
    several = len(outputs) - len(states) > 1  # (a hybrid action: a tuple of parts)
    expected = [*(actions if several else [actions]), *states]
    try:
        got = _run_file(path, fmt, obs, state)
    except Exception as exc:
        raise ConfigError(f"the exported {fmt} file does not run: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    for name, want, have in zip(outputs, expected, got):
        want = np.asarray(want)
        same = have.shape == want.shape and (np.array_equal(have, want) if want.dtype.kind in "iub" else
                                             np.allclose(have, want, rtol=1e-4, atol=1e-5))
        if not same:
            raise RelayRLError(f"the exported {fmt} graph's {name} differs from the policy's on {CHECK_BATCH} "
                               f"observations (shape {have.shape} vs {want.shape}); nothing was written. An "
                               "encoder that depends on the batch size (len(obs) instead of obs.shape[0]) "
                               "cannot be traced")


def _describe(policy: Policy, graph: PolicyGraph, fmt: str, path: Path, inputs: dict[str, torch.Tensor], outputs: list[str],
              info: dict[str, Any]) -> dict[str, Any]:
    from relayrl.version import __version__
    from relayrl.envs.space_data import space_to_data

    obs_space = policy.observation_space
    obs_dtype = np.dtype(obs_space.dtype).name
    action_dtype = "int64" if np.dtype(policy.action_dtype).kind == "i" else "float32"
    state = {"dtype": "float32", "shape": ["batch", policy.state_size]}
    described_inputs = [{"name": "obs", "dtype": obs_dtype, "shape": ["batch", *obs_space.shape]}]
    described_outputs = [{"name": "action", "dtype": action_dtype, "shape": ["batch", *policy.action_shape]}] \
        if graph.outputs is None else [{"name": o.name, "dtype": o.dtype, "shape": ["batch", *o.shape]}
                                       for o in graph.outputs]
    if policy.recurrent:
        described_inputs.append({"name": "state", **state})
        described_outputs.append({"name": "next_state", **state})
    return {"format": fmt, "file": path.name, "relayrl_version": __version__, **info,
            "inputs": described_inputs, "outputs": described_outputs,
            "observation_space": space_to_data(obs_space), "action_space": space_to_data(policy.action_space),
            "recurrent": bool(policy.recurrent), "deterministic": True,
            **({"packed_fields": [{"key": f.name, "offset": f.offset, "nbytes": f.nbytes, "shape": list(f.shape),
                                   "dtype": f.dtype.name} for f in obs_space.fields]}
               if isinstance(obs_space, PackedDict) else {}),
            **({"unread_fields": [f.name for f in obs_space.fields if f.path[0] in graph.unread]}
               if graph.unread else {}),
            "includes": _includes(policy, graph)}


def _includes(policy: Policy, graph: PolicyGraph) -> list[str]:
    """What the graph does besides the network, for people reading the sidecar."""
    parts = ["observation normaliser (frozen statistics, clip "
             f"{policy.obs_rms.clip})"] if policy.obs_rms is not None else []
    return [*parts, graph.post_processing]
