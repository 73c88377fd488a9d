"""The ``prompt-registry`` command: argument parsing and printing only,
calling the packages below it.

One module per command group (``serve``, ``releases``, ``authoring``,
``run``, ``agents``, ``index``), each declaring its commands' options
beside their handlers (``register``); ``main`` assembles them and maps
errors to exit codes; ``sources`` decides which library a command reads;
``geventmain`` is the entry point ``serve`` runs again in an interpreter
patched for gevent.

May import: any package of the registry.
"""
