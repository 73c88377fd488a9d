"""Unit tests of registry.a2a: cards, the mapping of our tasks to A2A's, incoming messages, errors."""
