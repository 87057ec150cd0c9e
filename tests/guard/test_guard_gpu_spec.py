"""One home for profile -> GpuSpec: every front door turns a GPU name into the same spec."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from ecoguard.advisor.deployments import resolve_gpu_spec
from ecoguard.audit.core import _gpu_spec as audit_gpu_spec
from ecoguard.deployment import GpuSpec
from ecoguard.guard import environment
from ecoguard.knowledge import resolve_gpu


def test_profile_to_gpu_spec_carries_the_table_facts():
    profile = resolve_gpu("A100")
    spec = profile.to_gpu_spec()
    assert spec == GpuSpec(
        profile=profile.key,
        name=profile.name,
        architecture=profile.architecture,
        compute_capability=tuple(profile.compute_capability)[:2],
        vram_gb=profile.vram_gb,
        count=1,
    )
    driver = profile.to_gpu_spec(name="NVIDIA A100-SXM4-80GB", count=4)
    assert (driver.name, driver.count, driver.profile) == ("NVIDIA A100-SXM4-80GB", 4, profile.key)


@pytest.mark.parametrize("name", ["A100", "T4", "rtx4090", "H100"])
def test_advisor_audit_and_guard_agree(name, monkeypatch):
    expected = resolve_gpu(name).to_gpu_spec()
    assert resolve_gpu_spec(name) == expected
    assert audit_gpu_spec(name) == expected
    state = SimpleNamespace(profile=expected.profile, name=expected.name)
    meter = SimpleNamespace(gpu_states=lambda: [state, state])
    monkeypatch.setattr("ecoguard.energy.get_meter", lambda: meter)
    assert environment.detect_gpu() == replace(expected, count=2)


def test_guard_keeps_an_unknown_gpu_as_the_driver_named_it(monkeypatch):
    state = SimpleNamespace(profile=None, name="Mystery Accelerator 9000")
    meter = SimpleNamespace(gpu_states=lambda: [state])
    monkeypatch.setattr("ecoguard.energy.get_meter", lambda: meter)
    assert environment.detect_gpu() == GpuSpec(name="Mystery Accelerator 9000", count=1)
