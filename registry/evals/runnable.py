"""An agent loaded from a catalog, as the executor runs it.

The executor takes the client's ``Agent``; a runner that reads a release
itself (the eval runner, ``prompt-registry test``) builds one here from the
catalog's ``LoadedAgent``, pinned to the release it resolved, with a
composite's every agent, so that nothing is fetched again mid-run.
"""

from __future__ import annotations

from registry.client import Agent
from registry.format.loading import LoadedAgent, ReleaseCatalog
from registry.models import Resolution


def agent_at(catalog: ReleaseCatalog, resolution: Resolution, loaded: LoadedAgent) -> Agent:
    """``loaded`` as the executor takes it (the client's ``Agent``), pinned to
    ``resolution``, with a composite's every agent loaded from the same catalog."""

    def agent(item: LoadedAgent, members: dict[str, Agent]) -> Agent:
        return Agent(
            usecase=item.usecase,
            name=item.name,
            path=item.path,
            release=resolution,
            digest=item.digest,
            definition=item.definition,
            partials=item.partials,
            source="local",
            graph=item.graph,
            agents=members,
        )

    members: dict[str, Agent] = {}
    for node in (loaded.graph or {}).get("nodes", []):
        reference = str(node["agent"])
        usecase, name = reference.split("/")
        member = catalog.load(usecase, name)
        if isinstance(member, LoadedAgent) and reference != f"{loaded.usecase}/{loaded.name}":
            members[reference] = agent(member, {})
    return agent(loaded, members)
