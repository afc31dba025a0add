"""Kernels: NVFP4 weights and their matmuls, oneDNN's CPU linears, the Triton attention and W4A16 kernels.

Only what the command line needs to know lives here, without importing torch: `orl --help` and a command
that neither runs a model nor writes a record (`orl render`) start without it.
"""

# The CPU matmul paths a command can ask for (orl/kernels/onednn.py choose_linear says what each one does).
CPU_LINEARS = ("aten", "onednn", "auto")
