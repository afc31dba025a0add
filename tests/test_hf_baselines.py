"""The AR and speculative baselines: hf greedy, hf assisted generation, DFlash-style block drafting.

Speculative decoding with greedy acceptance is lossless, so every speculative
output must equal the target's own greedy tokens; what changes is the counted
number of target forwards.
"""

from __future__ import annotations

import pytest
import torch

from orl.errors import CheckpointError, InputError

from .conftest import small_config

PROMPTS_N = 4
MAX_NEW = 24


@pytest.fixture(scope="module")
def prompts():
    from orl.tasks import tinycode

    return [p["prompt"] for p in tinycode.eval_problems("easy")[:PROMPTS_N]]


@pytest.fixture(scope="module")
def smoke_draft(smoke_models, tmp_path_factory):
    """A 1-layer AR draft trained (seconds) with the smoke preset on the smoke AR model's tokenizer."""
    from orl.train.config import load_preset
    from orl.train.pretrain import train_ar

    out = tmp_path_factory.mktemp("draft") / "draft"
    train_ar(load_preset("smoke"), out, draft=True, tokenizer_path=smoke_models[0], progress=False)
    return out


@pytest.fixture(scope="module")
def reference_tokens(smoke_models, prompts):
    from orl.engines.reference import ReferenceAR
    from orl.model.checkpoint import load_checkpoint

    engine = ReferenceAR(load_checkpoint(smoke_models[0]))
    return [engine.generate(p, MAX_NEW).token_ids for p in prompts]


