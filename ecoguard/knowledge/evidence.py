"""The reference rows organised the way a comparison needs them: configurations, sessions and
same-session pairs.

A *configuration* is one (GPU, model, precision, batch size). A *session* is one run of an
experiment (one source file and its ``session`` label): sessions of the same configuration
disagree by a median ~16 %, mostly for reasons that affect every configuration of the session
alike (driver, clocks, host, software). So a change between two configurations is read only from
pairs measured in the same session (a row's ``baseline_row`` or its stated FP16 baseline, or two
batch sizes of one session), and summarised across sessions by the median, with the range.

A configuration with rows answers with them: its figure is the median of its own sessions and
its band spans them (lowest to highest session; one session gets the pooled session-to-session
spread). Changes between configurations are paired, and a second figure follows one chain of
them, so any two configurations compare by their same-session changes (what alerts and $ use):

* FP16 at batch size 1 is the *anchor*: the median over its sessions;
* another precision at batch size 1 = anchor x the median paired ratio to FP16;
* another batch size = that precision's batch-size-1 figure x the median paired batch ratio
  (or, when only a precision pair exists at that batch size, FP16 at that size x that ratio);
* a configuration with rows but no pairs: the median of its own sessions.

The chained figure is ``Figure.chained``; each link is a :class:`Step` that names the paired
change and, beside it, the change between the two configurations' own figures where the two
differ (sessions of different lengths and days disagree by more than a paired change does).

An :class:`Evidence` can hide rows (hold-out): the rows of some configurations or of some GPUs
(``hidden_configs``, ``hidden_gpus``) are dropped, and a pair whose baseline belongs to a hidden
configuration no longer counts (its baseline *is* the hidden measurement).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from ecoguard.knowledge.records import ReferenceRow

TIER_ORDER = ("local", "measured", "reported")
ConfigKey = tuple[str, str, str, int]  # gpu, model_key, precision, batch size
MIN_TOKENS = 64


@dataclass(frozen=True, slots=True)
class Step:
    """One link of the paired chain: ``what`` changed (``FP16 -> nf4``, ``batch size 1 -> 64``),
    the median same-session change (%), each session's change, and the change between the two
    configurations' own measured figures (%; None when the base has no rows of its own)."""

    what: str
    paired_pct: float
    session_pcts: tuple[float, ...]
    absolute_pct: float | None

    def text(self) -> str:
        n = len(self.session_pcts)
        each = ", ".join(f"{v:+.1f}%" for v in self.session_pcts)
        out = (
            f"{self.what} {self.paired_pct:+.1f}% paired (median of {n} same-session "
            f"pair{'s' if n != 1 else ''}: {each})"
        )
        if self.absolute_pct is not None and abs(self.absolute_pct - self.paired_pct) >= 0.05:
            out += f"; {self.absolute_pct:+.1f}% between the two configurations' own figures"
        return out


@dataclass(frozen=True, slots=True)
class Figure:
    """J per 1k generated tokens with its band (``low``, ``high``) and its basis.

    For a configuration with rows: ``value`` is the median of its sessions, the band spans
    them, ``measurements`` lists each session's figure; ``chained`` is the figure on the paired
    chain (None where no chain applies) and ``steps`` its links."""

    value: float
    low: float
    high: float
    tier: str
    description: str
    rows: tuple[ReferenceRow, ...] = ()
    sessions: tuple[str, ...] = ()
    power_w: float | None = None
    throughput_tok_s: float | None = None
    spread_known: bool = True  # False when one session: the band is the pooled default
    # The same-session FP16 pairs behind a precision's change: (source, session, ratio, the
    # FP16 baseline's row id or the session when the baseline is only stated in the row).
    pairs: tuple[tuple[str, str, float, str], ...] = ()
    chained: float | None = None
    steps: tuple[Step, ...] = ()
    measurements: tuple[tuple[str, float], ...] = ()

    @property
    def paired_value(self) -> float:
        """The figure comparisons use: the chained one where a chain applies."""
        return self.chained if self.chained is not None else self.value

    def scaled(self, factor: float, low_factor: float, high_factor: float) -> Figure:
        """This figure times ``factor``; the band also multiplied by the factor's own band."""
        lo, hi = _combine_bands(self, factor, low_factor, high_factor)
        return Figure(
            value=self.value * factor,
            low=lo,
            high=hi,
            tier=self.tier,
            description=self.description,
            rows=self.rows,
            sessions=self.sessions,
            spread_known=self.spread_known,
            pairs=self.pairs,
        )


