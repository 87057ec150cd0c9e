"""Fail-open, proven: whatever ecoguard's own stages do, the user's call is untouched.

Each guarded call is compared with the same call made without the guard: the result must be
equal (same tensors, same model weights and config), or the call must raise the same exception
type with the same message. Arguments are drawn by hypothesis (odd shapes, masks, lengths,
garbage keyword arguments, configs of every kind) and a fault is injected into one ecoguard
stage at a time: rules, estimator, fact extraction, GPU detection, token counting, meter
begin/end, ledger write, the exporter's aggregation, event subscribers, a user's logging filter
and warnings-as-errors. Everything runs with the meter (simulated GPU), the ledger and the
in-process metrics server on, so every stage is really on the path.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given  # noqa: E402
from hypothesis import settings as hsettings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from transformers import AutoModelForCausalLM, BitsAndBytesConfig  # noqa: E402

from ecoguard import events  # noqa: E402
from ecoguard.faults import fault_counts, reset_faults  # noqa: E402
from ecoguard.guard import patches  # noqa: E402
from ecoguard.guard.install import install, uninstall  # noqa: E402
from ecoguard.guard.wrappers import RUNTIME  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")  # the guard's energy-trap warnings are expected


class InjectedFault(Exception):
    """Raised by a sabotaged ecoguard stage."""


FAULT_TYPES: tuple[type[BaseException], ...] = (
    InjectedFault,
    RuntimeError,
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    ZeroDivisionError,
    OSError,
    MemoryError,
    RecursionError,
)


# ------------------------------------------------------------------------ fault injection


@dataclass
class Sabotage:
    """Makes one stage raise; ``hits`` counts how often the sabotaged code was reached."""

    stage: str
    error: type[BaseException] = InjectedFault
    hits: int = 0

    def raiser(self, *args: Any, **kwargs: Any) -> Any:
        self.hits += 1
        raise self.error(f"injected into {self.stage}")


def _stage_targets() -> dict[str, Callable[[pytest.MonkeyPatch, Sabotage], None]]:
    """Stage name -> how to break it (with a MonkeyPatch that undoes it afterwards)."""
    from ecoguard.energy import meter as meter_mod
    from ecoguard.export import ledger as ledger_mod
    from ecoguard.export.prometheus import aggregates as prom_aggregates
    from ecoguard.export.prometheus import facts as prom_facts
    from ecoguard.guard import extract, policy, wrappers
    from ecoguard.knowledge import estimator

    def attr(owner: Any, name: str) -> Callable[[pytest.MonkeyPatch, Sabotage], None]:
        return lambda mp, sab: mp.setattr(owner, name, sab.raiser)

    def subscriber(topic: events.Topic) -> Callable[[pytest.MonkeyPatch, Sabotage], None]:
        def apply(mp: pytest.MonkeyPatch, sab: Sabotage) -> None:
            unsubscribe = topic.subscribe(sab.raiser)
            mp.setattr(sab, "unsubscribe", unsubscribe, raising=False)

        return apply

    def estimator_fault(mp: pytest.MonkeyPatch, sab: Sabotage) -> None:
        mp.setattr(estimator, "estimate", sab.raiser)
        meter = meter_mod.get_meter()
        if meter is not None:
            meter._reference_cache.clear()  # else a cached reference hides the estimator

    def logging_filter(mp: pytest.MonkeyPatch, sab: Sabotage) -> None:
        class Broken(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                sab.hits += 1
                raise sab.error("a user's broken logging filter")

        logger = logging.getLogger("ecoguard")
        broken = Broken()
        logger.addFilter(broken)
        mp.setattr(sab, "unsubscribe", lambda: logger.removeFilter(broken), raising=False)

    def warnings_as_errors(mp: pytest.MonkeyPatch, sab: Sabotage) -> None:
        # The application runs with -W error: the guard's EnergyTrapWarning becomes an
        # exception inside the guard. (Scoped to the guard's policy module, so warnings raised
        # by transformers itself behave as they would unguarded.)
        from ecoguard.errors import EnergyTrapWarning

        class StrictWarnings:
            def __getattr__(self, name: str) -> Any:
                return getattr(warnings, name)

            def warn_explicit(self, *args: Any, **kwargs: Any) -> Any:
                sab.hits += 1
                with warnings.catch_warnings():
                    warnings.simplefilter("error", EnergyTrapWarning)
                    return warnings.warn_explicit(*args, **kwargs)

        mp.setattr(policy, "warnings", StrictWarnings())

    def ledger_queue_fault(mp: pytest.MonkeyPatch, sab: Sabotage) -> None:
        # The ledger subscribed its bound ``submit`` at start; break the queue it puts into.
        ledger = ledger_mod.get_ledger()
        assert ledger is not None, "the ledger should be running with the meter"

        class BrokenQueue:
            def put_nowait(self, item: Any) -> None:
                sab.raiser()

            def __getattr__(self, name: str) -> Any:
                return getattr(original_queue, name)

        original_queue = ledger._queue
        mp.setattr(ledger, "_queue", BrokenQueue())

    def meter_slot_fault(mp: pytest.MonkeyPatch, sab: Sabotage) -> None:
        # The guard reads the running meter from its slot on every call: make that read raise.
        class BrokenSlot:
            @property
            def measurable(self) -> Any:
                return sab.raiser()

        mp.setattr(RUNTIME, "meter_slot", BrokenSlot())

    return {
        "rules.evaluate": attr(wrappers, "evaluate"),
        "extract.facts_from_model": attr(extract, "facts_from_model"),
        "extract.facts_from_generate": attr(extract, "facts_from_generate"),
        "extract.model_devices": attr(extract, "model_devices"),
        "extract.facts_from_load_call": attr(extract, "facts_from_load_call"),
        "environment.detect_gpu": attr(wrappers, "detect_gpu"),
        "environment.software_versions": attr(wrappers, "software_versions"),
        "tokens.count_generated": attr(wrappers, "count_generated"),
        "tokens.output_sequences": attr(wrappers, "output_sequences"),
        "policy.report": attr(policy.Policy, "report"),
        "policy.user_call_site": attr(wrappers, "user_call_site"),
        "estimator.estimate": estimator_fault,
        "meter.slot": meter_slot_fault,
        "meter.begin": attr(meter_mod.Meter, "begin"),
        "meter.end": attr(meter_mod.Meter, "end"),
        "meter.record": attr(meter_mod.Meter, "_record"),
        "ledger.submit": ledger_queue_fault,
        "ledger.write": attr(ledger_mod, "record_row"),
        # The aggregates subscribed bound methods at start: break what those methods call.
        "exporter.observe_record": attr(prom_facts, "finite_number"),
        "exporter.observe_finding": attr(prom_aggregates, "finding_key"),
        "subscriber.records": subscriber(events.records),
        "subscriber.findings": subscriber(events.findings),
        "logging.filter": logging_filter,
        "warnings.error": warnings_as_errors,
    }


GENERATE_STAGES = (
    "rules.evaluate",
    "extract.facts_from_model",
    "extract.facts_from_generate",
    "extract.model_devices",
    "environment.detect_gpu",
    "environment.software_versions",
    "tokens.count_generated",
    "tokens.output_sequences",
    "policy.report",
    "estimator.estimate",
    "meter.slot",
    "meter.begin",
    "meter.end",
    "meter.record",
    "ledger.submit",
    "ledger.write",
    "exporter.observe_record",
    "exporter.observe_finding",
    "subscriber.records",
    "subscriber.findings",
    "logging.filter",
    "warnings.error",
)
LOAD_STAGES = (
    "extract.facts_from_load_call",
    "extract.facts_from_model",
    "environment.detect_gpu",
    "environment.software_versions",
    "rules.evaluate",
    "policy.report",
    "policy.user_call_site",
    "subscriber.findings",
    "exporter.observe_finding",
    "logging.filter",
    "warnings.error",
)


@contextmanager
def sabotaged(stage: str | None, error: type[BaseException] = InjectedFault) -> Iterator[Sabotage]:
    sab = Sabotage(stage or "none", error)
    with pytest.MonkeyPatch.context() as mp:
        if stage is not None:
            _stage_targets()[stage](mp, sab)
        try:
            yield sab
            # The ledger writes on its own thread: let it reach the sabotaged code (or not)
            # while the sabotage is still in place.
            from ecoguard.export.ledger import get_ledger

            ledger = get_ledger()
            if ledger is not None:
                ledger.flush(5.0)
        finally:
            undo = getattr(sab, "unsubscribe", None)
            if undo is not None:
                undo()


# ------------------------------------------------------------------------ comparing outcomes


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None


def run(call: Callable[[], Any]) -> Outcome:
    try:
        return Outcome(value=call())
    except Exception as exc:  # the user's own error, to compare with the unguarded one
        return Outcome(error=exc)


def same(a: Any, b: Any, depth: int = 0) -> bool:
    """Structural equality with exact tensor comparison (NaN equal to NaN at the same place);
    other objects (a generation cache) are compared through their attributes."""
    if depth > 8:
        return a is b
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.is_floating_point():
            return bool(torch.equal(torch.isnan(a), torch.isnan(b))) and torch.equal(
                a.nan_to_num(0.0), b.nan_to_num(0.0)
            )
        return torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(same(x, y, depth + 1) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, type) or isinstance(b, type):
        return a is b
    if type(a) is not type(b):
        return False
    if hasattr(a, "keys") and hasattr(a, "__getitem__"):  # ModelOutput
        return same(dict(a.items()), dict(b.items()), depth + 1)
    if isinstance(a, (int, float, str, bytes, bool, type(None))):
        return a == b or (a != a and b != b)  # NaN == NaN here
    if hasattr(a, "__dict__"):  # e.g. DynamicCache: compare what it holds
        return same(vars(a), vars(b), depth + 1)
    return a == b


def assert_same_outcome(plain: Outcome, guarded: Outcome) -> None:
    if plain.error is not None:
        assert guarded.error is not None, f"unguarded raised {plain.error!r}, guarded returned"
        assert type(guarded.error) is type(plain.error)
        assert str(guarded.error) == str(plain.error)
        return
    assert guarded.error is None, f"guarded raised {guarded.error!r}, unguarded returned"
    assert same(plain.value, guarded.value)


def model_fingerprint(model: Any) -> tuple[Any, ...]:
    """What a loaded model is: its class, weights and config."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return type(model), state, model.config.to_dict(), str(model.dtype)


