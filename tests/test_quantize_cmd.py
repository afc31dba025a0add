"""`orl quantize`: an NVFP4 checkpoint is a directory like any other."""

from __future__ import annotations

import json

import torch

from orl.cli import main


def test_quantized_checkpoint_loads_and_generates(smoke_models, tmp_path, capsys):
    from orl.decoding import Policy
    from orl.engines.reference import ReferenceDiffusion
    from orl.kernels.linear import NVFP4Linear
    from orl.kernels.quantize import weight_bytes
    from orl.model.checkpoint import load_checkpoint

    out = tmp_path / "nvfp4"
    assert main(["quantize", str(smoke_models[1]), "--format", "nvfp4", "--out", str(out)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("weight_bytes_ratio=") and float(last.split("=")[1]) <= 0.30
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "nvfp4"

    ckpt = load_checkpoint(out)
    assert ckpt.precision == "nvfp4-w4a16"
    linears = [m for m in ckpt.model.modules() if isinstance(m, NVFP4Linear)]
    assert len(linears) == 7 * ckpt.model.config.num_hidden_layers  # q, k, v, o, gate, up, down
    assert weight_bytes(ckpt.model)["weight_bytes_ratio"] <= 0.30
    assert isinstance(ckpt.model.lm_head, torch.nn.Linear)  # the head stays in high precision

    # Same policy code, quantized weights: it decodes, and mostly agrees with the float model.
    float_ckpt = load_checkpoint(smoke_models[1])
    prompt = 'def f(x):\n    """Return x plus 3."""\n'
    quantized = ReferenceDiffusion(ckpt, Policy("fixed", 1)).generate(prompt, 16)
    reference = ReferenceDiffusion(float_ckpt, Policy("fixed", 1)).generate(prompt, 16)
    assert quantized.nfe >= 1 and len(quantized.token_ids) == len(reference.token_ids)


def test_quantizing_twice_is_refused(smoke_models, tmp_path, capsys):
    out = tmp_path / "q1"
    assert main(["quantize", str(smoke_models[1]), "--out", str(out)]) == 0
    assert main(["quantize", str(out), "--out", str(tmp_path / "q2")]) == 2
    assert "already quantized" in capsys.readouterr().err
