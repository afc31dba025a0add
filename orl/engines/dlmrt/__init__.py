"""dlmrt, the bundled engine: static KV cache, captured denoising chunks, the decoding rule of orl.decoding.

Read in this order: state.py (the static buffers), chunk.py (the S-step denoising
chunk), orl/engines/capture.py (eager / torch.compile / CUDA graph; shared with orl/engines/ar.py),
engine.py (the request loop), forwards.py (the request's bare forwards replayed alone, for the overhead
measurement).
The benchmarks that drive it live in orl/eval/engine_bench.py and `orl bench-engine`.
"""

from orl.engines.dlmrt.engine import DlmrtConfig, DlmrtEngine

__all__ = ["DlmrtConfig", "DlmrtEngine"]
