"""The sandbox for model-generated code (orl/sandbox/runner.py explains the isolation).

Both evaluation (pass@1) and ORL training (rollout rewards) judge completions only
through these functions.
"""

from orl.sandbox.batch import check_completion, check_many
from orl.sandbox.limits import ExecutionResult, SandboxLimits
from orl.sandbox.runner import ISOLATION_MODES, isolation_mode, run_program

__all__ = ["ISOLATION_MODES", "ExecutionResult", "SandboxLimits", "check_completion", "check_many",
           "isolation_mode", "run_program"]
