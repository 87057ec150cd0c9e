"""ecoguard's own exceptions and warning categories.

Kept in one small module with no imports so every part (and user code) can use them cheaply.
"""

from __future__ import annotations


class EcoguardError(Exception):
    """Base class of every error ecoguard raises on purpose."""


class UsageError(EcoguardError, ValueError):
    """Bad input from a user: says what was wrong and what is accepted. The CLI exits 2."""


class UnknownGpuError(UsageError):
    """A GPU name that matches no profile; ``suggestions`` holds the nearest known names."""

    def __init__(self, name: str, suggestions: list[str] | tuple[str, ...] = ()) -> None:
        self.name = name
        self.suggestions = list(suggestions)
        hint = f" Did you mean: {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown GPU {name!r}.{hint} Run `ecoguard data --gpus` for the list.")


class UnknownModelError(UsageError):
    """A model id whose size cannot be found or parsed; a parameter count is accepted instead."""


class EnergyTrapError(EcoguardError):
    """Raised in ``strict`` mode when a configuration matches an energy trap.

    ``findings`` holds the findings that caused the refusal.
    """

    def __init__(self, message: str, findings: list | tuple = ()) -> None:
        self.findings = list(findings)
        super().__init__(message)


class EnergyTrapWarning(UserWarning):
    """Issued in ``warn`` mode; a UserWarning so ``warnings`` filters and ``-W`` flags work."""


class UnmeasuredWarning(UserWarning):
    """Issued by ``ecoguard.measure`` where no GPU energy can be read (no driver, null backend):
    its tokens are counted, its energy is None."""


class BackendError(EcoguardError):
    """A power/energy backend (NVML, simulated) failed; mapped from vendor errors."""


class NotSupportedError(BackendError):
    """The backend cannot provide this reading on this device (e.g. energy counter pre-Volta)."""


class DeviceLostError(BackendError):
    """The device stopped answering (fell off the bus, driver reset)."""
