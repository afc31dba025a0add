"""NVFP4Linear, backend selection, the native call, whole-model quantization and state dicts."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from orl.errors import CheckpointError, ConfigError
from orl.kernels import linear as linear_mod
from orl.kernels.linear import (
    DeviceInfo,
    NVFP4Linear,
    dense_weight,
    native_nvfp4_matmul,
    select_backend,
    swizzle_block_scales,
)
from orl.kernels.nvfp4 import quantize_nvfp4
from orl.kernels.quantize import (
    check_quantization_config,
    prepare_model_for_nvfp4_state_dict,
    quantization_config,
    quantize_model,
    weight_bytes,
)

CPU = DeviceInfo("cpu", None, triton_available=True, triton_interpreted=False, torch_fp4_matmul=False)
HOPPER = DeviceInfo("cuda", (9, 0), triton_available=True, triton_interpreted=False, torch_fp4_matmul=True)
BLACKWELL = dataclasses.replace(HOPPER, capability=(10, 0))
RTX5090 = dataclasses.replace(HOPPER, capability=(12, 0))


@pytest.fixture(autouse=True)
def _no_backend_env(monkeypatch):
    monkeypatch.delenv("ORL_NVFP4_BACKEND", raising=False)


def _select(mode, info, requested="auto", k=256, n=128):
    return select_backend(mode, info, in_features=k, out_features=n, requested=requested)


# ----------------------------------------------------------------- backend selection


def test_cpu_selects_reference_even_under_the_interpreter():
    assert _select("w4a16", CPU).name == "reference"
    choice = _select("w4a4", dataclasses.replace(CPU, triton_interpreted=True))
    assert choice.name == "reference" and "no CUDA device" in choice.reason


def test_blackwell_w4a4_selects_native():
    for info in (BLACKWELL, RTX5090):
        choice = _select("w4a4", info)
        assert choice.name == "native" and ">= 10.0" in choice.reason


def test_blackwell_w4a16_keeps_activations_and_selects_triton():
    choice = _select("w4a16", BLACKWELL)
    assert choice.name == "triton" and "quantizes them (W4A4)" in choice.reason


def test_hopper_selects_triton_and_says_why_not_native():
    choice = _select("w4a4", HOPPER)
    assert choice.name == "triton" and "capability 9.0 < 10.0" in choice.reason


def test_fallbacks_on_blackwell_without_support():
    no_fp4 = dataclasses.replace(BLACKWELL, torch_fp4_matmul=False)
    assert _select("w4a4", no_fp4).name == "triton"
    assert "torch build lacks" in _select("w4a4", no_fp4).reason
    assert _select("w4a4", BLACKWELL, k=48).name == "triton"  # K % 32 != 0
    no_triton = dataclasses.replace(HOPPER, triton_available=False)
    choice = _select("w4a16", no_triton)
    assert choice.name == "reference" and "triton is not installed" in choice.reason


def test_forcing_a_backend():
    assert _select("w4a16", BLACKWELL, "reference").name == "reference"
    assert _select("w4a16", dataclasses.replace(CPU, triton_interpreted=True), "triton").name == "triton"
    with pytest.raises(ConfigError, match="backend=native was requested but cannot run: no CUDA device"):
        _select("w4a4", CPU, "native")
    with pytest.raises(ConfigError, match="backend=triton was requested.*TRITON_INTERPRET is not set"):
        _select("w4a16", CPU, "triton")
    with pytest.raises(ConfigError, match="expected one of auto, native, triton, reference"):
        _select("w4a16", CPU, "cutlass")
    with pytest.raises(ConfigError, match="mode 'w8a8'"):
        _select("w8a8", CPU)


def test_layer_asks_the_device_and_honours_the_environment(monkeypatch):
    monkeypatch.setattr(linear_mod, "probe_device", lambda device: BLACKWELL)
    layer = NVFP4Linear(256, 128, mode="w4a4")
    assert layer.backend == "native" and "10.0" in layer.backend_reason
    monkeypatch.setenv("ORL_NVFP4_BACKEND", "reference")
    layer.set_backend(None)
    assert layer.backend == "reference" and layer.backend_reason.startswith("forced")
    layer.set_backend("triton")  # an argument beats the environment
    assert layer.backend == "triton"
    monkeypatch.setattr(linear_mod, "probe_device", lambda device: HOPPER)
    assert NVFP4Linear(256, 128, mode="w4a4").backend == "reference"  # env still says reference


def test_forced_backend_waits_for_a_device_that_can_run_it(monkeypatch):
    monkeypatch.setattr(linear_mod, "probe_device", lambda device: CPU)
    monkeypatch.setenv("ORL_NVFP4_BACKEND", "native")
    layer = NVFP4Linear(256, 128, mode="w4a4")  # built on the CPU, as checkpoints load
    assert layer.backend == "unavailable" and "no CUDA device" in layer.backend_reason
    with pytest.raises(ConfigError, match="backend=native was requested but cannot run"):
        layer(torch.randn(2, 256))
    monkeypatch.setattr(linear_mod, "probe_device", lambda device: BLACKWELL)
    layer.float()  # any move re-selects
    assert layer.backend == "native"
    monkeypatch.setenv("ORL_NVFP4_BACKEND", "fastest")
    with pytest.raises(ConfigError, match="backend='fastest'"):
        NVFP4Linear(256, 128)


def test_layer_on_this_machine_reports_its_choice():
    layer = NVFP4Linear.from_linear(nn.Linear(64, 32, bias=False))
    expected = "triton" if torch.cuda.is_available() else "reference"
    assert layer.backend == expected and layer.backend_reason
    assert f"backend={expected}" in repr(layer)


# ----------------------------------------------------------------- the native call


def test_swizzle_matches_the_cublas_tile_formula():
    rows, cols = 130, 6  # pads to 256 x 8: two row tiles, two column tiles
    scales = torch.arange(rows * cols, dtype=torch.int32).reshape(rows, cols)
    flat = swizzle_block_scales(scales)
    assert flat.numel() == 256 * 8
    tiles_per_row = 2
    for r in range(rows):
        for c in range(cols):
            tile = (r // 128) * tiles_per_row + c // 4
            local = (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
            assert flat[tile * 512 + local].item() == scales[r, c].item()
    assert int((flat == 0).sum()) == 256 * 8 - rows * cols + 1  # padding is zero (plus the 0 entry)


def test_native_call_satisfies_torch_scaled_mm_contract_on_meta_tensors():
    # torch's meta kernel for _scaled_mm checks dtypes, layouts and the padded,
    # swizzled scale sizes of FP4 block scaling: our call must pass those checks.
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch build has no float4_e2m1fn_x2")
    m, k, n = 5, 256, 48
    q = quantize_nvfp4(torch.randn(n, k))
    x = torch.randn(2, m, k, device="meta", dtype=torch.bfloat16)
    y = native_nvfp4_matmul(x, q.packed.to("meta"), q.block_scale.to("meta"), q.tensor_scale.to("meta"))
    assert y.shape == (2, m, n) and y.dtype == torch.bfloat16


@pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (10, 0)),
    reason="native NVFP4 needs a CUDA device of capability >= 10.0 (Blackwell FP4 tensor cores); none here",
)
def test_native_matches_emulated_w4a4_on_blackwell():
    torch.manual_seed(0)
    dense = nn.Linear(512, 256, bias=False, device="cuda")
    native = NVFP4Linear.from_linear(dense, mode="w4a4")
    assert native.backend == "native"
    reference = NVFP4Linear.from_linear(dense, mode="w4a4", backend="reference")
    x = torch.randn(32, 512, device="cuda", dtype=torch.bfloat16)
    ref = reference(x).float()
    assert float((native(x).float() - ref).abs().max() / ref.abs().max()) <= 1e-2


# ----------------------------------------------------------------- the layer


def test_from_linear_reference_forward():
    torch.manual_seed(0)
    dense = nn.Linear(128, 48, bias=True)
    layer = NVFP4Linear.from_linear(dense)
    x = torch.randn(3, 7, 128)
    with torch.no_grad():
        y, y_dense = layer(x), dense(x)
    assert y.shape == (3, 7, 48)
    assert torch.allclose(y, nn.functional.linear(x, dense_weight(layer), dense.bias), rtol=1e-5, atol=1e-5)
    # Against the unquantized layer: 4-bit weights cost about a tenth of the output's size.
    rel = float((y - y_dense).norm() / y_dense.norm())
    assert 0.01 < rel < 0.2


def test_w4a4_differs_from_w4a16_by_the_activation_rounding():
    torch.manual_seed(1)
    dense = nn.Linear(64, 32, bias=False)
    x = torch.randn(4, 64)
    y16 = NVFP4Linear.from_linear(dense, mode="w4a16")(x)
    y4 = NVFP4Linear.from_linear(dense, mode="w4a4")(x)
    rel = float((y4 - y16).norm() / y16.norm())
    assert 0.01 < rel < 0.2


def test_dtype_moves_keep_the_format():
    torch.manual_seed(2)
    layer = NVFP4Linear.from_linear(nn.Linear(64, 32, bias=True))
    scale_2 = layer.weight_scale_2.clone()
    layer = layer.to(torch.bfloat16)
    assert layer.weight.dtype == torch.uint8
    assert layer.weight_scale.dtype == torch.float8_e4m3fn
    assert layer.weight_scale_2.dtype == torch.float32 and torch.equal(layer.weight_scale_2, scale_2)
    assert layer.bias.dtype == torch.bfloat16
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    assert layer(x).dtype == torch.bfloat16


def test_in_features_not_multiple_of_16_is_refused():
    with pytest.raises(Exception, match="in_features=40 is not a multiple of the block size 16"):
        NVFP4Linear(40, 8)


# ----------------------------------------------------------------- whole models


class Block(nn.Module):
    def __init__(self, d: int, ff: int) -> None:
        super().__init__()
        self.attn = nn.ModuleDict(
            {n: nn.Linear(d, d, bias=False) for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
        )
        self.mlp = nn.ModuleDict(
            {"gate_proj": nn.Linear(d, ff, bias=False), "up_proj": nn.Linear(d, ff, bias=False),
             "down_proj": nn.Linear(ff, d, bias=False)}
        )  # fmt: skip

    def forward(self, h):
        a = self.attn
        h = h + a["o_proj"](a["q_proj"](h) * torch.sigmoid(a["k_proj"](h)) + a["v_proj"](h))
        m = self.mlp
        return h + m["down_proj"](nn.functional.silu(m["gate_proj"](h)) * m["up_proj"](h))


class TinyModel(nn.Module):
    """Names like the harness's transformer: embed, layers.N.attn.q_proj, ..., lm_head."""

    def __init__(self, vocab: int = 50, d: int = 64, ff: int = 160, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, ff) for _ in range(layers))
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(h)


