"""Test helpers shared by several test files (stand-ins for external services)."""
