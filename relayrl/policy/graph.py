"""A policy's deterministic forward as one traceable torch module: what ``relayrl export`` writes.

``Policy.export_graph()`` returns a ``PolicyGraph`` (None, the default: the policy cannot be exported);
relayrl/export.py traces its module to ONNX or TorchScript and checks the file against ``predict``. Each
built-in algorithm's policy builds its graph beside its ``act`` (algos/ppo.py, dqn.py, sac.py), from the
policy's own modules, so an algorithm of your own exports with no change to export.py::

    class MyGraph(nn.Module):                              # predict(obs) as a module: obs in, action out
        def __init__(self, policy: MyPolicy):
            super().__init__()
            self.observation, self.net = ObservationInput(policy.obs_rms, (-1,)), policy.net

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.net(self.observation(obs)).argmax(-1)

    class MyPolicy(Policy):
        ...
        def export_graph(self) -> PolicyGraph:
            return PolicyGraph(MyGraph(self), ARGMAX)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from relayrl.policy.normalizer import RunningMeanStd

__all__ = ["ARGMAX", "GraphOutput", "ObservationInput", "PolicyGraph"]

ARGMAX = "argmax over the action's logits or Q values"  # the post-processing of the discrete built-ins


@dataclass(frozen=True)
class PolicyGraph:
    """What ``Policy.export_graph`` returns.

    ``module``: ``forward(obs)`` takes a batch [n, *obs_shape] in the observation space's dtype (uint8 images
    stay uint8) and returns the actions [n, *action_shape] that ``predict(obs)`` returns (int64 for discrete
    actions, float32 for continuous ones); a recurrent policy's takes ``(obs, state)`` ([n, state_size]
    float32) and returns ``(action, next_state)``, as ``predict(obs, state)``. It may hold the policy's own
    networks: export traces a copy. Read ``obs.shape[0]``, never ``len(obs)``, or the trace fixes the batch size.
    ``post_processing``: what it does to the network's output (recorded in the exported file's sidecar).
    ``outputs``: the action outputs when there are several (a hybrid action's ``continuous_action`` and
    ``discrete_action``: ``forward`` returns them in this order, before a recurrent policy's next state, and
    ``predict`` returns them as a tuple); None: one ``action`` output of the policy's ``action_shape``.
    ``unread``: keys of a packed Dict observation the graph never reads (privileged critic inputs,
    policy/privileged.py): the sidecar lists them, and any bytes (zeros) do in their place.
    """

    module: nn.Module
    post_processing: str
    outputs: tuple[GraphOutput, ...] | None = None
    unread: tuple[str, ...] = ()


@dataclass(frozen=True)
class GraphOutput:
    """One action output of an exported graph: its name, dtype ("float32" or "int64") and shape after the batch axis."""

    name: str
    dtype: str
    shape: tuple[int, ...]


class ObservationInput(nn.Module):
    """Raw observations [n, *obs_shape] -> what a network reads: normalised as ``RunningMeanStd.normalize``
    computes it with ``obs_rms``'s statistics frozen (in float64, then float32, so the result is the same to the
    bit) or, without statistics, cast to float32; then reshaped to [n, *view] (``(-1,)``: flattened for an MLP;
    the observation's shape for an encoder)."""

    def __init__(self, obs_rms: RunningMeanStd | None, view: tuple[int, ...]):
        super().__init__()
        self.view = tuple(view)
        self.normalize = obs_rms is not None
        if obs_rms is not None:
            self.register_buffer("mean", torch.as_tensor(obs_rms.mean, dtype=torch.float64))
            self.register_buffer("std", torch.as_tensor(obs_rms.std, dtype=torch.float64))
            self.clip = float(obs_rms.clip)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.normalize:
            x = ((obs.to(torch.float64) - self.mean) / self.std).clamp(-self.clip, self.clip).to(torch.float32)
        else:
            x = obs.to(torch.float32)
        return x.reshape((x.shape[0],) + self.view)
