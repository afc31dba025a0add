"""The Triton W4A16 kernel compiled for Hopper (sm_90) on a machine without a GPU.

The interpreter runs the kernel's arithmetic but not Triton's compiler, which has
rules of its own (module globals must be constexprs, inline PTX, layouts for the
reshapes, the split-K atomics). Triton's wheel carries ptxas, so the kernel can be
compiled ahead of time here for every code path the GPU benchmark sweeps; that it
computes the right numbers is tests/test_cuda.py's job on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kernel_modules import private_compiled_copy

triton = pytest.importorskip("triton", reason="triton is not installed")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compiled_module():
    """A private copy of orl/kernels/triton_w4a16.py with the kernel defined for the compiler."""
    module = private_compiled_copy("triton_w4a16")
    if module.kernel_is_interpreted():
        pytest.skip("triton.jit defined an interpreted kernel")
    return module


def _compile(module, *, x="bf16", block_m=16, block_n=64, block_k=256, even_k=True, decode="bits",
             split=False, num_warps=4, num_stages=3):  # fmt: skip
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = module._w4a16_kernel
    out = "fp32" if x == "fp32" else x
    pointers = {
        "x_ptr": f"*{x}", "w_ptr": "*u8", "s_ptr": "*u8", "ts_ptr": "*fp32",
        "lut_ptr": "*fp16" if decode == "lut" else "*u8", "y_ptr": f"*{out}",
        "part_ptr": "*fp32" if split else f"*{out}", "count_ptr": "*i32" if split else f"*{out}",
    }  # fmt: skip
    constexprs = {
        "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "EVEN_K": even_k,
        "DECODE": decode, "SPLIT": split, "DOT_PRECISION": "tf32x3" if x == "fp32" else "tf32",
        "DOT_IN_FP32": False,
        # Triton specializes unit strides as constants, as it does at launch for contiguous tensors.
        "stride_xk": 1, "stride_wb": 1, "stride_sb": 1, "stride_yn": 1,
    }  # fmt: skip
    signature = {name: pointers.get(name, "i32") for name in kernel.arg_names}
    signature.update({name: "constexpr" for name in constexprs})
    # Pointers 16-byte aligned and these integers multiples of 16, as launches specialize them.
    aligned = [*pointers, "N", "K", "K_PER_SPLIT", "BYTES_PER_SPLIT", "stride_xm", "stride_wn", "stride_ym"]
    attrs = {(kernel.arg_names.index(name),): [["tt.divisibility", 16]] for name in aligned}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    target = GPUTarget("cuda", 90, 32)
    try:
        return triton.compile(
            source, target=target, options={"num_warps": num_warps, "num_stages": num_stages}
        )
    except (FileNotFoundError, RuntimeError) as exc:
        if "ptxas" in str(exc).lower():
            pytest.skip(f"no ptxas to compile for sm_90: {exc}")
        raise


# Every (decode, split, masking, dtype, tile) path the benchmark sweep and the defaults use.
CASES = [
    {},
    {"decode": "lut"},
    {"decode": "asm"},
    {"decode": "asm", "split": True},
    {"split": True, "even_k": False, "block_n": 32, "block_k": 128, "num_stages": 4},
    {"block_m": 32, "block_n": 128, "num_warps": 8},
    {"block_m": 64, "block_k": 512, "num_warps": 8, "num_stages": 2},
    {"x": "fp16", "even_k": False},
    {"x": "fp32", "block_k": 64},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_kernel_compiles_for_hopper(compiled_module, case):
    kernel = _compile(compiled_module, **case)
    ptx = kernel.asm["ptx"]
    assert "mma.sync" in ptx or "wgmma" in ptx  # tensor cores (wgmma for 64-row tiles on Hopper)
    assert ("atom.global" in ptx) == bool(case.get("split"))  # the one-launch split-K reduction
    if case.get("decode") == "asm":
        assert "prmt.b32" in ptx


def _run_ptx(text: str, word: int) -> list[int]:
    """Execute the few PTX instructions the decode uses, on one input register ($4)."""
    regs = {"$4": word}

    def value(operand: str) -> int:
        return int(operand, 0) if operand[0].isdigit() else regs[operand]

    for statement in text.replace("{", "").replace("}", "").split(";"):
        parts = statement.replace(",", " ").split()
        if not parts or parts[0] == ".reg":
            continue
        op, dest, *args = parts
        if op == "mov.b32":
            result = value(args[0])
        elif op == "prmt.b32":  # default mode: byte i of d is byte sel[i] of {b, a}
            pool = value(args[0]) | value(args[1]) << 32
            sel = value(args[2])
            result = sum(((pool >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))
        elif op == "shl.b32":
            result = value(args[0]) << value(args[1])
        elif op == "and.b32":
            result = value(args[0]) & value(args[1])
        elif op == "or.b32":
            result = value(args[0]) | value(args[1])
        else:
            raise AssertionError(f"unexpected PTX instruction {op}")
        regs[dest] = result & 0xFFFFFFFF
    return [regs[f"${i}"] for i in range(4)]


def test_inline_ptx_decode_matches_the_e2m1_table(compiled_module):
    # The decode="asm" PTX, executed instruction by instruction here, on every byte
    # value in every position of the register: each output half must be the fp16 bits
    # of E2M1 * 2**-14, low nibbles in $0 ($1) for bytes 0, 1 (2, 3), high ones in $2 ($3).
    import torch

    from orl.kernels.nvfp4 import E2M1_VALUES

    expected = (torch.tensor(E2M1_VALUES) / 2.0**14).to(torch.float16).view(torch.int16).tolist()
    expected = [v & 0xFFFF for v in expected]
    text = compiled_module._E2M1_PTX.value
    for byte in range(256):
        for position in range(4):
            others = [(0x5A + 77 * p) & 0xFF for p in range(4)]
            others[position] = byte
            word = sum(b << (8 * i) for i, b in enumerate(others))
            out = _run_ptx(text, word)
            halves = [(out[r] >> (16 * h)) & 0xFFFF for r in range(4) for h in range(2)]
            assert halves[:4] == [expected[b & 15] for b in others]
            assert halves[4:] == [expected[b >> 4] for b in others]
