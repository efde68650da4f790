"""`ftagent env ...` commands."""

from __future__ import annotations
