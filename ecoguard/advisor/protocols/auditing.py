"""audit: source files or pasted code through ecoguard.audit."""

from __future__ import annotations

from ecoguard.advisor.protocols.base import AdvisorResult, Request, cited_result
from ecoguard.advisor.texts import Text
from ecoguard.findings import Finding, Mood, weakest_tier


def audit(request: Request) -> AdvisorResult:
    """The code audit (``ecoguard.audit``) of the question's files by path, or of the code
    pasted into it (audited as text with ``audit_source``, never run), for the request's
    ``audit_gpu`` when it names one. Nothing to audit is gray."""
    paths, code, gpu = request.question.paths, request.question.code, request.audit_gpu
    language = request.language
    # The audit package is about a tenth of a fresh `ecoguard advise` process's imports
    # (benchmarks/advise_latency.py).
    from ecoguard.audit import audit_paths, audit_source  # lazy: only audit questions need it

    if code:
        report = audit_source(code, "<question>", gpu=gpu, time_limit_s=2.0)
    elif paths:
        report = audit_paths(list(paths), gpu=gpu)
    else:
        return AdvisorResult(
            protocol="audit",
            mood=Mood.GRAY,
            language=language,
            notes=(
                Text(
                    "Nothing to audit: name a file (`ecoguard audit serve.py`) or paste the code "
                    "that loads and calls the model.",
                    "没有可审计的内容：写上文件名（`ecoguard audit serve.py`），或粘贴加载和调用模型的代码。",
                ).get(language),
            ),
            extra={"paths": [], "available": True},
        )
    findings = [f for f in report.findings if isinstance(f, Finding)]
    notes: list[str] = []
    unparsed = bool(report.problems) and not findings
    if unparsed:
        why = [p.message for p in report.problems[:2]]
        notes.append(
            Text(
                "The code did not parse as Python, so nothing in it was judged: " + "; ".join(why),
                "这段代码无法按 Python 解析，因此没有做任何判断：" + "；".join(why),
            ).get(language)
        )
    mood = Mood.GRAY if unparsed else Mood.worst(f.mood for f in findings)
    return cited_result(
        [row for f in findings for row in f.evidence],
        protocol="audit",
        mood=mood,
        language=language,
        findings=tuple(findings),
        tier=weakest_tier(f.impact.tier for f in findings if f.impact) if findings else "none",
        notes=tuple(notes),
        extra={
            "paths": list(paths) if not code else [],
            "code_lines": len(code.splitlines()) if code else 0,
            "available": True,
            "audit": report.to_dict(),
        },
    )
