"""Install/uninstall lifecycle, exact restoration, post-import hooks in both import orders."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import wrapt

pytest.importorskip("transformers")

from ecoguard.errors import UsageError
from ecoguard.guard.install import install, is_installed, uninstall


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ECOGUARD_")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


def test_cycles_restore_exact_originals():
    from transformers.generation.utils import GenerationMixin
    from transformers.modeling_utils import PreTrainedModel

    original_load = vars(PreTrainedModel)["from_pretrained"]
    original_generate = vars(GenerationMixin)["generate"]
    assert isinstance(original_load, classmethod)
    for _ in range(3):
        install(measure=False)
        install(measure=False)  # idempotent: still one layer
        patched = vars(PreTrainedModel)["from_pretrained"]
        assert isinstance(patched, wrapt.FunctionWrapper)
        assert patched.__wrapped__ is original_load
        assert vars(GenerationMixin)["generate"].__wrapped__ is original_generate
        assert is_installed()
        uninstall()
        uninstall()  # idempotent
        assert vars(PreTrainedModel)["from_pretrained"] is original_load
        assert vars(GenerationMixin)["generate"] is original_generate
        assert not is_installed()


def test_install_settings_and_bad_arguments():
    settings = install(mode="fix", rules="batch-size-one:off", measure=False)
    assert settings.mode == "fix" and settings.rules == {"batch-size-one": "off"}
    with pytest.raises(UsageError, match="unknown install"):
        install(colour="green")
    with pytest.raises(UsageError, match="unknown mode"):
        install(mode="loud")


def test_an_explicit_none_clears_the_field(monkeypatch, tmp_path):
    """install(ledger_path=None) means no ledger; it left the default ledger on (None was read
    as "not given"), so a caller asking for none wrote to the user's real ledger."""
    monkeypatch.delenv("ECOGUARD_LEDGER", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    try:
        assert install(measure=False).ledger_path is not None  # not given: the default
        assert install(measure=False, ledger_path=None).ledger_path is None
        priced = install(measure=False, price_usd_per_kwh=0.5)
        assert priced.price_usd_per_kwh == 0.5
        assert install(measure=False, price_usd_per_kwh=None).price_usd_per_kwh is None
        with pytest.raises(UsageError, match="unknown install"):
            install(colour=None)
    finally:
        uninstall()


def test_import_ecoguard_first_then_transformers_with_stale_hooks():
    """Hooks from an earlier install/uninstall stay registered (wrapt cannot remove them) but
    do nothing; the current install's hook patches exactly once."""
    result = _run(
        """
        import sys
        import ecoguard
        from ecoguard.guard.install import install, uninstall
        install(measure=False)
        uninstall()
        install(measure=False)
        assert "transformers.modeling_utils" not in sys.modules
        import wrapt
        from transformers.modeling_utils import PreTrainedModel
        from transformers.generation.utils import GenerationMixin
        patched = vars(PreTrainedModel)["from_pretrained"]
        assert isinstance(patched, wrapt.FunctionWrapper)
        assert isinstance(patched.__wrapped__, classmethod)  # one layer, not two
        assert isinstance(vars(GenerationMixin)["generate"], wrapt.FunctionWrapper)
        uninstall()
        assert isinstance(vars(PreTrainedModel)["from_pretrained"], classmethod)
        print("ok")
        """
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_import_transformers_first_then_ecoguard():
    result = _run(
        """
        import wrapt
        from transformers.modeling_utils import PreTrainedModel
        original = vars(PreTrainedModel)["from_pretrained"]
        import ecoguard
        ecoguard.install(measure=False)
        assert vars(PreTrainedModel)["from_pretrained"].__wrapped__ is original
        ecoguard.uninstall()
        assert vars(PreTrainedModel)["from_pretrained"] is original
        print("ok")
        """
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_failing_hook_never_breaks_the_users_import():
    result = _run(
        """
        import ecoguard
        from ecoguard.guard import patches
        from ecoguard.faults import fault_counts
        def boom(patch, module):
            raise RuntimeError("injected")
        patches._apply = boom
        ecoguard.install(measure=False)
        from transformers.modeling_utils import PreTrainedModel
        assert isinstance(vars(PreTrainedModel)["from_pretrained"], classmethod)
        assert fault_counts()["guard.patch"] >= 1
        print("ok")
        """
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_ecoguard_auto_installs_from_env_and_adds_a_handler():
    result = _run(
        """
        import logging, sys
        import ecoguard.auto
        from ecoguard.guard.install import is_installed, current_settings
        assert is_installed() and current_settings().mode == "fix"
        handlers = [h for h in logging.getLogger("ecoguard").handlers if not isinstance(h, logging.NullHandler)]
        assert len(handlers) == 1
        assert "transformers" not in sys.modules
        print("ok")
        """,
        ECOGUARD_MODE="fix",
        ECOGUARD_MEASURE="0",
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_import_ecoguard_is_inert():
    result = _run(
        """
        import sys, ecoguard
        from ecoguard.guard.install import is_installed
        assert not is_installed()
        assert not any(m in sys.modules for m in ("torch", "transformers"))
        print("ok")
        """
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_install_cycles_before_transformers_import_register_each_hook_once():
    """Hooks cannot be removed from wrapt, so cycles must not pile them up; the last install
    still patches transformers when it is imported later, exactly once."""
    result = _run(
        textwrap.dedent(
            """
            import sys
            from wrapt import importer
            import ecoguard
            for _ in range(1000):
                ecoguard.install(measure=False)
                ecoguard.uninstall()
            hooks = importer._post_import_hooks
            counts = [len(hooks.get(name) or ()) for name in
                      ("transformers.modeling_utils", "transformers.generation.utils")]
            assert counts == [1, 1], counts
            assert "transformers" not in sys.modules
            ecoguard.install(measure=False)
            import wrapt
            from transformers import PreTrainedModel
            from transformers.generation.utils import GenerationMixin
            fp = vars(PreTrainedModel)["from_pretrained"]
            assert isinstance(fp, wrapt.FunctionWrapper), type(fp)
            assert not isinstance(fp.__wrapped__, wrapt.FunctionWrapper)
            assert isinstance(vars(GenerationMixin)["generate"], wrapt.FunctionWrapper)
            ecoguard.uninstall()
            assert not isinstance(vars(PreTrainedModel)["from_pretrained"], wrapt.FunctionWrapper)
            print("ok")
            """
        )
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout
