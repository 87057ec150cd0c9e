"""The free-text parser: a table of questions (half Chinese) with the expected protocol and
parameters, plus bounds (size, binary, regex time) and contradictions."""

from __future__ import annotations

import time

import pytest

from ecoguard.advisor.parse import MAX_QUESTION_BYTES, parse_question
from ecoguard.errors import UsageError

# (question, protocol, expected parsed fields)
QUESTIONS: list[tuple[str, str, dict[str, object]]] = [
    # The seven seed questions.
    (
        "What is the greenest config for Qwen2.5-3B on an RTX 5090?",
        "optimize",
        {"model": "Qwen2.5-3B", "gpu": "rtx5090", "language": "en"},
    ),
    (
        "What will Mistral-7B on an A800 cost for a million requests a month?",
        "estimate",
        {"model": "Mistral-7B", "gpu": "a800", "requests_per_month": 1_000_000},
    ),
    (
        "Compare all precisions for Qwen2.5-7B on a 5090",
        "compare",
        {"model": "Qwen2.5-7B", "gpu": "rtx5090"},
    ),
    ("My load_in_8bit bill is crazy, help", "diagnose", {"precision": "int8_mixed"}),
    (
        "Should I use FP8 on Blackwell?",
        "optimize",
        {"precision": "fp8_weight_only", "gpu": "rtx5090"},
    ),
    ("Why is 4-bit sometimes worse?", "diagnose", {"precision": "nf4"}),
    (
        "我想用 Yi-6B 跑 100 万字, 要花多少钱?",
        "estimate",
        {"model": "Yi-6B", "total_tokens": 500_000, "language": "zh", "currency": "CNY"},
    ),
    # English.
    (
        "Llama-3-8B chatbot for 10,000 users/day on H100, batch size 8",
        "estimate",
        {
            "model": "Llama-3-8B",
            "gpu": "h100",
            "batch_size": 8,
            "use": "chat",
            "requests_per_month": 1_500_000,
        },
    ),
    (
        "Cost of 1 GB of text through Qwen2-7B on a T4?",
        "estimate",
        {"total_tokens": 250_000_000, "gpu": "t4", "model": "Qwen2-7B"},
    ),
    (
        "Mistral-7B on A800 with load_in_8bit=True, I only get 10 tok/s",
        "diagnose",
        {"observed_throughput_tok_s": 10.0, "precision": "int8_mixed", "gpu": "a800"},
    ),
    (
        "Qwen2.5-14B on A800, BnbConfig(load_in_8bit=True, llm_int8_threshold=0.0): cost per month?",
        "estimate",
        {"precision": "int8_pure", "int8_threshold": 0.0},
    ),
    (
        "best precision for a 7B model on 4090D for an API",
        "optimize",
        {"model_size_b": 7.0, "gpu": "rtx4090d", "use": "api"},
    ),
    (
        "Compare NF4 vs FP16 for TinyLlama-1.1B on T4",
        "compare",
        {"model": "TinyLlama-1.1B", "gpu": "t4", "precisions": ("nf4", "fp16")},
    ),
    (
        "Qwen2-1.5B on an RTX 4090 draws 300 W, is that normal?",
        "diagnose",
        {"observed_power_w": 300.0, "gpu": "rtx4090"},
    ),
    (
        "I measure 12000 J/1k tokens with Qwen2.5-3B NF4 on RTX 5090",
        "diagnose",
        {"observed_energy_j_per_1k": 12000.0, "precision": "nf4"},
    ),
    (
        "Yi-1.5-9B on A800 running 8 hours a day, what is the bill in the EU?",
        "estimate",
        {"hours_per_day": 8.0, "region": "eu"},
    ),
    (
        "How much for 2 million requests per month on Qwen2.5-7B with bf16 on L4?",
        "estimate",
        {"requests_per_month": 2_000_000, "precision": "bf16", "gpu": "l4"},
    ),
    (
        "Recommend a config for Mistral-7B offline batch processing on A800",
        "optimize",
        {"use": "batch"},
    ),
    ("audit my code in serve.py", "audit", {"paths": ("serve.py",)}),
    (
        "Qwen2.5-7B on A800 at $0.15/kWh, 500k requests a month",
        "estimate",
        {"price_per_kwh": 0.15, "price_currency": "USD", "requests_per_month": 500_000},
    ),
    (
        "Mistral-7B on A800, 100 requests per day, how much?",
        "estimate",
        {"requests_per_month": 3_000},
    ),
    # Chinese.
    (
        "Qwen2.5-3B 在 RTX 5090 上最省电的配置是什么？",
        "optimize",
        {"model": "Qwen2.5-3B", "gpu": "rtx5090", "language": "zh"},
    ),
    ("对比 Qwen2.5-7B 在 5090 上所有精度", "compare", {"model": "Qwen2.5-7B", "gpu": "rtx5090"}),
    (
        "Mistral-7B 在 A800 上每月 100 万次请求要多少钱？",
        "estimate",
        {"requests_per_month": 1_000_000, "gpu": "a800"},
    ),
    ("为什么我的 load_in_8bit 电费这么离谱？", "diagnose", {"precision": "int8_mixed"}),
    ("Blackwell 上应该用 FP8 吗？", "optimize", {"precision": "fp8_weight_only", "gpu": "rtx5090"}),
    ("为什么 4 位量化有时更耗电？", "diagnose", {"precision": "nf4"}),
    (
        "每天 1 万用户，用 Qwen2-7B 在 4090D 上做聊天客服，成本多少？",
        "estimate",
        {"requests_per_month": 1_500_000, "use": "chat", "gpu": "rtx4090d"},
    ),
    (
        "用 Yi-6B 在 A800 上处理 十万字 需要多少电费？",
        "estimate",
        {"total_tokens": 50_000, "gpu": "a800"},
    ),
    (
        "Mistral 7B 在 A800 上用 8 位量化，每秒只有 10 个 token",
        "diagnose",
        {"observed_throughput_tok_s": 10.0, "precision": "int8_mixed", "model": "Mistral-7B"},
    ),
    (
        "Qwen2.5-14B 在 A800 上，批大小 16，离线批处理，推荐什么精度？",
        "optimize",
        {"batch_size": 16, "use": "batch"},
    ),
    (
        "Qwen2-1.5B 在 T4 上 NF4 和 FP16 哪个更省电？比较一下",
        "compare",
        {"precisions": ("nf4", "fp16"), "gpu": "t4"},
    ),
    (
        "我的 Qwen2.5-3B 在 5090 上功耗 400 瓦，正常吗？为什么这么高",
        "diagnose",
        {"observed_power_w": 400.0},
    ),
    (
        "电价 0.6 元/度，汇率 7.2，Mistral-7B 在 A800 上每月 50 万次请求要花多少钱",
        "estimate",
        {
            "price_per_kwh": 0.6,
            "price_currency": "CNY",
            "cny_per_usd": 7.2,
            "requests_per_month": 500_000,
        },
    ),
    (
        "在中国用 Qwen2.5-7B 跑 1 亿字要多少钱",
        "estimate",
        {"region": "china", "total_tokens": 50_000_000},
    ),
    ("Yi-1.5-9B 在 A800 上每天运行 8 小时，每月电费多少？", "estimate", {"hours_per_day": 8.0}),
    ("帮我审计 app.py 里的推理代码", "audit", {"paths": ("app.py",)}),
    (
        "在 H100 上部署 Llama-3-8B 做对话机器人，应该用什么精度最省电？",
        "optimize",
        {"gpu": "h100", "use": "chat"},
    ),
    (
        "Qwen2.5-7B 纯 INT8 在 A800 上每月 100 万次请求的电费",
        "estimate",
        {"precision": "int8_pure"},
    ),
    (
        "我用 bnb_4bit_use_double_quant=True 和 load_in_4bit=True 跑 Qwen2-7B，耗电太高了",
        "diagnose",
        {"precision": "nf4_dq", "double_quant": True},
    ),
    (
        "TinyLlama-1.1B 在 T4 上每 token 4 焦 是不是太高？",
        "diagnose",
        {"observed_energy_j_per_1k": 4000.0},
    ),
    (
        "每小时 1000 次请求，Qwen2-7B 在 5090 上，成本多少",
        "estimate",
        {"requests_per_month": 720_000},
    ),
]


