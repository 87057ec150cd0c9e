"""What the build does to the rows the readers return: registry sizes, ids, idle power added
back, FP16 baselines linked, anchor duplicates, quoted runs and offloaded runs marked."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

from ecoguard.deployment import Deployment
from ecoguard.knowledge.memory import memory_need, usable_vram_gb
from ecoguard.knowledge.tables import gpu_profiles, model_registry
from reference.normalise import (
    IDLE_TOLERANCE_W,
    MODEL_REGISTRY,
    SOURCE_TAGS,
    STATED_IDLE_W,
    Row,
    pct_change,
    slug,
)


def assign_ids(rows: list[Row]) -> list[Row]:
    """Stable, readable ids: gpu/model/precision/bsN/source-tag[/session][/gen tokens]."""
    out = []
    for row in rows:
        tag = _source_tag(row.source)
        parts = [row.gpu, row.model_key, row.precision, f"bs{row.batch_size or 'na'}", tag]
        if row.session:
            parts.append(slug(row.session))
        if tag in ("gh-pro6000e2e",) and row.generation_tokens:
            parts.append(f"gen{row.generation_tokens}")
        out.append(replace(row, id="/".join(parts)))
    ids = Counter(r.id for r in out)
    dupes = [i for i, n in ids.items() if n > 1]
    if dupes:
        raise SystemExit(f"build_reference: duplicate row ids: {dupes}")
    return out


def _source_tag(source: str) -> str:
    for prefix, tag in sorted(SOURCE_TAGS.items(), key=lambda kv: -len(kv[0])):
        if source.startswith(
            prefix.replace("hongping-zh.github.io/", "hongping-zh.github.io/data/")
        ):
            return tag
    raise SystemExit(f"build_reference: no source tag for {source!r}")


def registry_sizes(path: Path = MODEL_REGISTRY) -> dict[str, float]:
    """Registry key -> parameter count (billions) from the hand-maintained model registry."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["models"]
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"build_reference: cannot read the model registry {path}: {exc}") from None
    return {entry["key"]: float(entry["params_b"]) for entry in entries}


def apply_registry_sizes(rows: list[Row], sizes: dict[str, float]) -> list[Row]:
    """One source of truth for a model's size: the registry's, where it lists the model."""
    return [replace(r, params_b=sizes[r.model_key]) if r.model_key in sizes else r for r in rows]


def _idle_key(row: Row) -> tuple:
    return (row.gpu, row.model_key, row.precision, row.energy_j_per_1k, row.throughput_tok_s)


def recovered_idle(rows: list[Row]) -> dict[tuple, tuple[float, str]]:
    """Idle power each idle-subtracted row's own figures imply (power - energy x throughput /
    1000), keyed by the figures it was printed with, with the id of the row it comes from.
    Stops the build when one is not near the GPU's stated idle power."""
    found: dict[tuple, tuple[float, str]] = {}
    for row in rows:
        if row.scope != "idle_subtracted" or None in (
            row.power_w,
            row.throughput_tok_s,
            row.energy_j_per_1k,
        ):
            continue
        idle = row.power_w - row.energy_j_per_1k * row.throughput_tok_s / 1000.0
        stated = STATED_IDLE_W.get(row.gpu)
        if stated is None or abs(idle - stated) > IDLE_TOLERANCE_W:
            raise SystemExit(
                f"build_reference: {row.id} implies {idle:.2f} W idle subtracted, not the stated "
                f"{stated} W: check the source before correcting it"
            )
        found.setdefault(_idle_key(row), (idle, row.id))
    return found


