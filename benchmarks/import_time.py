"""Import time of ``import ecoguard`` (target: under 50 ms) and ``import ecoguard.auto``.

Each measurement is a fresh interpreter (``python -c``) so nothing is cached in ``sys.modules``;
the figure is the import alone, timed inside the child with ``perf_counter`` (the interpreter's
own start-up is reported separately as the baseline). The median of ``--repeats`` runs is
reported with the minimum and maximum. Then one ``-X importtime`` run per statement lists the
modules with the largest cumulative import time, and the check that ``import ecoguard`` pulls in
none of torch, transformers, pynvml or prometheus_client.

    .venv/bin/python benchmarks/import_time.py [--repeats 15] [--top 8] [--json]

``import ecoguard.auto`` installs the guard from ECOGUARD_* variables: it starts the meter's
sampler thread (with the null backend here unless ECOGUARD_BACKEND says otherwise) and, where
set, the /metrics server. It is timed with ECOGUARD_LEDGER=off and ECOGUARD_METRICS_PORT unset so
that it measures the import, not a disk or a socket.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

TARGET_MS = {"ecoguard": 50.0}
HEAVY = ("torch", "transformers", "pynvml", "prometheus_client", "bitsandbytes", "torchao")

_TIMER = (
    "import time, sys; t0 = time.perf_counter(); {statement}; "
    "dt = (time.perf_counter() - t0) * 1000; "
    "heavy = [m for m in {heavy!r} if m in sys.modules]; "
    "print(repr((dt, heavy)))"
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    env["ECOGUARD_LEDGER"] = "off"
    return env


def time_import(statement: str, repeats: int) -> dict[str, object]:
    """Median/min/max ms of ``statement`` over ``repeats`` fresh interpreters, and which heavy
    modules it imported."""
    times, heavy = [], []
    code = _TIMER.format(statement=statement, heavy=HEAVY)
    for _ in range(repeats):
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True
        )
        dt, heavy = eval(proc.stdout.strip().splitlines()[-1])  # our own repr, from our own code
        times.append(dt)
    return {
        "statement": statement,
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "repeats": repeats,
        "heavy_modules": heavy,
    }


def interpreter_startup_ms(repeats: int) -> float:
    """Median wall time of ``python -c pass`` (what every CLI call pays before any import)."""
    import time

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=_env())
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _importtime(statement: str) -> list[tuple[str, float]]:
    """(module, cumulative ms) for every line of one ``-X importtime`` run of ``statement``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        # "import time: self [us] | cumulative | imported package" (header), then one per module
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self_us, cumulative_us, name = line.split(":", 1)[1].split("|")
        rows.append((name.strip(), float(cumulative_us) / 1000))
    return rows


def importtime_top(statement: str, top: int) -> list[tuple[str, float]]:
    """The ``top`` modules by cumulative import time (ms), leaving out what the interpreter
    imports at start-up anyway (the modules of ``python -c pass``)."""
    startup = {name for name, _ in _importtime("pass")}
    rows = [row for row in _importtime(statement) if row[0] not in startup]
    rows.sort(key=lambda row: row[1], reverse=True)
    return rows[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--top", type=int, default=8, help="-X importtime entries to list")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    results = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "interpreter_startup_ms": interpreter_startup_ms(args.repeats),
        "imports": [],
    }
    for statement in ("import ecoguard", "import ecoguard.auto"):
        timing = time_import(statement, args.repeats)
        timing["top"] = importtime_top(statement, args.top)
        module = statement.split()[-1]
        timing["target_ms"] = TARGET_MS.get(module)
        results["imports"].append(timing)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"python {results['python']} on {results['machine']}; interpreter start-up "
        f"{results['interpreter_startup_ms']:.0f} ms (not included below)"
    )
    for timing in results["imports"]:
        target = timing["target_ms"]
        verdict = ""
        if target is not None:
            verdict = (
                f" (target < {target:g} ms: {'met' if timing['median_ms'] < target else 'MISSED'})"
            )
        print(
            f"\n{timing['statement']}: median {timing['median_ms']:.1f} ms, min "
            f"{timing['min_ms']:.1f}, max {timing['max_ms']:.1f} over {timing['repeats']} fresh "
            f"interpreters{verdict}"
        )
        heavy = timing["heavy_modules"]
        print(f"  heavy modules imported: {', '.join(heavy) if heavy else 'none'}")
        print("  largest cumulative imports (-X importtime, one run):")
        for name, ms in timing["top"]:
            print(f"    {ms:8.1f} ms  {name}")


if __name__ == "__main__":
    main()
