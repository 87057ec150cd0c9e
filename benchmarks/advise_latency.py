"""Wall time of `ecoguard advise "..."` per question, as a fresh process (target < 300 ms).

Run: .venv/bin/python benchmarks/advise_latency.py [--repeat N]
Prints one line per question (best and median of N runs) and the overall median; exits 1 when
the overall median is above the target.

``--compare TREE [TREE ...]``: source trees (e.g. ``git archive`` of two commits) run in turn,
question by question (PYTHONPATH=TREE, ``python -m ecoguard``, bytecode written), so a busy
machine slows them alike; per tree the median over the questions of each question's best and
median wall and CPU time (the child's user+sys, steadier than wall on a shared machine), and
``python -c "import ecoguard"`` after each question in the same rounds, and the ratio of the
medians (issue 28: advise no slower than 3x the import).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.300
QUESTIONS = (
    "What is the greenest config for Qwen2.5-3B on an RTX 5090?",
    "What will Mistral-7B on an A800 cost for a million requests a month?",
    "Compare all precisions for Qwen2.5-7B on a 5090",
    "My load_in_8bit bill is crazy, help",
    "Should I use FP8 on Blackwell?",
    "Why is 4-bit sometimes worse?",
    "我想用 Yi-6B 跑 100 万字, 要花多少钱?",
    # issue 22: served uses with batching advice, rates, no model, unlisted cards, pasted code
    "Chatbot with 500 concurrent users, Mistral-7B on A800",
    "100 requests per second with Qwen2.5-7B on H100",
    "我的服务用了load_in_8bit=True，电费很高，怎么办？",
    "Qwen2.5-7B on an RTX 4080, greenest config?",
    "audit my code: model = AutoModelForCausalLM.from_pretrained('x', load_in_8bit=True)",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compare", nargs="+", metavar="TREE", help="source trees, alternated")
    args = parser.parse_args()
    if args.compare:
        return compare(args.compare, args.repeat)
    exe = Path(sys.executable).with_name("ecoguard")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ecoguard"]
    medians = []
    for question in QUESTIONS:
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            proc = subprocess.run([*cmd, "advise", question], capture_output=True)
            times.append(time.perf_counter() - start)
            if proc.returncode != 0:
                print(
                    f"FAILED ({proc.returncode}): {question}\n{proc.stderr.decode()}",
                    file=sys.stderr,
                )
                return 2
        med = statistics.median(times)
        medians.append(med)
        print(f"{min(times) * 1000:7.0f} ms best  {med * 1000:7.0f} ms median  {question}")
    overall = statistics.median(medians)
    print(f"overall median {overall * 1000:.0f} ms (target < {TARGET_S * 1000:.0f} ms)")
    return 0 if overall < TARGET_S else 1


def _timed(tree: str, args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh ``python ARGS`` importing ecoguard from ``tree``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = tree
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"FAILED in {tree}: {args}\n{proc.stderr.decode()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compare(trees: list[str], repeat: int) -> int:
    """The trees alternated question by question; one summary line per tree."""
    for tree in trees:  # write bytecode and load once, outside the timing
        for question in QUESTIONS:
            _timed(tree, ["-m", "ecoguard", "advise", question])
    runs = {tree: {q: [] for q in QUESTIONS} for tree in trees}
    imports: dict[str, list[tuple[float, float]]] = {tree: [] for tree in trees}
    for _ in range(repeat):
        for question in QUESTIONS:
            for tree in trees:
                runs[tree][question].append(_timed(tree, ["-m", "ecoguard", "advise", question]))
            for tree in trees:  # interleaved with the questions: the same machine state
                imports[tree].append(_timed(tree, ["-c", "import ecoguard"]))
    for tree in trees:
        per = runs[tree].values()
        best_wall = statistics.median(min(w for w, _ in r) for r in per)
        med_wall = statistics.median(statistics.median(w for w, _ in r) for r in per)
        best_cpu = statistics.median(min(c for _, c in r) for r in per)
        med_cpu = statistics.median(statistics.median(c for _, c in r) for r in per)
        imp_wall = min(w for w, _ in imports[tree])
        imp_med = statistics.median(w for w, _ in imports[tree])
        imp_cpu = min(c for _, c in imports[tree])
        print(
            f"{tree}: median wall {med_wall * 1000:.0f} ms (best {best_wall * 1000:.0f}), "
            f"best CPU {best_cpu * 1000:.0f} ms, median CPU {med_cpu * 1000:.0f} ms; "
            f"import ecoguard median {imp_med * 1000:.0f} ms wall (best {imp_wall * 1000:.0f}, "
            f"{imp_cpu * 1000:.0f} ms CPU); advise / import {med_wall / imp_med:.2f}x "
            f"(load {os.getloadavg()[0]:.1f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
