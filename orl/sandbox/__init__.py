"""The sandbox for model-generated code (orl/sandbox/runner.py explains the design).

Both evaluation (pass@1) and ORL training (rollout rewards) judge completions only
through these functions. `isolation` is "bwrap" (the default: SandboxUnavailable when
bwrap cannot run here), "fallback" (only when asked for by name) or "auto".
"""

from orl.sandbox.batch import check_completion, check_many
from orl.sandbox.isolation import ISOLATION_CHOICES, ISOLATION_LABELS, SandboxUnavailable
from orl.sandbox.limits import ExecutionResult, SandboxLimits
from orl.sandbox.runner import resolve_isolation, run_program

__all__ = [
    "ISOLATION_CHOICES",
    "ISOLATION_LABELS",
    "ExecutionResult",
    "SandboxLimits",
    "SandboxUnavailable",
    "check_completion",
    "check_many",
    "resolve_isolation",
    "run_program",
]
