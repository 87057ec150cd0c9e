"""`ecoguard doctor` says whether energy is measured here and why not, and answers without
importing torch where no NVIDIA driver exists (torch's import took seconds of its 3.5 s)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ecoguard.cli import main
from ecoguard.energy.backends import NvmlBackend
from ecoguard.errors import BackendError
from ecoguard.guard import cli as doctor


@pytest.fixture
def no_driver(monkeypatch):
    def probe(*args, **kwargs):
        raise BackendError("NVML nvmlInit: NVML Shared Library Not Found")

    monkeypatch.setattr(NvmlBackend, "probe", staticmethod(probe))
    monkeypatch.setattr(doctor, "nvidia_driver_present", lambda: False)


def _report(capsys) -> dict:
    main(["doctor", "--json"])
    return json.loads(capsys.readouterr().out)


def test_doctor_says_measurement_is_off_and_why_without_a_driver(capsys, no_driver):
    measurement = _report(capsys)["measurement"]
    assert measurement["on"] is False and measurement["tier"] == "unmeasured"
    assert "NVML Shared Library Not Found" in measurement["reason"]
    main(["doctor"])
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "measurement" in ln)
    assert "off" in line and "ECOGUARD_BACKEND=simulated" in line


def test_doctor_says_measurement_is_on_with_a_simulated_gpu(capsys, monkeypatch, no_driver):
    monkeypatch.setenv("ECOGUARD_BACKEND", "simulated")
    measurement = _report(capsys)["measurement"]
    assert (measurement["on"], measurement["tier"], measurement["gpus"]) == (True, "simulated", 1)
    assert measurement["reason"] is None


@pytest.mark.parametrize(
    ("value", "reason"), [("null", "ECOGUARD_BACKEND=null"), ("bogus", "unknown backend")]
)
def test_doctor_names_a_backend_setting_that_turns_measurement_off(
    capsys, monkeypatch, no_driver, value, reason
):
    monkeypatch.setenv("ECOGUARD_BACKEND", value)
    measurement = _report(capsys)["measurement"]
    assert measurement["on"] is False and reason in measurement["reason"]


def test_doctor_imports_no_torch_where_no_driver_exists():
    if doctor.nvidia_driver_present():
        pytest.skip("this machine has an NVIDIA driver: doctor asks torch.cuda when NVML fails")
    code = (
        "import sys; from ecoguard.cli import main; main(['doctor', '--json']);"
        "print('torch' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "False"
    report = json.loads(done.stdout)
    assert report["versions"]["torch"]  # still reported, from package metadata
