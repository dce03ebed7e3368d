"""Test and benchmark helpers that worker processes can import (fault-injecting and slow envs)."""
