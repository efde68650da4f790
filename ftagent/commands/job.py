"""`ftagent job ...` commands."""

from __future__ import annotations
