"""``ecoguard data`` and ``ecoguard estimate``."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import replace

from ecoguard.config import Settings
from ecoguard.deployment import SERVING_ENGINES, Deployment, ModelSpec, normalize_precision
from ecoguard.errors import UsageError
from ecoguard.knowledge import (
    data_counts,
    find_rows,
    gpu_profiles,
    model_registry,
    region,
    resolve_gpu,
    resolve_model,
)
from ecoguard.knowledge.estimator import estimate
from ecoguard.knowledge.validation import MODES, holdout_points, summary


def register(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser(
        "data",
        help="reference dataset: counts by GPU x precision x tier, rows, GPUs, models",
        description="Show the compiled reference data (counts by GPU, precision and tier).",
    )
    data.add_argument("--json", action="store_true", help="machine-readable output")
    data.add_argument("--rows", action="store_true", help="list rows (filtered by the options)")
    data.add_argument("--gpu", help="filter rows by GPU (key, nickname or NVML name)")
    data.add_argument("--model", help="filter rows by model id or size (7B)")
    data.add_argument("--precision", help="filter rows by precision (aliases accepted)")
    data.add_argument("--tier", choices=("measured", "reported", "local"), help="filter by tier")
    data.add_argument("--gpus", action="store_true", help="list GPU profiles")
    data.add_argument("--models", action="store_true", help="list the model registry")
    data.add_argument(
        "--validate",
        action="store_true",
        help="score the estimator by hold-out (each configuration, each GPU): error, coverage",
    )
    data.set_defaults(func=_data)

    est = sub.add_parser(
        "estimate",
        help="energy, $ and CO2 for a model on a GPU, with the basis of each figure",
        description="Estimate energy per token/request, power, latency, VRAM and monthly cost.",
    )
    est.add_argument("--model", help="model id (Qwen/Qwen2.5-7B-Instruct) or size (7B)")
    est.add_argument(
        "--params-b", type=float, help="parameter count in billions (instead of --model)"
    )
    est.add_argument("--gpu", required=True, help="GPU key, nickname or NVML name")
    est.add_argument(
        "--precision", default="fp16", help="fp16, bf16, nf4, int8_mixed, ... (default fp16)"
    )
    est.add_argument("--batch-size", type=int, default=1)
    est.add_argument(
        "--gpu-count",
        type=int,
        default=1,
        help="GPUs the model is spread over (tensor parallel): energy for all, VRAM per card",
    )
    est.add_argument(
        "--engine",
        choices=SERVING_ENGINES,
        default=None,
        help="serving engine (its FP8 is fused kernels, priced from FP16; default: none)",
    )
    est.add_argument("--prompt-tokens", type=int, default=None)
    est.add_argument("--generation-tokens", type=int, default=None)
    est.add_argument("--requests-per-month", type=int, default=None)
    est.add_argument("--region", default=None, help="us, china, eu, uk, fr, de, in, jp, ca")
    est.add_argument(
        "--holdout",
        choices=("config", "gpu"),
        default=None,
        help="answer as if the rows of this configuration (or this whole GPU) were absent",
    )
    est.add_argument("--json", action="store_true", help="machine-readable output")
    est.set_defaults(func=_estimate)


def _data(args: argparse.Namespace) -> int:
    if args.validate:
        return _validate(args.json)
    if args.gpus:
        profiles = [p.to_dict() for p in gpu_profiles().values()]
        if args.json:
            print(json.dumps(profiles, indent=2))
        else:
            for p in profiles:
                print(
                    f"{p['key']:<13} {p['architecture']:<9} {p['vram_gb']:>5g} GB "
                    f"{p['mem_bandwidth_gbs']:>6g} GB/s {p['tdp_w']:>5g} W  {p['name']}"
                )
        return 0
    if args.models:
        models = [m.to_dict() for m in model_registry().values()]
        if args.json:
            print(json.dumps(models, indent=2))
        else:
            for m in models:
                print(f"{m['id']:<16} {m['params_b']:>7g} B  {m['family'] or '':<8} {m['hf_id']}")
        return 0
    rows = find_rows(gpu=args.gpu, model=args.model, precision=args.precision, tier=args.tier)
    if args.rows:
        if args.json:
            print(json.dumps([r.to_dict() for r in rows], indent=2))
        else:
            for r in rows:
                energy = f"{r.energy_j_per_1k:,.1f}" if r.energy_j_per_1k is not None else "-"
                flag = "  [offloaded: not used]" if r.offloaded else ""
                print(f"{r.id:<70} {r.tier:<9} {energy:>10} J/1k  {r.source}{flag}")
        return 0
    counts = Counter((r.gpu, r.precision, r.tier) for r in rows)
    table = [
        {"gpu": g, "precision": p, "tier": t, "rows": n} for (g, p, t), n in sorted(counts.items())
    ]
    tiers = Counter(r.tier for r in rows)
    study = data_counts()
    if args.json:
        print(
            json.dumps(
                {
                    "total": len(rows),
                    "by_tier": dict(sorted(tiers.items())),
                    "counts": table,
                    "study": study.to_dict(),
                },
                indent=2,
            )
        )
        return 0
    print(f"{len(rows)} rows (" + ", ".join(f"{n} {t}" for t, n in sorted(tiers.items())) + ")")
    print(f"{'GPU':<13} {'precision':<16} {'tier':<9} rows")
    for entry in table:
        print(f"{entry['gpu']:<13} {entry['precision']:<16} {entry['tier']:<9} {entry['rows']}")
    print("\nThe shipped rows beside the study's published counts:")
    for note in study.notes:
        print(f"  - {note}")
    return 0


def _validate(as_json: bool) -> int:
    """Run both hold-outs now (not the shipped table) and print error and coverage."""
    result = {mode: summary(holdout_points(mode), mode) for mode in MODES}
    if as_json:
        print(json.dumps(result, indent=2))
        return 0
    labels = {"config": "leave one configuration out", "gpu": "leave one GPU out"}
    print("How far to trust the estimator (hold-out over every measured configuration;")
    print("error = estimate / hidden measurement - 1; coverage = hidden value inside p10-p90)")
    for mode in MODES:
        s = result[mode]
        print(
            f"\n{labels[mode]}: {s['answered']} of {s['configurations']} answered, median "
            f"|error| {s['median_abs_error_pct']}%, p90 {s['p90_abs_error_pct']}%, coverage "
            f"{s['coverage_pct']}%, median interval width {s['median_width_pct']}%"
        )
        print(f"  {'method':<16} {'n':>3} {'median':>8} {'p90':>8} {'coverage':>9}")
        for family, m in s["by_method"].items():

            def pct(value):
                return "-" if value is None else f"{value}%"

            print(
                f"  {family:<16} {m['n']:>3} {pct(m['median_abs_error_pct']):>8} "
                f"{pct(m['p90_abs_error_pct']):>8} {pct(m['coverage_pct']):>9}"
            )
    return 0


def _positive(name: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise UsageError(f"--{name} must be an integer from {low} to {high}, got {value}")


def _estimate(args: argparse.Namespace) -> int:
    _positive("batch-size", args.batch_size, 1, 4096)
    _positive("prompt-tokens", args.prompt_tokens, 0, 1_048_576)
    _positive("generation-tokens", args.generation_tokens, 1, 1_048_576)
    if args.requests_per_month is not None and args.requests_per_month < 0:
        raise UsageError(f"--requests-per-month must be >= 0, got {args.requests_per_month}")
    if args.params_b is not None and not 0 < args.params_b <= 2000:
        raise UsageError(f"--params-b must be between 0 and 2000 (billions), got {args.params_b}")
    if args.model is None and args.params_b is None:
        raise UsageError("give --model (an id or a size such as 7B) or --params-b")
    gpu = resolve_gpu(args.gpu)
    precision = normalize_precision(args.precision)
    model = resolve_model(args.model) if args.model else None
    spec = ModelSpec(
        id=model.id if model else None,
        params_b=args.params_b
        if args.params_b is not None
        else (model.params_b if model else None),
        family=model.family if model else None,
        layers=model.layers if model else None,
        hidden_size=model.hidden_size if model else None,
        kv_heads=model.kv_heads if model else None,
        head_dim=model.head_dim if model else None,
        context_window=model.context_window if model else None,
    )
    overrides = {}
    if args.region:
        overrides["region"] = region(args.region).key
    settings = Settings.from_env(**overrides)
    region(settings.region)  # an unknown ECOGUARD_REGION is a usage error, said early
    deployment = Deployment(
        model=spec,
        gpu=replace(gpu.to_gpu_spec(), count=args.gpu_count),
        precision=precision,
        engine=args.engine,
        batch_size=args.batch_size,
        prompt_tokens=args.prompt_tokens,
        generation_tokens=args.generation_tokens,
    )
    result = estimate(
        deployment,
        settings=settings,
        requests_per_month=args.requests_per_month,
        holdout=args.holdout,
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
        return 0
    _print_estimate(result, gpu.vram_gb)
    return 0


def _print_estimate(result, vram_available_gb: float) -> None:
    def fmt(value, unit, digits=1):
        return "unknown" if value is None else f"{value:,.{digits}f} {unit}"

    def fmt_range(value, bounds, unit, digits):
        if value is None:
            return "unknown"
        if bounds is None:
            return fmt(value, unit, digits)
        return f"{value:,.{digits}f} {unit} ({bounds[0]:,.{digits}f}-{bounds[1]:,.{digits}f})"

    d = result.deployment
    print(
        f"{d.model.id or f'{d.model.params_b:g}B model'} on "
        f"{f'{d.gpu.count} x ' if d.gpu.count > 1 else ''}{d.gpu.profile}, {d.precision}, "
        f"batch {d.batch_size}"
    )
    print(f"  tier: {result.tier} (confidence {result.confidence})")
    print(
        f"  energy:     {fmt_range(result.energy_per_1k_tokens_j, result.energy_per_1k_tokens_j_range, 'J per 1k tokens', 0)}, "
        f"{fmt_range(result.energy_per_request_j, result.energy_per_request_j_range, 'J per request', 2)}"
    )
    print(
        f"  power:      {fmt(result.power_w, 'W')}   throughput: {fmt(result.throughput_tok_s, 'tok/s')}"
        f"   latency: {fmt(result.latency_s, 's', 2)}"
    )
    vram = fmt(result.vram_gb, "GB")
    if result.vram_gb is not None and result.vram_gb > vram_available_gb:
        vram += f"  (exceeds {vram_available_gb:g} GB on this GPU)"
    print(f"  VRAM need:  {vram}")
    for finding in result.findings:
        print(f"  finding:    {finding.rule} ({finding.mood.value}): {finding.message}")
    for row_id, value, why in result.offloaded_rows:
        energy = "-" if value is None else f"{value:,.0f} J per 1k tokens"
        print(f"  offloaded:  {row_id} ({energy}) {why}; not used")
    m = result.monthly

    def monthly(value, bounds, unit):
        if value is None:
            return "unknown"
        if bounds is None:
            return f"{value:,.2f} {unit}"
        return f"{value:,.2f} {unit} ({bounds[0]:,.2f}-{bounds[1]:,.2f})"

    print(
        f"  monthly ({m.requests:,} requests, {m.region}, PUE {m.pue:g}): "
        f"{monthly(m.energy_kwh, m.energy_kwh_range, 'kWh')}, "
        f"{monthly(m.cost_usd, m.cost_usd_range, 'USD')}, "
        f"{monthly(m.co2_kg, m.co2_kg_range, 'kg CO2')}"
    )
    if result.energy_per_1k_tokens_j_range is not None:
        if result.holdout_error_pct is not None:
            basis = (
                f"p10-p90 ({result.family} method, hold-out error median "
                f"{result.holdout_error_pct[0]}% / p90 {result.holdout_error_pct[1]}%)"
            )
        elif len(result.measurements) >= 2:
            basis = "lowest to highest of its own sessions"
        else:
            basis = "p10-p90 of the session-to-session spread (one session measured)"
        print(f"  range:      {basis}")
    _print_measured_basis(result)
    if result.carried_from:
        print(f"  carried from: {', '.join(result.carried_from)}")
    print(f"  method: {result.method}")
    for note in result.assumptions:
        print(f"  assumed: {note}")
    for source in result.sources:
        print(f"  source: {source}")


def _print_measured_basis(result) -> None:
    """A measured figure's sessions, and the paired changes shown as such beside it."""
    if result.measurements:
        count = len(result.measurements)
        print(
            "  sessions:   one"
            if count == 1
            else f"  sessions:   {count} (the figure is their median)"
        )
        for session, value in result.measurements:
            source, _, label = session.rpartition("#")
            where = source if label in ("", "-") else f"{source}, session {label}"
            print(f"              {value:,.0f} J per 1k tokens  {where}")
    for what, pct, each, own in result.paired_changes:
        sessions = ", ".join(f"{v:+.1f}%" for v in each)
        line = f"  paired:     {what} {pct:+.1f}% (same-session pairs: {sessions})"
        if own is not None and abs(own - pct) >= 0.05:
            line += f"; own figures {own:+.1f}%"
        print(line)
