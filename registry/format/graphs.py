"""Cycles in the graphs definitions draw: templates that include templates,
composites that run agents.

Both walks are iterative: a chain of includes or of nested composites may be
longer than Python's recursion limit, and a hostile library may make it so.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator


def components(start: str, edges: Callable[[str], Iterable[str]], done: Container[str]) -> Iterator[set[str]]:
    """Tarjan's strongly connected components reachable from ``start``,
    children first: each is yielded once every component it reaches has
    been. Nodes in ``done`` (components an earlier walk finished, looked up
    as the walk goes) are not entered again."""
    index: dict[str, int] = {start: 0}
    low: dict[str, int] = {start: 0}
    stack = [start]
    on_stack = {start}
    work: list[tuple[str, Iterator[str]]] = [(start, iter(edges(start)))]
    while work:
        name, targets = work[-1]
        for target in targets:
            if target in done:
                continue
            if target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                on_stack.add(target)
                work.append((target, iter(edges(target))))
                break
            if target in on_stack:
                low[name] = min(low[name], index[target])
        else:
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[name])
            if low[name] == index[name]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == name:
                        break
                yield component


def shortest_ring(start: str, edges: Callable[[str], Iterable[str]], within: Container[str]) -> tuple[str, ...] | None:
    """The shortest path from ``start`` back to itself through ``within``
    (``start``, ..., ``start``), breadth first; None when there is none."""
    came_from: dict[str, str] = {}
    queue = [start]
    for name in queue:
        for target in edges(name):
            if target == start:
                path = [name]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return (start, *reversed(path[:-1]), start)
            if target in within and target not in came_from:
                came_from[target] = name
                queue.append(target)
    return None
