"""The bundled example library: every agent valid, the design example exact."""

from __future__ import annotations

import jinja2
import yaml

from registry.serving.wiring import build_service
from registry.settings import BUNDLED_LIBRARY, Settings

DESIGN_EXAMPLE = BUNDLED_LIBRARY / "ai_gateway" / "agents" / "chat" / "minimal.yml"


def test_every_bundled_agent_is_valid() -> None:
    listing = build_service(Settings()).list_agents()
    invalid = [(a.usecase, a.name, a.errors) for a in listing.agents if not a.valid]
    assert invalid == []
    usecases = {a.usecase for a in listing.agents}
    assert len(usecases) >= 4 and len(listing.agents) >= 8


def test_library_has_an_agent_with_includes_and_one_with_inputs() -> None:
    service = build_service(Settings())
    agents = [service.get_agent(a.usecase, a.name).agent for a in service.list_agents().agents]
    assert any(agent.compiled.partials for agent in agents)
    assert any("inputs" in agent.compiled.definition for agent in agents)


def test_design_example_renders_exactly_as_plain_jinja_would_then_fills_its_question() -> None:
    source = yaml.safe_load(DESIGN_EXAMPLE.read_text())
    plain = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    jinja = [
        {"role": role, "content": plain.from_string(text).render(tools=source["tools"])}
        for role, text in source["prompt_templates"].items()
    ]
    service = build_service(Settings())
    assert service.render("chat", "minimal", {}).prompt.as_dicts() == jinja
    prompt = service.render("chat", "minimal", {"question": "Why?"}).prompt
    assert prompt.as_dicts() == [*jinja[:2], {"role": "user", "content": "Question: Why?"}]
    assert [m.role for m in prompt.messages] == ["system", "assistant", "user"]
    assert prompt.messages[1].content == "{agent_scratchpad}\nThought:"
    assert [p.name for p in prompt.placeholders] == ["agent_scratchpad"]
    assert "<name>issue_reader</name>" in prompt.messages[0].content


def test_every_bundled_file_reads_the_same_without_libyaml() -> None:
    # libyaml accepts a few things PyYAML's pure-Python parser refuses (a '?'
    # inside an unquoted flow-mapping value); the library must load wherever
    # it is copied, with or without the C extension.
    from pathlib import Path

    files = sorted(Path(BUNDLED_LIBRARY).rglob("*.yml"))
    assert len(files) >= 15
    with_libyaml = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert yaml.load(text, Loader=yaml.SafeLoader) == yaml.load(text, Loader=with_libyaml), path


def test_library_has_a_composite_of_every_kind_and_mode_with_examples() -> None:
    service = build_service(Settings())
    composites = [
        agent.compiled
        for agent in (service.get_agent(a.usecase, a.name).agent for a in service.list_agents().agents)
        if agent.compiled.pattern is not None
    ]
    kinds = {(c.pattern.kind, c.pattern.raw.get("mode")) for c in composites if c.pattern is not None}
    assert {"chain", "route", "evaluator_optimizer"} <= {kind for kind, _ in kinds}
    assert ("parallel", "vote") in kinds and ("parallel", "map") in kinds
    assert any(step.get("gate") for c in composites if c.pattern for step in c.pattern.raw.get("steps", []))
    assert all(c.definition.get("examples") for c in composites)


def test_a_composites_graph_names_every_agent_it_can_run_with_the_digest_each_answers() -> None:
    service = build_service(Settings())
    routed = service.get_agent("support", "routed_answer").agent
    assert routed.graph is not None
    nodes = {node["agent"]: node for node in routed.graph["nodes"]}
    assert routed.graph["nodes"][0] == {"agent": "support/routed_answer", "kind": "route", "digest": routed.digest}
    # It nests the gated answer, and reaches that one's agents through it.
    assert nodes["support/gated_answer"]["kind"] == "chain"
    assert "compliance/response_gate" in nodes
    for agent, node in nodes.items():
        usecase, name = agent.split("/")
        assert node["digest"] == service.get_agent(usecase, name).agent.digest, agent
    edges = {(edge["from"], edge["to"]) for edge in routed.graph["edges"]}
    assert ("support/routed_answer", "support/gated_answer") in edges
    assert ("support/gated_answer", "compliance/response_gate") in edges
    assert routed.graph["max_llm_calls"] == 3 and routed.graph["depth"] == 2
