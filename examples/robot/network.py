# examples/robot/network.py
"""The robot's networks (TMRL's actor module): the actor maps observations to actions in [-1, 1], the critic
scores an (observation, action) pair."""

import torch
from torch import nn


def mlp(inputs, hidden, outputs):
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, outputs))


class Actor(nn.Module):
    def __init__(self, obs_size, act_size, hidden=64):
        super().__init__()
        self.net = mlp(obs_size, hidden, act_size)

    def forward(self, obs):
        return torch.tanh(self.net(obs))


class Critic(nn.Module):
    def __init__(self, obs_size, act_size, hidden=64):
        super().__init__()
        self.net = mlp(obs_size + act_size, hidden, 1)

    def forward(self, obs, action):
        return self.net(torch.cat([obs, action], -1))[:, 0]