def add_back_idle(rows: list[Row]) -> list[Row]:
    """Put the idle energy back into rows whose source subtracted it.

    A row is corrected when its own power, throughput and energy give the idle power, or when
    another idle-subtracted row printed exactly the same energy and throughput for the same
    configuration (a prose table repeating the memo). The stated energy and delta stay in
    ``energy_j_per_1k_stated`` and the note; the delta is recomputed on the corrected energies by
    ``link_baselines``. Rows that cannot be corrected keep scope ``idle_subtracted``."""
    idle_of = recovered_idle(rows)
    out = []
    for row in rows:
        if row.scope != "idle_subtracted":
            out.append(row)
            continue
        if row.power_w is not None and row.throughput_tok_s and row.energy_j_per_1k is not None:
            match = (row.power_w - row.energy_j_per_1k * row.throughput_tok_s / 1000.0, row.id)
        else:
            match = idle_of.get(_idle_key(row)) if row.throughput_tok_s else None
        if match is None:
            reason = (
                "no energy in this row"
                if row.energy_j_per_1k is None
                else "no power column and no identical row to recover the idle power from"
            )
            out.append(replace(row, note=row.note + f"; not corrected for idle ({reason})"))
            continue
        idle, origin = match
        stated = row.energy_j_per_1k
        energy = stated + idle * 1000.0 / row.throughput_tok_s
        note = (
            f"; idle {idle:.2f} W added back as {idle:.2f} x 1000 / {row.throughput_tok_s:g} tok/s "
            f"(stated {stated:g} J/1k"
            + (
                f", {row.delta_vs_fp16_pct:+.1f}% vs FP16 on the idle-subtracted basis"
                if row.delta_vs_fp16_pct is not None
                else ""
            )
            + ")"
            + ("" if origin == row.id else f"; idle recovered from the identical row {origin}")
        )
        out.append(
            replace(
                row,
                energy_j_per_1k=energy,
                energy_j_per_1k_stated=stated,
                idle_added_w=idle,
                scope="end_to_end",
                fp16_energy_j_per_1k=None,
                delta_vs_fp16_pct=None,
                note=row.note + note,
            )
        )
    return out


def link_baselines(rows: list[Row]) -> list[Row]:
    """Point each non-FP16 row at its FP16 baseline from the same source (same GPU, model and
    batch size; the same-session baseline where the file pairs them), fill the FP16 energy, and
    compute the delta where the file did not state one."""
    fp16_rows = {
        (_source_tag(r.source), r.gpu, r.model_key, r.batch_size, r.session): r
        for r in rows
        if r.precision == "fp16" and r.scope != "duplicate"
    }
    out = []
    for row in rows:
        if row.precision == "fp16":
            out.append(row)
            continue
        tag = _source_tag(row.source)
        paired = f"{row.session}-base-{row.precision}" if row.session else f"base-{row.precision}"
        base = fp16_rows.get(
            (tag, row.gpu, row.model_key, row.batch_size, paired)
        ) or fp16_rows.get((tag, row.gpu, row.model_key, row.batch_size, row.session))
        if base is None:
            out.append(row)
            continue
        if row.scope == "end_to_end" and base.scope != "end_to_end":
            raise SystemExit(
                f"build_reference: {row.id} ({row.scope}) would pair with {base.id} ({base.scope})"
            )
        fp16 = row.fp16_energy_j_per_1k
        if fp16 is None:
            # An uncorrected idle-subtracted row keeps its baseline on the same basis.
            fp16 = (
                base.energy_j_per_1k_stated
                if row.scope == "idle_subtracted" and base.energy_j_per_1k_stated is not None
                else base.energy_j_per_1k
            )
        delta = row.delta_vs_fp16_pct
        if delta is None:
            delta = pct_change(row.energy_j_per_1k, fp16)
        out.append(
            replace(row, baseline_row=base.id, fp16_energy_j_per_1k=fp16, delta_vs_fp16_pct=delta)
        )
    return out


def mark_anchor_duplicates(rows: list[Row]) -> list[Row]:
    """measured.csv anchors repeat rows of other files; say which, so nobody counts them twice."""
    out = []
    others = [r for r in rows if not r.source.startswith("quant-energy/build/")]
    for row in rows:
        if not row.source.startswith("quant-energy/build/") or row.energy_j_per_1k is None:
            out.append(row)
            continue
        same = [
            o
            for o in others
            if o.tier == "measured"
            and o.gpu == row.gpu
            and o.model_key == row.model_key
            and o.precision == row.precision
            and o.energy_j_per_1k is not None
            and abs(o.energy_j_per_1k - row.energy_j_per_1k) < 0.01
        ]
        if same:
            out.append(
                replace(row, note=row.note + f"; duplicates {same[0].id}", scope="duplicate")
            )
        else:
            out.append(row)
    return out


