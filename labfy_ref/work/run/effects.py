"""Tool effects of a Work run, recorded around their execution and recognised on replay (WK-03).

:class:`WorkGateway` is the gateway of one claimed run: capability, schema and policy
are the ordinary :class:`~labfy_ref.gateway.AgentGateway`'s; only the service call is
wrapped by :class:`EffectLedger`, so what reaches the ledger is a validated call:

* ``begin_effect`` is committed before the service runs, ``complete_effect`` after;
* a call the run already completed (an earlier attempt) is not executed again: its
  stored result is given back, a stored tool error raised again;
* a call an earlier attempt *started* but never recorded complete is resolved by
  looking at its target, never silently repeated: a ``files.write`` by the file's
  content and by the audit entry every executed write leaves (the ``files.write.audit``
  event); a ``research.prepare`` by whether the workspace holds a campaign with its
  exact fields made since the effect started; a read by running it again (it changes
  nothing). What cannot be told is refused ``EFFECT_UNRESOLVED``, a normal tool error.

Each ``files.write`` first records the file's prior content digest (the
``effect.target`` event, appended only while the claim still holds the run: the fence
and the event are one transaction, the last before the effect), then writes *on the
condition* that the file still holds that prior content (checked under the directory's
write lock, right before the rename: a worker paused past its lease cannot overwrite a
later write, ``FILE_CHANGED``), then leaves its audit entry, then completes the
effect. Resumed, a started write without a target event never began; with an audit
entry it happened; otherwise the file holding the new content means it happened (the
crash fell between the rename and the audit), holding the prior content means it did
not, and anything else cannot be told apart and is refused. A ``research.prepare``
records its target event too; resumed, one matching campaign is this step's (adopted,
not made again), none means it never ran, several cannot be told apart.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from labfy_ref.errors import ErrorCode, ToolError
from labfy_ref.gateway import AgentGateway, CallContext
from labfy_ref.gateway.files import split_path
from labfy_ref.gateway.gateway import Service
from labfy_ref.gateway.usage import UsageService
from labfy_ref.tools.catalog import Recovery, ToolCatalog, ToolSpec
from labfy_ref.work.run.crash import CrashPoints
from labfy_ref.work.store.model import Claim, Effect, EffectStatus
from labfy_ref.work.store.tasks import WorkStore
from labfy_ref.workspace.layout import Workspace
from labfy_ref.workspace.store import WorkspaceStore

AUDIT_EVENT = "files.write.audit"
TARGET_EVENT = "effect.target"


class Targets(Protocol):
    """Where the ledger looks to learn whether a crashed effect happened (the traits of
    each tool's catalog entry say how: :class:`~labfy_ref.tools.catalog.Recovery`)."""

    def made_since(self, spec: ToolSpec, arguments: dict[str, Any],
                   since: str) -> list[dict[str, Any]]:
        """What calls of ``spec`` with ``arguments`` returned for what they made at or
        after ``since`` (``Recovery.MADE``)."""
        ...

    def file_sha256(self, path: str) -> str | None:
        """The SHA-256 of a file's whole bytes, or None when there is none."""
        ...


def _target(spec: ToolSpec, arguments: dict[str, Any]) -> str:
    """The path a write of ``spec`` names (its ``targets`` trait)."""
    return str(arguments[spec.target]) if spec.target is not None else ""


def _written(spec: ToolSpec, arguments: dict[str, Any]) -> str:
    """The text a write of ``spec`` stores (its ``written`` trait)."""
    return str(arguments[spec.traits.written]) if spec.traits.written is not None else ""


def digest(text: str) -> str:
    """The SHA-256 of ``text`` in UTF-8, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _replay(effect: Effect) -> dict[str, Any]:
    """The stored outcome of a finished effect: its data, or its tool error raised again."""
    result: dict[str, Any] = effect.result if isinstance(effect.result, dict) else {}
    if result.get("ok") is True and isinstance(result.get("data"), dict):
        data: dict[str, Any] = result["data"]
        return data
    error: dict[str, Any] = result["error"] if isinstance(result.get("error"), dict) else {}
    try:
        code = ErrorCode(str(error.get("code")))
    except ValueError:
        code = ErrorCode.EFFECT_UNRESOLVED
    raise ToolError(str(error.get("message", "stored tool error")), code=code)


class EffectLedger:
    """Records one claim's tool effects in the store and resolves an earlier attempt's."""

    def __init__(self, store: WorkStore, claim: Claim, crash: CrashPoints) -> None:
        self.store = store
        self.claim = claim
        self.crash = crash

    def run(self, spec: ToolSpec, service: Service, targets: Targets,
            arguments: dict[str, Any], *, step: int, call: int = 0) -> dict[str, Any]:
        """Execute a validated call once per (run, step, call), or give back its stored outcome.

        ``step`` is the model call whose reply made the call (the call context's), ``call``
        its place in that reply (one call a reply: 0)."""
        effect = self.store.begin_effect(self.claim, step, call, spec.tool_id, arguments)
        if effect.status is not EffectStatus.STARTED:
            return _replay(effect)
        if effect.attempt != self.claim.attempt:
            return self._resolve(spec, effect, service, targets, arguments)
        self._event("effect.started", effect)
        self.crash.reached("effect.started")
        return self._execute(spec, effect, service, targets, arguments)

    # -- internals -----------------------------------------------------------------------

    def _event(self, kind: str, effect: Effect, **data: Any) -> None:
        self.store.append_event(self.claim.task_id, kind,
                                {"effect_id": effect.id, "step": effect.step,
                                 "tool_id": effect.tool_id, **data}, self.claim.run_id)

    def _execute(self, spec: ToolSpec, effect: Effect, service: Service, targets: Targets,
                 arguments: dict[str, Any]) -> dict[str, Any]:
        recovery = spec.traits.recovery
        try:
            if recovery is Recovery.CONTENT:
                prior = targets.file_sha256(_target(spec, arguments))
                self.store.record_target(self.claim, effect, {"prior_sha256": prior})
                self.crash.reached("effect.target")
                data = service(**arguments, conditional=True, prior_sha256=prior)
            elif recovery is Recovery.MADE:
                self.store.record_target(self.claim, effect, {})
                self.crash.reached("effect.target")
                data = service(**arguments)
            else:
                data = service(**arguments)
        except ToolError as exc:  # refused by the service (a path outside files/…): no effect
            self._complete(effect, {"ok": False, "error": exc.as_dict()}, refused=True)
            raise
        self.crash.reached("effect.applied")
        if recovery is Recovery.CONTENT:
            self._event(AUDIT_EVENT, effect, path=data["path"],
                        sha256=digest(_written(spec, arguments)),
                        bytes_written=data["bytes_written"])
            self.crash.reached("effect.audited")
        self._complete(effect, {"ok": True, "data": data})
        return data

    def _complete(self, effect: Effect, result: dict[str, Any], *,
                  refused: bool = False) -> None:
        self.store.complete_effect(self.claim, effect.id, result, refused=refused)
        self._event("effect.completed", effect, ok=result["ok"])
        self.crash.reached("effect.completed")

    def _resolve(self, spec: ToolSpec, effect: Effect, service: Service, targets: Targets,
                 arguments: dict[str, Any]) -> dict[str, Any]:
        """An earlier attempt started this effect and died: find out whether it happened."""
        recovery = spec.traits.recovery
        if recovery is Recovery.REPEAT:
            self._event("effect.resolved", effect, how="read again")
            return self._execute(spec, effect, service, targets, arguments)
        events = self.store.list_events(self.claim.task_id)
        mine = [e for e in events if isinstance(e.data, dict)
                and e.data.get("effect_id") == effect.id]
        target = next((e for e in mine if e.type == TARGET_EVENT), None)
        if target is None:
            # its target is recorded before the effect runs: without it, it never began
            self._event("effect.resolved", effect, how="never began")
            return self._execute(spec, effect, service, targets, arguments)
        if recovery is Recovery.MADE:
            return self._resolve_made(spec, effect, service, targets, arguments)
        audit = next((e for e in mine if e.type == AUDIT_EVENT), None)
        content, path = _written(spec, arguments), _target(spec, arguments)
        if audit is not None:
            data = {"path": audit.data["path"], "bytes_written": audit.data["bytes_written"]}
            self._event("effect.resolved", effect, how="audited")
            self._complete(effect, {"ok": True, "data": data})
            return data
        now = targets.file_sha256(path)
        prior = target.data.get("prior_sha256")
        if now == digest(content):
            data = {"path": "/".join(split_path(path)),
                    "bytes_written": len(content.encode("utf-8"))}
            self._event(AUDIT_EVENT, effect, path=data["path"], sha256=digest(content),
                        bytes_written=data["bytes_written"], resolved=True)
            self._event("effect.resolved", effect, how="content written")
            self._complete(effect, {"ok": True, "data": data})
            return data
        if now == prior:
            self._event("effect.resolved", effect, how="content unchanged")
            return self._execute(spec, effect, service, targets, arguments)
        return self._unresolved(effect, f"{path[:200]} holds neither its content "
                                        "before this write nor the written content")

    def _resolve_made(self, spec: ToolSpec, effect: Effect, service: Service,
                      targets: Targets, arguments: dict[str, Any]) -> dict[str, Any]:
        """A started call that makes something (a campaign): did this run's step make it?

        What it makes is named by the reference its result produces (traits ``produces``):
        ``campaign found`` with its ``campaign_id``, ``no campaign``…"""
        made = spec.traits.produces[0] if spec.traits.produces else None
        kind = made.ref if made is not None and made.ref else "result"
        found = targets.made_since(spec, arguments, effect.started_at)
        if not found:
            self._event("effect.resolved", effect, how=f"no {kind}")
            return self._execute(spec, effect, service, targets, arguments)
        if len(found) > 1:
            return self._unresolved(effect, f"{len(found)} {kind}s like this one were made "
                                            "since it started; which is this run's is unknown")
        data = found[0]
        named = {made.id: data.get(made.id)} if made is not None else {}
        self._event("effect.resolved", effect, how=f"{kind} found", **named)
        self._complete(effect, {"ok": True, "data": data})
        return data

    def _unresolved(self, effect: Effect, message: str) -> dict[str, Any]:
        error = ToolError(message, code=ErrorCode.EFFECT_UNRESOLVED)
        self._event("effect.resolved", effect, how="unresolved")
        self._complete(effect, {"ok": False, "error": error.as_dict()}, refused=True)
        raise error


class WorkGateway(AgentGateway):
    """The gateway of one claimed run: every validated service call goes through the ledger."""

    def __init__(self, workspace: Workspace, store: WorkspaceStore, ledger: EffectLedger, *,
                 max_result_bytes: int, catalog: ToolCatalog | None = None,
                 usage: UsageService | None = None) -> None:
        super().__init__(workspace, store, catalog, max_result_bytes=max_result_bytes,
                         usage=usage, around=self._recorded)
        self.ledger = ledger

    def _recorded(self, spec: ToolSpec, service: Service, arguments: dict[str, Any],
                  context: CallContext) -> dict[str, Any]:
        return self.ledger.run(spec, service, self, arguments, step=context.step)

    def made_since(self, spec: ToolSpec, arguments: dict[str, Any],
                   since: str) -> list[dict[str, Any]]:
        """What the service's ``<method>_made_since`` finds (``Recovery.MADE``)."""
        finder = self.service_method(spec, "_made_since")
        if finder is None:
            raise ToolError(f"{spec.tool_id} cannot tell what it made",
                            code=ErrorCode.EFFECT_UNRESOLVED)
        found: list[dict[str, Any]] = finder(since, **arguments)
        return found

    def file_sha256(self, path: str) -> str | None:
        """The SHA-256 of a file's bytes as the gateway reads them, None when there is none."""
        return self._files.sha256(path)

