"""How forwards are counted: the one definition every engine, record and table uses (docs/metrics.md).

A request's model forwards split in two:
- the *prefill* forwards (`nfe_prefill`, usually 1): the forwards that carry the prompt. An AR
  model's prefill also yields the first token; a speculative system's first target forward carries
  the prompt and verifies the first draft (hf-assisted, dflash) or samples the first token
  (vLLM, SGLang); a dLLM's prefill writes the prompt's keys/values and yields nothing. A decoder
  without a cache (the reference diffusion decoder) runs no prefill: 0.
- the *decode* forwards (`nfe`, "NFE"): every other forward of the model that returns tokens
  (the target's, for a speculative system; the drafter's are `draft_forwards`).

From them, with N the tokens a request returns (<eos> included) and, for a block decoder, K the
blocks it decoded:

    TPF        = N / NFE                  the main column
    TPF_prefill = N / (NFE + nfe_prefill)   every forward counted
    TPF_commit = N / (NFE + K)            one extra forward per block (the page's count: the
                                          forward that writes a finished block's clean keys/values)
    TPF ceiling = N / K                   at one forward per block, NFE >= K, so TPF <= N / K

Over a suite each is a ratio of sums (Σ N / Σ NFE, ...), never a mean of per-request ratios.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

COUNT_FIELDS = ("tokens", "nfe", "nfe_prefill", "blocks")  # what a per-problem / per-request entry carries


def decode_forwards(forwards: int, prefill: int) -> int:
    """NFE of a request whose engine counted all its `forwards`, `prefill` of which carried the prompt.

    An engine that counts every forward of its model (a forward hook, a loop counter) calls this, so
    that "after prefill" means the same everywhere; an engine that counts decode steps only (a dLLM's
    denoising steps) has its NFE already.
    """
    if forwards < 0 or prefill < 0:
        raise ValueError(f"forward counts must be non-negative, got forwards={forwards}, prefill={prefill}")
    if prefill > forwards:
        raise ValueError(f"{prefill} prefill forwards out of only {forwards} forwards")
    return forwards - prefill


def ratio(numerator: float, denominator: float | None) -> float | None:
    """numerator / denominator; None where the denominator is missing or 0 (no value, not a made-up one)."""
    return numerator / denominator if denominator else None


def tpf(tokens: int, nfe: int) -> float | None:
    """Tokens per decode forward."""
    return ratio(tokens, nfe)


def tpf_prefill(tokens: int, nfe: int, nfe_prefill: int | None) -> float | None:
    """Tokens per forward, the prefill forwards counted too."""
    return None if nfe_prefill is None else ratio(tokens, nfe + nfe_prefill)


def tpf_commit(tokens: int, nfe: int, blocks: int | None) -> float | None:
    """Tokens per forward with one extra (commit) forward per decoded block; block decoders only."""
    return None if blocks is None else ratio(tokens, nfe + blocks)


def tpf_ceiling(tokens: int, blocks: int | None) -> float | None:
    """The highest TPF a block decoder can reach on these completions: one forward per block."""
    return None if blocks is None else ratio(tokens, blocks)


def _total(entries: Sequence[Mapping], key: str) -> int | None:
    """Σ entry[key], None unless every entry has it (records made before a field existed lack it)."""
    values = [entry.get(key) for entry in entries]
    return None if not values or any(v is None for v in values) else int(sum(values))


def suite_metrics(entries: Sequence[Mapping]) -> dict[str, float | int]:
    """The forward metrics of a suite from its per-request entries (COUNT_FIELDS each; `blocks` only
    from block decoders): tpf, tpf_prefill, tpf_commit, tpf_ceiling, nfe_mean, nfe_prefill_mean,
    blocks_mean. A metric whose inputs some entry lacks, or whose denominator is 0, is left out."""
    if not entries:
        return {}
    n = len(entries)
    tokens, nfe = _total(entries, "tokens") or 0, _total(entries, "nfe") or 0
    prefill, blocks = _total(entries, "nfe_prefill"), _total(entries, "blocks")
    metrics = {
        "tpf": tpf(tokens, nfe),
        "tpf_prefill": tpf_prefill(tokens, nfe, prefill),
        "tpf_commit": tpf_commit(tokens, nfe, blocks),
        "tpf_ceiling": tpf_ceiling(tokens, blocks),
        "nfe_mean": nfe / n,
        "nfe_prefill_mean": None if prefill is None else prefill / n,
        "blocks_mean": None if blocks is None else blocks / n,
    }
    return {name: value for name, value in metrics.items() if value is not None}
