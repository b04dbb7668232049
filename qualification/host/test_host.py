"""HO-01..HO-05: rows, states, services, mandatory checks, scopes and disposal."""

from __future__ import annotations

import asyncio

import pytest

from labfy_ref.errors import ConfigRefused
from labfy_ref.host import (
    Host,
    HostStartupError,
    RowState,
    Scope,
    ScopeClosed,
    parse_composition,
)
from qualification.host import plugins_for_tests as P

MOD = "qualification.host.plugins_for_tests"


def _doc(*rows: tuple[str, str], disabled: tuple[str, ...] = ()) -> str:
    lines = ["rows:"]
    for row_id, attr in rows:
        lines += [f"  - id: {row_id}", f"    plugin: {MOD}:{attr}"]
        if row_id in disabled:
            lines.append("    disabled: true")
    return "\n".join(lines) + "\n"


@pytest.fixture(autouse=True)
def _clean() -> None:
    P.JOURNAL.clear()
    P.RESOURCES.clear()


def _run(host: Host) -> Exception | None:
    try:
        asyncio.run(host.start())
    except HostStartupError as exc:
        return exc
    return None


@pytest.mark.req("HO-01", "HO-02", "HO-03")
def test_rows_activate_in_dependency_order_and_publish_services() -> None:
    host = Host(parse_composition(_doc(("engine", "Engine"), ("tools", "Tools"),
                                       ("prompt", "SystemPrompt"))), mandatory=["engine"])
    assert _run(host) is None
    assert P.JOURNAL == ["activate prompt", "activate tools", "activate engine"]
    assert host.service("engine") == "engine-from-engine"
    status = host.status()
    assert {r["id"]: r["state"] for r in status["rows"]} == {
        "engine": "ACTIVE", "tools": "ACTIVE", "prompt": "ACTIVE"}
    assert {s["name"]: s["state"] for s in status["services"]} == {
        "engine": "ready", "system_prompt": "ready", "tools": "ready"}


@pytest.mark.req("HO-02", "HO-03", "HO-04")
def test_a_missing_system_prompt_leaves_tools_pending_and_startup_names_it() -> None:
    host = Host(parse_composition(_doc(("tools", "Tools"), ("engine", "Engine"))),
                mandatory=["engine", "tools"])
    error = _run(host)
    assert isinstance(error, HostStartupError)
    assert error.code.value == "CORDIS_UNAVAILABLE"
    assert "missing mandatory services: engine, tools" in error.message
    assert "tools [PENDING: waits for system_prompt]" in error.message
    assert "engine [PENDING: waits for tools]" in error.message
    status = host.status()
    tools = next(r for r in status["rows"] if r["id"] == "tools")
    assert (tools["state"], tools["missing"]) == ("PENDING", ["system_prompt"])
    assert status["missing_mandatory"] == ["engine", "tools"]
    assert {s["name"]: s["state"] for s in status["services"]}["tools"] == "pending"
    # a mandatory service no row even declares is listed too: nobody provides it
    bare = Host(parse_composition(_doc(("prompt", "SystemPrompt"))), mandatory=["engine"])
    assert isinstance(_run(bare), HostStartupError)
    assert [(s["name"], s["state"], s["provider"]) for s in bare.status()["services"]] == [
        ("engine", "pending", None), ("system_prompt", "ready", "prompt")]


@pytest.mark.req("HO-02", "HO-03")
def test_a_plugin_that_raises_is_failed_with_a_bounded_detail() -> None:
    host = Host(parse_composition(_doc(("boom", "Exploding"), ("prompt", "SystemPrompt"))))
    assert _run(host) is None
    row = next(r for r in host.status()["rows"] if r["id"] == "boom")
    assert row["state"] == "FAILED"
    assert row["detail"].startswith("RuntimeError: kaboom") and len(row["detail"]) <= 300
    service = next(s for s in host.status()["services"] if s["name"] == "boom")
    assert service["state"] == "failed" and service["detail"].startswith("RuntimeError")


@pytest.mark.req("HO-01")
def test_an_unknown_plugin_fails_its_row_only() -> None:
    doc = "rows:\n  - id: ghost\n    plugin: no_such_plugin\n  - id: prompt\n" \
          f"    plugin: {MOD}:SystemPrompt\n"
    host = Host(parse_composition(doc))
    assert _run(host) is None
    states = {r["id"]: (r["state"], r["detail"]) for r in host.status()["rows"]}
    assert states["ghost"][0] == "FAILED" and "no plugin named no_such_plugin" in states["ghost"][1]
    assert states["prompt"][0] == "ACTIVE"


@pytest.mark.req("HO-01")
def test_optional_requirements_are_used_when_provided_and_not_waited_for_otherwise() -> None:
    with_metrics = Host(parse_composition(_doc(("engine", "Engine"), ("tools", "Tools"),
                                               ("prompt", "SystemPrompt"),
                                               ("metrics", "Metrics"))))
    assert _run(with_metrics) is None
    assert P.RESOURCES["metrics_seen"] == "metrics-from-metrics"
    without = Host(parse_composition(_doc(("engine", "Engine"), ("tools", "Tools"),
                                          ("prompt", "SystemPrompt"))))
    assert _run(without) is None
    assert P.RESOURCES["metrics_seen"] is None
    disabled = Host(parse_composition(_doc(("engine", "Engine"), ("tools", "Tools"),
                                           ("prompt", "SystemPrompt"), ("metrics", "Metrics"),
                                           disabled=("metrics",))))
    assert _run(disabled) is None
    assert disabled.status()["disabled_rows"] == ["metrics"]


