"""Validate ecoguard on a real GPU in one command: meter truth, the study's traps, a summary.

    python benchmarks/gpu_validation.py --out DIR [--tiny] [--time-limit S] [--work-dir DIR]
    bash benchmarks/gpu_validation.sh DIR          # the same, after an environment check

Everything lands in DIR, each part as soon as it ends (a run cut short keeps the finished
parts; trap rows are appended one cell at a time):

1. **Meter truth** (``meter.json``, ``meter.md``): windows of 0.05, 0.2, 1 and 5 s of FP16
   matmuls, each measured by ecoguard's meter, by an independent ~100 Hz instant-power trace
   (NVML field 186) integrated over the same window, by the raw counter delta and by Zeus's
   ``ZeusMonitor`` (skipped with a note when ``zeus`` is not installed); the cost of a meter
   window's edges on this driver, a guarded ``generate`` against an unguarded one, and the
   sampler thread's CPU. See gpu_validation_meter.py.
2. **The traps on this GPU** (``rows.jsonl``, ``traps.json``): Mistral-7B, Qwen2.5-1.5B and
   Qwen2.5-0.5B shapes built from their configs with random weights (nothing downloaded),
   measured by ``ecoguard bench``'s protocol (warm-up, n runs, CV, same-session FP16
   baseline), exactly 64 new tokens after a 128-token prompt (``min_new_tokens`` =
   ``max_new_tokens``): at 7B FP16, bitsandbytes int8 mixed (threshold 6) and pure
   (threshold 0), NF4, torchao float8 weight-only eager and compiled, FP16 at batch 1, 8 and
   32; at 1.5B and 0.5B FP16 and NF4 (the small-model quantization trap). Every cell
   is a ``local`` row (``ecoguard bench`` schema: GPU, driver, CUDA, torch and library
   versions). See gpu_validation_traps.py.
3. **Summary** (``summary.md``, ``summary.json``): each row beside ecoguard's estimate for
   this GPU (p10-p90 interval) and the study's nearest GPU; each trap's change against FP16
   here and there. See gpu_validation_summary.py.

``environment.json`` holds the versions and the GPU; ``run.json`` each part's status and time.

Expected duration on one H100/H200 (from the work each part does; the first GPU run will say):

* start-up (imports, CUDA context, NVML): ~15 s.
* part 1: 20 x 0.05 + 10 x 0.2 + 5 x 1 + 2 x 5 s = 18 s of windows, plus random phase gaps
  (~2 s) and the meter's calibration (~2 s); 2,000 edge pairs at ~0.1-0.2 ms; the guard A/B/A
  (5 rounds x 3 blocks x 20 calls of 8 tokens of a 2-layer model, ~25 ms a call): ~10 s.
  About 35 s.
* part 2, at bs 1 HF eager decoding of a 7B model runs ~25 ms a token in FP16 (launch-bound),
  and the study's ratios put int8 mixed at ~5x, int8 pure ~2.5x, NF4 ~2x (float8 eager: the
  study's ~9x is an A800 without FP8 units; ~3x assumed on Hopper);
  each cell is 1 warm-up + 3 runs of 64 tokens = 256 tokens:
  - build the 7B checkpoint (random init on the GPU, 14.5 GB written): ~45 s;
  - 7B traps (5 precisions, bs 1): ~80 s of decoding + ~65 s of loads (bitsandbytes and
    torchao quantize at load): ~150 s;
  - 7B FP16 at bs 8 and 32 (~30 ms a step): ~30 s;
  - 1.5B and 0.5B, FP16 and NF4 at bs 1 (~15-20 ms a token): build ~10 / 5 s, then ~25 s
    each;
  - 7B float8 compiled: load ~15 s, then transformers' default compile (inductor,
    ``reduce-overhead``: CUDA graphs) of the decode step, ~60-90 s, and 4 fast calls: ~120 s.
* part 3: under a second.

About 460 s (7.7 minutes) in all; ``run.json`` records what each part and step really took.
``--time-limit`` (default 470 s) is a hard limit: a step whose estimate no longer fits is
skipped with the reason (the compiled float8 step comes last so it is the one to go), and at
the limit the running cell is cut, the finished ones kept and the summary written. ``--tiny`` runs the same parts on the CPU against ecoguard's fake NVML driver
(tiny Llama and Qwen2 shapes, a few tokens, shorter windows): CI runs it in well under a minute.
It needs gcc (the fake driver is compiled at start).
"""

from __future__ import annotations

import _thread
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_validation_meter as meter_part
import gpu_validation_summary as summary_part
import gpu_validation_traps as traps_part

