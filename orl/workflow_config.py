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
from orl.errors import ConfigError

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


def table5_suites(config: dict, where: str) -> list[str]:
    """The suites Table 5 (ORL and every ablation, every seed) runs on: config `table5_suites`, each one of
    the profile's `suites` (a suite there has its own sweeps and operating points; an extra suite only
    borrows the main suite's), in the order given; default the main suite (the first of `suites`).
    ConfigError naming `where` (the config files), the key and what was expected."""
    suites = list(config["suites"])
    chosen = config.get("table5_suites")
    if chosen is None:
        return suites[:1]
    if not isinstance(chosen, list) or not chosen:
        raise ConfigError(f"{where}: table5_suites: expected a non-empty list of suites, got {chosen!r}")
    for suite in chosen:
        if suite not in suites:
            raise ConfigError(
                f"{where}: table5_suites: {suite!r} is not one of this profile's suites (expected some of "
                f"{', '.join(suites)}: Table 5 runs where its rows are swept, config `suites`)"
            )
    if len(set(chosen)) != len(chosen):
        raise ConfigError(f"{where}: table5_suites: each suite once, got {', '.join(chosen)}")
    return list(chosen)
