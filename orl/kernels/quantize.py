"""Whole-model NVFP4: quantize a model's linears in place, load quantized state dicts, count bytes.

A quantized checkpoint is an ordinary checkpoint directory whose config.json carries

    "quantization_config": {"quant_method": "nvfp4", "group_size": 16,
                            "mode": "w4a16", "ignore": ["lm_head", ...]}

and whose state dict holds, for each quantized linear `<name>`, the tensors
`<name>.weight` (uint8), `<name>.weight_scale` (E4M3) and `<name>.weight_scale_2`
(FP32). Embeddings and the LM head stay in high precision by default: they are
looked up or read once per token, and the LM head decides every committed token.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn

from orl.errors import CheckpointError, InputError
from orl.kernels.linear import MODES, NVFP4Linear
from orl.kernels.nvfp4 import BLOCK_SIZE, SCALE_DTYPE

QUANT_METHOD = "nvfp4"
# The residual adapter (docs/method.md §2) stays in high precision: d×d twice, and a fresh one is all zeros.
DEFAULT_SKIP = ("embed", "lm_head", "residual_adapter")


def _replace_submodule(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def nvfp4_linear_bytes(layer: NVFP4Linear) -> int:
    """Bytes of the quantized weight: packed codes + block scales + tensor scale (no bias)."""
    return sum(t.numel() * t.element_size() for t in (layer.weight, layer.weight_scale, layer.weight_scale_2))


def bf16_linear_bytes(layer: nn.Module) -> int:
    """Bytes the same weight takes in bf16 (2 bytes per value)."""
    return 2 * layer.in_features * layer.out_features


def weight_bytes(model: nn.Module) -> dict:
    """Memory of the quantized linears against their bf16 size, and of everything else.

    Returns quantized_linears, quantized_bytes, quantized_bf16_bytes, weight_bytes_ratio
    (quantized / bf16; 0.28125 plus 4 bytes per layer for 16-value blocks) and
    other_bytes (all other parameters and buffers, shared tensors counted once).
    """
    layers = [m for m in model.modules() if isinstance(m, NVFP4Linear)]
    quantized = sum(nvfp4_linear_bytes(m) for m in layers)
    bf16 = sum(bf16_linear_bytes(m) for m in layers)
    counted = {id(t) for m in layers for t in (m.weight, m.weight_scale, m.weight_scale_2)}
    seen: set[int] = set()
    other = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) in counted or tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        other += tensor.numel() * tensor.element_size()
    return {
        "quantized_linears": len(layers),
        "quantized_bytes": quantized,
        "quantized_bf16_bytes": bf16,
        "weight_bytes_ratio": quantized / bf16 if bf16 else None,
        "other_bytes": other,
    }


def quantize_model(
    model: nn.Module,
    *,
    skip: Iterable[str] = DEFAULT_SKIP,
    mode: str = "w4a16",
    backend: str | None = None,
) -> dict:
    """Replace, in place, every nn.Linear whose qualified name contains no `skip` entry by an NVFP4Linear.

    Linears whose in_features is not a multiple of 16 cannot be blocked and stay as
    they are; they are listed under "not_quantizable" with the reason. Returns a
    report: mode, quantized names, ignore (names kept in high precision, ready for
    quantization_config), not_quantizable, and the byte counts of `weight_bytes`.
    """
    if mode not in MODES:
        raise InputError(f"quantize_model: mode {mode!r} is not one of {MODES}")
    skip = (skip,) if isinstance(skip, str) else tuple(skip)
    quantized: list[str] = []
    ignored: list[str] = []
    not_quantizable: dict[str, str] = {}
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear):
            continue
        if any(entry in name for entry in skip):
            ignored.append(name)
            continue
        if module.in_features % BLOCK_SIZE:
            ignored.append(name)
            not_quantizable[name] = f"in_features={module.in_features} is not a multiple of {BLOCK_SIZE}"
            continue
        layer = NVFP4Linear.from_linear(module, mode=mode, backend=backend, name=f"{name}.weight")
        _replace_submodule(model, name, layer)
        quantized.append(name)
    return {
        "quant_method": QUANT_METHOD,
        "group_size": BLOCK_SIZE,
        "mode": mode,
        "quantized": quantized,
        "ignore": ignored,
        "not_quantizable": not_quantizable,
        **weight_bytes(model),
    }


def quantization_config(report: Mapping) -> dict:
    """The config.json entry for a model quantized by `quantize_model` (pass its report)."""
    return {
        "quant_method": QUANT_METHOD,
        "group_size": BLOCK_SIZE,
        "mode": report["mode"],
        "ignore": list(report["ignore"]),
    }


def check_quantization_config(config: Mapping, source: str = "config.json") -> dict:
    """Validate a config.json "quantization_config" entry; return it with defaults filled.

    Raises CheckpointError naming `source` and the field on anything this harness
    cannot load.
    """
    where = f"{source}: quantization_config"
    if not isinstance(config, Mapping):
        raise CheckpointError(f"{where}: expected an object, got {type(config).__name__}")
    if config.get("quant_method") != QUANT_METHOD:
        raise CheckpointError(
            f"{where}.quant_method: expected {QUANT_METHOD!r}, got {config.get('quant_method')!r}"
        )
    if config.get("group_size", BLOCK_SIZE) != BLOCK_SIZE:
        raise CheckpointError(f"{where}.group_size: expected {BLOCK_SIZE}, got {config.get('group_size')!r}")
    mode = config.get("mode", "w4a16")
    if mode not in MODES:
        raise CheckpointError(f"{where}.mode: expected one of {MODES}, got {mode!r}")
    ignore = config.get("ignore", [])
    if not isinstance(ignore, list) or not all(isinstance(n, str) for n in ignore):
        raise CheckpointError(f"{where}.ignore: expected a list of module names, got {ignore!r}")
    return {"quant_method": QUANT_METHOD, "group_size": BLOCK_SIZE, "mode": mode, "ignore": list(ignore)}


def _expect(state_dict: Mapping, key: str, dtype: torch.dtype, shape: tuple | None, source: str) -> None:
    if key not in state_dict:
        raise CheckpointError(f"{source}: {key}: missing; expected {dtype} {shape}")
    tensor = state_dict[key]
    if tensor.dtype != dtype:
        raise CheckpointError(f"{source}: {key}: expected dtype {dtype}, got {tensor.dtype}")
    if shape is None and tensor.numel() != 1:
        raise CheckpointError(f"{source}: {key}: expected one value, got shape {tuple(tensor.shape)}")
    if shape is not None and tuple(tensor.shape) != shape:
        raise CheckpointError(f"{source}: {key}: expected shape {shape}, got {tuple(tensor.shape)}")


def prepare_model_for_nvfp4_state_dict(
    model: nn.Module,
    state_dict: Mapping[str, torch.Tensor],
    mode: str = "w4a16",
    *,
    backend: str | None = None,
    source: str = "model.safetensors",
) -> list[str]:
    """Swap in empty NVFP4Linear modules wherever `state_dict` has `<name>.weight_scale`.

    Afterwards `model.load_state_dict(state_dict)` fills them. Every quantized
    entry is checked first (dtype and shape of weight, weight_scale, weight_scale_2
    against the module's in/out features); a mismatch is a CheckpointError naming
    `source` and the key. Returns the names of the swapped modules.
    """
    if mode not in MODES:
        raise CheckpointError(f"{source}: quantization mode {mode!r} is not one of {MODES}")
    suffix = ".weight_scale"
    names = sorted(key[: -len(suffix)] for key in state_dict if key.endswith(suffix))
    if "weight_scale" in state_dict:
        raise CheckpointError(f"{source}: weight_scale: the root module cannot be an NVFP4 linear")
    for name in names:
        try:
            module = model.get_submodule(name)
        except AttributeError:
            raise CheckpointError(f"{source}: {name}{suffix}: the model has no module {name!r}") from None
        if not isinstance(module, nn.Linear | NVFP4Linear):
            raise CheckpointError(
                f"{source}: {name}{suffix}: module {name!r} is a {type(module).__name__}, expected nn.Linear"
            )
        n, k = module.out_features, module.in_features
        if k % BLOCK_SIZE:
            raise CheckpointError(
                f"{source}: {name}{suffix}: in_features={k} of {name!r} is not a multiple of {BLOCK_SIZE}"
            )
        _expect(state_dict, f"{name}.weight", torch.uint8, (n, k // 2), source)
        _expect(state_dict, f"{name}.weight_scale", SCALE_DTYPE, (n, k // BLOCK_SIZE), source)
        _expect(state_dict, f"{name}.weight_scale_2", torch.float32, None, source)
        if isinstance(module, NVFP4Linear):
            continue
        device = module.weight.device
        layer = NVFP4Linear(
            k,
            n,
            bias=module.bias is not None,
            mode=mode,
            backend=backend,
            device=device,
            dtype=module.weight.dtype,
        )
        _replace_submodule(model, name, layer)
    return names
