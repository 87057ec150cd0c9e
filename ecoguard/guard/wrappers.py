"""The two wrappers the patch table installs: ``from_pretrained`` and ``generate``.

Both follow one shape: a cheap check that the guard is active and that this is the outermost
call (context-var depth guard, so assisted decoding or a composite model's inner generate counts
once), analysis inside ``contained(stage)`` (faults counted, never raised; a strict refusal goes
through), and the real call outside it with the caller's arguments, except for deliberate fixes
and ``strict``. What to do with findings is the policy's one loop, :meth:`Policy.act_on`.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ecoguard.config import Settings
from ecoguard.deployment import Deployment
from ecoguard.energy import MeterSlot
from ecoguard.errors import EnergyTrapError
from ecoguard.faults import contained, record_fault
from ecoguard.findings import Finding
from ecoguard.guard import extract, fixes
from ecoguard.guard.environment import detect_gpu, is_interactive, software_versions
from ecoguard.guard.policy import NO_FIX, Fixer, FixOutcome, Policy, user_call_site
from ecoguard.guard.tokens import count_generated, output_sequences
from ecoguard.rules import BS1_SUSTAINED_CALLS, RULES, evaluate

# Rules judged from how a model is loaded, and the one judged from the call pattern.
LOAD_RULES: tuple[str, ...] = tuple(rid for rid, spec in RULES.items() if spec.stage == "load")
GENERATE_RULES: tuple[str, ...] = ("batch-size-one",)

_generate_depth: contextvars.ContextVar[int] = contextvars.ContextVar(
    "ecoguard_generate_depth", default=0
)
_load_depth: contextvars.ContextVar[int] = contextvars.ContextVar("ecoguard_load_depth", default=0)

# What the fail-open blocks let through: a strict-mode refusal is the guard's decision, not a fault.
_REFUSAL: tuple[type[BaseException], ...] = (EnergyTrapError,)


@dataclass(slots=True)
class ModelState:
    """What the guard remembers about one model object (weakly keyed: dies with the model)."""

    deployment: Deployment
    consecutive_bs1: int = 0
    eos_token_id: Any = None
    pad_token_id: Any = None
    model_name: str | None = None
    # The CUDA devices the weights live on, found by a walk over the model once, then reused
    # while the model's device map object and its first parameter's device stay the same
    # (``model.to(...)`` moves that parameter; a new ``hf_device_map`` is a new object).
    devices: tuple[int, ...] | None = None
    devices_key: tuple[Any, Any] | None = None
    first_param: Any = None  # weakref to the model's first parameter


def _no_model() -> None:
    return None


class ModelStates(weakref.WeakKeyDictionary):
    """Model -> ModelState, weakly keyed, plus ``last``: (weak reference, state) of the model
    looked up last. A serving process calls one model, whose state is then found by calling one
    weak reference, without hashing the model (see ``generate_wrapper``). Any change to the
    mapping forgets ``last``; a model that dies leaves a dead reference, which matches nothing."""

    def __init__(self) -> None:
        self.last: tuple[Callable[[], Any], ModelState | None] = (_no_model, None)
        super().__init__()

    def remember_last(self, model: Any, state: ModelState) -> None:
        try:
            self.last = (weakref.ref(model), state)
        except TypeError:  # not weak-referenceable: looked up in the mapping each time
            pass

    def _forget_last(self) -> None:
        self.last = (_no_model, None)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._forget_last()
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._forget_last()
        super().__delitem__(key)

    def clear(self) -> None:
        self._forget_last()
        super().clear()

    def pop(self, key: Any, *default: Any) -> Any:
        self._forget_last()
        return super().pop(key, *default)

    def popitem(self) -> tuple[Any, Any]:
        self._forget_last()
        return super().popitem()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._forget_last()
        return super().setdefault(key, default)

    def update(self, other: Any = None, /, **kwargs: Any) -> None:
        self._forget_last()
        super().update(other, **kwargs)


@dataclass(slots=True)
class Runtime:
    """The guard's live configuration, swapped by install()/uninstall()."""

    active: bool = False
    settings: Settings = field(default_factory=Settings)
    policy: Policy = field(default_factory=lambda: Policy(Settings()))
    # The running meter, read on every generate call (energy.PROCESS_METER once installed).
    meter_slot: MeterSlot = field(default_factory=MeterSlot)
    call_info: Callable[..., Any] | None = None
    coalesce: Callable[..., Any] | None = None  # set by install() exactly while batching is on
    batch_rows: Any = None  # ecoguard.batching.BATCH_ROWS while batching is on
    models: ModelStates = field(default_factory=ModelStates)
    lock: threading.Lock = field(default_factory=threading.Lock)


