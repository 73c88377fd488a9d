"""A composite agent's pattern graph drawn as one standalone ``<svg>`` element, on the server.

``graph_svg`` takes the ``graph`` member of a composite's GET answer (its
``nodes``, the composite itself first, and its ``edges``, one per call) and
draws it from left to right, in the manner of Sugiyama:

1. Layers: each agent's layer is the longest path to it from the root, so
   the root stands alone on the left and every call points right. An edge
   that closes a cycle (the registry refuses them, but the input is not
   trusted) is laid out reversed and still drawn towards its callee.
2. Columns: layer ``n`` is column ``2n``; the odd columns between hold the
   edges' labels, each label in the column right after its caller, so that
   labels take room like nodes do and never overlap. An edge spanning more
   than one layer passes through the columns between as a thin item.
3. Order: a few barycenter sweeps within each column, keeping the order
   with the fewest crossings. Ties keep the previous order, so the same
   input always gives the same drawing.
4. Vertical positions: each item moves towards the mean of its neighbours
   in the next column, as near as the order and the spacing allow (a least
   squares fit under those constraints: pool adjacent violators).

Every string from the input is untrusted: it is cleaned of what XML cannot
hold and escaped, in text and in attributes alike, as is what ``href``
returns. Shapes carry classes for the page's stylesheet (``node
node-<kind>``, ``edge``, ``edge-label``, ``caption``...) and presentation
attributes as fallbacks, so that the drawing reads standalone; there is no
``style`` attribute or element, which a strict Content-Security-Policy would
refuse.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from bisect import bisect_right, insort
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

KINDS = ("leaf", "chain", "route", "parallel", "evaluator_optimizer")
"""The kinds of agent a graph's nodes name; any other is drawn as ``unknown``."""

_MARGIN = 16
_NODE_HEIGHT = 40
_NODE_PADDING = 10
_NODE_MIN_WIDTH = 96
_NODE_GAP = 18
_LINE_GAP = 8
_LINE_HEIGHT = 2
_LABEL_HEIGHT = 18
_LABEL_PADDING = 6
_COLUMN_GAP = 36
_EMPTY_COLUMN = 12
_PORT_STEP = 6
_LOOP_HEIGHT = 22
_CAPTION_HEIGHT = 28

_NAME_FONT = 12
_KIND_FONT = 10
_LABEL_FONT = 11
_CAPTION_FONT = 12
# A character cell of a monospace font is about 0.6em wide; a little more
# covers the proportional fonts a page's stylesheet may choose instead.
_CELL_EM = 0.62
_NAME_CELLS = 34
_LABEL_CELLS = 28

_SWEEPS = 4
_SETTLING_PASSES = 4

_FONT_FAMILY = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"
_FILLS = {"leaf": "#ffffff", "unknown": "#f3f4f6"}
_COMPOSITE_FILL = "#eef2ff"
_STROKES = {"leaf": "#6b7280", "unknown": "#9ca3af"}
_COMPOSITE_STROKE = "#4f46e5"
_EDGE_STROKE = "#6b7280"
_TEXT_FILL = "#111827"
_MUTED_FILL = "#4b5563"

# What XML 1.0 cannot hold (most control characters, lone surrogates,
# U+FFFE and U+FFFF): a parser would refuse the whole document.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})