# ------------------------------------------------------------------------ generate


def unguarded_generate(model: Any, args: tuple, kwargs: dict) -> Any:
    """The exact original ``GenerationMixin.generate`` the patch table keeps."""
    applied = patches.applied()
    patch = next(p for p in applied if p.attribute == "generate")
    return applied[patch].original(model, *args, **kwargs)


@pytest.fixture(scope="module")
def tiny_model(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    model.eval()
    return model


@pytest.fixture
def guard_on(tmp_path):
    """The guard with everything on the generate path: meter (simulated GPU), ledger, and the
    exporter's aggregates (the HTTP server itself only serves scrapes; test_security covers it)."""
    settings = install(
        mode="warn", measure=True, backend="simulated", ledger_path=tmp_path / "ledger.sqlite"
    )
    from ecoguard.energy import get_meter
    from ecoguard.export.prometheus import process_aggregates

    assert get_meter() is not None and get_meter().backend.name == "simulated"
    assert process_aggregates().subscribed
    yield settings
    uninstall()


@dataclass(frozen=True)
class GenerateCase:
    batch: int
    length: int
    ids: tuple[int, ...]
    form: str  # positional | input_ids | inputs | list
    mask: str  # none | ones | left_pad | wrong_shape | float
    max_new_tokens: int | None
    max_length: int | None
    do_sample: bool
    num_beams: int
    return_dict: bool
    extra: str  # none | bogus_kw | eos_override | pad_none
    out_of_vocab: bool = False

    def build(self) -> tuple[tuple, dict]:
        flat = list(self.ids)[: self.batch * self.length]
        flat += [3] * (self.batch * self.length - len(flat))
        if self.out_of_vocab:
            flat[-1] = 300
        ids = torch.tensor(flat, dtype=torch.long).reshape(self.batch, self.length)
        kwargs: dict[str, Any] = {}
        args: tuple = ()
        if self.form == "positional":
            args = (ids,)
        elif self.form == "input_ids":
            kwargs["input_ids"] = ids
        elif self.form == "inputs":
            kwargs["inputs"] = ids
        else:
            kwargs["input_ids"] = ids.tolist()
        if self.mask == "ones":
            kwargs["attention_mask"] = torch.ones_like(ids)
        elif self.mask == "left_pad":
            mask = torch.ones_like(ids)
            mask[0, : self.length // 2] = 0
            kwargs["attention_mask"] = mask
        elif self.mask == "wrong_shape":
            kwargs["attention_mask"] = torch.ones(self.batch + 1, self.length + 2, dtype=torch.long)
        elif self.mask == "float":
            kwargs["attention_mask"] = torch.ones(self.batch, self.length, dtype=torch.float32)
        if self.max_new_tokens is not None:
            kwargs["max_new_tokens"] = self.max_new_tokens
        if self.max_length is not None:
            kwargs["max_length"] = self.max_length
        kwargs["do_sample"] = self.do_sample
        if self.num_beams != 1:
            kwargs["num_beams"] = self.num_beams
        if self.return_dict:
            kwargs["return_dict_in_generate"] = True
            kwargs["output_scores"] = True
        if self.extra == "bogus_kw":
            kwargs["bogus_kw"] = 1
        elif self.extra == "eos_override":
            kwargs["eos_token_id"] = [self.ids[0] % 256, 2]
        elif self.extra == "pad_none":
            kwargs["pad_token_id"] = None
        return args, kwargs


generate_cases = st.builds(
    GenerateCase,
    batch=st.integers(1, 3),
    length=st.integers(1, 6),
    # Mostly valid ids; now and then one past the vocabulary (the user's IndexError).
    ids=st.lists(st.integers(0, 255), min_size=1, max_size=18).map(tuple),
    # Now and then one token id past the vocabulary: the user's own IndexError.
    out_of_vocab=st.sampled_from((False,) * 7 + (True,)),
    form=st.sampled_from(("positional", "input_ids", "input_ids", "inputs", "list")),
    mask=st.sampled_from(("none", "ones", "left_pad") * 3 + ("wrong_shape", "float")),
    max_new_tokens=st.sampled_from((1, 2, 3, 1, 2, 3, None, 0, -1)),
    max_length=st.sampled_from((None, None, 1, 5)),
    do_sample=st.booleans(),
    num_beams=st.sampled_from((1, 1, 2)),
    return_dict=st.booleans(),
    extra=st.sampled_from(("none",) * 5 + ("bogus_kw", "eos_override", "pad_none")),
)


def _compare_generate(model: Any, case: GenerateCase, stage: str | None, error: type) -> Sabotage:
    args, kwargs = case.build()
    torch.manual_seed(1234)
    plain = run(lambda: unguarded_generate(model, args, dict(kwargs)))
    RUNTIME.models.clear()  # analyse the model again, so the load-time stages run too
    guarded_kwargs = dict(kwargs)
    with sabotaged(stage, error) as sab:
        torch.manual_seed(1234)
        guarded = run(lambda: model.generate(*args, **guarded_kwargs))
    assert guarded_kwargs.keys() == kwargs.keys()  # the caller's kwargs are not touched
    assert all(guarded_kwargs[k] is kwargs[k] for k in kwargs)
    assert_same_outcome(plain, guarded)
    if hypothesis.currently_in_test_context():
        hypothesis.event(
            "returned" if plain.error is None else f"raised {type(plain.error).__name__}"
        )
    return sab


@hsettings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(
    case=generate_cases,
    stage=st.one_of(st.none(), st.sampled_from(GENERATE_STAGES)),
    error=st.sampled_from(FAULT_TYPES),
)
def test_generate_fails_open_for_any_arguments_and_any_broken_stage(
    tiny_model, guard_on, case, stage, error
):
    _compare_generate(tiny_model, case, stage, error)


GOOD_CALL = GenerateCase(
    batch=2,
    length=4,
    ids=(1, 5, 6, 7, 1, 9, 10, 11),
    form="input_ids",
    mask="left_pad",
    max_new_tokens=3,
    max_length=None,
    do_sample=True,
    num_beams=1,
    return_dict=False,
    extra="none",
)


@pytest.mark.parametrize("stage", GENERATE_STAGES)
def test_every_generate_stage_is_reached_and_fails_open(tiny_model, guard_on, stage):
    """Deterministic companion to the property: each sabotaged stage really is on the path
    (it was hit), the fault was counted, and the output is the unguarded one."""
    from ecoguard.rules import BS1_SUSTAINED_CALLS

    reset_faults()
    if stage in (
        "policy.report",
        "warnings.error",
        "logging.filter",
        "subscriber.findings",
        "exporter.observe_finding",
    ):
        # Findings are what reach these stages: a batch-size-one streak produces one.
        case = GenerateCase(**{**GOOD_CALL.__dict__, "batch": 1, "ids": (1, 5, 6, 7)})
        RUNTIME.models.clear()
        with sabotaged(stage) as sab:
            for _ in range(BS1_SUSTAINED_CALLS):
                args, kwargs = case.build()
                torch.manual_seed(7)
                guarded = model_out = tiny_model.generate(*args, **kwargs)
                torch.manual_seed(7)
                plain = unguarded_generate(tiny_model, args, kwargs)
                assert same(plain, guarded), model_out
    else:
        sab = _compare_generate(tiny_model, GOOD_CALL, stage, InjectedFault)
    assert sab.hits >= 1, f"stage {stage} was never reached: the injection tests nothing"
    counted = sum(fault_counts().values())
    # A raising subscriber or ledger hook is counted by the event bus or the ledger; a broken
    # logging filter or warning by the guard. Every injected fault shows up somewhere.
    assert counted >= 1, f"fault in {stage} was not counted: {fault_counts()}"


def test_the_user_error_passes_through_unchanged_with_the_meter_on(tiny_model, guard_on):
    """The user's own exception (token id past the vocabulary) is re-raised as is, and the
    meter still closes the window with the error named."""
    seen: list[Any] = []
    unsubscribe = events.records.subscribe(seen.append)
    try:
        ids = torch.tensor([[1, 999_999]])
        plain = run(lambda: unguarded_generate(tiny_model, (), {"input_ids": ids}))
        guarded = run(lambda: tiny_model.generate(input_ids=ids, max_new_tokens=2))
    finally:
        unsubscribe()
    assert plain.error is not None
    assert type(guarded.error) is type(plain.error)
    assert [r.error for r in seen] == [type(plain.error).__name__]


# ------------------------------------------------------------------------ from_pretrained


def _quant_configs() -> list[Any]:
    return [
        None,
        BitsAndBytesConfig(load_in_8bit=True),
        BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0),
        BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4"),
        BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="fp4", bnb_4bit_compute_dtype=torch.bfloat16
        ),
        {"load_in_8bit": True},
        {"quant_method": "bitsandbytes", "load_in_4bit": True},
        {"quant_method": "nonsense"},
        {},
        object(),
        42,
        "int8",
        [1, 2],
    ]


