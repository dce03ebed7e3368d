"""Built-in encoders, and the network each observation space gets when ``<algo>.encoder`` is null.

The choice (``choose``), from the observation space alone:

- **Images** -> a CNN. An image is a rank-3 ``Box`` of uint8 (pixels), of bool (0/1 planes, such as
  MinAtar's), or of floats bounded in [0, 1]. Images at least ``NATURE_MIN`` (36) pixels on their
  smaller side get the Nature CNN (``NatureCNN``: Mnih et al. 2015), smaller ones (grids such as
  MinAtar's 10x10xC) a small CNN (``SmallCNN``: MinAtar's network). Both scale inside the network:
  uint8 images are divided by the space's upper bound (255 for pixels) so they reach [0, 1]; bool
  and [0, 1] float images are read as they are. With ``ppo.obs_norm`` the CNN reads the normalised
  observations, unscaled.
- **Discrete and MultiDiscrete** -> one-hot (``OneHot``, as Stable-Baselines3 does: one column per
  value of each component, the components side by side), then the algorithm's MLP heads.
- **Flat observations** (a ``Box`` of rank 0 or 1, ``MultiBinary``) -> no encoder: the algorithm's
  built-in MLP on the flattened observation, exactly as before these encoders existed.
- **Dict (and Tuple) observations**, which the env boundary packs into one uint8 row
  (envs/packed.py) -> one encoder per key (``DictEncoder``): the CNN the key's image gets, one-hot
  for a category, the flattened values for a vector (the algorithm's MLP heads then read them with
  the rest, as Stable-Baselines3's ``CombinedExtractor``), the features concatenated in key order.
  Images are scaled inside the network as above. ``ppo.obs_norm`` is refused with a Dict (it
  normalises one vector, not bytes); a key no encoder takes is refused naming the key.
- Anything else is refused with an ``EnvError`` naming the space, what is supported and the fix
  (``check_space`` and ``choose``): a rank-2 or rank >= 4 Box, a rank-3 Box of another dtype
  (int16, ...) or of floats outside [0, 1], a Dict or Tuple space not packed by ``relayrl.envs.make``.

Big images make a big first layer: the Nature CNN on 280x480 frames (PettingZoo's cooperative_pong) has a
57M-weight linear layer after its convolutions. Above ``BIG_LAYER`` (10M) weights a warning names the size
and the fix (``env.resize``, ``env.grayscale``: relayrl/envs/imageobs.py), once per process.

Channel layout (``image_layout``): the channels are the smaller of the first and the last axis
((4, 84, 84) is channels-first, (84, 84, 3) and MinAtar's (10, 10, 4) channels-last); when the two
are equal ((10, 10, 10), MinAtar's Seaquest) the image is read channels-last, Gymnasium's and
NumPy's convention. The rule differs from Stable-Baselines3's ``is_image_space_channels_first``
(the smallest of the three axes is the channels; ties go channels-first) on ties only. An image the
rule misreads: transpose it with a wrapper, or give your own encoder.

A user's ``<algo>.encoder`` reference always wins (``make_encoder``), and the built-ins are
references too, to ask for one by name: ``"relayrl.policy.encoders:nature_cnn"``,
``":small_cnn"``, ``":one_hot"`` (and ``":auto"``, the automatic choice).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from relayrl.envs import spaces as leaf_spaces
from relayrl.envs.packed import PackedDict
from relayrl.envs.spaces import ImageLayout, image_layout
from relayrl.errors import ConfigError, EnvError
from relayrl.policy.encoder import build_encoder
from relayrl.policy.packed import OnPacked

__all__ = ["NATURE_MIN", "BIG_LAYER", "ImageLayout", "NatureCNN", "SmallCNN", "OneHot", "DictEncoder", "check_space",
           "is_image", "image_layout", "choose", "make_encoder", "warn_big_layer", "nature_cnn", "small_cnn", "one_hot",
           "auto"]

BIG_LAYER = 10_000_000  # weights of a CNN's first linear layer above which warn_big_layer warns (40 MB per network)
_warned: set[tuple[str, ImageLayout, int]] = set()
log = logging.getLogger("relayrl")
NATURE_MIN = 36  # the smallest side the Nature CNN's three convolutions fit in (36 -> 8 -> 3 -> 1)
ARRAY_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
SUPPORTED = ("a Box of rank 0 or 1 (an MLP on it), an image (a rank-3 Box of uint8, bool, or floats in [0, 1], "
             "channels first or last: a CNN), Discrete or MultiDiscrete (one-hot, then an MLP) or MultiBinary")


# ---------------------------------------------------------------- the choice


def check_space(space: gym.Space, key: str) -> None:
    """Refuse observation spaces no policy can read as one array (an unpacked Dict or Tuple, a Text...)."""
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        raise EnvError(f"observation space {space} cannot be read by {key.split('.')[0]}'s networks as it is: a "
                       f"Dict observation is packed into one row when relayrl makes the env (relayrl.envs.make), and "
                       f"the policy is built on that packed space. Fix: make the env with relayrl.envs.make, or wrap "
                       f"it in relayrl.envs.packed.PackDict and build the policy on its observation_space")
    if not isinstance(space, ARRAY_SPACES):
        raise EnvError(f"observation space {space} cannot be read by {key.split('.')[0]}'s networks: they take "
                       f"{SUPPORTED}. Convert it with a Gymnasium wrapper (e.g. FlattenObservation for a Dict or "
                       f"Tuple of arrays)")


def _image_dtype(space: gym.spaces.Box) -> str | None:
    """"uint8", "bool" or "float" when a rank-3 Box's dtype and bounds make it an image; None otherwise."""
    dtype = np.dtype(space.dtype)
    if dtype == np.uint8:
        return "uint8"
    if dtype == np.bool_:
        return "bool"
    if dtype.kind == "f" and np.all(space.low >= 0) and np.all(space.high <= 1):
        return "float"
    return None


