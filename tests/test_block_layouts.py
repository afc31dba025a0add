"""Block layouts (ours / SDAR's absolute blocks) and fixed-length runs, the same in dlmrt and the reference
decoder."""

from __future__ import annotations

import pytest
import torch

from orl.decoding import Policy, decode_blocks, decode_rule, denoise_step, plan_blocks
from orl.decoding.eos import block_finished_with_eos
from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine
from orl.engines.reference import ReferenceDiffusion
from orl.errors import InputError
from orl.model.checkpoint import load_checkpoint, save_checkpoint
from orl.model.transformer import Transformer

from .conftest import small_config

B = 8
POLICIES = ["fixed:1", "fixed:3", "threshold:0.3", "strict-threshold:0.3", "factor:1.0"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def dlm_dir(tokenizer, tmp_path_factory):
    """A random block-diffusion model with a context long enough for 512-token runs."""
    torch.manual_seed(3)
    model = Transformer(
        small_config(tokenizer, attention_mode="block-causal", block_size=B, max_position_embeddings=768)
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("dlm"))


@pytest.fixture(scope="module")
def ours(dlm_dir):
    return load_checkpoint(dlm_dir)


@pytest.fixture(scope="module")
def sdar(dlm_dir):
    """The same weights decoded with SDAR's layout (docs/method.md §5)."""
    ckpt = load_checkpoint(dlm_dir)
    ckpt.model.config.block_layout = "absolute"
    return ckpt


def prompts_of_lengths(tokenizer, lengths):
    """Prompts of exactly these token lengths (one filler token repeated), so P mod B takes every case."""
    filler = tokenizer.encode("x")[0]
    return [tokenizer.decode([filler] * n) for n in lengths]


def run(engine, prompts, max_new):
    return [(g.token_ids, g.nfe) for g in (engine.generate(p, max_new) for p in prompts)]


def test_plans_put_blocks_after_the_prompt_or_at_multiples_of_b():
    ours = plan_blocks(13, 20, B, "after-prompt", 100)
    assert (ours.first, ours.mask_origin, ours.prefix, ours.blocks, ours.end) == (13, 13, 0, 3, 37)
    sdar = plan_blocks(13, 20, B, "absolute", 100)
    assert (sdar.first, sdar.mask_origin, sdar.prefix, sdar.blocks, sdar.end) == (8, 0, 5, 4, 40)
    assert plan_blocks(16, 8, B, "absolute", 100).prefix == 0  # a prompt of whole blocks: all prefilled
    assert plan_blocks(3, 8, B, "absolute", 100).first == 0  # shorter than a block: nothing prefilled
    with pytest.raises(InputError, match="max_position_embeddings = 32"):
        plan_blocks(13, 20, B, "absolute", 32)


@pytest.mark.parametrize("policy", POLICIES)
def test_absolute_layout_dlmrt_equals_the_reference_decoder(sdar, tokenizer, policy):
    ckpt = sdar
    prompts = prompts_of_lengths(tokenizer, [3, 8, 13, 16, 21])  # P < B, P = B, P mod B = 5, 0, 5
    ref = ReferenceDiffusion(ckpt, Policy.parse(policy))
    dl = DlmrtEngine(ckpt, Policy.parse(policy), compiled=False)
    assert (
        ref.rule.layout == "absolute" and ref.rule.alpha == 0.0 and not ref.rule.eos_fill
    )  # SDAR's defaults
    assert run(dl, prompts, 24) == run(ref, prompts, 24)


def test_absolute_layout_prefills_whole_blocks_and_commits_the_prompt_tail(sdar, tokenizer):
    ckpt = sdar
    engine = DlmrtEngine(ckpt, Policy.parse("fixed:1"), compiled=False)
    (prompt,) = prompts_of_lengths(tokenizer, [13])
    ids = tokenizer.encode(prompt)
    gen = engine.generate(prompt, 16)
    state = next(iter(engine._slots.values())).state
    assert state.seq[0, :13].tolist() == ids  # the prompt stays as it was
    assert gen.extra["first_block"] == 8 and gen.nfe_prefill == 1
    # First block: 3 masked positions (one step each with fixed:1), then a whole block of 8.
    assert gen.extra["block_nfe"][0] == 3 and gen.nfe == 3 + 8 * (len(gen.extra["block_nfe"]) - 1)
    (short,) = prompts_of_lengths(tokenizer, [3])
    assert engine.generate(short, 8).nfe_prefill == 0  # no whole prompt block: nothing to prefill


def test_an_end_token_in_the_prompt_tail_ends_nothing():
    # The absolute layout's first block: [prompt, prompt's <|im_end|>, MASK, MASK]; eos id 1.
    eos_ids = torch.tensor([1])
    tokens, masked = torch.tensor([[4, 1, 9, 9]]), torch.tensor([[False, False, True, True]])
    generated = masked.clone()
    logits = torch.zeros(1, 4, 10)
    logits[0, 2, 5], logits[0, 3, 6] = 9.0, 8.0
    out = denoise_step(Policy.parse("fixed:1"), logits, tokens, masked, eos_ids, generated=generated)
    assert out.masked[0].tolist() == [False, False, False, True]  # one commit, no fill from the prompt's eos
    leaked = denoise_step(Policy.parse("fixed:1"), logits, tokens, masked, eos_ids)
    assert leaked.masked[0].tolist() == [False, False, False, False]  # what the mask prevents
    done = torch.tensor([[4, 1, 5, 6]])
    assert not block_finished_with_eos(done, torch.zeros(1, 4, dtype=torch.bool), eos_ids, generated)[0]
    assert block_finished_with_eos(done, torch.zeros(1, 4, dtype=torch.bool), eos_ids)[0]


@pytest.mark.parametrize("layout", ["after-prompt", "absolute"])
def test_batched_decoding_equals_one_request_at_a_time(ours, sdar, tokenizer, layout):
    ckpt = sdar if layout == "absolute" else ours
    prompts = [tokenizer.encode(p) for p in prompts_of_lengths(tokenizer, [5, 11, 16])]
    rule = decode_rule(ckpt.model.config, tokenizer.eos_ids, Policy.parse("threshold:0.3"))
    together = decode_blocks(ckpt.model, prompts, rule, max_new_tokens=20, pad_id=tokenizer.pad_id)
    for i, ids in enumerate(prompts):
        alone = decode_blocks(ckpt.model, [ids], rule, max_new_tokens=20, pad_id=tokenizer.pad_id)
        assert together.completions[i] == alone.completions[0] and together.nfe[i] == alone.nfe[0]


@pytest.mark.parametrize("layout", ["after-prompt", "absolute"])
def test_ignore_eos_decodes_to_the_budget_with_counted_forwards(ours, sdar, tokenizer, layout):
    ckpt = sdar if layout == "absolute" else ours
    (prompt,) = prompts_of_lengths(tokenizer, [16])
    for spec, steps_per_block in (("fixed:1", 8), ("fixed:3", 3)):
        ref = ReferenceDiffusion(ckpt, Policy.parse(spec), ignore_eos=True)
        dl = DlmrtEngine(ckpt, Policy.parse(spec), compiled=False, ignore_eos=True)
        a, b = ref.generate(prompt, 40), dl.generate(prompt, 40)
        assert len(a.token_ids) == 40 and (a.token_ids, a.nfe) == (b.token_ids, b.nfe)
        assert a.nfe == 5 * steps_per_block and a.tpf == pytest.approx(40 / a.nfe)
        assert not ref.rule.eos_fill and not ref.rule.stop_at_eos


def test_dlmrt_equals_the_reference_decoder_on_a_512_token_run(ours, tokenizer):
    (prompt,) = prompts_of_lengths(tokenizer, [20])
    policy = Policy.parse("threshold:0.3")
    ref = ReferenceDiffusion(ours, policy, ignore_eos=True)
    dl = DlmrtEngine(
        ours, policy, ignore_eos=True, config=DlmrtConfig(mode="compile", compile_backend="aot_eager")
    )
    a, b = ref.generate(prompt, 512), dl.generate(prompt, 512)
    assert len(a.token_ids) == 512 and a.token_ids == b.token_ids and a.nfe == b.nfe


def test_compiled_chunks_serve_the_absolute_layout(sdar, tokenizer):
    ckpt = sdar
    prompts = prompts_of_lengths(tokenizer, [5, 13, 16])
    policy = Policy.parse("fixed:2")
    compiled = DlmrtEngine(ckpt, policy, config=DlmrtConfig(mode="compile", compile_backend="aot_eager"))
    eager = DlmrtEngine(ckpt, policy, compiled=False)
    assert run(compiled, prompts, 16) == run(eager, prompts, 16)
