"""Unit tests of registry.executor, with the scripted model."""
