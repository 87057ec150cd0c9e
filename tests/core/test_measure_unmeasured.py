"""`ecoguard.measure` on a machine with no GPU to read: the quickstart as a newcomer runs it.

Tokens are still counted, the block says it is unmeasured (tier, reason), one warning names the
cause and ECOGUARD_BACKEND=simulated, and no record is made (nothing reaches on_record)."""

from __future__ import annotations

import warnings

import pytest

import ecoguard
from ecoguard import UnmeasuredWarning
from ecoguard.config import Settings
from ecoguard.energy import PROCESS_METER, get_meter, stop_meter
from ecoguard.energy.backends import NvmlBackend, measurement_status
from ecoguard.errors import BackendError
from ecoguard.export import ledger as ledger_mod
from ecoguard.guard.install import install, uninstall

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM  # noqa: E402

from ecoguard.guard.tokens import count_generated  # noqa: E402


@pytest.fixture(autouse=True)
def _clean():
    uninstall()
    stop_meter()
    ledger_mod.stop_ledger()
    yield
    uninstall()
    stop_meter()
    ledger_mod.stop_ledger()


@pytest.fixture
def no_driver(monkeypatch):
    """The backend `auto` picks on a machine without an NVIDIA driver, whatever this one has."""

    def probe(*args, **kwargs):
        raise BackendError("NVML nvmlInit: NVML Shared Library Not Found")

    monkeypatch.setattr(NvmlBackend, "probe", staticmethod(probe))


def _generate(model):
    ids = torch.tensor([[1, 5, 6, 7], [1, 9, 10, 11]])
    out = model.generate(input_ids=ids, do_sample=False, max_new_tokens=5)
    return count_generated(out, prompt_length=4, eos_token_id=2, pad_token_id=0)


def test_measure_without_a_gpu_counts_tokens_and_says_it_measured_nothing(
    tiny_llama_dir, no_driver
):
    install(settings=Settings.from_env())  # what the quickstart's `import ecoguard.auto` does
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    records = []
    unsubscribe = ecoguard.on_record(records.append)
    try:
        with pytest.warns(UnmeasuredWarning) as caught, ecoguard.measure("x") as m:
            expected = _generate(model)
    finally:
        unsubscribe()
    assert expected > 0 and m.tokens == expected
    assert (m.energy_j, m.joules_per_token, m.tier) == (None, None, "unmeasured")
    assert "NVML Shared Library Not Found" in m.unmeasured_reason
    [warning] = caught.list
    assert "ECOGUARD_BACKEND=simulated" in str(warning.message)
    assert "NVML Shared Library Not Found" in str(warning.message)
    assert warning.filename == __file__  # points at the user's `with`, not at ecoguard
    assert records == []  # no energy, no record: documented in ecoguard.energy.measure
    # The block lent its token counter to the guard only while it was open.
    assert PROCESS_METER.measurable is None
    after = _generate(model)
    assert after > 0 and m.tokens == expected


def test_the_warning_comes_once_for_a_block_run_in_a_loop(tiny_llama_dir, no_driver):
    install(mode="warn", settings=Settings())
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        blocks = []
        for _ in range(3):
            with ecoguard.measure("loop") as m:
                _generate(model)
            blocks.append(m)
    assert [w.category for w in caught].count(UnmeasuredWarning) == 1
    assert all(block.tokens > 0 and block.tier == "unmeasured" for block in blocks)


def test_nested_blocks_both_count_and_outer_tokens_include_the_inner(tiny_llama_dir, no_driver):
    install(mode="warn", settings=Settings())
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnmeasuredWarning)
        with ecoguard.measure("outer") as outer:
            first = _generate(model)
            with ecoguard.measure("inner") as inner:
                second = _generate(model)
            third = _generate(model)
    assert inner.tokens == second and outer.tokens == first + second + third
    assert PROCESS_METER.measurable is None


def test_a_simulated_gpu_measures_and_does_not_warn(tiny_llama_dir, monkeypatch):
    monkeypatch.setenv("ECOGUARD_BACKEND", "simulated")
    install(mode="warn", settings=Settings.from_env())
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnmeasuredWarning)
        with ecoguard.measure("sim") as m:
            expected = _generate(model)
    assert m.tokens == expected and len(m.records) == 1
    assert m.energy_j is not None and m.energy_j > 0 and m.tier == "simulated"
    assert m.unmeasured_reason is None and get_meter() is not None


@pytest.mark.parametrize(
    ("backend", "on", "tier", "reason"),
    [
        ("simulated", True, "simulated", None),
        ("null", False, "unmeasured", "ECOGUARD_BACKEND=null"),
        ("auto", False, "unmeasured", "NVML Shared Library Not Found"),
    ],
)
def test_measurement_status_says_whether_a_meter_would_measure_and_why_not(
    backend, on, tier, reason, no_driver
):
    status = measurement_status(Settings(backend=backend))
    assert (status.on, status.tier) == (on, tier)
    assert status.reason is None if reason is None else reason in status.reason
