"""Policies, networks, action distributions and observation normalisation."""
