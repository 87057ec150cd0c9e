"""The demo's two serving phases: one request per ``generate`` call until ``batch-size-one``
fires, then the same prompts as one batch. torch is imported inside the functions that use it,
so importing this module stays light."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ecoguard.demo.model import DemoModel
from ecoguard.demo.render import Progress
from ecoguard.demo.summary import Phase, PhaseFigures
from ecoguard.errors import EnergyTrapError
from ecoguard.voice import plural

# What the demo asks the model (the real one); eight prompts, served one by one, then as a batch.
PROMPTS: tuple[str, ...] = (
    "What is the capital of France?",
    "Name a primary colour.",
    "What is 2 + 2?",
    "Name a planet of the solar system.",
    "What do bees make?",
    "Name a fruit that is yellow.",
    "What gas do plants take in?",
    "How many legs does a spider have?",
)

_SENTENCE_ENDS = (".", "!", "?", "。", "！", "？")


@dataclass
class Plan:
    """Sizes of one demo run: the real model or the tiny one."""

    quick: bool
    calls_bs1: int
    max_new_tokens: int
    prompt_tokens_tiny: int = 12


@dataclass
class Inputs:
    """One batch-size-1 input per prompt, and the whole batch (left-padded for the real model)."""

    singles: list[dict[str, Any]]
    batch: dict[str, Any]
    prompt_tokens: int


def inputs_for(demo_model: DemoModel, plan: Plan) -> Inputs:
    import torch

    tokenizer = demo_model.tokenizer
    if tokenizer is None:
        generator = torch.Generator().manual_seed(0)
        # Token ids 3.. avoid the tiny model's pad/bos/eos ids (0, 1, 2).
        ids = torch.randint(3, 256, (len(PROMPTS), plan.prompt_tokens_tiny), generator=generator)
        mask = torch.ones_like(ids)
        singles = [
            {"input_ids": ids[i : i + 1], "attention_mask": mask[i : i + 1]}
            for i in range(len(ids))
        ]
        return Inputs(singles, {"input_ids": ids, "attention_mask": mask}, plan.prompt_tokens_tiny)
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        for prompt in PROMPTS
    ]
    singles = [dict(tokenizer(text, return_tensors="pt")) for text in texts]
    batch = dict(tokenizer(texts, return_tensors="pt", padding=True))
    prompt_tokens = round(sum(s["input_ids"].shape[1] for s in singles) / len(singles))
    return Inputs(singles, batch, prompt_tokens)


def whole_sentences(text: str) -> str:
    """``text`` up to its last full sentence (an ellipsis marks one with none)."""
    if not text or text.endswith(_SENTENCE_ENDS):
        return text
    cut = max(text.rfind(end + " ") for end in _SENTENCE_ENDS)
    return text[: cut + 1] if cut > 0 else text + " …"


@dataclass
class Server:
    """Serves the demo's prompts with ``model``; ``records`` is the list the meter's records
    are published into while it runs (each phase's figures are the records it added)."""

    out: Progress
    model: Any
    demo_model: DemoModel
    prompts: Inputs
    plan: Plan
    records: list[Any]

    def _generate(self, inputs: dict[str, Any]) -> Any:
        import torch

        tokenizer = self.demo_model.tokenizer
        pad = tokenizer.pad_token_id if tokenizer is not None else None
        with torch.inference_mode():
            return self.model.generate(
                **inputs,
                max_new_tokens=self.plan.max_new_tokens,
                do_sample=False,
                pad_token_id=pad if pad is not None else self.model.generation_config.pad_token_id,
            )

    def _decode(self, output: Any, prompt_width: int) -> str | None:
        """The answer's text, ending at its last full sentence when ``max_new_tokens`` cut it
        off mid-sentence (marked with an ellipsis when it has no full sentence at all)."""
        if self.demo_model.tokenizer is None:
            return None
        text = self.demo_model.tokenizer.decode(output[prompt_width:], skip_special_tokens=True)
        return whole_sentences(" ".join(text.split()))

    def _say_answer(self, prompt: str, sample: str | None) -> None:
        if sample:
            self.out.say(f'  answer to "{prompt}": {sample}')

    def one_by_one(self) -> Phase:
        """Batch-size-1 calls until ``batch-size-one`` fires (or strict mode refuses the next)."""
        calls, refused, sample = 0, False, None
        started = time.perf_counter()
        first_record = len(self.records)
        for index in range(self.plan.calls_bs1):
            single = self.prompts.singles[index % len(self.prompts.singles)]
            seen = len(self.records)
            call_started = time.perf_counter()
            try:
                output = self._generate(single)
            except EnergyTrapError:
                refused = True
                self.out.say(f"  call {index + 1}: refused by strict mode; moving on to batching")
                break
            calls += 1
            took = time.perf_counter() - call_started
            line = f"  call {index + 1}/{self.plan.calls_bs1}: {took:.2f}s"
            if len(self.records) > seen:
                record = self.records[-1]
                line += (
                    f", {plural(record.tokens, 'token')}, {record.energy_j:.1f} J ({record.tier})"
                )
            self.out.say(line)
            if sample is None:
                sample = self._decode(output[0], single["input_ids"].shape[1])
        self._say_answer(PROMPTS[0], sample)
        return Phase(
            calls=calls,
            refused_by_strict=refused,
            wall_s=round(time.perf_counter() - started, 3),
            sample_answer=sample,
            figures=PhaseFigures.of(self.records[first_record:]),
        )

    def batched(self) -> Phase:
        """All the prompts in one generate call."""
        first_record = len(self.records)
        started = time.perf_counter()
        output = self._generate(self.prompts.batch)
        elapsed = time.perf_counter() - started
        self.out.say(f"  1 call, batch size {output.shape[0]}: {elapsed:.2f}s")
        sample = self._decode(output[-1], self.prompts.batch["input_ids"].shape[1])
        self._say_answer(PROMPTS[-1], sample)
        return Phase(
            calls=1,
            wall_s=round(elapsed, 3),
            sample_answer=sample,
            figures=PhaseFigures.of(self.records[first_record:]),
        )
