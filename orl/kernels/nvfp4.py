"""NVFP4: 4-bit floating-point weights with two levels of scaling.

The format, as NVIDIA defines it and as issue 6 fixes it:

* elements are E2M1 (1 sign, 2 exponent, 1 mantissa bit): +-{0, 0.5, 1, 1.5, 2, 3, 4, 6};
* two elements per byte, the even index in the LOW nibble (the layout of
  torch.float4_e2m1fn_x2 and of the common checkpoints);
* blocks of 16 consecutive values along the last (input) dimension share one
  FP8 E4M3 scale ``s_b``;
* the whole tensor shares one FP32 scale ``s_t = amax / (6 * 448)``, so that the
  largest block scale lands on E4M3's largest finite value, 448.

Quantization of a block with absolute maximum ``amax_b``::

    s_b = e4m3(amax_b / 6 / s_t)
    q   = round_half_even_e2m1(clamp(x / (s_b * s_t), -6, 6))
    x^  = e2m1(q) * s_b * s_t

Defined behaviour at the edges (tested in tests/test_nvfp4_format.py):

* an all-zero tensor has ``s_t = 0`` and an all-zero block has ``s_b = 0``; both
  dequantize to exact zeros (never 0/0 = NaN);
* a non-zero block whose ideal scale ``amax_b / 6 / s_t`` is below half of E4M3's
  smallest subnormal (2**-10) gets ``s_b = 0`` and dequantizes to zeros: it is
  more than 2**10 * 448 times smaller than the tensor's largest value;
* +-inf and NaN cannot be represented: `quantize_nvfp4` raises InputError naming
  the tensor. With ``check_finite=False`` (the activation path of W4A4, which
  must not synchronise with the host) they propagate as NaN instead;
* a last dimension that is not a multiple of 16 is an InputError: we do not pad,
  because every layer this harness quantizes has widths that are multiples of 16
  and a padded layout would not match the common checkpoint layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orl.errors import InputError

BLOCK_SIZE = 16  # values per FP8 block scale
E2M1_MAX = 6.0  # largest E2M1 magnitude
E4M3_MAX = 448.0  # largest finite float8_e4m3fn value
SCALE_DTYPE = torch.float8_e4m3fn

# Value of each 4-bit code: bit 3 is the sign, bits 2..1 the exponent, bit 0 the mantissa.
E2M1_VALUES: tuple[float, ...] = (
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
    -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
)  # fmt: skip

# Midpoints between neighbouring magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6. A magnitude
# exactly on a midpoint is a tie and goes to the neighbour with the even code
# (mantissa bit 0): down when the lower code is even, up when it is odd.
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIE_GOES_UP = (False, True, False, True, False, True, False)


@dataclass(frozen=True)
class NVFP4Tensor:
    """A quantized tensor in the common checkpoint layout.

    packed:       uint8 [..., K/2], two E2M1 codes per byte, even index in the low nibble
    block_scale:  float8_e4m3fn [..., K/16], one scale per 16 values along the last dim
    tensor_scale: float32, 0-dim, the per-tensor scale s_t
    shape:        the original shape [..., K]
    """

    packed: torch.Tensor
    block_scale: torch.Tensor
    tensor_scale: torch.Tensor
    shape: tuple[int, ...]

    def nbytes(self) -> int:
        """Bytes the quantized tensor occupies (4.5 bits per value plus 4 bytes)."""
        return sum(t.numel() * t.element_size() for t in (self.packed, self.block_scale, self.tensor_scale))


def encode_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest E2M1 value, ties to even, and return the 4-bit codes (uint8).

    Magnitudes above 6 saturate to 6, which is what clamping to [-6, 6] first does.
    Negative values that round to zero keep their sign (code 8, -0.0).
    """
    mag = x.abs().to(torch.float32)
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for midpoint, tie_up in zip(_MIDPOINTS, _TIE_GOES_UP, strict=True):
        past = mag >= midpoint if tie_up else mag > midpoint
        code += past.to(torch.uint8)
    sign = torch.signbit(x).to(torch.uint8) << 3
    return code | sign


_E2M1_TABLES: dict[torch.device, torch.Tensor] = {}


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """The float32 value of each 4-bit code (only the low 4 bits are read).

    The table is made once per device: a host-to-device copy on every call would
    make the dequantize-then-matmul path impossible to capture in a CUDA graph
    (the GPU benchmark times it that way) once a first call has run outside the capture.
    """
    table = _E2M1_TABLES.get(codes.device)
    if table is None:
        table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
        _E2M1_TABLES[codes.device] = table
    return table[(codes & 0xF).long()]