QUANT_CONFIGS = _quant_configs()
DTYPES = ("absent", "auto", "float16", "bfloat16", torch.bfloat16, "float77", 3)


@dataclass(frozen=True)
class LoadCase:
    quant: int  # index into QUANT_CONFIGS, or -1: not passed
    dtype: Any
    dtype_key: str  # dtype | torch_dtype
    device_map: str | None
    path_form: str  # str | path | missing
    extra: str  # none | unknown_kw | load_in_8bit | low_cpu_mem

    def build(self, directory: Path) -> tuple[tuple, dict]:
        path: Any = {
            "str": str(directory),
            "path": Path(directory),
            "missing": str(directory) + "-missing",
        }[self.path_form]
        kwargs: dict[str, Any] = {}
        if self.quant >= 0:
            kwargs["quantization_config"] = QUANT_CONFIGS[self.quant]
        if self.dtype != "absent":
            kwargs[self.dtype_key] = self.dtype
        if self.device_map is not None:
            kwargs["device_map"] = self.device_map
        if self.extra == "unknown_kw":
            kwargs["foo_bar"] = 3
        elif self.extra == "load_in_8bit":
            kwargs["load_in_8bit"] = True
        elif self.extra == "low_cpu_mem":
            kwargs["low_cpu_mem_usage"] = True
        return (path,), kwargs