RUNTIME = Runtime()


# ---------------------------------------------------------------------------- from_pretrained


@dataclass
class LoadPlan:
    deployment: Deployment
    kwargs: dict[str, Any]
    reported: set[str] = field(default_factory=set)
    post_load_int8_fix: Finding | None = None
    call_site: Any = None


def _plan_load(args: tuple[Any, ...], kwargs: dict[str, Any]) -> LoadPlan:
    runtime = RUNTIME
    facts = extract.facts_from_load_call(args, kwargs)
    deployment = facts.deployment.with_(gpu=detect_gpu(), software=software_versions())
    findings = evaluate(deployment, settings=runtime.settings, only=LOAD_RULES)
    plan = LoadPlan(deployment=deployment, kwargs=dict(kwargs), call_site=user_call_site(3))
    if not findings:
        plan.kwargs = kwargs
        return plan
    plan.reported = {finding.rule for finding in findings}
    # Dropping quantization (small-model-quant, fp8-eager) supersedes tuning it (int8-mixed),
    # so those fixes go first; reports keep the severity order otherwise.
    first = {"small-model-quant": 0, "fp8-eager": 0}
    runtime.policy.act_on(
        sorted(findings, key=lambda f: first.get(f.rule, 1)),
        source="load",
        deployment=deployment,
        where="from_pretrained before loading any weights",
        fix=_load_kwargs_fixer(plan, facts.quant_source),
        call_site=plan.call_site,
    )
    return plan


def _load_kwargs_fixer(plan: LoadPlan, quant_source: str | None) -> Fixer:
    """Fixes applied to the from_pretrained keyword arguments (``plan.kwargs``, a copy) before
    any weight is loaded; an int8 fix for a pre-quantized checkpoint waits for the layers."""
    quant_dropped = False

    def fix(finding: Finding) -> FixOutcome:
        nonlocal quant_dropped
        rule = finding.rule
        if rule in ("small-model-quant", "fp8-eager") and not quant_dropped:
            changed, why_not = fixes.fix_unquantize_kwargs(plan.kwargs, plan.deployment)
            quant_dropped = changed is not None
            return FixOutcome(changed=changed, why_not=why_not)
        if rule == "int8-mixed" and quant_dropped:
            return FixOutcome(why_not="superseded: quantization was dropped altogether")
        if rule == "int8-mixed" and quant_source == "kwargs":
            return FixOutcome(changed=fixes.fix_int8_kwargs(plan.kwargs))
        if rule == "int8-mixed" and quant_source == "checkpoint":
            plan.post_load_int8_fix = finding  # reported once the layers are changed
            return FixOutcome(deferred=True)
        if rule == "bf16-unsupported":
            changed, why_not = fixes.fix_bf16_kwargs(plan.kwargs)
            return FixOutcome(changed=changed, why_not=why_not)
        return FixOutcome(why_not="ecoguard has no automatic fix for this trap")

    return fix


def _int8_layers_fixer(model: Any, when: str) -> Fixer:
    """The one fix possible on a loaded model: int8-mixed, by setting the threshold of its
    Linear8bitLt layers to 0.0; other traps are reported as warnings."""

    def fix(finding: Finding) -> FixOutcome:
        if finding.rule != "int8-mixed":
            return NO_FIX
        layers = fixes.set_int8_threshold_zero(model)
        return FixOutcome(changed=f"set threshold 0.0 on {layers} Linear8bitLt layers {when}")

    return fix


def _finish_load(model: Any, plan: LoadPlan) -> None:
    runtime = RUNTIME
    policy = runtime.policy
    if plan.post_load_int8_fix is not None:
        layers = fixes.set_int8_threshold_zero(model)
        policy.report(
            plan.post_load_int8_fix,
            action="fix",
            source="load",
            deployment=plan.deployment,
            changed=(
                f"set threshold 0.0 on {layers} Linear8bitLt layers of the loaded pre-quantized "
                "model (and in model.config.quantization_config)"
            ),
            call_site=plan.call_site,
        )
    deployment = extract.facts_from_model(model, plan.deployment)
    # Facts only the loaded model reveals (e.g. the size of a hub model) may expose more traps;
    # the weights are loaded by now, so these are reported (or refused) after the fact.
    late = [
        f
        for f in evaluate(deployment, settings=runtime.settings, only=LOAD_RULES)
        if f.rule not in plan.reported
    ]
    policy.act_on(
        late,
        source="load",
        deployment=deployment,
        where="the model (found only after loading)",
        fix=_int8_layers_fixer(model, "after load"),
        call_site=plan.call_site,
    )
    _remember(model, deployment)


