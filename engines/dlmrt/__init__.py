"""dlmrt, the bundled engine: static KV cache, shared commit policies, residual context, captured chunks.

Read in this order: state.py (the static buffers), chunk.py (the S-step denoising
chunk), capture.py (eager / torch.compile / CUDA graph), engine.py (the request loop),
bench.py (overhead and speed measurements).
"""

from orl.engines.dlmrt.engine import DlmrtConfig, DlmrtEngine

__all__ = ["DlmrtConfig", "DlmrtEngine"]