def test_quantize_model_replaces_linears_and_reports_bytes():
    torch.manual_seed(0)
    model = TinyModel()
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        before = model(ids)
    report = quantize_model(model, mode="w4a16")
    names = [
        f"layers.{i}.{p}"
        for i in range(2)
        for p in (
            "attn.q_proj",
            "attn.k_proj",
            "attn.v_proj",
            "attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        )
    ]
    assert sorted(report["quantized"]) == sorted(names)
    assert report["ignore"] == ["lm_head"] and report["not_quantizable"] == {}
    assert isinstance(model.lm_head, nn.Linear) and isinstance(model.embed, nn.Embedding)
    assert all(isinstance(model.get_submodule(n), NVFP4Linear) for n in names)
    assert report["quantized_linears"] == 14
    assert report["weight_bytes_ratio"] <= 0.30
    # 4 bits per value + one byte per 16 values = 4.5 bits, plus 4 bytes a layer.
    bf16 = 2 * sum(model.get_submodule(n).in_features * model.get_submodule(n).out_features for n in names)
    assert report["quantized_bf16_bytes"] == bf16
    assert report["quantized_bytes"] == bf16 * 4.5 / 16 + 4 * 14
    assert report["other_bytes"] == 4 * (50 * 64 + 64 * 50)  # embed + lm_head in float32
    with torch.no_grad():
        after = model(ids)
    assert float((after - before).norm() / before.norm()) < 0.2
    assert quantization_config(report) == {
        "quant_method": "nvfp4", "group_size": 16, "mode": "w4a16", "ignore": ["lm_head"]}  # fmt: skip
    assert weight_bytes(model)["weight_bytes_ratio"] == report["weight_bytes_ratio"]


def test_quantize_model_skips_unblockable_and_custom_skip():
    model = nn.Sequential()
    model.add_module("proj_a", nn.Linear(40, 32))  # 40 is not a multiple of 16
    model.add_module("proj_b", nn.Linear(32, 32))
    model.add_module("keep_me", nn.Linear(32, 16))
    report = quantize_model(model, skip=["keep"])
    assert report["quantized"] == ["proj_b"]
    assert report["ignore"] == ["proj_a", "keep_me"]
    assert "in_features=40" in report["not_quantizable"]["proj_a"]


def test_state_dict_round_trip_through_safetensors(tmp_path):
    torch.manual_seed(0)
    source = TinyModel()
    quantize_model(source, mode="w4a4")
    path = tmp_path / "model.safetensors"
    save_file(source.state_dict(), str(path))

    loaded = load_file(str(path))
    assert loaded["layers.0.attn.q_proj.weight"].dtype == torch.uint8
    assert loaded["layers.0.attn.q_proj.weight_scale"].dtype == torch.float8_e4m3fn
    assert loaded["layers.0.attn.q_proj.weight_scale_2"].dtype == torch.float32
    assert loaded["lm_head.weight"].dtype == torch.float32

    target = TinyModel()
    swapped = prepare_model_for_nvfp4_state_dict(target, loaded, mode="w4a4")
    assert len(swapped) == 14 and "lm_head" not in swapped
    target.load_state_dict(loaded)  # strict: every key matches
    assert target.layers[1].mlp["down_proj"].mode == "w4a4"
    ids = torch.randint(0, 50, (1, 12))
    assert torch.equal(target(ids), source(ids))


def test_tensor_scale_of_shape_one_loads():
    layer = NVFP4Linear.from_linear(nn.Linear(32, 16, bias=False))
    sd = {k: v.clone() for k, v in layer.state_dict().items()}
    sd["weight_scale_2"] = sd["weight_scale_2"].reshape(1)
    fresh = NVFP4Linear(32, 16)
    fresh.load_state_dict(sd)
    assert torch.equal(fresh.weight_scale_2, layer.weight_scale_2)


def test_bad_quantized_state_dicts_are_named():
    source = TinyModel()
    quantize_model(source)
    good = source.state_dict()

    bad = dict(good)
    bad["layers.0.mlp.up_proj.weight_scale"] = bad["layers.0.mlp.up_proj.weight_scale"][:, :2]
    with pytest.raises(
        CheckpointError, match=r"ck\.safetensors: layers\.0\.mlp\.up_proj\.weight_scale: expected shape"
    ):
        prepare_model_for_nvfp4_state_dict(TinyModel(), bad, source="ck.safetensors")

    bad = dict(good)
    bad["layers.0.attn.q_proj.weight"] = bad["layers.0.attn.q_proj.weight"].to(torch.int8)
    with pytest.raises(
        CheckpointError, match=r"layers\.0\.attn\.q_proj\.weight: expected dtype torch\.uint8"
    ):
        prepare_model_for_nvfp4_state_dict(TinyModel(), bad)

    bad = dict(good)
    del bad["layers.1.mlp.down_proj.weight_scale_2"]
    with pytest.raises(CheckpointError, match=r"layers\.1\.mlp\.down_proj\.weight_scale_2: missing"):
        prepare_model_for_nvfp4_state_dict(TinyModel(), bad)

    with pytest.raises(
        CheckpointError, match=r"layers\.7\.attn\.q_proj\.weight_scale: the model has no module"
    ):
        prepare_model_for_nvfp4_state_dict(TinyModel(), {"layers.7.attn.q_proj.weight_scale": torch.zeros(1)})

    with pytest.raises(CheckpointError, match="module 'embed' is a Embedding, expected nn.Linear"):
        prepare_model_for_nvfp4_state_dict(TinyModel(), {"embed.weight_scale": torch.zeros(1)})


def test_quantization_config_validation():
    ok = check_quantization_config({"quant_method": "nvfp4", "group_size": 16, "mode": "w4a4", "ignore": []})
    assert ok["mode"] == "w4a4"
    with pytest.raises(
        CheckpointError, match=r"cfg\.json: quantization_config\.quant_method: expected 'nvfp4'"
    ):
        check_quantization_config({"quant_method": "awq"}, "cfg.json")
    with pytest.raises(CheckpointError, match=r"quantization_config\.group_size: expected 16, got 32"):
        check_quantization_config({"quant_method": "nvfp4", "group_size": 32})
    with pytest.raises(CheckpointError, match=r"quantization_config\.mode"):
        check_quantization_config({"quant_method": "nvfp4", "mode": "w2a2"})
    with pytest.raises(CheckpointError, match=r"quantization_config\.ignore"):
        check_quantization_config({"quant_method": "nvfp4", "ignore": "lm_head"})


@pytest.mark.slow
def test_w4a4_layer_compiles_into_one_graph():
    # The engine compiles its decoding step with fullgraph=True; the layer's forward
    # (activation quantization included) must not break the graph.
    torch.manual_seed(3)
    layer = NVFP4Linear.from_linear(nn.Linear(64, 32), mode="w4a4")
    compiled = torch.compile(layer, fullgraph=True)
    x = torch.randn(3, 64)
    with torch.no_grad():
        assert torch.equal(compiled(x), layer(x))
