"""How a fault is declared: the function it replaces, the requirements it breaks, the test
expected to kill it.

``@fault(name, ids=("SV-02",), replaces="module:Attr.path", killer="file::test",
breaks="...", served=True)`` over the faulty function registers it;
:meth:`Fault.apply` swaps it in (in the calling process only) after checking the
original exists, so a renamed product function fails the mutant's launch loudly
rather than testing nothing. A *served* fault is launched as its own ``labfy-ref
serve --bridge`` and the conformance kit runs against it; an *in-process* one is
applied inside a pytest run of the suite (:mod:`qualification.mutants.inject`).
Either way only the tests tagged with one of its ``ids`` run at it (QR-06): a
fault counts as killed only by its own requirements' tests.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from typing import Any

FAULTS: dict[str, Fault] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class Fault:
    """One mutant: a single replaced function."""

    name: str
    ids: tuple[str, ...]  # the SPEC requirement IDs it breaks (requirements.toml)
    replaces: str  # "package.module:Name" or "package.module:Class.method"
    killer: str  # the test expected to kill it: "qualification/...py::test_name"
    breaks: str  # one line: what the mutant gets wrong
    replacement: Callable[..., Any]
    served: bool = True  # run through the kit at its own server, or inside the suite

    @property
    def killer_file(self) -> str:
        """The file of the expected killer (run first)."""
        return self.killer.split("::", 1)[0]

    def resolve(self) -> tuple[Any, str, Any]:
        """``(owner, attribute, original)`` of the replaced function, without replacing it
        (AttributeError if it no longer exists, TypeError if it is no function)."""
        module_name, _, path = self.replaces.partition(":")
        owner: Any = importlib.import_module(module_name)
        *parents, attribute = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        original = inspect.getattr_static(owner, attribute)  # a rename is caught here
        function = original.__func__ if isinstance(original, staticmethod) else original
        if not inspect.isfunction(function):
            raise TypeError(f"{self.replaces} is not a function")
        return owner, attribute, original

    def apply(self) -> None:
        """Replace the function in this process."""
        owner, attribute, original = self.resolve()
        replacement: Any = self.replacement
        if isinstance(original, staticmethod):
            replacement = staticmethod(replacement)
        setattr(owner, attribute, replacement)


def fault(name: str, *, ids: tuple[str, ...], replaces: str, killer: str, breaks: str,
          served: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as mutant ``name``'s replacement for ``replaces``."""
    def register(replacement: Callable[..., Any]) -> Callable[..., Any]:
        if name in FAULTS:
            raise ValueError(f"mutant {name} is declared twice")
        if not ids:
            raise ValueError(f"mutant {name} names no requirement it breaks")
        FAULTS[name] = Fault(name, ids, replaces, killer, breaks, replacement, served)
        return replacement
    return register
