"""An offline batch job that reports its own energy with ``ecoguard.measure``.

    ECOGUARD_BACKEND=simulated python examples/batch_job.py --batch-size 8
    python examples/batch_job.py --prompts prompts.txt --json   # one prompt per line

``ecoguard.install()`` turns the guard on (alerts, per-call measurement, the ledger); the
``with ecoguard.measure("label") as m`` block then gives the energy of the whole job (J, all of the
GPU's draw while it ran, idle included), the tokens generated in it and their joules per token.
Without a GPU driver, ECOGUARD_BACKEND=simulated measures a simulated GPU and ``m.tier`` says so.
"""

from __future__ import annotations

import argparse
import json
import time

import _model  # examples/_model.py: SmolLM2 offline, or a tiny model with --tiny

import ecoguard

DEFAULT_PROMPTS = [
    "Summarise why batching saves energy.",
    "Name three renewable energy sources.",
    "What is a joule?",
    "Translate 'good morning' into French.",
    "Give a synonym for 'efficient'.",
    "What does a GPU do?",
    "Name a large river.",
    "What is 12 times 12?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", help="text file, one prompt per line (default: built in)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (seconds)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    prompts = DEFAULT_PROMPTS
    if args.prompts:
        with open(args.prompts, encoding="utf-8") as handle:
            prompts = [line.strip() for line in handle if line.strip()]

    ecoguard.install(mode="warn")  # settings from ECOGUARD_* env, mode given here
    model, tokenizer = _model.load(args.tiny)

    started = time.perf_counter()
    with ecoguard.measure("batch-job") as m:
        answers = []
        for i in range(0, len(prompts), args.batch_size):
            chunk = prompts[i : i + args.batch_size]
            answers += _model.generate(model, tokenizer, chunk, args.max_new_tokens)
    elapsed = time.perf_counter() - started
    ecoguard.uninstall()  # stops the meter and writes the ledger's queue

    result = {
        "prompts": len(prompts),
        "calls": len(m.records),
        "tokens": m.tokens,
        "energy_j": m.energy_j,
        "joules_per_token": m.joules_per_token,
        "cost_usd": sum(r.cost_usd or 0.0 for r in m.records),
        "tier": m.tier,  # "live" from NVML, "simulated" without a GPU
        "gpus": list(m.gpus),
        "wall_s": round(elapsed, 3),
    }
    if args.json:
        print(json.dumps(result))
        return
    if _model.is_random(tokenizer):
        print(
            f"{len(prompts)} prompts answered by a tiny model with random weights (--tiny or "
            "EXAMPLE_TINY=1): its answers are random bytes, so they are not shown (its calls, "
            "tokens and energy below are real)"
        )
    else:
        for prompt, answer in zip(prompts, answers, strict=True):
            print(f"- {prompt}\n  {answer}")
    per_token = m.joules_per_token
    calls = "generate call" if result["calls"] == 1 else "generate calls"
    print(
        f"\n{result['prompts']} prompts in {result['calls']} {calls}: {m.tokens} "
        f"{'token' if m.tokens == 1 else 'tokens'}, "
        f"{m.energy_j:.1f} J, {per_token:.3g} J/token [{m.tier}] on {', '.join(m.gpus)}"
        if per_token is not None
        else f"\nno tokens measured [{m.tier}]"
    )


if __name__ == "__main__":
    main()
