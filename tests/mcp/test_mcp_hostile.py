"""`ecoguard mcp` under hostile input (issue 21): every malformed line gets a JSON-RPC error
reply (the SDK alone dropped them and the client hung), tool calls run in a bounded pool so a
burst of large audits cannot starve `ping`, and each audit has a time limit.

The wire tests speak raw JSON lines to a server subprocess, since an SDK client cannot send
malformed messages. No __init__.py here on purpose (a package named ``mcp`` would shadow the SDK).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("mcp.server.mcpserver", reason="needs the mcp extra, SDK 2.x")

from ecoguard.config import Settings
from ecoguard.mcp.stdio import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    check_line,
)

REPO = Path(__file__).resolve().parents[2]
REPLY_TIMEOUT_S = 60.0  # a hung server fails the test instead of the run


class RawServer:
    """``ecoguard mcp`` as a subprocess, spoken to line by line."""

    def __init__(self, tmp_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
        env["ECOGUARD_LEDGER"] = str(tmp_path / "ledger.sqlite")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ecoguard", "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=str(REPO),
        )
        self._buffer = b""

    def send(self, raw: bytes | str | dict) -> None:
        if isinstance(raw, dict):
            raw = json.dumps(raw)
        if isinstance(raw, str):
            raw = raw.encode("utf-8", errors="surrogatepass")
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not ready:
                raise AssertionError("no reply from the server (the client would hang)")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise AssertionError("the server closed its output")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def request(self, ident: int, method: str, params: dict | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def initialize(self) -> None:
        self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "hostile-test", "version": "1"},
            },
        )
        assert "result" in self.receive()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def server(tmp_path):
    raw = RawServer(tmp_path)
    try:
        raw.initialize()
        yield raw
    finally:
        raw.close()


MALFORMED: list[tuple[str, bytes, object, int]] = [
    ("not JSON", b"{not json", None, PARSE_ERROR),
    ("truncated", b'{"jsonrpc": "2.0", "id": 9, "method": "ping"', None, PARSE_ERROR),
    ("invalid UTF-8", b'{"jsonrpc":"2.0","id":10,"method":"ping"\xff}', None, PARSE_ERROR),
    ("a number", b"42", None, INVALID_REQUEST),
    ("a batch", b'[{"jsonrpc":"2.0","id":11,"method":"ping"}]', None, INVALID_REQUEST),
    ("3000 deep", b"[" * 3000 + b"]" * 3000, None, PARSE_ERROR),
    (
        "params an array",
        b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":[1,2]}',
        12,
        INVALID_PARAMS,
    ),
    (
        "params a string",
        b'{"jsonrpc":"2.0","id":"s13","method":"tools/list","params":"x"}',
        "s13",
        INVALID_PARAMS,
    ),
    (
        "lone surrogate argument",
        b'{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"advise",'
        b'"arguments":{"question":"cost of \\ud800 Qwen2.5-7B"}}}',
        14,
        INVALID_PARAMS,
    ),
    (
        "lone surrogate in source",
        b'{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"audit_code",'
        b'"arguments":{"source":"x = \'\\udc80\'"}}}',
        15,
        INVALID_PARAMS,
    ),
    ("method a number", b'{"jsonrpc":"2.0","id":16,"method":5}', 16, INVALID_REQUEST),
    ("no jsonrpc field", b'{"id":17,"method":"ping"}', 17, INVALID_REQUEST),
    # ids the SDK does not take read as notifications there, never answered (issue 29)
    ("id an object", b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', None, INVALID_REQUEST),
    ("id an array", b'{"jsonrpc":"2.0","id":[18],"method":"ping"}', None, INVALID_REQUEST),
    ("id a fraction", b'{"jsonrpc":"2.0","id":19.5,"method":"ping"}', 19.5, INVALID_REQUEST),
    ("id a float", b'{"jsonrpc":"2.0","id":20.0,"method":"ping"}', 20.0, INVALID_REQUEST),
    ("id null", b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None, INVALID_REQUEST),
]


def test_every_malformed_line_gets_an_error_reply_and_the_server_goes_on(server):
    for name, raw, ident, code in MALFORMED:
        server.send(raw)
        reply = server.receive()
        assert reply.get("jsonrpc") == "2.0", name
        assert reply.get("id") == ident, name
        assert reply["error"]["code"] == code, (name, reply)
        assert reply["error"]["message"], name
    # a malformed notification is not answered (JSON-RPC forbids it), and breaks nothing
    server.send(b'{"jsonrpc":"2.0","method":"notifications/initialized","params":[1]}')
    server.send(b"")  # a blank line is no message
    server.request(99, "ping")
    assert server.receive() == {"jsonrpc": "2.0", "id": 99, "result": {}}
    # and a real tool call still works after all of that
    server.request(
        100, "tools/call", {"name": "explain_trap", "arguments": {"rule_id": "int8-mixed"}}
    )
    reply = server.receive()
    assert reply["id"] == 100 and not reply["result"].get("isError")


def test_calls_running_when_stdin_closes_are_still_answered(tmp_path):
    """A client that sends its requests and closes stdin (a pipe, a one-shot script) gets
    every answer before the server ends; the SDK used to cancel the ones still running."""
    raw = RawServer(tmp_path)
    try:
        raw.initialize()
        asked = list(range(1, 7))
        for ident in asked:
            question = f"Mistral-7B on A800 with int8, batch {ident}: cost for 1M requests?"
            raw.request(
                ident, "tools/call", {"name": "advise", "arguments": {"question": question}}
            )
        assert raw.proc.stdin is not None
        raw.proc.stdin.close()
        answered = []
        with contextlib.suppress(AssertionError):  # "the server closed its output" ends it
            while len(answered) < len(asked):
                answered.append(raw.receive()["id"])
        assert sorted(answered) == asked
        assert raw.proc.wait(timeout=30) == 0
    finally:
        raw.proc.stdin = None
        raw.close()


def _generate_loop(calls: int) -> str:
    return (
        "for prompt in prompts:\n"
        + "\n".join(f"    out{i} = model.generate(prompt)" for i in range(calls))
        + "\n"
    )


def test_a_burst_of_audits_does_not_starve_ping(server):
    """48 concurrent 7 KB audits made ping wait 44 s. Tool calls now run at most two at a
    time in worker threads, so the event loop that reads the wire and answers ping is never
    crowded out: ping, sent after the burst, is answered before the third audit is done."""
    source = _generate_loop(300)  # ~11 KB
    burst = 12
    for ident in range(1, burst + 1):
        server.request(ident, "tools/call", {"name": "audit_code", "arguments": {"source": source}})
    server.request(1000, "ping")
    replies = [server.receive() for _ in range(burst + 1)]
    order = [reply["id"] for reply in replies]
    assert order.index(1000) <= 2, f"ping waited behind the audits: {order}"
    audits = [reply for reply in replies if reply["id"] != 1000]
    assert all(not reply["result"].get("isError") for reply in audits)
    assert {len(reply["result"]["structuredContent"]["findings"]) for reply in audits} == {300}


def test_check_line_passes_valid_messages_through():
    line = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    assert check_line(line) == (line.decode().strip(), None)
    assert check_line(b"   \n") == (None, None)
    # a response from the client (to a server request) is passed through too
    response = b'{"jsonrpc":"2.0","id":3,"result":{}}'
    assert check_line(response)[0] is not None


def _settings() -> Settings:
    return Settings(ledger_path=None)


@pytest.mark.anyio
async def test_tool_calls_are_bounded_and_the_excess_refused(monkeypatch):
    """At most MAX_RUNNING_CALLS tool functions run at once; MAX_WAITING_CALLS more wait;
    one more is refused at once with a tool error saying the server is busy."""
    import anyio
    from mcp.server.mcpserver.exceptions import ToolError

    import ecoguard.mcp.server as mcp_server
    import ecoguard.mcp.tools as mcp_tools

    release = threading.Event()
    running = {"now": 0, "most": 0}
    lock = threading.Lock()

    def slow_audit(source: str, filename: str, **options: Any) -> Any:
        with lock:
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
        release.wait(timeout=60)
        with lock:
            running["now"] -= 1
        return SimpleNamespace(to_dict=lambda: {"ok": True})

    monkeypatch.setattr(mcp_tools, "audit_source", slow_audit)
    server = mcp_server.build_server(settings=_settings())
    gate = server.ecoguard_gate
    capacity = mcp_server.MAX_RUNNING_CALLS + mcp_server.MAX_WAITING_CALLS
    results: list[Any] = []

    async def call() -> None:
        results.append(await server.call_tool("audit_code", {"source": "x = 1"}, None))

    async with anyio.create_task_group() as group:
        for _ in range(capacity):
            group.start_soon(call)
        with anyio.fail_after(30):
            while gate.admitted < capacity:
                await anyio.sleep(0.01)
        with pytest.raises(ToolError, match=r"busy: .* retry in a moment"):
            await server.call_tool("audit_code", {"source": "x = 1"}, None)
        release.set()
    assert len(results) == capacity
    assert running["most"] == mcp_server.MAX_RUNNING_CALLS
    assert gate.admitted == 0


@pytest.mark.anyio
async def test_audit_code_has_a_time_limit(monkeypatch):
    from mcp.server.mcpserver.exceptions import ToolError

    import ecoguard.mcp.server as mcp_server
    import ecoguard.mcp.tools as mcp_tools

    monkeypatch.setattr(mcp_tools, "AUDIT_TIME_LIMIT_S", -1.0)
    server = mcp_server.build_server(settings=_settings())
    with pytest.raises(ToolError, match=r"limit and was stopped"):
        await server.call_tool("audit_code", {"source": _generate_loop(5)}, None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_line_over_the_limit_is_refused_unread(monkeypatch):
    """A line longer than MAX_LINE_BYTES is skipped to its end and answered, and the next
    line is read normally."""
    import io

    import anyio

    import ecoguard.mcp.stdio as wire

    monkeypatch.setattr(wire, "MAX_LINE_BYTES", 64)
    ping = b'{"jsonrpc":"2.0","id":2,"method":"ping"}'
    stream = io.BytesIO(
        b'{"jsonrpc":"2.0","id":1,"method":"x","pad":"' + b"z" * 500 + b'"}\n' + ping + b"\n"
    )
    written = io.BytesIO()
    writer = wire._Writer(written)

    async def first_passed_line() -> str:
        return await wire._CheckedLines(stream, writer).__anext__()

    assert anyio.run(first_passed_line) == ping.decode()
    [reply] = [json.loads(line) for line in written.getvalue().splitlines()]
    assert reply["id"] is None and reply["error"]["code"] == INVALID_REQUEST
    assert "over 64 bytes" in reply["error"]["message"]
