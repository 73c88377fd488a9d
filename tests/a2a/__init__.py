"""Unit tests of registry.a2a: push notification targets, configurations and their signing and retry policy."""
