"""Shared pytest setup. Helpers (builders, servers, fakeapi) import as plain modules: see pythonpath in setup.cfg."""
