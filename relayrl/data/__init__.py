"""Data: batch ops (GAE), on-policy rollout storage; replay buffers arrive with the off-policy issue."""
