"""The DAG's plan for vLLM's CPU build (workflows/rules/vllm.smk): the checkpoints it serves and the
flags of its runs, bound once in the rule file like orl/workflow_dag.py's Plan."""

from __future__ import annotations

from dataclasses import dataclass

from orl.rows import Row
from orl.workflow_dag import Plan


@dataclass(frozen=True)
class VllmPlan:
    """vLLM's CPU build (vllm.smk): the checkpoints it serves and the flags of its runs.

    A checkpoint the DAG trains in our layout is served from its Qwen3 export (`<key>-qwen3`); a
    speculative row runs at the num_speculative_tokens `orl spec-sweep` chose (`spec_file`)."""

    plan: Plan
    exported: frozenset[str]  # checkpoint keys vLLM reads through their Qwen3 export

    def ckpt(self, key: str) -> str | None:
        return f"{self.plan.ckpt_dir}/{key}-qwen3" if key in self.exported else self.plan.ckpt(key)

    def spec_file(self, row: Row, suite: str) -> str:
        return f"{self.plan.results}/oppoint/{suite}/spec_{row.key}.json"

    def inputs(self, row: Row, suite: str, sweep: bool = True) -> list[str]:
        files = [f"{self.ckpt(key)}/config.json" for key in (row.ckpt, row.draft) if key]
        return files + ([self.spec_file(row, suite)] if sweep and row.draft else [])

    def flags(self, row: Row, suite: str, sweep: bool = True) -> str:
        flags = [f"--engine vllm --method {row.method} --ckpt {self.ckpt(row.ckpt)} --system '{row.system}'"]
        if row.draft:
            flags.append(f"--draft {self.ckpt(row.draft)}")
            if sweep:
                flags.append(f"--num-speculative-tokens @{self.spec_file(row, suite)}")
        return " ".join(flags)
