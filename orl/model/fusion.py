"""Fused projections for decoding: q/k/v as one GEMM and gate/up as one, made when an engine loads.

A Qwen3 decoder layer has seven linears: q, k, v, o in attention, gate, up, down in the MLP. q, k
and v read the same normalised input, and so do gate and up; stacking their weights along the
output dimension turns five GEMMs into two, so a layer runs four (qkv, o, gate_up, down), as
gpt-fast and vLLM do. At batch 1 each GEMM is a read of its weight plus a launch, so the fused
layer reads the same bytes in fewer, larger kernels.

Checkpoints keep Qwen3's layout and names: fusion happens on a copy of the module tree, never in
a state dict. The copy shares every parameter with the original model, and the fused weight
owns the storage: the original q/k/v (gate/up) parameters become row views of it, the same
Parameter objects as before. So

- no weight is held twice (the concatenation replaces the separate tensors);
- an in-place update of the original model (an ORL rollout decodes with the training model, whose
  optimizer steps write the parameters in place) is seen by the fused GEMM at once, and a
  compiled or captured graph keeps reading the same addresses;
- the original model still runs its seven linears unchanged and saves under its own names.

Something that replaces a parameter's tensor instead of writing into it (`module.to(...)`,
`load_state_dict(assign=True)`) breaks the aliasing; `Fusion.refresh`, which the engines call
before every request, copies such a tensor back into the fused rows and re-points it there (a
host check of a few pointers per layer), and refuses one that moved to another device or dtype.

NVFP4 (orl/kernels/linear.py): the packed codes [out, in/2] and block scales [out, in/16] are per
output row and concatenate like a dense weight; the per-tensor scale is one number per linear.
A group is fused when its per-tensor scales are equal (exact: the fused layer uses that scale),
as exporters that fuse q/k/v and gate/up at inference write them. When they differ, fusing would
mean re-rounding the E4M3 block scales to a common tensor scale, changing the weights; such a
group is left unfused and `Fusion.unfused` says which and why (the engines' settings record it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from orl.errors import ConfigError
from orl.kernels.linear import NVFP4Linear
from orl.model.sharing import copy_sharing_weights
from orl.model.transformer import MLP, Attention

# (name of the fused linear, the linears it replaces in output order): attention's, then the MLP's
GROUPS = (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("gate_up_proj", ("gate_proj", "up_proj")))
# The tensors of a linear that are stacked along the output dimension, per kind of linear.
_ROW_TENSORS = {"dense": ("weight", "bias"), "nvfp4": ("weight", "weight_scale")}


def _kind(module: nn.Module) -> str | None:
    if isinstance(module, NVFP4Linear):
        return "nvfp4"
    if isinstance(module, nn.Linear):
        return "dense"
    return None


def _get(module: nn.Module, name: str) -> torch.Tensor | None:
    """A parameter or buffer of `module` by name (None when absent, e.g. no bias)."""
    return module._parameters.get(name, module._buffers.get(name))


def _point(module: nn.Module, name: str, rows: torch.Tensor) -> None:
    """Make `module.<name>` a view of `rows`: a parameter keeps its object (optimizers hold it), a buffer
    is replaced."""
    if name in module._parameters:
        module._parameters[name].data = rows
    else:
        module._buffers[name] = rows


def _consecutive(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """The tensor stacking `tensors` along dim 0 when they already lie back to back in one storage (a model
    fused before, e.g. by another engine on the same checkpoint), else None."""
    first = tensors[0].detach()
    offset = first.storage_offset()
    for t in tensors:
        if (
            not t.is_contiguous()
            or t.dtype != first.dtype
            or t.device != first.device
            or t.shape[1:] != first.shape[1:]
            or t.storage_offset() != offset
            or t.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
        ):
            return None
        offset += t.numel()
    rows = sum(t.shape[0] for t in tensors)
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (rows, *first.shape[1:]))


@dataclass
class _Stack:
    """One stacked tensor (weight, bias or block scales) and the source tensors that are its row views."""

    fused: torch.Tensor
    sources: list[tuple[nn.Module, str, int, int]]  # (original linear, tensor name, first row, end row)

    @classmethod
    def build(cls, modules: list[nn.Module], name: str) -> _Stack:
        tensors = [_get(m, name) for m in modules]
        fused = _consecutive(tensors)
        if fused is None:
            fused = torch.cat([t.detach() for t in tensors], dim=0)
        sources, row = [], 0
        for module, tensor in zip(modules, tensors, strict=True):
            sources.append((module, name, row, row + tensor.shape[0]))
            row += tensor.shape[0]
        stack = cls(fused, sources)
        stack.refresh()
        return stack

    def refresh(self) -> int:
        """Re-point the sources that no longer alias their rows, their values copied in; returns how many."""
        moved = 0
        for module, name, start, end in self.sources:
            rows, tensor = self.fused[start:end], _get(module, name)
            if tensor.data_ptr() == rows.data_ptr() and tensor.shape == rows.shape:
                continue
            if tensor.device != rows.device or tensor.dtype != rows.dtype or tensor.shape != rows.shape:
                raise ConfigError(
                    f"fused projections: {type(module).__name__}.{name} is now {tensor.dtype} "
                    f"{tuple(tensor.shape)} on {tensor.device}, the fused weight {rows.dtype} "
                    f"{tuple(rows.shape)} on {rows.device}; the model was moved or converted "
                    "after the engine loaded it: build the engine again"
                )
            rows.copy_(tensor.detach())
            _point(module, name, rows)
            moved += 1
        return moved


@dataclass
class _Group:
    name: str  # qualified name of the fused linear, e.g. "model.layers.0.self_attn.qkv_proj"
    stacks: list[_Stack]


@dataclass
class Fusion:
    """What `fuse_projections` did: the fused groups (kept aliased by `refresh`) and those left alone."""

    groups: list[_Group] = field(default_factory=list)
    unfused: dict[str, str] = field(default_factory=dict)  # e.g. "model.layers.0.mlp.gate_up_proj" -> why not

    def refresh(self) -> int:
        """Restore the aliasing of every fused group (module docstring); returns the tensors re-pointed."""
        with torch.inference_mode(False), torch.no_grad():  # views a training model can use
            return sum(stack.refresh() for group in self.groups for stack in group.stacks)

    def to_record(self) -> dict:
        """For an engine's settings: counts per fused linear, and every group left unfused with its reason."""
        counts = {fused: sum(g.name.endswith("." + fused) for g in self.groups) for fused, _ in GROUPS}
        return {**counts, "unfused": dict(self.unfused)}


