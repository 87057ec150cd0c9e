"""The advisor against a table of questions people ask (English and Chinese, the EcoCompute
study's own examples among them): the protocol chosen, the facts parsed, the rules that fire and
the mood. Facts not listed are not checked; ``rules`` lists rules that must fire (``None``: not
checked) and ``absent`` rules that must not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from ecoguard.advisor.answers import advise
from ecoguard.advisor.rendering import render

M = 1_000_000
DAY, HOUR, SECOND = 30, 24 * 30, 86_400 * 30


@dataclass(frozen=True)
class Q:
    text: str
    protocol: str
    facts: dict[str, Any] = field(default_factory=dict)
    rules: frozenset[str] | None = None
    mood: str | None = None
    absent: frozenset[str] = frozenset()


def q(text, protocol, mood=None, rules=None, absent=(), **facts) -> Q:
    return Q(
        text,
        protocol,
        facts,
        None if rules is None else frozenset(rules),
        mood,
        frozenset(absent),
    )


BS1 = "batch-size-one"
INT8 = "int8-mixed"
SMALL = "small-model-quant"
FP8 = "fp8-eager"
VRAM = "vram-overflow"

SUITE: list[Q] = [
    # --- The study's own example questions -------------------------------------------------
    q(
        "What is the greenest config for Qwen2.5-3B on an RTX 5090?",
        "optimize",
        model="qwen2.5-3b",
        gpu="rtx5090",
        use="api",
        rec_precision="fp16",
    ),
    q(
        "What will Mistral-7B on an A800 cost for a million requests a month?",
        "estimate",
        "yellow",
        [BS1],
        model="mistral-7b",
        gpu="a800",
        requests_per_month=M,
        serving=True,
    ),
    q(
        "Compare all precisions for Qwen2.5-7B on a 5090",
        "compare",
        model="qwen2.5-7b",
        gpu="rtx5090",
    ),
    q(
        "My load_in_8bit bill is crazy, help",
        "diagnose",
        "orange",
        [INT8],
        precision="int8_mixed",
        asks=True,
    ),
    q("Should I use FP8 on Blackwell?", "compare", gpu="rtx5090"),
    q("Why is 4-bit sometimes worse?", "diagnose", "orange", [SMALL], precision="nf4"),
    q(
        "我想用 Yi-6B 跑 100 万字, 要花多少钱?",
        "estimate",
        total_tokens=500_000,
        use="batch",
        language="zh",
        region="china",
    ),
    q(
        "I want to run 100 wan zi through Yi-6B",
        "estimate",
        total_tokens=500_000,
        use="batch",
        region="us",
    ),
    q(
        "How much to process 1 million Chinese characters with Qwen2.5-7B on an A800?",
        "estimate",
        total_tokens=500_000,
        region="us",
        use="batch",
    ),
    q(
        "我的服务用了load_in_8bit=True，电费很高，怎么办？",
        "diagnose",
        "orange",
        [INT8],
        precision="int8_mixed",
        asks=True,
        language="zh",
    ),
    q(
        "My service uses load_in_8bit=True and the power bill is high, what do I do?",
        "diagnose",
        "orange",
        [INT8],
        asks=True,
    ),
    q(
        "audit my code: model = AutoModelForCausalLM.from_pretrained('mistralai/Mistral-7B-v0.1',"
        " load_in_8bit=True)",
        "audit",
        "orange",
        [INT8],
    ),
    # --- Batch-size advice: the use from the whole question --------------------------------
    q(
        "Chatbot with 500 concurrent users, Mistral-7B on A800",
        "estimate",
        "yellow",
        [BS1],
        use="chat",
        concurrency=500,
        serving=True,
        batching_target=16,
    ),
    q(
        "We run Qwen2.5-7B with BS=1 in production on an A100, is that ok?",
        "estimate",
        "yellow",
        [BS1],
        use="api",
        batch_size=1,
        serving=True,
        prompt_tokens=512,
    ),
    q(
        "Mistral-7B on A800 serving 1M requests/month at batch size 1",
        "estimate",
        "yellow",
        [BS1],
        requests_per_month=M,
        use="api",
        batching_target=3,
    ),
    q(
        "Mistral-7B chatbot on A800 for a single user",
        "estimate",
        "green",
        use="chat",
        serving=False,
        absent=[BS1],
    ),
    q(
        "Greenest config for Mistral-7B on A800 for a batch job",
        "optimize",
        use="batch",
        rec_batch=64,
    ),
    q(
        "Mistral-7B offline batch processing on A800, 10 million tokens, cost?",
        "estimate",
        "yellow",
        [BS1],
        use="batch",
        total_tokens=10 * M,
    ),
    q(
        "Qwen2.5-7B API on A800 with batch size 16, best config?",
        "optimize",
        use="api",
        batch_size=16,
        rec_batch=16,
        absent=[BS1],
    ),
    q(
        "Llama-3-8B endpoint on H100 serving 200 QPS",
        "estimate",
        "yellow",
        [BS1],
        requests_per_month=200 * SECOND,
        use="api",
        batching_target=16,
    ),
    q("Best precision for a 7B model on 4090D for an API", "optimize", use="api", model_size_b=7.0),
    q(
        "Qwen2.5-7B in production on L4, 100 requests per second, cost?",
        "estimate",
        "yellow",
        [BS1],
        requests_per_month=100 * SECOND,
    ),
    q(
        "Our backend serves Mistral-7B on A800 to 10,000 users a day",
        "estimate",
        "yellow",
        [BS1],
        requests_per_month=10_000 * 5 * DAY,
        use="api",
    ),
    q(
        "Llama-3-8B chatbot for 10,000 users/day on H100, batch size 8",
        "estimate",
        use="chat",
        batch_size=8,
        requests_per_month=1_500_000,
        serving=True,
    ),
    q("Mistral-7B on A800 with batch size 32, cost?", "estimate", use="batch", batch_size=32),
    q(
        "Qwen2.5-7B 在 A800 上线上服务，批大小 1，合理吗？",
        "estimate",
        "yellow",
        [BS1],
        use="api",
        serving=True,
    ),
    q(
        "日活 10 万，Qwen2.5-7B 在 A800 上做客服，推荐什么配置？",
        "optimize",
        "yellow",
        [BS1],
        use="chat",
        requests_per_month=100_000 * 5 * DAY,
        serving=True,
    ),
    q(
        "每天一万用户，Qwen2.5-7B 在 A800 上要多少钱？",
        "estimate",
        "yellow",
        [BS1],
        requests_per_month=10_000 * 5 * DAY,
        region="china",
    ),
    q(
        "聊天机器人 500 人同时在线，Mistral-7B 在 A800 上",
        "estimate",
        "yellow",
        [BS1],
        use="chat",
        concurrency=500,
    ),
    q(
        "并发 200，Qwen2.5-7B 在 H100 上的 API 服务要多少钱",
        "estimate",
        "yellow",
        [BS1],
        concurrency=200,
        use="api",
    ),
    q(
        "离线批处理 Qwen2.5-14B 在 A800 上，批大小 16，推荐什么精度？",
        "optimize",
        use="batch",
        batch_size=16,
    ),
    q(
        "在 H100 上部署 Llama-3-8B 做对话机器人，应该用什么精度最省电？",
        "optimize",
        use="chat",
        gpu="h100_sxm",
    ),
    # --- optimize never shrinks the batch silently -----------------------------------------
    q(
        "Greenest config for Mistral-7B on A800 at batch size 16",
        "optimize",
        batch_size=16,
        rec_batch=16,
    ),
    q(
        "Greenest config for Qwen2.5-7B on A800, batch size 8",
        "optimize",
        batch_size=8,
        rec_batch_at_least=8,
    ),
    q(
        "Qwen2.5-3B chat on RTX 5090 with batch size 4: best setup?",
        "optimize",
        use="chat",
        batch_size=4,
        rec_batch_at_least=4,
    ),
    # --- Rates and volumes -----------------------------------------------------------------
    q(
        "100 requests per second with Qwen2.5-7B on H100",
        "estimate",
        requests_per_month=100 * SECOND,
    ),
    q("Qwen2.5-7B on A800, 200 QPS, cost?", "estimate", requests_per_month=200 * SECOND),
    q("Mistral-7B on A800 at 50 RPS, monthly bill?", "estimate", requests_per_month=50 * SECOND),
    q(
        "Mistral-7B on A800, 600 requests per minute, cost?",
        "estimate",
        requests_per_month=600 * 1440 * DAY,
    ),
    q(
        "Mistral-7B on A800, 1000 requests per hour, how much?",
        "estimate",
        requests_per_month=1000 * HOUR,
    ),
    q(
        "Mistral-7B on A800, 100 requests per day, how much?",
        "estimate",
        requests_per_month=100 * DAY,
    ),
    q("Mistral-7B on A800, 70,000 requests a week, cost?", "estimate", requests_per_month=300_000),
    q("Mistral-7B on A800, 12 million requests a year, cost?", "estimate", requests_per_month=M),
    q(
        "How much for 2 million requests per month on Qwen2.5-7B with bf16 on L4?",
        "estimate",
        requests_per_month=2 * M,
        precision="bf16",
    ),
    q(
        "Qwen2.5-7B on A800, half a million requests a month",
        "estimate",
        requests_per_month=500_000,
    ),
    q("Qwen2.5-7B on A800 for one million requests a month", "estimate", requests_per_month=M),
    q(
        "Qwen2.5-7B on A800, two hundred thousand calls a month",
        "estimate",
        requests_per_month=200_000,
    ),
    q(
        "1,000,000 tokens per day through Llama-3-8B on L4, cost?",
        "estimate",
        total_tokens=30 * M,
        tokens_period="month",
    ),
    q(
        "Llama-3-8B on L4, 5 million tokens a month, cost?",
        "estimate",
        total_tokens=5 * M,
        tokens_period="month",
    ),
    q("Cost of 1 GB of text through Qwen2-7B on a T4?", "estimate", total_tokens=250 * M),
    q(
        "Summarise 3 million English words with Qwen2.5-7B on A800, cost?",
        "estimate",
        total_tokens=4 * M,
    ),
    q(
        "Translate 2 million characters of English text with Qwen2.5-7B on A800",
        "estimate",
        total_tokens=500_000,
    ),
    q(
        "Qwen2.5-7B on A800 with 10k daily active users",
        "estimate",
        requests_per_month=10_000 * 5 * DAY,
    ),
    q(
        "Qwen2.5-7B on A800, DAU 50k, monthly cost?",
        "estimate",
        requests_per_month=50_000 * 5 * DAY,
    ),
    q("Mistral-7B 在 A800 上每月 100 万次请求要多少钱？", "estimate", requests_per_month=M),
    q(
        "每小时 1000 次请求，Qwen2-7B 在 5090 上，成本多少",
        "estimate",
        requests_per_month=1000 * HOUR,
    ),
    q(
        "每秒 30 次请求，Qwen2.5-7B 在 H100 上要多少电费",
        "estimate",
        requests_per_month=30 * SECOND,
    ),
    q("每分钟 600 次调用，Mistral-7B 在 A800 上", "estimate", requests_per_month=600 * 1440 * DAY),
    q(
        "我们每周大约 7 万次调用，Mistral-7B 在 A800 上每月电费多少",
        "estimate",
        requests_per_month=300_000,
    ),
    q(
        "每天 1 万用户，用 Qwen2-7B 在 4090D 上做聊天客服，成本多少？",
        "estimate",
        requests_per_month=1_500_000,
        use="chat",
    ),
    q("日活 5 万，Qwen2.5-7B 在 A800 上的电费", "estimate", requests_per_month=50_000 * 5 * DAY),
    q("用 Yi-6B 在 A800 上处理 十万字 需要多少电费？", "estimate", total_tokens=50_000),
    q("在中国用 Qwen2.5-7B 跑 1 亿字要多少钱", "estimate", total_tokens=50 * M, region="china"),
    q(
        "Qwen2.5-7B 在 A800 上每天 10 万 token，每月多少钱",
        "estimate",
        total_tokens=3 * M,
        tokens_period="month",
    ),
    q("Qwen2.5-7B 在 A800 上跑 100 wan zi 要多少钱", "estimate", total_tokens=500_000),
    q("Qwen2.5-7B on A800 with 2 yi tokens, cost?", "estimate", total_tokens=200 * M),
    q("QPS 100 的 Qwen2.5-7B 服务在 A800 上每月电费", "estimate", requests_per_month=100 * SECOND),
    q(
        "Yi-1.5-9B on A800 running 8 hours a day, what is the bill in the EU?",
        "estimate",
        hours_per_day=8.0,
        region="eu",
    ),
    q("Yi-1.5-9B 在 A800 上每天运行 8 小时，每月电费多少？", "estimate", hours_per_day=8.0),
    q(
        "Mistral-7B on A800, 10 requests per minute for 8 hours a day",
        "estimate",
        requests_per_month=10 * 60 * 8 * DAY,
        hours_per_day=8.0,
    ),
    q("Qwen2.5-7B on A800, what does it cost?", "estimate", requests_per_month_default=M),
    # --- No model named: model-independent trap answers ------------------------------------
    q("load_in_8bit=True is expensive, why?", "diagnose", "orange", [INT8], asks=True),
    q("为什么我的 load_in_8bit 电费这么离谱？", "diagnose", "orange", [INT8], language="zh"),
    q("Is FP8 with torchao slow?", "diagnose", "red", [FP8]),
    q("为什么 4 位量化有时更耗电？", "diagnose", "orange", [SMALL], precision="nf4"),
    q("Why does NF4 cost more energy?", "diagnose", "orange", [SMALL], precision="nf4"),
    q("我用了 8 位量化，电费很高怎么办", "diagnose", "orange", [INT8], asks=True),
    q(
        "Our API uses load_in_8bit=True, how much does it cost?",
        "diagnose",
        "orange",
        [INT8],
        asks=True,
    ),
    # --- Code pasted into the question -----------------------------------------------------
    q(
        "Check this: model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B', "
        "quantization_config=BitsAndBytesConfig(load_in_4bit=True))",
        "audit",
        "orange",
        [SMALL],
    ),
    q(
        "review my code:\n```python\nfrom transformers import AutoModelForCausalLM\n"
        "model = AutoModelForCausalLM.from_pretrained('mistralai/Mistral-7B-v0.1', "
        "load_in_8bit=True)\n```",
        "audit",
        "orange",
        [INT8],
    ),
    q(
        "帮我看看这段代码：model = AutoModelForCausalLM.from_pretrained('x', load_in_8bit=True)",
        "audit",
        "orange",
        [INT8],
    ),
    q(
        "audit my code: model = AutoModelForCausalLM.from_pretrained('x', "
        "torch_dtype=torch.float16)",
        "audit",
        "green",
        [],
        absent=[INT8],
    ),
    q(
        "audit my code: model = AutoModelForCausalLM.from_pretrained('x', load_in_8bit=True",
        "audit",
        "orange",
        [INT8],
    ),
    q("audit my code in serve.py", "audit", paths=["serve.py"]),
    q("帮我审计 app.py 里的推理代码", "audit", paths=["app.py"]),
    # --- Accelerators outside the data -----------------------------------------------------
    q("Qwen2.5-7B on Intel Gaudi 2, cost per month?", "estimate", "gray", vendor="intel-gaudi"),
    q("Llama-3-8B on an Apple M2 Max, energy?", "estimate", "gray", vendor="apple"),
    q("Run Mistral-7B on a TPU v5e, how much?", "estimate", "gray", vendor="google-tpu"),
    q("Qwen2-1.5B on an AMD MI300X, cost?", "estimate", "gray", vendor="amd"),
    q("Qwen2.5-7B 在昇腾 910B 上每月电费多少", "estimate", "gray", vendor="huawei-ascend"),
    q("Mistral-7B on Habana Gaudi, best precision?", "optimize", "gray", vendor="intel-gaudi"),
    q("Qwen2.5-7B on ROCm, cost?", "estimate", "gray", vendor="amd"),
    q("Qwen2.5-7B on an RTX 4080, greenest config?", "optimize", "red", [VRAM], gpu_match="l40s"),
    q(
        "Mistral-7B on an RTX 3060 cost for 100k requests a month",
        "estimate",
        "red",
        [VRAM],
        gpu_match="rtx3090",
        requests_per_month=100_000,
    ),
    q("Llama-3-8B on an A10G serving an API, cost?", "estimate", gpu_match="rtx3090"),
    q("Qwen2.5-3B on an RTX 2080 Ti, best precision?", "optimize", gpu_match="tesla_t4"),
    q("Qwen2.5-1.5B on a GTX 1080 Ti, cost?", "estimate", gpu_match="tesla_t4"),
    q("Qwen2.5-3B on an RTX 5080, best precision?", "optimize", gpu_match="rtx5090"),
    q("Qwen2.5-7B on an H800, cost?", "estimate", gpu_match="h100_sxm"),
    q("Qwen2.5-3B 在 RTX 4070 上最省电的配置", "optimize", gpu_match="l40s"),
    # --- Short model names -----------------------------------------------------------------
    q(
        "Phi-3-mini on a T4, cost of 1M requests a month?",
        "estimate",
        model="phi-3-mini",
        requests_per_month=M,
    ),
    q("TinyLlama on a T4, cost of 1M requests a month?", "estimate", model="tinyllama-1.1b"),
    q("Phi-3 mini on an RTX 4090, best precision?", "optimize", model="phi-3-mini"),
    q("Compare NF4 vs FP16 for TinyLlama-1.1B on T4", "compare", model="tinyllama-1.1b"),
    # --- Smaller gaps ----------------------------------------------------------------------
    q(
        "TinyLlama on a T4 with 3000 prompt tokens, cost?",
        "estimate",
        "yellow",
        prompt_tokens=3000,
        warning=True,
    ),
    q(
        "Qwen2.5-7B on A800 with 1024 tokens in / 128 out, cost?",
        "estimate",
        prompt_tokens=1024,
        generation_tokens=128,
        warning=False,
    ),
    q(
        "Qwen2.5-7B on A800 at €0.25/kWh, 1M requests a month",
        "estimate",
        price_currency="EUR",
        price_per_kwh=0.25,
        currency="EUR",
    ),
    q("Qwen2.5-7B on A800 at £0.30 per kWh, cost?", "estimate", price_currency="GBP"),
    q("Qwen2.5-7B on A800 at 0.25 EUR/kWh, cost?", "estimate", price_currency="EUR"),
    q(
        "Qwen2.5-7B on A800 at $0.15/kWh, 500k requests a month",
        "estimate",
        price_per_kwh=0.15,
        price_currency="USD",
        requests_per_month=500_000,
    ),
    q(
        "Qwen2.5-7B on A800 at 12 cents per kWh",
        "estimate",
        price_per_kwh=0.12,
        price_currency="USD",
    ),
    q(
        "电价 0.6 元/度，汇率 7.2，Mistral-7B 在 A800 上每月 50 万次请求要花多少钱",
        "estimate",
        price_per_kwh=0.6,
        price_currency="CNY",
        cny_per_usd=7.2,
        requests_per_month=500_000,
    ),
    q("Qwen2.5-3B on my local GPU at home, an RTX 4090, how much per month?", "estimate", pue=1.0),
    q("Qwen2.5-3B 在家里的 RTX 4090 上每月电费多少", "estimate", pue=1.0),
    q("Qwen2.5-3B on an RTX 4090 in a cloud data centre, cost?", "estimate", pue=None),
    q(
        "How much Chinese text can Qwen2.5-7B on A800 process: 1 million Chinese characters?",
        "estimate",
        region="us",
        total_tokens=500_000,
    ),
    q("Qwen2.5-7B for Chinese text on an A800 in the US, cost?", "estimate", region="us"),
    q("Mistral-7B on A800 in China, 1M requests a month", "estimate", region="china"),
    q("Qwen2.5-7B on A800 in Europe, cost for 1M requests a month?", "estimate", region="eu"),
    q("Qwen2.5-7B 在欧洲的 A800 上每月 100 万次请求多少钱", "estimate", region="eu"),
    # --- Quantization under uncertainty ----------------------------------------------------
    q("Compare NF4 and FP16 for Qwen2.5-3B on an RTX 5090", "compare", rec_precision="fp16"),
    q(
        "Qwen2.5-3B on RTX 5090 with NF4, is that the greenest?",
        "optimize",
        precision="nf4",
        rec_precision="fp16",
    ),
    q("Qwen2.5-3B 在 RTX 5090 上用 NF4 还是 FP16？比较一下", "compare", rec_precision="fp16"),
    # --- Diagnose --------------------------------------------------------------------------
    q(
        "Mistral-7B on A800 with load_in_8bit=True, I only get 10 tok/s",
        "diagnose",
        "orange",
        [INT8],
        observed_throughput_tok_s=10.0,
    ),
    q("Qwen2-1.5B on an RTX 4090 draws 300 W, is that normal?", "diagnose", observed_power_w=300.0),
    q(
        "I measure 12000 J/1k tokens with Qwen2.5-3B NF4 on RTX 5090",
        "diagnose",
        observed_energy_j_per_1k=12000.0,
    ),
    q(
        "Mistral 7B 在 A800 上用 8 位量化，每秒只有 10 个 token",
        "diagnose",
        "orange",
        [INT8],
        observed_throughput_tok_s=10.0,
    ),
    q(
        "我的 Qwen2.5-3B 在 5090 上功耗 400 瓦，正常吗？为什么这么高",
        "diagnose",
        observed_power_w=400.0,
    ),
    q(
        "TinyLlama-1.1B 在 T4 上每 token 4 焦 是不是太高？",
        "diagnose",
        observed_energy_j_per_1k=4000.0,
    ),
    q(
        "我用 bnb_4bit_use_double_quant=True 和 load_in_4bit=True 跑 Qwen2-7B，耗电太高了",
        "diagnose",
        precision="nf4_dq",
    ),
    # --- Compare and optimize, more phrasings ----------------------------------------------
    q("对比 Qwen2.5-7B 在 5090 上所有精度", "compare", model="qwen2.5-7b", language="zh"),
    q("Qwen2.5-3B 在 RTX 5090 上最省电的配置是什么？", "optimize", language="zh"),
    q("Blackwell 上应该用 FP8 吗？", "compare", gpu="rtx5090"),
    q("Qwen2-1.5B 在 T4 上 NF4 和 FP16 哪个更省电？比较一下", "compare", gpu="tesla_t4"),
    q("Which precision should I use for Qwen2.5-14B on an A800?", "optimize", model="qwen2.5-14b"),
    q(
        "Recommend a config for Mistral-7B offline batch processing on A800",
        "optimize",
        use="batch",
    ),
    q("Qwen2.5-7B 纯 INT8 在 A800 上每月 100 万次请求的电费", "estimate", precision="int8_pure"),
    q(
        "Qwen2.5-14B on A800, BnbConfig(load_in_8bit=True, llm_int8_threshold=0.0): cost per "
        "month?",
        "estimate",
        precision="int8_pure",
    ),
    q(
        "Mistral-7B on A800 with load_in_8bit=True, 1M requests a month, cost?",
        "estimate",
        "orange",
        [INT8],
        precision="int8_mixed",
    ),
    q("Qwen2.5-7B on RTX 5090 with FP8, cost?", "estimate", "red", [FP8]),
    q("Qwen2.5-0.5B on RTX 4090 with NF4 for an API, cost?", "estimate", "orange", [SMALL]),
    q("Greenest config for Llama-3-8B on L4", "optimize", model="llama-3-8b", gpu="l4"),
    q("Greenest setup for Gemma-2-9B on A800", "optimize", model="gemma-2-9b"),
    q("Greenest setup for Qwen3-8B on RTX 5090", "optimize", model="qwen3-8b"),
    q(
        "How much will Llama-3.1-8B on H200 cost for 1M requests a month?",
        "estimate",
        gpu="h200",
        requests_per_month=M,
    ),
    q("Qwen2.5-32B on A800, cost?", "estimate", model="qwen2.5-32b"),
    q("Qwen2.5-72B on an RTX 4090 with NF4?", "estimate", "red", [VRAM]),
    q("Mistral-7B on T4 with bf16, cost?", "estimate", rules=["bf16-unsupported"]),
    q(
        "What does Qwen2.5-7B on RTX PRO 6000 cost for 1M requests a month?",
        "estimate",
        gpu="rtx_pro_6000",
    ),
    q("Mistral-7B on A800 in India, 1M requests a month", "estimate", region="in"),
    q("Mistral-7B on A800 in Japan, 1M requests a month", "estimate", region="jp"),
    q("Mistral-7B 在日本的 A800 上每月 100 万次请求", "estimate", region="jp"),
    q("Mistral-7B on H100 PCIe for 1M requests a month", "estimate", gpu="h100_pcie"),
    q(
        "Qwen2.5-7B on 4090D for 3 million requests a month in China, cost in CNY with rate 7.1",
        "estimate",
        cny_per_usd=7.1,
        currency="CNY",
        region="china",
    ),
    q(
        "Qwen2.5-7B 在 4090D 上每月 300 万次请求，汇率 7.1，多少人民币",
        "estimate",
        cny_per_usd=7.1,
        currency="CNY",
    ),
    q("Mistral-7B on A800, 1M requests a month, 24/7 service", "estimate", hours_per_day=24.0),
    q("Qwen2.5-7B on A800, batch size 128, cost", "estimate", "gray"),
    q("Qwen2.5-7B on A800 with 8k context, cost?", "estimate", "gray"),
    q("Qwen2.5-7B GPTQ on A800, cost?", "estimate", "gray"),
    q("Llama-3-8B AWQ 在 A800 上多少钱", "estimate", "gray"),
    q(
        "Qwen2.5-7B on A800 for an interactive assistant, best precision?",
        "optimize",
        use="chat",
        serving=False,
    ),
    q(
        "Qwen2.5-7B on A800 serving an assistant to 100k users a day",
        "optimize" if False else "estimate",
        use="chat",
        serving=True,
        requests_per_month=100_000 * 5 * DAY,
    ),
    q(
        "Mistral-7B API on A800 with 64 concurrent requests, greenest config?",
        "optimize",
        use="api",
        concurrency=64,
        rec_batch=16,
    ),
    q(
        "Mistral-7B on A800 with 3 concurrent users, best config?",
        "optimize",
        concurrency=3,
        rec_batch_at_most=3,
    ),
    q("Qwen2.5-7B 在 A800 上做批量推理，1000 万 token，推荐配置", "optimize", use="batch"),
    q(
        "Qwen2.5-7B on A800 nightly job, 20 million tokens, cost?",
        "estimate",
        use="batch",
        total_tokens=20 * M,
    ),
    q(
        "How much energy does Qwen2.5-7B on A800 use per month for 1M requests?",
        "estimate",
        requests_per_month=M,
    ),
    q(
        "Carbon footprint of Mistral-7B on A800 for 1M requests a month",
        "estimate",
        requests_per_month=M,
    ),
    q("Qwen2.5-7B 在 A800 上每月 100 万次请求的碳排放", "estimate", requests_per_month=M),
    q("estimate Qwen2.5-1.5B on T4 at batch size 4", "estimate", batch_size=4),
    q(
        "Qwen2.5-1.5B on T4 for a batch job at batch size 64, cost?",
        "estimate",
        use="batch",
        batch_size=64,
    ),
    q("Mistral-7B on A800: NF4, INT8 or FP16?", "compare"),
    q("Mistral-7B 在 A800 上：NF4、INT8 还是 FP16 更省电？", "compare"),
]


def _observe(text: str) -> dict[str, Any]:
    answer = advise(text)
    data = answer.to_dict()
    parsed = data.get("parsed") or {}
    deployment = data.get("deployment") or {}
    rec = data.get("recommendation") or {}
    defaults = {d["field"]: d["value"] for d in data.get("defaults") or []}
    out: dict[str, Any] = {**parsed, **{k: v for k, v in deployment.items() if v is not None}}
    out.update(
        protocol=data["protocol"],
        mood=data["mood"],
        rules={f["rule"] for f in data["findings"]},
        rec_precision=rec.get("precision"),
        rec_batch=rec.get("batch_size"),
        batching_target=(data.get("batching") or {}).get("target_batch"),
        gpu_match=(data.get("gpu_match") or {}).get("matched_profile"),
        vendor=(data.get("accelerator") or {}).get("vendor"),
        asks="asks" in data,
        warning=bool(data.get("warnings")),
        pue=data["settings"].get("pue"),
        region=data["settings"].get("region"),
        requests_per_month_default=defaults.get("requests_per_month"),
        serving=parsed.get("serving"),
        paths=parsed.get("paths"),
    )
    out["_answer"] = answer
    return out


@pytest.mark.parametrize("case", SUITE, ids=[c.text[:60] for c in SUITE])
def test_suite(case: Q) -> None:
    seen = _observe(case.text)
    assert seen["protocol"] == case.protocol, (case.text, seen["protocol"])
    if case.mood is not None:
        assert seen["mood"] == case.mood, (case.text, seen["mood"], seen["rules"])
    if case.rules is not None:
        assert case.rules <= seen["rules"], (case.text, seen["rules"])
    assert not (case.absent & seen["rules"]), (case.text, seen["rules"])
    for key, expected in case.facts.items():
        if key == "rec_batch_at_least":
            assert seen["rec_batch"] >= expected, (case.text, seen["rec_batch"])
        elif key == "rec_batch_at_most":
            assert seen["rec_batch"] <= expected, (case.text, seen["rec_batch"])
        else:
            assert seen.get(key) == expected, (case.text, key, seen.get(key))
    # Every answer is plain JSON (no object slips through a default=str) and renders as text in
    # the question's language.
    json.dumps(seen["_answer"].to_dict(), ensure_ascii=False)
    text = render(seen["_answer"], fmt="text", plain=True)
    assert text.strip()
    if seen.get("language") == "zh" and seen["protocol"] != "audit":
        assert "Understood as" not in text


def test_suite_size_and_languages() -> None:
    assert len(SUITE) >= 150
    zh = sum(1 for c in SUITE if any("\u4e00" <= ch <= "\u9fff" for ch in c.text))
    assert zh >= 40
    assert {c.protocol for c in SUITE} == {"optimize", "compare", "estimate", "diagnose", "audit"}