def _remember(model: Any, deployment: Deployment) -> ModelState:
    generation_config = getattr(model, "generation_config", None)
    state = ModelState(
        deployment=deployment,
        eos_token_id=getattr(generation_config, "eos_token_id", None),
        pad_token_id=getattr(generation_config, "pad_token_id", None),
        model_name=deployment.model.id,
    )
    try:
        RUNTIME.models[model] = state
    except TypeError:  # not weak-referenceable: analyse again next time
        pass
    return state


def from_pretrained_wrapper(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """wrapt wrapper for ``PreTrainedModel.from_pretrained`` (``instance`` is the class)."""
    if not RUNTIME.active or _load_depth.get():
        return wrapped(*args, **kwargs)
    token = _load_depth.set(1)
    try:
        plan = None
        with contained("guard.load", passthrough=_REFUSAL):
            plan = _plan_load(args, kwargs)
        model = wrapped(*args, **(plan.kwargs if plan is not None else kwargs))
        if plan is not None:
            with contained("guard.load.after", passthrough=_REFUSAL):
                _finish_load(model, plan)
        return model
    finally:
        _load_depth.reset(token)


# ---------------------------------------------------------------------------- generate


def _state_for(model: Any) -> ModelState:
    """The model's remembered state (and now ``models.last``); a model loaded before install
    (or not through from_pretrained) is analysed once here, with its load-time rules reported as
    ``generate``."""
    models = RUNTIME.models
    state = models.get(model)
    if state is not None:
        models.remember_last(model, state)
        return state
    deployment = extract.facts_from_model(model).with_(
        gpu=detect_gpu(), software=software_versions()
    )
    state = _remember(model, deployment)
    models.remember_last(model, state)
    RUNTIME.policy.act_on(
        evaluate(deployment, settings=RUNTIME.settings, only=LOAD_RULES),
        source="generate",
        deployment=deployment,
        where="generate",
        fix=_int8_layers_fixer(model, "of the running model"),
    )
    return state


def _batch_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    inputs = args[0] if args else kwargs.get("inputs")
    if inputs is None:
        inputs = kwargs.get("input_ids")
        if inputs is None:
            inputs = kwargs.get("inputs_embeds")
    shape = getattr(inputs, "shape", None)
    return int(shape[0]) if shape else None


def _track_batch_size(state: ModelState, batch_size: int | None) -> None:
    if batch_size != 1:
        state.consecutive_bs1 = 0
        return
    state.consecutive_bs1 += 1
    # Judge once when a streak reaches the bar; the per-call-site dedupe keeps it quiet after.
    if state.consecutive_bs1 != BS1_SUSTAINED_CALLS:
        return
    deployment = state.deployment.with_(
        batch_size=1,
        consecutive_bs1_calls=state.consecutive_bs1,
        interactive=is_interactive(),
    )
    RUNTIME.policy.act_on(
        evaluate(deployment, settings=RUNTIME.settings, only=GENERATE_RULES),
        source="generate",
        deployment=deployment,
        where="generate",
        fix=_batching_fix_note,
    )


def _batching_fix_note(finding: Finding) -> FixOutcome:
    """batch-size-one has no fix ecoguard applies to one call: batching coalesces calls, and
    only when it is on."""
    if RUNTIME.settings.batching:
        return NO_FIX
    return FixOutcome(why_not="not applied automatically: turn on ecoguard.install(batching=True)")


def generate_wrapper(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """wrapt wrapper for ``GenerationMixin.generate`` (``instance`` is the model).

    Its per-call path is written for a real call, where milliseconds of model work leave the
    guard's code and data out of the CPU's caches and each function called or object touched
    costs about a microsecond or more, so the common case calls no function of ecoguard's: the
    last model's state is found by calling one weak reference, the batch size is read inline
    from the ids' shape, the meter is one attribute read that is None when there is nothing to
    measure, and with batching off the call goes straight to ``wrapped``
    (benchmarks/RESULTS.md)."""
    runtime = RUNTIME
    if not runtime.active or _generate_depth.get():
        return wrapped(*args, **kwargs)
    token = _generate_depth.set(1)
    try:
        state = None
        # contained("guard.generate", passthrough=_REFUSAL) spelled out: this block runs on every
        # call; entering even a prebuilt contained costs about 0.3 µs of CPU here against
        # 0.03 µs for a try block (1M-iteration loop, thread CPU), a tenth of the guard's path.
        try:
            last = runtime.models.last
            state = last[1] if last[0]() is instance else _state_for(instance)
            if runtime.coalesce is None:  # (with batching on, _call counts the rows the GPU ran)
                try:  # the usual call: the tensor of token ids, first or as ``input_ids``
                    rows = (args[0] if args else kwargs["input_ids"]).shape[0]
                except (AttributeError, IndexError, KeyError, TypeError):
                    rows = _batch_size(args, kwargs)  # anything else, the long way
                if rows != 1:
                    state.consecutive_bs1 = 0
                else:
                    _track_batch_size(state, rows)
        except _REFUSAL:
            raise
        except Exception as exc:
            record_fault("guard.generate", exc)
        meter = None
        if state is not None:
            try:
                meter = runtime.meter_slot.measurable
            except Exception as exc:
                record_fault("guard.meter", exc)
        if meter is None:  # no meter, or no GPU to read: nothing to measure
            if runtime.coalesce is None:
                return wrapped(*args, **kwargs)
            return _call(runtime, state, wrapped, instance, args, kwargs)[0]
        return _measured_call(runtime, meter, state, wrapped, instance, args, kwargs)
    finally:
        _generate_depth.reset(token)


def _devices_for(state: ModelState, model: Any) -> tuple[int, ...] | None:
    """``extract.model_devices(model)``, walked once per model and reused while neither the
    device map object nor the first parameter's device changes (checked per call: two attribute
    reads, whatever the model's size)."""
    device_map = getattr(model, "hf_device_map", None)
    param = state.first_param() if state.first_param is not None else None
    if state.devices_key is not None and param is not None:
        cached_map, cached_device = state.devices_key
        if cached_map is device_map and param.device == cached_device:
            return state.devices
    state.devices = extract.model_devices(model)
    param = extract.first_parameter(model)
    try:
        state.first_param = weakref.ref(param) if param is not None else None
    except TypeError:
        state.first_param = None
    state.devices_key = (device_map, getattr(param, "device", None))
    return state.devices


def _call(
    runtime: Runtime,
    state: ModelState | None,
    wrapped: Callable[..., Any],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[Any, int | None]:
    """The real generate call, through the batcher when batching is on.

    Returns the result and, for a call coalesced with others, the rows of the batch the GPU ran
    (else None)."""
    coalesce = runtime.coalesce
    rows_var = runtime.batch_rows
    if coalesce is None or not runtime.settings.batching:
        return wrapped(*args, **kwargs), None
    token = rows_var.set(None) if rows_var is not None else None
    try:
        result = coalesce(wrapped, instance, args, kwargs, runtime.settings)
        achieved = rows_var.get() if rows_var is not None else None
    finally:
        if token is not None:
            rows_var.reset(token)
    if state is not None:
        # With batching on, the streak counts what the GPU ran, known only now: concurrent
        # callers that were coalesced are not batch-size-one calls.
        with contained("guard.generate", passthrough=_REFUSAL):
            _track_batch_size(state, achieved or _batch_size(args, kwargs))
    return result, achieved


def _measured_call(
    runtime: Runtime,
    meter: Any,
    state: ModelState,
    wrapped: Callable[..., Any],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Open a meter window around the real call; tokens counted per sequence after it."""
    window = facts = None
    try:
        facts = extract.facts_from_generate(instance, args, kwargs)
        deployment = state.deployment  # the meter applies this call's batch and prompt to it
        info = runtime.call_info(
            model_name=state.model_name,
            precision=deployment.precision,
            batch_size=facts.batch_size,
            prompt_tokens=facts.prompt_tokens,
            max_new_tokens=facts.max_new_tokens,
            deployment=deployment,
            label=None,
        )
        window = meter.begin(devices=_devices_for(state, instance), info=info)
    except Exception as exc:
        record_fault("guard.meter.begin", exc)
    try:
        result, achieved = _call(runtime, state, wrapped, instance, args, kwargs)
    except BaseException as error:
        if window is not None:
            try:
                rows = facts.batch_size if facts is not None else 0
                meter.end(window, tokens=0, requests=rows or 0, error=error)
            except Exception as exc:
                record_fault("guard.meter.end", exc)
        raise
    if window is not None:
        try:
            sequences = output_sequences(result)
            tokens = count_generated(
                sequences,
                prompt_length=facts.prompt_width,
                eos_token_id=state.eos_token_id,
                pad_token_id=state.pad_token_id,
            )
            requests = int(sequences.shape[0])
            if achieved is None:
                meter.end(window, tokens=tokens, requests=requests)
            else:  # coalesced: record the batch the GPU ran
                meter.end(window, tokens=tokens, requests=requests, batch_size=achieved)
        except Exception as exc:
            record_fault("guard.meter.end", exc)
    return result
