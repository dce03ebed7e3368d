"""The package's version (a module of its own: the modules that record it import nothing else of relayrl for it)."""

__version__ = "0.1.0"