GPU_TIME_LIMIT_S = 470.0
TINY_TIME_LIMIT_S = 300.0
METER_ESTIMATE_S = {"gpu": 35.0, "tiny": 15.0}
PACKAGES = (
    "torch",
    "transformers",
    "accelerate",
    "bitsandbytes",
    "torchao",
    "zeus",
    "nvidia-ml-py",
)
# Tiny mode's fake GPU: a Hopper card by name (the GPU this script is for), a known power curve.
FAKE_GPU = dict(
    gpus=1,
    name="NVIDIA H100 80GB HBM3",
    architecture=9,  # NVML_DEVICE_ARCH_HOPPER
    compute_capability="9.0",
    memory_mb=81559,
    tdp_w=700,
    base_w=(120.0,),
    amp_w=(60.0,),
    period_s=(1.7,),
)


class SetupError(Exception):
    """The environment cannot run this mode; the message says what is missing."""


@dataclass
class Budget:
    """The run's time limit: steps that no longer fit are skipped; at the limit the main thread
    gets a KeyboardInterrupt (the running bench cell stops, finished cells stay)."""

    limit_s: float
    started: float = field(default_factory=time.monotonic)
    expired: bool = False

    def left(self) -> float:
        return self.limit_s - (time.monotonic() - self.started)

    def arm(self) -> threading.Timer:
        """Start the limit's timer (call from the main thread). A run started with SIGINT
        ignored (``nohup ... &``, a background job) would never see the interrupt, so the
        default handler is put back first."""
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)

        def expire() -> None:
            self.expired = True
            _thread.interrupt_main()

        timer = threading.Timer(max(0.0, self.left()), expire)
        timer.daemon = True
        timer.start()
        return timer

    def refusal(self, need_s: float) -> str | None:
        left = self.left()
        if need_s <= left:
            return None
        return f"time limit: needs about {need_s:.0f} s, {max(0.0, left):.0f} s left"


@dataclass
class Run:
    """What has been done so far; ``run.json`` is rewritten after every part and step."""

    out: Path
    mode: str
    time_limit_s: float
    started_utc: str = field(
        default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds")
    )
    parts: dict[str, Any] = field(default_factory=dict)
    interrupted: str | None = None
    seconds: float | None = None  # the whole run, start-up included, once it ends

    def save(self) -> None:
        data = {k: v for k, v in vars(self).items() if k != "out"}
        write_text(self.out / "run.json", json.dumps(data, indent=2, default=str) + "\n")


