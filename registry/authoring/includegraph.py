"""The templates of one catalog as a graph of includes, for lint.

``IncludeGraph`` reads each file once (what it includes, imports or extends,
from ``registry.rendering.analysis``) and answers which partials a
definition's templates reach, and the rings of includes that recurse on
every path (``IncludeCycle``): Jinja finds those only when a render never
ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from registry.format.graphs import components, shortest_ring
from registry.format.loading import ReleaseCatalog
from registry.rendering import Includes, partial_includes


@dataclass(frozen=True)
class IncludeCycle:
    """Templates that include one another in a ring, each unconditionally:
    ``path`` starts at the first by name and ends where it started."""

    path: tuple[str, ...]
    line: int
    """Of the include from the first template to the second."""

    @property
    def shown(self) -> str:
        """The path joined by arrows; a long ring with its middle left out."""
        path = self.path
        if len(path) > _SHOWN_NAMES + 1:
            path = (*path[: _SHOWN_NAMES - 2], f"({len(path) - _SHOWN_NAMES} more)", *path[-2:])
        return " -> ".join(path)


_SHOWN_NAMES = 8

# A file that cannot be read or does not compile may include anything.
_UNREADABLE = Includes((None,), ())


class IncludeGraph:
    """The templates of one catalog as a graph of includes, each file read
    once: which partials a definition reaches, and the rings of includes that
    can never end."""

    def __init__(self, catalog: ReleaseCatalog) -> None:
        self._catalog = catalog
        self._templates: dict[str, Includes | None] = {}
        self._cycles: dict[str, IncludeCycle | None] = {}

    def template(self, name: str) -> Includes | None:
        """The file ``name`` as a template; None when there is no such file."""
        if name not in self._templates:
            self._templates[name] = self._read(name)
        return self._templates[name]

    def reach(self, names: Iterable[str | None]) -> tuple[set[str], bool]:
        """Every file that ``names`` include, directly or not, and whether
        one may be any file at all."""
        reached: set[str] = set()
        unknown = False
        pending = list(names)
        while pending:
            name = pending.pop()
            if name is None:
                unknown = True
                continue
            if name in reached:
                continue
            template = self.template(name)
            if template is not None:
                reached.add(name)
                pending.extend(template.references)
        return reached, unknown

    def cycles(self, names: Iterable[str]) -> list[IncludeCycle]:
        """The rings of unconditional includes that any of ``names`` is in,
        once each, by path."""
        found: dict[tuple[str, ...], IncludeCycle] = {}
        for name in sorted(names):
            if name not in self._cycles:
                self._find_components(name)
            cycle = self._cycles[name]
            if cycle is not None:
                found.setdefault(cycle.path, cycle)
        return sorted(found.values(), key=lambda cycle: cycle.path)

    def _read(self, name: str) -> Includes | None:
        try:
            self._catalog.tree.size(name)
        except KeyError:
            return None
        return partial_includes(self._catalog.environment, name) or _UNREADABLE

    def _always(self, name: str) -> list[str]:
        template = self.template(name)
        return [] if template is None else sorted(t for t, _ in template.always if self.template(t) is not None)

    def _find_components(self, start: str) -> None:
        """The strongly connected components of the unconditional includes
        from ``start``; each records its cycle."""
        for component in components(start, self._always, self._cycles):
            cycle = self._shortest_cycle(component)
            for member in component:
                self._cycles[member] = cycle

    def _shortest_cycle(self, component: set[str]) -> IncludeCycle | None:
        """The shortest ring through the component's first template, or None
        when the component is one template that does not include itself."""
        first = min(component)
        ring = shortest_ring(first, self._always, component)
        if ring is None:
            return None
        template = self.template(first)
        assert template is not None
        return IncludeCycle(ring, dict(template.always)[ring[1]])
