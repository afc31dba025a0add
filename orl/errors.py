"""Errors the harness reports to the user as one clear line (no traceback).

Every message names the file, the field and what was expected, so that bad
input is fixed at its source rather than debugged from deep inside torch.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base class: the `orl` command prints these as `error: <message>`."""


class ConfigError(HarnessError):
    """A configuration file or value is wrong (unknown key, bad type, bad value)."""


class CheckpointError(HarnessError):
    """A checkpoint directory is missing, truncated or of an unsupported kind."""


class InputError(HarnessError):
    """A request or data file is invalid (prompt too long, empty prompt set, ...)."""