def test_table_is_large_and_half_chinese():
    assert len(QUESTIONS) >= 40
    chinese = [q for q, _, _ in QUESTIONS if parse_question(q).language == "zh"]
    assert len(chinese) * 2 >= len(QUESTIONS) - 2


@pytest.mark.parametrize(("question", "protocol", "expected"), QUESTIONS, ids=range(len(QUESTIONS)))
def test_question_table(question, protocol, expected):
    parsed = parse_question(question)
    assert parsed.protocol == protocol, parsed.protocol_reason
    for key, value in expected.items():
        actual = getattr(parsed, key)
        if key == "precisions":
            assert set(value) <= set(actual)  # type: ignore[arg-type]
        elif isinstance(value, float):
            assert actual == pytest.approx(value)
        else:
            assert actual == value, f"{key}: {actual!r} != {value!r}"


def test_conversions_are_listed():
    parsed = parse_question("我想用 Yi-6B 跑 100 万字, 要花多少钱?")
    (conv,) = [c for c in parsed.conversions if c.field == "total_tokens"]
    assert conv.value == 500_000 and "2" in conv.rule.en
    users = parse_question("Qwen2-7B for 10,000 users/day on A800")
    assert any("5 requests per user" in c.rule.en for c in users.conversions)


@pytest.mark.parametrize(
    ("question", "topic"),
    [
        ("Qwen2-1.5B on an AMD MI300X, cost?", "amd-gpu"),
        ("Mistral-7B with GPTQ on A800 cost", "quant-method"),
        ("Mistral-7B AWQ 在 A800 上的成本", "quant-method"),
        ("Mistral-7B on A800 with batch size 128", "batch-size"),
        ("Qwen2.5-7B on A800 with 8k context cost", "sequence-length"),
        ("Qwen2.5-7B 在 A800 上 上下文 16000 的成本", "sequence-length"),
    ],
)
def test_out_of_data(question, topic):
    assert topic in {o.topic for o in parse_question(question).out_of_data}


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   \n ",
        "x" * (MAX_QUESTION_BYTES + 1),
        "abc\x00def",
        "bad \udc80 bytes",
        b"\xff\xfe\x00binary",
        "\x01\x02\x03\x04\x05\x06\x07\x08 ok",
        "hello there",  # nothing recognisable to answer
        "load_in_8bit=True load_in_4bit=True Qwen2-7B on A800",
        "Qwen2-7B on A800 batch size 4 and batch size 8 cost",
        "Mistral-7B on A800 for 1 million requests a month and 2 million requests a month",
        "cost of Qwen2-7B on A800 and on H100",
        "Qwen2-7B and Llama-3-70B on A800 cost",
        None,
    ],
)
def test_bad_input_is_usage_error(bad):
    with pytest.raises(UsageError):
        parse_question(bad)