def _combine_bands(fig: Figure, factor: float, low_factor: float, high_factor: float):
    """Log-space half-widths add in quadrature (independent errors)."""
    down = math.hypot(math.log(fig.value / fig.low), math.log(factor / low_factor))
    up = math.hypot(math.log(fig.high / fig.value), math.log(high_factor / factor))
    value = fig.value * factor
    return value * math.exp(-down), value * math.exp(up)


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default) of a non-empty list."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def session_of(row: ReferenceRow) -> str:
    """The session a row was measured in: its source file and session label, or, for a row
    that quotes a run another document gives (``quotes``), that document's session: one run
    printed in four documents is one session, not four."""
    return row.quotes or f"{row.source}#{row.session or '-'}"


def row_batch(row: ReferenceRow) -> int:
    return row.batch_size or 1


def model_of(row: ReferenceRow) -> str:
    """The row's model: its registry key, or ``id:<model id>`` for a model outside the registry
    (a local ``ecoguard bench`` row of a custom model)."""
    return row.model_key or f"id:{row.model_id}"


def config_of(row: ReferenceRow) -> ConfigKey:
    return (row.gpu, model_of(row), row.precision, row_batch(row))


def usable(row: ReferenceRow) -> bool:
    """A row the estimator reads: whole generate calls with an energy figure, run in the GPU's
    memory (an ``offloaded`` row is shown, flagged, and kept out of every fit and carry)."""
    return row.scope == "end_to_end" and row.energy_j_per_1k is not None and not row.offloaded


def best_tier(rows: Iterable[ReferenceRow]) -> list[ReferenceRow]:
    rows = list(rows)
    for tier in TIER_ORDER:
        chosen = [r for r in rows if r.tier == tier]
        if chosen:
            return chosen
    return []


@dataclass(frozen=True, slots=True)
class Pair:
    """One same-session ratio: ``row`` over its baseline (FP16, or batch size 1)."""

    row: ReferenceRow
    ratio: float
    session: str
    baseline: ReferenceRow | None = None