load_cases = st.builds(
    LoadCase,
    quant=st.integers(-1, len(QUANT_CONFIGS) - 1),
    dtype=st.sampled_from((*DTYPES, "absent", "absent")),
    dtype_key=st.sampled_from(("dtype", "dtype", "torch_dtype")),
    device_map=st.sampled_from((None, None, "cpu", "nonsense")),
    path_form=st.sampled_from(("str", "str", "path", "missing")),
    extra=st.sampled_from(("none",) * 4 + ("unknown_kw", "load_in_8bit", "low_cpu_mem")),
)


def _load(args: tuple, kwargs: dict) -> Outcome:
    outcome = run(lambda: AutoModelForCausalLM.from_pretrained(*args, **kwargs))
    if outcome.error is None:
        outcome.value = model_fingerprint(outcome.value)
    return outcome


def _compare_load(directory: Path, case: LoadCase, stage: str | None, error: type, tmp: Path):
    args, kwargs = case.build(directory)
    uninstall()
    plain = _load(args, dict(kwargs))
    install(mode="warn", measure=True, backend="simulated", ledger_path=tmp / "l.sqlite")
    RUNTIME.policy._warned.clear()  # every call reports afresh, so the report stage runs
    with sabotaged(stage, error) as sab:
        guarded = _load(args, dict(kwargs))
    uninstall()
    assert_same_outcome(plain, guarded)
    if hypothesis.currently_in_test_context():
        hypothesis.event(
            "loaded" if plain.error is None else f"raised {type(plain.error).__name__}"
        )
    return sab


@hsettings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(
    case=load_cases,
    stage=st.one_of(st.none(), st.sampled_from(LOAD_STAGES)),
    error=st.sampled_from(FAULT_TYPES),
)
def test_from_pretrained_fails_open_for_any_config_and_any_broken_stage(
    tiny_llama_dir, tmp_path, case, stage, error
):
    _compare_load(tiny_llama_dir, case, stage, error, tmp_path)


@pytest.mark.parametrize("stage", LOAD_STAGES)
def test_every_load_stage_is_reached_and_fails_open(tiny_llama_dir, tmp_path, stage):
    """An 8-bit load of a tiny model raises findings (int8-mixed, small-model-quant), so every
    load stage, reporting included, is on the path; each one broken leaves the load intact."""
    reset_faults()
    case = LoadCase(
        quant=QUANT_CONFIGS.index(QUANT_CONFIGS[1]),
        dtype="absent",
        dtype_key="dtype",
        device_map=None,
        path_form="str",
        extra="none",
    )
    sab = _compare_load(tiny_llama_dir, case, stage, InjectedFault, tmp_path)
    assert sab.hits >= 1, f"stage {stage} was never reached: the injection tests nothing"
    assert sum(fault_counts().values()) >= 1, f"fault in {stage} was not counted"
