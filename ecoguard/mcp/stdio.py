"""The MCP server's stdio transport: the SDK's line loop, with every inbound line checked first.

The SDK's stdio transport drops a line it cannot validate (it is logged at debug level and
nothing is written back), so a client that sends malformed JSON, a ``params`` that is not an
object, or a string holding a lone UTF-16 surrogate (``"\\ud800"``, valid JSON but not valid
Unicode) waits forever for an answer. Here each such line gets a JSON-RPC error reply naming
what was wrong, with the request's id when it can be read (``null`` otherwise, as JSON-RPC 2.0
says). A notification gets no reply (JSON-RPC forbids one); it is logged on stderr instead.

Like the SDK, the transport owns file descriptors 0 and 1 while it serves: the wire moves to
private duplicates, fd 0 reads the null device and fd 1 writes to stderr, so a stray ``print``
or a child process cannot corrupt a message. Both are restored on exit.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import IO, Any

import anyio.to_thread
from mcp.server.stdio import stdio_server
from mcp_types import jsonrpc_message_adapter

logger = logging.getLogger("ecoguard.mcp")

# JSON-RPC 2.0 error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

# A line longer than this is refused unread (its bytes are skipped up to the next newline):
# audit_code accepts 1 MiB of source, which JSON escaping can grow to ~6 MiB.
MAX_LINE_BYTES = 16 * 1024 * 1024


def check_line(raw: bytes) -> tuple[str | None, dict[str, Any] | None]:
    """``(line, None)``: pass the line on; ``(None, reply)``: answer with this error;
    ``(None, None)``: nothing to pass on or answer (a blank line, a bad notification)."""
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return None, None
    try:
        message = json.loads(text)
    except (ValueError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return None, error_reply(None, PARSE_ERROR, f"Parse error: the line is not JSON ({detail})")
    if not isinstance(message, dict):
        kind = _json_type(message)
        if isinstance(message, list):
            kind += " (batches are not supported)"
        return None, error_reply(
            None, INVALID_REQUEST, f"Invalid Request: a message must be a JSON object, got {kind}"
        )
    ident = message.get("id")
    if isinstance(ident, float) and ident == ident and abs(ident) != float("inf"):
        ident_reply: str | int | float | None = ident  # a JSON number: echoed as sent
    else:
        ident_reply = ident if _usable_id(ident) else None
    ident = ident_reply
    problem = _envelope_problem(message)
    if problem is not None:
        code, text_ = problem
        return _refuse(message, ident, code, text_)
    where = _lone_surrogate(message)
    if where is not None:
        return _refuse(
            message,
            ident,
            INVALID_PARAMS,
            f"Invalid params: the string at {where} holds a lone UTF-16 surrogate, which is not "
            "valid Unicode; send text that encodes to UTF-8",
        )
    try:
        jsonrpc_message_adapter.validate_json(text, by_name=False)
    except Exception as exc:  # a pydantic ValidationError: name its first complaint
        return _refuse(message, ident, INVALID_REQUEST, f"Invalid Request: {_first_error(exc)}")
    return text, None


def _envelope_problem(message: dict[str, Any]) -> tuple[int, str] | None:
    if "method" in message and not isinstance(message["method"], str):
        return INVALID_REQUEST, "Invalid Request: method must be a string"
    if "id" in message and not _usable_id(message["id"]):
        # The SDK reads such a request as a notification and never answers it.
        return (
            INVALID_REQUEST,
            f"Invalid Request: id must be a string or an integer, got {_json_type(message['id'])}"
            + (f" ({message['id']!r})" if isinstance(message["id"], float) else ""),
        )
    params = message.get("params")
    if "params" in message and params is not None and not isinstance(params, dict):
        return (
            INVALID_PARAMS,
            f"Invalid params: params must be a JSON object, got {_json_type(params)}",
        )
    return None


def _usable_id(ident: Any) -> bool:
    """An id the SDK answers: a string or an integer (JSON-RPC also allows null and numbers
    with fractions, which the SDK does not take)."""
    return isinstance(ident, str | int) and not isinstance(ident, bool)


def _refuse(
    message: dict[str, Any], ident: str | float | None, code: int, text: str
) -> tuple[None, dict[str, Any] | None]:
    if "method" in message and "id" not in message:
        # A notification: JSON-RPC forbids a reply, so it is said on stderr.
        logger.warning("ignored a malformed notification: %s", text)
        return None, None
    return None, error_reply(ident, code, text)


def error_reply(ident: str | float | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def _lone_surrogate(value: Any) -> str | None:
    """The path of the first string (key or value) holding a lone surrogate, else None.
    Iterative: json accepts nesting deeper than Python's recursion limit allows to walk."""
    stack: list[tuple[Any, str]] = [(value, "$")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return path
        elif isinstance(item, dict):
            for key, inner in item.items():
                if _has_surrogate(key):
                    return f"{path} (a key)"
                stack.append((inner, f"{path}.{key}"))
        elif isinstance(item, list):
            stack.extend((inner, f"{path}[{index}]") for index, inner in enumerate(item))
    return None


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    return "null" if value is None else type(value).__name__


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            location = ".".join(str(part) for part in first.get("loc", ()))
            return f"{first.get('msg', exc)}" + (f" at {location}" if location else "")
        except (IndexError, KeyError, TypeError, AttributeError):  # another shape: the text
            pass
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# The streams handed to the SDK's line loop


# When the client closes stdin, requests still running are answered before the server ends
# (the SDK would cancel them unanswered), for at most this long: the longest tool (audit_code,
# AUDIT_TIME_LIMIT_S) plus a margin.
DRAIN_TIMEOUT_S = 30.0


class _Pending:
    """Ids of requests passed to the SDK and not yet answered."""

    def __init__(self) -> None:
        self._ids: set[str | int] = set()
        self._changed = threading.Condition()

    def asked(self, line: str) -> None:
        message = json.loads(line)
        if "method" in message and _usable_id(message.get("id")):
            with self._changed:
                self._ids.add(message["id"])

    def answered(self, text: str) -> None:
        if '"id"' not in text:
            return  # a notification from the server
        try:
            message = json.loads(text)
        except ValueError:
            return
        if "method" not in message and message.get("id") in self._ids:
            with self._changed:
                self._ids.discard(message["id"])
                self._changed.notify_all()

    def wait_all(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: not self._ids, timeout)


class _Writer:
    """Whole lines to the wire, one at a time (error replies and the SDK's messages share it)."""

    def __init__(self, stream: IO[bytes], pending: _Pending | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._pending = pending

    def write_line(self, text: str) -> None:
        data = text.rstrip("\n").encode("utf-8") + b"\n"
        with self._lock:
            self._stream.write(data)
            self._stream.flush()
        if self._pending is not None:
            self._pending.answered(text)

    async def write(self, text: str) -> None:
        await anyio.to_thread.run_sync(self.write_line, text)

    async def flush(self) -> None:
        return None  # each write flushed its line


class _CheckedLines:
    """The inbound lines the SDK reads: only those that will validate; the others are
    answered here."""

    def __init__(self, stream: IO[bytes], writer: _Writer, pending: _Pending | None = None) -> None:
        self._stream = stream
        self._writer = writer
        self._pending = pending

    def __aiter__(self) -> _CheckedLines:
        return self

    async def __anext__(self) -> str:
        while True:
            raw = await anyio.to_thread.run_sync(self._read_line, abandon_on_cancel=True)
            if raw is None:
                if self._pending is not None:  # the client closed stdin: answer what runs
                    await anyio.to_thread.run_sync(self._pending.wait_all, DRAIN_TIMEOUT_S)
                raise StopAsyncIteration
            if raw is _TOO_LONG:
                reply: dict[str, Any] | None = error_reply(
                    None,
                    INVALID_REQUEST,
                    f"Invalid Request: the line is over {MAX_LINE_BYTES:,} bytes; not read",
                )
                line = None
            else:
                line, reply = check_line(raw)
            if reply is not None:
                logger.info("answered a malformed message: %s", reply["error"]["message"])
                await self._writer.write(json.dumps(reply))
            if line is not None:
                if self._pending is not None:
                    self._pending.asked(line)
                return line

    def _read_line(self) -> bytes | None:
        line = self._stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return None
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while True:  # skip the rest of the long line
                rest = self._stream.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
            return _TOO_LONG
        return line


_TOO_LONG = b"\x00too-long"


@asynccontextmanager
async def checked_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """``(read_stream, write_stream)`` for the low-level server, over fds 0 and 1."""
    with _claimed_std_fds() as (wire_in, wire_out):
        pending = _Pending()
        writer = _Writer(wire_out, pending)
        lines = _CheckedLines(wire_in, writer, pending)
        async with stdio_server(stdin=lines, stdout=writer) as streams:  # type: ignore[arg-type]
            yield streams


@contextmanager
def _claimed_std_fds() -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """Move the wire to private duplicates of fds 0 and 1; point fd 0 at the null device and
    fd 1 at stderr while serving; put both back on exit."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved: list[tuple[int, int]] = []
    try:
        for fd, replacement in ((0, os.open(os.devnull, os.O_RDONLY)), (1, os.dup(2))):
            saved.append((fd, os.dup(fd)))
            os.dup2(replacement, fd)
            os.close(replacement)
        # closefd=False: a reader thread may still be blocked on the wire after serving ends
        with (
            os.fdopen(wire_in, "rb", closefd=False) as stdin,
            os.fdopen(wire_out, "wb", closefd=False) as stdout,
        ):
            yield stdin, stdout
    finally:
        for fd, original in reversed(saved):
            os.dup2(original, fd)
            os.close(original)
