"""A supervised llama-server as the agent's model (SM-07): loading, ready, or gone.

:class:`SupervisedLlama` is what ``serve`` and ``smoke`` give the runtime and
the bridge when ``--model-file`` is set: the same calls as a
:class:`~labfy_ref.model.LocalModelClient` (chat, stream, models, probe),
answered by a client that exists only once the supervisor proved the server
is its own (SM-05) and that carries that server's fresh key. Before that the
model is "loading"; after the child died it is unavailable with the reason
(exit code or signal): every call then raises ``MODEL_UNAVAILABLE`` and no
request is sent anywhere. There is never a fallback to another model.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from labfy_ref.errors import LabfyError, ModelUnavailable
from labfy_ref.model.client import (
    Availability,
    ChatReply,
    ClientLimits,
    LocalModelClient,
    Priority,
    Sampling,
    SlotQueue,
    StreamDelta,
)
from labfy_ref.model.gguf import PinnedGguf
from labfy_ref.model.governor import MEMINFO, ResourceReport, check_resources
from labfy_ref.model.supervisor import LaunchOptions, LocalModelSupervisor, SupervisorState
from labfy_ref.modes import MAX_WAITING_CALLS

log = logging.getLogger("labfy_ref.model")
LOADING = "loading: llama-server is starting"


class SupervisedLlama:
    """The agent's model, served by our own llama-server child."""

    def __init__(self, supervisor: LocalModelSupervisor, model_id: str, *,
                 limits: ClientLimits, sampling: Sampling) -> None:
        self.supervisor = supervisor
        #: As many slots as the server was started with (``--parallel``).
        self.slots = SlotQueue(supervisor.parallel, MAX_WAITING_CALLS)
        self.model = model_id
        self._limits = limits
        self._sampling = sampling
        self._client: LocalModelClient | None = None
        self._failure: str | None = None
        self._starting = False
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Start and prove the child; raise its ``LabfyError`` (also kept as the condition)."""
        self._starting = True
        try:
            await self.supervisor.start()
        except LabfyError as exc:
            self._failure = f"{exc.code.value}: {exc.message}"
            raise
        self._client = LocalModelClient(self.supervisor.endpoint, self.model,
                                        limits=self._limits, api_key=self.supervisor.api_key,
                                        sampling=self._sampling, slots=self.slots)
        log.info("llama-server ready pid=%s cpu_variant=%s", self.supervisor.pid,
                 self.supervisor.cpu_variant)

    async def run(self) -> None:
        """Start in the background of a server (unless started already); then watch the child.

        A failure is logged and shown (:meth:`condition`), never raised.
        """
        with contextlib.suppress(LabfyError):
            if not self._starting:
                await self.start()
            exit_description = await self.supervisor.wait_exited()
            if not self._closed:
                log.error("MODEL_UNAVAILABLE llama-server exited (%s)", exit_description)

    async def aclose(self) -> None:
        """Close the client and stop the child (terminate, then kill); idempotent."""
        self._closed = True
        if self._client is not None:
            await self._client.aclose()
        await self.supervisor.stop()

    # -- condition ------------------------------------------------------------------

    @property
    def state(self) -> str:
        """``loading``, ``ready``, ``exited`` or ``failed`` (a start that did not prove)."""
        supervisor_state = self.supervisor.state
        if self._failure is not None:
            return "failed"
        if supervisor_state is SupervisorState.READY and self._client is not None:
            return "ready"
        if supervisor_state in (SupervisorState.EXITED, SupervisorState.STOPPED) \
                and self._client is not None:
            return "exited"
        return "loading"

    def condition(self) -> tuple[bool, str]:
        """Is the model usable now, and if not, the one-line reason."""
        state = self.state
        if state == "ready":
            return True, "ready"
        if state == "failed":
            assert self._failure is not None
            return False, self._failure
        if state == "exited":
            return False, f"llama-server exited ({self.supervisor.exit_description})"
        return False, LOADING

    def _ready(self) -> LocalModelClient:
        available, diagnostic = self.condition()
        if not available or self._client is None:
            raise ModelUnavailable(diagnostic)
        return self._client

    def describe(self) -> dict[str, Any]:
        """What ``/status`` shows of the supervised server."""
        return {"state": self.state, "cpu_variant": self.supervisor.cpu_variant,
                "model": self.supervisor.opened,
                "notes": list(self.supervisor.notes),
                "exit": self.supervisor.exit_description if self.state == "exited" else None}

    # -- the client's calls ------------------------------------------------------------

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   response_format: Mapping[str, Any] | None = None,
                   max_tokens: int | None = None,
                   priority: Priority = Priority.CHAT) -> ChatReply:
        """One whole reply from our server (``MODEL_UNAVAILABLE`` unless ready)."""
        return await self._ready().chat(messages, response_format=response_format,
                                        max_tokens=max_tokens, priority=priority)

    async def stream_chat(self, messages: Sequence[Mapping[str, Any]], *,
                          response_format: Mapping[str, Any] | None = None,
                          max_tokens: int | None = None,
                          model: str | None = None,
                          priority: Priority = Priority.CHAT) -> AsyncIterator[StreamDelta]:
        """One streamed reply from our server (``MODEL_UNAVAILABLE`` unless ready)."""
        async for delta in self._ready().stream_chat(messages, response_format=response_format,
                                                     max_tokens=max_tokens, model=model,
                                                     priority=priority):
            yield delta

    async def list_models(self) -> tuple[str, ...]:
        """Our server's model ids (``MODEL_UNAVAILABLE`` unless ready)."""
        return await self._ready().list_models()

    async def probe(self) -> Availability:
        """Our server's availability, or why it has none; never raises."""
        available, diagnostic = self.condition()
        if not available or self._client is None:
            return Availability(False, diagnostic)
        return await self._client.probe()


