"""Wall time of `ecoguard advise "..."` per question, as a fresh process (target < 300 ms).

Run: .venv/bin/python benchmarks/advise_latency.py [--repeat N]
Prints one line per question (best and median of N runs) and the overall median; exits 1 when
the overall median is above the target.
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
