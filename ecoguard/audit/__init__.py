"""Static audit of serving code: ``ecoguard audit PATH...``.

Reads Python files and notebooks with ``ast`` (never imports or runs them), works out how each
model is loaded, quantized and called, and judges every call site with the runtime guard's own
rules, so findings carry the same rule ids and wording plus a file, line and column. Launch
files (shell scripts, Dockerfiles, compose and Kubernetes YAML) are read too
(``ecoguard.audit.launch``).

    from ecoguard.audit import audit_source, audit_paths
    result = audit_paths(["serving/"], gpu="T4")
    for finding in result.findings:
        print(finding.location, finding.rule, finding.message)
"""

from __future__ import annotations

from ecoguard.audit.core import audit_paths, audit_source
from ecoguard.audit.result import NOTE_KINDS, AuditNote, AuditResult, FileProblem

__all__ = ["NOTE_KINDS", "AuditNote", "AuditResult", "FileProblem", "audit_paths", "audit_source"]
