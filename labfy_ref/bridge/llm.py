"""The engine's model providers and their qualified routes (BR-10, BR-19).

A model keeps its provider identity as ``engine:<provider>:<model>`` with
percent-encoded components, so any model name round-trips. The first provider
is the runtime's own: ``local`` (the configured llama-server, through
:class:`~labfy_ref.model.LocalModelClient`) or ``demo`` (the deterministic demo
policy, offline); ``serve --providers FILE`` adds named ones, each a local model
of its own. A route names its provider: a provider that is down is said to be
down, never replaced by another.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Protocol

from labfy_ref.assemble import endpoint_client
from labfy_ref.config import AgentConfig
from labfy_ref.errors import ErrorCode, LabfyError, ModelUnavailable, RuntimeRefused
from labfy_ref.model import LocalModelClient, StreamDelta
from labfy_ref.model.client import Priority
from labfy_ref.model.demo import DemoAgent
from labfy_ref.model.route import ModelRoute
from labfy_ref.model.supervised import SupervisedLlama
from labfy_ref.modes import AgentMode
from labfy_ref.protocol import Decoding

__all__ = ["DemoProvider", "LocalProvider", "ModelClient", "ModelProvider", "ModelRoute",
           "Providers", "provider_for"]

#: BR-19: how long one provider's model list may take before it is listed unavailable (the
#: list is what a page polls; one provider that hangs must not hold the others' answer).
LISTING_SECONDS = 5.0

#: The server's model client: a plain one, or a supervised llama-server's.
ModelClient = LocalModelClient | SupervisedLlama


class ModelProvider(Protocol):
    """Streams chat completions for the engine."""

    name: str
    #: The model a route to this provider names when none is chosen.
    default_model: str
    #: Are its models language models? (The demo policy is not: it counts no tokens and
    #: has no direct route, BR-17.)
    is_model: bool

    async def models(self) -> list[str]:
        """The provider's real model ids."""
        ...

    def stream(self, model: str, messages: Sequence[Mapping[str, Any]],
               decoding: Decoding) -> AsyncIterator[StreamDelta]:
        """Stream one completion under the round's constrained decoding (PR-06)."""
        ...

    def direct(self, model: str, messages: Sequence[Mapping[str, Any]],
               response_format: Mapping[str, Any] | None, max_tokens: int | None, *,
               background: bool = True) -> AsyncIterator[StreamDelta]:
        """Stream one completion of ``messages`` as sent (BR-17): no action contract; a
        ``background`` call waits for the model behind every chat turn's."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class LocalProvider:
    """The configured local llama-server: one client (one connection pool) for every model.

    A session may name any model id of that server; the id travels in each
    request, so a thousand model names cost a thousand strings, not a thousand
    connection pools.
    """

    is_model = True

    def __init__(self, config: AgentConfig, client: ModelClient | None = None, *,
                 name: str = "local") -> None:
        assert config.model_id is not None
        self.name = name
        self.default_model = config.model_id
        self._owned = client is None
        self._client: ModelClient = client if client is not None else endpoint_client(config)

    async def models(self) -> list[str]:
        """``GET /v1/models`` of the server; MODEL_UNAVAILABLE if it cannot be read."""
        return list(await self._client.list_models())

    def stream(self, model: str, messages: Sequence[Mapping[str, Any]],
               decoding: Decoding) -> AsyncIterator[StreamDelta]:
        """Stream from llama-server."""
        return self._client.stream_chat(messages, response_format=decoding.response_format,
                                        max_tokens=decoding.max_tokens, model=model)

    def direct(self, model: str, messages: Sequence[Mapping[str, Any]],
               response_format: Mapping[str, Any] | None, max_tokens: int | None, *,
               background: bool = True) -> AsyncIterator[StreamDelta]:
        """Stream from llama-server, the client's format and limit as they are."""
        return self._client.stream_chat(
            messages, response_format=response_format, max_tokens=max_tokens, model=model,
            priority=Priority.BACKGROUND if background else Priority.CHAT)

    async def aclose(self) -> None:
        """Close the client, if it is this provider's own."""
        if self._owned:
            await self._client.aclose()


class DemoProvider:
    """The deterministic demo policy, delivered as one delta per reply."""

    name = "demo"
    is_model = False
    default_model = DemoAgent.model

    def __init__(self) -> None:
        self._agent = DemoAgent()

    async def models(self) -> list[str]:
        """The one demo model."""
        return [self.default_model]

    async def stream(self, model: str, messages: Sequence[Mapping[str, Any]],
                     decoding: Decoding) -> AsyncIterator[StreamDelta]:
        """The demo's decision, as a model would stream it."""
        if model != self.default_model:
            raise ModelUnavailable(f"the demo provider has no model {model[:60]}")
        reply = await self._agent.chat(messages, response_format=decoding.response_format)
        yield StreamDelta(content=reply.content, finish_reason="stop")

    async def direct(self, model: str, messages: Sequence[Mapping[str, Any]],
                     response_format: Mapping[str, Any] | None, max_tokens: int | None, *,
                     background: bool = True) -> AsyncIterator[StreamDelta]:
        """Never: the demo policy is no model, so it lists no direct route."""
        raise ModelUnavailable("the demo agent has no direct route")
        yield StreamDelta()  # pragma: no cover (makes this an async generator)

    async def aclose(self) -> None:
        """Nothing to release."""


def provider_for(config: AgentConfig,
                 client: ModelClient | None = None) -> LocalProvider | DemoProvider:
    """The provider the agent configuration names (sharing ``client`` when given)."""
    if config.mode is AgentMode.LOCAL_MODEL:
        return LocalProvider(config, client)
    return DemoProvider()


class Providers:
    """The engine's providers by name, in order: the first is the default (the runtime's)."""

    def __init__(self, providers: Sequence[ModelProvider]) -> None:
        assert providers, "an engine has at least one provider"
        self._by_name = {provider.name: provider for provider in providers}
        assert len(self._by_name) == len(providers), "provider names are unique"
        self.default = providers[0]

    def __iter__(self) -> Iterator[ModelProvider]:
        return iter(self._by_name.values())

    def get(self, name: str) -> ModelProvider:
        """The provider ``name``; MODEL_NOT_FOUND when the engine has none of that name."""
        provider = self._by_name.get(name)
        if provider is None:
            raise RuntimeRefused(ErrorCode.MODEL_NOT_FOUND,
                                 f"this engine serves no provider {name[:40]!r}")
        return provider

    async def listing(self) -> list[tuple[ModelProvider, list[str] | str]]:
        """Each provider with its models now, or why it cannot say (asked together, each
        within :data:`LISTING_SECONDS`)."""
        async def one(provider: ModelProvider) -> list[str] | str:
            try:
                async with asyncio.timeout(LISTING_SECONDS):
                    return await provider.models()
            except TimeoutError:
                return f"the provider did not list its models within {LISTING_SECONDS:g} s"
            except LabfyError as exc:
                return exc.message
        providers = list(self)
        return list(zip(providers, await asyncio.gather(*(one(p) for p in providers)),
                        strict=True))

    async def aclose(self) -> None:
        """Release every provider's connections (each closes only what it owns)."""
        for provider in self:
            await provider.aclose()
