"""The workload behind the real-Prometheus test: a tiny model generating, measured for real.

Two ways to drive it, chosen by what exists in the tree:

- ``guarded``: the whole stack. ``ecoguard.install`` (the guard) patches transformers, the meter
  runs the simulated backend, every generate call yields a GenerationRecord and the rules yield
  findings, all on ``ecoguard.events``.
- ``metered``: the guard is not available yet, so the test opens and closes the meter's call
  windows around each real ``generate`` itself (what the guard's wrapper does), with tokens
  counted by ``ecoguard.guard.tokens.count_generated`` when present.

Either way the records are the meter's own, captured from ``ecoguard.events.records`` so the
test can compare Prometheus' figures with them.
"""

from __future__ import annotations

import importlib.util
import threading
from typing import Any

from ecoguard import events
from ecoguard.config import Settings

PROMPT_TOKENS = 16
EOS_TOKEN_ID = 2
PAD_TOKEN_ID = 0
MODEL_NAME = "tiny-llama"


def guard_available() -> bool:
    return importlib.util.find_spec("ecoguard.guard.install") is not None


class Workload:
    def __init__(self, model_dir: Any, settings: Settings) -> None:
        self.model_dir = model_dir
        self.settings = settings
        self.mode = "guarded" if guard_available() else "metered"
        self.records: list[Any] = []
        self._lock = threading.Lock()
        self._unsubscribe = events.records.subscribe(self._capture)
        self.meter: Any = None
        self.model: Any = None

    def _capture(self, record: Any) -> None:
        with self._lock:
            self.records.append(record)

    def captured(self) -> list[Any]:
        with self._lock:
            return list(self.records)

    def start(self) -> None:
        import torch
        import transformers

        from ecoguard.energy import get_meter, start_meter

        torch.manual_seed(0)
        if self.mode == "guarded":
            from ecoguard.guard.install import install

            install(settings=self.settings, measure=True)
            self.meter = get_meter() or start_meter(self.settings)
        else:
            self.meter = start_meter(self.settings)
        self.meter.wait_ready(10.0)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(self.model_dir)
        self.model.eval()
        self._generator = torch.Generator().manual_seed(0)

    def generate(self, batch_size: int, max_new_tokens: int = 24) -> None:
        """One real generate call (measured by the guard, or by the meter directly)."""
        import torch

        input_ids = torch.randint(3, 250, (batch_size, PROMPT_TOKENS), generator=self._generator)
        kwargs = dict(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens // 2,
            do_sample=False,
        )
        if self.mode == "guarded":
            self.model.generate(**kwargs)
            return
        from ecoguard.energy import CallInfo

        window = self.meter.begin(
            devices=None,
            info=CallInfo(
                model_name=MODEL_NAME,
                precision="fp32",
                batch_size=batch_size,
                prompt_tokens=PROMPT_TOKENS,
                max_new_tokens=max_new_tokens,
            ),
        )
        error: BaseException | None = None
        output = None
        try:
            output = self.model.generate(**kwargs)
        except BaseException as exc:  # re-raised below, after the window is closed
            error = exc
        tokens = 0 if output is None else _count_tokens(output)
        self.meter.end(window, tokens=tokens, requests=batch_size, error=error)
        if error is not None:
            raise error

    def stop(self) -> None:
        self._unsubscribe()
        if self.mode == "guarded":
            from ecoguard.guard.install import uninstall

            uninstall()
        from ecoguard.energy import stop_meter

        stop_meter()


def _count_tokens(output: Any) -> int:
    try:
        from ecoguard.guard.tokens import count_generated
    except ImportError:
        count_generated = None
    if count_generated is not None:
        return count_generated(
            output,
            prompt_length=PROMPT_TOKENS,
            eos_token_id=EOS_TOKEN_ID,
            pad_token_id=PAD_TOKEN_ID,
        )
    # Fallback with the same definition: per row, up to and including the first EOS.
    total = 0
    for row in output[:, PROMPT_TOKENS:].tolist():
        count = 0
        for token in row:
            count += 1
            if token == EOS_TOKEN_ID:
                break
        total += count
    return total
