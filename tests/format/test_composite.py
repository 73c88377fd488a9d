"""Composite agents (a ``pattern`` of other agents of the same release):
their format, and the checks at load that need the rest of the release.
Hostile composites are refused in bounded time and never affect other agents."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from registry.client import RegistryClient, RetryPolicy
from registry.errors import InvalidBundle, InvalidDefinition, NotAPrompt
from registry.format.bundle import Bundle
from registry.format.composite import DEFAULT_MAX_LLM_CALLS, MAX_NESTING
from registry.format.definition import definition_digest
from registry.format.loading import LoadedAgent, ReleaseCatalog
from registry.format.safeyaml import YamlLimits
from registry.rendering import RenderLimits
from registry.settings import Settings
from registry.store.worktree import open_worktree_catalog
from tests.conftest import AGENTS, LibraryRepo, client_for, make_app
from tests.support.composites import CLASSIFY, COMPOSITES, DRAFT, GATE, GATED, LEAVES, MAPPED, ROUTED, VOTED
from tests.support.openapi_check import validate_against_openapi
from tests.support.ports import free_port


def _catalog(tmp_path: Path, files: dict[str, str]) -> ReleaseCatalog:
    base = tmp_path / "library"
    for relative, content in files.items():
        target = base / AGENTS / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    return open_worktree_catalog(base, AGENTS, YamlLimits())


def _load(catalog: ReleaseCatalog, agent: str) -> LoadedAgent | InvalidDefinition:
    usecase, name = agent.split("/")
    return catalog.load(usecase, name)


def _problems(catalog: ReleaseCatalog, agent: str) -> list[tuple[str | None, str]]:
    loaded = _load(catalog, agent)
    assert isinstance(loaded, InvalidDefinition), f"{agent} loaded"
    return [(issue.rule, issue.message) for issue in loaded.errors]


def _rules(catalog: ReleaseCatalog, agent: str) -> set[str | None]:
    return {rule for rule, _ in _problems(catalog, agent)}


def _chain(*steps: str, limits: str = "") -> str:
    body = "".join(
        f"    - {{id: s{index}, agent: {agent}, inputs: {{question: q}}}}\n" for index, agent in enumerate(steps)
    )
    return f"name: Chain\npattern:\n  kind: chain\n  steps:\n{body}{limits}"


def test_every_pattern_kind_loads(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, {**LEAVES, **COMPOSITES})
    for relative in COMPOSITES:
        loaded = _load(catalog, relative.removesuffix(".yml"))
        assert isinstance(loaded, LoadedAgent), loaded
        assert loaded.compiled.pattern is not None
    for relative in LEAVES:
        assert isinstance(_load(catalog, relative.removesuffix(".yml")), LoadedAgent)


def test_a_composite_has_no_prompt_to_render(tmp_path: Path) -> None:
    loaded = _load(_catalog(tmp_path, {**LEAVES, **COMPOSITES}), "support/gated")
    assert isinstance(loaded, LoadedAgent)
    with pytest.raises(NotAPrompt, match="composite agent") as refused:
        loaded.compiled.render({"question": "q"}, limits=RenderLimits())
    assert refused.value.problem_fields()["steps"] == [
        {"call": call.label, "agent": call.agent}
        for call in (loaded.compiled.pattern.calls if loaded.compiled.pattern else ())
    ]


def test_a_composites_digest_changes_with_an_agent_it_runs(tmp_path: Path) -> None:
    before = _load(_catalog(tmp_path / "a", {**LEAVES, **COMPOSITES}), "support/routed")
    changed = {**LEAVES, **COMPOSITES, "compliance/response_gate.yml": GATE.replace("May", "Can")}
    after = _load(_catalog(tmp_path / "b", changed), "support/routed")
    assert isinstance(before, LoadedAgent) and isinstance(after, LoadedAgent)
    assert before.digest != after.digest


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name: x\npattern: {kind: chain, steps: [{id: a, agent: chat/minimal}]}\nprompt_templates: {user: hi}\n",
            "'prompt_templates' is for prompt definitions",
        ),
        ("name: x\n", "missing required key 'prompt_templates'"),
    ],
)
def test_a_definition_is_a_leaf_or_a_composite(tmp_path: Path, text: str, message: str) -> None:
    catalog = _catalog(tmp_path, {**LEAVES, "x/both.yml": text})
    assert any(message in shown for _, shown in _problems(catalog, "x/both"))


@pytest.mark.parametrize("reference", ["../secrets", "/etc/passwd", "support/../x", "v1.0.0:support/x", "Support/X"])
def test_a_reference_outside_usecase_slash_name_is_refused(tmp_path: Path, reference: str) -> None:
    catalog = _catalog(tmp_path, {**LEAVES, "x/bad.yml": _chain(f"'{reference}'")})
    assert _rules(catalog, "x/bad") == {"composite-reference"}


def test_an_unknown_agent_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, {**LEAVES, "x/bad.yml": _chain("support/draft_answr")})
    loaded = _load(catalog, "x/bad")
    assert isinstance(loaded, InvalidDefinition)
    (issue,) = loaded.errors
    assert issue.rule == "composite-reference" and "does not exist in this release" in issue.message
    assert issue.hint == "did you mean 'support/draft_answer'?" and issue.line == 5


def test_a_reference_to_an_invalid_agent_makes_the_composite_invalid(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, {**LEAVES, "x/broken.yml": "name: [\n", "x/bad.yml": _chain("x/broken")})
    ((rule, message),) = _problems(catalog, "x/bad")
    assert rule == "composite-reference" and "x/broken, which is invalid" in message


def test_self_reference_is_a_cycle(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, {**LEAVES, "x/me.yml": _chain("x/me")})
    assert ("composite-cycle", "composites reference each other in a cycle: x/me -> x/me") in _problems(catalog, "x/me")


def test_a_long_cycle_is_reported_with_its_path_whichever_is_loaded_first(tmp_path: Path) -> None:
    ring = {f"x/c{i}.yml": _chain(f"x/c{(i + 1) % 30}") for i in range(30)}
    catalog = _catalog(tmp_path, {**LEAVES, **ring})
    messages = dict((rule, message) for rule, message in _problems(catalog, "x/c7"))
    assert messages["composite-cycle"].endswith(
        "x/c7 -> x/c8 -> x/c9 -> x/c10 -> x/c11 -> x/c12 -> (23 more) -> x/c6 -> x/c7"
    )
    assert "x/c0 -> x/c1" in dict(_problems(catalog, "x/c0"))["composite-cycle"]


def test_a_composite_that_reaches_a_cycle_is_invalid_but_others_load(tmp_path: Path) -> None:
    files = {**LEAVES, **COMPOSITES, "x/a.yml": _chain("x/b"), "x/b.yml": _chain("x/a"), "x/top.yml": _chain("x/a")}
    catalog = _catalog(tmp_path, files)
    assert _rules(catalog, "x/top") == {"composite-reference"}
    assert isinstance(_load(catalog, "support/routed"), LoadedAgent)
    assert isinstance(_load(catalog, "chat/minimal"), LoadedAgent)


def test_step_inputs_read_only_what_is_available(tmp_path: Path) -> None:
    bad = GATED.replace("{{ steps.draft.output }}", "{{ steps.gate.output }} {{ inputs.questoin }} {{ results }}")
    problems = _problems(_catalog(tmp_path, {**LEAVES, "x/bad.yml": bad}), "x/bad")
    assert {rule for rule, _ in problems} == {"composite-inputs"}
    shown = " | ".join(message for _, message in problems)
    assert "steps.gate, which is not a step that runs before this" in shown
    assert "inputs.questoin, which the composite's inputs do not declare" in shown
    assert "'results' is not available here" in shown


def test_mapped_inputs_fit_the_agent_called(tmp_path: Path) -> None:
    bad = GATED.replace('inputs: {question: "{{ inputs.question }}"}', 'inputs: {questoin: "{{ inputs.question }}"}')
    shown = [message for _, message in _problems(_catalog(tmp_path, {**LEAVES, "x/bad.yml": bad}), "x/bad")]
    assert "step 'draft' maps input 'questoin', which support/draft_answer does not declare" in shown
    assert "step 'draft' does not map support/draft_answer's required input 'question'" in shown


def test_reading_data_needs_a_json_parser(tmp_path: Path) -> None:
    bad = GATED.replace("{{ steps.draft.output }}", "{{ steps.draft.data }}")
    ((rule, message),) = _problems(_catalog(tmp_path, {**LEAVES, "x/bad.yml": bad}), "x/bad")
    assert rule == "composite-inputs" and "no output_parser of type json" in message


def test_step_ids_are_unique(tmp_path: Path) -> None:
    bad = GATED.replace("- id: gate", "- id: draft")
    assert "composite-duplicate-id" in _rules(_catalog(tmp_path, {**LEAVES, "x/bad.yml": bad}), "x/bad")


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        (
            GATE.split("output_parser:")[0] + "prompt_templates:" + GATE.split("prompt_templates:")[1],
            "no output_parser",
        ),
        (
            GATE.replace("allow: {type: boolean}", "allow: {type: string}"),
            "reads 'allow' from compliance/response_gate as a boolean",
        ),
        (GATE.replace("required: [allow]", "required: []"), "does not require it"),
        (GATE.replace("allow: {type: boolean}, ", ""), "output_schema does not declare it"),
        (GATE.replace("reason: {type: string}", "reason: {type: integer}"), "reads 'reason'"),
    ],
)
def test_a_gate_parses_a_boolean_allow(tmp_path: Path, gate: str, message: str) -> None:
    catalog = _catalog(tmp_path, {**LEAVES, "compliance/response_gate.yml": gate, **COMPOSITES})
    problems = _problems(catalog, "support/gated")
    assert [rule for rule, _ in problems] == ["composite-parser"]
    assert message in problems[0][1]


def test_an_evaluator_and_a_classifier_parse_what_the_pattern_reads(tmp_path: Path) -> None:
    files = {
        **LEAVES,
        **COMPOSITES,
        "support/judge.yml": DRAFT,
        "support/classify.yml": CLASSIFY.replace("label:", "kind:"),
    }
    catalog = _catalog(tmp_path, files)
    assert _rules(catalog, "support/refined") == {"composite-parser", "composite-inputs"}
    assert "composite-parser" in _rules(catalog, "support/routed")


def test_route_labels_equal_the_classifiers_enum_or_a_default_exists(tmp_path: Path) -> None:
    missing = ROUTED.replace("    tech:", "    tehc:")
    files = {**LEAVES, **COMPOSITES, "x/missing.yml": missing}
    files["x/defaulted.yml"] = ROUTED.replace(
        "  routes:", "  default: {agent: chat/minimal, inputs: {question: q}}\n  routes:"
    )
    files["x/free.yml"] = ROUTED.replace("support/classify", "x/free_classify")
    files["x/free_classify.yml"] = CLASSIFY.replace(", enum: [billing, tech]", "")
    catalog = _catalog(tmp_path, files)
    shown = [message for rule, message in _problems(catalog, "x/missing") if rule == "composite-route"]
    assert shown == [
        "route 'tehc' can never be chosen: support/classify gives one of billing, tech",
        "no route for 'tech', and there is no default route",
    ]
    assert isinstance(_load(catalog, "x/defaulted"), LoadedAgent)
    assert _rules(catalog, "x/free") == {"composite-route"}


def test_a_map_needs_max_items_and_bounds_hold(tmp_path: Path) -> None:
    files = {
        **LEAVES,
        "x/no_max.yml": MAPPED.replace("  max_items: 50\n", ""),
        "x/million.yml": VOTED.replace("n: 5", "n: 1000000"),
        "x/concurrency.yml": MAPPED.replace("max_concurrency: 4", "max_concurrency: 1000"),
        "x/over.yml": MAPPED.replace('over: "{{ inputs.items }}"', 'over: "items: {{ inputs.items }}"'),
    }
    catalog = _catalog(tmp_path, files)
    assert any("missing required key 'max_items'" in m for _, m in _problems(catalog, "x/no_max"))
    assert any("1000000 is greater than the maximum of 20" in m for _, m in _problems(catalog, "x/million"))
    assert _rules(catalog, "x/concurrency") == {"schema"}
    assert _rules(catalog, "x/over") == {"composite-inputs"}


def test_nesting_fifty_deep_is_refused_and_the_shallow_end_loads(tmp_path: Path) -> None:
    nested = {f"x/n{i}.yml": _chain(f"x/n{i + 1}" if i < 49 else "support/draft_answer") for i in range(50)}
    catalog = _catalog(tmp_path, {**LEAVES, **nested})
    assert "composite-depth" in _rules(catalog, "x/n0")
    depth = [m for r, m in _problems(catalog, "x/n0") if r == "composite-depth"]
    assert depth == [f"composites nest 50 deep; the limit is {MAX_NESTING}"]
    assert isinstance(_load(catalog, f"x/n{50 - MAX_NESTING}"), LoadedAgent)
    assert isinstance(_load(catalog, f"x/n{49 - MAX_NESTING}"), InvalidDefinition)


def test_the_worst_case_number_of_calls_is_bounded(tmp_path: Path) -> None:
    tool_leaf = DRAFT.replace(
        "prompt_templates:",
        "type: tool_calling\nmax_iterations: 30\ntools: [{name: t, description: T., parameters: {type: object}}]\n"
        "prompt_templates:",
    )
    files = {**LEAVES, **COMPOSITES, "x/tools.yml": tool_leaf}
    # 20 votes of 20 votes of 20 votes of 20 votes: 160,000 calls, past any limit.
    for level in range(4):
        target = "support/draft_answer" if level == 0 else f"x/vote{level - 1}"
        files[f"x/vote{level}.yml"] = (
            f"name: v\npattern:\n  kind: parallel\n  mode: vote\n  n: 20\n  branch: {{agent: {target},"
            " inputs: {question: q}}\n  aggregate: {strategy: concat}\n  limits: {max_llm_calls: 10000}\n"
        )
    files["x/small.yml"] = _chain("x/tools", "x/tools", "x/tools", limits="  limits: {max_llm_calls: 80}\n")
    files["x/default.yml"] = _chain("x/tools", "x/tools", "x/tools", "x/tools")
    catalog = _catalog(tmp_path, files)
    assert isinstance(_load(catalog, "x/vote2"), LoadedAgent)
    assert _problems(catalog, "x/vote3") == [
        (
            "composite-budget",
            "one run may make 160000 model calls in the worst case; the limit is 10000 (limits.max_llm_calls)",
        )
    ]
    assert _problems(catalog, "x/small") == [
        (
            "composite-budget",
            "one run may make 90 model calls in the worst case; the limit is 80 (limits.max_llm_calls)",
        )
    ]
    assert _problems(catalog, "x/default") == [
        (
            "composite-budget",
            f"one run may make 120 model calls in the worst case; the limit is {DEFAULT_MAX_LLM_CALLS}"
            " (the registry's default)",
        )
    ]


def test_yaml_aliases_cannot_build_a_huge_graph(tmp_path: Path) -> None:
    routes = "\n".join(f"    r{i}: *call" for i in range(100))
    text = (
        "name: aliases\ninputs: {type: object, properties: {question: {type: string}}}\n"
        "x-question: &q '{{ inputs.question }}'\n"
        "x-call: &call {agent: support/draft_answer, inputs: {question: *q}}\n"
        "pattern:\n  kind: route\n  classifier: {agent: support/classify, inputs: {question: *q}}\n"
        f"  default: *call\n  routes:\n{routes}\n"
    )
    catalog = _catalog(tmp_path, {**LEAVES, "x/aliases.yml": text})
    assert "composite-route" in _rules(catalog, "x/aliases")
    bomb = (
        "name: bomb\nx-a: &a [{agent: x/y}, {agent: x/y}, {agent: x/y}, {agent: x/y}, {agent: x/y}]\n"
        + "".join(
            f"x-{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
            for i in range(12)
        )
        + "pattern: {kind: chain, steps: *m}\n"
    )
    catalog = _catalog(tmp_path / "bomb", {"x/bomb.yml": bomb})
    assert _rules(catalog, "x/bomb") == {"yaml-syntax"}


def test_a_composite_is_served_and_a_broken_one_breaks_nothing_else(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {**LEAVES, **COMPOSITES, "x/me.yml": _chain("x/me")})
    client = client_for(repo)
    answer = client.get("/v1/agents/support/gated?release=v1.0.0")
    assert answer.json is not None
    assert answer.status_code == 200 and answer.json["definition"]["pattern"]["kind"] == "chain"
    graph = answer.json["graph"]
    assert [node["agent"] for node in graph["nodes"]] == [
        "support/gated",
        "compliance/response_gate",
        "support/draft_answer",
    ]
    assert graph["nodes"][0]["digest"] == answer.json["digest"] == answer.headers["ETag"].strip('"')
    assert graph["max_llm_calls"] == 2
    validate_against_openapi("/v1/agents/{usecase}/{name}", "get", answer)
    minimal = client.get("/v1/agents/chat/minimal?release=v1.0.0").json
    assert minimal is not None
    assert "graph" not in minimal
    # Every agent it can run, in the same answer, as each one's own GET answers it.
    assert list(answer.json["agents"]) == ["compliance/response_gate", "support/draft_answer"]
    for agent, member in answer.json["agents"].items():
        alone = client.get(f"/v1/agents/{agent}?release=v1.0.0").json
        assert alone is not None
        assert member == {key: value for key, value in alone.items() if key != "release"}
    rendered = client.post("/v1/agents/support/gated/render?release=v1.0.0", json={"inputs": {"question": "q"}})
    assert rendered.json is not None
    assert rendered.status_code == 422 and "composite agent" in rendered.json["detail"]
    assert rendered.json["type"] == "/problems/not-a-prompt" and rendered.json["agent"] == "support/gated"
    assert [step["agent"] for step in rendered.json["steps"]] == ["support/draft_answer", "compliance/response_gate"]
    broken = client.get("/v1/agents/x/me?release=v1.0.0")
    assert broken.json is not None
    assert broken.status_code == 422 and broken.json["errors"][0]["rule"] == "composite-cycle"
    assert client.get("/v1/agents/chat/minimal?release=v1.0.0").status_code == 200
    assert client.get("/v1/agents?release=v1.0.0").status_code == 200


def test_the_client_gets_a_composite_with_every_agent_it_can_run_in_one_request(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {**LEAVES, **COMPOSITES})
    requests: list[str] = []

    class Counting(httpx.WSGITransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            requests.append(request.url.path)
            return super().handle_request(request)

    app = make_app(Settings(repo=str(repo.path)))
    with RegistryClient("http://registry", transport=Counting(app=app), release="v1.0.0") as client:
        gated = client.get("support", "gated")
        assert requests == ["/v1/agents/support/gated"]
        assert gated.is_composite and gated.graph is not None and gated.graph["max_llm_calls"] == 2
        draft = gated.agents["support/draft_answer"]
        assert not draft.is_composite and draft.tag == gated.tag == "v1.0.0"
        assert draft.render({"question": "why?"}).messages[0].content == "why?"
        assert draft.digest == client.get("support", "draft_answer").digest
        with pytest.raises(NotAPrompt):
            gated.render({"question": "q"})
        assert not client.get("chat", "minimal").is_composite


def test_a_bundle_verifies_a_composite_against_every_agent_it_can_run(repo: LibraryRepo) -> None:
    from registry.format.bundle import _integrity  # re-sealed, as a careless tool would

    repo.release("v1.0.0", {**LEAVES, **COMPOSITES})
    exported = client_for(repo).get("/v1/bundle?release=v1.0.0")
    assert exported.status_code == 200
    bundle = Bundle(exported.data)
    assert bundle.verify_all() == len(LEAVES) + len(COMPOSITES)
    served = client_for(repo).get("/v1/agents/support/routed?release=v1.0.0").json
    assert served is not None
    assert bundle.agent("support", "routed").digest == served["digest"]
    # A leaf changed and given a digest of its own: every composite that
    # can run it no longer matches, however it was re-sealed.
    content = json.loads(exported.data)
    for agent in content["agents"]:
        if (agent["usecase"], agent["name"]) == ("compliance", "response_gate"):
            agent["source"] = agent["source"].replace("name: Response gate", "name: Anything goes")
            agent["digest"] = definition_digest(agent["source"].encode(), {})
    del content["integrity"]
    content["integrity"] = _integrity(content)
    tampered = Bundle(json.dumps(content).encode())
    assert tampered.agent("compliance", "response_gate").digest
    with pytest.raises(InvalidBundle, match="does not match its digest"):
        tampered.agent("support", "gated")
    assert tampered.agent("support", "draft_answer").digest


@pytest.mark.parametrize(
    ("aggregate", "message"),
    [
        ("{strategy: majority, field: topic}", "does not declare it"),
        ("{strategy: first_valid, field: topic}", "does not declare it"),
    ],
)
def test_a_strategy_reads_a_field_every_branch_declares(tmp_path: Path, aggregate: str, message: str) -> None:
    voted = VOTED.replace("{strategy: majority, field: label}", aggregate)
    problems = _problems(_catalog(tmp_path, {**LEAVES, "support/voted.yml": voted}), "support/voted")
    assert [rule for rule, _ in problems] == ["composite-parser"] and message in problems[0][1]


def test_a_majority_over_a_field_the_branch_may_leave_out_is_refused(tmp_path: Path) -> None:
    optional = CLASSIFY.replace("    required: [label]\n", "")
    files = {**LEAVES, "support/classify.yml": optional, "support/voted.yml": VOTED}
    problems = _problems(_catalog(tmp_path, files), "support/voted")
    assert [rule for rule, _ in problems] == ["composite-parser"] and "does not require it" in problems[0][1]


def test_from_a_bundle_a_composite_comes_with_every_agent_it_can_run(repo: LibraryRepo, tmp_path: Path) -> None:
    repo.release("v1.0.0", {**LEAVES, **COMPOSITES})
    path = tmp_path / "bundle.json"
    path.write_bytes(client_for(repo).get("/v1/bundle?release=v1.0.0").data)
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: every request fails at once
    with RegistryClient(down, release="v1.0.0", bundle=str(path), retries=RetryPolicy(attempts=1)) as client:
        routed = client.get("support", "routed")
        assert routed.source == "bundle" and routed.is_composite
        served = client_for(repo).get("/v1/agents/support/routed?release=v1.0.0").json
        assert served is not None
        assert sorted(routed.agents) == sorted(served["agents"])
        assert {name: agent.digest for name, agent in routed.agents.items()} == {
            name: member["digest"] for name, member in served["agents"].items()
        }
        assert routed.agents["support/draft_answer"].render({"question": "q"}).messages[0].content == "q"


def _wide_routes(width: int) -> dict[str, str]:
    """A route of ``width`` routes to composites that each route ``width`` ways:
    within any call budget (a route counts its largest route), while its graph
    grows with width squared."""
    labels = ", ".join(f"r{i}" for i in range(width))
    question = '{question: "{{ inputs.question }}"}'
    classifier = CLASSIFY.replace("enum: [billing, tech]", f"enum: [{labels}]")

    def route(targets: list[str]) -> str:
        routes = "".join(f"    r{i}: {{agent: {target}, inputs: {question}}}\n" for i, target in enumerate(targets))
        return (
            "name: Wide\ninputs: {type: object, properties: {question: {type: string}}, required: [question]}\n"
            f"pattern:\n  kind: route\n  classifier: {{agent: support/classify, inputs: {question}}}\n"
            f"  routes:\n{routes}"
        )

    files = {**LEAVES, "support/classify.yml": classifier}
    for i in range(width):
        files[f"wide/middle_{i}.yml"] = route(["support/draft_answer"] * width)
    files["wide/top.yml"] = route([f"wide/middle_{i}" for i in range(width)])
    return files


def test_a_graph_too_large_to_answer_is_refused_whatever_its_budget(tmp_path: Path) -> None:
    small = _catalog(tmp_path / "small", _wide_routes(8))
    assert isinstance(_load(small, "wide/top"), LoadedAgent)  # 8 + 8 x 9 calls: fine
    large = _catalog(tmp_path / "large", _wide_routes(25))
    assert isinstance(_load(large, "wide/middle_0"), LoadedAgent)
    problems = _problems(large, "wide/top")
    assert [rule for rule, _ in problems] == ["composite-size"]
    assert "through 676 calls" in problems[0][1] and "the limits are 100 agents and 500 calls" in problems[0][1]


def test_a_composites_answer_repeats_no_nested_graph(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {**LEAVES, **COMPOSITES})
    answer = client_for(repo).get("/v1/agents/support/routed?release=v1.0.0").json
    assert answer is not None
    assert "support/gated" in answer["agents"] and "graph" in answer
    assert all("graph" not in member for member in answer["agents"].values())


def test_a_bundle_names_what_a_composite_runs_that_it_does_not_hold(repo: LibraryRepo) -> None:
    from registry.format.bundle import _integrity  # re-sealed, as a careless tool would

    repo.release("v1.0.0", {**LEAVES, **COMPOSITES})
    content = json.loads(client_for(repo).get("/v1/bundle?release=v1.0.0").data)
    content["agents"] = [a for a in content["agents"] if (a["usecase"], a["name"]) != ("support", "draft_answer")]
    del content["integrity"]
    content["integrity"] = _integrity(content)
    with pytest.raises(InvalidBundle, match="it runs support/draft_answer, which the bundle does not hold"):
        Bundle(json.dumps(content).encode()).agent("support", "gated")
