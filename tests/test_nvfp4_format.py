"""The NVFP4 format (orl/kernels/nvfp4.py): E2M1 rounding, packing, scales, edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from orl.errors import InputError
from orl.kernels.nvfp4 import (
    BLOCK_SIZE,
    E2M1_VALUES,
    decode_e2m1,
    dequantize_nvfp4,
    encode_e2m1,
    pack_nibbles,
    quantize_nvfp4,
    round_half_even_e2m1,
    unpack_nibbles,
)

MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E4M3_SUBNORMAL_STEP = 2.0**-9  # spacing of E4M3 below 2**-6


def test_every_code_decodes_and_reencodes_to_itself():
    codes = torch.arange(16, dtype=torch.uint8)
    values = decode_e2m1(codes)
    assert values.tolist() == list(E2M1_VALUES)
    assert torch.equal(encode_e2m1(values), codes)  # -0.0 keeps its sign bit (code 8)
    assert torch.equal(round_half_even_e2m1(values), values)


@pytest.mark.parametrize("magnitude", [1.0, 3.7, 1e-3, 250.0])
def test_every_representable_value_round_trips_through_quantize(magnitude):
    # One block holding all 16 codes; its amax is the tensor's, so s_b = e4m3(448) = 448
    # and the effective scale s_b * s_t equals `magnitude` up to float32 rounding.
    values = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    x = (values * magnitude).reshape(1, 16)
    q = quantize_nvfp4(x)
    assert torch.equal(unpack_nibbles(q.packed), torch.arange(16, dtype=torch.uint8).reshape(1, 16))
    assert q.block_scale.float().item() == 448.0
    assert torch.allclose(dequantize_nvfp4(q), x, rtol=1e-6, atol=0)


# (tie point, value it must round to): the neighbour whose code is even wins.
TIES = [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0)]


@pytest.mark.parametrize("tie,expected", TIES)
def test_ties_round_half_to_even(tie, expected):
    x = torch.tensor([tie, -tie])
    assert round_half_even_e2m1(x).tolist() == [expected, -expected]
    # Just off the tie, plain nearest rounding decides.
    below = torch.nextafter(torch.tensor(tie), torch.tensor(0.0))
    above = torch.nextafter(torch.tensor(tie), torch.tensor(10.0))
    lower = max(v for v in MAGNITUDES if v < tie)
    upper = min(v for v in MAGNITUDES if v > tie)
    assert round_half_even_e2m1(below).item() == lower
    assert round_half_even_e2m1(above).item() == upper


def test_ties_round_half_to_even_through_quantize():
    # amax = 6 * 448 * 2**-8 makes s_t = 2**-8 and s_b = 448 exactly, so the effective
    # scale is exactly 1.75 and t * 1.75 / 1.75 == t: every tie reaches the rounding intact.
    scale = 1.75
    ties = [t for t, _ in TIES]
    block = [6.0 * scale] + [t * scale for t in ties] + [-t * scale for t in ties] + [0.0]
    assert len(block) == BLOCK_SIZE
    q = quantize_nvfp4(torch.tensor([block]))
    assert q.tensor_scale.item() == 2.0**-8 and q.block_scale.float().item() == 448.0
    expected = [6.0] + [e for _, e in TIES] + [-e for _, e in TIES] + [0.0]
    assert (dequantize_nvfp4(q) / scale).flatten().tolist() == expected


def test_values_beyond_six_saturate():
    assert round_half_even_e2m1(torch.tensor([6.5, 100.0, -7.0])).tolist() == [6.0, 6.0, -6.0]


def test_packing_is_low_nibble_first():
    codes = torch.tensor([[0x1, 0x2, 0xA, 0xF]], dtype=torch.uint8)
    packed = pack_nibbles(codes)
    assert packed.tolist() == [[0x21, 0xFA]]
    assert torch.equal(unpack_nibbles(packed), codes)
    # Through quantize: x[0] = 0.5 (code 1) and x[1] = 1.0 (code 2) share byte 0 as 0x21.
    x = torch.zeros(1, BLOCK_SIZE)
    x[0, 0], x[0, 1], x[0, 2] = 0.5, 1.0, 6.0
    q = quantize_nvfp4(x)
    assert q.packed.shape == (1, BLOCK_SIZE // 2)
    assert q.packed[0, 0].item() == 0x21 and q.packed[0, 1].item() == 0x07


def test_layout_shapes_and_dtypes():
    q = quantize_nvfp4(torch.randn(24, 64))
    assert q.packed.dtype == torch.uint8 and q.packed.shape == (24, 32)
    assert q.block_scale.dtype == torch.float8_e4m3fn and q.block_scale.shape == (24, 4)
    assert q.tensor_scale.dtype == torch.float32 and q.tensor_scale.dim() == 0
    assert q.shape == (24, 64)
    assert q.nbytes() == 24 * 32 + 24 * 4 + 4


def test_bf16_input_quantizes_like_its_float32_value():
    x = torch.randn(8, 48).to(torch.bfloat16)
    a, b = quantize_nvfp4(x), quantize_nvfp4(x.float())
    assert torch.equal(a.packed, b.packed) and torch.equal(a.block_scale.float(), b.block_scale.float())


def test_all_zero_tensor_and_block_dequantize_to_zero():
    q = quantize_nvfp4(torch.zeros(3, 32))
    assert q.tensor_scale.item() == 0.0
    assert torch.equal(dequantize_nvfp4(q), torch.zeros(3, 32))
    x = torch.randn(2, 48)
    x[1, 16:32] = 0.0
    q = quantize_nvfp4(x)
    assert q.block_scale[1, 1].float().item() == 0.0
    out = dequantize_nvfp4(q)
    assert torch.isfinite(out).all() and torch.equal(out[1, 16:32], torch.zeros(16))


def test_block_far_below_tensor_max_flushes_to_zero():
    # Ideal scale 1e-9 / 6 / (1 / 2688) ~ 4.5e-7 < 2**-10: E4M3 rounds it to 0 and the block to zeros.
    x = torch.full((1, 32), 1e-9)
    x[0, 0] = 1.0
    q = quantize_nvfp4(x)
    assert q.block_scale[0, 1].float().item() == 0.0
    assert torch.equal(dequantize_nvfp4(q)[0, 16:], torch.zeros(16))


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_values_are_an_error_naming_the_tensor(bad):
    x = torch.randn(4, 32)
    x[2, 5] = bad
    with pytest.raises(InputError, match=r"layers\.0\.mlp\.up_proj\.weight: 1 value\(s\) are \+-inf or NaN"):
        quantize_nvfp4(x, name="layers.0.mlp.up_proj.weight")


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_unchecked_non_finite_values_turn_into_nan(bad):
    # check_finite=False (activations inside captured loops): no error, and the
    # block holding the bad value dequantizes to NaN instead of a finite lie.
    x = torch.randn(2, 32)
    x[1, 20] = bad
    out = dequantize_nvfp4(quantize_nvfp4(x, check_finite=False))
    assert torch.isnan(out[1, 16:32]).all()


def test_last_dimension_not_multiple_of_16_is_an_error():
    with pytest.raises(
        InputError, match=r"lm\.weight: last dimension 40 is not a multiple of the NVFP4 block size 16"
    ):
        quantize_nvfp4(torch.randn(3, 40), name="lm.weight")
    with pytest.raises(InputError, match="floating-point"):
        quantize_nvfp4(torch.ones(2, 16, dtype=torch.int32))


def _nearest_e2m1_brute_force(y: np.ndarray) -> np.ndarray:
    """Codes of the nearest E2M1 value to each y (|y| <= 6), ties to the even code."""
    grid = np.array(MAGNITUDES)
    dist = np.abs(np.abs(y)[..., None] - grid)
    best = dist.min(axis=-1, keepdims=True)
    candidates = np.where(dist == best, np.arange(8), 99)
    even_first = np.where(candidates % 2 == 0, candidates, candidates + 100)
    pick = np.take_along_axis(candidates, even_first.argmin(axis=-1)[..., None], axis=-1)[..., 0]
    return (pick | np.where(np.signbit(y), 8, 0)).astype(np.uint8)


@settings(max_examples=150, deadline=None)
@given(
    base=arrays(np.float32, (4, 4 * BLOCK_SIZE), elements=st.floats(-1, 1, width=32)),
    exponents=arrays(np.int32, (4, 4), elements=st.integers(-40, 12)),
)
def test_property_error_per_block_is_bounded_by_the_format_spacing(base, exponents):
    """Per-block error bound, exactly what the two roundings allow.

    Let s_t be the tensor scale, amax_b a block's absolute max and r = amax_b / (6 s_t)
    its ideal block scale; the block is coded with S = s_b * s_t, s_b = e4m3(r).

    * E2M1's widest gap is 4 -> 6, so an element whose |x/S| <= 6 is off by at most
      half of it, 1 * S. An element clamped at 6 (when s_b < r) is off by
      amax_b - 6 S = 6 s_t (r - s_b), which is smaller.
    * For a normal block scale (r >= 2**-6) E4M3's round-to-nearest with 3 mantissa
      bits gives s_b <= r (1 + 2**-4), hence S <= (1 + 2**-4) amax_b / 6 and

          max_i |x_i - x^_i| <= (1 + 2**-4) / 6 * amax_b      (~ 0.177 amax_b).

    * A subnormal block scale is off by at most half its step, 2**-10, absolutely; a
      block whose r < 2**-10 gets s_b = 0 and dequantizes to zeros. Both stay within

          max_i |x_i - x^_i| <= (1 + 2**-4) / 6 * amax_b + 6 * 2**-10 * s_t.

    Slack of 1e-6 relative covers the float32 arithmetic of x / S and q * S.
    """
    x = torch.from_numpy(base) * torch.from_numpy(np.exp2(exponents.astype(np.float32))).repeat_interleave(
        BLOCK_SIZE, dim=1
    )
    q = quantize_nvfp4(x)
    err = (dequantize_nvfp4(q) - x).abs().reshape(4, 4, BLOCK_SIZE).amax(-1)
    amax_b = x.abs().reshape(4, 4, BLOCK_SIZE).amax(-1)
    s_t = q.tensor_scale.item()
    assert s_t == pytest.approx(x.abs().max().item() / (6 * 448), rel=1e-6)

    slack = 1e-6 * amax_b + 1e-30
    ideal = amax_b / 6 / s_t if s_t > 0 else torch.zeros_like(amax_b)
    normal = ideal >= 2.0**-6
    strict = (1 + 2.0**-4) / 6 * amax_b
    assert (err[normal] <= strict[normal] + slack[normal]).all()
    assert (err <= strict + 6 * 2.0**-10 * s_t + slack).all()

    # Given its scales, every element is the nearest E2M1 value, ties to even.
    scale = (q.block_scale.float() * q.tensor_scale).repeat_interleave(BLOCK_SIZE, dim=1)
    y = torch.where(scale > 0, x / torch.where(scale > 0, scale, 1.0), 0.0).clamp(-6, 6)
    expected = torch.from_numpy(_nearest_e2m1_brute_force(y.numpy()))
    assert torch.equal(unpack_nibbles(q.packed), expected)
