"""Questions about the reference data itself ("Is it really 360+ configurations?", "how many T4
configurations were measured?"): answered from the compiled data's counts
(``ecoguard.knowledge.data_counts``) beside the study's own claim, in the question's language.
"""

from __future__ import annotations

from ecoguard.advisor.protocols import AdvisorResult
from ecoguard.advisor.texts import Text
from ecoguard.errors import UsageError
from ecoguard.findings import Mood
from ecoguard.knowledge import data_counts, reference_rows, resolve_gpu


def about_data(gpu: str | None, language: str) -> AdvisorResult:
    """The counts of the reference data (and of one GPU's rows when ``gpu`` is named), and how
    they relate to the study's published "360+ configurations". Gray: the claim cannot be
    checked from the published files, and no setup is judged."""
    counts = data_counts()
    pub = counts.published
    by_gpu = ", ".join(f"{name} {n}" for name, n in counts.configurations_by_gpu.items())
    lines = [
        Text(
            f"The shipped reference data holds {counts.rows} rows: {counts.configurations} "
            "configurations (GPU, model, precision, batch size), as several source files quote "
            f"the same run. The estimator uses {counts.estimator_configurations} of them, "
            f"{counts.measured_configurations} with measured rows. By GPU: {by_gpu}.",
            f"随附的参考数据共 {counts.rows} 行，即 {counts.configurations} 个配置（GPU、模型、精度、"
            f"批大小），因为同一次运行会被多个源文件引用。估算器使用其中 "
            f"{counts.estimator_configurations} 个，{counts.measured_configurations} 个有实测数据。"
            f"按 GPU：{by_gpu}。",
        ),
        Text(
            f"The study claims {pub.claim}. Its {pub.tesla_t4} Tesla T4 configurations are not in "
            f"any published data file (the published T4 rows are {counts.t4_configurations} "
            "configurations), so the claim cannot be checked from the published data.",
            f"该研究声称 {pub.claim}。其中 {pub.tesla_t4} 个 Tesla T4 配置不在任何已发布的数据文件中"
            f"（已发布的 T4 数据只有 {counts.t4_configurations} 个配置），所以无法用已发布的数据核实这一说法。",
        ),
        Text(
            f"The study's {pub.formula_generated_rows}-row dataset is left out: its values follow "
            "an exact formula (throughput identical across GPUs), so it was generated, not measured.",
            f"该研究那份 {pub.formula_generated_rows} 行的数据集没有采用：其数值完全符合一个公式"
            "（各 GPU 吞吐量相同），是生成的，不是实测的。",
        ),
    ]
    extra: dict[str, object] = {"data_counts": counts.to_dict()}
    if gpu is not None:
        line, extra["gpu_counts"] = _gpu_counts(gpu)
        lines.insert(0, line)
    notes = tuple(line.get(language) for line in lines)
    return AdvisorResult(
        protocol="data", mood=Mood.GRAY, language=language, notes=notes, extra=extra
    )


def _gpu_counts(gpu: str) -> tuple[Text, dict[str, object]]:
    """One GPU's rows and configurations, counted as ``data_counts`` counts the whole data."""
    try:
        profile = resolve_gpu(gpu)
    except UsageError:
        return Text(f"No reference row is for {gpu}.", f"没有 {gpu} 的参考数据。"), {"gpu": gpu}
    counts = data_counts(tuple(r for r in reference_rows() if r.gpu == profile.key))
    name = profile.name
    text = Text(
        f"{name}: {counts.rows} rows, {counts.configurations} configurations; "
        f"{counts.measured_configurations} of them measured end to end (the estimator uses "
        f"{counts.estimator_configurations}).",
        f"{name}：{counts.rows} 行，{counts.configurations} 个配置；其中 "
        f"{counts.measured_configurations} 个有端到端实测（估算器使用 "
        f"{counts.estimator_configurations} 个）。",
    )
    return text, {
        "gpu": profile.key,
        "rows": counts.rows,
        "configurations": counts.configurations,
        "measured_configurations": counts.measured_configurations,
        "estimator_configurations": counts.estimator_configurations,
    }
