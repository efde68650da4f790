"""`ftagent models ...` commands."""

from __future__ import annotations