@pytest.mark.parametrize(
    "evil",
    [
        "1," * 5000,
        "9" * 10_000,
        "batch " * 1700,
        "Qwen-" * 2000,
        "1.1.1.1" * 1400,
        "万" * 3000,
        "a-" * 5000 + "7B",
        # the volume extractor's forms, repeated
        "1 wan " * 1700,
        "1 requests per " * 680,
        "one hundred " * 850,
        "half a " * 1400,
        "QPS 1 " * 1700,
        "1 concurrent " * 780,
        "日活" * 1700,
        "1 " * 5000,
        "€1/kWh " * 1200,
        "from_pretrained(" * 600,
        "```" * 3000,
    ],
)
def test_parser_is_linear_on_hostile_input(evil):
    start = time.perf_counter()
    try:
        parse_question(evil[:MAX_QUESTION_BYTES])
    except UsageError:
        pass
    # A quadratic pattern on 10 kB takes many seconds; a linear parse takes well under 0.5 s on
    # an idle machine. The bound leaves room for a loaded CI machine without missing a blow-up.
    assert time.perf_counter() - start < 2.0


def test_precision_on_a_gpu_without_a_model_is_a_comparison() -> None:
    # docs/advisor.md: "FP8 on Blackwell?" is answered across the measured models.
    parsed = parse_question("FP8 on Blackwell?")
    assert parsed.protocol == "compare"
    assert parsed.precisions and parsed.gpu == "rtx5090"
