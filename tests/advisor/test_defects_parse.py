"""Wrong answers from issue 28, each read right now: stated lengths are lengths, multi-GPU is a
fact of the question and of the Deployment, a compute dtype beside ``load_in_4bit=True`` keeps
the 4-bit setting, and a serving engine's FP8 is its fused kernels (not torchao's eager path)."""

from __future__ import annotations

import pytest

from ecoguard.advisor.answers import advise
from ecoguard.advisor.deployments import build_deployment
from ecoguard.advisor.parse import parse_question
from ecoguard.advisor.question import Question
from ecoguard.deployment import Deployment, GpuSpec, ModelSpec, QuantSpec
from ecoguard.engines.engine_args import served_by
from ecoguard.errors import UsageError
from ecoguard.rules import evaluate


def _rules(answer) -> set[str]:
    return {f["rule"] for f in answer.to_dict()["findings"]}


# -- 1. a stated prompt or output length is a length, not the workload's volume ----------------


@pytest.mark.parametrize(
    ("question", "prompt", "generated"),
    [
        ("Mistral-7B on A800 with 1024 tokens in, cost?", 1024, None),
        ("Mistral-7B on A800, 512 tokens out, cost?", None, 512),
        ("Mistral-7B 在 A800 上，输入1024个token，多少钱？", 1024, None),
        ("Mistral-7B on A800, 1024 tokens input and 128 tokens output", 1024, 128),
    ],
)
def test_a_stated_length_is_not_a_volume(question, prompt, generated):
    parsed = parse_question(question)
    assert (parsed.prompt_tokens, parsed.generation_tokens) == (prompt, generated)
    assert parsed.total_tokens is None and parsed.requests_per_month is None


def test_a_length_question_is_priced_at_the_default_volume():
    out = advise("Mistral-7B on A800 with 1024 tokens in, cost?").to_dict()
    assert out["money"]["current"]["requests"] == 1_000_000
    assert "requests_per_month" in {d["field"] for d in out["defaults"]}
    assert out["money"]["current"]["cost_usd"] > 1.0


def test_a_token_volume_in_a_month_stays_a_volume():
    parsed = parse_question("Mistral-7B on A800, 1,000,000 tokens in a month, cost?")
    assert parsed.prompt_tokens is None and parsed.total_tokens == 1_000_000
    scaled = parse_question("Yi-6B 生成100万字 多少钱")
    assert scaled.generation_tokens is None and scaled.total_tokens == 500_000


# -- 2. multi-GPU --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "gpu", "count", "parallel"),
    [
        ("Llama-3-70B on 4x A100 80GB with tensor parallel, cost?", "a100", 4, True),
        ("Mistral-7B on two A800s, cost?", "a800", 2, False),
        ("Mistral-7B on A800 x4", "a800", 4, False),
        ("Mistral-7B on 2 GPUs (A800), tp=2", "a800", 2, True),
        ("Llama-3-70B on H100 with tensor_parallel_size=8", "h100", 8, True),
        ("Mistral-7B 两张A800 多少钱", "a800", 2, False),
        ("Mistral-7B 4卡 H100", "h100", 4, False),
        ("Mistral-7B on an A800", "a800", None, False),
        ("Qwen2.5-7B on a 5090, 电价 5块钱/度", "rtx5090", None, False),
    ],
)
def test_gpu_count_is_read(question, gpu, count, parallel):
    parsed = parse_question(question)
    assert (parsed.gpu, parsed.gpu_count, parsed.tensor_parallel) == (gpu, count, parallel)


def test_a_gpus_memory_size_is_not_a_text_volume():
    parsed = parse_question("Llama-3-70B on 4x A100 80GB, cost for 1M requests a month?")
    assert parsed.total_tokens is None and parsed.requests_per_month == 1_000_000


def test_the_deployment_carries_the_count_and_vram_is_checked_per_card():
    dep, _ = build_deployment(
        Question(
            "estimate",
            model="Llama-3-70B",
            gpu="a100",
            precision="fp16",
            batch_size=1,
            prompt_tokens=512,
            generation_tokens=256,
            use="api",
            gpu_count=4,
        )
    )
    assert dep.gpu.count == dep.gpu_count == 4
    assert "vram-overflow" not in {f.rule for f in evaluate(dep)}
    one = dep.with_(gpu=dep.gpu.__class__(**{**_gpu_fields(dep.gpu), "count": 1}))
    assert "vram-overflow" in {f.rule for f in evaluate(one)}


def _gpu_fields(gpu: GpuSpec) -> dict[str, object]:
    return {name: getattr(gpu, name) for name in GpuSpec.__slots__}


