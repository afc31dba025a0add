"""Construct what `orl serving-args` prints in the real package's own argument classes.

Run with the python of an environment that has vllm or sglang (the harness need not be
installed there; `make serving-check` builds such environments and feeds this script):

    .venv-serving/vllm/bin/python scripts/check_serving_args.py CALLS.json

CALLS.json is a JSON list of `orl serving-args` outputs. For each call:
- vllm: `vllm.engine.arg_utils.EngineArgs(**kwargs)` (what `vllm.LLM(**kwargs)` builds; an unknown
  keyword raises TypeError), the keys of `speculative_config` against SpeculativeConfig's fields,
  its method against SpeculativeMethod, its attention backend against AttentionBackendEnum, and
  `vllm.SamplingParams(**sampling_params)`;
- sglang: `sglang.srt.server_args.ServerArgs(**kwargs)` (not a plain dataclass in 0.5.23: its
  fields are read with inspect.signature), the speculative algorithm against SpeculativeAlgorithm,
  the dLLM algorithm against sglang's registry and the YAML file the call names, and
  `SamplingParams(**sampling_params)`.
Neither needs a GPU. Prints one line per call; exits 1 if any check failed.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import json
import sys
import typing
from pathlib import Path


def _literal_values(annotation) -> set[str]:
    """Every string of a (nested) Literal / Union annotation."""
    values = set()
    for arg in typing.get_args(annotation):
        values |= _literal_values(arg) if typing.get_args(arg) else {arg} if isinstance(arg, str) else set()
    return values


def check_vllm(call: dict) -> list[str]:
    from vllm import SamplingParams
    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    done = []
    EngineArgs(**call["kwargs"])
    done.append("EngineArgs(**kwargs)")
    speculative = call["kwargs"].get("speculative_config")
    if speculative is not None:
        fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
        unknown = set(speculative) - fields
        if unknown:
            raise TypeError(f"speculative_config: SpeculativeConfig has no field(s) {sorted(unknown)}")
        if speculative["method"] not in _literal_values(SpeculativeMethod):
            raise ValueError(
                f"speculative_config.method: {speculative['method']!r} is not a SpeculativeMethod"
            )
        if "attention_backend" in speculative:
            AttentionBackendEnum[speculative["attention_backend"].upper()]
        done.append(f"SpeculativeConfig fields {sorted(speculative)}")
    SamplingParams(**call["sampling_params"])
    done.append("SamplingParams(**sampling_params)")
    return done


def check_sglang(call: dict) -> list[str]:
    import yaml
    from sglang.srt.dllm.algorithm import get_algorithm_cls
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    kwargs = call["kwargs"]
    unknown = set(kwargs) - set(inspect.signature(ServerArgs).parameters)
    if unknown:
        raise TypeError(f"ServerArgs has no parameter(s) {sorted(unknown)}")
    ServerArgs(**kwargs)
    done = ["ServerArgs(**kwargs)"]
    if "speculative_algorithm" in kwargs:
        algorithm = SpeculativeAlgorithm.from_string(kwargs["speculative_algorithm"])
        if not isinstance(algorithm, SpeculativeAlgorithm):
            raise ValueError(
                f"speculative_algorithm: {kwargs['speculative_algorithm']!r} is not a built-in algorithm"
            )
        done.append(f"SpeculativeAlgorithm.{algorithm.name}")
    if "dllm_algorithm" in kwargs:
        get_algorithm_cls(kwargs["dllm_algorithm"])
        written = yaml.safe_load(Path(kwargs["dllm_algorithm_config"]).read_text())
        if written != call["dllm_algorithm_config"]:
            raise ValueError(
                f"dllm_algorithm_config: the YAML file holds {written}, the call says "
                f"{call['dllm_algorithm_config']}"
            )
        done.append(f"dLLM algorithm {kwargs['dllm_algorithm']} with {written}")
    SamplingParams(**call["sampling_params"])
    done.append("SamplingParams(**sampling_params)")
    return done


CHECKS = {"vllm": check_vllm, "sglang": check_sglang}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    calls = json.loads(Path(argv[0]).read_text())
    failed = 0
    for call in calls:
        engine, method = call["engine"], call["method"]
        version = importlib.metadata.version(engine)
        where = f"{engine} {version} {method}"
        if version != call["checked_version"]:
            print(f"FAIL {where}: the harness was checked against {engine} {call['checked_version']}")
            failed += 1
            continue
        try:
            done = CHECKS[engine](call)
        except Exception as exc:  # report every call, then fail
            print(f"FAIL {where}: {type(exc).__name__}: {exc}")
            failed += 1
        else:
            print(f"ok   {where}: " + "; ".join(done))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