def round_half_even_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value (float32), ties to even, saturating at +-6."""
    return decode_e2m1(encode_e2m1(x))


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit codes [..., K] into bytes [..., K/2]; element 2i goes to the low nibble of byte i."""
    if codes.shape[-1] % 2:
        raise InputError(f"pack_nibbles: last dimension {codes.shape[-1]} is odd; expected an even count")
    codes = codes.to(torch.uint8) & 0xF
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of `pack_nibbles`: bytes [..., K/2] -> codes [..., K]."""
    low = packed & 0xF
    high = packed >> 4
    return torch.stack((low, high), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def tensor_scale_for(amax: torch.Tensor) -> torch.Tensor:
    """s_t = amax / (6 * 448): the largest block then gets the largest E4M3 scale."""
    return amax.to(torch.float32) / (E2M1_MAX * E4M3_MAX)


def quantize_nvfp4(x: torch.Tensor, *, name: str = "tensor", check_finite: bool = True) -> NVFP4Tensor:
    """Quantize `x` (any float dtype, shape [..., K], K a multiple of 16) to NVFP4.

    `name` appears in error messages (pass the parameter's qualified name).
    `check_finite=False` skips the inf/NaN check, which costs a host synchronisation;
    non-finite values then turn the output into NaN rather than raising.
    """
    if not x.is_floating_point():
        raise InputError(f"{name}: NVFP4 quantizes floating-point tensors, got dtype {x.dtype}")
    if x.dim() == 0 or x.shape[-1] % BLOCK_SIZE:
        last = x.shape[-1] if x.dim() else "none (0-dim)"
        raise InputError(
            f"{name}: last dimension {last} is not a multiple of the NVFP4 block size {BLOCK_SIZE} "
            f"(shape {tuple(x.shape)})"
        )
    if check_finite and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise InputError(
            f"{name}: {bad} value(s) are +-inf or NaN, which NVFP4 cannot represent; expected finite values"
        )

    xf = x.to(torch.float32)
    blocks = xf.reshape(*x.shape[:-1], x.shape[-1] // BLOCK_SIZE, BLOCK_SIZE)
    tensor_scale = tensor_scale_for(xf.abs().amax())
    block_amax = blocks.abs().amax(dim=-1)

    # Ideal block scale amax_b / 6 / s_t lies in [0, 448]; clamp guards the last
    # float32 ulp so the cast can never leave E4M3's finite range.
    safe_ts = torch.where(tensor_scale > 0, tensor_scale, torch.ones_like(tensor_scale))
    ideal = torch.where(tensor_scale > 0, block_amax / E2M1_MAX / safe_ts, torch.zeros_like(block_amax))
    block_scale = ideal.clamp(max=E4M3_MAX).to(SCALE_DTYPE)

    # A zero scale (all-zero block, underflowed block, all-zero tensor) encodes zeros.
    scale = (block_scale.to(torch.float32) * tensor_scale).unsqueeze(-1)
    safe_scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    scaled = torch.where(scale > 0, blocks / safe_scale, torch.zeros_like(blocks))
    codes = encode_e2m1(scaled.clamp(-E2M1_MAX, E2M1_MAX)).reshape(x.shape)
    return NVFP4Tensor(
        packed=pack_nibbles(codes),
        block_scale=block_scale,
        tensor_scale=tensor_scale,
        shape=tuple(x.shape),
    )


def dequantize_nvfp4(q: NVFP4Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x^ = e2m1(q) * s_b * s_t, computed in float32 and returned as `dtype`."""
    return dequantize_parts(q.packed, q.block_scale, q.tensor_scale, dtype)


def dequantize_parts(
    packed: torch.Tensor,
    block_scale: torch.Tensor,
    tensor_scale: torch.Tensor,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Dequantize from the three checkpoint tensors (weight, weight_scale, weight_scale_2)."""
    values = decode_e2m1(unpack_nibbles(packed))
    k = values.shape[-1]
    blocks = values.reshape(*values.shape[:-1], k // BLOCK_SIZE, BLOCK_SIZE)
    scale = block_scale.to(torch.float32) * tensor_scale.to(torch.float32)
    return (blocks * scale.unsqueeze(-1)).reshape(values.shape).to(dtype)


def check_layout(
    packed: torch.Tensor,
    block_scale: torch.Tensor,
    tensor_scale: torch.Tensor,
    *,
    name: str = "weight",
) -> tuple[int, int]:
    """Validate the three tensors of a quantized [N, K] matrix; return (N, K).

    Raises InputError naming the tensor and the expected dtype or shape.
    """
    if packed.dtype != torch.uint8 or packed.dim() != 2:
        raise InputError(f"{name}: expected packed uint8 [N, K/2], got {packed.dtype} {tuple(packed.shape)}")
    n, k = packed.shape[0], packed.shape[1] * 2
    if k % BLOCK_SIZE:
        raise InputError(f"{name}: K={k} (2 x {packed.shape[1]} bytes) is not a multiple of {BLOCK_SIZE}")
    if block_scale.dtype != SCALE_DTYPE or tuple(block_scale.shape) != (n, k // BLOCK_SIZE):
        raise InputError(
            f"{name}_scale: expected {SCALE_DTYPE} {(n, k // BLOCK_SIZE)}, "
            f"got {block_scale.dtype} {tuple(block_scale.shape)}"
        )
    if tensor_scale.dtype != torch.float32 or tensor_scale.numel() != 1:
        raise InputError(
            f"{name}_scale_2: expected one float32 value, got {tensor_scale.dtype} "
            f"{tuple(tensor_scale.shape)}"
        )
    return n, k
