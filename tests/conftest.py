"""Shared test configuration (see tests/conftest.py notes)."""
