"""The hybrid action distribution (policy/distributions.py): a Gaussian over the continuous part times
independent categorical branches; log-probability and entropy are the parts' sums (checked against
torch.distributions, an independent implementation), masks apply to the branches only."""

from __future__ import annotations

import torch
from torch.distributions import Categorical, Normal

from relayrl.policy import distributions as D

C, BRANCHES = 2, (3, 4)


def reference(out: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None):
    """log p and entropy from torch.distributions: Normal per continuous column, Categorical per branch."""
    mean, logits = out[:, :C], out[:, C:]
    normal = Normal(mean, log_std.exp().expand_as(mean))
    logp, entropy = normal.log_prob(actions[:, :C]).sum(-1), normal.entropy().sum(-1)
    start = 0
    for b, size in enumerate(BRANCHES):
        part = logits[:, start:start + size]
        if mask is not None:
            part = part.masked_fill(~mask[:, start:start + size], float("-inf"))
        cat = Categorical(logits=part)
        logp = logp + cat.log_prob(actions[:, C + b].long())
        probs = cat.probs
        entropy = entropy - (probs * torch.where(probs > 0, probs.log(), torch.zeros_like(probs))).sum(-1)
        start += size
    return logp, entropy


def example(n: int = 64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    out = torch.randn(n, C + sum(BRANCHES), generator=g)
    log_std = torch.tensor([-0.5, 0.3])
    return out, log_std


def test_log_probability_and_entropy_are_the_sums_of_the_gaussian_s_and_the_branches():
    out, log_std = example()
    torch.manual_seed(1)
    actions, logp_sampled = D.hybrid_sample(out, log_std, BRANCHES, sample=True)
    assert actions.shape == (64, C + len(BRANCHES)) and actions.dtype == torch.float32
    logp, entropy = D.hybrid_logp_entropy(out, log_std, BRANCHES, actions)
    want_logp, want_entropy = reference(out, log_std, actions)
    torch.testing.assert_close(logp, want_logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, want_entropy, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logp_sampled, want_logp, rtol=1e-5, atol=1e-5)  # what act() stores = what the loss sees
    # the discrete part holds whole branch indices in range
    indices = actions[:, C:]
    assert torch.equal(indices, indices.round()) and (indices >= 0).all()
    assert (indices < torch.tensor(BRANCHES, dtype=torch.float32)).all()


def test_masks_apply_to_the_branches_only():
    out, log_std = example(500, seed=2)
    mask = torch.ones(500, sum(BRANCHES), dtype=torch.bool)
    mask[:, [0, 1]] = False  # branch 0: only option 2
    mask[::2, 3:6] = False  # branch 1, even rows: only option 3
    masked = D.mask_hybrid_logits(out, C, mask)
    torch.testing.assert_close(masked[:, :C], out[:, :C])  # the means are untouched
    for sample in (True, False):
        actions, _ = D.hybrid_sample(masked, log_std, BRANCHES, sample=sample)
        assert (actions[:, C] == 2).all()
        assert (actions[::2, C + 1] == 3).all()
    actions, _ = D.hybrid_sample(masked, log_std, BRANCHES, sample=True)
    logp, entropy = D.hybrid_logp_entropy(masked, log_std, BRANCHES, actions)
    want_logp, want_entropy = reference(out, log_std, actions, mask)
    torch.testing.assert_close(logp, want_logp, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(entropy, want_entropy, rtol=1e-4, atol=1e-4)
    assert torch.isfinite(entropy).all()


def test_the_deterministic_action_is_the_means_and_each_branch_s_most_likely_option():
    out, log_std = example()
    actions, logp = D.hybrid_sample(out, log_std, BRANCHES, sample=False)
    assert logp is None
    torch.testing.assert_close(actions[:, :C], out[:, :C])
    assert torch.equal(actions[:, C].long(), out[:, C:C + 3].argmax(-1))
    assert torch.equal(actions[:, C + 1].long(), out[:, C + 3:].argmax(-1))


def test_samples_follow_the_distribution():
    """The continuous part is drawn around the means with exp(log_std); each branch by its probabilities."""
    out = torch.tensor([[0.5, -1.0, 2.0, 0.0, -1.0, 0.0, 0.0, 0.0, 1.0]]).repeat(20000, 1)
    log_std = torch.tensor([-1.0, 0.0])
    torch.manual_seed(3)
    actions, _ = D.hybrid_sample(out, log_std, BRANCHES, sample=True)
    torch.testing.assert_close(actions[:, :C].mean(0), torch.tensor([0.5, -1.0]), atol=0.03, rtol=0)
    torch.testing.assert_close(actions[:, :C].std(0), log_std.exp(), atol=0.03, rtol=0)
    freq = torch.bincount(actions[:, C].long(), minlength=3).float() / len(actions)
    torch.testing.assert_close(freq, torch.softmax(out[0, C:C + 3], -1), atol=0.02, rtol=0)
