"""MC-06: one model, its slots, and the calls that wait for them.

Open WebUI's follow-ups, sent while an answer streamed, waited for llama-server's
one slot and ended MODEL_UNAVAILABLE "no complete reply within 60 s": the deadline
counted the wait. Calls now wait in the client's queue — a chat turn's before a
background one's — and the deadline starts when a call has its slot.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fake_provider import Answer, FakeProvider, Scenario
from labfy_ref.config import RawOptions, resolve
from labfy_ref.errors import ConfigRefused, LabfyError, ModelUnavailable, RuntimeRefused
from labfy_ref.model import ClientLimits, LocalModelClient
from labfy_ref.model.client import Priority, SlotQueue
from labfy_ref.model.endpoint import parse_endpoint
from labfy_ref.model.gguf import open_gguf
from labfy_ref.model.governor import MARGIN_FIXED
from labfy_ref.model.supervised import CTX_SIZE, fitting_slots, supervised_llama
from qualification.conftest import ProviderFactory
from qualification.supervisor.test_governor import llama, meminfo, model

FINAL = json.dumps({"type": "final", "text": "ok"})


def _client(provider: FakeProvider, seconds: float = 30.0,
            slots: SlotQueue | None = None) -> LocalModelClient:
    return LocalModelClient(parse_endpoint(provider.base_url), "fake-model",
                            limits=ClientLimits.with_timeout(seconds), slots=slots)


@pytest.mark.req("MC-06")
def test_waiters_get_the_slot_chat_turns_first_then_in_arrival_order() -> None:
    async def run() -> list[str]:
        queue = SlotQueue(slots=1)
        order: list[str] = []
        release = asyncio.Event()

        async def call(name: str, priority: Priority) -> None:
            async with queue.slot(priority):
                order.append(name)
                if name == "holder":
                    await release.wait()

        holder = asyncio.create_task(call("holder", Priority.CHAT))
        await asyncio.sleep(0)
        waiting = [asyncio.create_task(call(name, priority)) for name, priority in (
            ("title", Priority.BACKGROUND), ("chat-1", Priority.CHAT),
            ("tags", Priority.BACKGROUND), ("chat-2", Priority.CHAT))]
        await asyncio.sleep(0)
        assert (queue.busy, queue.waiting) == (1, 4)
        release.set()
        await asyncio.gather(holder, *waiting)
        assert (queue.busy, queue.waiting) == (0, 0)
        return order

    assert asyncio.run(run()) == ["holder", "chat-1", "chat-2", "title", "tags"]


@pytest.mark.req("MC-06")
def test_a_full_queue_refuses_at_once_and_a_waiter_that_leaves_frees_its_place() -> None:
    async def run() -> None:
        queue = SlotQueue(slots=2, max_waiting=2)
        release = asyncio.Event()

        async def hold() -> None:
            async with queue.slot():
                await release.wait()

        running = [asyncio.create_task(hold()) for _ in range(4)]
        await asyncio.sleep(0)
        assert (queue.busy, queue.waiting) == (2, 2)
        with pytest.raises(RuntimeRefused) as busy:
            async with queue.slot():
                pass
        assert busy.value.code.value == "MODEL_BUSY" and busy.value.status == 503
        running[3].cancel()  # a waiter goes away: its place is free, its slot never taken
        await asyncio.sleep(0)
        assert queue.waiting == 1
        late = asyncio.create_task(hold())
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(*running[:3], late)
        with pytest.raises(asyncio.CancelledError):
            await running[3]
        assert (queue.busy, queue.waiting) == (0, 0), "every slot came back"

    asyncio.run(run())


@pytest.mark.req("MC-06", "MC-03")
def test_the_deadline_starts_when_the_call_has_its_slot(
        provider_factory: ProviderFactory) -> None:
    """Three calls of 0.8 s each, one slot, a 1.5 s deadline: counted from the queue the
    last would time out (2.4 s); counted from its slot each ends in time."""
    provider = provider_factory(Scenario.always(FINAL, delay=0.8))

    async def run() -> list[str]:
        async with _client(provider, 1.5) as client:
            replies = await asyncio.gather(*(client.chat([{"role": "user", "content": "hi"}])
                                             for _ in range(3)))
        return [reply.content for reply in replies]

    assert asyncio.run(run()) == [FINAL] * 3
    assert len(provider.chat_requests()) == 3


@pytest.mark.req("MC-06", "MC-03")
@pytest.mark.parametrize("stream", [False, True])
def test_a_connection_dropped_before_any_byte_is_opened_again_once(
        provider_factory: ProviderFactory, stream: bool) -> None:
    provider = provider_factory(Scenario("drop-once", (Answer(drop=True), Answer(content=FINAL),
                                                       Answer(drop=True), Answer(drop=True))))

    async def ask(client: LocalModelClient) -> str:
        messages = [{"role": "user", "content": "hi"}]
        if not stream:
            return (await client.chat(messages)).content
        return "".join([delta.content async for delta in client.stream_chat(messages)])

    async def run() -> tuple[str, str]:
        async with _client(provider) as client:
            first = await ask(client)
            try:
                await ask(client)
            except ModelUnavailable as exc:
                return first, exc.message
        return first, "no failure"

    first, failure = asyncio.run(run())
    assert first == FINAL, "the drop before any byte was retried"
    assert "transport error" in failure, "a second drop in a row is the call's failure"
    assert len(provider.chat_requests()) == 4, "one retry per call, never more"


@pytest.mark.req("MC-06", "MC-03")
def test_a_stream_cut_after_its_first_bytes_is_never_sent_again(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario("cut", (Answer(content=FINAL, chunk_chars=4,
                                                        drop_after_chunks=2),
                                                 Answer(content=FINAL))))

    async def run() -> str:
        async with _client(provider) as client:
            try:
                async for _ in client.stream_chat([{"role": "user", "content": "hi"}]):
                    pass
            except ModelUnavailable as exc:
                return exc.message
        return "no failure"

    assert "no failure" not in asyncio.run(run())
    assert len(provider.chat_requests()) == 1, "bytes had arrived: never repeated"


@pytest.mark.req("MC-06", "MC-05")
@pytest.mark.parametrize(("value", "slots"), [(None, 1), ("1", 1), ("4", 4), ("16", 16)])
def test_agent_slots_is_a_count_of_1_to_16(value: str | None, slots: int) -> None:
    config = resolve(RawOptions(agent_mode="local-model", agent_model="m", agent_slots=value,
                                agent_endpoint="http://127.0.0.1:18081"), {})
    assert config.agent.slots == slots
    assert config.as_json()["agent"]["slots"] == slots


@pytest.mark.req("MC-06", "MC-05", "CLI-01")
@pytest.mark.parametrize("value", ["0", "17", "-1", "two", "1.5", "\uff12"])
def test_a_slot_count_outside_1_to_16_or_for_the_demo_agent_is_refused(value: str) -> None:
    with pytest.raises(ConfigRefused, match="--agent-slots"):
        resolve(RawOptions(agent_mode="local-model", agent_model="m", agent_slots=value,
                           agent_endpoint="http://127.0.0.1:18081"), {})
    with pytest.raises(ConfigRefused, match="agent mode is 'demo'"):
        resolve(RawOptions(agent_slots="2"), {})


@pytest.mark.req("MC-06", "SM-04")
def test_a_supervised_server_gets_the_slots_memory_allows(tmp_path: Path) -> None:
    # SmolLM2-135M's shape: 23,040 bytes of KV cache a token; 8192 tokens a slot (180 MiB).
    path = model(tmp_path, llama(layers=30, width=576, heads=9, kv_heads=3), 100 * 1024**2)
    per_slot = CTX_SIZE * 23040
    base = 100 * 1024**2 + MARGIN_FIXED + 100 * 1024**2 // 16  # model + margin
    binary = tmp_path / "llama-server"
    binary.write_bytes(b"")
    with open_gguf(path) as pinned:
        for fits, wanted, got in ((1, 4, 1), (2, 4, 2), (3, 2, 2), (9, 16, 9)):
            ram_kb = (base + fits * per_slot) // 1024 + 1
            assert fitting_slots(pinned, binary, tmp_path, wanted,
                                 meminfo=meminfo(tmp_path, ram_kb)) == got, (fits, wanted)
        with pytest.raises(LabfyError, match="need"):
            fitting_slots(pinned, binary, tmp_path, 4, meminfo=meminfo(tmp_path, 1024))
        served = supervised_llama(binary, pinned, "m", cpu_variant=None, timeout_seconds=30,
                                  log_dir=tmp_path / "log", slots=3)
        assert (served.supervisor.parallel, served.slots.slots) == (3, 3)


@pytest.mark.req("MC-06")
def test_a_queue_of_no_waiting_places_refuses_every_call_beyond_the_slots() -> None:
    async def run() -> str:
        queue = SlotQueue(slots=1, max_waiting=0)
        async with queue.slot():
            try:
                async with queue.slot(Priority.BACKGROUND):
                    return "admitted"
            except RuntimeRefused as exc:
                return exc.code.value
        return "unreachable"

    assert asyncio.run(run()) == "MODEL_BUSY"
    with pytest.raises(ValueError, match="at least one slot"):
        SlotQueue(slots=0)


@pytest.mark.req("MC-06", "SV-09")
def test_the_servers_models_queue_as_many_calls_as_it_keeps_connections(tmp_path: Path) -> None:
    from labfy_ref.assemble import endpoint_client  # noqa: PLC0415
    from labfy_ref.modes import MAX_WAITING_CALLS  # noqa: PLC0415
    from labfy_ref.server.connections import DEFAULT_LIMITS  # noqa: PLC0415

    config = resolve(RawOptions(agent_mode="local-model", agent_model="m", agent_slots="3",
                                agent_endpoint="http://127.0.0.1:18081"), {})
    client = endpoint_client(config.agent)
    assert (client.slots.slots, client.slots.max_waiting) == (3, MAX_WAITING_CALLS)
    assert MAX_WAITING_CALLS == DEFAULT_LIMITS.max_connections == 512
    asyncio.run(client.aclose())
