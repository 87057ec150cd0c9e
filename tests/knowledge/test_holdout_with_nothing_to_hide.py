"""`estimate --holdout` for a GPU or configuration the data has no rows of says there were none
to hold out, instead of claiming rows were held out (the answer is the unheld one)."""

from __future__ import annotations

import pytest

from ecoguard.deployment import Deployment, GpuSpec, ModelSpec
from ecoguard.knowledge import reference_rows
from ecoguard.knowledge.estimator import estimate


def _deployment(gpu: str, model: str = "mistralai/Mistral-7B-v0.1") -> Deployment:
    return Deployment(model=ModelSpec(id=model), gpu=GpuSpec(profile=gpu), precision="fp16")


def _holdout_notes(result) -> list[str]:
    return [note for note in result.assumptions if note.startswith("hold-out")]


def test_a_gpu_without_rows_has_nothing_to_hold_out():
    assert not any(row.gpu == "h200" for row in reference_rows())
    held = estimate(_deployment("h200"), holdout="gpu")
    plain = estimate(_deployment("h200"))
    assert held.energy_per_1k_tokens_j == plain.energy_per_1k_tokens_j
    [note] = _holdout_notes(held)
    assert "none to hold out" in note and "as if" not in note


@pytest.mark.parametrize("holdout", ["gpu", "config"])
def test_a_measured_gpu_and_configuration_say_their_rows_were_held_out(holdout):
    held = estimate(_deployment("a800"), holdout=holdout)
    plain = estimate(_deployment("a800"))
    assert held.energy_per_1k_tokens_j != plain.energy_per_1k_tokens_j  # rows really were hidden
    [note] = _holdout_notes(held)
    assert "as if the rows" in note and "none to hold out" not in note


def test_an_unmeasured_configuration_on_a_measured_gpu_has_nothing_to_hold_out():
    held = estimate(_deployment("a800", "Qwen/Qwen2.5-0.5B-Instruct"), holdout="config")
    plain = estimate(_deployment("a800", "Qwen/Qwen2.5-0.5B-Instruct"))
    assert held.energy_per_1k_tokens_j == plain.energy_per_1k_tokens_j
    [note] = _holdout_notes(held)
    assert "none to hold out" in note