def test_four_a100s_are_no_vram_overflow_and_two_a800s_are_a800s():
    assert "vram-overflow" not in _rules(
        advise("Llama-3-70B on 4x A100 80GB with tensor parallel, cost for 1M requests a month?")
    )
    out = advise("Mistral-7B on two A800s, cost for 1M requests a month?").to_dict()
    assert "A800" in out["deployment"]["gpu_name"]
    assert out["parsed"]["gpu_count"] == 2
    assert "gpu" not in {d["field"] for d in out["defaults"]}


def test_a_gpu_count_out_of_range_is_refused():
    from ecoguard.errors import UsageError

    with pytest.raises(UsageError, match="GPU count"):
        Deployment(gpu=GpuSpec(count=0)).validate()


# -- 3. a compute dtype beside load_in_4bit=True ------------------------------------------------


def test_a_compute_dtype_keeps_the_4bit_setting():
    parsed = parse_question("Qwen2.5-7B on T4 with bf16 and load_in_4bit=True for chat")
    assert parsed.precision == "nf4" and parsed.precisions == ("nf4",)
    assert parsed.compute_dtype == "bf16"
    rules = _rules(advise("Qwen2.5-7B on T4 with bf16 and load_in_4bit=True for chat"))
    assert "vram-overflow" not in rules
    assert "bf16-unsupported" in rules  # bf16 compute on Turing is a trap of its own


def test_bnb_compute_dtype_flag_is_read():
    parsed = parse_question(
        "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float16) "
        "for Qwen2.5-7B on an A800"
    )
    assert parsed.precision == "nf4" and parsed.compute_dtype == "fp16"


def test_two_precisions_without_a_load_flag_stay_two():
    parsed = parse_question("compare bf16 and nf4 for Qwen2.5-7B on an A800")
    assert parsed.precisions == ("bf16", "nf4") and parsed.compute_dtype is None


# -- 4. a serving engine's own FP8 --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "engine"),
    [
        ("served by vLLM", "vllm"),
        ("on SGLang", "sglang"),
        ("behind TGI", "tgi"),
        ("with text-generation-inference", "tgi"),
        ("with TensorRT-LLM", "tensorrt_llm"),
        ("in llama.cpp", "llamacpp"),
        ("with transformers", None),
    ],
)
def test_the_engine_is_read(text, engine):
    assert parse_question(f"Qwen2.5-7B with FP8 on H100 {text}").engine == engine


def test_vllm_fp8_is_not_torchaos_eager_path():
    question = "Qwen2.5-7B with FP8 on H100 served by vLLM, cost for 1M requests a month?"
    answer = advise(question)
    assert "fp8-eager" not in _rules(answer)
    assert answer.to_dict()["mood"] != "red"
    # Without an engine, FP8 through transformers is torchao's eager path: still flagged.
    assert "fp8-eager" in _rules(advise("Qwen2.5-7B with FP8 on H100, cost?"))


def test_the_engine_decision_is_the_engine_mappings():
    base = Deployment(
        model=ModelSpec(id="qwen2.5-7b", params_b=7.6),
        gpu=GpuSpec(profile="h100", architecture="hopper", vram_gb=80.0),
        precision="fp8_weight_only",
        quant=QuantSpec(method="torchao", bits=8, quant_type="float8_weight_only"),
        dtype="bf16",
    )
    served, unknown = served_by(base, "vllm")
    assert served.engine == "vllm" and served.quant.method == "other"
    assert "fp8-eager" in unknown
    assert "fp8-eager" not in {f.rule for f in evaluate(served)}
    assert "fp8-eager" in {f.rule for f in evaluate(base)}
    # bitsandbytes through an engine stays bitsandbytes (its traps apply there too).
    nf4, _ = served_by(base.with_(precision="nf4", quant=QuantSpec()), "vllm")
    assert nf4.precision == "nf4" and nf4.quant.method == "bitsandbytes"
    int8, _ = served_by(base.with_(precision="int8_mixed", quant=QuantSpec()), "sglang")
    assert int8.precision == "int8_mixed" and int8.quant.int8_threshold == 6.0


# -- 5. a setup told in prose -------------------------------------------------------------------


PROSE = (
    "BitsAndBytesConfig(load_in_4bit=True) for Qwen/Qwen2.5-0.5B, one prompt at a time in a "
    "for loop"
)


def test_a_setup_in_prose_is_read_as_facts_not_audited_as_code():
    parsed = parse_question(PROSE)
    assert parsed.code is None and parsed.protocol != "audit"
    assert (parsed.model, parsed.precision, parsed.batch_size) == ("Qwen/Qwen2.5-0.5B", "nf4", 1)
    assert parsed.prompt_tokens is None  # "one prompt at a time" is not a 1-token prompt
    assert parsed.use == "batch"


