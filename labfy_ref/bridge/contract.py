"""The engine contract (BR-01): only the shapes the HTTP API needs, no engine vocabulary.

A host publishes an object satisfying :class:`Engine` as service ``engine``;
the bridge routes get it by name and know nothing else about it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Protocol, runtime_checkable

from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.modes import Approval

#: Sessions per page of :meth:`Engine.list_sessions` when the caller names no limit.
PAGE_SIZE = 50
#: The largest page a caller may ask for.
MAX_PAGE_SIZE = 200
#: A direct route (BR-17) is written ``direct:<provider>:<model>``.
DIRECT_PREFIX = "direct"


@dataclasses.dataclass(frozen=True, slots=True)
class PriorMessage:
    """One earlier message of a transcript a caller supplies (BR-13)."""

    role: Literal["user", "assistant"]
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Transcript:
    """What a chat client sends for one turn of a transient session (BR-13).

    ``model`` is a qualified route (BR-10); ``context`` the caller's system
    messages, in order (the session's context, never user messages);
    ``history`` the conversation before ``text``, the new user message;
    ``response_format`` the JSON shape the client wants the answer in (BR-20), if any.
    """

    model: str
    context: tuple[str, ...]
    history: tuple[PriorMessage, ...]
    text: str
    response_format: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class DirectMessage:
    """One message of a direct call, as the client sent it (BR-17)."""

    role: Literal["system", "user", "assistant"]
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class DirectCall:
    """A chat request asked of a provider's model directly (BR-17): the transcript as sent,
    no engine prompt, no tools, no session, no workspace data."""

    model: str  # direct:<provider>:<model>
    messages: tuple[DirectMessage, ...]
    #: The client's ``response_format`` (checked and bounded), or None for plain text.
    response_format: dict[str, Any] | None = None
    max_tokens: int | None = None


@runtime_checkable
class Engine(Protocol):
    """What a web host may ask of an embedded agent engine."""

    def status(self) -> dict[str, Any]:
        """Lifecycle of the engine's services."""
        ...

    def model_configuration(self) -> dict[str, Any]:
        """The default model and provider of the active composition."""
        ...

    def list_sessions(self, limit: int = PAGE_SIZE,
                      cursor: str | None = None) -> dict[str, Any]:
        """One page of session summaries, newest first: ``{"sessions", "next_cursor"}``.

        ``limit`` is 1..``MAX_PAGE_SIZE``; ``cursor`` is an opaque ``next_cursor`` from
        an earlier page (None: the first page) and stays valid while sessions are
        created — a new session never shifts the pages after the first. Anything
        else is VALIDATION_FAILED. ``next_cursor`` is None on the last page.
        """
        ...

    def get_session(self, session_id: str) -> dict[str, Any]:
        """A session with its projected messages."""
        ...

    def create_session(self, options: dict[str, Any]) -> dict[str, Any]:
        """Reserve an opaque id (and its log) for a new session."""
        ...

    def update_session_settings(self, session_id: str,
                                settings: dict[str, Any]) -> dict[str, Any]:
        """Save the model or permission mode of an idle session."""
        ...

    def decide_approval(self, session_id: str, approval_id: str,
                        decision: Approval) -> dict[str, Any]:
        """Resolve a pending approval of the session's running turn."""
        ...

    async def delete_session(self, session_id: str) -> None:
        """End the session (cancel, release) and remove its log."""
        ...

    def session_context(self, session_id: str) -> dict[str, Any]:
        """What the session's model is told besides its messages, as text: ``{"system_prompt",
        "injected": [...], "guidance": {...}}`` (seed 003: shown in Session context, never as
        user messages; ``guidance``: the narrowing's profile in force, PR-08)."""
        ...

    def list_agents(self) -> list[dict[str, Any]]:
        """Active agents."""
        ...

    def list_tools(self) -> list[dict[str, Any]]:
        """Tools visible to the model."""
        ...

    async def list_models(self) -> dict[str, Any]:
        """The provider's real models and the current default."""
        ...

    def send_message(self, session_id: str, text: str, *, headless: bool = False) -> StreamHandle:
        """Start a turn; the handle replays everything already emitted."""
        ...

    async def cancel(self, session_id: str) -> bool:
        """Cancel the session's running turn, if any."""
        ...

    async def list_direct_models(self) -> list[dict[str, Any]]:
        """The direct routes (BR-17): ``{"id": "direct:<provider>:<model>", "provider",
        "model"}`` for each model of a provider that is a model (the demo agent has none)."""
        ...

    async def run_direct(self, call: DirectCall) -> StreamHandle:
        """Ask ``call.model`` directly; the handle streams its text, then ``done`` (an
        ``error`` first if it failed). An unlisted route is UNKNOWN_MODEL before anything."""
        ...

    async def run_transient(self, transcript: Transcript) -> StreamHandle:
        """Run one headless turn in a new transient session seeded with ``transcript``.

        The session is never listed, never stored and never shared: its log is
        deleted once the turn completes, fails or is cancelled (``handle.cancel()``).
        An unknown model is MODEL_NOT_FOUND before anything starts.
        """
        ...