def is_image(space: gym.Space) -> bool:
    """A rank-3 Box of uint8, bool, or floats bounded in [0, 1]."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and _image_dtype(space) is not None


def holds_image(space: gym.Space) -> bool:
    """The observations are a picture, or a packed Dict one of whose fields is."""
    return any(is_image(leaf) for leaf in _leaves(space))


def holds_nature_image(space: gym.Space) -> bool:
    """``holds_image`` with an image of at least ``NATURE_MIN`` pixels on each side (the Nature CNN's, not the small
    CNN's, such as MinAtar's 10x10 planes)."""
    return any(is_image(leaf) and _smaller_side(image_layout(tuple(leaf.shape))) >= NATURE_MIN for leaf in _leaves(space))


def _smaller_side(layout: ImageLayout) -> int:
    return min(layout.height, layout.width)


def _leaves(space: gym.Space) -> list[gym.Space]:
    return [field.space for field in space.fields] if isinstance(space, PackedDict) else [space]


def choose(space: gym.Space, key: str = "ppo.encoder") -> str:
    """The built-in network for ``space``: "mlp" (no encoder: the MLP on flattened observations),
    "nature_cnn", "small_cnn", "one_hot" or "dict" (a packed Dict: one per key); an EnvError naming the
    space and the fix when none fits. ``key`` ("ppo.encoder", ...) is the config field the fix names."""
    check_space(space, key)
    if isinstance(space, PackedDict):
        return "dict"
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return "one_hot"
    if isinstance(space, gym.spaces.MultiBinary):
        return "mlp"
    shape = tuple(space.shape)
    if len(shape) <= 1:
        return "mlp"
    dtype = np.dtype(space.dtype)
    own = f"give {key}: \"package.module:function\" (your own network, docs/library.md)"
    if len(shape) == 3:
        if _image_dtype(space) is None:
            what = (f"its dtype {dtype} is not an image's" if dtype.kind != "f"
                    else f"its floats are not bounded in [0, 1] (low {_bound(space.low)}, high {_bound(space.high)})")
            raise EnvError(f"observation space {space}: a rank-3 Box is read as an image, but {what}. Images are "
                           f"uint8 (0..255), bool, or floats in [0, 1], channels first or last. Fix: convert it "
                           f"with a wrapper (e.g. gymnasium.wrappers.TransformObservation to uint8 or to [0, 1] "
                           f"floats, with its new space), flatten it for an MLP (gymnasium.wrappers."
                           f"FlattenObservation), or {own}")
        layout = image_layout(shape)
        return "nature_cnn" if min(layout.height, layout.width) >= NATURE_MIN else "small_cnn"
    if len(shape) == 2 and _image_dtype(space) is not None:
        fix = (f"add a channel axis (gymnasium.wrappers.ReshapeObservation(env, {(*shape, 1)})) for a CNN, flatten "
               f"it for an MLP (gymnasium.wrappers.FlattenObservation), or {own}")
        raise EnvError(f"observation space {space}: a rank-2 {dtype} Box looks like an image without a channel axis, "
                       f"and the built-in CNNs take rank-3 images (channels first or last). Fix: {fix}")
    if len(shape) >= 4 and _image_dtype(space) is not None:
        raise EnvError(f"observation space {space}: a rank-{len(shape)} {dtype} Box is not an image the built-in "
                       f"CNNs take (rank 3, channels first or last). Fix: for stacked frames of colour images, merge "
                       f"the stack into the channel axis with a wrapper ((k, H, W, C) -> (H, W, k*C)), flatten it "
                       f"for an MLP (gymnasium.wrappers.FlattenObservation), or {own}")
    raise EnvError(f"observation space {space}: a rank-{len(shape)} Box that is not an image (rank 3 of uint8, bool "
                   f"or floats in [0, 1]) has no built-in network: the built-ins take {SUPPORTED}. Fix: flatten it "
                   f"for an MLP (gymnasium.wrappers.FlattenObservation), or {own}")


def _bound(values: np.ndarray) -> str:
    lo, hi = float(np.min(values)), float(np.max(values))
    return f"{lo:g}" if lo == hi else f"{lo:g}..{hi:g}"


def make_encoder(reference: str | None, observation_space: gym.Space, action_space: gym.Space, key: str,
                 normalized: bool = False) -> tuple[nn.Module, int] | None:
    """The encoder a network of the algorithm puts its heads on, and its feature width F; None for the
    built-in MLP on flattened observations.

    ``reference`` (the config's ``<algo>.encoder``) wins when given (policy/encoder.py builds and checks
    it); otherwise ``choose`` decides. ``normalized``: the network reads normalised observations
    (``ppo.obs_norm``), so a CNN does not scale them. Call it once per network trained: each call
    returns a new module.
    """
    check_space(observation_space, key)
    if isinstance(observation_space, PackedDict) and normalized:
        name = key.split(".")[0]
        raise ConfigError(f"{name}.obs_norm=true normalises observations as one vector, but {observation_space.space} "
                          f"observations are a Dict (its images are scaled inside the network): set "
                          f"{name}.obs_norm=false, and scale vector keys that need it in the env (e.g. "
                          f"gymnasium.wrappers.TransformObservation)")
    if reference is not None:
        return build_encoder(reference, observation_space, action_space, key)
    kind = choose(observation_space, key)
    if kind == "mlp":
        return None
    if kind == "dict":
        encoder = DictEncoder(observation_space.space, key)
        return OnPacked(observation_space, encoder), encoder.features
    if kind == "one_hot":
        module: nn.Module = OneHot(observation_space)
    else:
        cls = NatureCNN if kind == "nature_cnn" else SmallCNN
        module = cls(observation_space, scale=not normalized)
    return module, module.features


# ---------------------------------------------------------------- modules


def _init(layer: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    """Orthogonal weights (gain sqrt(2), for ReLU) and zero biases, as the MLPs (networks.py) and SB3's CnnPolicy."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class _ImageEncoder(nn.Module):
    """Images [n, *shape] (float32 of the stored values) -> channels-first, scaled to [0, 1] -> ``self.net``."""

    features: int

    def __init__(self, space: gym.spaces.Box, scale: bool):
        super().__init__()
        if not is_image(space):
            raise EnvError(f"observation space {space} is not an image (a rank-3 Box of uint8, bool, or floats in "
                           f"[0, 1]): {type(self).__name__} cannot read it")
        self.layout = image_layout(tuple(space.shape))
        # uint8 pixels -> [0, 1] by the space's upper bound (255 for pixels); bool and [0, 1] floats as they are
        high = float(np.max(space.high)) if np.dtype(space.dtype) == np.uint8 else 1.0
        self.scale = 1.0 / high if scale and high > 0 else 1.0

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.layout.channels_first:
            obs = obs.permute(0, 3, 1, 2)
        if self.scale != 1.0:
            obs = obs * self.scale
        return self.net(obs)

    def _width(self) -> int:
        layout = self.layout
        with torch.no_grad():
            return int(self.convs(torch.zeros(1, layout.channels, layout.height, layout.width)).shape[1])

    def _linear(self, features: int) -> nn.Linear:
        """The linear layer from the flattened convolutions to ``features``; warns (``warn_big_layer``) when the
        images make it huge."""
        width = self._width()
        warn_big_layer(type(self).__name__, self.layout, width, features)
        return _init(nn.Linear(width, features))


