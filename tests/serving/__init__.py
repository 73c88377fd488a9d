"""Unit tests of registry.serving: the HTTP API, its caching, problems and the service."""
