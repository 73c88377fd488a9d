"""Unit tests of registry.evals: eval files read and streamed, their schema, assertions and judges."""
