"""CPU linears through oneDNN with prepacked weights, chosen by measurement.

At batch 1 a decoding step is a stack of skinny matmuls (block-size rows against every
weight), and on the CPU their speed depends on the BLAS as much as on the chip. torch's
`F.linear` calls MKL; oneDNN (also inside torch) can be much faster once the weight is
reordered into its blocked layout. Measured on a 2-core AMD EPYC, 16 rows, fp32: 1024 -> 3072
takes 1.3-1.8 ms through MKL and 0.52-0.78 ms through packed oneDNN; Qwen3-0.6B's LM head 144 ms
against 36 ms. For small weights it is the other way round (a 64 x 64 linear: 5 us against
15 us, oneDNN's call overhead), and where MKL takes its fast path the gap may close. So the
engine measures:

    cpu_linear = "auto":   time every distinct linear shape of the model both ways, at the
                           step's row count, and take oneDNN only if it is clearly faster;
                 "aten":   F.linear (MKL), the default, bit for bit what aten training computes;
                 "onednn": always oneDNN.

Inductor lowers oneDNN's packed linear only for frozen weights, which the rollouts (weights
updated in place between refreshes) cannot have; so the packed call is a custom op, opaque to
the compiler, and the packed copy is redone whenever the weight's version counter moves: a
weight changed in place is never multiplied stale.

Where dlmrt's linears go through oneDNN, so does ORL's residual context z = P @ E (`onednn_matmul`,
the embedding's transpose packed once); a training run keeps torch's matmul for it.

Training takes the same choice (orl/train/pretrain.py, `--cpu-linear`): a swapped layer in train
mode multiplies unpacked (its weight changes every step) and so does its backward, dx = dy W and
dW = dy^T x. On the AMD machine a 4096-row fp32 linear of the tiny model runs 2.2x faster that
way; the whole training step 1.16-1.33x (results/training/cpu_linear_amd-epyc.json).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import nn

from orl.errors import InputError
from orl.kernels import CPU_LINEARS
from orl.model.sharing import copy_sharing_weights

# oneDNN must beat F.linear by this factor on the step's shapes for "auto" to take it: the
# timing is of single calls, and a near tie is not worth a second copy of every weight.
_AUTO_MARGIN = 0.9

# (id(weight), transposed) -> (weak reference to it, its version when packed, the packed copy)
_packed: dict[tuple[int, bool], tuple[weakref.ref, int, torch.Tensor]] = {}


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available()


def onednn_usable(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether onednn_linear runs here: CPU tensors in float32 or bfloat16, oneDNN built in."""
    return (
        torch.device(device).type == "cpu" and onednn_available() and dtype in (torch.float32, torch.bfloat16)
    )


def _swappable(module: nn.Module) -> bool:
    """The layers oneDNN takes over: plain bias-free nn.Linear (not subclasses such as quantized ones)."""
    return type(module) is nn.Linear and module.bias is None


def _packed_weight(weight: torch.Tensor, rows: int, transposed: bool = False) -> torch.Tensor:
    """oneDNN's blocked copy of `weight` (of its transpose with `transposed`), made once per weight and
    again after an in-place change."""
    key = (id(weight), transposed)
    entry = _packed.get(key)
    if entry is None or entry[0]() is not weight or entry[1] != weight._version:
        # The packed copy goes when the weight does (a later weight with the same id packs again).
        ref = weakref.ref(weight, lambda _, key=key: _packed.pop(key, None))
        source = weight.t().contiguous() if transposed else weight
        entry = (ref, weight._version, torch.ops.mkldnn._reorder_linear_weight(source, rows))
        _packed[key] = entry
    return entry[2]


