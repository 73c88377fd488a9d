"""Unit tests of registry.protocol: the Agent Protocol service, its requests and states."""
