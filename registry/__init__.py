"""prompt-registry: a git-native, release-pinned registry of agent definitions.

The package, by concern (each subpackage's docstring says what it owns and
what it may import; data flows down this list, never up):

- ``errors``, ``models``, ``settings``: the exception tree, plain data
  shared by every layer, and the one frozen configuration object;
- ``rendering``: the Jinja sandbox, by concern: limits and budget, the
  guard, the environment, template analysis, rendering messages;
- ``format``: the definition format: schema, YAML, model and its typed
  views, inputs, bundles, output parsers and release versions (shared by
  the client and the executor);
- ``store``: releases and their files, from git or a directory;
- ``web``: what both HTTP servers share: problem responses, bearer tokens,
  body limits and deadlines, the slow lane, gunicorn, multiprocess metrics
  and gevent's patching;
- ``serving``: the service, the HTTP API, the web UI and the WSGI server;
- ``authoring``: lint, examples, diff, scaffolding;
- ``client``: the gateway's client, which imports no server dependency;
- ``providers``: the model interface and its adapters over the providers'
  official SDKs (OpenAI, Anthropic, OpenAI-compatible servers), the models
  file and its routes;
- ``executor``: runs agents and patterns of a pinned release against
  models and tools (``prompt-registry run``), fetching them through the client;
- ``protocol``: the Agent Protocol service over the executor
  (``prompt-registry agents serve``);
- ``cli``: the ``prompt-registry`` command.
"""
