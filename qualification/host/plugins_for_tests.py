"""Small plugins used by the host tests (referenced as ``module:attr`` in compositions)."""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any, ClassVar

from labfy_ref.host import PluginContext

#: What the plugins did and undid, in order, for the tests to check.
JOURNAL: list[str] = []
#: Handles the plugins opened, to check they were really released.
RESOURCES: dict[str, Any] = {}


class Base:
    provides: ClassVar[tuple[str, ...]] = ()
    requires: ClassVar[tuple[str, ...]] = ()
    optional: ClassVar[tuple[str, ...]] = ()

    async def activate(self, context: PluginContext) -> None:
        for name in self.provides:
            context.provide(name, f"{name}-from-{context.row_id}")
        JOURNAL.append(f"activate {context.row_id}")
        context.scope.defer(lambda: JOURNAL.append(f"undo {context.row_id}"),
                            f"journal {context.row_id}")


class Slow(Base):
    """A row that takes its time (``config.seconds``) before it provides ``slow_thing``: the
    bridge settles in the background meanwhile, and a deadline fails a row that never ends."""

    provides = ("slow_thing",)

    async def activate(self, context: PluginContext) -> None:
        await asyncio.sleep(float(context.config.get("seconds", 1)))
        await super().activate(context)


class SystemPrompt(Base):
    provides = ("system_prompt",)


class Tools(Base):
    provides = ("tools",)
    requires = ("system_prompt",)


class Engine(Base):
    provides = ("engine",)
    requires = ("tools",)
    optional = ("metrics",)

    async def activate(self, context: PluginContext) -> None:
        await super().activate(context)
        RESOURCES["metrics_seen"] = context.get("metrics")


class Metrics(Base):
    provides = ("metrics",)


class Exploding(Base):
    provides = ("boom",)

    async def activate(self, context: PluginContext) -> None:
        raise RuntimeError("kaboom " + "x" * 1000)


class Effects(Base):
    """Registers one of each effect kind: service, listener, task, file handle."""

    provides = ("effects",)

    async def activate(self, context: PluginContext) -> None:
        await super().activate(context)
        listeners: list[str] = RESOURCES.setdefault("listeners", [])
        listeners.append("listener")
        context.scope.defer(lambda: listeners.remove("listener"), "listener")
        RESOURCES["task"] = context.scope.spawn(asyncio.sleep(3600), "sleeper")
        # The scope owns the file: that is what this plugin tests.
        scratch = tempfile.TemporaryFile()  # noqa: SIM115
        RESOURCES["file"] = context.scope.own_file(scratch, "scratch")


class BadUndo(Base):
    provides = ("bad_undo",)

    async def activate(self, context: PluginContext) -> None:
        await super().activate(context)

        def fail() -> None:
            raise OSError("undo failed")

        context.scope.defer(fail, "failing undo")


class SessionTitles(Base):
    """Publishes ``session_titles`` as its row's ``config.value``: a row's service in place
    of the one the server seeds (the engine row reads whichever the host holds)."""

    provides = ("session_titles",)

    async def activate(self, context: PluginContext) -> None:
        context.provide("session_titles", context.config["value"])
