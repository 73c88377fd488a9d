"""The A2A service: tasks of the Agent Protocol service's store, served over
A2A v1.0; here so far its push notifications: the configurations a client
sets per task (``pushconfigs``, in the task store's ``push_configs``
table), the check of where a notification may go (``pushtargets``) and the
signed, retried deliveries (``push``). See docs/a2a.md.

May import: ``registry.protocol`` (the task store whose tasks it serves),
``registry.client.retry_after`` (``Retry-After`` read as every HTTP caller
reads it), and the shared modules.
"""