@pytest.mark.req("HO-05")
def test_disposing_the_root_retracts_every_effect_in_reverse_order() -> None:
    async def scenario() -> tuple[Host, list[str]]:
        host = Host(parse_composition(_doc(("prompt", "SystemPrompt"), ("effects", "Effects"),
                                           ("bad", "BadUndo"), ("tools", "Tools"))))
        await host.start()
        assert P.RESOURCES["listeners"] == ["listener"]
        assert not P.RESOURCES["task"].done() and not P.RESOURCES["file"].closed
        errors = await host.stop()
        return host, errors

    host, errors = asyncio.run(scenario())
    assert errors == ["scope root/bad: RuntimeError: failing undo: OSError: undo failed"]
    assert P.RESOURCES["listeners"] == []
    assert P.RESOURCES["task"].cancelled()
    assert P.RESOURCES["file"].closed
    assert [host.service(n) for n in ("system_prompt", "effects", "tools", "bad_undo")] == \
        [None] * 4
    assert {r["state"] for r in host.status()["rows"]} == {RowState.DISPOSED.value}
    undo_order = [e for e in P.JOURNAL if e.startswith("undo")]
    assert undo_order == ["undo tools", "undo bad", "undo effects", "undo prompt"]
    assert host.root.live_effects == []


@pytest.mark.req("HO-05")
def test_stop_twice_is_harmless_and_a_closed_scope_refuses_effects() -> None:
    async def scenario() -> list[str]:
        host = Host(parse_composition(_doc(("prompt", "SystemPrompt"))))
        await host.start()
        await host.stop()
        again = await host.stop()
        with pytest.raises(ScopeClosed):
            host.root.defer(lambda: None, "late")
        return again

    assert asyncio.run(scenario()) == []
    scope = Scope("x")
    assert asyncio.run(scope.aclose()) == [] and asyncio.run(scope.aclose()) == []


@pytest.mark.req("HO-01")
@pytest.mark.parametrize("text", [
    "rows: {}", "[]", "rows:\n  - id: Bad Id\n    plugin: x", "rows:\n  - plugin: x",
    "rows:\n  - id: a\n    plugin: x\n    extra: 1", "rows:\n  - id: a\n    plugin: 'x y'",
    "rows:\n  - id: a\n    plugin: x\n  - id: a\n    plugin: y", "rows: [", "other: 1\nrows: []",
    "rows:\n  - id: a\n    plugin: x\n    disabled: 'no'", "other: 1", "{}",
])
def test_malformed_compositions_are_refused(text: str) -> None:
    with pytest.raises(ConfigRefused):
        parse_composition(text)


@pytest.mark.req("HO-01")
@pytest.mark.parametrize(("text", "message"), [
    ("rows:\n  - id: a\n    plugin: x\n  - id: a\n    plugin: y",
     "composition: row 2: duplicate id a"),
    ("rows:\n  - id: a\n    plugin: x\n  - id: b\n    plugin: y\n  - id: C\n    plugin: z",
     "composition: row 3: id must match [a-z][a-z0-9_-]*"),
    ("rows:\n  - id: a\n    plugin: 'x y'", "composition: row 1: plugin must be an entry "
                                           "point name or module:attr"),
])
def test_a_refusal_names_the_row_counted_from_one(text: str, message: str) -> None:
    with pytest.raises(ConfigRefused) as refused:
        parse_composition(text)
    assert refused.value.message == message


@pytest.mark.req("HO-01")
def test_a_composition_of_256_kib_is_read_and_one_byte_more_is_refused() -> None:
    bound = 256 * 1024
    document = "rows:\n  - id: a\n    plugin: x\n#"
    document += "x" * (bound - len(document))
    assert [row.id for row in parse_composition(document).rows] == ["a"]
    with pytest.raises(ConfigRefused) as refused:
        parse_composition(document + "x")
    assert refused.value.message == f"composition: larger than {bound} bytes"


@pytest.mark.req("HO-05", "RT-09")
@pytest.mark.parametrize(("length", "shown"), [(200, 200), (201, 200), (5000, 200), (20, 20)])
def test_an_undo_that_fails_is_one_line_of_200_characters_at_most(length: int,
                                                                  shown: int) -> None:
    """Whatever an undo raises, its error is one printable line, cut to 200 characters
    (the label and the exception's type first), and the other undos still run."""
    undone: list[str] = []
    label = "x"
    head = f"{label}: ValueError: "
    message = ("m\n" * length)[:length - len(head)]

    def failing() -> None:
        raise ValueError(message)

    async def scenario() -> list[str]:
        scope = Scope("s")
        scope.defer(lambda: undone.append("first"), "first")
        scope.defer(failing, label)
        return await scope.aclose()

    [error] = asyncio.run(scenario())
    assert undone == ["first"]
    assert len(error) == shown and error.isprintable()
    assert error.startswith(head)
    assert error.endswith("…") == (length > 200)


@pytest.mark.req("HO-01")
def test_a_row_may_have_every_key_a_row_knows() -> None:
    [row] = parse_composition("rows:\n  - id: a\n    plugin: x\n    config: {k: 1}\n"
                              "    disabled: true\n").rows
    assert (row.id, row.plugin, row.config, row.disabled) == ("a", "x", {"k": 1}, True)
