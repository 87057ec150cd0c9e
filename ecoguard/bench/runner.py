"""The bench loop: every precision x batch size, warm-up then measured runs, one meter window per
run, each finished cell handed to ``on_cell`` at once (so Ctrl-C or a crash keeps it).

Failure handling is per cell: a model that does not load skips that precision's cells, an
out-of-memory error skips that batch size, any other error in a cell skips that cell; the reason
is kept and the loop goes on. KeyboardInterrupt stops the loop, marks the running cell
``interrupted`` and returns what finished.
"""

from __future__ import annotations

import gc
import logging
import platform
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ecoguard.bench import loading
from ecoguard.bench.loading import CellSkipped
from ecoguard.bench.plan import BenchPlan
from ecoguard.bench.stats import RunSample, Summary, summarize
from ecoguard.config import Settings
from ecoguard.energy import CallInfo, Meter
from ecoguard.energy.backends import NvmlBackend, SimulatedBackend
from ecoguard.errors import BackendError, UsageError
from ecoguard.faults import record_fault
from ecoguard.findings import RULE_IDS
from ecoguard.guard.install import current_settings, install, is_installed
from ecoguard.knowledge import model_registry, resolve_gpu, resolve_model

_log = logging.getLogger("ecoguard.bench")

BENCH_LABEL = "ecoguard-bench"

# load_model(model_id, precision, *, on_cuda) -> the model, ready for generate
ModelLoader = Callable[..., Any]


@dataclass
class SessionInfo:
    """Facts about the machine and session that every row of the session carries."""

    session: str
    started_utc: str
    backend: str  # nvml | simulated
    tier: str  # live | simulated
    gpu_profile: str | None
    gpu_name: str
    gpu_architecture: str | None
    gpu_vram_gb: float | None
    gpu_tdp_w: float | None
    device: str  # cuda:0 | cpu
    driver_version: str | None
    cuda_version: str | None
    python_version: str
    versions: dict[str, str | None]
    sample_hz: float
    idle_power_w: float | None = None
    model_id: str = ""
    model_key: str = ""
    params: int | None = None
    tokenizer: bool = False

    @property
    def simulated(self) -> bool:
        return self.tier == "simulated"

    def software(self) -> str:
        parts = [f"{name} {version}" for name, version in self.versions.items() if version]
        parts.append(f"python {self.python_version}")
        parts.append(f"CUDA {self.cuda_version}" if self.cuda_version else "no CUDA")
        if self.driver_version:
            parts.append(f"driver {self.driver_version}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["simulated"] = self.simulated
        data["software"] = self.software()
        return data


@dataclass
class CellResult:
    """One precision x batch size. ``status``: measured, skipped or interrupted."""

    precision: str
    batch_size: int
    status: str = "pending"
    reason: str | None = None
    samples: list[RunSample] = field(default_factory=list)
    summary: Summary | None = None
    peak_memory_gb: float | None = None
    memory_kind: str = "vram"  # vram: torch.cuda.max_memory_allocated; rss: process peak RSS
    row: Any = None  # the ReferenceRow written for this cell
    baseline: CellResult | None = None  # the same-session FP16 cell at this batch size

    @property
    def delta_vs_fp16_pct(self) -> float | None:
        if self.summary is None or self.baseline is None or self.baseline.summary is None:
            return None
        base = self.baseline.summary.energy_j_per_1k.mean
        return (self.summary.energy_j_per_1k.mean - base) / base * 100.0 if base else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "batch_size": self.batch_size,
            "status": self.status,
            "reason": self.reason,
            "runs": [s.to_dict() for s in self.samples],
            "summary": self.summary.to_dict() if self.summary else None,
            "peak_memory_gb": self.peak_memory_gb,
            "memory_kind": self.memory_kind,
            "delta_vs_fp16_pct": self.delta_vs_fp16_pct,
            "row_id": self.row.id if self.row is not None else None,
        }


@dataclass
class BenchResult:
    plan: BenchPlan
    info: SessionInfo
    cells: list[CellResult]
    interrupted: bool = False

    @property
    def measured(self) -> list[CellResult]:
        return [c for c in self.cells if c.status == "measured"]