def graph_svg(graph: Mapping[str, Any], *, href: Callable[[str], str], title: str) -> str:
    """The graph as a complete ``<svg>`` element, to inline in an HTML page.

    ``href(agent)`` gives the URL each node links to; ``title`` names the
    drawing for assistive technology (with a ``<desc>`` that lists the calls
    in words) and seeds the prefix of its ids, which differ between graphs
    so that several can share a page. The caption states the worst case:
    the graph's ``max_llm_calls`` and ``depth``.
    """
    kinds, edges = _read(graph)
    prefix = "pg" + _digest(title, list(kinds), edges)
    layout = _Layout(kinds, edges)
    caption = _caption(graph.get("max_llm_calls"), graph.get("depth"))
    width = max(layout.width, _MARGIN * 2 + _text_width(caption, _CAPTION_FONT))
    height = layout.height + _CAPTION_HEIGHT
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="pattern-graph" viewBox="0 0 {_n(width)} {_n(height)}"'
        f' width="{_n(width)}" height="{_n(height)}" role="img" aria-labelledby="{prefix}-title {prefix}-desc"'
        f' font-family="{_FONT_FAMILY}">',
        f'<title id="{prefix}-title">{_escape(title)}</title>',
        f'<desc id="{prefix}-desc">{_escape(_description(kinds, edges, caption))}</desc>',
        "<defs>"
        f'<marker id="{prefix}-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8"'
        ' markerUnits="userSpaceOnUse" orient="auto">'
        f'<path class="edge-arrow" d="M0,0 L10,5 L0,10 z" fill="{_EDGE_STROKE}"/>'
        "</marker></defs>",
        '<g class="edges">',
        *layout.edges_svg(f"url(#{prefix}-arrow)"),
        '</g><g class="nodes">',
        *layout.nodes_svg(kinds, href),
        "</g>",
        f'<text class="caption" x="{_MARGIN}" y="{_n(height - _CAPTION_HEIGHT / 2 + 4)}"'
        f' font-size="{_CAPTION_FONT}" fill="{_MUTED_FILL}">{_escape(caption)}</text>',
        "</svg>",
    ]
    return "".join(parts)


@dataclass(frozen=True)
class _Edge:
    """One call: its place in the input, caller, callee and label."""

    index: int
    source: str
    target: str
    call: str


def _read(graph: Mapping[str, Any]) -> tuple[dict[str, str], list[_Edge]]:
    """The graph's agents with their kinds (the root first, then as listed,
    then those only edges name, as ``unknown``) and its edges, skipping
    entries that are not what the GET answer holds."""
    kinds: dict[str, str] = {}
    for node in _entries(graph.get("nodes")):
        agent, kind = node.get("agent"), node.get("kind")
        if isinstance(agent, str):
            kinds.setdefault(agent, kind if isinstance(kind, str) and kind in KINDS else "unknown")
    edges: list[_Edge] = []
    for raw in _entries(graph.get("edges")):
        source, target, call = raw.get("from"), raw.get("to"), raw.get("call")
        if isinstance(source, str) and isinstance(target, str):
            edges.append(_Edge(len(edges), source, target, call if isinstance(call, str) else ""))
    for edge in edges:
        kinds.setdefault(edge.source, "unknown")
        kinds.setdefault(edge.target, "unknown")
    return kinds, edges


def _entries(value: Any) -> list[Mapping[str, Any]]:
    return [entry for entry in value if isinstance(entry, Mapping)] if isinstance(value, list) else []


@dataclass(eq=False)
class _Item:
    """What takes room in a column: a node, an edge's label, or a longer
    edge passing through. ``text`` is the name or label shown, ``y`` the
    centre, ``up`` and ``down`` the neighbours in the columns to the left
    and right."""

    column: int
    width: float
    height: float
    rank: int
    text: str = ""
    node: bool = False
    up: list[_Item] = field(default_factory=list)
    down: list[_Item] = field(default_factory=list)
    position: int = 0
    y: float = 0.0

    def line(self) -> float:
        """Where an edge runs through the item: under its label, if it has one."""
        return self.y + _LABEL_HEIGHT / 2 - 3 if self.text and not self.node else self.y


class _Layout:
    """Where every node, label and edge of a graph goes."""

    def __init__(self, kinds: Mapping[str, str], edges: Sequence[_Edge]) -> None:
        agents = list(kinds)
        layers, reversed_edges = _layers(agents, edges)
        self.nodes: dict[str, _Item] = {}
        for rank, agent in enumerate(agents):
            shown = _fit(agent, _NAME_CELLS, middle=True)
            text = max(_text_width(shown, _NAME_FONT), _text_width(_shown_kind(kinds[agent]), _KIND_FONT))
            width = max(_NODE_MIN_WIDTH, text + 2 * _NODE_PADDING)
            self.nodes[agent] = _Item(2 * layers[agent], width, _NODE_HEIGHT, rank, shown, node=True)
        self.loops = [edge for edge in edges if edge.source == edge.target]
        self.chains: list[tuple[_Edge, list[_Item], bool]] = []
        rank = len(agents)
        for edge in edges:
            if edge.source == edge.target:
                continue
            backwards = edge.index in reversed_edges
            first, last = (edge.target, edge.source) if backwards else (edge.source, edge.target)
            chain = [self.nodes[first]]
            for column in range(self.nodes[first].column + 1, self.nodes[last].column):
                shown = _fit(edge.call, _LABEL_CELLS, middle=False) if len(chain) == 1 else ""
                if shown:
                    item = _Item(
                        column, _text_width(shown, _LABEL_FONT) + 2 * _LABEL_PADDING, _LABEL_HEIGHT, rank, shown
                    )
                else:
                    item = _Item(column, 0, _LINE_HEIGHT, rank)
                chain.append(item)
                rank += 1
            chain.append(self.nodes[last])
            for left, right in pairwise(chain):
                left.down.append(right)
                right.up.append(left)
            self.chains.append((edge, chain, backwards))
        items = [item for _, chain, _ in self.chains for item in chain[1:-1]]
        self.columns: list[list[_Item]] = [
            [] for _ in range(1 + max((item.column for item in self.nodes.values()), default=0))
        ]
        for item in [*self.nodes.values(), *items]:
            self.columns[item.column].append(item)
        _order(self.columns)
        _settle(self.columns)
        self._place()

    def _place(self) -> None:
        """Column lefts and widths, and every ``y`` shifted to start at the margin."""
        self.lefts: list[float] = []
        self.widths: list[float] = []
        x = float(_MARGIN)
        for column in self.columns:
            width = max((item.width for item in column), default=0.0)
            self.lefts.append(x)
            self.widths.append(max(width, _EMPTY_COLUMN))
            x += self.widths[-1] + _COLUMN_GAP
        self.width = x - _COLUMN_GAP + _MARGIN
        tops = [item.y - item.height / 2 - self._room_above(item) for column in self.columns for item in column]
        shift = _MARGIN - min(tops, default=0.0)
        for column in self.columns:
            for item in column:
                item.y += shift
        bottoms = [item.y + item.height / 2 for column in self.columns for item in column]
        self.height = max(bottoms, default=0.0) + _MARGIN

    def _room_above(self, item: _Item) -> float:
        """The height of the loops drawn over a node, with their labels."""
        loops = sum(1 for edge in self.loops if self.nodes[edge.source] is item)
        return _LOOP_HEIGHT * loops + _LABEL_HEIGHT if loops else 0.0

    def center(self, item: _Item) -> float:
        return self.lefts[item.column] + self.widths[item.column] / 2

    def edges_svg(self, arrow: str) -> Iterable[str]:
        """Each edge as a group: a path through its chain, and its label."""
        ports = self._ports()
        for edge, chain, backwards in self.chains:
            first, last = chain[0], chain[-1]
            points = [(self.center(first) + first.width / 2, ports[edge.index, False])]
            for item in chain[1:-1]:
                points.append((self.lefts[item.column], item.line()))
                points.append((self.lefts[item.column] + self.widths[item.column], item.line()))
            points.append((self.center(last) - last.width / 2, ports[edge.index, True]))
            if backwards:
                points.reverse()
            label = chain[1] if len(chain) > 2 and chain[1].text else None
            place = (self.center(label), label.line() - 4, label.text) if label is not None else None
            yield self._edge_svg(edge, _path(points), place, arrow)
        for count, edge in enumerate(self.loops):
            node = self.nodes[edge.source]
            above = sum(1 for other in self.loops[:count] if other.source == edge.source)
            x, top = self.center(node), node.y - node.height / 2
            peak = top - _LOOP_HEIGHT * (above + 1)
            d = f"M{_n(x + 12)},{_n(top)} C{_n(x + 12)},{_n(peak)} {_n(x - 12)},{_n(peak)} {_n(x - 12)},{_n(top)}"
            shown = _fit(edge.call, _LABEL_CELLS, middle=False)
            yield self._edge_svg(edge, d, (x, peak + 2, shown) if shown else None, arrow)

    def _edge_svg(self, edge: _Edge, d: str, label: tuple[float, float, str] | None, arrow: str) -> str:
        """An edge's group; ``label`` is where its text goes (centre and baseline) and the text shown."""
        described = f"{edge.source} → {edge.target}" + (f": {edge.call}" if edge.call else "")
        text = ""
        if label is not None:
            x, y, shown = label
            text = (
                f'<text class="edge-label" x="{_n(x)}" y="{_n(y)}" text-anchor="middle"'
                f' font-size="{_LABEL_FONT}" fill="{_MUTED_FILL}">{_escape(shown)}</text>'
            )
        return (
            f'<g class="edge"><title>{_escape(described)}</title>'
            f'<path class="edge-line" d="{d}" fill="none" stroke="{_EDGE_STROKE}" stroke-width="1.25"'
            f' marker-end="{arrow}"/>{text}</g>'
        )

    def _ports(self) -> dict[tuple[int, bool], float]:
        """Where each edge meets the node at either end of its chain (keyed by
        the edge's index and whether it is the chain's end), spread over the
        node's side in the order of the neighbours, so that edges sharing a
        node, parallel ones too, leave and arrive apart."""
        sides: dict[tuple[str, bool], list[tuple[float, int]]] = {}
        for edge, chain, backwards in self.chains:
            first, last = (edge.target, edge.source) if backwards else (edge.source, edge.target)
            sides.setdefault((first, False), []).append((chain[1].line(), edge.index))
            sides.setdefault((last, True), []).append((chain[-2].line(), edge.index))
        ports: dict[tuple[int, bool], float] = {}
        for (agent, end), found in sides.items():
            node = self.nodes[agent]
            span = min(_PORT_STEP * (len(found) - 1), node.height - 16)
            step = span / (len(found) - 1) if len(found) > 1 else 0.0
            for place, (_, index) in enumerate(sorted(found)):
                ports[index, end] = node.y - span / 2 + place * step
        return ports

    def nodes_svg(self, kinds: Mapping[str, str], href: Callable[[str], str]) -> Iterable[str]:
        """Each node as a link to its agent's page: a rounded box with its name and kind."""
        for agent, item in self.nodes.items():
            kind = kinds[agent]
            x, top = self.center(item) - item.width / 2, item.y - item.height / 2
            fill = _FILLS.get(kind, _COMPOSITE_FILL)
            stroke = _STROKES.get(kind, _COMPOSITE_STROKE)
            dashes = ' stroke-dasharray="4 3"' if kind == "unknown" else ""
            yield (
                f'<a href="{_escape(href(agent))}" class="node node-{kind}">'
                f"<title>{_escape(f'{agent} ({kind})')}</title>"
                f'<rect class="node-box" x="{_n(x)}" y="{_n(top)}" width="{_n(item.width)}"'
                f' height="{_n(item.height)}" rx="6" ry="6" fill="{fill}" stroke="{stroke}"{dashes}/>'
                f'<text class="node-name" x="{_n(self.center(item))}" y="{_n(item.y - 2)}" text-anchor="middle"'
                f' font-size="{_NAME_FONT}" fill="{_TEXT_FILL}">{_escape(item.text)}</text>'
                f'<text class="node-kind" x="{_n(self.center(item))}" y="{_n(item.y + 13)}" text-anchor="middle"'
                f' font-size="{_KIND_FONT}" fill="{_MUTED_FILL}">{_shown_kind(kind)}</text>'
                "</a>"
            )