# Two rows of one configuration quote one run when their energies (as stated) agree to this
# many J per 1k tokens and their throughputs (where both give one) to this many tok/s.
SAME_RUN_ENERGY_J = 0.5
SAME_RUN_THROUGHPUT = 0.01


def _session_key(row: Row) -> str:
    """The session a row was measured in, as ``ecoguard.knowledge.evidence.session_of`` keys it."""
    return f"{row.source}#{row.session or '-'}"


def _same_run(a: Row, b: Row) -> bool:
    """Two rows of one configuration from two documents that print one run's figures. A file
    never quotes itself (its sessions are its own), and two data files dated differently are
    two runs however close their figures (RTX 5090 Qwen2-7B FP16: 4,980.7 and 4,980.4 J/1k)."""
    if a.source == b.source:
        return False
    if a.tier == b.tier == "measured" and a.date and b.date and a.date != b.date:
        return False
    ea = a.energy_j_per_1k_stated if a.energy_j_per_1k_stated is not None else a.energy_j_per_1k
    eb = b.energy_j_per_1k_stated if b.energy_j_per_1k_stated is not None else b.energy_j_per_1k
    if ea is None or eb is None or abs(ea - eb) > SAME_RUN_ENERGY_J:
        return False
    ta, tb = a.throughput_tok_s, b.throughput_tok_s
    return ta is None or tb is None or abs(ta - tb) <= SAME_RUN_THROUGHPUT


def _quote_order(row: Row) -> tuple:
    """Which of several quotes of one run stands for it: measured before reported, a data file
    before prose, then the id."""
    return (row.tier != "measured", row.source.endswith(".md"), row.id)


def mark_quotes(rows: list[Row]) -> list[Row]:
    """A run quoted by several documents (the RTX 4090D FP16 Mistral-7B 6,260 J/1k appears in a
    metadata file, the memo and two v2.3 tables) is one session: every quote but the first (by
    :func:`_quote_order`) names the first's session in ``quotes``. Anchor copies (scope
    ``duplicate``) are counted apart and left as they are."""
    by_config: dict[tuple, list[Row]] = {}
    for row in rows:
        if row.scope != "duplicate" and row.energy_j_per_1k is not None:
            key = (row.gpu, row.model_key, row.precision, row.batch_size, row.scope)
            by_config.setdefault(key, []).append(row)
    quoted: dict[str, str] = {}
    for group in by_config.values():
        group.sort(key=_quote_order)
        for i, row in enumerate(group):
            if row.id in quoted:
                continue
            for other in group[i + 1 :]:
                if (
                    other.id not in quoted
                    and _session_key(other) != _session_key(row)
                    and _same_run(row, other)
                ):
                    quoted[other.id] = _session_key(row)
    return [replace(r, quotes=quoted[r.id]) if r.id in quoted else r for r in rows]


def mark_offloaded(rows: list[Row]) -> list[Row]:
    """Flag the rows whose configuration needs more memory than the GPU has, by the model the
    ``vram-overflow`` rule uses (``ecoguard.knowledge.memory``: weights + KV cache + overhead
    against the VRAM). A row's unstated prompt length counts as 0 tokens, so an assumption never
    causes a flag. Such a run offloaded weights to the CPU (T4 Qwen2-7B FP16: 2.9 tok/s)."""
    models, gpus = model_registry(), gpu_profiles()
    out = []
    for row in rows:
        model, gpu = models.get(row.model_key), gpus.get(row.gpu)
        if model is None or gpu is None:
            out.append(row)
            continue
        deployment = Deployment(
            model=model.to_model_spec(),
            gpu=gpu.to_gpu_spec(),
            precision=row.precision,
            batch_size=row.batch_size or 1,
        )
        need = memory_need(
            deployment,
            model,
            prompt_tokens=row.prompt_tokens or 0,
            generation_tokens=row.generation_tokens or 1,
        )
        over = need is not None and need.total_gb > usable_vram_gb(gpu.vram_gb)
        if over:
            assert need is not None
            note = (
                f"{row.note}; " if row.note else ""
            ) + f"offloaded: needs {need.total_gb:.1f} GB of the GPU's {gpu.vram_gb:g} GB"
            out.append(replace(row, offloaded=True, note=note))
        else:
            out.append(row)
    return out
