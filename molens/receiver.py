"""Helpers for callback receivers (placeholder while being written)."""

from __future__ import annotations

from molens.signing import verify_signature

__all__ = ["verify_signature"]
