"""The package version, in its own module so anything may read it without importing more."""

__version__ = "0.1.0"
