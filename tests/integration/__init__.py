"""Tests whose subject starts real processes: the CLI, gunicorn, redis, PostgreSQL, model and MCP servers."""
