"""Region names live below the knowledge package: Settings checks ECOGUARD_REGION with them
without importing ecoguard.knowledge (config <-> knowledge was an import cycle)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ecoguard.config import Settings
from ecoguard.errors import UsageError
from ecoguard.knowledge import region, regions
from ecoguard.regions import region_aliases, region_key


def test_settings_check_the_region_without_importing_knowledge():
    code = (
        "import sys\n"
        "from ecoguard.config import Settings\n"
        "assert Settings.from_env({'ECOGUARD_REGION': 'CN'}).region == 'cn'\n"
        "assert 'ecoguard.knowledge' not in sys.modules, 'config imported knowledge'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_region_names_the_accepted_keys_in_settings_and_knowledge():
    with pytest.raises(UsageError) as from_settings:
        Settings.from_env({"ECOGUARD_REGION": "mars"})
    with pytest.raises(UsageError) as from_knowledge:
        region("mars")
    accepted = ", ".join(sorted(regions()))
    assert str(from_knowledge.value) == f"unknown region 'mars'; accepted: {accepted}"
    assert str(from_settings.value) == f"ECOGUARD_REGION='mars': {from_knowledge.value}"


def test_every_alias_resolves_to_its_grid():
    for alias, key in region_aliases().items():
        assert region_key(f"  {alias.upper()} ") == key
        assert region(alias).key == key
