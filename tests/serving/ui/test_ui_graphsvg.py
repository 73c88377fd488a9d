"""A composite's pattern graph drawn as SVG: the library's shapes, a layout
that reads left to right, untrusted names and labels kept inert, and the
largest graph the registry allows."""

from __future__ import annotations

import copy
import random
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

from registry.serving.ui.graphsvg import graph_svg

SVG = "{http://www.w3.org/2000/svg}"

# The GET answer's graph of support/routed_answer and support/gated_answer:
# nodes are the composite, then every agent it can reach, sorted; edges are
# each composite's calls in its pattern's order.
ROUTED: dict[str, Any] = {
    "max_llm_calls": 3,
    "depth": 2,
    "nodes": [
        {"agent": "support/routed_answer", "kind": "route", "digest": "sha256:1"},
        {"agent": "compliance/response_gate", "kind": "leaf", "digest": "sha256:2"},
        {"agent": "support/billing_answer", "kind": "leaf", "digest": "sha256:3"},
        {"agent": "support/classify_request", "kind": "leaf", "digest": "sha256:4"},
        {"agent": "support/draft_answer", "kind": "leaf", "digest": "sha256:5"},
        {"agent": "support/gated_answer", "kind": "chain", "digest": "sha256:6"},
        {"agent": "support/technical_answer", "kind": "leaf", "digest": "sha256:7"},
    ],
    "edges": [
        {"from": "support/routed_answer", "to": "support/classify_request", "call": "the classifier"},
        {"from": "support/routed_answer", "to": "support/billing_answer", "call": "route 'billing'"},
        {"from": "support/routed_answer", "to": "support/technical_answer", "call": "route 'technical'"},
        {"from": "support/routed_answer", "to": "support/gated_answer", "call": "the default route"},
        {"from": "support/gated_answer", "to": "support/draft_answer", "call": "step 'draft'"},
        {"from": "support/gated_answer", "to": "compliance/response_gate", "call": "step 'gate'"},
    ],
}
GATED: dict[str, Any] = {
    "max_llm_calls": 2,
    "depth": 1,
    "nodes": [
        {"agent": "support/gated_answer", "kind": "chain", "digest": "sha256:6"},
        {"agent": "compliance/response_gate", "kind": "leaf", "digest": "sha256:2"},
        {"agent": "support/draft_answer", "kind": "leaf", "digest": "sha256:5"},
    ],
    "edges": [
        {"from": "support/gated_answer", "to": "support/draft_answer", "call": "step 'draft'"},
        {"from": "support/gated_answer", "to": "compliance/response_gate", "call": "step 'gate'"},
    ],
}
# The root calls the leaf directly and through the chain: the leaf is drawn
# once, after its deepest caller.
DIAMOND: dict[str, Any] = {
    "max_llm_calls": 3,
    "depth": 2,
    "nodes": [
        {"agent": "t/root", "kind": "chain"},
        {"agent": "t/shared", "kind": "leaf"},
        {"agent": "t/middle", "kind": "chain"},
    ],
    "edges": [
        {"from": "t/root", "to": "t/middle", "call": "step 'first'"},
        {"from": "t/root", "to": "t/shared", "call": "step 'second'"},
        {"from": "t/middle", "to": "t/shared", "call": "step 'inner'"},
    ],
}
# The same agent generates and evaluates; a chain calls one agent twice.
TWICE: dict[str, Any] = {
    "max_llm_calls": 9,
    "depth": 2,
    "nodes": [
        {"agent": "t/improve", "kind": "evaluator_optimizer"},
        {"agent": "t/model", "kind": "leaf"},
        {"agent": "t/twice", "kind": "chain"},
    ],
    "edges": [
        {"from": "t/improve", "to": "t/model", "call": "the generator"},
        {"from": "t/improve", "to": "t/model", "call": "the evaluator"},
        {"from": "t/improve", "to": "t/twice", "call": "the evaluator"},
        {"from": "t/twice", "to": "t/model", "call": "step 'draft'"},
        {"from": "t/twice", "to": "t/model", "call": "step 'redraft'"},
    ],
}

ELEMENTS = {"svg", "title", "desc", "defs", "marker", "path", "g", "a", "rect", "text"}
ATTRIBUTES = {
    "class", "viewBox", "width", "height", "role", "aria-labelledby", "font-family", "id", "refX", "refY",
    "markerWidth", "markerHeight", "markerUnits", "orient", "d", "fill", "stroke", "stroke-width",
    "stroke-dasharray", "marker-end", "x", "y", "rx", "ry", "text-anchor", "font-size", "href",
}  # fmt: skip
HOSTILE = [
    "<script>alert(1)</script>",
    '" onload="alert(1)',
    "' onmouseover='alert(1)",
    "x/y&amp;<![CDATA[z]]>",
    "--><svg onload=alert(1)>",
    "a/\u202eevil",
]