class Progress:
    """What the runner tells about its advance; the CLI supplies a bar, tests a recorder."""

    def start(self, total_calls: int) -> None: ...

    def cell(self, cell: CellResult, index: int, total: int) -> None: ...

    def call_done(self, cell: CellResult, phase: str) -> None: ...

    def skip_calls(self, n: int) -> None: ...

    def cell_done(self, cell: CellResult) -> None: ...

    def close(self) -> None: ...


# ------------------------------------------------------------------------------------- seams


def generate_once(model: Any, input_ids: Any, generation_tokens: int) -> int:
    """One greedy generate call producing exactly ``generation_tokens`` new tokens per sequence
    (``min_new_tokens`` = ``max_new_tokens``, so an early EOS cannot shorten a run). Returns the
    new tokens over the whole batch, counted from the output's shape."""
    import torch

    device = getattr(model, "device", None)
    ids = input_ids.to(device) if device is not None else input_ids
    config = getattr(model, "generation_config", None)
    pad = getattr(config, "pad_token_id", None)
    if pad is None:
        eos = getattr(config, "eos_token_id", None)
        pad = eos[0] if isinstance(eos, (list, tuple)) and eos else eos
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=generation_tokens,
            min_new_tokens=generation_tokens,
            do_sample=False,
            num_beams=1,
            pad_token_id=pad,
        )
    sequences = getattr(out, "sequences", out)
    new_per_sequence = int(sequences.shape[-1]) - int(ids.shape[-1])
    if device is not None and str(device).startswith("cuda"):
        torch.cuda.synchronize()
    return new_per_sequence * int(ids.shape[0])


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA OOM (``torch.cuda.OutOfMemoryError`` or a RuntimeError saying so) or host MemoryError."""
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    oom_type = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch else None
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


@contextmanager
def guard_rules_off() -> Iterator[None]:
    """If ecoguard's guard is installed in this process, switch every rule off for the bench
    (the traps are what is being measured: a ``fix`` would change the configuration, a ``strict``
    would refuse it) and restore the user's settings afterwards. Nothing happens otherwise."""
    if not is_installed():
        yield
        return
    previous = current_settings()
    assert previous is not None
    install(settings=previous.with_(rules={**previous.rules, **dict.fromkeys(RULE_IDS, "off")}))
    try:
        yield
    finally:
        install(settings=previous)


# ------------------------------------------------------------------------------------- meter


def make_meter(plan: BenchPlan, settings: Settings) -> Any:
    """A private meter for the bench (not the process-wide one: a guard measuring the same calls
    on a shared meter would split each window's energy in two). ``auto`` is NVML when it starts,
    else the simulated GPU; ``nvml`` that cannot start is a usage error."""
    if plan.backend == "simulated":
        backend: Any = SimulatedBackend.from_settings(settings)
    else:
        try:
            backend = NvmlBackend.probe()
            if backend.device_count() == 0:
                backend.close()
                raise BackendError("NVML sees no visible GPU")
        except BackendError as exc:
            if plan.backend == "nvml":
                raise UsageError(f"--backend nvml cannot start: {exc}") from exc
            backend = SimulatedBackend.from_settings(settings)
    meter = Meter(settings.with_(backend=backend.name), backend=backend)
    meter.start()
    meter.wait_ready(5.0)
    return meter


def _idle_power(meter: Any, seconds: float, sleep: Callable[[float], None]) -> float | None:
    """Average power of GPU 0 over ``seconds`` with nothing running (not subtracted anywhere:
    reported, as the study does). Falls back to the meter's own idle estimate."""
    if seconds > 0:
        e0, t0 = meter.read_energy((0,)), meter.clock()
        sleep(seconds)
        e1, t1 = meter.read_energy((0,)), meter.clock()
        if 0 in e0 and 0 in e1 and t1 > t0:
            return (e1[0] - e0[0]) / (t1 - t0)
    track = meter.tracks[0] if meter.tracks else None
    return track.idle_w if track is not None else None


def _peak_power(meter: Any, start: float, end: float) -> float | None:
    if not meter.tracks:
        return None
    powers = [r.power_w for r in list(meter.tracks[0].samples) if start < r.t < end]
    return max(powers) if powers else None


