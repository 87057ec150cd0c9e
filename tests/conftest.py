"""Shared fixtures. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _isolated_ecoguard_env(monkeypatch, tmp_path):
    """No test reads the developer's ECOGUARD_* settings or writes to their real ledger."""
    for key in list(os.environ):
        if key.startswith("ECOGUARD_"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("ECOGUARD_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    yield


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """A tiny Llama model saved from a config (random weights, seeded)."""
    pytest.importorskip("transformers")
    from ecoguard.testing.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory):
    """A tiny Qwen2 model saved from a config (random weights, seeded)."""
    pytest.importorskip("transformers")
    from ecoguard.testing.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), "qwen2")