def warn_big_layer(network: str, layout: ImageLayout, width: int, features: int) -> bool:
    """Log a warning, once per process for each network and image size, when the linear layer after a CNN's
    convolutions would have more than ``BIG_LAYER`` weights, naming the fix (smaller images); True if it warned."""
    weights = width * features
    key = (network, layout, features)
    if weights <= BIG_LAYER or key in _warned:
        return False
    _warned.add(key)
    rgb = " --set env.grayscale=true" if layout.channels == 3 else ""
    log.warning(f"{network} on {layout.height}x{layout.width}x{layout.channels} images: the linear layer "
                f"after its convolutions has {width} x {features} = {weights / 1e6:.1f}M weights "
                f"({weights * 4 / 2**20:.0f} MB per network), slow to train and to checkpoint. Fix: shrink the images, "
                f"e.g. --set env.resize=[84,84]{rgb} (relayrl's Gymnasium wrappers, docs/usage.md), or give your "
                f"own encoder")
    return True


class NatureCNN(_ImageEncoder):
    """The DQN Nature paper's network (Mnih et al. 2015): 32 8x8 filters at stride 4, 64 4x4 at stride 2, 64 3x3
    at stride 1 (ReLU after each), then a linear layer to ``features`` (512) and a ReLU. Needs images of at least
    36 pixels on their smaller side."""

    def __init__(self, space: gym.spaces.Box, scale: bool = True, features: int = 512):
        super().__init__(space, scale)
        c = self.layout.channels
        self.convs = nn.Sequential(
            _init(nn.Conv2d(c, 32, 8, stride=4)), nn.ReLU(),
            _init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            _init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten())
        if min(self.layout.height, self.layout.width) < NATURE_MIN:
            raise EnvError(f"observation space {space}: the Nature CNN needs images of at least {NATURE_MIN} pixels "
                           f"on each side, these are {self.layout.height}x{self.layout.width}: use the small CNN "
                           f"(relayrl.policy.encoders:small_cnn)")
        self.net = nn.Sequential(self.convs, self._linear(features), nn.ReLU())
        self.features = features