def _shown_kind(kind: str) -> str:
    return kind.replace("_", " ")


def _layers(agents: Sequence[str], edges: Sequence[_Edge]) -> tuple[dict[str, int], set[int]]:
    """Each agent's layer, and the indexes of the edges that close a cycle.

    A depth-first walk from the root (then from any agent it does not
    reach) finds the edges back to an agent still being walked; reversing
    them leaves an acyclic graph whose reverse postorder is topological.
    Every agent but the root is at least in layer 1, so the root stands alone.
    """
    calls: dict[str, list[_Edge]] = {agent: [] for agent in agents}
    for edge in edges:
        if edge.source != edge.target:
            calls[edge.source].append(edge)
    walking: set[str] = set()
    walked: set[str] = set()
    postorder: list[str] = []
    backwards: set[int] = set()
    for start in agents:
        if start in walked:
            continue
        walking.add(start)
        stack = [(start, iter(calls[start]))]
        while stack:
            agent, pending = stack[-1]
            call = next(pending, None)
            if call is None:
                stack.pop()
                walking.discard(agent)
                walked.add(agent)
                postorder.append(agent)
            elif call.target in walking:
                backwards.add(call.index)
            elif call.target not in walked:
                walking.add(call.target)
                stack.append((call.target, iter(calls[call.target])))
    after: dict[str, list[str]] = {agent: [] for agent in agents}
    for agent in agents:
        for edge in calls[agent]:
            if edge.index in backwards:
                after[edge.target].append(agent)
            else:
                after[agent].append(edge.target)
    layers = {agent: 0 if rank == 0 else 1 for rank, agent in enumerate(agents)}
    for agent in reversed(postorder):
        for successor in after[agent]:
            layers[successor] = max(layers[successor], layers[agent] + 1)
    return layers, backwards