def link(agent: str) -> str:
    return "/agents/" + quote(agent, safe="/", errors="surrogatepass")


def draw(graph: dict[str, Any], *, title: str = "graph") -> ET.Element:
    return ET.fromstring(graph_svg(graph, href=link, title=title))


def local(element: ET.Element) -> str:
    return element.tag.removeprefix(SVG)


def nodes(svg: ET.Element) -> dict[str, ET.Element]:
    """The node links, by agent (from the URL they link to)."""
    return {unquote(a.attrib["href"].removeprefix("/agents/"), errors="surrogatepass"): a for a in svg.iter(f"{SVG}a")}


def boxes(svg: ET.Element) -> dict[str, tuple[float, float, float, float]]:
    """Each node's box, by agent: left, top, width, height."""
    found = {}
    for agent, a in nodes(svg).items():
        rect = a.find(f"{SVG}rect")
        assert rect is not None
        found[agent] = (
            float(rect.attrib["x"]),
            float(rect.attrib["y"]),
            float(rect.attrib["width"]),
            float(rect.attrib["height"]),
        )
    return found


def edges(svg: ET.Element) -> list[ET.Element]:
    return [g for g in svg.iter(f"{SVG}g") if g.get("class") == "edge"]


def labels(svg: ET.Element) -> list[ET.Element]:
    return [text for text in svg.iter(f"{SVG}text") if text.get("class") == "edge-label"]


def texts(element: ET.Element, tag: str) -> list[str]:
    return ["".join(found.itertext()) for found in element.iter(f"{SVG}{tag}")]


def label_box(text: ET.Element) -> tuple[float, float, float, float]:
    """A label's box as the module estimates it: 0.62em a character, centred, on its baseline."""
    width = len("".join(text.itertext())) * 11 * 0.62
    x, y = float(text.attrib["x"]), float(text.attrib["y"])
    return x - width / 2, y - 9, width, 11


def overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def largest(seed: int = 7) -> dict[str, Any]:
    """100 agents and 500 calls over nine layers (composites nest at most 8 deep)."""
    rng = random.Random(seed)
    names = [f"usecase{i % 7}/agent_{i:03d}" for i in range(100)]
    layer = {name: 0 if i == 0 else 1 + (i - 1) * 8 // 99 for i, name in enumerate(names)}
    calls = []
    for i, name in enumerate(names[1:], 1):
        caller = rng.choice([other for other in names if layer[other] == layer[name] - 1])
        calls.append({"from": caller, "to": name, "call": f"step 'call_{i}'"})
    while len(calls) < 500:
        caller, callee = rng.sample(names, 2)
        if layer[caller] < layer[callee]:
            calls.append({"from": caller, "to": callee, "call": f"route 'r{len(calls)}'"})
    kinds = [{"agent": name, "kind": "chain" if any(c["from"] == name for c in calls) else "leaf"} for name in names]
    return {"max_llm_calls": 100, "depth": 8, "nodes": kinds, "edges": calls}


def test_routed_answer_links_every_agent_to_its_page_with_its_kind() -> None:
    svg = draw(ROUTED)
    found = nodes(svg)
    assert set(found) == {node["agent"] for node in ROUTED["nodes"]}
    for node in ROUTED["nodes"]:
        a = found[node["agent"]]
        assert a.attrib["class"] == f"node node-{node['kind']}"
        assert texts(a, "text") == [node["agent"], node["kind"]]
        assert texts(a, "title") == [f"{node['agent']} ({node['kind']})"]


def test_composites_look_different_from_leaves_without_a_stylesheet() -> None:
    found = nodes(draw(ROUTED))
    fills = {agent: a.find(f"{SVG}rect").attrib["fill"] for agent, a in found.items()}  # type: ignore[union-attr]
    assert fills["support/routed_answer"] == fills["support/gated_answer"] != fills["support/billing_answer"]


def test_every_call_is_an_arrow_with_its_label() -> None:
    svg = draw(ROUTED)
    markers = {marker.attrib["id"] for marker in svg.iter(f"{SVG}marker")}
    drawn = edges(svg)
    assert len(drawn) == len(ROUTED["edges"])
    for g in drawn:
        path = g.find(f"{SVG}path")
        assert path is not None
        assert path.attrib["marker-end"].removeprefix("url(#").removesuffix(")") in markers
    assert texts(svg, "text")[-1] == "worst case: 3 model calls (depth 2)"
    assert sorted("".join(label.itertext()) for label in labels(svg)) == sorted(e["call"] for e in ROUTED["edges"])
    assert "support/routed_answer → support/classify_request: the classifier" in texts(svg, "title")


def test_the_caption_states_the_worst_case() -> None:
    one = {**GATED, "max_llm_calls": 1}
    assert "worst case: 2 model calls (depth 1)" in texts(draw(GATED), "text")
    assert "worst case: 1 model call (depth 1)" in texts(draw(one), "text")
    assert "worst case: unknown model calls" in texts(draw({"nodes": GATED["nodes"]}), "text")


def test_the_drawing_is_an_image_labelled_by_its_title_and_a_description_of_the_calls() -> None:
    svg = draw(GATED, title="support/gated_answer's pattern")
    assert svg.attrib["role"] == "img"
    ids = {element.get("id"): element for element in svg.iter() if element.get("id")}
    title, desc = (ids[name] for name in svg.attrib["aria-labelledby"].split())
    assert (local(title), local(desc)) == ("title", "desc")
    assert title.text == "support/gated_answer's pattern"
    assert desc.text == (
        "support/gated_answer (chain) calls support/draft_answer as step 'draft';"
        " compliance/response_gate as step 'gate'. Worst case: 2 model calls (depth 1)."
    )


def test_the_same_graph_always_gives_the_same_svg() -> None:
    first = graph_svg(ROUTED, href=link, title="routed")
    assert graph_svg(copy.deepcopy(ROUTED), href=link, title="routed") == first
    assert graph_svg(largest(), href=link, title="big") == graph_svg(largest(), href=link, title="big")


def test_the_root_is_leftmost_and_every_callee_right_of_its_caller() -> None:
    for graph in (ROUTED, GATED, DIAMOND, TWICE, largest()):
        found = boxes(draw(graph))
        root = graph["nodes"][0]["agent"]
        assert all(found[root][0] + found[root][2] < box[0] for agent, box in found.items() if agent != root)
        for edge in graph["edges"]:
            caller, callee = found[edge["from"]], found[edge["to"]]
            assert caller[0] + caller[2] < callee[0], edge


def test_a_shared_agent_is_drawn_once_right_of_its_deepest_caller() -> None:
    svg = draw(DIAMOND)
    found = boxes(svg)
    assert len(found) == 3
    assert found["t/root"][0] < found["t/middle"][0] < found["t/shared"][0]
    assert len(edges(svg)) == 3


def test_calls_between_the_same_two_agents_are_drawn_apart() -> None:
    svg = draw(TWICE)
    drawn = edges(svg)
    assert len(drawn) == 5
    paths = [g.find(f"{SVG}path").attrib["d"] for g in drawn]  # type: ignore[union-attr]
    assert len(set(paths)) == 5
    ends = [path.split()[-1] for path in paths]
    assert len(set(ends[:2])) == 2 and len(set(ends[3:])) == 2, "parallel arrows arrive at different points"
    placed = [label_box(label) for label in labels(svg)]
    assert len(placed) == 5
    assert not [(a, b) for i, a in enumerate(placed) for b in placed[i + 1 :] if overlap(a, b)]


def test_labels_overlap_neither_each_other_nor_nodes() -> None:
    for graph in (ROUTED, TWICE, largest()):
        svg = draw(graph)
        placed = [label_box(label) for label in labels(svg)]
        assert len(placed) == len(graph["edges"])
        assert not [(a, b) for i, a in enumerate(placed) for b in placed[i + 1 :] if overlap(a, b)]
        assert not [(a, box) for a in placed for box in boxes(svg).values() if overlap(a, box)]


def test_names_fit_their_boxes() -> None:
    graph = {
        "nodes": [
            {"agent": "support/routed_answer", "kind": "evaluator_optimizer"},
            {"agent": "中文/翻译代理", "kind": "leaf"},
            {"agent": "wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww/x", "kind": "leaf"},
            {"agent": "abc/def", "kind": "leaf"},
        ],
        "edges": [
            {"from": "support/routed_answer", "to": "中文/翻译代理", "call": "the generator"},
            {
                "from": "support/routed_answer",
                "to": "wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww/x",
                "call": "the evaluator",
            },
            {"from": "support/routed_answer", "to": "abc/def", "call": "the evaluator"},
        ],
    }
    svg = draw(graph)
    found = boxes(svg)
    for agent, a in nodes(svg).items():
        name, kind = texts(a, "text")
        cells = sum(2 if "\u4e00" <= character <= "\u9fff" else 1 for character in name)
        assert cells * 12 * 0.6 < found[agent][2], name
        assert len(kind) * 10 * 0.6 < found[agent][2], kind
    assert found["中文/翻译代理"][2] > found["abc/def"][2], "wide characters take two cells"


def test_long_names_and_labels_are_cut_with_an_ellipsis_and_kept_whole_in_titles() -> None:
    name = "support/" + "very_long_agent_name_" * 4 + "end"
    call = "route '" + "a_very_long_route_label_" * 3 + "'"
    svg = draw(
        {"nodes": [{"agent": "t/root", "kind": "route"}], "edges": [{"from": "t/root", "to": name, "call": call}]}
    )
    shown_name = texts(nodes(svg)[name], "text")[0]
    assert "…" in shown_name and shown_name.startswith("support/") and shown_name.endswith("_end")
    assert len(shown_name) < len(name)
    (shown_call,) = ["".join(label.itertext()) for label in labels(svg)]
    assert shown_call.endswith("…") and call.startswith(shown_call[:-1])
    assert f"{name} (unknown)" in texts(svg, "title")
    assert f"t/root → {name}: {call}" in texts(svg, "title")


def test_hostile_names_labels_title_and_urls_come_out_inert() -> None:
    agents = ["t/root", *HOSTILE]
    graph = {
        "max_llm_calls": 1,
        "depth": 1,
        "nodes": [{"agent": agent, "kind": "leaf" if agent != "t/root" else "chain"} for agent in agents],
        "edges": [
            {"from": "t/root", "to": agent, "call": label}
            for agent, label in zip(HOSTILE, reversed(HOSTILE), strict=True)
        ],
    }

    def hostile_href(agent: str) -> str:
        return f'/agents/{agent}?a=1&b="><script>alert(1)</script>'

    drawn = graph_svg(graph, href=hostile_href, title="</title><script>alert(1)</script>")
    assert "<script" not in drawn
    svg = ET.fromstring(drawn)
    for element in svg.iter():
        assert local(element) in ELEMENTS, element.tag
        assert set(element.attrib) <= ATTRIBUTES, element.attrib
    assert sorted(a.attrib["href"] for a in svg.iter(f"{SVG}a")) == sorted(hostile_href(agent) for agent in agents)
    assert texts(svg, "title")[0] == "</title><script>alert(1)</script>"
    titles = texts(svg, "title")
    for agent, label in zip(HOSTILE, reversed(HOSTILE), strict=True):
        assert f"{agent} (leaf)" in titles
        assert f"t/root → {agent}: {label}" in titles
    assert sorted("".join(label.itertext()) for label in labels(svg)) == sorted(HOSTILE)


def test_a_hostile_kind_becomes_unknown_and_never_reaches_an_attribute() -> None:
    graph = {"nodes": [{"agent": "t/root", "kind": 'leaf" onload="alert(1)'}], "edges": []}
    (a,) = nodes(draw(graph)).values()
    assert a.attrib["class"] == "node node-unknown"
    assert texts(a, "text") == ["t/root", "unknown"]


def test_characters_xml_cannot_hold_are_replaced() -> None:
    agent = "t/\x00nul\x1besc\ud800surrogate\uffff"
    svg = draw(
        {
            "nodes": [{"agent": "t/root", "kind": "chain"}],
            "edges": [{"from": "t/root", "to": agent, "call": "step '\x07'"}],
        },
        title="\x0c",
    )
    assert texts(nodes(svg)[agent], "text")[0] == "t/\ufffdnul\ufffdesc\ufffdsurrogate\ufffd"
    assert texts(svg, "title")[0] == "\ufffd"
    assert ["".join(label.itertext()) for label in labels(svg)] == ["step '\ufffd'"]


def test_there_is_no_inline_style_for_a_strict_content_security_policy_to_refuse() -> None:
    for graph in (ROUTED, TWICE):
        svg = draw(graph)
        assert not [element for element in svg.iter() if local(element) == "style" or "style" in element.attrib]


def test_right_to_left_and_wide_names_are_drawn() -> None:
    agents = ["دعم/الإجابة", "עזרה/תשובה", "サポート/回答"]
    graph = {
        "nodes": [{"agent": agent, "kind": "leaf"} for agent in agents],
        "edges": [
            {"from": agents[0], "to": agents[1], "call": "خطوة 'أولى'"},
            {"from": agents[0], "to": agents[2], "call": "ステップ"},
        ],
    }
    svg = draw(graph)
    assert {agent: texts(a, "text")[0] for agent, a in nodes(svg).items()} == {agent: agent for agent in agents}
    assert sorted("".join(label.itertext()) for label in labels(svg)) == sorted(["خطوة 'أولى'", "ステップ"])


def test_an_agent_only_an_edge_names_is_drawn_as_unknown() -> None:
    graph = {
        **GATED,
        "edges": [*GATED["edges"], {"from": "support/gated_answer", "to": "ghost/agent", "call": "step 'x'"}],
    }
    a = nodes(draw(graph))["ghost/agent"]
    assert a.attrib["class"] == "node node-unknown"
    assert texts(a, "text") == ["ghost/agent", "unknown"]


def test_a_composite_calling_nothing_is_drawn_alone() -> None:
    svg = draw({"max_llm_calls": 0, "depth": 1, "nodes": [{"agent": "t/root", "kind": "chain"}], "edges": []})
    assert list(nodes(svg)) == ["t/root"]
    assert edges(svg) == []
    assert texts(svg, "desc") == ["t/root (chain) calls no other agent. Worst case: 0 model calls (depth 1)."]


def test_malformed_entries_are_skipped() -> None:
    graph: dict[str, Any] = {
        "max_llm_calls": True,
        "depth": "2",
        "nodes": [None, {"agent": 3}, {"agent": "t/root", "kind": ["chain"]}, "t/x"],
        "edges": [{"from": "t/root"}, {"from": "t/root", "to": "t/leaf", "call": 5}, 7],
    }
    svg = draw(graph)
    assert list(nodes(svg)) == ["t/root", "t/leaf"]
    assert len(edges(svg)) == 1 and labels(svg) == []
    assert texts(svg, "text")[-1] == "worst case: unknown model calls"
    assert len(edges(draw({"nodes": "nodes", "edges": {"from": "a"}}))) == 0


def test_a_cycle_in_untrusted_input_is_drawn_without_hanging() -> None:
    graph = {
        "nodes": [{"agent": "t/a", "kind": "chain"}, {"agent": "t/b", "kind": "chain"}],
        "edges": [
            {"from": "t/a", "to": "t/b", "call": "step 'there'"},
            {"from": "t/b", "to": "t/a", "call": "step 'back'"},
            {"from": "t/b", "to": "t/b", "call": "step 'again'"},
        ],
    }
    svg = draw(graph)
    found = boxes(svg)
    assert found["t/a"][0] < found["t/b"][0]
    assert len(edges(svg)) == 3
    assert sorted("".join(label.itertext()) for label in labels(svg)) == ["step 'again'", "step 'back'", "step 'there'"]


def test_the_largest_graph_the_registry_allows_is_drawn() -> None:
    graph = largest()
    svg = draw(graph)
    assert len(nodes(svg)) == 100
    assert len(edges(svg)) == 500


def test_the_size_fits_the_content() -> None:
    for graph in (ROUTED, largest()):
        svg = draw(graph)
        width, height = float(svg.attrib["width"]), float(svg.attrib["height"])
        assert svg.attrib["viewBox"] == f"0 0 {svg.attrib['width']} {svg.attrib['height']}"
        for left, top, box_width, box_height in boxes(svg).values():
            assert 0 < left and left + box_width < width and 0 < top and top + box_height < height
        for left, top, label_width, label_height in map(label_box, labels(svg)):
            assert 0 < left and left + label_width < width and 0 < top and top + label_height < height


def references(svg: ET.Element) -> Iterator[str]:
    """Every id an attribute of the drawing points to."""
    for element in svg.iter():
        yield from element.get("aria-labelledby", "").split()
        if "marker-end" in element.attrib:
            yield element.attrib["marker-end"].removeprefix("url(#").removesuffix(")")


def test_two_graphs_on_one_page_share_no_id() -> None:
    drawings = [
        draw(ROUTED, title="support/routed_answer"),
        draw(GATED, title="support/gated_answer"),
        draw(GATED, title="support/routed_answer"),
        draw(ROUTED, title="another page's routed_answer"),
    ]
    ids = [element.attrib["id"] for svg in drawings for element in svg.iter() if "id" in element.attrib]
    assert len(ids) == len(set(ids)) == 4 * 3
    for svg in drawings:
        own = {element.attrib["id"] for element in svg.iter() if "id" in element.attrib}
        assert set(references(svg)) == own
