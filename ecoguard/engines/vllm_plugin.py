"""ecoguard inside vLLM: the general plugin and the per-step energy attribution.

vLLM loads entry points of two groups that ecoguard registers (see pyproject.toml):

* ``vllm.general_plugins`` -> :func:`register`, called in every vLLM process. With
  ``ECOGUARD_VLLM=1`` it wraps ``EngineArgs.create_engine_config`` so that the guard's rules
  judge the engine arguments as the engine starts (``ECOGUARD_MODE`` warn / fix / strict: fix
  raises ``max_num_seqs`` from 1 before the config is built and says so; strict refuses to
  start an engine with a trap).
* ``vllm.stat_logger_plugins`` -> ``ecoguard.engines.vllm_stat_logger.EcoguardStatLogger``,
  which vLLM's front end calls after every engine step with the scheduler and iteration stats.
  It hands them to :class:`StepAttributor`: the GPU energy of the engine's devices over each
  interval between steps becomes one meter record with that interval's generation tokens and
  the live batch (``num_running_reqs``), published like any generate call (metrics with
  ``model_name`` = :func:`model_label`, the served model's name; the ledger).

Nothing here may break the engine: every ecoguard step runs inside ``contained`` (the fault is
logged at debug level and counted under ``vllm.*``), except strict mode's deliberate refusal.
vLLM itself is imported only inside functions; this module imports without it.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from dataclasses import dataclass, is_dataclass, replace
from pathlib import PurePath
from typing import Any

import ecoguard
from ecoguard.config import Settings
from ecoguard.deployment import GpuSpec
from ecoguard.energy import CallInfo, get_meter
from ecoguard.engines.engine_args import (
    EngineConfig,
    EngineFacts,
    engine_deployment,
    engine_findings,
    resolve_model_spec,
)
from ecoguard.errors import EnergyTrapError
from ecoguard.faults import contained
from ecoguard.findings import Finding, Location
from ecoguard.guard.patches import Applied, Patch, unwrap, wrap
from ecoguard.guard.policy import Policy
from ecoguard.knowledge import resolve_gpu

ENV_FLAG = "ECOGUARD_VLLM"

_log = logging.getLogger("ecoguard")
_patch_lock = threading.Lock()
_applied: Applied | None = None  # the engine patch while in place (the exact original kept)
_collector: Any = None  # ecoguard's collector on vLLM's /metrics, once registered


def enabled(environ: Any = None) -> bool:
    """Whether ``ECOGUARD_VLLM`` turns the plugin on (``1``, ``true``, ``yes``, ``on``)."""
    value = (environ if environ is not None else os.environ).get(ENV_FLAG, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


# -- the general plugin: rules at engine start ----------------------------------------------


def register() -> None:
    """The ``vllm.general_plugins`` entry point. vLLM calls it once per process (API server,
    engine core, workers); only with ``ECOGUARD_VLLM=1`` does it do anything. Idempotent.

    The patch goes through the guard's patch record (:func:`ecoguard.guard.patches.wrap`), so
    :func:`unregister` puts back the exact original ``create_engine_config``."""
    global _applied
    if not enabled():
        return
    with contained("vllm.register"), _patch_lock:
        if _applied is None:
            _applied = wrap(ENGINE_PATCH, importlib.import_module(ENGINE_PATCH.module))


def unregister() -> None:
    """Undo :func:`register`: the exact original ``EngineArgs.create_engine_config`` is back
    (unless something wrapped it again on top of ecoguard). Idempotent."""
    global _applied
    with contained("vllm.register"), _patch_lock:
        if _applied is not None:
            done, _applied = _applied, None
            unwrap(ENGINE_PATCH, done)


def patched() -> bool:
    """Whether :func:`register` has patched vLLM's engine arguments in this process."""
    return _applied is not None


def _create_engine_config(wrapped, instance, args, kwargs):
    """Around ``EngineArgs.create_engine_config``: fix before, judge after. Only strict mode's
    EnergyTrapError leaves this wrapper; any other ecoguard failure is counted."""
    settings: Settings | None = None
    fixed_from: int | None = None
    with contained("vllm.install"):
        # The front end is the process that builds the config: install here, so the meter
        # (the GPU the rules judge), the ledger and /metrics are up before the findings.
        settings = _install()
    if settings is not None:
        with contained("vllm.fix"):
            fixed_from = apply_fixes(instance, settings)
    vllm_config = wrapped(*args, **kwargs)
    if settings is not None:
        with contained("vllm.rules", passthrough=(EnergyTrapError,)):
            judge_engine(vllm_config, settings, fixed_from=fixed_from)
    return vllm_config


# vLLM's engine-arguments hook, as one row of the guard's patch record.
ENGINE_PATCH = Patch(
    "vllm.engine.arg_utils", "EngineArgs", "create_engine_config", _create_engine_config
)


def _install() -> Settings:
    """``ecoguard.install()`` from ``ECOGUARD_*`` (idempotent), alerts made visible: vLLM
    configures its own loggers, not ``ecoguard``'s."""
    settings = ecoguard.install()
    with contained("vllm.metrics"):
        serve_on_vllm_metrics(settings)
    logger = logging.getLogger("ecoguard")
    if not any(getattr(h, "_ecoguard_vllm", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.setLevel(logging.INFO)
        handler._ecoguard_vllm = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
    return settings


def serve_on_vllm_metrics(settings: Settings, registry: Any = None) -> Any:
    """Without ``ECOGUARD_METRICS_PORT``, put ecoguard's metrics on vLLM's own ``/metrics``:
    a single API server serves prometheus_client's default registry, so a collector there is
    scraped with vLLM's series (the same ``model_name``). Not with ``PROMETHEUS_MULTIPROC_DIR``
    (several API servers: the ``ecoguard exporter`` sidecar merges their counters instead) nor
    with a port of our own (the series would be exported twice). Idempotent; returns the
    collector registered, if any."""
    global _collector
    if settings.metrics_port is not None or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    from ecoguard.export.prometheus import (  # lazy: it imports prometheus_client
        EcoguardCollector,
        process_aggregates,
    )

    with _patch_lock:
        if _collector is not None:
            _collector.set_settings(settings)
            return _collector
        if registry is None:
            from prometheus_client import REGISTRY as registry
        collector = EcoguardCollector(aggregates=process_aggregates(), settings=settings)
        registry.register(collector)
        _collector = collector
        return collector


def fixed_max_num_seqs(settings: Settings) -> int:
    """What fix mode raises ``max_num_seqs`` 1 to: ecoguard's batching limit (at least 2)."""
    return max(2, settings.max_batch_size)


def apply_fixes(engine_args: Any, settings: Settings) -> int | None:
    """Fix mode, before the config is built: ``max_num_seqs`` 1 becomes
    :func:`fixed_max_num_seqs`. Returns the old value when it changed something, else None."""
    if getattr(engine_args, "max_num_seqs", None) != 1:
        return None
    if settings.action_for("batch-size-one") != "fix":
        return None
    engine_args.max_num_seqs = fixed_max_num_seqs(settings)
    return 1


def config_from_vllm(vllm_config: Any) -> EngineConfig:
    """The EngineConfig of a built ``VllmConfig``: the resolved quantization method and the
    checkpoint's own ``quantization_config``, not just the flags."""
    model_config = vllm_config.model_config
    quant_config = getattr(getattr(model_config, "hf_config", None), "quantization_config", None)
    if quant_config is not None and not isinstance(quant_config, dict):
        to_dict = getattr(quant_config, "to_dict", None)
        quant_config = to_dict() if callable(to_dict) else None
    served = getattr(model_config, "served_model_name", None)
    if isinstance(served, list | tuple):
        served = served[0] if served else None
    dtype = str(getattr(model_config, "dtype", "") or "").replace("torch.", "") or None
    parallel = getattr(vllm_config, "parallel_config", None)
    return EngineConfig(
        engine="vllm",
        model=getattr(model_config, "model", None),
        served_model_name=served,
        quantization=getattr(model_config, "quantization", None),
        dtype=dtype,
        max_num_seqs=getattr(getattr(vllm_config, "scheduler_config", None), "max_num_seqs", None),
        enforce_eager=getattr(model_config, "enforce_eager", None),
        tensor_parallel_size=getattr(parallel, "tensor_parallel_size", None),
        quant_config=quant_config,
    )


def model_label(config: EngineConfig) -> str | None:
    """The name users know the served model by, for records, metrics and alerts: the
    ``--served-model-name`` given, else the checkpoint's own id (a Hub id as given, or the id of
    a Hub cache folder ``.../models--org--name/snapshots/<hash>``), else its folder's name.

    vLLM's ``served_model_name`` defaults to the model argument, which is an absolute folder
    when a model is served from disk: as a label it was cut to a meaningless tail."""
    model, served = config.model, config.served_model_name
    if served and served != model:
        return served
    if not model or not _is_path(model):
        return served or model
    parts = PurePath(model.rstrip("/\\")).parts
    hub = next((p for p in reversed(parts) if p.startswith("models--") and "--" in p[8:]), None)
    if hub is not None:
        return hub[len("models--") :].replace("--", "/", 1)
    return parts[-1] if parts else model


def _is_path(model: str) -> bool:
    """A folder on disk rather than a Hub id (``org/name``, or ``name``)."""
    return (
        model.startswith(("/", "./", "../", "~", "\\"))
        or model.count("/") > 1
        or (len(model) > 1 and model[1] == ":")  # a Windows drive
        or os.path.isdir(model)
    )


def judge_engine(
    vllm_config: Any,
    settings: Settings,
    *,
    fixed_from: int | None = None,
    gpu: GpuSpec | None = None,
) -> list[tuple[Finding, str]]:
    """Run the rules on a built vLLM config and act on them as ``settings`` say: log and
    publish each finding (metrics, ledger), with action ``fix`` for what :func:`apply_fixes`
    changed, and raise EnergyTrapError in strict mode. Returns (finding, action) pairs."""
    config = config_from_vllm(vllm_config)
    if fixed_from is not None:
        # Judge what the user asked for; the fix is reported as applied.
        config = EngineConfig(**{**_fields(config), "max_num_seqs": fixed_from})
    facts = engine_deployment(
        config, gpu=gpu or _gpu_from_meter(), resolve_model=resolve_model_spec
    )
    policy = Policy(settings)
    site = (Location(f"vllm engine ({model_label(config)})"), "vllm")
    acted: list[tuple[Finding, str]] = []
    refused: list[Finding] = []
    for finding in engine_findings(facts, settings=settings):
        action = settings.action_for(finding.rule)
        if action == "off":
            continue
        changed = None
        if finding.rule == "batch-size-one" and fixed_from is not None:
            action = "fix"
            applied = fixed_max_num_seqs(settings)
            changed = f"max_num_seqs {fixed_from} -> {applied}"
            # The alert names the value applied, not the rule's generic example.
            finding = replace(
                finding,
                fix=f"--max-num-seqs {applied}, applied by ecoguard to the engine config "
                "(ECOGUARD_MAX_BATCH_SIZE chooses the value; vLLM's 'non-default args' log "
                f"line, printed before, shows the {fixed_from} asked for)",
            )
        elif action == "fix":
            action = "warn"  # nothing else can be changed from engine arguments
        elif action == "strict":
            refused.append(finding)
        policy.report(
            finding,
            action=action,
            source="vllm",
            deployment=facts.deployment,
            changed=changed,
            call_site=site,
        )
        acted.append((finding, action))
    if refused:
        raise policy.refuse(refused, where="the vLLM engine start")
    return acted


def _fields(config: EngineConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in EngineConfig.__dataclass_fields__}


def _gpu_from_meter() -> GpuSpec:
    """The engine's GPU as the running meter sees it (empty without one)."""
    with contained("vllm.gpu"):
        meter = get_meter()
        if meter is not None and meter.tracks:
            name = meter.tracks[0].info.name
            return resolve_gpu(name).to_gpu_spec(name=name)
    return GpuSpec()


# -- per-step energy ----------------------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    tokens: int = 0
    requests: int = 0


class StepAttributor:
    """Turns the stream of engine steps into meter records.

    A window is open on the engine's GPUs while it has requests in flight. At each step the
    open window is closed with the generation tokens and finished requests that step reported
    and the running batch, then a new one opens, so every interval's GPU energy is divided by
    that interval's tokens. When the engine drains (nothing running or waiting) the window
    closes and none is open while it idles: idle energy stays in ``ecoguard_gpu_energy_joules``
    but is not charged to tokens. The first step after an idle spell opens the next window and
    its tokens are counted with it, so ecoguard's token total equals vLLM's
    ``vllm:generation_tokens_total``.
    """

    def __init__(self, meter: Any, call_info: Any, devices: tuple[int, ...] | None) -> None:
        self.meter = meter
        self.call_info = call_info
        self.devices = devices
        self._window: Any = None
        self._pending = _Pending()
        self._lock = threading.Lock()
        self.records = 0
        self._infos: dict[int, tuple[Any, Any]] = {}  # batch -> (call_info, it with that batch)

    def step(self, *, tokens: int, finished: int, running: int | None, waiting: int | None) -> Any:
        """One engine step: ``tokens`` generated and ``finished`` requests completed in it;
        ``running``/``waiting`` from the scheduler after it (None when not reported). Returns
        the record published, if any."""
        with self._lock:
            record = None
            busy = bool(running or waiting or (running is None and waiting is None))
            if self._window is None:
                self._pending.tokens += tokens
                self._pending.requests += finished
                if busy:
                    self._window = self._begin(running)
            else:
                tokens += self._pending.tokens
                finished += self._pending.requests
                self._pending = _Pending()
                record = self.meter.end(
                    self._window,
                    tokens=tokens,
                    requests=finished,
                    batch_size=running if running else None,
                )
                self.records += record is not None
                self._window = None
                if busy:
                    self._window = self._begin(running)
            return record

    def _begin(self, running: int | None) -> Any:
        """Open a window whose reference J/token is for the batch running now (the batch the
        next step will most likely run; the record's batch is the one reported at its end).
        The meter applies a CallInfo's batch to its deployment; one CallInfo per batch size is
        made once and reused, so a step copies nothing."""
        info = self.call_info
        if running and is_dataclass(info) and getattr(info, "deployment", None) is not None:
            made = self._infos.get(running)
            if made is None or made[0] is not info:  # (a call_info set anew is copied anew)
                if len(self._infos) >= 1024:
                    self._infos.clear()
                made = self._infos[running] = (info, replace(info, batch_size=running))
            info = made[1]
        return self.meter.begin(devices=self.devices, info=info)

    def close(self) -> Any:
        """Close the open window (engine shutdown), charging it any tokens still pending."""
        with self._lock:
            if self._window is None:
                return None
            pending, self._pending = self._pending, _Pending()
            window, self._window = self._window, None
            return self.meter.end(window, tokens=pending.tokens, requests=pending.requests)


def engine_devices(vllm_config: Any, engine_index: int, device_count: int) -> tuple[int, ...]:
    """The visible GPU indices of data-parallel engine ``engine_index``: its tensor x pipeline
    block, in order (engine 0 of a TP=2 setup: GPUs 0 and 1)."""
    parallel = getattr(vllm_config, "parallel_config", None)
    world = max(1, int(getattr(parallel, "tensor_parallel_size", 1) or 1)) * max(
        1, int(getattr(parallel, "pipeline_parallel_size", 1) or 1)
    )
    first = engine_index * world
    return tuple(i for i in range(first, first + world) if i < device_count) or (0,)


def start_attribution(vllm_config: Any, engine_index: int = 0) -> StepAttributor | None:
    """Install ecoguard in this (front-end) process from ``ECOGUARD_*`` and return the
    attributor for one engine; None when the meter is off or there is no GPU to read."""
    settings = _install()
    meter = get_meter()
    if meter is None or not settings.measure or not meter.tracks:
        return None
    config = config_from_vllm(vllm_config)
    facts: EngineFacts = engine_deployment(
        config, gpu=_gpu_from_meter(), resolve_model=resolve_model_spec
    )
    info = CallInfo(
        model_name=model_label(config),
        precision=facts.deployment.precision,
        deployment=facts.deployment,
        label="vllm",
    )
    devices = engine_devices(vllm_config, engine_index, len(meter.tracks))
    _log.info(
        "ecoguard: attributing GPU %s energy to vLLM engine %d steps (model_name=%s)",
        ",".join(map(str, devices)),
        engine_index,
        info.model_name,
    )
    return StepAttributor(meter, info, devices)


def observe_step(attributor: StepAttributor, scheduler_stats: Any, iteration_stats: Any) -> Any:
    """Read one step's stats (vLLM's SchedulerStats / IterationStats) into the attributor."""
    tokens = int(getattr(iteration_stats, "num_generation_tokens", 0) or 0)
    finished = len(getattr(iteration_stats, "finished_requests", ()) or ())
    running = getattr(scheduler_stats, "num_running_reqs", None)
    waiting = getattr(scheduler_stats, "num_waiting_reqs", None)
    if iteration_stats is None and scheduler_stats is None:
        return None
    return attributor.step(tokens=tokens, finished=finished, running=running, waiting=waiting)
