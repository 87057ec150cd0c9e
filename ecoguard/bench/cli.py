"""``ecoguard bench``: measure a model on this machine and add the rows to the local dataset.

Light at import: torch and transformers load inside the run (ecoguard.bench.loading), once the
arguments are known to be good.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from ecoguard.bench import dataset as data
from ecoguard.bench import runner
from ecoguard.bench.plan import BenchPlan, parse_precisions, parse_sizes
from ecoguard.bench.progress import StderrProgress
from ecoguard.config import Settings
from ecoguard.errors import UsageError
from ecoguard.knowledge import resolve_gpu
from ecoguard.knowledge.tables import local_data_path

DEFAULT_PRECISIONS = "fp16,nf4,int8_pure,int8_mixed"
SIMULATED_NOTICE = (
    "SIMULATED: no GPU measured. Energy is the simulated {gpu} profile's power x this machine's "
    "timing; these figures are not measurements."
)


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser(
        "bench",
        help="measure energy per token of a model on this machine (rows of tier local)",
        description=(
            "Run the reference measurement protocol on this machine: per precision and batch "
            "size, warm-up calls then measured runs of a fixed prompt and exactly N new tokens "
            "(greedy), one meter window per run. Finished cells are appended to the local "
            "dataset at once (tier local), which `ecoguard estimate` then prefers."
        ),
    )
    bench.add_argument("--model", required=True, help="local model folder or hub id")
    bench.add_argument(
        "--precisions",
        default=DEFAULT_PRECISIONS,
        help=f"comma-separated (default {DEFAULT_PRECISIONS}; also fp8_weight_only, bf16, ...)",
    )
    bench.add_argument("--batch-sizes", default="1,8,32", help="comma-separated (default 1,8,32)")
    bench.add_argument("--prompt-tokens", type=int, default=512, help="prompt length (default 512)")
    bench.add_argument(
        "--generation-tokens", type=int, default=256, help="new tokens per sequence (default 256)"
    )
    bench.add_argument("--runs", type=int, default=10, help="measured runs per cell (default 10)")
    bench.add_argument("--warmup", type=int, default=3, help="warm-up calls per cell (default 3)")
    bench.add_argument(
        "--cooldown-s", type=float, default=0.0, help="pause between measured runs (default 0)"
    )
    bench.add_argument(
        "--idle-s", type=float, default=2.0, help="idle power sampling before the runs (default 2)"
    )
    bench.add_argument(
        "--cv-bound",
        type=float,
        default=5.0,
        help="flag cells whose CV of J/1k or throughput exceeds this %% (default 5)",
    )
    bench.add_argument("--out", help="also write the community submission CSV to this file")
    bench.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "nvml", "simulated"),
        help="auto: NVML when it starts, else the simulated GPU (default auto)",
    )
    bench.add_argument(
        "--simulated-gpu", help="GPU profile for the simulated backend (default a800)"
    )
    bench.add_argument(
        "--no-save", action="store_true", help="do not append the rows to the local dataset"
    )
    bench.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    bench.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    plan = BenchPlan(
        model=args.model,
        precisions=parse_precisions(args.precisions),
        batch_sizes=parse_sizes(args.batch_sizes),
        prompt_tokens=args.prompt_tokens,
        generation_tokens=args.generation_tokens,
        runs=args.runs,
        warmup=args.warmup,
        cooldown_s=args.cooldown_s,
        idle_s=args.idle_s,
        cv_bound_pct=args.cv_bound,
        backend=args.backend,
    )
    settings = Settings.from_env(simulated_gpu=args.simulated_gpu)
    resolve_gpu(settings.simulated_gpu)  # an unknown simulated GPU is a usage error, said early
    dataset = None if args.no_save else local_data_path()
    if args.out:
        _check_out_path(Path(args.out))

    out_csv = data.CommunityCsv(Path(args.out)) if args.out else None
    text = not args.json

    def on_start(result) -> None:
        if text:
            _print_header(result, dataset, out_csv)

    def on_cell(cell, result) -> None:
        if cell.status != "measured":
            return
        row = data.build_row(cell, result)
        cell.row = row
        if dataset is not None:
            data.append_rows(dataset, [data.row_record(row, cell, result)])
        if out_csv is not None:
            out_csv.append(data.community_row(row, cell, result))

    result = runner.run_bench(
        plan, settings=settings, on_cell=on_cell, on_start=on_start, progress=StderrProgress()
    )
    if args.json:
        print(json.dumps(_json(result, dataset, out_csv), indent=2, default=str))
    else:
        _print_summary(result, dataset, out_csv)
    if result.interrupted:
        print("ecoguard bench: interrupted; finished cells were kept", file=sys.stderr)
        return 130
    return 0 if result.measured else 1


def _notice(result) -> str | None:
    if not result.info.simulated:
        return None
    return SIMULATED_NOTICE.format(gpu=result.info.gpu_profile)


def _json(result, dataset, out_csv) -> dict:
    notice = _notice(result)
    return {
        "simulated": result.info.simulated,
        "notice": notice,
        "session": result.info.to_dict(),
        "plan": {
            "model": result.plan.model,
            "precisions": list(result.plan.ordered_precisions),
            "batch_sizes": list(result.plan.batch_sizes),
            "prompt_tokens": result.plan.prompt_tokens,
            "generation_tokens": result.plan.generation_tokens,
            "runs": result.plan.runs,
            "warmup": result.plan.warmup,
            "cooldown_s": result.plan.cooldown_s,
            "cv_bound_pct": result.plan.cv_bound_pct,
        },
        "cells": [cell.to_dict() for cell in result.cells],
        "interrupted": result.interrupted,
        "dataset": str(dataset) if dataset is not None else None,
        "out": str(out_csv.path) if out_csv is not None else None,
        "simulated_notice_end": notice,
    }


def _print_header(result, dataset, out_csv) -> None:
    info, plan = result.info, result.plan
    notice = _notice(result)
    if notice:
        print("!! " + notice)
    detail = info.backend if info.backend == info.tier else f"{info.backend}, {info.tier}"
    where = f"{info.gpu_name} ({detail})"
    print(f"ecoguard bench: {plan.model} on {where}, device {info.device}")
    print(
        f"  {len(plan.cells)} cells: {', '.join(plan.ordered_precisions)} x batch "
        f"{', '.join(map(str, plan.batch_sizes))}; prompt {plan.prompt_tokens}, exactly "
        f"{plan.generation_tokens} new tokens, greedy; {plan.warmup} warm-up + {plan.runs} runs"
    )
    idle = f"{info.idle_power_w:.1f} W" if info.idle_power_w is not None else "unknown"
    print(f"  idle power before the runs: {idle} (reported, not subtracted)")
    print(f"  rows go to: {dataset if dataset is not None else '(not saved: --no-save)'}")
    if out_csv is not None:
        print(f"  community CSV: {out_csv.path}")
    print(flush=True)


def _print_summary(result, dataset, out_csv) -> None:
    header = (
        f"{'precision':<16}{'bs':>5}{'runs':>5}{'tok/s':>12}{'W':>14}{'J/1k tok':>18}"
        f"{'CV%':>7}{'J/request':>12}{'mem GB':>9}{'vs fp16':>9}  status"
    )
    print(header)
    for cell in result.cells:
        s = cell.summary
        if s is None:
            print(f"{cell.precision:<16}{cell.batch_size:>5}{'-':>5}  {cell.status}: {cell.reason}")
            continue
        delta = cell.delta_vs_fp16_pct
        mem = f"{cell.peak_memory_gb:.3f}" if cell.peak_memory_gb is not None else "-"
        if cell.memory_kind == "rss" and cell.peak_memory_gb is not None:
            mem += "*"
        flag = "measured" + (" (CV high: re-run)" if s.unstable else "")
        print(
            f"{cell.precision:<16}{cell.batch_size:>5}{len(cell.samples):>5}"
            f"{s.throughput_tok_s.mean:>8.1f}±{s.throughput_tok_s.std:<3.0f}"
            f"{s.power_w.mean:>9.1f}±{s.power_w.std:<4.1f}"
            f"{s.energy_j_per_1k.mean:>12.1f}±{s.energy_j_per_1k.std:<5.1f}"
            f"{s.cv_pct or 0:>7.1f}{s.energy_j_per_request.mean:>12.2f}{mem:>9}"
            f"{(f'{delta:+.1f}%' if delta is not None else '-'):>9}  {flag}"
        )
    if any(c.memory_kind == "rss" and c.peak_memory_gb is not None for c in result.cells):
        print("  * CPU run: peak resident memory of the process, not VRAM")
    unstable = [c for c in result.measured if c.summary and c.summary.unstable]
    if unstable:
        print(
            f"  {len(unstable)} cell(s) vary more than the {result.plan.cv_bound_pct:g}% CV bound "
            "(thermal drift, clocks, other load): re-run them with --cooldown-s 30 or more --warmup"
        )
    measured = result.measured
    if measured and dataset is not None:
        first = measured[0]
        print(f"  {len(measured)} row(s) of tier local appended to {dataset}")
        print(
            "  use them: ecoguard estimate --model "
            f"{_quote(result.info.model_id)} --gpu {first.row.gpu} --precision {first.precision} "
            f"--batch-size {first.batch_size} --prompt-tokens {result.plan.prompt_tokens} "
            f"--generation-tokens {result.plan.generation_tokens}"
        )
    if out_csv is not None:
        print(f"  community submission CSV: {out_csv.path}")
    notice = _notice(result)
    if notice:
        print("!! " + notice)


def _quote(text: str) -> str:
    return shlex.quote(text)


def _check_out_path(path: Path) -> None:
    """``--out`` names a CSV file to write: said before the runs, not after minutes of them."""
    try:
        is_dir, parent_is_dir = path.is_dir(), path.parent.is_dir()
    except OSError as exc:  # a name too long, or not a name this file system takes
        raise UsageError(f"--out cannot be used as a file name: {exc.strerror}") from None
    if is_dir:
        raise UsageError(f"--out {str(path)!r} is a directory; give a file name such as bench.csv")
    if not parent_is_dir:
        raise UsageError(
            f"--out {str(path)!r}: directory {str(path.parent)!r} does not exist; create it first"
        )
