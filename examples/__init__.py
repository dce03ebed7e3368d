"""Runnable examples of relayrl's Python API (docs/library.md); the test suite runs each one."""
