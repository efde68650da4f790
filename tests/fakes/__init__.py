"""Test doubles that are real programs (e.g. an OpenAI-compatible HTTP server), not mocks."""
