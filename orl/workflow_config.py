"""The DAG's configuration checks that run before Snakemake plans anything (Snakefile, common.smk).

Kept out of the rule files so that they are plain functions with tests, and so that an error is one
line naming the file and the key rather than Snakemake's dump of the whole schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jsonschema
import yaml

from orl.decoding.policy import Policy

PROFILES = ("smoke", "tiny", "paper")
DEFAULT_PROFILE = "tiny"


def profile_of(config: dict, configfiles: Sequence[str | Path]) -> str:
    """The run's profile: `profile` from --config or a --configfile; tiny only for a run given neither file
    nor key. A --configfile without `profile:` is refused: it would silently override the tiny profile."""
    if "profile" in config:
        return str(config["profile"])
    if configfiles:
        names = ", ".join(str(p) for p in configfiles)
        raise ValueError(
            f"{names}: profile: missing; a --configfile names the profile whose values it overrides "
            f"(profile: {' | '.join(PROFILES)})"
        )
    return DEFAULT_PROFILE


def config_problem(config: dict, schema_path: str | Path) -> str | None:
    """The first way `config` breaks the schema, as one line ('key: why'), or None."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(config),
        key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path]),
    )
    if not errors:
        return None
    error = errors[0]
    where = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return (
            f"{where + ': ' if where else ''}unknown key {', '.join(map(repr, unknown))} (known keys: "
            f"{', '.join(allowed)})"
        )
    return f"{where or '(top level)'}: {error.message}"


def sweep_grid(config: dict, where: str) -> tuple[str, list[float]]:
    """The policy the sweeps vary (`sweep_policy`) and its grid (`sweep_values`), every value checked
    against the policy's parameter (InputError naming `where`, the config files, and the key)."""
    name = config.get("sweep_policy", "threshold")
    values = list(config["sweep_values"])
    for value in values:
        Policy.checked(name, value, f"{where}: sweep_values (policy {name})")
    return name, values
