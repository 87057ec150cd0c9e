"""Audit time against the number of ``generate`` calls in one loop, and ``ping`` latency of the
MCP server during a burst of concurrent ``audit_code`` calls (issue 21).

The audit used to re-walk a loop once per call inside it (quadratic: 2,000 calls took 42 s,
4,000 took 165 s); it is now linear. ``--ecoguard-path DIR`` imports ecoguard from another
checkout (e.g. ``git archive OLD ecoguard data | tar -x -C /tmp/old``) for the before figures.

    python benchmarks/audit_scaling.py                       # 500..4000 calls
    python benchmarks/audit_scaling.py --calls 500,1000,2000 --ecoguard-path /tmp/old
    python benchmarks/audit_scaling.py --mcp                 # also: ping during 48 audits
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time


def generate_loop(calls: int) -> str:
    lines = ["for prompt in prompts:"]
    lines += [f"    out{i} = model.generate(prompt, max_new_tokens=8)" for i in range(calls)]
    return "\n".join(lines) + "\n"


def time_audit(calls: int, repeats: int) -> float:
    from ecoguard.audit import audit_source

    source = generate_loop(calls)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = audit_source(source)
        times.append(time.perf_counter() - start)
        assert len(result.findings) == calls
    return statistics.median(times)


def audit_table(sizes: list[int], repeats: int) -> None:
    print(f"{'calls':>6} {'bytes':>8} {'audit s':>9} {'us/call':>9} {'per-call vs first':>18}")
    first = None
    for calls in sizes:
        seconds = time_audit(calls, repeats if calls <= 2000 else 1)
        per_call = seconds / calls * 1e6
        first = first or per_call
        print(
            f"{calls:>6} {len(generate_loop(calls)):>8} {seconds:>9.2f} {per_call:>9.0f} "
            f"{per_call / first:>17.2f}x"
        )


def mcp_ping_during_burst(burst: int, calls: int) -> None:
    """Send ``burst`` audit_code calls (each a loop of ``calls`` generate calls), then a ping;
    report how long the ping took and when the last audit finished."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    env["ECOGUARD_LEDGER"] = "off"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ecoguard", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    buffer = b""

    def send(message: dict) -> None:
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    def receive() -> dict:
        nonlocal buffer
        while b"\n" not in buffer:
            select.select([proc.stdout], [], [], 600)
            buffer += os.read(proc.stdout.fileno(), 1 << 20)
        line, buffer = buffer.split(b"\n", 1)
        return json.loads(line)

    send(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        }
    )
    receive()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    source = generate_loop(calls)
    start = time.perf_counter()
    for ident in range(1, burst + 1):
        arguments = {"source": source}
        send(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "method": "tools/call",
                "params": {"name": "audit_code", "arguments": arguments},
            }
        )
    ping_sent = time.perf_counter()
    send({"jsonrpc": "2.0", "id": 10_000, "method": "ping"})
    ping_s = last_s = 0.0
    for _ in range(burst + 1):
        reply = receive()
        now = time.perf_counter()
        if reply["id"] == 10_000:
            ping_s = now - ping_sent
        else:
            last_s = now - start
    proc.stdin.close()
    proc.wait(timeout=30)
    print(
        f"MCP: {burst} concurrent audit_code calls of {len(source):,} bytes: ping answered in "
        f"{ping_s * 1000:.0f} ms; last audit done after {last_s:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", default="500,1000,2000,4000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ecoguard-path", default=None)
    parser.add_argument("--mcp", action="store_true")
    parser.add_argument("--burst", type=int, default=48)
    parser.add_argument("--burst-calls", type=int, default=190, help="~7 KB per audit")
    args = parser.parse_args()
    if args.ecoguard_path:
        sys.path.insert(0, args.ecoguard_path)
    import ecoguard

    print(f"ecoguard from {os.path.dirname(ecoguard.__file__)}")
    audit_table([int(n) for n in args.calls.split(",")], args.repeats)
    if args.mcp:
        mcp_ping_during_burst(args.burst, args.burst_calls)


if __name__ == "__main__":
    main()
