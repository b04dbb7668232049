"""Connections, not requests (SV-09): a deadline whenever the server waits on a client,
and a cap on how many connections it holds.

uvicorn's h11 protocol arms a timer only between requests, once a response is
complete: a connection that never sends a byte, or trickles its request head or
its body, is held for ever, and enough of them exhaust the descriptors. Here
every connection is always in one of five states, each with its own deadline:

* ``idle``  -- no request in flight and no byte of the next head yet (from the
  connection's start or the end of the previous response): ``idle_seconds``;
* ``head``  -- the first bytes of a request head arrived, not its end:
  ``head_seconds`` from its first byte (a trickle never extends it);
* ``body``  -- the head is in, the body is not: ``body_seconds`` from the head;
* ``busy``  -- the request is in: the application sets the pace and nothing
  here ever cuts a response in progress (a stream of an hour stays open);
* ``linger`` -- answered by this module and half-closed: ``linger_seconds``.

An expired head is answered 408 ``REQUEST_TIMEOUT`` and closed; an expired idle
connection or body is closed. A connection answered by this module closes as
nginx's ``lingering_close`` does: the response, then a half-close (FIN), then
whatever the client still sends is read and dropped until it closes or
``linger_seconds`` pass. Closing at once with the client's bytes unread makes the
kernel send a reset, and a reset can destroy the response before the client reads it.

Past ``max_connections`` the oldest connection that is ``idle``, ``head`` or
``linger`` is closed to make room; when every one is ``busy``
the new one gets 503 ``TOO_MANY_CONNECTIONS`` and is closed -- a refusal, never
a hang.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from labfy_ref.errors import HTTP_STATUS, ErrorCode

IDLE, HEAD, BODY, BUSY, LINGER = "idle", "head", "body", "busy", "linger"
#: The states a connection may be closed from to make room for a new one.
_WAITING = (IDLE, HEAD, LINGER)


@dataclasses.dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The deadlines (seconds) and the cap of SV-09."""

    idle_seconds: float = 5.0
    head_seconds: float = 10.0
    body_seconds: float = 30.0
    #: Well above the bench's 256 concurrent streams, well below a 1024-descriptor limit.
    max_connections: int = 512
    #: How long an answered connection reads and drops what the client still sends.
    linger_seconds: float = 2.0

    def __post_init__(self) -> None:
        if min(self.idle_seconds, self.head_seconds, self.body_seconds,
               self.linger_seconds) <= 0:
            raise ValueError("connection deadlines must be positive")
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")


DEFAULT_LIMITS = ConnectionLimits()


def _raw_error(code: ErrorCode, message: str) -> bytes:
    """A complete HTTP/1.1 error response that closes the connection (SV-05's shape)."""
    body = json.dumps({"error": {"code": code.value, "message": message}}).encode("ascii")
    status = HTTP_STATUS[code]
    reason = {408: "Request Timeout", 503: "Service Unavailable"}[status]
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\ncache-control: no-store\r\n"
            "x-content-type-options: nosniff\r\n\r\n")
    return head.encode("ascii") + body


_TIMED_OUT = _raw_error(ErrorCode.REQUEST_TIMEOUT, "the request head did not arrive in time")
_FULL = _raw_error(ErrorCode.TOO_MANY_CONNECTIONS,
                   "the server holds as many connections as it may; try again")


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with SV-09's deadlines and cap (see the module)."""

    limits: ClassVar[ConnectionLimits] = DEFAULT_LIMITS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self.waiting: str | None = None
        self.waiting_since = 0.0

    # -- the protocol's events -------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self._make_room():
            self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.waiting == LINGER:
            return  # answered and half-closed: what the client still sends is dropped
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    # -- deadlines -------------------------------------------------------------------------

    def shutdown(self) -> None:
        if self.waiting == LINGER:
            self._close()
        else:
            super().shutdown()

    def state(self) -> str | None:
        """What the server waits for from this client now (None: the connection is closing)."""
        if self.transport is None or self.transport.is_closing():
            return None
        if self.waiting == LINGER:
            return LINGER
        theirs, ours = self.conn.their_state, self.conn.our_state
        if theirs is h11.SEND_BODY:
            return BODY
        if theirs is h11.IDLE and ours is h11.IDLE:
            return HEAD if self.conn.trailing_data[0] else IDLE
        return BUSY

    def _watch(self) -> None:
        """Arm the deadline of the state the connection is now in, unless it is still in
        the state the running deadline was armed for."""
        state = self.state()
        if state == self.waiting:
            return
        self._cancel()
        self.waiting, self.waiting_since = state, self.loop.time()
        seconds = {IDLE: self.limits.idle_seconds, HEAD: self.limits.head_seconds,
                   BODY: self.limits.body_seconds}.get(state or BUSY)
        if seconds is not None:
            self._deadline = self.loop.call_later(seconds, self._expire)

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.state() == HEAD:
            self._answer_and_close(_TIMED_OUT)
        else:
            self._close()

    def _answer_and_close(self, response: bytes) -> None:
        """Send ``response``, half-close, and linger (see the module)."""
        self._cancel()
        self.transport.write(response)
        if not self.transport.can_write_eof():
            self._close()
            return
        self.transport.write_eof()
        self.waiting, self.waiting_since = LINGER, self.loop.time()
        self._deadline = self.loop.call_later(self.limits.linger_seconds, self._close)

    def _close(self) -> None:
        self._cancel()
        self.waiting = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # -- the cap ---------------------------------------------------------------------------

    def _make_room(self) -> bool:
        """Keep at most ``max_connections``: close the oldest idle or half-sent one, else
        refuse this one. False when this connection was refused."""
        if len(self.connections) <= self.limits.max_connections:
            return True
        waiting = [other for other in self.connections
                   if other is not self and isinstance(other, GuardedH11Protocol)
                   and other.waiting in _WAITING]
        if waiting:
            min(waiting, key=lambda other: other.waiting_since)._close()
            return True
        self._answer_and_close(_FULL)
        return False


def guarded_protocol(limits: ConnectionLimits = DEFAULT_LIMITS) -> type[GuardedH11Protocol]:
    """The protocol class uvicorn runs for a server with ``limits``."""
    if limits == DEFAULT_LIMITS:
        return GuardedH11Protocol
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})
