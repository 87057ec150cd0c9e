"""Readers of the publisher's prose tables (markdown): every row they give is ``reported``."""

from __future__ import annotations

import re
from pathlib import Path

from reference.normalise import (
    IDLE_SUBTRACTED_FORMULA,
    Row,
    model_key,
    new_row,
    num,
    plus_minus,
    precision_key,
)


def md_tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Markdown tables as (nearest heading above, header cells, body rows)."""
    tables = []
    heading = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if (
            line.startswith("|")
            and i + 1 < len(lines)
            and re.match(r"^\|[\s\-:|]+\|$", lines[i + 1])
        ):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            body = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                body.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            tables.append((heading, header, body))
            continue
        i += 1
    return tables


def _reported(
    *,
    gpu: str,
    model: str,
    precision: str,
    source: str,
    note: str,
    batch_size: int | None = 1,
    throughput: tuple[float | None, float | None] = (None, None),
    power: tuple[float | None, float | None] = (None, None),
    energy: tuple[float | None, float | None] = (None, None),
    per_request: float | None = None,
    delta: float | None = None,
    cv: float | None = None,
    session: str = "",
    software: str = "",
    date: str = "",
    scope: str = "end_to_end",
) -> Row:
    key, params = model_key(model)
    return new_row(
        gpu=gpu,
        model_id=model,
        model_key=key,
        params_b=params,
        precision=precision,
        batch_size=batch_size,
        throughput_tok_s=throughput[0],
        throughput_std=throughput[1],
        power_w=power[0],
        power_std=power[1],
        energy_j_per_1k=energy[0],
        energy_j_per_1k_std=energy[1],
        energy_j_per_request=per_request,
        cv_pct=cv,
        software=software,
        date=date,
        tier="reported",
        source=source,
        note=note,
        session=session,
        delta_vs_fp16_pct=delta,
        scope=scope,
    )


# Why the v2.3 RTX 4090D rows count as idle-subtracted although that table prints no power.
V23_4090D_IDLE = (
    "its FP16 baselines for Yi-1.5-6B and Mistral-7B are the memo's idle-subtracted figures "
    "and its deltas are taken against them, so the table is on the idle-subtracted basis"
)


def _v23_five_precision(rel: str, body: list[list[str]]) -> list[Row]:
    out: list[Row] = []
    model = ""
    for cells in body:
        model = cells[0] or model
        prec = precision_key(cells[2])
        out.append(
            _reported(
                gpu="rtx5090",
                model=model,
                precision=prec,
                source=rel,
                note="v2.3.0 five-precision table (n=3 x 10 iterations)"
                + ("; FP8 via torchao nightly, eager fallback" if prec.startswith("fp8") else ""),
                throughput=(num(cells[3]), None),
                power=(num(cells[4]), None),
                energy=(num(cells[5]), None),
                delta=num(cells[6]),
                software="PyTorch 2.12.0.dev20260315+cu128; torchao 0.17.0.dev20260316",
                date="2026-03-18",
            )
        )
    return out


def _v23_5090_nf4(rel: str, body: list[list[str]]) -> list[Row]:
    return [
        _reported(
            gpu="rtx5090",
            model=cells[0],
            precision=precision_key(cells[2]),
            source=rel,
            note="v2.3.0 prose, RTX 5090 earlier FP16/NF4 study",
            throughput=plus_minus(cells[3]),
            power=(num(cells[4]), None),
            energy=(num(cells[5]), None),
            delta=num(cells[6]),
            session="earlier",
        )
        for cells in body
    ]


def _v23_4090d_nf4(rel: str, body: list[list[str]]) -> list[Row]:
    return [
        _reported(
            gpu="rtx4090d",
            model=cells[0],
            precision=precision_key(cells[2]),
            source=rel,
            note="v2.3.0 prose, RTX 4090D NF4 table; " + V23_4090D_IDLE,
            throughput=plus_minus(cells[3]),
            energy=plus_minus(cells[4]),
            delta=num(cells[5]),
            session="nf4",
            scope="idle_subtracted",
        )
        for cells in body
    ]


def _v23_4090d_int8(rel: str, body: list[list[str]]) -> list[Row]:
    return [
        _reported(
            gpu="rtx4090d",
            model=cells[0].strip("*"),
            precision=precision_key(cells[1]),
            source=rel,
            note="v2.3.0 prose, RTX 4090D INT8 table; " + V23_4090D_IDLE,
            throughput=plus_minus(cells[2]),
            energy=plus_minus(cells[3]),
            delta=num(cells[4]),
            session="int8",
            scope="idle_subtracted",
        )
        for cells in body
        if not cells[0].strip("*").startswith("Average")
    ]


def _v23_a800(rel: str, body: list[list[str]]) -> list[Row]:
    return [
        _reported(
            gpu="a800",
            model=cells[0],
            precision=precision_key(cells[2]),
            batch_size=int(cells[1]),
            source=rel,
            note="v2.3.0 prose, A800 BS 1/4/8 table (same study as a800_metadata.json)",
            throughput=(num(cells[3]), None),
            energy=(num(cells[4]), None),
            delta=num(cells[5]),
        )
        for cells in body
    ]


# The v2.3.0 prose tables read, by the start of the heading above each (the first that matches).
V23_TABLES = (
    ("RTX 5090 Five-Precision", _v23_five_precision),
    ("RTX 5090 — FP16 vs NF4", _v23_5090_nf4),
    ("RTX 4090D — NF4", _v23_4090d_nf4),
    ("RTX 4090D — Default INT8", _v23_4090d_int8),
    ("A800 — INT8 Overhead", _v23_a800),
)


def rows_v23_prose(src: Path) -> list[Row]:
    """The v2.3.0 skill's prose tables (RTX 5090 five precisions, earlier 5090 study, 4090D)."""
    rel = "_unattributed-index/ecocompute-skill-v2.3/references/paradox_data.md"
    text = (src / rel).read_text(encoding="utf-8")
    out: list[Row] = []
    for heading, _header, body in md_tables(text):
        reader = next((r for start, r in V23_TABLES if heading.startswith(start)), None)
        if reader is not None:
            out.extend(reader(rel, body))
    return out


