"""Setting a reproduced value against a paper claim, following docs/tables.md.

The rules, in the order they are tried:

1. A ratio claim (unit "x": speedups, TPF gains, training-step speedups) is compared
   with the same ratio measured here, whatever the hardware and model scale: a ratio
   measured within one run on one machine carries over, an absolute speed does not.
2. An absolute, hardware-bound number (tokens/s, latency, GPU-hours) is compared only
   when the record's GPU is the claim's GPU (and GPU count, for "8x B200") *and* the
   record's model is the claim's model (a tiny model on an H100 says nothing about
   QwenDLM-4B's tokens/s on an H100), and the precision matches where the claim names one.
3. Otherwise, when the table gives an *anchor* (another row that has both a claim and a
   measurement here), the two rows' ratio is compared instead: e.g. ORL tokens/s over
   DFlash tokens/s here (1.9×) against 1,298 / 746 = 1.74× in the paper.
4. A model-bound number (pass@1, token counts) is compared only on the claim's model.
5. Anything else is shown with the paper's value and no ratio, saying why.

`ratio` is always reproduced / paper (for ranges: against the range's low end).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orl.report.claims import Claim

# Metrics whose absolute value depends on the hardware they ran on.
HARDWARE_BOUND = {"tokens_per_s", "latency_median_s", "latency_p90_s", "train_gpu_hours", "train_wall_s"}


@dataclass(frozen=True)
class Comparison:
    ratio: float | None
    compared: str  # what was compared, or why nothing was


@dataclass(frozen=True)
class Anchor:
    """Another row of the same table, used for rule 3."""

    label: str
    claim: Claim
    value: float


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _split_count(hardware: str) -> tuple[int, str]:
    """'8x B200' -> (8, 'b200'); 'RTX 5090' -> (1, 'rtx5090')."""
    match = re.match(r"^\s*(\d+)\s*[x×]\s*(.+)$", hardware, flags=re.IGNORECASE)
    if match:
        return int(match.group(1)), _norm(match.group(2))
    return 1, _norm(hardware)


def hardware_matches(claim_hardware: str | None, gpu_name: str | None, gpu_count: int = 1) -> bool:
    """Whether a record's GPU (name as torch reports it, e.g. 'NVIDIA H100 80GB HBM3') is the claim's."""
    if not claim_hardware or not gpu_name:
        return False
    count, name = _split_count(claim_hardware)
    record_count, record_name = _split_count(gpu_name)
    return name in record_name and count == max(record_count, gpu_count)


def model_matches(claim_model: str | None, model_name: str | None) -> bool:
    """'QwenDLM-4B' matches 'qwendlm-4b-orl' (letters and digits, case-insensitive, contained)."""
    if not claim_model or not model_name:
        return False
    return _norm(claim_model) in _norm(model_name)


def precision_matches(claim_precision: str | None, precision: str | None) -> bool:
    """'nvfp4' matches 'nvfp4-w4a16'; a claim without precision matches any."""
    if not claim_precision:
        return True
    return bool(precision) and _norm(precision).startswith(_norm(claim_precision))


def _fmt(value: float) -> str:
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"


def _range_word(claim: Claim, value: float) -> str:
    if claim.compare_high is None:
        return ""
    if value < claim.compare_value:
        return " (below the paper's range)"
    if value > claim.compare_high:
        return " (above the paper's range)"
    return " (within the paper's range)"


def compare_to_claim(
    claim: Claim,
    value: float | None,
    *,
    gpu_name: str | None,
    gpu_count: int = 1,
    model_name: str | None,
    precision: str | None,
    anchor: Anchor | None = None,
) -> Comparison:
    """Reproduced `value` (in the claim's compared unit) against `claim`; see the module docstring."""
    where = gpu_name or "CPU"
    if value is None:
        return Comparison(None, f"{claim.metric}: not measured here")
    if claim.is_ratio:
        ratio = value / claim.compare_value
        return Comparison(
            ratio,
            f"{claim.metric}: {_fmt(value)}× here vs paper {claim.display()}{_range_word(claim, value)}; "
            "ratios compare across hardware",
        )
    same_model = model_matches(claim.model, model_name)
    if claim.metric in HARDWARE_BOUND:
        same_hw = hardware_matches(claim.hardware, gpu_name, gpu_count)
        if same_hw and same_model and precision_matches(claim.precision, precision):
            return Comparison(
                value / claim.compare_value,
                f"{claim.metric}: same GPU ({claim.hardware}) and model: {_fmt(value)} here vs paper "
                f"{claim.display()}",
            )
        if anchor is not None and anchor.value > 0 and anchor.claim.compare_value > 0:
            here = value / anchor.value
            paper = claim.compare_value / anchor.claim.compare_value
            return Comparison(
                here / paper,
                f"{claim.metric} relative to {anchor.label}: {_fmt(here)}× here vs {_fmt(paper)}× in the "
                "paper "
                f"(hardware differs: paper {claim.hardware}, here {where}; raw {claim.metric} not compared)",
            )
        reason = (
            f"hardware differs (paper {claim.hardware}, here {where})"
            if not same_hw
            else f"model differs (paper {claim.model}, here {model_name})"
            if not same_model
            else f"precision differs (paper {claim.precision}, here {precision})"
        )
        return Comparison(None, f"{claim.metric}: {reason}: raw {claim.metric} not compared")
    if claim.model is not None and not same_model:
        return Comparison(
            None, f"{claim.metric}: model differs (paper {claim.model}, here {model_name}): not compared"
        )
    return Comparison(
        value / claim.compare_value, f"{claim.metric}: {_fmt(value)} here vs paper {claim.display()}"
    )
