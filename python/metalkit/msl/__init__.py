"""The CPU backend's front end: MSL source -> a self-describing native module."""
from .build import build

__all__ = ["build"]
