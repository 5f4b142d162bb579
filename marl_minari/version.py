"""The library's version: declared here once (pyproject.toml reads it from this file)."""

__version__ = "0.2.0"
