"""labfy-ref: a secure local-model agent runtime and engine bridge, with its qualification suite."""

__version__ = "0.1.0"
