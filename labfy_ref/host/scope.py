"""Scopes own effects (HO-05): every registration is undone when its scope closes.

A scope records an undo for each effect (a service, a listener, a timer, a
file handle, a task). ``aclose()`` runs the undos in reverse order, child
scopes included, and goes on past errors, which it returns. Closing twice is
harmless. Nothing runs that no scope owns — and ownership ends: a task that
finishes on its own is forgotten at once, so a long-lived scope spawning one
task per turn holds only the live ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
from collections.abc import Awaitable, Callable, Coroutine
from typing import IO, Any

from labfy_ref.errors import bounded

Undo = Callable[[], Awaitable[None] | None]


class ScopeClosed(RuntimeError):
    """An effect was registered on a scope that is already closed."""


class Scope:
    """An owner of effects, undone in reverse order."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: Effects by registration number; dicts keep insertion order, so the last
        #: registered is undone first, and a finished task is forgotten in O(1).
        self._effects: dict[int, tuple[str, Undo]] = {}
        self._numbers = itertools.count()
        self._closed = False

    @property
    def closed(self) -> bool:
        """Has :meth:`aclose` run?"""
        return self._closed

    @property
    def live_effects(self) -> list[str]:
        """Labels of the effects still owned (for status and tests)."""
        return [label for label, _ in self._effects.values()]

    def defer(self, undo: Undo, label: str) -> int:
        """Own an effect whose undo is ``undo``; return its registration number."""
        if self._closed:
            raise ScopeClosed(f"scope {self.name} is closed")
        number = next(self._numbers)
        self._effects[number] = (label, undo)
        return number

    def child(self, name: str) -> Scope:
        """A sub-scope closed (first) when this one closes."""
        scope = Scope(f"{self.name}/{name}")
        self.defer(scope._close_for_parent, f"scope {scope.name}")
        return scope

    def spawn(self, coroutine: Coroutine[Any, Any, Any], label: str) -> asyncio.Task[Any]:
        """Run a task owned by this scope: cancelled and awaited on close."""
        task = asyncio.get_running_loop().create_task(coroutine, name=label)

        async def cancel() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        number = self.defer(cancel, f"task {label}")
        task.add_done_callback(lambda _: self._effects.pop(number, None))
        return task

    def own_file(self, handle: IO[Any], label: str) -> IO[Any]:
        """Own an open file: closed on close."""
        self.defer(handle.close, f"file {label}")
        return handle

    async def aclose(self) -> list[str]:
        """Undo every effect in reverse order, past errors; return the errors."""
        if self._closed:
            return []
        self._closed = True
        errors: list[str] = []
        while self._effects:
            label, undo = self._effects.pop(next(reversed(self._effects)))
            try:
                result = undo()
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:  # keep going: every other effect must still be undone
                errors.append(bounded(f"{label}: {type(exc).__name__}: {exc}", 200))
        return errors

    async def _close_for_parent(self) -> None:
        errors = await self.aclose()
        if errors:
            raise RuntimeError("; ".join(errors))
