"""How the compiled reference data's counts relate to the counts the study publishes.

The study (EcoCompute's skill text) claims "360+ configurations (113 primary + 140 Tesla T4 +
107 supplementary)"; ``ecoguard data`` shows a few hundred *rows* and fewer *configurations*.
The two count different things: a row is one configuration as one source file prints it (the
same run quoted by several documents is several rows), a configuration is one (GPU, model,
precision, batch size); the study's raw files for most of its T4 configurations were never
published; and the study's 560-row ``ecocompute_benchmark_dataset.json`` is formula-generated,
so ecoguard never reads it. :func:`data_counts` puts these figures side by side, each computed
from the compiled rows (``data/reference_rows.json``) and the study's own claim, which the
build copies from its source (``published`` in the same file).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from functools import cache

from ecoguard._paths import load_data
from ecoguard.knowledge.records import ReferenceRow
from ecoguard.knowledge.tables import _shipped_rows

T4 = "tesla_t4"


@dataclass(frozen=True, slots=True)
class PublishedCounts:
    """The study's own counts, as printed in ``source``: ``claim`` verbatim, the claimed total
    (a lower bound: "360+") and its parts; the formula-generated dataset's row count."""

    claim: str
    source: str
    configurations_claimed: int
    primary: int
    tesla_t4: int
    supplementary: int
    formula_generated_rows: int
    formula_generated_source: str


@dataclass(frozen=True, slots=True)
class DataCounts:
    """Counts of the shipped reference data beside the study's.

    ``rows``: compiled rows (one per configuration per source file, every tier and scope);
    ``configurations``: distinct (GPU, model, precision, batch size) over those rows;
    ``estimator_configurations``: configurations with a row the estimator uses (scope
    ``end_to_end`` with an energy figure, not ``offloaded``); ``measured_configurations``: those
    with a ``measured`` row; ``anchor_copies``: rows repeating another file's row (scope
    ``duplicate``, never counted twice); ``quoted_copies``: rows quoting a run another document
    already gives (same configuration and figures: one session, not several);
    ``offloaded_rows``: rows whose configuration needs more memory than the GPU has (weights
    offloaded: kept, flagged, out of every fit); ``configurations_by_gpu``: per GPU;
    ``notes``: the reconciliation in sentences."""

    rows: int
    rows_by_tier: dict[str, int]
    rows_by_scope: dict[str, int]
    configurations: int
    estimator_configurations: int
    measured_configurations: int
    anchor_copies: int
    quoted_copies: int
    offloaded_rows: int
    configurations_by_gpu: dict[str, int]
    t4_rows: int
    t4_configurations: int
    published: PublishedCounts
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return asdict(self)


def _config(row: ReferenceRow) -> tuple[str, str, str, int]:
    return (row.gpu, row.model_key or f"id:{row.model_id}", row.precision, row.batch_size or 1)


def _estimator_row(row: ReferenceRow) -> bool:
    return row.scope == "end_to_end" and row.energy_j_per_1k is not None and not row.offloaded


@cache
def published_counts() -> PublishedCounts:
    """The study's counts as the build copied them from its source."""
    return PublishedCounts(**load_data("reference_rows.json")["published"])


def data_counts(rows: tuple[ReferenceRow, ...] | None = None) -> DataCounts:
    """The shipped rows' counts (or ``rows``') beside the study's published counts."""
    rows = _shipped_rows() if rows is None else rows
    published = published_counts()
    configs = {_config(r) for r in rows}
    used = {_config(r) for r in rows if _estimator_row(r)}
    measured = {_config(r) for r in rows if _estimator_row(r) and r.tier == "measured"}
    by_gpu = Counter(gpu for gpu, _, _, _ in configs)
    t4_rows = sum(1 for r in rows if r.gpu == T4)
    anchors = sum(1 for r in rows if r.scope == "duplicate")
    quoted = sum(1 for r in rows if r.quotes)
    offloaded = sum(1 for r in rows if r.offloaded)
    notes = (
        f"{len(rows)} rows are {len(configs)} configurations: a row is one configuration as one "
        "source file prints it, so a run quoted by several files is several rows "
        f"({anchors} anchor copies of another file's row, {quoted} quotes of a run another "
        "document gives; each counted once as a session).",
        f"The estimator uses {len(used)} configurations ({len(measured)} with measured rows): "
        "rows that subtract idle power or cover decode only, anchor copies and offloaded runs "
        f"({offloaded} rows) are kept but left out.",
        f"The study claims {published.claim} ({published.source}). Its "
        f"{published.tesla_t4} Tesla T4 configurations are not in any published data file: the "
        f"published T4 rows ({t4_rows}, anchor copies included) are {by_gpu.get(T4, 0)} "
        "configurations.",
        f"The study's {published.formula_generated_rows}-row "
        f"{published.formula_generated_source.rsplit('/', 1)[-1]} is left out: its values follow "
        "an exact formula (throughput identical across GPUs), so it was generated, not measured.",
    )
    return DataCounts(
        rows=len(rows),
        rows_by_tier=dict(sorted(Counter(r.tier for r in rows).items())),
        rows_by_scope=dict(sorted(Counter(r.scope for r in rows).items())),
        configurations=len(configs),
        estimator_configurations=len(used),
        measured_configurations=len(measured),
        anchor_copies=anchors,
        quoted_copies=quoted,
        offloaded_rows=offloaded,
        configurations_by_gpu=dict(sorted(by_gpu.items())),
        t4_rows=t4_rows,
        t4_configurations=by_gpu.get(T4, 0),
        published=published,
        notes=notes,
    )


__all__ = ["DataCounts", "PublishedCounts", "data_counts", "published_counts"]