def test_a_setup_in_prose_finds_its_traps():
    answer = advise(PROSE)
    assert {"small-model-quant", "batch-size-one"} <= _rules(answer)
    assert answer.to_dict()["mood"] != "green"


@pytest.mark.parametrize(
    "question",
    ["BitsAndBytesConfig(load_in_8bit=True)", "my code: BitsAndBytesConfig(load_in_8bit=True)"],
)
def test_a_lone_config_without_a_model_is_still_audited(question):
    parsed = parse_question(question)
    assert parsed.protocol == "audit" and parsed.code
    assert "int8-mixed" in _rules(advise(question))  # the flag's trap, from its evidence


def test_real_code_is_still_audited():
    parsed = parse_question(
        "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B', "
        "quantization_config=BitsAndBytesConfig(load_in_4bit=True))"
    )
    assert parsed.protocol == "audit" and parsed.code


@pytest.mark.parametrize(
    "question",
    ["Qwen2.5-7B on A800, prompts sent one by one", "Qwen2.5-7B 在 A800 上逐条推理"],
)
def test_one_at_a_time_is_batch_size_one(question):
    assert parse_question(question).batch_size == 1


@pytest.mark.parametrize(
    ("question", "model", "resolved"),
    [
        ("Llama 3 8B on A800, cost for 1M requests a month?", "Llama3-8B", "llama-3-8b"),
        ("Llama 3.1 8B on H100", "Llama-3.1-8B", "llama-3.1-8b"),
        ("Qwen 2.5 7B on A800", "Qwen2.5-7B", "qwen2.5-7b"),
        ("Yi 1.5 6B on A800", "Yi-1.5-6B", "yi-1.5-6b"),
        ("Mistral 7B on A800", "Mistral-7B", "mistral-7b"),
        ("two 7B models on A800", "7B", "7B"),
    ],
)
def test_a_family_version_and_size_written_apart_are_one_model(question, model, resolved):
    """The words "Llama 3 8B" were read as a bare 8B (no architecture, no measured rows)."""
    assert parse_question(question).model == model
    assert advise(question).to_dict()["deployment"]["model"] == resolved


def test_prompts_at_a_time_are_a_batch_size_not_a_volume():
    """The words "one prompt at a time" were read as a volume of 1 request a month (served, "a request
    volume from many users"), and beside a real volume as a contradiction of two volumes."""
    alone = parse_question("Qwen2.5-7B on A800, one prompt at a time")
    assert (alone.batch_size, alone.requests_per_month, alone.serving) == (1, None, False)
    both = parse_question("Qwen2.5-7B on A800, one prompt at a time, 1M requests a month")
    assert (both.batch_size, both.requests_per_month) == (1, 1_000_000)
    eight = parse_question("Mistral-7B on A800, 8 requests per call, 2M requests a month")
    assert (eight.batch_size, eight.requests_per_month) == (8, 2_000_000)
    answer = advise("Qwen2.5-7B on A800, one prompt at a time, 1M requests a month").to_dict()
    assert "batch-size-one" in [f["rule"] for f in answer["findings"]]
    with pytest.raises(UsageError, match="more than one batch size"):
        parse_question("Mistral-7B on A800, 8 prompts at a time with batch size 16")


# -- 5. accuracy first ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        "Mistral-7B on RTX 4090D, accuracy-critical, greenest config?",
        "Mistral-7B on RTX 4090D, medical QA where accuracy matters, cost for 1M requests a month?",
        "Mistral-7B 在 RTX 4090D 上，精度要求高，最省电的配置？",
    ],
)
def test_accuracy_critical_users_get_no_lossy_pick_and_the_caveat(question):
    answer = advise(question)
    out = answer.to_dict()
    assert out["parsed"]["accuracy_critical"] is True
    rec = out.get("recommendation") or {}
    assert rec.get("precision") in ("fp16", "bf16", "fp32")
    assert (out.get("optimized") or {}).get("deployment", {}).get("precision", "fp16") in (
        "fp16",
        "bf16",
        "fp32",
    )
    if out["protocol"] == "optimize":  # no quantized candidate is even ranked
        assert {r["precision"] for r in out["rows"]} <= {"fp16", "bf16", "fp32"}
    caveat = "Accuracy-critical" if answer.language == "en" else "精度优先"
    assert any(caveat in note for note in out["notes"])


def test_without_the_words_quantization_may_still_win():
    out = advise("Mistral-7B on RTX 4090D, greenest config?").to_dict()
    assert "accuracy_critical" not in out["parsed"]
    assert not any("Accuracy-critical" in note for note in out["notes"])
    assert "nf4" in {r["precision"] for r in out["rows"]}


