"""`ftagent datasets ...` commands."""

from __future__ import annotations
