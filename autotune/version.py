"""The package version, in one place: the study records it and the report prints it."""

__version__ = "0.1.0"
