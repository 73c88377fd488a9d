"""The ``prompt-registry`` command: argument parsing and printing only,
calling the packages below it.

May import: any package of the registry.
"""
