"""Where a step's time goes: kernels sorted into kinds by name, summed per step."""

import pytest

from orl.eval.kernel_profile import KINDS, kernel_kind, profile_lines, summarise


@pytest.mark.parametrize(
    "name,kind",
    [
        ("nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "gemm"),
        (
            "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>",
            "gemm",
        ),
        ("_w4a16_kernel", "gemm"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", "attention"),
        ("_split_kv_kernel", "attention"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "fused"),
        ("triton_poi_fused_index_copy_1", "fused"),
        ("## Call CompiledFxGraph fabc ##", "fused"),
        ("void at::native::index_elementwise_kernel<128, 4>", "copy"),
        ("Memset (Device)", "copy"),
        ("void at::native::reduce_kernel<512, 1, ArgMaxOps>", "other"),
    ],
)
def test_kernels_are_sorted_by_name(name, kind):
    assert kernel_kind(name) == kind


def test_a_chunk_is_summed_per_step():
    launched = [
        ("nvjet_gemm_a", 10.0),
        ("triton_poi_fused_add_0", 2.0),
        ("nvjet_gemm_a", 14.0),
        ("Memset", 1.0),
    ]
    profile = summarise(launched, steps=2, unit="CUDA kernels", top=2)
    assert profile.kernels_per_step == 2.0 and profile.busy_us_per_step == 13.5
    assert profile.us_by_kind == {"attention": 0.0, "gemm": 12.0, "fused": 1.0, "copy": 0.5, "other": 0.0}
    assert profile.count_by_kind["gemm"] == 1.0 and set(profile.us_by_kind) == set(KINDS)
    assert [t["name"] for t in profile.top] == ["nvjet_gemm_a", "triton_poi_fused_add_0"]
    assert profile.top[0] == {
        "name": "nvjet_gemm_a",
        "kind": "gemm",
        "calls_per_step": 1.0,
        "us_per_step": 12.0,
    }
    lines = profile_lines(profile.to_record())
    assert (
        lines[0].startswith("2.0 CUDA kernels per step, busy 13.5 us: attention 0.0 us") and len(lines) == 3
    )
