"""``AgentGateway``: capability → policy → service for every tool call (GW-01..GW-05).

The runtime and the bridge engine hold a gateway and nothing else: no store,
no path, no adapter. Every result goes back wrapped as ``UNTRUSTED_DATA``
with a bounded diagnostic on error; the gateway keeps a bounded log of what
it executed so tests can prove what did *not* run.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
from collections.abc import Callable, Iterable
from typing import Any, Literal

from labfy_ref.errors import ErrorCode, ToolError
from labfy_ref.gateway.files import split_path
from labfy_ref.gateway.policy import CallContext, decide, needs_approval
from labfy_ref.gateway.services import FileService, GrantService, ObjectService, ResearchService
from labfy_ref.gateway.usage import UsageService
from labfy_ref.protocol.jsonfmt import canonical
from labfy_ref.tools.catalog import ToolCatalog, ToolSpec, default_catalog
from labfy_ref.workspace.layout import Workspace
from labfy_ref.workspace.store import Campaign, Grant, WorkspaceStore

TRUST = "UNTRUSTED_DATA"
DEFAULT_MAX_RESULT_BYTES = 256 * 1024
Status = Literal["ok", "error", "refused"]
Service = Callable[..., dict[str, Any]]
#: A validated call's service, run by whoever wraps them:
#: ``(spec, service, arguments, context) -> data`` (Work records each effect around it,
#: keyed by the context's step, WK-03).
ServiceHook = Callable[[ToolSpec, Service, dict[str, Any], CallContext], dict[str, Any]]


@dataclasses.dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one call produced: its status and the wrapped result given to the model."""

    tool_id: str
    arguments: dict[str, Any]
    status: Status
    result: dict[str, Any]
    #: ``result`` as canonical JSON when the gateway already wrote it (its size check).
    result_text: str = ""

    @property
    def ok(self) -> bool:
        """Did the service run and succeed?"""
        return self.status == "ok"

    @property
    def error_code(self) -> str | None:
        """The error code, when not ok."""
        error = self.result["data"].get("error") if not self.ok else None
        return None if error is None else str(error["code"])


def _direct(spec: ToolSpec, service: Service, arguments: dict[str, Any],
            context: CallContext) -> dict[str, Any]:
    """The service call itself (the hook of a gateway that wraps nothing)."""
    return service(**arguments)


def _wrap(tool_id: str, ok: bool, data: dict[str, Any]) -> dict[str, Any]:
    return {"trust": TRUST, "tool_id": tool_id, "ok": ok, "data": data}


def _failure(tool_id: str, arguments: dict[str, Any], status: Status,
             error: ToolError) -> ToolOutcome:
    data = {"error": error.as_dict()}
    return ToolOutcome(tool_id, arguments, status, _wrap(tool_id, False, data))


