"""Unit tests of registry.serving.ui, through Flask's test client."""