#: The context a supervised server gets: a turn's prompt plus the largest action PR-06 admits.
CTX_SIZE = 8192
#: Deterministic decoding: the same turn on the same model gives the same calls.
SEED = 0
TEMPERATURE = 0.0
REPEAT_PENALTY = 1.1


def govern(model: PinnedGguf, binary: Path, scratch: Path, *, slots: int = 1,
           meminfo: Path = MEMINFO) -> ResourceReport:
    """SM-04 before anything starts: file size, KV cache for ``slots`` contexts and scratch
    disk (never hashes).

    It reads the pinned descriptor (SM-09), so what is sized is what is hashed and run.
    """
    return check_resources(model.by_descriptor() or model.path, ctx_size=CTX_SIZE * slots,
                           scratch=scratch, binary=binary, meminfo=meminfo)


def fitting_slots(model: PinnedGguf, binary: Path, scratch: Path, wanted: int, *,
                  meminfo: Path = MEMINFO) -> int:
    """The most slots, at most ``wanted``, whose contexts fit in memory (BR-20); 1 is
    governed as always (RESOURCES_INSUFFICIENT when even one does not fit)."""
    govern(model, binary, scratch, meminfo=meminfo)
    for slots in range(wanted, 1, -1):
        try:
            govern(model, binary, scratch, slots=slots, meminfo=meminfo)
        except LabfyError:
            continue
        return slots
    return 1


def supervised_llama(binary: Path, model: PinnedGguf, model_id: str, *,
                     cpu_variant: str | None, timeout_seconds: float,
                     log_dir: Path, chat_template_file: Path | None = None,
                     slots: int = 1) -> SupervisedLlama:
    """Our llama-server for the pinned ``model`` (not started), with deterministic sampling;
    ``slots`` contexts of :data:`CTX_SIZE` each (``--parallel``)."""
    options = LaunchOptions(ctx_size=CTX_SIZE * slots, seed=SEED, parallel=slots,
                            cpu_variant=cpu_variant,
                            model_alias=model_id, chat_template_file=chat_template_file)
    supervisor = LocalModelSupervisor(binary, model, options, log_dir=log_dir)
    return SupervisedLlama(supervisor, model_id,
                           limits=ClientLimits.with_timeout(timeout_seconds),
                           sampling=Sampling(temperature=TEMPERATURE, seed=SEED,
                                             repeat_penalty=REPEAT_PENALTY))
