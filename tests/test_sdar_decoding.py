"""SDAR-family checkpoints decode as SDAR's own loop does (docs/method.md §5), in dlmrt and the reference
decoder.

The oracle is tests/real_checkpoints.py's `sdar_generate`: JetAstra/SDAR's block_diffusion_generate with
greedy sampling, run on transformers' own Qwen3 model (the SDAR checkpoint's Qwen3 twin) with 4-D block
masks. Ours run our model code on the SDARForCausalLM directory. SDAR's one-token-per-step schedules are
our `fixed:1` (low_confidence_static, steps = B) and `strict-threshold:τ` (low_confidence_dynamic,
steps = B: commit every masked position with confidence > τ, else the most confident one).
"""

from __future__ import annotations

import pytest
import torch

from orl.cli import main
from orl.decoding import Policy, cut_at_eos
from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine
from orl.engines.reference import ReferenceDiffusion
from orl.model.checkpoint import load_checkpoint

from .real_checkpoints import load_hf_qwen3, sdar_generate

PROMPTS = ["def add(a, b):", "x", "print(1)\nprint(2)\n", "for i in range(10):\n    total += i"]
MAX_NEW = 12


@pytest.fixture(scope="module")
def ours(sdar_ckpt):
    ckpt = load_checkpoint(sdar_ckpt.dir, dtype=torch.float32)
    assert (
        ckpt.model.config.block_layout == "absolute" and ckpt.model.config.block_size == sdar_ckpt.block_size
    )
    return ckpt


@pytest.fixture(scope="module")
def oracle(sdar_ckpt, ours):
    model = load_hf_qwen3(sdar_ckpt.hf_dir, torch.float32)
    tok, B = ours.tokenizer, sdar_ckpt.block_size
    cache = {}

    def run(prompt: str, strategy: str, threshold: float = 0.85):
        key = (prompt, strategy, threshold)
        if key not in cache:
            with torch.no_grad():
                out = sdar_generate(
                    model,
                    tok.encode(prompt),
                    mask_id=ours.model.config.mask_token_id,
                    gen_length=MAX_NEW,
                    block_length=B,
                    denoising_steps=B,
                    remasking_strategy=strategy,
                    confidence_threshold=threshold,
                    stop_ids=list(tok.eos_ids),
                )
            assert out.overwrites == 0  # one token per step never rewrites a committed position
            # SDAR's loop returns whole blocks; ours stop at the budget (a hard cap, as max_tokens is in
            # vLLM).
            cache[key] = (cut_at_eos(out.completion[:MAX_NEW], tok.eos_ids), out.denoise_forwards)
        return cache[key]

    return run


CASES = [
    ("fixed:1", "low_confidence_static", 0.85),
    ("strict-threshold:0.2", "low_confidence_dynamic", 0.2),
    ("strict-threshold:0.05", "low_confidence_dynamic", 0.05),
]


def test_prompt_lengths_cover_every_position_in_a_block(ours, sdar_ckpt):
    lengths = {len(ours.tokenizer.encode(p)) % sdar_ckpt.block_size for p in PROMPTS}
    assert len(lengths) >= 3, lengths  # the prompt's tail takes several sizes inside its block


@pytest.mark.parametrize("policy, strategy, threshold", CASES)
def test_reference_decoder_reproduces_sdars_loop(ours, oracle, policy, strategy, threshold):
    engine = ReferenceDiffusion(ours, Policy.parse(policy))
    for prompt in PROMPTS:
        gen = engine.generate(prompt, MAX_NEW)
        assert (gen.token_ids, gen.nfe) == oracle(prompt, strategy, threshold), prompt


@pytest.mark.parametrize("policy, strategy, threshold", CASES)
def test_dlmrt_reproduces_sdars_loop(ours, oracle, policy, strategy, threshold):
    eager = DlmrtEngine(ours, Policy.parse(policy), compiled=False)
    compiled = DlmrtEngine(
        ours, Policy.parse(policy), config=DlmrtConfig(mode="compile", compile_backend="aot_eager")
    )
    for prompt in PROMPTS:
        expected = oracle(prompt, strategy, threshold)
        for engine in (eager, compiled):
            gen = engine.generate(prompt, MAX_NEW)
            assert (gen.token_ids, gen.nfe) == expected, (engine.mode, prompt)


def test_a_threshold_that_commits_several_tokens_per_step_still_matches(ours, oracle):
    # With a low τ most steps commit more than one position: the dynamic branch of SDAR's rule.
    engine = ReferenceDiffusion(ours, Policy.parse("strict-threshold:0.05"))
    tokens = sum(len(engine.generate(p, MAX_NEW).token_ids) for p in PROMPTS)
    forwards = sum(engine.generate(p, MAX_NEW).nfe for p in PROMPTS)
    assert tokens > forwards  # TPF above 1: the branch was exercised, and the case above matched it


def test_orl_generate_on_an_sdar_directory(sdar_ckpt, ours, oracle, capsys):
    prompt = PROMPTS[0]
    tokens, nfe = oracle(prompt, "low_confidence_static")
    for engine in ("dlmrt-eager", "reference"):
        assert (
            main(
                [
                    "generate",
                    "--ckpt",
                    str(sdar_ckpt.dir),
                    "--engine",
                    engine,
                    "--policy",
                    "fixed:1",
                    "--dtype",
                    "float32",
                    "--max-new-tokens",
                    str(MAX_NEW),
                    "--prompt",
                    prompt,
                ]
            )
            == 0
        )
        last = capsys.readouterr().out.strip().splitlines()[-1]
        assert last == f"nfe={nfe} tokens={len(tokens)} tpf={len(tokens) / nfe:.3f}"


def test_the_budget_is_a_hard_cap(ours, sdar_ckpt):
    """Fixed-length runs return exactly the budget whatever the prompt's place in its block (SDAR's own loop
    would return whole blocks), and TPF counts the returned tokens over every forward spent."""
    budget = sdar_ckpt.block_size + 2  # not a multiple of B: the last block reaches past it in both layouts
    engines = [
        ReferenceDiffusion(ours, Policy.parse("fixed:1"), ignore_eos=True),
        DlmrtEngine(ours, Policy.parse("fixed:1"), compiled=False, ignore_eos=True),
    ]
    for prompt in PROMPTS[:3]:
        for engine in engines:
            gen = engine.generate(prompt, budget)
            assert gen.num_tokens == budget, (type(engine).__name__, prompt)
            assert gen.tpf == budget / gen.nfe
