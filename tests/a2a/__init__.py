"""Unit tests of registry.a2a: cards, the mapping of our tasks to A2A's, incoming messages, errors; push notification targets, configurations and their signing and retry policy."""