def write_text(path: Path, text: str) -> None:
    """Whole-file writes go through a temporary name, so a cut leaves the old file or the new."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _nvidia_smi() -> dict[str, Any]:
    path = shutil.which("nvidia-smi")
    if path is None:
        return {"path": None}
    query = "--query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm"
    try:
        done = subprocess.run(
            [path, query, "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
        return {"path": path, "rc": done.returncode, "gpus": done.stdout.strip().splitlines()}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"path": path, "error": f"{type(exc).__name__}: {exc}"}


def _nvml_facts() -> dict[str, Any]:
    import pynvml

    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    try:
        pynvml.nvmlInit()
    except Exception as exc:
        raise SetupError(
            f"NVML does not start ({type(exc).__name__}: {exc}): this needs an NVIDIA driver; "
            "--tiny runs the same parts on the CPU with ecoguard's fake driver"
        ) from exc
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        facts: dict[str, Any] = {
            "devices": pynvml.nvmlDeviceGetCount(),
            "gpu0": text(pynvml.nvmlDeviceGetName(handle)),
            "driver": text(pynvml.nvmlSystemGetDriverVersion()),
        }
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            facts["energy_counter"] = True
        except pynvml.NVMLError as exc:
            facts["energy_counter"] = f"no: {exc}"
        field186 = pynvml.nvmlDeviceGetFieldValues(handle, [meter_part.FIELD_POWER_INSTANT])[0]
        facts["field_186"] = int(field186.nvmlReturn) == 0
        return facts
    finally:
        pynvml.nvmlShutdown()


def environment(tiny: bool) -> dict[str, Any]:
    """Versions, the GPU as torch and NVML see it; SetupError when a GPU run cannot go on."""
    import torch

    env: dict[str, Any] = {
        "mode": "tiny" if tiny else "gpu",
        "python": sys.version.split()[0],
        "versions": {package: _version(package) for package in PACKAGES},
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "nvidia_smi": _nvidia_smi() if not tiny else {"path": None, "note": "tiny mode"},
        "nvml": _nvml_facts(),
    }
    if tiny:
        env["fake_nvml"] = {k: v for k, v in FAKE_GPU.items()}
        return env
    if not torch.cuda.is_available():
        raise SetupError(
            "torch sees no CUDA GPU (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}, built for CUDA {torch.version.cuda}); use --tiny for the CPU proof"
        )
    env["cuda_device"] = torch.cuda.get_device_name(0)
    env["compute_capability"] = list(torch.cuda.get_device_capability(0))
    for package in ("transformers", "accelerate"):
        if env["versions"][package] is None:
            raise SetupError(f"{package} is not installed; pip install {package}")
    return env


def start_fake_driver(work: Path) -> Any:
    """Tiny mode: build ecoguard's fake NVML driver and load it into this process before
    anything imports pynvml; returns its config (which knows the exact energy of any window)."""
    from ecoguard.testing.fake_nvml import (
        FakeNvmlConfig,
        build_library,
        gcc_available,
        load_in_process,
    )

    if not gcc_available():
        raise SetupError("--tiny needs gcc to build the fake NVML driver")
    config = FakeNvmlConfig(**FAKE_GPU)
    config.apply()
    load_in_process(build_library(work / "fake-nvml"))
    return config


def run_meter(run: Run, budget: Budget, tiny: bool, fake: Any) -> None:
    mode = "tiny" if tiny else "gpu"
    started = time.monotonic()
    refusal = budget.refusal(METER_ESTIMATE_S[mode])
    if refusal:
        run.parts["meter"] = {"status": "skipped", "reason": refusal}
        return
    truth = (lambda t0, t1: fake.energy_j(0, t0, t1)) if fake is not None else None
    part = meter_part.run_meter_part(on_cuda=not tiny, tiny=tiny, truth=truth)
    write_json(run.out / "meter.json", part)
    write_text(run.out / "meter.md", meter_part.meter_markdown(part))
    run.parts["meter"] = {
        "status": "done",
        "seconds": round(time.monotonic() - started, 2),
        "files": ["meter.json", "meter.md"],
    }


def run_traps(run: Run, budget: Budget, tiny: bool, work: Path) -> None:
    meter = meter_part.nvml_meter(tiny)
    part = traps_part.TrapsPart(
        out=run.out,
        work=work / "models",
        tiny=tiny,
        protocol=traps_part.TINY_PROTOCOL if tiny else traps_part.GPU_PROTOCOL,
        settings=meter.settings,
        meter=meter,
    )
    steps: list[dict[str, Any]] = []
    run.parts["traps"] = {"status": "running", "steps": steps}
    try:
        _run_steps(run, budget, part, steps, tiny)
    finally:
        meter.stop()
    failed = any(step["status"] == "failed" for step in steps)
    run.parts["traps"]["status"] = "failed" if failed else "done"


def _run_steps(
    run: Run, budget: Budget, part: Any, steps: list[dict[str, Any]], tiny: bool
) -> None:
    for step in traps_part.TINY_STEPS if tiny else traps_part.GPU_STEPS:
        built = step.shape in part.built or tiny
        need = step.estimate_s + (0.0 if built else traps_part.BUILD_S.get(step.shape, 0.0))
        refusal = budget.refusal(need)
        if refusal:
            steps.append({"step": step.name, "status": "skipped", "reason": refusal})
            continue
        try:
            done = part.run_step(step, on_cuda=not tiny)
        except KeyboardInterrupt:
            steps.append({"step": step.name, "status": "interrupted"})
            raise
        except Exception as exc:
            steps.append({"step": step.name, "status": "failed", "reason": _one_line(exc)})
            _log_error(run.out, f"traps step {step.name}")
            continue
        cells = done["cells"]
        measured = sum(1 for c in cells if c["status"] == "measured")
        skipped = {
            f"{c['precision']} bs{c['batch_size']}": c["reason"] for c in cells if c["reason"]
        }
        steps.append(
            {"step": step.name, "status": "done", "seconds": done["seconds"],
             "measured": measured, "skipped": skipped}
        )  # fmt: skip
        run.save()


def run_summary(run: Run, env: dict[str, Any], tiny: bool) -> str:
    """Part 3 from whatever rows exist; returns the markdown (also written to summary.md)."""
    from ecoguard.errors import UsageError
    from ecoguard.knowledge import resolve_gpu

    rows_path = run.out / "rows.jsonl"
    records = []
    if rows_path.exists():
        for line in rows_path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                records.append(json.loads(line))
    gpu_name = env["nvml"]["gpu0"]
    try:
        gpu = resolve_gpu(gpu_name)
    except UsageError:
        gpu = None
    lines = summary_part.build_lines(records, gpu)
    text = summary_part.markdown(lines, gpu_name, tiny)
    meter_md = run.out / "meter.md"
    if meter_md.exists():
        text += "\nMeter truth:\n\n" + meter_md.read_text(encoding="utf-8")
    write_text(run.out / "summary.md", text)
    write_json(
        run.out / "summary.json",
        {"gpu": gpu_name, "gpu_profile": gpu.key if gpu else None, "tiny": tiny,
         "rows": summary_part.to_json(lines)},
    )  # fmt: skip
    run.parts["summary"] = {
        "status": "done",
        "rows": len(lines),
        "files": ["summary.md", "summary.json"],
    }
    return text


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300]


def _log_error(out: Path, where: str) -> None:
    with (out / "errors.txt").open("a", encoding="utf-8") as handle:
        handle.write(f"--- {where}\n{traceback.format_exc()}\n")


def _print_header(env: dict[str, Any], tiny: bool, limit_s: float) -> None:
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v)
    nvml = env["nvml"]
    where = "tiny mode: CPU work, ecoguard's fake NVML driver" if tiny else env.get("cuda_device")
    print(f"gpu_validation ({where}): GPU 0 {nvml['gpu0']}, driver {nvml['driver']}, "
          f"CUDA {env['torch_cuda']}, python {env['python']}", flush=True)  # fmt: skip
    print(f"  {versions}; time limit {limit_s:.0f} s", flush=True)


def _print_parts(run: Run) -> None:
    for name, part in run.parts.items():
        status = part.get("status")
        seconds = f" in {part['seconds']:.1f} s" if "seconds" in part else ""
        reason = f": {part['reason']}" if part.get("reason") else ""
        print(f"part {name}: {status}{seconds}{reason}")
        for step in part.get("steps", []):
            extra = step.get("reason")
            if step["status"] == "done":
                extra = f"{step['measured']} cells measured in {step['seconds']:.1f} s"
            print(f"  {step['step']}: {step['status']}" + (f", {extra}" if extra else ""))
            for cell, why in step.get("skipped", {}).items():
                print(f"    {cell} skipped: {why}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the results (new or empty)")
    parser.add_argument("--tiny", action="store_true", help="CPU + fake NVML driver (CI proof)")
    parser.add_argument("--time-limit", type=float, help="seconds (default 470; tiny 300)")
    parser.add_argument(
        "--work-dir", help="where the random-weight checkpoints go (default: a temporary folder)"
    )
    args = parser.parse_args(argv)
    if args.time_limit is None:
        args.time_limit = TINY_TIME_LIMIT_S if args.tiny else GPU_TIME_LIMIT_S
    if not 0 < args.time_limit <= 24 * 3600:
        parser.error(f"--time-limit must be above 0 and at most 86400 s, got {args.time_limit}")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        parser.error(f"--out {str(out)!r} exists and is not an empty folder; give a new one")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = (
        Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="gpu-validation-"))
    )
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded: every model is built here
    # Estimates come from the shipped reference data alone, never from rows measured here.
    os.environ["ECOGUARD_LOCAL_DATA"] = os.devnull
    if args.tiny:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # tiny mode never touches a real GPU
    run = Run(out=out, mode="tiny" if args.tiny else "gpu", time_limit_s=args.time_limit)
    budget = Budget(args.time_limit)
    try:
        return _run_parts(run, budget, args, work)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


def _run_parts(run: Run, budget: Budget, args: argparse.Namespace, work: Path) -> int:
    try:
        fake = start_fake_driver(work) if args.tiny else None
        env = environment(args.tiny)
    except SetupError as exc:
        print(f"gpu_validation: {exc}", file=sys.stderr)
        return 2
    write_json(run.out / "environment.json", env)
    _print_header(env, args.tiny, args.time_limit)
    timer = budget.arm()
    failed = False
    try:
        for name, part in (("meter", lambda: run_meter(run, budget, args.tiny, fake)),
                           ("traps", lambda: run_traps(run, budget, args.tiny, work))):  # fmt: skip
            try:
                part()
            except KeyboardInterrupt:
                run.parts.setdefault(name, {})["status"] = "interrupted"
                raise
            except Exception as exc:
                failed = True
                run.parts[name] = {"status": "failed", "reason": _one_line(exc)}
                _log_error(run.out, f"part {name}")
            run.save()
    except KeyboardInterrupt:
        run.interrupted = "time limit reached" if budget.expired else "interrupted (Ctrl-C)"
    finally:
        timer.cancel()
    try:
        text = run_summary(run, env, args.tiny)
    except Exception as exc:  # the measured parts are on disk already; say why there is no table
        failed, text = True, ""
        run.parts["summary"] = {"status": "failed", "reason": _one_line(exc), "rows": 0}
        _log_error(run.out, "part summary")
    run.seconds = round(time.monotonic() - budget.started, 1)
    run.save()
    _print_parts(run)
    print(f"total {run.seconds:.1f} s (time limit {run.time_limit_s:.0f} s)")
    print()
    print(text, end="")
    print(f"\nfiles in {run.out}: {', '.join(sorted(p.name for p in run.out.iterdir()))}")
    if run.interrupted:
        print(f"gpu_validation: {run.interrupted}; finished parts and cells were kept")
        return 130
    failed = failed or any(part.get("status") == "failed" for part in run.parts.values())
    measured = run.parts["summary"]["rows"]
    return 1 if failed or not measured else 0


if __name__ == "__main__":
    sys.exit(main())
