"""One way of counting forwards (orl/engines/forwards.py, docs/metrics.md): every engine's NFE is its decode
forwards, counted against the model's actual forward calls; nfe_prefill, blocks, and the TPF columns
(tpf_prefill, tpf_commit, tpf_ceiling) from the engines through the records to the tables."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from orl.decoding import Policy
from orl.engines.base import forward_metrics
from orl.engines.forwards import decode_forwards, suite_metrics
from orl.model.checkpoint import load_checkpoint, save_checkpoint
from orl.model.transformer import Transformer

from .conftest import small_config

PROMPT = "def add(a, b):\n"
REPO = Path(__file__).resolve().parents[1]


class Calls:
    """Counts a module's forward calls (a pre-hook), as the hf engine counts its target's."""

    def __init__(self, module: torch.nn.Module):
        self.n = 0
        self.handle = module.register_forward_pre_hook(self.hook)

    def hook(self, module, args) -> None:
        self.n += 1


@pytest.fixture(scope="module")
def dlm_dir(tokenizer, tmp_path_factory):
    """A random block-diffusion checkpoint (block 4), large weights: sharp, varied commits."""
    torch.manual_seed(1)
    config = small_config(tokenizer)
    config.attention_mode, config.block_size = "block-causal", 4
    model = Transformer(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("dlm"))


def test_decode_forwards_and_suite_metrics():
    assert decode_forwards(7, 1) == 6 and decode_forwards(0, 0) == 0
    with pytest.raises(ValueError):
        decode_forwards(0, 1)
    # Two AR requests of 5 and 3 tokens: 4 + 2 decode forwards, one prefill each.
    ar = suite_metrics([{"tokens": 5, "nfe": 4, "nfe_prefill": 1}, {"tokens": 3, "nfe": 2, "nfe_prefill": 1}])
    assert ar == {"tpf": 8 / 6, "tpf_prefill": 1.0, "nfe_mean": 3.0, "nfe_prefill_mean": 1.0}
    # A dLLM: 16 tokens in 2 blocks with 5 steps, 7 tokens in 1 block with 2 steps.
    dllm = suite_metrics(
        [
            {"tokens": 16, "nfe": 5, "nfe_prefill": 1, "blocks": 2},
            {"tokens": 7, "nfe": 2, "nfe_prefill": 1, "blocks": 1},
        ]
    )
    assert dllm["tpf"] == 23 / 7 and dllm["tpf_prefill"] == 23 / 9
    assert dllm["tpf_commit"] == 23 / (7 + 3) and dllm["tpf_ceiling"] == 23 / 3 and dllm["blocks_mean"] == 1.5
    # An entry without a field (a record made before it existed) leaves out what needs it: never a guess.
    old = suite_metrics([{"tokens": 4, "nfe": 4}, {"tokens": 3, "nfe": 2, "nfe_prefill": 1, "blocks": 1}])
    assert set(old) == {"tpf", "nfe_mean"}


def test_ar_engines_count_n_minus_one_decode_forwards(ar_ckpt_dir):
    """n tokens: the prefill forward yields the first (nfe_prefill 1), each other costs one decode forward."""
    from orl.engines.ar import CompiledAR
    from orl.engines.hf import load_hf_engine
    from orl.engines.reference import ReferenceAR

    ckpt = load_checkpoint(ar_ckpt_dir)
    calls = Calls(ckpt.model)
    for engine in (ReferenceAR(ckpt, ignore_eos=True), CompiledAR(ckpt, mode="eager", ignore_eos=True)):
        for n in (1, 7):
            before = calls.n
            gen = engine.generate(PROMPT, n)
            assert (gen.num_tokens, gen.nfe, gen.nfe_prefill) == (n, n - 1, 1), engine.name
            if engine.name == "reference-ar":  # one model call per token: the counts are the calls
                assert calls.n - before == gen.nfe + gen.nfe_prefill
    calls.handle.remove()
    hf = load_hf_engine(ar_ckpt_dir, ignore_eos=True).generate(PROMPT, 7)
    assert (hf.num_tokens, hf.nfe, hf.nfe_prefill) == (7, 6, 1)
    metrics = forward_metrics([hf, hf])
    assert metrics["tpf"] == 7 / 6 and metrics["tpf_prefill"] == 1.0
    assert "tpf_commit" not in metrics and "tpf_ceiling" not in metrics  # no blocks: no commit, no ceiling


def test_speculative_engine_counts_target_forwards_after_its_prefill(ar_ckpt_dir, dlm_dir):
    """dflash: the first target forward carries the prompt and verifies the first draft (the prefill); nfe is
    every later one. The acceptance length counts all target forwards (each verifies a draft)."""
    from orl.engines.dflash import DFlashEngine
    from orl.eval.speculative import acceptance_length

    engine = DFlashEngine(target_dir=ar_ckpt_dir, drafter_dir=dlm_dir, ignore_eos=True)
    calls, drafts = Calls(engine.ckpt.model), Calls(engine.drafter.model)
    gen = engine.generate(PROMPT, 12)
    assert gen.num_tokens == 12 and gen.nfe_prefill == 1
    assert calls.n == gen.nfe + gen.nfe_prefill and drafts.n == gen.draft_forwards
    # each target forward yields its accepted drafts and one token of its own
    assert gen.nfe + gen.nfe_prefill + gen.extra["accepted_tokens"] == 12
    assert acceptance_length([gen]) == pytest.approx(12 / (gen.nfe + 1))
    assert forward_metrics([gen])["tpf_prefill"] == pytest.approx(12 / (gen.nfe + 1))


@pytest.mark.parametrize("engine_name", ["dlmrt-eager", "reference"])
def test_dllm_counts_blocks_and_tpf_commit(dlm_dir, engine_name):
    from orl.engines.registry import diffusion_engine

    ckpt = load_checkpoint(dlm_dir)
    calls = Calls(ckpt.model)
    engine = diffusion_engine(engine_name, ckpt, policy=Policy.parse("threshold:0.5"), ignore_eos=True)
    gen = engine.generate(PROMPT, 18)
    assert gen.num_tokens == 18 and gen.block_size == 4
    assert gen.blocks == math.ceil(18 / 4)  # decoded to the budget: every planned block
    assert gen.blocks <= gen.nfe  # a block needs at least one forward
    if engine_name == "dlmrt-eager":
        assert gen.nfe_prefill == 1 and gen.blocks == len(gen.extra["block_nfe"])
        assert calls.n == gen.nfe + gen.nfe_prefill  # the prefill, then every counted step
    else:
        assert gen.nfe_prefill == 0  # recomputes the prompt at every step: no prefill forward
    metrics = forward_metrics([gen])
    assert metrics["tpf_commit"] == pytest.approx(18 / (gen.nfe + gen.blocks))
    assert metrics["tpf_ceiling"] == pytest.approx(18 / gen.blocks)
    assert metrics["tpf_ceiling"] >= metrics["tpf"]
    assert metrics["block_size"] == 4 and metrics["blocks_mean"] == gen.blocks


def test_dllm_decodes_at_a_block_size_other_than_its_own(dlm_dir):
    """The profile's block size per suite (--block-size): both decoders agree at it, and the ceiling moves."""
    from orl.engines.registry import build_engine, diffusion_engine
    from orl.errors import InputError

    ckpt = load_checkpoint(dlm_dir)
    policy = Policy.parse("threshold:0.5")
    ref = diffusion_engine("reference", ckpt, policy=policy, block_size=8).generate(PROMPT, 20)
    dl = diffusion_engine("dlmrt-eager", ckpt, policy=policy, block_size=8).generate(PROMPT, 20)
    assert (dl.token_ids, dl.nfe, dl.blocks) == (ref.token_ids, ref.nfe, ref.blocks)
    assert dl.block_size == 8 and dl.blocks <= math.ceil(20 / 8)
    fixed = diffusion_engine(
        "dlmrt-eager", ckpt, policy=Policy.parse("fixed:1"), ignore_eos=True, block_size=8
    )
    gen = fixed.generate(PROMPT, 16)
    assert (gen.blocks, gen.nfe) == (2, 16)  # one commit per step: a whole block of 8 per block
    with pytest.raises(InputError, match="--block-size"):
        build_engine("hf", dlm_dir, block_size=8)


