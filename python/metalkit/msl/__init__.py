"""The CPU backend's front end: MSL source -> a self-describing native module."""
from .build import build, build_all, plan

__all__ = ["build", "build_all", "plan"]
