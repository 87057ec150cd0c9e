"""The patch table: one frozen tuple drives install and uninstall, so they cannot drift.

Patches are applied from wrapt post-import hooks on the *defining* submodules, so importing
ecoguard first and transformers later works, and so does the reverse (a hook registered for a
module that is already imported fires at once). Hooks cannot be unregistered, so they are
registered once per process and act only while the guard is wanted; a later install on an
already imported module patches it directly. A hook never raises into the user's import, and
1000 install/uninstall cycles leave the same two hooks behind, not 2000.

The exact original attribute (``vars(owner)[name]``: for ``from_pretrained`` the raw
``classmethod`` object) is kept and put back on uninstall, so after ``uninstall()``
``vars(PreTrainedModel)["from_pretrained"] is original`` holds.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import wrapt

from ecoguard.faults import record_fault
from ecoguard.guard.wrappers import from_pretrained_wrapper, generate_wrapper

_log = logging.getLogger("ecoguard")


@dataclass(frozen=True, slots=True)
class Patch:
    """Wrap ``module.owner.attribute`` with ``wrapper`` (a wrapt wrapper function)."""

    module: str
    owner: str
    attribute: str
    wrapper: Callable[..., Any]


PATCHES: tuple[Patch, ...] = (
    Patch(
        "transformers.modeling_utils", "PreTrainedModel", "from_pretrained", from_pretrained_wrapper
    ),
    Patch("transformers.generation.utils", "GenerationMixin", "generate", generate_wrapper),
)


@dataclass(frozen=True, slots=True)
class Applied:
    owner: type
    original: Any  # exactly vars(owner)[attribute] before patching
    wrapper: wrapt.FunctionWrapper


_lock = threading.RLock()
_wanted = False
_hooks_registered = False
_applied: dict[Patch, Applied] = {}


def applied() -> dict[Patch, Applied]:
    """The patches currently in place (a copy)."""
    with _lock:
        return dict(_applied)


def wrap(patch: Patch, module: ModuleType) -> Applied:
    """Wrap ``patch``'s attribute in ``module`` now; the record keeps the exact original."""
    owner = getattr(module, patch.owner)
    original = vars(owner)[patch.attribute]
    wrapper = wrapt.FunctionWrapper(original, patch.wrapper)
    setattr(owner, patch.attribute, wrapper)
    return Applied(owner=owner, original=original, wrapper=wrapper)


def unwrap(patch: Patch, done: Applied) -> None:
    """Put back the exact original attribute. If something else has wrapped on top of ours,
    its wrapper stays (removing it would break that library) and ours passes calls through."""
    current = vars(done.owner).get(patch.attribute)
    if current is done.wrapper:
        setattr(done.owner, patch.attribute, done.original)
    else:
        _log.warning(
            "ecoguard: %s.%s was wrapped again after ecoguard patched it; leaving that "
            "wrapper in place (ecoguard's layer now passes calls straight through)",
            patch.owner,
            patch.attribute,
        )


def _apply(patch: Patch, module: ModuleType) -> None:
    if patch not in _applied:
        _applied[patch] = wrap(patch, module)


def _on_import(patch: Patch, module: ModuleType) -> None:
    """Post-import hook (and direct call on re-install): apply ``patch`` while the guard is on."""
    try:
        with _lock:
            if not _wanted:
                return
            _apply(patch, module)
    except Exception as exc:  # never break the user's import
        record_fault("guard.patch", exc)


def apply_patches() -> None:
    """Patch now where the modules are imported, and on import where they are not. Idempotent."""
    global _wanted, _hooks_registered
    with _lock:
        _wanted = True
        first_install = not _hooks_registered
        _hooks_registered = True
    for patch in PATCHES:
        if first_install:
            # Fires at once if the module is already imported, else when it is.
            wrapt.register_post_import_hook(functools.partial(_on_import, patch), patch.module)
        elif (module := sys.modules.get(patch.module)) is not None:
            _on_import(patch, module)


def remove_patches() -> None:
    """Put back the exact original attributes (:func:`unwrap`)."""
    global _wanted
    with _lock:
        _wanted = False
        for patch, done in list(_applied.items()):
            unwrap(patch, done)
            del _applied[patch]