# -- 5. a problem with nothing to judge yet ------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "said"),
    [
        ("My GPU bill is crazy high. Help!", "the model"),
        ("我的GPU电费太高了，怎么办？", "模型"),
    ],
)
def test_a_bare_problem_is_answered_with_the_questions_and_the_traps(question, said):
    answer = advise(question)
    out = answer.to_dict()
    assert out["mood"] == "gray" and out["protocol"] == "diagnose"
    assert "asks" in out and "batch size" in out["asks"] and "GPU" in out["asks"]
    assert said in answer.asks.get(answer.language)
    notes = " ".join(out["notes"])
    for rule in ("int8-mixed", "small-model-quant", "batch-size-one", "fp8-eager"):
        assert rule in notes
    assert "deployment" not in out or not out["deployment"]  # no default setup was judged


# -- 5. questions about the data itself ----------------------------------------------------------


def test_is_it_really_360_configurations_is_answered_from_the_counts():
    from ecoguard.knowledge import data_counts

    counts = data_counts()
    answer = advise("Is it really 360+ configurations?")
    out = answer.to_dict()
    assert out["protocol"] == "data"
    notes = " ".join(out["notes"])
    assert f"{counts.rows} rows" in notes and f"{counts.configurations} configurations" in notes
    assert "360+" in notes and "cannot be checked" in notes
    assert out["data_counts"]["configurations"] == counts.configurations


@pytest.mark.parametrize(
    "question", ["how many T4 configurations were measured?", "T4 上到底测了多少个配置？"]
)
def test_how_many_t4_configurations_names_the_t4_counts(question):
    from ecoguard.knowledge import data_counts, reference_rows

    t4 = data_counts(tuple(r for r in reference_rows() if r.gpu == "tesla_t4"))
    out = advise(question).to_dict()
    assert out["protocol"] == "data"
    assert out["gpu_counts"]["configurations"] == t4.configurations
    assert out["gpu_counts"]["measured_configurations"] == t4.measured_configurations
    assert f"{t4.configurations}" in out["notes"][0]


def test_a_cost_question_is_not_a_data_question():
    assert parse_question("how many requests can Qwen2.5-7B on A800 serve?").protocol != "data"


def test_the_answer_says_how_many_gpus_and_which_engine():
    from ecoguard.advisor.rendering import render

    answer = advise(
        "Mistral-7B with FP8 on two H100s served by vLLM, cost for 1M requests a month?"
    )
    text = render(answer, fmt="text")
    assert "2 x NVIDIA H100" in text and "served by: vllm" in text
    dep = answer.to_dict()["deployment"]
    assert dep["gpu_count"] == 2 and dep["engine"] == "vllm"
    single = advise("Mistral-7B on an A800, cost?").to_dict()["deployment"]
    assert "gpu_count" not in single and "engine" not in single


def test_how_it_is_served_is_in_the_figure_not_a_note():
    # An engine's fused FP8 and several cards are priced by the estimator (its method says
    # how, ecoguard.knowledge.served); no note apologises for figures that leave them out.
    fp8 = advise("Qwen2.5-7B with FP8 on H100 served by vLLM, cost for 1M requests a month?")
    assert "fused FP8 kernels" in fp8.to_dict()["current"]["method"]
    four = advise("Mistral-7B on 4x A800 with tensor parallel, cost for 1M requests a month?")
    assert four.to_dict()["current"]["method"].startswith("4 cards (tensor parallel)")
    for answer in (fp8, four):
        assert not any("GPUs" in n or "fused" in n for n in answer.to_dict()["notes"])


@pytest.mark.parametrize("protocol", ["optimize", "compare", "estimate"])
def test_a_price_in_another_currency_puts_no_usd_on_the_batching_finding(protocol):
    """Electricity priced in EUR (no exchange rate): no answer states the batching finding's
    cost in USD; optimize did (extra_usd_per_month 105.32) while compare and estimate did not."""
    words = {
        "optimize": "Greenest config for",
        "compare": "Compare all precisions for",
        "estimate": "Cost of",
    }
    question = f"{words[protocol]} Mistral-7B on A800 at €0.25/kWh, 3M requests a month"
    answer = advise(question).to_dict()
    assert answer["protocol"] == protocol
    (finding,) = [f for f in answer["findings"] if f["rule"] == "batch-size-one"]
    assert finding["impact"]["extra_usd_per_month"] is None
    assert finding["impact"]["extra_kwh_per_month"] > 0
    in_usd = advise(question.replace(" at €0.25/kWh", "")).to_dict()
    (usd_finding,) = [f for f in in_usd["findings"] if f["rule"] == "batch-size-one"]
    assert usd_finding["impact"]["extra_usd_per_month"] > 0
