"""oneDNN linears on the CPU (orl/kernels/onednn.py): equal to F.linear, follow in-place weight changes,
leave the checkpoint's model alone, decode like the reference decoder inside dlmrt's compiled chunk (the
residual context's z = P @ E through oneDNN too), and train (forward and backward) like F.linear."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from orl.decoding import Policy
from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine
from orl.engines.reference import ReferenceDiffusion
from orl.errors import InputError
from orl.kernels.onednn import (
    OneDnnLinear,
    choose_linear,
    onednn_available,
    onednn_linear,
    onednn_matmul,
    use_onednn_linears,
    with_onednn_linears,
)
from orl.model.checkpoint import load_checkpoint
from orl.tasks import load_suite
from orl.train.distributed import World
from orl.train.pretrain import training_linear

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN (mkldnn)"),
]


@pytest.mark.parametrize("shape", [(5, 64), (1, 16, 64), (2, 3, 64)])
def test_onednn_linear_equals_f_linear(shape):
    gen = torch.Generator().manual_seed(0)
    x, weight = torch.randn(shape, generator=gen), torch.randn(48, 64, generator=gen)
    out = onednn_linear(x, weight)
    assert out.shape == (*shape[:-1], 48)
    torch.testing.assert_close(out, nn.functional.linear(x, weight), rtol=1e-5, atol=1e-5)


def test_a_weight_changed_in_place_is_packed_again():
    gen = torch.Generator().manual_seed(1)
    x, weight = torch.randn(4, 32, generator=gen), torch.randn(16, 32, generator=gen)
    before = onednn_linear(x, weight)
    with torch.no_grad():
        weight.mul_(-2.0)  # what an optimizer step or a rollout's weight sync does
    torch.testing.assert_close(onednn_linear(x, weight), -2.0 * before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_onednn_matmul_is_the_residual_product_and_follows_the_embedding(dtype):
    """z = P @ E (a block's distributions over V by the embedding), E packed transposed once, again after
    an in-place change."""
    gen = torch.Generator().manual_seed(2)
    probs = torch.softmax(torch.randn(1, 16, 1000, generator=gen), dim=-1).to(dtype)
    embedding = torch.randn(1000, 96, generator=gen).to(dtype)
    out = onednn_matmul(probs, embedding)
    assert out.shape == (1, 16, 96) and out.dtype == dtype
    # bf16 operands, fp32 accumulation: only the output's rounding to bf16 (2^-9 relative) differs.
    rtol, atol = (1e-5, 1e-7) if dtype == torch.float32 else (1e-2, 1e-4)
    torch.testing.assert_close(out.float(), probs.float() @ embedding.float(), rtol=rtol, atol=atol)
    with torch.no_grad():
        embedding.mul_(-2.0)
    torch.testing.assert_close(onednn_matmul(probs, embedding), -2.0 * out, rtol=rtol, atol=atol)


def test_the_onednn_copy_shares_parameters_and_leaves_the_model_alone(smoke_models):
    model = load_checkpoint(smoke_models[1]).model
    clone = with_onednn_linears(model)
    assert {id(p) for p in clone.parameters()} == {id(p) for p in model.parameters()}
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is nn.Linear for m in linears)
    assert all(type(m) is OneDnnLinear for m in clone.modules() if isinstance(m, nn.Linear))
    ids = torch.tensor([[5, 9, 17, 33, 2, 40]])
    with torch.no_grad():
        torch.testing.assert_close(clone(ids), model(ids), rtol=1e-4, atol=1e-4)


def test_compiled_dlmrt_with_onednn_decodes_like_the_reference_decoder(smoke_models):
    ckpt = load_checkpoint(smoke_models[1])
    ckpt.model.config.residual_alpha = 0.5
    policy = Policy.parse("threshold:0.9")
    prompts = [p["prompt"] for p in load_suite("tinycode", difficulty="easy", limit=4)]
    config = DlmrtConfig(mode="compile", compile_backend="aot_eager", cpu_linear="onednn")
    engine = DlmrtEngine(ckpt, policy, config=config)
    assert engine.linear.backend == "onednn" and engine.describe().settings["cpu_linear"] == "onednn"
    assert type(ckpt.model.lm_head) is nn.Linear  # the checkpoint's own model keeps F.linear
    assert engine.model.residual_matmul is onednn_matmul and ckpt.model.residual_matmul is torch.matmul
    assert engine.describe().settings["residual_matmul"] == "onednn"
    reference = ReferenceDiffusion(ckpt, policy)
    for prompt in prompts:
        ours, ref = engine.generate(prompt, 32), reference.generate(prompt, 32)
        assert (ours.token_ids, ours.nfe) == (ref.token_ids, ref.nfe)


def test_auto_times_every_linear_shape_and_picks_one(smoke_models):
    model = load_checkpoint(smoke_models[1]).model
    choice = choose_linear("auto", model, rows=8, device=torch.device("cpu"))
    linears = sum(1 for m in model.modules() if isinstance(m, nn.Linear))
    assert sum(count for _, _, count in choice.shapes) == linears
    assert choice.aten_s > 0 and choice.onednn_s > 0 and choice.requested == "auto"
    assert choice.backend == ("onednn" if choice.onednn_s < 0.9 * choice.aten_s else "aten")
    assert choose_linear("aten", model, 8, torch.device("cpu")).aten_s is None  # nothing measured


def test_bad_cpu_linear_requests_are_refused(smoke_models):
    model = load_checkpoint(smoke_models[1]).model
    with pytest.raises(InputError, match="cpu_linear: expected one of"):
        choose_linear("mkl", model, 8, torch.device("cpu"))
    with pytest.raises(InputError, match="float32 or bfloat16"):
        choose_linear("onednn", model.to(torch.float64), 8, torch.device("cpu"))


def test_training_through_onednn_gives_f_linears_loss_and_gradients(smoke_models):
    """A training step of the smoke dLLM: in train mode the swapped layers run forward and backward
    through oneDNN (the backward's matmuls too), in eval mode through the packed copy."""
    model = load_checkpoint(smoke_models[1]).model.train()
    swapped = use_onednn_linears(copy.deepcopy(model)).train()
    ids = torch.tensor([[5, 9, 17, 33, 2, 40, 7, 11]])
    losses = []
    for net in (model, swapped):
        logits = net(ids)
        loss = nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)
    grads = [dict(net.named_parameters()) for net in (model, swapped)]
    for name, param in grads[0].items():
        torch.testing.assert_close(grads[1][name].grad, param.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert type(swapped.lm_head) is OneDnnLinear
    assert (
        "TrainingLinear" in type(swapped.lm_head(torch.randn(2, model.config.hidden_size)).grad_fn).__name__
    )
    with torch.no_grad():
        assert swapped.eval().lm_head(torch.randn(2, model.config.hidden_size)).grad_fn is None


def test_a_training_world_of_several_ranks_keeps_f_linear(smoke_models):
    model = load_checkpoint(smoke_models[1]).model
    two_ranks = World(rank=0, size=2)
    assert training_linear("auto", model, two_ranks, "/nonexistent").backend == "aten"
    with pytest.raises(InputError, match="one training process only"):
        training_linear("onednn", model, two_ranks, "/nonexistent")
    with pytest.raises(InputError, match="--cpu-linear: expected one of"):
        training_linear("mkl", model, World(), "/nonexistent")