def _random_checkpoint(tokenizer, out, *, diffusion: bool, seed: int, **overrides):
    from orl.model.checkpoint import save_checkpoint
    from orl.model.transformer import Transformer

    torch.manual_seed(seed)
    config = small_config(tokenizer, **overrides)
    if diffusion:
        config.attention_mode, config.block_size = "block-causal", 4
    model = Transformer(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return save_checkpoint(model, tokenizer, out)


# --------------------------------------------------------------------------------------
# hf
# --------------------------------------------------------------------------------------


def test_assisted_draft_strategy_is_pinned_and_recorded():
    from transformers.utils import is_sklearn_available

    from orl.engines.hf import AssistConfig

    # Default: a constant draft of 5 tokens, no confidence stop, so transformers never re-tunes a
    # threshold inside a request, whether or not scikit-learn is installed.
    pinned = AssistConfig().strategy()
    assert pinned == {"num_assistant_tokens": 5, "schedule": "constant", "confidence_threshold": None,
                      "confidence_stop": False, "threshold_retuned_per_request": False,
                      "sklearn_installed": is_sklearn_available()}  # fmt: skip
    # transformers' own default (0.4) is re-tuned per request exactly when scikit-learn is installed.
    adaptive = AssistConfig(confidence_threshold=0.4).strategy()
    assert adaptive["confidence_stop"] and adaptive["threshold_retuned_per_request"] == is_sklearn_available()


def test_forward_counter_counts_every_call():
    from orl.engines.hf import ForwardCounter

    module = torch.nn.Linear(2, 2)
    counter = ForwardCounter(module)
    for _ in range(3):
        module(torch.zeros(1, 2))
    assert counter.count == 3
    counter.reset()
    module(torch.zeros(1, 2))
    assert counter.count == 1
    counter.remove()
    module(torch.zeros(1, 2))
    assert counter.count == 1


def test_hf_greedy_equals_reference_ar_with_tpf_one(smoke_models, prompts, reference_tokens):
    from orl.engines.hf import load_hf_engine

    engine = load_hf_engine(smoke_models[0])
    for prompt, expected in zip(prompts, reference_tokens, strict=True):
        gen = engine.generate(prompt, MAX_NEW)
        assert gen.token_ids == expected
        # counted: one target forward per token, the first of them the prefill
        assert gen.nfe == gen.num_tokens - 1 and gen.nfe_prefill == 1 and gen.draft_forwards == 0


def test_hf_assisted_is_lossless_and_counts_forwards(smoke_models, smoke_draft, prompts, reference_tokens):
    from orl.engines.hf import load_hf_engine

    engine = load_hf_engine(smoke_models[0], draft_dir=smoke_draft)
    assert engine.name == "hf-assisted"
    assert engine.describe().settings["draft_strategy"]["threshold_retuned_per_request"] is False
    tokens = nfe = drafts = 0
    for prompt, expected in zip(prompts, reference_tokens, strict=True):
        gen = engine.generate(prompt, MAX_NEW)
        assert gen.token_ids == expected
        assert gen.nfe_prefill == 1 and 0 <= gen.nfe < gen.num_tokens and gen.draft_forwards >= 1
        tokens, nfe, drafts = tokens + gen.num_tokens, nfe + gen.nfe, drafts + gen.draft_forwards
    # Each target forward (the prefill one too) commits at least one token; the drafts are not free.
    assert tokens / (nfe + PROMPTS_N) >= 1.0
    assert drafts >= nfe


def test_hf_rejects_diffusion_checkpoint_and_foreign_draft(smoke_models, ar_ckpt_dir):
    from orl.engines.hf import load_hf_engine

    with pytest.raises(CheckpointError, match="architectures"):
        load_hf_engine(smoke_models[1])
    with pytest.raises(CheckpointError, match="tokenizer differs"):
        load_hf_engine(smoke_models[0], draft_dir=ar_ckpt_dir)  # conftest's tokenizer, not the smoke one


# --------------------------------------------------------------------------------------
# dflash
# --------------------------------------------------------------------------------------


def test_dflash_is_lossless_and_tpf_above_one(smoke_models, prompts, reference_tokens):
    from orl.engines.dflash import DFlashEngine

    engine = DFlashEngine(target_dir=smoke_models[0], drafter_dir=smoke_models[1])
    tokens = nfe = 0
    for prompt, expected in zip(prompts, reference_tokens, strict=True):
        gen = engine.generate(prompt, MAX_NEW)
        assert gen.token_ids == expected
        assert gen.draft_forwards >= 1 and gen.nfe_prefill == 1
        assert gen.extra["accepted_tokens"] <= gen.extra["drafted_tokens"]
        # every verification commits its accepted drafts plus one bonus token
        assert gen.num_tokens <= gen.nfe + gen.nfe_prefill + gen.extra["accepted_tokens"]
        tokens, nfe = tokens + gen.num_tokens, nfe + gen.nfe + gen.nfe_prefill
    assert (
        tokens / nfe > 1.0
    )  # the dLLM converted from the target agrees with it often (every target forward)


def test_dflash_respects_budget_and_random_drafter_stays_lossless(
    smoke_models, prompts, reference_tokens, tmp_path
):
    from orl.engines.dflash import DFlashEngine
    from orl.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(smoke_models[0])
    drafter = _random_checkpoint(tokenizer, tmp_path / "rand-dlm", diffusion=True, seed=3)
    engine = DFlashEngine(target_dir=smoke_models[0], drafter_dir=drafter)
    gen = engine.generate(prompts[0], MAX_NEW)
    assert gen.token_ids == reference_tokens[0]  # a drafter that is always wrong costs forwards, not tokens
    short = DFlashEngine(target_dir=smoke_models[0], drafter_dir=smoke_models[1]).generate(prompts[1], 3)
    assert short.token_ids == reference_tokens[1][:3]


def test_dflash_rejects_bad_pairs(smoke_models, ar_ckpt_dir):
    from orl.engines.dflash import DFlashEngine

    with pytest.raises(InputError, match="--draft"):
        DFlashEngine(target_dir=smoke_models[0], drafter_dir=None)
    with pytest.raises(CheckpointError, match="drafter"):
        DFlashEngine(target_dir=smoke_models[0], drafter_dir=smoke_models[0])
    with pytest.raises(CheckpointError, match="target must be an AR"):
        DFlashEngine(target_dir=smoke_models[1], drafter_dir=smoke_models[1])
    with pytest.raises(CheckpointError, match="tokenizer differs"):
        DFlashEngine(target_dir=ar_ckpt_dir, drafter_dir=smoke_models[1])


def test_registry_builds_the_baselines(smoke_models, smoke_draft):
    from orl.engines.registry import build_engine

    assert build_engine("hf", smoke_models[0]).name == "hf"
    assert build_engine("hf-assisted", smoke_models[0], draft_dir=smoke_draft).name == "hf-assisted"
    assert build_engine("dflash", smoke_models[0], draft_dir=smoke_models[1]).name == "dflash"
