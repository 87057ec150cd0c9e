"""Fork hooks, registered once per owner when that owner first starts (never at import).

A forked child has only the thread that forked; locks other threads held stay held forever and
background threads are gone. Each part of ecoguard that starts threads or holds locks (meter,
ledger, metrics, the guard) re-arms itself in the child through hooks registered here, once per
process, the first time it starts: ``import ecoguard`` stays free of side effects.
"""

from __future__ import annotations

import os
from collections.abc import Callable

Hook = Callable[[], None]

# owner -> the token of the call that registered it. ``dict.setdefault`` is atomic in CPython,
# so two threads starting the same owner at once register its hooks once, without a lock (a
# lock here could itself be held by another thread at a fork).
_registered: dict[str, object] = {}


def register_fork_hooks(
    owner: str,
    *,
    before: Hook | None = None,
    after_in_parent: Hook | None = None,
    after_in_child: Hook | None = None,
) -> bool:
    """Register ``owner``'s fork hooks with :func:`os.register_at_fork`, the first time only.

    Returns True when this call registered them; False when ``owner`` already had, or the
    platform has no fork hooks (Windows). The hooks must not raise: CPython ignores (and
    prints) an exception from one, and the fork goes on."""
    if not hasattr(os, "register_at_fork"):
        return False
    token = object()
    if _registered.setdefault(owner, token) is not token:
        return False
    hooks = {
        "before": before,
        "after_in_parent": after_in_parent,
        "after_in_child": after_in_child,
    }
    os.register_at_fork(**{name: hook for name, hook in hooks.items() if hook is not None})
    return True