def _session_info(plan: BenchPlan, meter: Any, device: str) -> SessionInfo:
    from importlib import metadata

    track = meter.tracks[0]
    name = track.info.name
    profile = None
    try:
        profile = resolve_gpu(getattr(meter.backend, "profile_key", None) or name)
    except UsageError:  # a GPU the table does not know: the driver's name only
        profile = None
    except Exception as exc:  # tables unreadable: the driver's name only, and said
        record_fault("bench.gpu_profile", exc)
    driver = None
    nvml = getattr(meter.backend, "_nvml", None)
    if nvml is not None:
        try:
            raw = nvml.nvmlSystemGetDriverVersion()
            driver = raw.decode() if isinstance(raw, bytes) else str(raw)
        except Exception as exc:
            record_fault("bench.driver_version", exc)
    versions: dict[str, str | None] = {}
    for package in ("torch", "transformers", "bitsandbytes", "torchao", "accelerate"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    torch = sys.modules.get("torch")
    cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    now = datetime.now(timezone.utc)
    return SessionInfo(
        session=f"bench-{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}",
        started_utc=now.isoformat(timespec="seconds"),
        backend=meter.backend.name,
        tier=meter.tier,
        gpu_profile=profile.key if profile else None,
        gpu_name=name,
        gpu_architecture=profile.architecture if profile else track.info.architecture,
        gpu_vram_gb=profile.vram_gb if profile else None,
        gpu_tdp_w=profile.tdp_w if profile else track.info.power_limit_w,
        device=device,
        driver_version=driver,
        cuda_version=cuda,
        python_version=platform.python_version(),
        versions=versions,
        sample_hz=meter.settings.sample_hz,
    )


# ------------------------------------------------------------------------------------- loop


def run_bench(
    plan: BenchPlan,
    *,
    settings: Settings | None = None,
    meter: Any = None,
    on_cell: Callable[[CellResult, BenchResult], None] | None = None,
    on_start: Callable[[BenchResult], None] | None = None,
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
    load_model: ModelLoader | None = None,
) -> BenchResult:
    """Run ``plan``; ``on_cell(cell, result)`` is called as each cell ends (measured or skipped),
    ``on_start(result)`` once the session facts are known. A meter passed in is used and left
    running; otherwise one is made (see :func:`make_meter`) and stopped at the end.

    ``load_model(model_id, precision, on_cuda=...)`` replaces :func:`loading.load_model` (a
    caller that prepares the model further, e.g. ``torch.compile``, before the cells run); it
    raises :class:`CellSkipped` for a precision it cannot provide."""
    import torch

    settings = settings if settings is not None else Settings.from_env()
    progress = progress if progress is not None else Progress()
    own_meter = meter is None
    meter = meter if meter is not None else make_meter(plan, settings)
    try:
        device = loading.device()
        info = _session_info(plan, meter, device)
        info.model_id = loading.resolved_model_id(plan.model)
        info.model_key = _registry_key(plan.model)
        result = BenchResult(plan=plan, info=info, cells=[])
        info.idle_power_w = _idle_power(meter, plan.idle_s, sleep)
        if on_start is not None:
            on_start(result)
        with guard_rules_off(), _quiet_transformers():
            loader = load_model if load_model is not None else loading.load_model
            _loop(plan, meter, result, on_cell, progress, sleep, torch, loader)
    finally:
        progress.close()
        if own_meter:
            meter.stop()
    return result


def _loop(plan, meter, result, on_cell, progress, sleep, torch, load_model) -> None:
    calls_per_cell = plan.warmup + plan.runs
    progress.start(len(plan.cells) * calls_per_cell)
    baselines: dict[int, CellResult] = {}
    tokenizer = loading.load_tokenizer(plan.model)
    result.info.tokenizer = tokenizer is not None
    on_cuda = result.info.device.startswith("cuda")
    cell_index = 0
    model_error: str | None = None
    for precision in plan.ordered_precisions:
        model = None
        load_error: str | None = model_error
        try:
            if model_error is None:
                model = load_model(plan.model, precision, on_cuda=on_cuda)
                if result.info.params is None:
                    result.info.params = loading.parameter_count(model)
                prompts = loading.prompt_source(model, tokenizer, plan.seed)
        except loading.ModelUnavailable as exc:
            load_error = model_error = str(exc)
        except CellSkipped as exc:
            load_error = str(exc)
        except KeyboardInterrupt:
            result.interrupted = True
            return
        try:
            for batch_size in plan.batch_sizes:
                cell_index += 1
                cell = CellResult(precision, batch_size)
                if precision != "fp16":
                    cell.baseline = baselines.get(batch_size)
                result.cells.append(cell)
                progress.cell(cell, cell_index, len(plan.cells))
                if load_error is not None:
                    cell.status, cell.reason = "skipped", load_error
                    progress.skip_calls(calls_per_cell)
                else:
                    try:
                        _run_cell(
                            plan, meter, model, prompts, cell, progress, sleep, torch, on_cuda
                        )
                    except KeyboardInterrupt:
                        cell.status, cell.reason = "interrupted", "interrupted (Ctrl-C)"
                        result.interrupted = True
                        progress.cell_done(cell)
                        return
                if precision == "fp16" and cell.status == "measured":
                    baselines[batch_size] = cell
                progress.cell_done(cell)
                if on_cell is not None:
                    on_cell(cell, result)
        finally:
            del model
            gc.collect()
            if on_cuda:
                torch.cuda.empty_cache()


def _run_cell(plan, meter, model, prompts, cell, progress, sleep, torch, on_cuda) -> None:
    batch_size = cell.batch_size
    done_calls = 0
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    try:
        input_ids = prompts.input_ids(batch_size, plan.prompt_tokens)
        call_info = CallInfo(
            model_name=result_model_name(plan),
            precision=cell.precision,
            batch_size=batch_size,
            prompt_tokens=plan.prompt_tokens,
            max_new_tokens=plan.generation_tokens,
            label=BENCH_LABEL,
        )
        for _ in range(plan.warmup):
            generate_once(model, input_ids, plan.generation_tokens)
            done_calls += 1
            progress.call_done(cell, "warmup")
        for run in range(plan.runs):
            if plan.cooldown_s and run:
                sleep(plan.cooldown_s)
            window = meter.begin(devices=None, info=call_info)
            try:
                tokens = generate_once(model, input_ids, plan.generation_tokens)
            except BaseException as exc:
                meter.end(window, tokens=0, requests=batch_size, error=exc)
                raise
            record = meter.end(window, tokens=tokens, requests=batch_size)
            if record is None:
                raise CellSkipped("the meter has no GPU to measure (null backend)")
            cell.samples.append(
                RunSample(
                    energy_j=record.energy_j,
                    duration_s=record.duration_s,
                    tokens=tokens,
                    requests=batch_size,
                    peak_power_w=_peak_power(meter, record.start_monotonic, record.end_monotonic),
                )
            )
            done_calls += 1
            progress.call_done(cell, "run")
    except KeyboardInterrupt:
        raise
    except CellSkipped as exc:
        cell.status, cell.reason = "skipped", str(exc)
    except Exception as exc:
        if is_out_of_memory(exc):
            cell.status = "skipped"
            cell.reason = f"out of memory at batch size {batch_size}: {loading.one_line(exc)}"
            if on_cuda:
                torch.cuda.empty_cache()
        else:
            cell.status, cell.reason = "skipped", f"generate failed: {loading.one_line(exc)}"
    finally:
        progress.skip_calls(plan.warmup + plan.runs - done_calls)
    if cell.status == "skipped":
        cell.samples.clear()  # a partial cell is not a measurement of the configuration
        return
    cell.summary = summarize(cell.samples, plan.cv_bound_pct)
    cell.status = "measured"
    if on_cuda:
        cell.peak_memory_gb = torch.cuda.max_memory_allocated() / 1024**3
        cell.memory_kind = "vram"
    else:
        cell.peak_memory_gb = _peak_rss_gb()
        cell.memory_kind = "rss"


def result_model_name(plan: BenchPlan) -> str:
    return plan.model.strip()


def _peak_rss_gb() -> float | None:
    """Peak resident memory of this process so far (GB): on CPU the weights live in host memory;
    it is a process-wide high-water mark, not this cell's alone."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return None
    # Linux reports kB, macOS bytes.
    return peak / 1024**3 if sys.platform == "darwin" else peak / 1024**2


def _registry_key(model: str) -> str:
    try:
        info = resolve_model(model)
    except UsageError:  # a local checkpoint or an id outside the registry
        return ""
    except Exception as exc:  # tables unreadable: no registry key, and said
        record_fault("bench.registry_key", exc)
        return ""
    return info.id if info.id in model_registry() else ""


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers warns on every generate call about generation flags the greedy protocol
    overrides, and draws a loading bar per precision; they would bury the bench's own progress."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    before = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)
        if bars:
            hf_logging.enable_progress_bar()
