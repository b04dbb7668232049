"""Session titles from the session's own model (BR-18).

Once a new session's first turn ends, its title is asked of the model the session
names, directly (a BR-17 call through :class:`~labfy_ref.bridge.direct.DirectAsk`: no
engine prompt, no tools, no session, no workspace data — only the first message,
bounded), in the background behind every chat turn. Meanwhile, and whenever the model
cannot answer, the title is the local preview (the first message, cut). A provider
that is down is never replaced by another: the preview stays. The reply is data: its
first line, unquoted, on one line, cut to the preview's length.
"""

from __future__ import annotations

import logging
import re

from labfy_ref.bridge.direct import DirectAsk
from labfy_ref.bridge.llm import ModelProvider, ModelRoute
from labfy_ref.bridge.store.index import TITLE_CHARS
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import LabfyError
from labfy_ref.gateway.usage import UsageService
from labfy_ref.ids import new_id
from labfy_ref.text import scrub

log = logging.getLogger(__name__)

#: What the model is asked: the title only, in the message's language.
TITLE_PROMPT = ("Write a short title (at most 8 words) for a conversation that begins with "
                "the user's message below, in the language of that message. Answer with the "
                "title only: no quotes, no label, no final punctuation.")
#: How much of the first message the model is shown, and how long its answer may be.
TITLE_INPUT_CHARS = 2000
TITLE_MAX_TOKENS = 32
_LABEL = re.compile(r"^\s*(?:title|titre|titlu)\s*:\s*", re.IGNORECASE)
_EDGES = " \t\"'`*#_“”„«»\u2018\u2019"  # spaces, quotes and emphasis marks


def clean_title(reply: str) -> str | None:
    """The title a reply holds: its first non-empty line, a ``Title:`` label and quotes or
    emphasis around it taken off, spaces collapsed, cut to the preview's length (None when
    nothing is left)."""
    line = next((part for part in scrub(reply).splitlines() if part.strip()), "")
    line = _LABEL.sub("", line.strip(_EDGES)).strip(_EDGES)
    line = " ".join("".join(ch if ch.isprintable() else " " for ch in line).split())
    line = line.rstrip(".").strip(_EDGES)
    return line[:TITLE_CHARS] or None


async def ask_title(provider: ModelProvider, ledger: UsageService, route: ModelRoute,
                    first_message: str, caller: str) -> str | None:
    """The title ``route``'s model gives a conversation that begins with ``first_message``;
    None when it cannot say (the failure is in the usage ledger and the log)."""
    ask = DirectAsk(provider, ledger, route, StreamHandle(new_id("ttl"), "title"), caller)
    messages = [{"role": "system", "content": TITLE_PROMPT},
                {"role": "user", "content": first_message[:TITLE_INPUT_CHARS]}]
    pieces: list[str] = []
    try:
        async for delta in ask.stream(messages, None, TITLE_MAX_TOKENS):
            pieces.append(delta.content)
    except LabfyError as exc:
        log.info("session %s: no title from %s (%s); its preview stays", caller, route,
                 exc.code.value)
        return None
    return clean_title("".join(pieces))
