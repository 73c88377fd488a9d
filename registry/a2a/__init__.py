"""A2A v1.0 over the Agent Protocol service's tasks, with the official ``a2a-sdk``.

The SDK owns the protocol: its JSON-RPC and HTTP+JSON bindings (with the
0.3 method names too), its request types, its errors and their wire
format, its server-sent events. This package owns what it serves:

- ``cards``: an Agent Card per agent of the served release, and the
  service's well-known card listing them as skills, cached per release commit;
- ``mapping``: our tasks, actions and artifacts as A2A's (pure functions);
- ``messages``: what an incoming A2A message may say, checked first (pure);
- ``stream``: a task's event log as A2A's stream events;
- ``handler``: the SDK's ``RequestHandler`` over our ``TaskService``;
- ``access``: bearer tokens, the body limit and the call context;
- ``routes``: ``a2a_routes``, what the service's ASGI application mounts.

- ``pushtargets``: where a push notification may go (public addresses,
  unless the operator allows a network), checked again at each send;
- ``pushconfigs``: the configurations a client sets per task, in the task
  store's ``push_configs`` table;
- ``push``: the signed (HMAC), retried deliveries;
- ``pushrequests``: A2A's push configuration operations over ``pushconfigs``
  (``handler`` reaches them through its small ``PushConfigs`` protocol);
- ``pushnotifier``: what a task's changes send, from the process that made
  them (a listener of the service's task log), and the task as it is to a
  configuration just set.

See docs/a2a.md.

May import: ``registry.protocol`` (the tasks it serves), ``registry.client``
(the agents its cards describe), ``registry.format.definition`` and
``registry.format.spec`` (what a definition declares), ``registry.web.auth``
(the bearer tokens both services take), the shared modules, and the
``a2a`` SDK, Starlette and sse-starlette.
"""