def rows_memo_prose(src: Path) -> list[Row]:
    """COMPLETE_DATASET_MEMO.md: RTX 4090D Feb-12 table (FP16/NF4/INT8 std/INT8 pure)."""
    rel = "ecocompute-dynamic-eval/metadata/COMPLETE_DATASET_MEMO.md"
    text = (src / rel).read_text(encoding="utf-8")
    if not IDLE_SUBTRACTED_FORMULA.search(text):
        raise SystemExit(f"build_reference: {rel} no longer states idle subtraction")
    out = []
    for _heading, header, body in md_tables(text):
        if header[:2] != ["Model", "Config"] or not body or body[0][0] != "Yi-1.5-6B":
            continue
        for cells in body:
            out.append(
                _reported(
                    gpu="rtx4090d",
                    model=cells[0],
                    precision=precision_key(cells[1]),
                    source=rel,
                    note=(
                        "dataset memo prose table, RTX 4090D (raw rtx4090d_clean.csv never "
                        "published); the memo's protocol: energy = (average power - idle "
                        "power) x 1000 / throughput"
                    ),
                    throughput=plus_minus(cells[2]),
                    power=plus_minus(cells[3]),
                    energy=plus_minus(cells[4]),
                    delta=num(cells[5]),
                    cv=num(cells[6]),
                    date="2026-02-12",
                    scope="idle_subtracted",
                )
            )
    return out


def rows_bs_guide(src: Path) -> list[Row]:
    """batch_size_guide.md: A800 Mistral-7B pure INT8 BS 1-64 prose table."""
    rel = "ecocompute-dynamic-eval/skills/ecocompute/references/batch_size_guide.md"
    text = (src / rel).read_text(encoding="utf-8")
    out = []
    for _heading, header, body in md_tables(text):
        if not header or header[0] != "Batch Size":
            continue
        for cells in body:
            out.append(
                _reported(
                    gpu="a800",
                    model="Mistral-7B",
                    precision="int8_pure",
                    batch_size=int(cells[0]),
                    source=rel,
                    note=(
                        "prose table; its J/request and J/1k disagree with the raw sweep CSV "
                        "(BS 1: 14.16 J/request here vs 1768.3 measured)"
                    ),
                    throughput=(num(cells[1]), None),
                    energy=(num(cells[3]), None),
                    per_request=num(cells[2]),
                )
            )
    return out


# --------------------------------------------------------------------------- assembly
