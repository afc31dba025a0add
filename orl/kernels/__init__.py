"""Kernels: NVFP4 weights and their matmuls, oneDNN's CPU linears, the Triton attention and W4A16 kernels.

Only what the command line needs to know lives here, without importing torch: a command that never runs a
model (render, operating-point, gate) then starts without it.
"""

# The CPU matmul paths a command can ask for (orl/kernels/onednn.py choose_linear says what each one does).
CPU_LINEARS = ("aten", "onednn", "auto")
