"""The split-KV attention kernel compiled for Hopper (sm_90) on a machine without a GPU: Triton's compiler
has rules the interpreter does not check (tests/test_nvfp4_kernel_compile.py says which); that it computes
SDPA's numbers is tests/test_split_kv_attention.py's job (interpreter) and tests/test_cuda.py's (GPU)."""

from __future__ import annotations

import pytest

from tests.kernel_modules import private_compiled_copy

triton = pytest.importorskip("triton", reason="triton is not installed")


def _compile(dtype: str, block_r: int, head_dim: int):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = private_compiled_copy("triton_attention")
    kernel = module._split_kv_kernel
    pointers = {"q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}", "bias_ptr": f"*{dtype}",
                "acc_ptr": "*fp32", "m_ptr": "*fp32", "denom_ptr": "*fp32"}  # fmt: skip
    constexprs = {"SPLIT": module.SPLIT_LEN, "BLOCK_R": block_r, "BLOCK_N": module.BLOCK_N,
                  "HEAD_DIM": head_dim, "PRECISION": "ieee" if dtype == "fp32" else "tf32"}  # fmt: skip
    signature = {name: pointers.get(name, "i32") for name in kernel.arg_names}
    signature["scale"] = "fp32"
    signature.update({name: "constexpr" for name in constexprs})
    attrs = {(kernel.arg_names.index(name),): [["tt.divisibility", 16]] for name in pointers}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    try:
        return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    except (FileNotFoundError, RuntimeError) as exc:
        if "ptxas" in str(exc).lower():
            pytest.skip(f"no ptxas to compile for sm_90: {exc}")
        raise


@pytest.mark.parametrize(
    "dtype,block_r,head_dim", [("bf16", 64, 128), ("bf16", 16, 64), ("fp16", 32, 128), ("fp32", 64, 128)]
)
def test_split_kv_kernel_compiles_for_hopper(dtype, block_r, head_dim):
    ptx = _compile(dtype, block_r, head_dim).asm["ptx"]
    tensor_cores = "mma.sync" in ptx or "wgmma" in ptx
    # bf16 / fp16 products on the tensor cores; fp32 in IEEE precision (the tiny model's exact path) on FMAs.
    assert tensor_cores == (dtype != "fp32") and (dtype != "fp32" or "fma.rn.f32" in ptx)
    assert "ex2.approx" in ptx  # the online softmax's exponentials
