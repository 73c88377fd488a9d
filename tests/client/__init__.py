"""Unit tests of registry.client, over an app in process (httpx's WSGI transport)."""