@dataclass
class Evidence:
    """Rows indexed by configuration, with the hold-out applied (``ladder.Ladders`` builds and
    keeps one per hold-out)."""

    rows: tuple[ReferenceRow, ...]
    hidden_configs: frozenset[ConfigKey] = frozenset()
    hidden_gpus: frozenset[str] = frozenset()
    by_config: dict[ConfigKey, list[ReferenceRow]] = field(default_factory=dict)
    by_id: dict[str, ReferenceRow] = field(default_factory=dict)
    params: dict[str, float] = field(default_factory=dict)
    # What this Evidence worked out: each configuration's chained figure, the pooled spread.
    _anchored: dict[ConfigKey, Figure | None] = field(default_factory=dict, init=False, repr=False)
    _pooled: tuple[float, float] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        for row in self.rows:
            self.by_id[row.id] = row
            if not usable(row) or self.is_hidden(config_of(row)):
                continue
            self.by_config.setdefault(config_of(row), []).append(row)
            self.params.setdefault(model_of(row), row.params_b)

    def is_hidden(self, key: ConfigKey) -> bool:
        return key[0] in self.hidden_gpus or key in self.hidden_configs

    # ------------------------------------------------------------------ look-ups

    def gpus(self) -> set[str]:
        return {k[0] for k in self.by_config}

    def models_on(self, gpu: str) -> set[str]:
        return {k[1] for k in self.by_config if k[0] == gpu}

    def configs(self) -> list[ConfigKey]:
        return sorted(self.by_config)

    def has(self, key: ConfigKey) -> bool:
        return key in self.by_config

    # ------------------------------------------------------------------ pairs

    def precision_pairs(self, key: ConfigKey) -> list[Pair]:
        """Same-session ratios of this configuration to FP16 at the same batch size, from the
        best tier that has any; pairs whose baseline is hidden are left out."""
        gpu, model, precision, bs = key
        if precision == "fp16" or key not in self.by_config:
            return []
        base_key = (gpu, model, "fp16", bs)
        if self.is_hidden(base_key):
            return []
        pairs_by_tier: dict[str, list[Pair]] = {}
        for row in self.by_config[key]:
            pair = self._precision_pair(row, base_key)
            if pair is not None:
                pairs_by_tier.setdefault(row.tier, []).append(pair)
        for tier in TIER_ORDER:
            if pairs_by_tier.get(tier):
                return pairs_by_tier[tier]
        return []

    def _precision_pair(self, row: ReferenceRow, base_key: ConfigKey) -> Pair | None:
        energy = row.energy_j_per_1k
        assert energy is not None
        if row.baseline_row:
            base = self.by_id.get(row.baseline_row)
            if base is None or not usable(base) or config_of(base) != base_key:
                return None
            if base.tier != row.tier:
                # A measured row "paired" with a quoted baseline (another, unpublished run) is
                # not a same-session pair.
                return None
            assert base.energy_j_per_1k is not None
            return Pair(row, energy / base.energy_j_per_1k, session_of(row), base)
        if row.fp16_energy_j_per_1k:
            return Pair(row, energy / row.fp16_energy_j_per_1k, session_of(row))
        return None

    def batch_pairs(self, gpu: str, model: str, precision: str, bs: int) -> list[Pair]:
        """Same-session ratios of batch size ``bs`` to batch size 1 for one precision."""
        key = (gpu, model, precision, bs)
        one = (gpu, model, precision, 1)
        if bs == 1 or key not in self.by_config or one not in self.by_config:
            return []
        base_by_session: dict[str, list[ReferenceRow]] = {}
        for row in self.by_config[one]:
            base_by_session.setdefault(session_of(row), []).append(row)
        pairs_by_tier: dict[str, list[Pair]] = {}
        for row in self.by_config[key]:
            bases = [b for b in base_by_session.get(session_of(row), []) if b.tier == row.tier]
            if not bases:
                continue
            base = bases[0]
            assert row.energy_j_per_1k is not None and base.energy_j_per_1k is not None
            pair = Pair(row, row.energy_j_per_1k / base.energy_j_per_1k, session_of(row), base)
            pairs_by_tier.setdefault(row.tier, []).append(pair)
        for tier in TIER_ORDER:
            if pairs_by_tier.get(tier):
                return pairs_by_tier[tier]
        return []

    # ------------------------------------------------------------------ figures

    def direct(self, key: ConfigKey) -> Figure | None:
        """The median over sessions of this configuration's best-tier rows."""
        rows = best_tier(self.by_config.get(key, ()))
        if not rows:
            return None
        # A run of a few dozen tokens is dominated by prefill and start-up: use it only when
        # nothing longer was measured (the RTX PRO 6000 32-token smoke run reads 1.9x).
        long_enough = [r for r in rows if (r.generation_tokens or MIN_TOKENS) >= MIN_TOKENS]
        rows = long_enough or rows
        by_session: dict[str, list[ReferenceRow]] = {}
        for row in rows:
            by_session.setdefault(session_of(row), []).append(row)
        values = [
            statistics.fmean(r.energy_j_per_1k for r in group)  # type: ignore[misc]
            for group in by_session.values()
        ]
        value = statistics.median(values)
        low, high, known = self.band(values, value)
        documents = len({r.source for r in rows})
        if len(values) == 1:
            desc = (
                f"{rows[0].tier} row {rows[0].id}"
                if len(rows) == 1
                else f"one {rows[0].tier} run quoted by {documents} documents"
                if documents > 1
                else f"mean of {len(rows)} {rows[0].tier} rows of one session"
            )
        else:
            desc = (
                f"median of {len(values)} {rows[0].tier} sessions "
                f"({min(values):,.0f}-{max(values):,.0f} J/1k)"
            )
        power, tput = _power_throughput(list(by_session.values()))
        return Figure(
            value,
            low,
            high,
            rows[0].tier,
            desc,
            tuple(rows),
            tuple(by_session),
            power,
            tput,
            known,
            measurements=tuple(zip(by_session, values, strict=True)),
        )

    def band(self, values: list[float], center: float) -> tuple[float, float, bool]:
        """The span of the session values (lowest to highest, so every session lies inside);
        one session gets the pooled spread."""
        if len(values) >= 2:
            return min(center, *values), max(center, *values), True
        lo, hi = self.pooled_session_spread()
        return center * math.exp(lo), center * math.exp(hi), False

    def pooled_session_spread(self) -> tuple[float, float]:
        """(p10, p90) of log(session / configuration median) over every configuration measured
        in two or more sessions: the band a single session's figure gets."""
        if self._pooled is not None:
            return self._pooled
        deviations: list[float] = []
        for rows in self.by_config.values():
            chosen = best_tier(rows)
            by_session: dict[str, list[float]] = {}
            for row in chosen:
                by_session.setdefault(session_of(row), []).append(row.energy_j_per_1k)  # type: ignore[arg-type]
            values = [statistics.fmean(v) for v in by_session.values()]
            if len(values) < 2:
                continue
            center = statistics.median(values)
            deviations.extend(math.log(v / center) for v in values)
        if len(deviations) < 5:
            result = (-0.15, 0.15)
        else:
            result = (min(quantile(deviations, 0.1), -0.01), max(quantile(deviations, 0.9), 0.01))
        self._pooled = result
        return result

    def ratio_figure(self, pairs: list[Pair]) -> tuple[float, float, float, tuple[str, ...]]:
        """(median ratio, p10, p90) over sessions, and the sessions named."""
        by_session: dict[str, list[float]] = {}
        for pair in pairs:
            by_session.setdefault(pair.session, []).append(pair.ratio)
        ratios = [statistics.fmean(v) for v in by_session.values()]
        value = statistics.median(ratios)
        if len(ratios) >= 2:
            lo, hi = min(value, quantile(ratios, 0.1)), max(value, quantile(ratios, 0.9))
        else:
            lo, hi = value, value
        return value, lo, hi, tuple(by_session)

    def anchored(self, key: ConfigKey) -> Figure | None:
        """The configuration's figure by the chain in the module docstring (None: no rows)."""
        if key not in self._anchored:
            self._anchored[key] = self._chained(key)
        return self._anchored[key]

    def _chained(self, key: ConfigKey) -> Figure | None:
        gpu, model, precision, bs = key
        if key not in self.by_config:
            return None
        own = self.direct(key)
        assert own is not None
        if precision == "fp16" and bs == 1:
            return own
        if bs != 1:
            pairs = self.batch_pairs(gpu, model, precision, bs)
            base = self.anchored((gpu, model, precision, 1)) if pairs else None
            if base is not None:
                return self._chain(base, pairs, f"batch size 1 -> {bs}", own, base)
        if precision != "fp16":
            pairs = self.precision_pairs(key)
            base = self.anchored((gpu, model, "fp16", bs)) if pairs else None
            measured_base = base
            if base is None and pairs:
                baselines = [p.baseline.energy_j_per_1k if p.baseline else None for p in pairs]
                stated = [
                    b if b is not None else p.row.fp16_energy_j_per_1k
                    for b, p in zip(baselines, pairs, strict=True)
                ]
                stated = [s for s in stated if s]
                if stated:
                    value = statistics.median(stated)
                    lo, hi, known = self.band(stated, value)
                    base = Figure(
                        value,
                        lo,
                        hi,
                        pairs[0].row.tier,
                        "the pairs' own FP16 baselines",
                        (),
                        (),
                        None,
                        None,
                        known,
                    )
            if base is not None:
                return self._chain(base, pairs, f"FP16 -> {precision}", own, measured_base)
        return own

    def _chain(
        self, base: Figure, pairs: list[Pair], what: str, own: Figure, measured: Figure | None
    ) -> Figure:
        """The configuration's own figure, with the paired chain through ``base`` beside it
        (``measured``: the base configuration's own figure, None when it has no rows)."""
        ratio, _lo, _hi, _sessions = self.ratio_figure(pairs)
        change = (ratio - 1.0) * 100.0
        step = Step(
            what,
            change,
            tuple((r - 1) * 100 for r in _session_ratios(pairs)),
            None if measured is None else (own.value / measured.value - 1.0) * 100.0,
        )
        steps = (*base.steps, step)
        desc = f"{own.description}; " + "; ".join(s.text() for s in steps)
        rows = tuple(dict.fromkeys((*own.rows, *(p.row for p in pairs), *base.rows)))
        pair_list = base.pairs
        if what.startswith("FP16"):
            by_session: dict[str, list[Pair]] = {}
            for pair in pairs:
                by_session.setdefault(pair.session, []).append(pair)
            pair_list = tuple(
                (
                    group[0].row.source,
                    group[0].row.session or "-",
                    statistics.fmean(p.ratio for p in group),
                    group[0].baseline.id if group[0].baseline else session_of(group[0].row),
                )
                for group in by_session.values()
            )
        return Figure(
            own.value,
            own.low,
            own.high,
            own.tier,
            desc,
            rows,
            own.sessions,
            own.power_w,
            own.throughput_tok_s,
            own.spread_known,
            pair_list,
            chained=base.paired_value * ratio,
            steps=steps,
            measurements=own.measurements,
        )


def _session_ratios(pairs: list[Pair]) -> list[float]:
    by_session: dict[str, list[float]] = {}
    for pair in pairs:
        by_session.setdefault(pair.session, []).append(pair.ratio)
    return [statistics.fmean(v) for v in by_session.values()]


def _power_throughput(
    sessions: list[list[ReferenceRow]],
) -> tuple[float | None, float | None]:
    """The median over sessions of each session's mean power and throughput (the figure's
    power is re-derived from its energy and this throughput where both are known)."""

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    def mean(values):
        values = [v for v in values if v is not None]
        return statistics.fmean(values) if values else None

    return (
        median(mean(r.power_w for r in group) for group in sessions),
        median(mean(r.throughput_tok_s for r in group) for group in sessions),
    )
