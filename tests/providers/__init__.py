"""Unit tests of registry.providers: the models file, its schema and the router."""