@torch.library.custom_op("orl::onednn_linear", mutates_args=())
def onednn_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T through oneDNN (no bias: the models' linears have none)."""
    rows = x.numel() // x.shape[-1]
    return torch.ops.mkldnn._linear_pointwise(x, _packed_weight(weight, rows), None, "none", [], "")


@onednn_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.custom_op("orl::onednn_matmul", mutates_args=())
def onednn_matmul(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x @ b through oneDNN, on a packed copy of b's transpose: ORL's residual z = P @ E (b the embedding
    matrix E, V x d, x a block's distributions over V). MKL, which torch's matmul calls, splits such a
    product (16 rows, a reduction over V = 151,936) poorly: Qwen3-0.6B's took 78 ms in fp32 and 38 ms in
    bf16 through matmul, 30 and 15 ms through this, on a 2-core AMD EPYC (Zen 4; `python
    scripts/cpu_gemm_floor.py --residual`); reading E alone takes 18 and 9 ms. The packed transpose is a
    second copy of E."""
    packed = _packed_weight(b, x.numel() // x.shape[-1], transposed=True)
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


@onednn_matmul.register_fake
def _(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], b.shape[1]))


def _times_transposed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b.T for 2-D operands through oneDNN, b unpacked (in training it changes every step)."""
    return torch.ops.mkldnn._linear_pointwise(a.contiguous(), b.contiguous(), None, "none", [], "")


class _TrainingLinear(torch.autograd.Function):
    """y = x W^T with its backward, dx = dy W and dW = dy^T x (rows flattened), all three through
    oneDNN: on a CPU whose MKL path is slow the training step's matmuls are most of its time."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        rows = x.reshape(-1, x.shape[-1])
        return _times_transposed(rows, weight).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        x, weight = ctx.saved_tensors
        grad_rows = grad.reshape(-1, grad.shape[-1])
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = _times_transposed(grad_rows, weight.t()).view(x.shape)
        if ctx.needs_input_grad[1]:
            grad_w = _times_transposed(grad_rows.t(), x.reshape(-1, x.shape[-1]).t())
        return grad_x, grad_w


class OneDnnLinear(nn.Linear):
    """An nn.Linear whose forward runs through oneDNN; the parameter is the original's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Training: unpacked operands and a backward. Evaluation (decoding, rollouts): the packed
        # copy, kept until the weight changes.
        if self.training and torch.is_grad_enabled():
            return _TrainingLinear.apply(x, self.weight)
        return onednn_linear(x, self.weight)


def with_onednn_linears(model: nn.Module) -> nn.Module:
    """A copy of `model` whose bias-free nn.Linear layers run through oneDNN.

    The copy shares every parameter and buffer with `model` (so it follows in-place weight
    updates and costs no second set of weights beyond oneDNN's packed copies); `model` itself
    is untouched, so other users of the checkpoint keep F.linear.
    """
    return use_onednn_linears(copy_sharing_weights(model))


def use_onednn_linears(model: nn.Module) -> nn.Module:
    """`model` itself, its bias-free nn.Linear layers now running through oneDNN (forward and
    backward): for a model that has no other users, such as the one a training run builds."""
    for module in model.modules():
        if _swappable(module):
            module.__class__ = OneDnnLinear
    return model


@dataclass(frozen=True)
class LinearChoice:
    """What the engine multiplies with, and the measurement it was chosen by ("auto" only)."""

    backend: str  # "aten" or "onednn"
    requested: str
    aten_s: float | None = None  # one step's linears, summed over the model's shapes
    onednn_s: float | None = None
    shapes: list[list[int]] = field(default_factory=list)  # [out, in, count] per distinct shape

    def describe(self) -> str:
        """One line for a log: the path taken and, when measured, both timings."""
        if self.aten_s is None:
            return f"{self.backend} ({self.requested})"
        return (
            f"{self.backend} (auto: the model's linears once, {self.aten_s * 1e3:.1f} ms with F.linear, "
            f"{self.onednn_s * 1e3:.1f} ms with oneDNN)"
        )

    def to_record(self) -> dict:
        return {
            "backend": self.backend,
            "requested": self.requested,
            "aten_s": self.aten_s,
            "onednn_s": self.onednn_s,
            "shapes": self.shapes,
        }


def _best_time(fn, repeats: int) -> float:
    fn()  # warm-up: packing, oneDNN's primitive cache
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@torch.inference_mode()
def measure_linears(model: nn.Module, rows: int, repeats: int = 3) -> tuple[float, float, list[list[int]]]:
    """Seconds one step's linears take through F.linear and through oneDNN (best of `repeats`).

    Every distinct (out, in) shape is timed once at `rows` rows and weighted by how often it
    occurs, with the model's own weights, so the figure is the step's linear work only.
    """
    counts: dict[tuple[int, int], tuple[int, torch.Tensor]] = {}
    for module in model.modules():
        if _swappable(module):
            shape = tuple(module.weight.shape)
            count, weight = counts.get(shape, (0, module.weight))
            counts[shape] = (count + 1, weight)
    aten = onednn = 0.0
    for count, weight in counts.values():
        x = torch.randn(1, rows, weight.shape[1], dtype=weight.dtype, device=weight.device)
        aten += count * _best_time(partial(nn.functional.linear, x, weight), repeats)
        onednn += count * _best_time(partial(onednn_linear, x, weight), repeats)
        _packed.pop((id(weight), False), None)  # the engine packs again if it takes oneDNN
    shapes = [[out, inp, count] for (out, inp), (count, _) in counts.items()]
    return aten, onednn, shapes


def choose_linear(requested: str, model: nn.Module, rows: int, device: torch.device) -> LinearChoice:
    """Resolve `requested` (one of CPU_LINEARS) for a model on `device` decoding `rows` per step."""
    if requested not in CPU_LINEARS:
        raise InputError(f"cpu_linear: expected one of {CPU_LINEARS}, got {requested!r}")
    dtype = next(model.parameters()).dtype
    if requested == "aten" or not onednn_usable(device, dtype):
        if requested == "onednn":
            raise InputError(
                f"cpu_linear 'onednn' needs float32 or bfloat16 weights on the CPU with oneDNN "
                f"built in; got {dtype} on {device}"
            )
        return LinearChoice("aten", requested)
    if requested == "onednn":
        return LinearChoice("onednn", requested)
    aten_s, onednn_s, shapes = measure_linears(model, rows)
    backend = "onednn" if onednn_s < _AUTO_MARGIN * aten_s else "aten"
    return LinearChoice(backend, requested, aten_s, onednn_s, shapes)
