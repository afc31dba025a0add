"""NVFP4Linear: a drop-in nn.Linear whose weight is stored in NVFP4.

Buffers follow the common checkpoint layout, so `state_dict()` is what a
quantized checkpoint stores:

    weight          uint8 [out, in/2]          two E2M1 codes per byte, even index low
    weight_scale    float8_e4m3fn [out, in/16] one scale per 16 inputs
    weight_scale_2  float32 []                 the per-tensor scale
    bias            optional, high precision

Modes: "w4a16" keeps activations in their own dtype; "w4a4" also quantizes the
activations to NVFP4 (dynamic per-tensor scale), as Blackwell's FP4 tensor cores do.

Backends, tried in this order by `select_backend`:

    native     torch._scaled_mm on FP4 operands with E4M3 block scales; CUDA capability
               >= 10.0 (Blackwell) and mode w4a4 only, because it quantizes activations
    triton     the W4A16 kernel in triton_w4a16.py (for w4a4: activations fake-quantized
               first); any CUDA device where triton imports
    reference  dequantize, then matmul in float32 (reference.py); works everywhere

`layer.backend` names the choice and `layer.backend_reason` says why. The choice is
made when the layer is built and again whenever it moves device, never inside
forward, so forward has no host synchronisation and compiles into one graph. Force
a backend with the `backend=` argument or the ORL_NVFP4_BACKEND environment variable
(auto | native | triton | reference). A forced backend that cannot run where the
weights are leaves `backend == "unavailable"` (the reason says why) and forward raises
ConfigError, until a move to a device that can run it; an unknown name raises at once.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import torch
from torch import nn

from orl.errors import ConfigError, InputError
from orl.kernels.nvfp4 import (
    BLOCK_SIZE,
    SCALE_DTYPE,
    NVFP4Tensor,
    dequantize_parts,
    quantize_nvfp4,
)
from orl.kernels.reference import dequantize_matmul, emulated_w4a4_matmul, fake_quantize_nvfp4

BACKENDS = ("native", "triton", "reference")
MODES = ("w4a16", "w4a4")
BACKEND_ENV = "ORL_NVFP4_BACKEND"


@dataclass(frozen=True)
class DeviceInfo:
    """What backend selection needs to know about the device holding the weights."""

    type: str  # "cpu", "cuda", ...
    capability: tuple[int, int] | None  # CUDA compute capability, None off CUDA
    triton_available: bool  # triton imports
    triton_interpreted: bool  # TRITON_INTERPRET=1: the Triton kernel runs on CPU tensors
    torch_fp4_matmul: bool  # this torch build has float4_e2m1fn_x2 and _scaled_mm


@dataclass(frozen=True)
class BackendChoice:
    name: str
    reason: str


def probe_device(device: torch.device) -> DeviceInfo:
    """Inspect `device` and the installed torch/triton (no kernels are launched)."""
    capability = None
    if device.type == "cuda" and torch.cuda.is_available():
        capability = tuple(torch.cuda.get_device_capability(device))
    triton_available = importlib.util.find_spec("triton") is not None
    return DeviceInfo(
        type=device.type,
        capability=capability,
        triton_available=triton_available,
        triton_interpreted=triton_available and os.environ.get("TRITON_INTERPRET", "0") == "1",
        torch_fp4_matmul=(
            hasattr(torch, "float4_e2m1fn_x2")
            and hasattr(torch, "_scaled_mm")
            and torch.version.cuda is not None
        ),
    )


def _native_blocker(mode: str, info: DeviceInfo, in_features: int, out_features: int) -> str | None:
    """Why the native FP4 path cannot run, or None when it can."""
    if mode != "w4a4":
        return (
            "mode w4a16 keeps activations in high precision, and the native FP4 matmul quantizes them (W4A4)"
        )
    if info.capability is None:
        return f"no CUDA device (weights on {info.type})"
    if info.capability < (10, 0):
        major, minor = info.capability
        return f"CUDA capability {major}.{minor} < 10.0 has no FP4 tensor cores"
    if not info.torch_fp4_matmul:
        return "this torch build lacks float4_e2m1fn_x2 / torch._scaled_mm"
    if in_features % 32 or out_features % 16:
        return (
            "native FP4 matmul needs in_features % 32 == 0 and out_features % 16 == 0, got "
            f"{in_features}x{out_features}"
        )
    return None


def _triton_blocker(info: DeviceInfo) -> str | None:
    if not info.triton_available:
        return "triton is not installed"
    if info.type == "cuda" and info.capability is not None:
        return None
    if info.type == "cpu" and info.triton_interpreted:
        return None
    return f"no CUDA device (weights on {info.type}) and TRITON_INTERPRET is not set"


def select_backend(
    mode: str,
    info: DeviceInfo,
    *,
    in_features: int,
    out_features: int,
    requested: str = "auto",
) -> BackendChoice:
    """Pick native -> triton -> reference for a layer; a pure function of its arguments.

    On the CPU "auto" picks the reference path even under TRITON_INTERPRET=1: the
    interpreter is for testing the kernel, not for running models.
    """
    if mode not in MODES:
        raise ConfigError(f"NVFP4Linear: mode {mode!r} is not one of {MODES}")
    if requested not in ("auto", *BACKENDS):
        raise ConfigError(
            f"{BACKEND_ENV} / backend={requested!r}: expected one of auto, {', '.join(BACKENDS)}"
        )

    native_blocker = _native_blocker(mode, info, in_features, out_features)
    triton_blocker = _triton_blocker(info)
    if requested == "native":
        if native_blocker:
            raise ConfigError(f"backend=native was requested but cannot run: {native_blocker}")
        return BackendChoice("native", "forced; FP4 tensor cores via torch._scaled_mm")
    if requested == "triton":
        if triton_blocker:
            raise ConfigError(f"backend=triton was requested but cannot run: {triton_blocker}")
        return BackendChoice("triton", "forced; Triton W4A16 kernel")
    if requested == "reference":
        return BackendChoice("reference", "forced; dequantize-then-matmul in float32")

    if native_blocker is None:
        major, minor = info.capability
        return BackendChoice("native", f"CUDA capability {major}.{minor} >= 10.0 with torch FP4 scaled_mm")
    if info.type == "cuda" and triton_blocker is None:
        return BackendChoice("triton", f"Triton W4A16 kernel; no native path: {native_blocker}")
    if info.type == "cuda":
        return BackendChoice("reference", f"dequantize-then-matmul; {triton_blocker}")
    return BackendChoice("reference", f"dequantize-then-matmul; no CUDA device (weights on {info.type})")


def swizzle_block_scales(scales: torch.Tensor) -> torch.Tensor:
    """Lay out [rows, K/16] block scales as cuBLAS's block-scaled GEMMs read them.

    The matrix is padded with zeros to multiples of 128 rows and 4 columns and cut
    into 128x4 tiles, stored tile after tile (row-major over tiles). Inside a tile,
    row r and column c go to offset (r % 32) * 16 + (r // 32) * 4 + c: the four
    32-row bands sit side by side. Returns a flat tensor of the input dtype.
    """
    rows, cols = scales.shape
    pad_rows, pad_cols = -rows % 128, -cols % 4
    if pad_rows or pad_cols:
        padded = torch.zeros(rows + pad_rows, cols + pad_cols, dtype=scales.dtype, device=scales.device)
        padded[:rows, :cols] = scales
        scales = padded
    tiles = scales.reshape(scales.shape[0] // 128, 4, 32, scales.shape[1] // 4, 4)  # [tr, band, r32, tc, c]
    return tiles.permute(0, 3, 2, 1, 4).reshape(-1)  # [tr, tc, r32, band, c]


def native_nvfp4_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    weight_scale_2: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """W4A4 on Blackwell FP4 tensor cores: quantize x, then torch._scaled_mm with block scales.

    _scaled_mm applies the E4M3 block scales of both operands; the two per-tensor
    scales are applied to its bf16 output. The weight is [N, K/2] row-major, so its
    transpose is the column-major [K/2, N] operand the kernel wants, at no copy.
    """
    k = weight.shape[1] * 2
    x2 = x.reshape(-1, k)
    xq = quantize_nvfp4(x2, name="activation", check_finite=False)
    y = torch._scaled_mm(
        xq.packed.view(torch.float4_e2m1fn_x2),
        weight.view(torch.float4_e2m1fn_x2).t(),
        swizzle_block_scales(xq.block_scale),
        swizzle_block_scales(weight_scale),
        out_dtype=torch.bfloat16,
    )
    y = y.float() * (xq.tensor_scale * weight_scale_2)
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])


class NVFP4Linear(nn.Module):
    """nn.Linear with an NVFP4 weight. Build with `from_linear` or load a state dict into an empty one."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = False,
        *,
        mode: str = "w4a16",
        backend: str | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if in_features % BLOCK_SIZE:
            raise InputError(
                f"NVFP4Linear: in_features={in_features} is not a multiple of the block size {BLOCK_SIZE}"
            )
        if mode not in MODES:
            raise ConfigError(f"NVFP4Linear: mode {mode!r} is not one of {MODES}")
        self.in_features = in_features
        self.out_features = out_features
        self.mode = mode
        self.requested_backend = backend
        self.register_buffer(
            "weight", torch.zeros(out_features, in_features // 2, dtype=torch.uint8, device=device)
        )
        self.register_buffer(
            "weight_scale",
            torch.zeros(out_features, in_features // BLOCK_SIZE, dtype=SCALE_DTYPE, device=device),
        )
        self.register_buffer("weight_scale_2", torch.zeros((), dtype=torch.float32, device=device))
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype or torch.float32, device=device))
        else:
            self.register_parameter("bias", None)
        self._choose_backend()

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        mode: str = "w4a16",
        *,
        backend: str | None = None,
        name: str = "weight",
    ) -> NVFP4Linear:
        """Quantize `linear`'s weight (`name` appears in errors, e.g. "layers.0.mlp.up_proj.weight")."""
        weight = linear.weight.detach()
        q = quantize_nvfp4(weight, name=name)
        layer = cls(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            mode=mode,
            backend=backend,
            device=weight.device,
            dtype=weight.dtype,
        )
        layer.weight.copy_(q.packed)
        layer.weight_scale.copy_(q.block_scale)
        layer.weight_scale_2.copy_(q.tensor_scale)
        if linear.bias is not None:
            layer.bias.data.copy_(linear.bias.detach())
        return layer

    def quantized(self) -> NVFP4Tensor:
        """The weight as an NVFP4Tensor (views of the buffers, no copy)."""
        return NVFP4Tensor(
            self.weight, self.weight_scale, self.weight_scale_2, (self.out_features, self.in_features)
        )

    def _choose_backend(self) -> None:
        requested = self.requested_backend or os.environ.get(BACKEND_ENV, "auto") or "auto"
        try:
            choice = select_backend(
                self.mode,
                probe_device(self.weight.device),
                in_features=self.in_features,
                out_features=self.out_features,
                requested=requested,
            )
        except ConfigError as error:
            if requested not in BACKENDS:  # an unknown name is wrong on every device
                raise
            # A forced backend may become possible once the layer moves (checkpoints are
            # usually loaded on the CPU, then moved to the GPU); forward refuses until then.
            self.backend, self.backend_reason = "unavailable", str(error)
            return
        self.backend = choice.name
        self.backend_reason = choice.reason

    def set_backend(self, backend: str | None) -> None:
        """Re-select with a new request (None: follow ORL_NVFP4_BACKEND, else auto)."""
        self.requested_backend = backend
        self._choose_backend()

    def _apply(self, fn, recurse=True):
        # Module.to(dtype) / .half() would cast every floating buffer, including the
        # E4M3 block scales and the FP32 tensor scale, destroying the format. Let the
        # move happen, then restore those two buffers from their originals on the
        # new device with their own dtypes.
        keep = {name: self._buffers[name] for name in ("weight_scale", "weight_scale_2")}
        super()._apply(fn, recurse)
        for name, original in keep.items():
            moved = self._buffers[name]
            if moved.dtype != original.dtype:
                self._buffers[name] = original.to(moved.device)
        self._choose_backend()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.backend == "unavailable":
            raise ConfigError(self.backend_reason)
        if self.backend == "native":
            return native_nvfp4_matmul(x, self.weight, self.weight_scale, self.weight_scale_2, self.bias)
        if self.backend == "triton":
            from orl.kernels.triton_w4a16 import w4a16_linear

            x_in = fake_quantize_nvfp4(x) if self.mode == "w4a4" else x
            return w4a16_linear(x_in, self.weight, self.weight_scale, self.weight_scale_2, self.bias)
        if self.mode == "w4a4":
            return emulated_w4a4_matmul(x, self.quantized(), self.bias)
        return dequantize_matmul(x, self.quantized(), self.bias)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Checkpoints store the tensor scale as shape [] or [1]; accept both.
        key = prefix + "weight_scale_2"
        if key in state_dict and state_dict[key].numel() == 1:
            state_dict[key] = state_dict[key].reshape(())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, mode={self.mode}, backend={self.backend}"
        )


def dense_weight(layer: NVFP4Linear, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The dequantized weight [out, in] (for inspection and tests)."""
    return dequantize_parts(layer.weight, layer.weight_scale, layer.weight_scale_2, dtype)