def _as_older(records: list[dict], system: str) -> None:
    """`system`'s quality records as they were written before forwards were counted one way: no
    nfe_prefill and no blocks, per problem or as a metric."""
    for record in records:
        if (record["kind"], record["system"]) == ("quality", system):
            for entry in record["per_problem"] or []:
                entry.pop("nfe_prefill", None)
                entry.pop("blocks", None)
            for name in ("nfe_prefill_mean", "tpf_prefill", "tpf_commit", "tpf_ceiling"):
                record["metrics"].pop(name, None)


def test_tables_show_the_new_columns_and_mark_older_records():
    """The committed tiny records count forwards one way: a block decoder's line shows tpf_ceiling =
    Σ tokens / Σ blocks of its test record (with its interval). Records made before nfe_prefill was
    recorded give "—" in the new columns, and their lines say so."""
    from orl.records import load_record_tree, record_split
    from orl.report.claims import DEFAULT_CLAIMS_PATH, load_claims
    from orl.report.measure import LEGACY_TPF_NOTE
    from orl.report.tables import build_table

    records = load_record_tree(REPO / "results" / "tiny")
    claims = load_claims(DEFAULT_CLAIMS_PATH)
    table = build_table(1, records, claims)
    for column in ("tpf_ceiling", "tpf_ceiling_lo", "tpf_ceiling_hi", "tpf_prefill", "tpf_commit"):
        assert column in table.columns
    line = table[(table["system"] == "dLLM base") & (table["suite"] == "tinycode")].iloc[0]
    (record,) = [
        r
        for r in records
        if (r["kind"], r["system"], r["suite"], r["status"])
        == ("quality", "dLLM base", "tinycode", "measured")
        and record_split(r) == "test"
    ]
    entries = record["per_problem"]
    tokens, blocks = sum(e["tokens"] for e in entries), sum(e["blocks"] for e in entries)
    assert line["tpf_ceiling"] == pytest.approx(tokens / blocks)
    assert line["tpf_ceiling_lo"] <= line["tpf_ceiling"] <= line["tpf_ceiling_hi"]
    assert line["tpf_commit"] == pytest.approx(tokens / (sum(e["nfe"] for e in entries) + blocks))
    assert LEGACY_TPF_NOTE not in (line["note"] or "")
    assert not any(LEGACY_TPF_NOTE in note for note in table.attrs["notes"])

    older = copy.deepcopy(records)
    _as_older(older, "dLLM + ORL")
    table = build_table(1, older, claims)
    orl = table[(table["status"] == "measured") & (table["system"] == "dLLM + ORL")]
    assert len(orl) and orl["tpf_ceiling"].isna().all() and orl["tpf_prefill"].isna().all()
    assert orl["note"].str.contains(LEGACY_TPF_NOTE, regex=False).all()
    base = table[(table["status"] == "measured") & (table["system"] == "dLLM base")]
    assert (
        base["tpf_ceiling"].notna().all()
        and not base["note"].str.contains(LEGACY_TPF_NOTE, regex=False).any()
    )
    assert any("before every system's forwards were counted one way" in note for note in table.attrs["notes"])
