"""Engine context and several cards in the advisor's answers (issue 28).

- An engine that batches concurrent requests itself (vLLM, SGLang, TGI, TensorRT-LLM) with no
  batch size stated: no batch-size-one finding, no ``ecoguard.install(batching=True)``, and the
  listed default says the batch is the engine's. The same through the CLI flags (``--engine``).
- vLLM's FP8 is priced from the configuration's FP16 figure, not torchao's eager rows.
- ``4x A800``: the energy counts all four cards, the JSON shows the count and VRAM per card.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ecoguard.advisor.answers import advise
from ecoguard.advisor.rendering import render
from ecoguard.cli import main
from ecoguard.config import Settings


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _text(question: str) -> dict[str, Any]:
    return _plain(advise(question, settings=Settings()).to_dict())


def _flags(argv: list[str], capsys: Any) -> dict[str, Any]:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _batch_default(answer: dict[str, Any]) -> dict[str, Any]:
    return next(d for d in answer["defaults"] if d["field"] == "batch_size")


ENGINE_CASES = [
    # (question, flags, engine as written)
    (
        "Mistral-7B on A800 served by vLLM, best config?",
        ["optimize", "--model", "Mistral-7B", "--gpu", "a800", "--engine", "vllm"],
        "vLLM",
    ),
    (
        "Qwen2.5-7B on RTX 5090 served by SGLang, best config?",
        ["optimize", "--model", "Qwen2.5-7B", "--gpu", "rtx5090", "--engine", "sglang"],
        "SGLang",
    ),
    (
        "Compare all precisions for Mistral-7B on A800 served by TGI",
        ["compare", "--model", "Mistral-7B", "--gpu", "a800", "--engine", "tgi"],
        "TGI",
    ),
    (
        "Yi-6B on RTX 4090D with TensorRT-LLM, 3M requests a month, best config?",
        [
            "optimize",
            "--model",
            "Yi-6B",
            "--gpu",
            "rtx4090d",
            "--engine",
            "tensorrt_llm",
            "--requests-per-month",
            "3000000",
        ],
        "TensorRT-LLM",
    ),
]


@pytest.mark.parametrize(
    ("question", "argv", "engine"), ENGINE_CASES, ids=[c[0] for c in ENGINE_CASES]
)
def test_an_engine_batches_itself_through_text_and_flags(
    question: str, argv: list[str], engine: str, capsys: Any
) -> None:
    text = _text(question)
    parsed = text.pop("parsed")
    assert parsed["engine"] == argv[argv.index("--engine") + 1]
    flags = _flags(argv, capsys)
    assert text == flags  # one answer, whichever door
    assert not any(f["rule"] == "batch-size-one" for f in text["findings"])
    assert "batching=True" not in json.dumps(text)
    assert text.get("batching") is None
    default = _batch_default(text)
    assert default["value"] == 1
    assert f"{engine} batches concurrent requests itself" in default["how_to_change"]
    if text.get("recommendation"):
        assert text["recommendation"].get("batch_size") in (None, 1)


def test_without_an_engine_the_same_question_still_gets_the_batcher() -> None:
    plain = _text("Mistral-7B on A800, 1M requests a month, cost?")
    assert any(f["rule"] == "batch-size-one" for f in plain["findings"])
    served = _text("Mistral-7B on A800 served by vLLM, 1M requests a month, cost?")
    assert not any(f["rule"] == "batch-size-one" for f in served["findings"])
    # Same figure for the configuration: the engine changes the advice, not the physics.
    assert served["current"]["energy_per_1k_tokens_j"] == plain["current"]["energy_per_1k_tokens_j"]


def test_the_rendered_answer_names_the_engines_batching_and_no_batcher() -> None:
    for lang, question in (
        ("en", "Mistral-7B on A800 served by vLLM, 1M requests a month, cost?"),
        ("zh", "Mistral-7B 在 A800 上用 vLLM 部署，每月 100 万次请求要花多少钱？"),
    ):
        shown = render(advise(question, settings=Settings()), fmt="md", plain=True, color=False)
        assert "batching=True" not in shown
        assert "batch-size-one" not in shown
        assert (
            "vLLM batches concurrent requests itself" if lang == "en" else "连续批处理"
        ) in shown


def test_a_stated_concurrency_is_the_engines_batch() -> None:
    answer = _text("Mistral-7B on A800 served by vLLM with 32 requests at once, best config?")
    default = _batch_default(answer)
    assert default["value"] == 32 and "32 requests in flight" in default["how_to_change"]
    assert answer["current"]["deployment"]["batch_size"] == 32
    assert not any(f["rule"] == "batch-size-one" for f in answer["findings"])


def test_a_stated_batch_size_is_kept_with_an_engine() -> None:
    answer = _text("Mistral-7B on A800 served by vLLM at batch size 8, 1M requests a month, cost?")
    assert not any(d["field"] == "batch_size" for d in answer["defaults"])
    assert answer["current"]["deployment"]["batch_size"] == 8


def test_an_unknown_engine_flag_is_refused(capsys: Any) -> None:
    assert main(["optimize", "--model", "Mistral-7B", "--engine", "ollama"]) == 2
    assert "--engine: invalid choice: 'ollama'" in capsys.readouterr().err


def test_vllm_fp8_is_priced_as_fused_kernels_not_torchao_eager() -> None:
    fp8 = _text("Qwen2.5-7B with FP8 on H100 served by vLLM, cost for 1M requests a month?")
    fp16 = _text("Qwen2.5-7B with FP16 on H100, cost for 1M requests a month?")
    eager = _text("Qwen2.5-7B with FP8 on H100, cost for 1M requests a month?")
    assert fp8["current"]["energy_per_1k_tokens_j"] == fp16["current"]["energy_per_1k_tokens_j"]
    assert (
        eager["current"]["energy_per_1k_tokens_j"] > 1.5 * fp8["current"]["energy_per_1k_tokens_j"]
    )
    assert "fused FP8 kernels" in fp8["current"]["method"]
    assert not any("overstate" in n for n in fp8["notes"])
    assert not any(f["rule"] == "fp8-eager" for f in fp8["findings"])


def test_four_cards_are_priced_as_four_with_vram_per_card(capsys: Any) -> None:
    four = _text("Mistral-7B on 4x A800 with tensor parallel, cost for 1M requests a month?")
    one = _text("Mistral-7B on an A800, cost for 1M requests a month?")
    cur4, cur1 = four["current"], one["current"]
    assert cur4["gpu_count"] == 4 and cur1["gpu_count"] == 1
    assert cur4["energy_per_1k_tokens_j"] > cur1["energy_per_1k_tokens_j"]
    assert four["money"]["current"]["cost_usd"] > one["money"]["current"]["cost_usd"]
    assert cur4["vram_gb_per_card"] == pytest.approx(cur4["vram_gb"] / 4, abs=1e-3)
    assert cur4["tier"] == "extrapolated"
    assert not any("spread over" in n for n in four["notes"])
    # The estimator's own command gives the same figure for the same four cards.
    flags = _flags(
        ["estimate", "--model", "Mistral-7B", "--gpu", "a800", "--gpu-count", "4"], capsys
    )
    assert flags["gpu_count"] == 4
    assert flags["energy_per_1k_tokens_j"] == cur4["energy_per_1k_tokens_j"]


def test_an_engines_fp8_candidates_are_fused_in_compare_and_optimize(capsys: Any) -> None:
    def fp8_rows(answer: dict[str, Any]) -> dict[str, float]:
        return {
            r["precision"]: r["energy_per_1k_tokens_j"]
            for r in answer["rows"]
            if r["precision"] in ("fp16", "fp8_weight_only", "fp8_dynamic")
        }

    served = _text("Compare all precisions for Qwen2.5-7B on H100 served by vLLM")
    served.pop("parsed")
    assert served == _flags(
        ["compare", "--model", "Qwen2.5-7B", "--gpu", "h100", "--engine", "vllm"], capsys
    )
    rows = fp8_rows(served)
    assert rows["fp8_weight_only"] == rows["fp8_dynamic"] == rows["fp16"]
    eager = fp8_rows(_text("Compare all precisions for Qwen2.5-7B on H100"))
    assert eager["fp8_dynamic"] > 1.5 * eager["fp16"]  # torchao's eager path, no engine
    best = _text("Qwen2.5-7B on H100 served by vLLM, best config?")
    assert not any(r["precision"].startswith("fp8") for r in best["rejected"])
    assert {"fp8_weight_only", "fp8_dynamic"} <= {r["precision"] for r in best["rows"]}


@pytest.mark.parametrize(
    ("question", "count"),
    [
        ("Qwen2.5-14B on 2x RTX 5090, cost for 1M requests a month?", 2),
        ("Qwen2.5-14B on 2 x RTX 4090D, cost for 1M requests a month?", 2),
        ("Qwen2.5-14B on 4x NVIDIA A100 80GB, cost for 1M requests a month?", 4),
    ],
)
def test_a_count_before_a_branded_name_is_read_and_vram_checked_per_card(
    question: str, count: int
) -> None:
    # Qwen2.5-14B in FP16 (~33 GB) overflows one 32 GB RTX 5090 or 24 GB 4090D, fits on two.
    many = _text(question)
    assert many["parsed"]["gpu_count"] == count
    assert many["current"]["gpu_count"] == count
    assert not any(f["rule"] == "vram-overflow" for f in many["findings"])
    one = _text(question.replace(f"{count}x ", "").replace(f"{count} x ", ""))
    assert "gpu_count" not in one["parsed"]
    assert any(f["rule"] == "vram-overflow" for f in one["findings"]) == (count == 2)