def _order(columns: list[list[_Item]]) -> None:
    """Orders each column to reduce crossings: first by each item's first
    neighbour on the left, then by barycenter sweeps right and left in
    turn, keeping the best order found."""
    for index, column in enumerate(columns):
        if index:
            column.sort(key=lambda item: (min((n.position for n in item.up), default=len(column)), item.rank))
        _number(column)
    best, fewest = [list(column) for column in columns], _crossings(columns)
    for sweep in range(_SWEEPS):
        rightwards = sweep % 2 == 0
        for index in range(1, len(columns)) if rightwards else range(len(columns) - 2, -1, -1):
            column = columns[index]
            column.sort(key=lambda item: (_barycenter(item.up if rightwards else item.down, item), item.position))
            _number(column)
        crossings = _crossings(columns)
        if crossings < fewest:
            best, fewest = [list(column) for column in columns], crossings
    columns[:] = best
    for column in columns:
        _number(column)


def _number(column: list[_Item]) -> None:
    for position, item in enumerate(column):
        item.position = position


def _barycenter(neighbours: list[_Item], item: _Item) -> float:
    if not neighbours:
        return float(item.position)
    return sum(neighbour.position for neighbour in neighbours) / len(neighbours)


def _crossings(columns: list[list[_Item]]) -> int:
    """How many pairs of edge segments cross between adjacent columns:
    with segments sorted by their left end, the inversions of their right ends."""
    total = 0
    for column in columns:
        ends = sorted((item.position, neighbour.position) for item in column for neighbour in item.down)
        seen: list[int] = []
        for _, right in ends:
            total += len(seen) - bisect_right(seen, right)
            insort(seen, right)
    return total


def _settle(columns: list[list[_Item]]) -> None:
    """Gives every item a ``y``: stacked first, then moved towards its
    neighbours, left to right and right to left in turn, and finally
    towards both sides at once."""
    for column in columns:
        _fit_column(column, [0.0] * len(column))
    passes: list[tuple[Iterable[int], Callable[[_Item], list[_Item]]]] = []
    for _ in range(_SETTLING_PASSES):
        passes.append((range(1, len(columns)), lambda item: item.up))
        passes.append((range(len(columns) - 2, -1, -1), lambda item: item.down))
    passes.append((range(len(columns)), lambda item: item.up + item.down))
    for indexes, neighbours in passes:
        for index in indexes:
            column = columns[index]
            wanted = [_mean([n.y for n in neighbours(item)], item.y) for item in column]
            _fit_column(column, wanted)


def _mean(values: list[float], default: float) -> float:
    return sum(values) / len(values) if values else default


def _fit_column(column: list[_Item], wanted: list[float]) -> None:
    """Sets each item's ``y`` nearest (least squares) the one wanted,
    keeping the column's order and the room between items.

    With ``offset`` the room each item needs below the first, ``y - offset``
    must not decrease down the column: an isotonic regression, solved by
    pooling adjacent violators.
    """
    offsets, below = [], 0.0
    for index, item in enumerate(column):
        if index:
            above = column[index - 1]
            gap = _NODE_GAP if item.node and above.node else _LINE_GAP
            below += (above.height + item.height) / 2 + gap
        offsets.append(below)
    blocks: list[tuple[float, int]] = []
    for target in (want - offset for want, offset in zip(wanted, offsets, strict=True)):
        total, count = target, 1
        while blocks and blocks[-1][0] / blocks[-1][1] > total / count:
            pooled, size = blocks.pop()
            total, count = total + pooled, count + size
        blocks.append((total, count))
    fitted = [total / count for total, count in blocks for _ in range(count)]
    for item, value, offset in zip(column, fitted, offsets, strict=True):
        item.y = value + offset