def _why_not(modules: list[nn.Module]) -> str | None:
    """Why these linears cannot be stacked exactly, or None when they can."""
    kinds = {_kind(m) for m in modules}
    if None in kinds or len(kinds) > 1:
        return f"linears of different kinds ({', '.join(sorted(type(m).__name__ for m in modules))})"
    if len({m.in_features for m in modules}) > 1:
        return "different input widths"
    if len({m.bias is None for m in modules}) > 1:
        return "some have a bias and some not"
    kind = kinds.pop()
    for name in _ROW_TENSORS[kind]:
        tensors = [_get(m, name) for m in modules if _get(m, name) is not None]
        if len({(t.device, t.dtype) for t in tensors}) > 1:
            return f"{name} tensors on different devices or in different dtypes"
    if kind == "nvfp4":
        if len({(m.mode, m.requested_backend) for m in modules}) > 1:
            return "NVFP4 layers in different modes or with different backends"
        scales = [m.weight_scale_2 for m in modules]
        if not all(torch.equal(scales[0], s) for s in scales[1:]):
            values = ", ".join(f"{float(s):.6g}" for s in scales)
            return (
                f"NVFP4 per-tensor scales differ ({values}): one fused layer would need its E4M3 block "
                "scales re-rounded to a common tensor scale, changing the weights"
            )
    return None


def _fused_linear(modules: list[nn.Module], stacks: dict[str, _Stack]) -> nn.Module:
    """The fused layer over the stacked tensors (built on the meta device, then given the real ones)."""
    first, out = modules[0], sum(m.out_features for m in modules)
    bias = first.bias is not None
    if isinstance(first, NVFP4Linear):
        layer = NVFP4Linear(first.in_features, out, bias=bias, mode=first.mode, device="meta")
        layer._buffers["weight_scale_2"] = first.weight_scale_2  # equal in every member (checked)
    else:
        with torch.device("meta"):
            layer = type(first)(first.in_features, out, bias=bias)
    for name, stack in stacks.items():
        if name in layer._parameters:
            layer._parameters[name] = nn.Parameter(stack.fused, requires_grad=False)
        else:
            layer._buffers[name] = stack.fused
    if isinstance(layer, NVFP4Linear):
        layer.set_backend(first.requested_backend)  # chosen again for the real device and the fused shape
    return layer


def fuse_projections(model: nn.Module) -> tuple[nn.Module, Fusion]:
    """A copy of `model` whose attention and MLP blocks run q/k/v and gate/up as one linear each.

    `model` is a Transformer, or a module holding one (a test double wrapping it). The copy shares
    every parameter and buffer with `model`; the fused tensors take over the storage of the ones they
    stack, which become row views of them (see the module docstring). `model` keeps its structure,
    names and outputs. Returns the copy and a Fusion to `refresh` before each request and to record.
    """
    # Normal tensors even when an engine is built inside inference mode: the original model's
    # parameters become views of the fused ones, and a training model must keep autograd on them.
    with torch.inference_mode(False), torch.no_grad():
        return _fuse(model)


def _fuse(model: nn.Module) -> tuple[nn.Module, Fusion]:
    fused_model = copy_sharing_weights(model)
    fusion = Fusion()
    blocks = {Attention: GROUPS[0], MLP: GROUPS[1]}
    for (name, block), copied in zip(model.named_modules(), list(fused_model.modules()), strict=True):
        if type(block) not in blocks:
            continue
        fused_name, members = blocks[type(block)]
        originals = [getattr(block, m) for m in members]
        qualified = f"{name}.{fused_name}"
        reason = _why_not(originals)
        if reason is not None:
            fusion.unfused[qualified] = reason
            continue
        names = [n for n in _ROW_TENSORS[_kind(originals[0])] if _get(originals[0], n) is not None]
        stacks = {n: _Stack.build(originals, n) for n in names}
        for m in members:
            delattr(copied, m)
        setattr(copied, fused_name, _fused_linear(originals, stacks))
        fusion.groups.append(_Group(qualified, list(stacks.values())))
    return fused_model, fusion
