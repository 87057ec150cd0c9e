"""The audit itself: source text -> syntax tree -> call sites -> the guard's rules -> findings
with file, line and column.

The rules are the runtime guard's own (``ecoguard.rules.evaluate``), so a trap found in a file
reads exactly as it does in a live process; the audit only adds where it is.
"""

from __future__ import annotations

import ast
import os
import warnings
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache

from ecoguard.audit.extract import Extractor, RawNote, Site
from ecoguard.audit.launch import audit_launch_text, is_launch_file
from ecoguard.audit.result import AuditNote, AuditResult, FileProblem
from ecoguard.audit.sources import Text, discover, read_source
from ecoguard.deployment import GpuSpec, ModelSpec
from ecoguard.errors import UsageError
from ecoguard.faults import record_fault
from ecoguard.findings import Finding, Location

# Findings whose fix belongs where the quantization config is built, not where it is used.
_AT_CONFIG = frozenset({"int8-mixed", "fp8-eager"})


def audit_source(text: str, filename: str = "<string>", *, gpu: str | None = None) -> AuditResult:
    """Audit one Python source text. ``gpu`` (a name ``resolve_gpu`` accepts: ``T4``,
    ``rtx4090``) enables the GPU-dependent rules; UsageError if it is unknown. A syntax error
    is reported in the result, not raised."""
    return _audit_text(Text(text), filename, _gpu_spec(gpu))


def audit_paths(
    paths: Iterable[str | os.PathLike[str]],
    *,
    gpu: str | None = None,
    exclude: Iterable[str] = (),
) -> AuditResult:
    """Audit files and directories (``.py``/``.pyi``/``.ipynb``, recursively). ``exclude``
    holds glob patterns matched against each path as shown and relative to its argument.
    Problems with single files land in ``result.problems``; the rest are still audited."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    gpu_spec = _gpu_spec(gpu)
    files, problems = discover(paths, exclude)
    result = AuditResult(problems=problems)
    for source in files:
        text = read_source(source)
        if isinstance(text, FileProblem):
            result.problems.append(text)
            continue
        if is_launch_file(source.display):
            result.extend(audit_launch_text(text.text, source.display, gpu_spec))
            continue
        result.extend(_audit_text(text, source.display, gpu_spec))
    return result.sort()


def _audit_text(text: Text, filename: str, gpu: GpuSpec) -> AuditResult:
    result = AuditResult(files=[filename])
    tree, problems = _parse(text, filename)
    result.problems.extend(problems)
    if tree is None:
        return result
    try:
        from ecoguard.rules import BS1_SUSTAINED_CALLS

        extraction = Extractor(
            tree, gpu=gpu, resolve_model=_model_spec, bs1_calls=BS1_SUSTAINED_CALLS
        ).run()
    except RecursionError:
        result.problems.append(
            FileProblem(filename, "syntax-error", "nesting too deep to analyse; not audited")
        )
        return result
    seen: set[tuple[str, int | None, int | None, int | None]] = set()
    for site in extraction.sites:
        for finding in _evaluate(site):
            anchor = (
                site.config_node if finding.rule in _AT_CONFIG and site.config_node else site.node
            )
            location = _location(anchor, filename, text)
            key = (finding.rule, location.cell, location.line, location.column)
            if key in seen:
                continue  # one config used by several loads: one finding where it is built
            seen.add(key)
            if site.details:
                finding = replace(finding, details=(*finding.details, *site.details))
            result.findings.append(finding.at(location))
    for note in extraction.notes:
        result.notes.append(_note(note, filename, text))
    return result.sort()


def _evaluate(site: Site) -> list[Finding]:
    from ecoguard.rules import evaluate

    findings = evaluate(site.deployment, only=site.only)
    return [f for f in findings if f.rule not in site.unknown]


def _parse(text: Text, filename: str) -> tuple[ast.Module | None, list[FileProblem]]:
    """Parse the text; for a notebook, a cell that does not parse is blanked, reported, and the
    other cells are still audited."""
    source = text.text
    problems: list[FileProblem] = []
    flags = ast.PyCF_ONLY_AST | (ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if text.cells else 0)
    for _ in range(len(text.cell_ranges) + 1):
        try:
            with warnings.catch_warnings():
                # Invalid escape sequences etc. are the audited code's business, not ours.
                warnings.simplefilter("ignore")
                tree = compile(source, filename, "exec", flags=flags, dont_inherit=True)
            return tree, problems  # type: ignore[return-value]
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            line = getattr(exc, "lineno", None)
            message = f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}"
            if text.cells and line:
                cell, cell_line = _cell_of(text, line)
                problems.append(FileProblem(filename, "syntax-error", message, cell_line, cell))
                source = _blank_cell(source, text, cell)
                continue
            problems.append(FileProblem(filename, "syntax-error", message, line))
            return None, problems
    return None, problems


def _cell_of(text: Text, line: int) -> tuple[int | None, int | None]:
    if text.cells and 1 <= line <= len(text.cells):
        return text.cells[line - 1]
    return None, None


def _blank_cell(source: str, text: Text, cell: int | None) -> str:
    lines = source.split("\n")
    for number, first, last in text.cell_ranges:
        if number == cell:
            for index in range(first - 1, last):
                lines[index] = ""
    return "\n".join(lines)


def _location(node: ast.AST, filename: str, text: Text) -> Location:
    line = getattr(node, "lineno", None)
    offset = getattr(node, "col_offset", None)
    column = None
    if offset is not None:
        # ast counts UTF-8 bytes; editors and SARIF count characters, from 1.
        source_line = _line_text(text, line)
        column = len(source_line.encode("utf-8")[:offset].decode("utf-8", "replace")) + 1
    if text.cells and line is not None:
        cell, cell_line = _cell_of(text, line)
        return Location(filename, cell_line, column, cell=cell)
    return Location(filename, line, column)


def _line_text(text: Text, line: int | None) -> str:
    if line is None:
        return ""
    lines = text.text.split("\n")
    return lines[line - 1] if 1 <= line <= len(lines) else ""


def _note(note: RawNote, filename: str, text: Text) -> AuditNote:
    return AuditNote(
        note.kind, note.mood, note.message, note.fix, _location(note.node, filename, text)
    )


def _gpu_spec(gpu: str | None) -> GpuSpec:
    if gpu is None:
        return GpuSpec()
    if not isinstance(gpu, str) or not gpu.strip():
        raise UsageError("empty --gpu; give a GPU name such as T4, A100, rtx4090")
    from ecoguard.knowledge import resolve_gpu

    profile = resolve_gpu(gpu)
    return GpuSpec(
        profile=profile.key,
        name=profile.name,
        architecture=profile.architecture,
        compute_capability=tuple(profile.compute_capability)[:2]  # type: ignore[arg-type]
        if profile.compute_capability
        else None,
        vram_gb=profile.vram_gb,
    )


@lru_cache(maxsize=512)
def _model_spec(text: str) -> ModelSpec | None:
    """The model a string literal names, with its size when the knowledge registry or the name
    itself says it; None when it names no model we can size."""
    try:
        from ecoguard.knowledge import resolve_model

        info = resolve_model(text)
    except UsageError:
        return None
    except ImportError as exc:
        record_fault("audit.resolve_model", exc)
        return None
    return info.to_model_spec(info.id or text)
