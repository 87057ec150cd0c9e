"""One answer prices everything it shows the same way (issue 28's "one voice", within an answer).

A question that prices electricity in its own currency (EUR, no exchange rate) got, from
optimize, a candidate table and a side-by-side in USD at the region's grid price beside a
batching saving in EUR at the stated price (the saving exceeded the monthly cost shown). A
question in Chinese was priced in yuan through the flags door (``--language zh``) but not as
free text unless it said 多少钱 or 花.
"""

from __future__ import annotations

import re

import pytest

from ecoguard.advisor.answers import advise, answer
from ecoguard.advisor.parse import parse_question
from ecoguard.advisor.question import Question
from ecoguard.advisor.rendering import render

EUR = "Mistral-7B on A800 at €0.25/kWh, 3M requests a month"


def _euros(text: str) -> list[str]:
    return re.findall(r"€[\d,]+\.\d\d", text)


def test_optimize_prices_every_figure_at_the_stated_price():
    result = advise(f"Greenest config for {EUR}")
    shown = render(result, fmt="text", plain=True)
    money = result.result.money
    assert money is not None
    # The side-by-side is the estimate's money for the same two configurations, in EUR.
    kwh = money["current"]["energy_kwh"]
    assert money["current"]["cost_local"] == pytest.approx(kwh * 0.25)
    assert money["current"]["cost_usd"] is None
    assert f"€{money['current']['cost_local']:,.2f}" in shown
    assert f"€{money['saving_local']:,.2f}" in shown
    # The candidate table: its cost column is in EUR (kWh x 0.25), headed without a $ sign.
    table = shown.split("Ruled out")[0]
    assert "$" not in table
    assert "cost/month" in table
    fp16_bs1 = next(c for c in result.result.rows if (c.precision, c.batch_size) == ("fp16", 1))
    assert f"€{fp16_bs1.estimate.monthly.energy_kwh * 0.25:,.2f}" in table
    # Every amount shown is in EUR, and the note says why there is no USD figure.
    assert "$" not in shown.split("Data:")[0]
    assert "no USD figure" in shown


def test_optimize_and_estimate_price_the_current_setup_alike():
    optimized = advise(f"Greenest config for {EUR}").result.money
    estimated = advise(f"What will {EUR} cost?").result.money
    assert optimized["current"] == estimated["current"]


def test_compare_prices_its_table_at_the_stated_price():
    result = advise(f"Compare all precisions for {EUR}")
    shown = render(result, fmt="md")
    assert "cost/month" in shown and "$/month" not in shown
    cell = next(c for c in result.result.rows if c.precision == "fp16")
    assert f"€{cell.estimate.monthly.energy_kwh * 0.25:,.2f}" in shown
    assert "cheapest per month: " in shown and re.search(r"cheapest per month: \w+ \(€", shown)


def test_usd_answers_keep_their_dollars():
    shown = render(advise("Greenest config for Mistral-7B on A800, 3M requests a month"))
    assert "$/month" in shown and not _euros(shown)


@pytest.mark.parametrize(
    "text",
    [
        "Mistral-7B 在 A800 上最省电的配置是什么？",
        "Mistral-7B 在 A800 上要花多少钱？",
    ],
)
def test_a_question_in_chinese_is_priced_in_yuan_by_every_door(text):
    parsed = parse_question(text)
    assert parsed.currency == "CNY"
    flags = Question.from_flags(parsed.protocol, model="Mistral-7B", gpu="a800", language="zh")
    assert flags.currency == parsed.currency
    by_text = advise(text).result.money
    by_flags = answer(flags).result.money
    assert by_text["current"]["notes"] == by_flags["current"]["notes"]
    assert by_text["current"]["notes"]  # no rate given: says the costs stay in USD and how


def test_dollars_named_in_chinese_stay_dollars():
    assert parse_question("Mistral-7B 在 A800 上每月多少美元？").currency == "USD"


@pytest.mark.parametrize(
    "text",
    [
        "Yi-6B 在 A800 上最省电的配置是什么？每月 100 万次请求，汇率 7.2",
        "比较 Yi-6B 在 A800 上的所有精度，每月 100 万次请求，汇率 7.2",
    ],
)
def test_a_question_in_yuan_with_a_rate_gets_its_tables_in_yuan(text):
    """The side-by-side showed ¥ (with $) while the candidate table beside it stayed in $."""
    result = advise(text)
    shown = render(result, fmt="md")
    cell = next(c for c in result.result.rows if c.estimate.monthly.cost_usd is not None)
    usd = round(cell.estimate.monthly.cost_usd, 6)  # as the estimate's JSON (and money) has it
    assert f"¥{usd * 7.2:,.2f} (${usd:,.2f})" in shown
    assert "每月费用（$）" not in shown  # the column is headed without a currency of its own
    if result.result.protocol == "compare":  # its trade-offs name the cheapest, in yuan too
        assert re.search(r"每月最便宜：\w+（¥", shown)