def _path(points: list[tuple[float, float]]) -> str:
    """An SVG path through ``points`` taken in pairs: a curve leaving and
    arriving level from each point to the next, then a straight run to
    the one after (where an edge crosses a column)."""
    (x, y), *rest = points
    d = [f"M{_n(x)},{_n(y)}"]
    for index, (x1, y1) in enumerate(rest):
        if index % 2:
            d.append(f"L{_n(x1)},{_n(y1)}")
        else:
            middle = (x + x1) / 2
            d.append(f"C{_n(middle)},{_n(y)} {_n(middle)},{_n(y1)} {_n(x1)},{_n(y1)}")
        x, y = x1, y1
    return " ".join(d)


def _caption(calls: Any, depth: Any) -> str:
    """The worst case in words, from the graph's ``max_llm_calls`` and ``depth``."""
    counted = isinstance(calls, int) and not isinstance(calls, bool)
    deep = isinstance(depth, int) and not isinstance(depth, bool)
    worst = (f"{calls} model call" + ("" if calls == 1 else "s")) if counted else "unknown model calls"
    return f"worst case: {worst}" + (f" (depth {depth})" if deep else "")


def _description(kinds: Mapping[str, str], edges: Sequence[_Edge], caption: str) -> str:
    """The calls in words, caller by caller in the order of the nodes."""
    calls: dict[str, list[str]] = {}
    for edge in edges:
        calls.setdefault(edge.source, []).append(edge.target + (f" as {edge.call}" if edge.call else ""))
    sentences = [f"{agent} ({kinds[agent]}) calls {'; '.join(calls[agent])}." for agent in kinds if agent in calls]
    if not sentences and kinds:
        root = next(iter(kinds))
        sentences.append(f"{root} ({kinds[root]}) calls no other agent.")
    return " ".join([*sentences, caption[:1].upper() + caption[1:] + "."])


def _digest(title: str, agents: Sequence[str], edges: Sequence[_Edge]) -> str:
    """A short hash of the title and the graph, to keep ids apart on a page."""
    parts = [title, *agents, *(f"{edge.source}\0{edge.target}\0{edge.call}" for edge in edges)]
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _cells(character: str) -> int:
    """How many monospace cells a character takes: two for wide ones, none for marks and format characters."""
    if unicodedata.combining(character) or unicodedata.category(character) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(character) in ("W", "F") else 1


def _text_width(text: str, font_size: float) -> float:
    return sum(_cells(character) for character in text) * font_size * _CELL_EM


def _fit(text: str, cells: int, *, middle: bool) -> str:
    """``text`` cleaned for XML and, when wider than ``cells``, cut with an
    ellipsis: at the end, or in the middle to keep both the usecase and the
    end of an agent's name."""
    text = _NOT_XML.sub("\ufffd", text)
    if sum(_cells(character) for character in text) <= cells:
        return text
    head_cells = cells // 2 if middle else cells - 1
    head = _take(text, head_cells)
    tail = _take(text[::-1], cells - 1 - head_cells)[::-1] if middle else ""
    return f"{head}…{tail}"


def _take(text: str, cells: int) -> str:
    """The longest start of ``text`` within ``cells``."""
    used = 0
    for index, character in enumerate(text):
        used += _cells(character)
        if used > cells:
            return text[:index]
    return text


def _escape(text: str) -> str:
    """Text made safe for XML: in an element or in a quoted attribute."""
    return _NOT_XML.sub("\ufffd", text).translate(_ESCAPES)


def _n(value: float) -> str:
    """A coordinate, to a tenth, without a trailing ``.0``."""
    return f"{round(value, 1) + 0.0:.1f}".removesuffix(".0")