class AgentGateway:
    """The one door between an agent and any effect."""

    def __init__(self, workspace: Workspace, store: WorkspaceStore,
                 catalog: ToolCatalog | None = None, *,
                 max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
                 log_size: int = 256, usage: UsageService | None = None,
                 around: ServiceHook | None = None) -> None:
        self.workspace = workspace
        self.catalog = catalog or default_catalog()
        self.max_result_bytes = max_result_bytes
        self._objects = ObjectService(store)
        self._research = ResearchService(store, workspace)
        self._files = FileService(workspace).files
        self.grants = GrantService(store, workspace)
        #: The provider usage ledger (BR-14): every model call of every turn is recorded here.
        self.usage = usage if usage is not None else UsageService(store)
        self._around: ServiceHook = around if around is not None else _direct
        #: (tool_id, status) of every call that reached the gateway, newest last.
        self.log: collections.deque[tuple[str, Status]] = collections.deque(maxlen=log_size)
        #: The service objects the catalog's ``service`` traits name (``<service>.<method>``).
        self._providers: dict[str, object] = {
            "objects": self._objects, "research": self._research, "files": self._files}
        self._services: dict[str, Service] = {
            spec.tool_id: method for spec in self.catalog.values()
            if (method := self.service_method(spec)) is not None}

    # -- catalog ------------------------------------------------------------------

    def surface(self, tool_ids: Iterable[str]) -> AgentGateway:
        """The same gateway (services, log) offering only ``tool_ids``.

        A surface's catalog is what its model is told and what its capability
        check admits: a tool outside it is refused ``TOOL_UNAVAILABLE``. Bridge
        sessions use one without ``research.*`` (the grant flow is the runtime's).
        """
        chosen = set(tool_ids)
        view = copy.copy(self)
        view.catalog = ToolCatalog([spec for spec in self.catalog.values()
                                    if spec.tool_id in chosen])
        return view

    def service_method(self, spec: ToolSpec, suffix: str = "") -> Callable[..., Any] | None:
        """The method its ``service`` trait names (plus ``suffix``), None when none has it."""
        provider, _, name = spec.traits.service.partition(".")
        public = name and not name.startswith("_")  # a service's own helpers are not tools
        method = getattr(self._providers.get(provider), name + suffix, None) if public else None
        return method if callable(method) else None

    def availability(self, spec: ToolSpec) -> tuple[bool, str | None]:
        """Is a tool usable in this workspace, and if not, why."""
        if spec.tool_id not in self._services:
            return False, "no service implements this tool"
        return True, None

    def describe_tools(self) -> list[dict[str, Any]]:
        """The published catalog with availability (SPEC §15)."""
        return [spec.describe(available=(avail := self.availability(spec))[0], reason=avail[1])
                for spec in self.catalog.values()]

    def offerable(self, context: CallContext, *, approvals: bool) -> list[str]:
        """The tools a model may be offered now (PR-06): available, and allowed by policy
        — or allowed once by a human when the caller can ask one (``approvals``)."""
        return [spec.tool_id for spec in self.catalog.values()
                if self.availability(spec)[0]
                and (decide(spec, context).allowed
                     or (approvals and needs_approval(spec, context)))]

    def needs_approval(self, tool_id: str, context: CallContext) -> bool:
        """Would this call be refused now but allowed by a one-time approval (BR-12)?"""
        spec = self.catalog.get(tool_id)
        return spec is not None and needs_approval(spec, context)

    def screen(self, tool_id: str, arguments: dict[str, Any]) -> tuple[dict[str, Any],
                                                                       ToolError | None]:
        """What a human is asked to approve: the call with its paths canonical, or the
        refusal the call would get whatever the answer (schema, confinement).

        A path a call takes or writes (its catalog traits say which) is confined
        here, before anyone is asked: an approver never sees ``../../outside.txt``
        for a write the gateway would refuse anyway.
        """
        spec = self._checked(tool_id, arguments)
        if isinstance(spec, ToolError):
            return arguments, spec
        shown = dict(arguments)
        kinds = {**spec.traits.consumes, **spec.traits.targets}
        for name, kind in kinds.items():
            value = arguments.get(name)
            if kind in ("file", "directory") and isinstance(value, str):
                try:
                    shown[name] = "/".join(split_path(value))
                except ToolError as exc:
                    return arguments, exc
        return shown, None

    # -- calls --------------------------------------------------------------------

    def _checked(self, tool_id: str, arguments: dict[str, Any]) -> ToolSpec | ToolError:
        """The spec of an available tool whose arguments match its schema, else the refusal
        (what :meth:`call` and :meth:`screen` check first)."""
        spec = self.catalog.get(tool_id)
        if spec is None or not self.availability(spec)[0]:
            return ToolError(f"{tool_id[:64]} is not an available tool",
                             code=ErrorCode.TOOL_UNAVAILABLE)
        error = next(iter(spec.input_validator.iter_errors(arguments)), None)
        if error is not None:
            return ToolError(f"arguments do not match the schema ({error.validator})",
                             code=ErrorCode.INVALID_ARGUMENTS)
        return spec

    def call(self, tool_id: str, arguments: dict[str, Any], context: CallContext) -> ToolOutcome:
        """Run one tool call through capability, policy and service."""
        outcome = self._call(tool_id, arguments, context)
        self.log.append((tool_id, outcome.status))
        return outcome

    def refuse(self, tool_id: str, arguments: dict[str, Any], error: ToolError) -> ToolOutcome:
        """A call refused before reaching the gateway's checks (a denied approval, BR-12)."""
        outcome = _failure(tool_id, arguments, "refused", error)
        self.log.append((tool_id, outcome.status))
        return outcome

    def _call(self, tool_id: str, arguments: dict[str, Any],
              context: CallContext) -> ToolOutcome:
        spec = self._checked(tool_id, arguments)
        if isinstance(spec, ToolError):
            return _failure(tool_id, arguments, "refused", spec)
        decision = decide(spec, context)
        if not decision.allowed:
            assert decision.code is not None
            return _failure(tool_id, arguments, "refused",
                            ToolError(decision.reason, code=decision.code))
        cited = _cited(spec, arguments, "object")
        missing = self._objects.missing(cited)
        if missing:
            return _failure(tool_id, arguments, "refused", ToolError(
                f"unknown object_id {missing[0][:40]}: copy ids exactly from earlier results",
                code=ErrorCode.OBJECT_NOT_FOUND))
        try:
            data = self._around(spec, self._services[tool_id], arguments, context)
        except ToolError as exc:
            return _failure(tool_id, arguments, "error", exc)
        except OSError as exc:  # a service's unexpected I/O failure is a tool error too
            return _failure(tool_id, arguments, "error", ToolError(
                f"i/o error ({type(exc).__name__})", code=ErrorCode.TOOL_UNAVAILABLE))
        result = _wrap(tool_id, True, data)
        text = canonical(result)  # measured once, and given to the model as is
        size = len(text.encode("utf-8"))
        if size > self.max_result_bytes:
            return _failure(tool_id, arguments, "error", ToolError(
                f"result of {size} bytes exceeds {self.max_result_bytes}",
                code=ErrorCode.RESULT_TOO_LARGE))
        return ToolOutcome(tool_id, arguments, "ok", result, text)

    # -- human-side operations (never reachable by a model) ----------------------------

    def run_research(self, campaign_id: str) -> None:
        """Run a granted campaign (RT-08); GRANT_REQUIRED without an active grant."""
        self._research.run(campaign_id)

    def campaign(self, campaign_id: str) -> Campaign:
        """A campaign of this workspace, or CAMPAIGN_NOT_FOUND."""
        return self._research.campaign(campaign_id)

    def list_objects(self) -> list[dict[str, Any]]:
        """Every object (id, kind, title) for the API."""
        return list(self._objects.list_objects(limit=10_000)["objects"])

    def grant(self, campaign_id: str, expires_at: datetime.datetime | None = None) -> Grant:
        """A human grant for a campaign of this workspace."""
        return self.grants.create(campaign_id, expires_at)


def _cited(spec: ToolSpec, arguments: dict[str, Any], kind: str) -> list[str]:
    """The references of ``kind`` a call's arguments cite (its catalog traits say which)."""
    cited: list[str] = []
    for name, consumed in spec.traits.consumes.items():
        value = arguments.get(name)
        if consumed != kind or value is None:
            continue
        cited.extend(value if isinstance(value, list) else [value])
    return [str(item) for item in cited]