class SmallCNN(_ImageEncoder):
    """MinAtar's network (Young & Tian 2019) for small grids: 16 3x3 filters at stride 1 and a ReLU, then a linear
    layer to ``features`` (128) and a ReLU. Sides under 3 pixels are zero-padded by one (the filter then fits)."""

    def __init__(self, space: gym.spaces.Box, scale: bool = True, features: int = 128):
        super().__init__(space, scale)
        layout = self.layout
        padding = 1 if min(layout.height, layout.width) < 3 else 0
        self.convs = nn.Sequential(_init(nn.Conv2d(layout.channels, 16, 3, stride=1, padding=padding)), nn.ReLU(),
                                   nn.Flatten())
        self.net = nn.Sequential(self.convs, self._linear(features), nn.ReLU())
        self.features = features


class OneHot(nn.Module):
    """Discrete(n, start) observations [n] -> one-hot [n, n]; MultiDiscrete(nvec, start) [n, *nvec.shape] -> the
    one-hot of each component side by side, [n, sum(nvec)]. No parameters."""

    def __init__(self, space: gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        super().__init__()
        if isinstance(space, gym.spaces.Discrete):
            nvec, start = np.array([int(space.n)]), np.array([int(space.start)])
        elif isinstance(space, gym.spaces.MultiDiscrete):
            nvec, start = np.asarray(space.nvec).reshape(-1), np.asarray(space.start).reshape(-1)
        else:
            raise EnvError(f"observation space {space}: one-hot encoding takes Discrete or MultiDiscrete spaces")
        self.features = int(nvec.sum())
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]]) - start  # column of value v of component i: offset_i + v
        self.register_buffer("offsets", torch.as_tensor(offsets, dtype=torch.long), persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        n = obs.shape[0]  # (not len(obs): a traced graph, relayrl export, would fix the batch size)
        index = obs.reshape(n, -1).long() + self.offsets
        return torch.zeros(n, self.features, dtype=torch.float32, device=obs.device).scatter_(1, index, 1.0)


class _Flat(nn.Module):
    """A vector key as it is: [n, *shape] -> [n, prod(shape)] (rank 0 gives one column)."""

    def __init__(self, features: int):
        super().__init__()
        self.features = features

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.reshape(len(obs), -1)


class DictEncoder(nn.Module):
    """One encoder per key of a Dict (or Tuple) observation, features concatenated in key order: a key's
    image gets its CNN (scaled inside), a category one-hot, a vector its values (``_Flat``; the algorithm's
    MLP heads read them). Reads the Dict of float32 tensors ``policy.packed.Unpack`` gives."""

    def __init__(self, space: gym.spaces.Dict | gym.spaces.Tuple, key: str = "encoder"):
        super().__init__()
        self.space = space
        parts: list[nn.Module] = []
        for field in PackedDict(space).fields:
            kind = _choose_key(space, field.name, field.space, key)
            if kind == "mlp":
                parts.append(_Flat(max(1, int(np.prod(field.shape)))))
            elif kind == "one_hot":
                parts.append(OneHot(field.space))
            else:
                parts.append((NatureCNN if kind == "nature_cnn" else SmallCNN)(field.space))
        self.parts = nn.ModuleList(parts)
        self.features = sum(part.features for part in parts)

    def forward(self, obs: Any) -> torch.Tensor:
        values = leaf_spaces.flatten(self.space, obs)
        return torch.cat([part(value) for part, value in zip(self.parts, values)], dim=-1)


def _choose_key(space: gym.Space, name: str, leaf: gym.Space, key: str) -> str:
    """``choose`` for one key of a Dict; its refusal names the key, the Dict and the fixes that apply to one key."""
    try:
        return choose(leaf, key)
    except EnvError as exc:
        raise EnvError(f"observation space {space}: key {name!r} has no built-in encoder: {exc}. A Dict observation "
                       f"gets one encoder per key ({SUPPORTED}); for this key: drop it "
                       f"(gymnasium.wrappers.FilterObservation), convert it with a wrapper, or give {key}: "
                       f"\"package.module:function\" (your own network, which gets the whole Dict)") from None


# ---------------------------------------------------------------- the built-ins as encoder references


def nature_cnn(observation_space: gym.Space, action_space: gym.Space) -> nn.Module:
    """``<algo>.encoder: relayrl.policy.encoders:nature_cnn``: the Nature CNN, whatever the image's size."""
    return NatureCNN(observation_space)


def small_cnn(observation_space: gym.Space, action_space: gym.Space) -> nn.Module:
    """``<algo>.encoder: relayrl.policy.encoders:small_cnn``: the small CNN, whatever the image's size."""
    return SmallCNN(observation_space)


def one_hot(observation_space: gym.Space, action_space: gym.Space) -> nn.Module:
    """``<algo>.encoder: relayrl.policy.encoders:one_hot``: one-hot for Discrete and MultiDiscrete spaces."""
    return OneHot(observation_space)


def auto(observation_space: gym.Space, action_space: gym.Space) -> nn.Module:
    """The automatic choice as a module (flat observations: ``nn.Flatten``, the MLP heads then read them;
    a Dict: ``DictEncoder``)."""
    if isinstance(observation_space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return DictEncoder(observation_space)
    built = make_encoder(None, observation_space, action_space, "encoder")
    return nn.Flatten() if built is None else built[0]
