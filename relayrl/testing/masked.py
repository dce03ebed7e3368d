"""An env with action masks, importable by worker processes (``import relayrl.testing.masked`` registers it).

``relayrl-test/MaskedChoice-v0``: each step allows ``allowed`` random options of each branch
(``nvec``: one branch is Discrete(n), several a MultiDiscrete) and pays, per branch, 1/B for choosing
the *lowest* allowed option. The observation ([1, t / length]) says nothing about which options are
allowed, so only a policy that reads the mask can do better than chance: with masks, a policy whose
logits fall with the option index is perfect; without them, the best constant choice pays about
``allowed / n`` of that. A forbidden option costs 1 and is counted in ``MaskedChoiceEnv.forbidden_taken``
(per process). ``dict_obs`` gives the mask as the ``action_mask`` entry of a Dict observation
(PettingZoo classic) instead of ``info["action_mask"]``; ``bad_width`` gives a mask one entry short.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class MaskedChoiceEnv(gym.Env):
    forbidden_taken = 0  # forbidden options chosen, in this process

    def __init__(self, nvec: tuple[int, ...] | list[int] = (5,), allowed: int = 2, length: int = 10,
                 dict_obs: bool = False, bad_width: bool = False):
        self.nvec, self.allowed, self.length = tuple(int(n) for n in nvec), allowed, length
        self.dict_obs, self.bad_width = dict_obs, bad_width
        self.action_space = gym.spaces.Discrete(self.nvec[0]) if len(self.nvec) == 1 else \
            gym.spaces.MultiDiscrete(self.nvec)
        box = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        width = sum(self.nvec)
        self.observation_space = gym.spaces.Dict({"observation": box, "action_mask": gym.spaces.Box(
            0, 1, (width,), np.int8)}) if dict_obs else box
        self.t = 0
        self.mask = np.ones(width, bool)

    def _draw(self) -> None:
        blocks = []
        for n in self.nvec:
            block = np.zeros(n, bool)
            block[self.np_random.choice(n, size=min(self.allowed, n), replace=False)] = True
            blocks.append(block)
        self.mask = np.concatenate(blocks)

    def _out(self) -> tuple:
        obs = np.array([1.0, self.t / self.length], np.float32)
        mask = self.mask[:-1] if self.bad_width else self.mask
        if self.dict_obs:
            return {"observation": obs, "action_mask": mask.astype(np.int8)}, {}
        return obs, {"action_mask": mask.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self._draw()
        return self._out()

    def step(self, action):
        chosen = np.asarray(action).reshape(-1)
        reward, start = 0.0, 0
        for b, n in enumerate(self.nvec):
            block = self.mask[start:start + n]
            option = int(chosen[b])
            if not block[option]:
                MaskedChoiceEnv.forbidden_taken += 1
                reward -= 1.0
            elif option == int(np.flatnonzero(block)[0]):
                reward += 1.0 / len(self.nvec)
            start += n
        self.t += 1
        self._draw()
        obs, info = self._out()
        return obs, reward, False, self.t >= self.length, info


if "relayrl-test/MaskedChoice-v0" not in gym.registry:
    gym.register("relayrl-test/MaskedChoice-v0", entry_point=MaskedChoiceEnv, disable_env_checker=True)
