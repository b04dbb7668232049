"""What the kit brings of its own: the provider a target's agent must answer with, its model.

Turn flows need a model whose answers the tests know. The kit's provider is the
fake provider (a real OpenAI-compatible HTTP server) serving the keyed scripts of
``fixtures/scenarios/conformance.json``: a turn whose message carries
:func:`marker` is answered from that script, whatever other turns run at once.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from fake_provider import FakeProvider, Scenario

#: The kit provider's scripts.
SCENARIO = Path(__file__).resolve().parents[2] / "fixtures" / "scenarios" / "conformance.json"
#: The model id the target's agent must send (its one listed model).
KIT_MODEL = "kit-model"


def kit_provider(host: str = "127.0.0.1", port: int = 0) -> FakeProvider:
    """The kit's provider, not started."""
    return FakeProvider(Scenario.load(SCENARIO), host=host, port=port)


#: QR-07: approvals on the target expire this fast, so a test can wait one out.
KIT_APPROVAL_SECONDS = 3.0


def agent_flags(provider_url: str) -> list[str]:
    """The ``labfy-ref serve`` flags that make a target's agent answer with the kit provider."""
    return ["--agent-mode", "local-model", "--agent-endpoint", provider_url,
            "--agent-model", KIT_MODEL]


#: QR-07: how soon the profile's worker must have run a probe task to its end.
KIT_WORKER_SECONDS = 30.0
#: BR-19: the file of the target's further providers, and a provider that never answers
#: (port 1 of loopback: nothing listens there).
PROVIDERS_FILE = "providers.toml"
DOWN_ENDPOINT = "http://127.0.0.1:1"
KIT_PROVIDERS = ["local", "kit-b", "kit-down"]


def kit_providers(provider_url: str) -> str:
    """The ``--providers`` file of the profile (BR-19): the kit's provider once more under
    another name, and one that is down."""
    return (f'[[provider]]\nname = "kit-b"\nendpoint = "{provider_url}"\n'
            f'model = "{KIT_MODEL}"\n\n'
            f'[[provider]]\nname = "kit-down"\nendpoint = "{DOWN_ENDPOINT}"\nmodel = "absent"\n')


def launch_profile(provider_url: str, providers_file: str = PROVIDERS_FILE) -> dict[str, Any]:
    """QR-07: what a target is launched with for the kit, and what its status must then say.

    ``flags`` are ``labfy-ref serve`` flags (another implementation maps them to its own);
    ``status`` maps dotted paths of ``GET /api/v1/agent-runtime/status`` to the values the
    target must report, checked before any test runs. ``worker`` are the ``labfy-ref work
    worker`` flags of the worker started beside the target, on the same workspace and Work
    database (the Work routes' tests need one: a probe task must end within
    ``worker_seconds``, else those tests fail, naming the profile). ``providers`` is what
    the file named by ``--providers`` (``providers_file``) holds.
    """
    return {"flags": [*agent_flags(provider_url), "--bridge",
                      "--approval-timeout", f"{KIT_APPROVAL_SECONDS:g}",
                      "--providers", providers_file, "--session-titles", "preview"],
            "providers": kit_providers(provider_url),
            "status": {"mode": "local-model", "model": KIT_MODEL, "bridge.enabled": True,
                       "bridge.toggle": "unlocked", "bridge.providers": KIT_PROVIDERS,
                       "bridge.session_titles": "preview",
                       "bridge.approval_timeout_seconds": KIT_APPROVAL_SECONDS},
            "worker": [*agent_flags(provider_url), "--heartbeat-seconds", "1"],
            "worker_seconds": KIT_WORKER_SECONDS}


def profile_mismatches(status: Any, profile: dict[str, Any]) -> list[str]:
    """Each ``path: reported X, the profile says Y`` where ``status`` does not honour it."""
    wrong = []
    for path, wanted in profile["status"].items():
        value: Any = status
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value != wanted:
            wrong.append(f"{path}: reported {json.dumps(value)}, the profile says "
                         f"{json.dumps(wanted)}")
    return wrong


def nonce() -> str:
    """A fresh name part, so a test's files and campaigns are its own on a shared target."""
    return secrets.token_hex(6)


def marker(key: str, tag: str | None = None) -> str:
    """The text that starts a conversation on script ``key`` (``{nonce}`` in it becomes ``tag``,
    a fresh nonce by default: each conversation has its own place in its script)."""
    return f"[[kit:{key}:{tag or nonce()}]]"
