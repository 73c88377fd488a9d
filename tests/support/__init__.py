"""Helpers for the tests, not tests: real server processes (registry, redis,
PostgreSQL, OpenAI-compatible model, MCP), the browser fixtures, and the shared
libraries and agents that more than one test module uses."""
