"""One training loop for one process or many: torchrun + PyTorch's FSDP2 (`fully_shard`).

    torchrun --nproc-per-node N -m orl.cli convert ...    # or train-orl; N GPUs, or N CPU processes (gloo)
    orl convert ...                                         # world size 1: the same code, nothing sharded

At world size N every rank holds 1/N of the parameters, gradients and AdamW moments
(`fully_shard` per decoder layer, then the root for embeddings, final norm and LM head). With
bf16 compute (CUDA) parameters are all-gathered in bfloat16, gradients reduced in float32, and
the sharded master weights and optimizer state stay float32 (MixedPrecisionPolicy). Each rank
trains on its contiguous share of every global batch; losses are means over the global batch
(orl/train/loop.py), so the loss curve does not depend on the world size.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from orl.errors import ConfigError


@dataclass(frozen=True)
class World:
    """This process's place among the training processes."""

    rank: int = 0
    size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def init_world(device: str = "cpu") -> World:
    """The world torchrun started us in (WORLD_SIZE, RANK, LOCAL_RANK), or a world of one.

    CPU ranks talk over gloo, CUDA ranks over NCCL, each on its own GPU (cuda:LOCAL_RANK).
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return World(device=torch.device(device))
    if dist.is_initialized():
        raise ConfigError("torch.distributed is already initialised: one training run per process")
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        here = torch.device("cuda", local)
        torch.cuda.set_device(here)
        dist.init_process_group("nccl", device_id=here)
    else:
        here = torch.device("cpu")
        dist.init_process_group("gloo")
    return World(rank=rank, size=size, device=here)


def close_world(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


# glibc's mallopt parameter for the size above which an allocation gets its own mapping.
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 64 * 1024


def return_freed_memory_to_the_os() -> bool:
    """CPU training: serve every allocation above 64 KiB from its own mapping, so that freeing it
    gives the memory back. FSDP2 all-gathers each layer's parameters and reduce-scatters its
    gradients into short-lived full-size buffers; glibc's heap keeps such freed blocks, and with it
    the peak resident set of each world-size-2 rank came out above the single process's (2.46 and
    2.63 GB against 1.60 GB converting a 50M-parameter model, with half the parameter and AdamW bytes
    per rank); with this, 1.09 and 1.10 GB against 1.57 GB (scripts/measure_fsdp_memory.py).
    A no-op (False) where the C library is not glibc."""
    path = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(path) if path else None
        return bool(libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):
        return False


@contextmanager
def training_world(device: str = "cpu"):
    """`with training_world(args.device) as world:` the world of this run, closed at the end."""
    world = init_world(device)
    # Only where FSDP2 shards (world size > 1): its buffers are what glibc's heap kept. A single
    # process would pay a page fault per large allocation for nothing (AR training of the tiny
    # preset, 20 steps: 23.0 s wall, 14.8 s of it in the kernel, against 12.0 s without).
    # CUDA's caching allocator manages GPU memory on its own.
    if world.size > 1 and not device.startswith("cuda"):
        return_freed_memory_to_the_os()
    try:
        yield world
    finally:
        close_world(world)


def rank_rows(rows: int, world: World) -> slice:
    """This rank's contiguous share of a global batch of `rows` (shares differ by at most one row)."""
    return slice(rows * world.rank // world.size, rows * (world.rank + 1) // world.size)


def micro_batches(rows: int, world: World, micro_size: int) -> list[slice]:
    """This rank's share of a global batch of `rows`, in micro-batches of `micro_size` rows (0: one)."""
    mine = rank_rows(rows, world)
    step = micro_size or max(1, mine.stop - mine.start)
    return [slice(start, min(start + step, mine.stop)) for start in range(mine.start, mine.stop, step)]


def all_sum(values: torch.Tensor, world: World) -> torch.Tensor:
    """The element-wise sum over ranks (a copy; float64 so that counts and sums add exactly)."""
    total = values.detach().to(torch.float64).clone()
    if world.distributed:
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total


def all_max(value: float, world: World) -> float:
    total = torch.tensor([value], dtype=torch.float64)
    if world.distributed:
        dist.all_reduce(total, op=dist.ReduceOp.MAX)
    return float(total)


def gather_objects(obj, world: World) -> list:
    """Every rank's `obj`, in rank order, on every rank."""
    if not world.distributed:
        return [obj]
    out = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def shard_model(model: torch.nn.Module, world: World, *, bf16: bool = False) -> torch.nn.Module:
    """FSDP2-shard a Transformer (each decoder layer, then the root); at world size 1 it stays as it is."""
    if not world.distributed:
        return model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
    kwargs = {"mp_policy": policy} if policy is not None else {}
    for layer in model.model.layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)  # embeddings (tied LM head included) and the final norm
    return model


class Replica:
    """The training model's current weights, whole, in a plain module on every rank: what rollouts decode
    with (a sharded model's parameters are pieces). At world size 1 it is the training model itself."""

    def __init__(self, model: torch.nn.Module, world: World):
        self.model, self.world, self.copy = model, world, None

    def current(self) -> torch.nn.Module:
        if not self.world.distributed:
            return self.model.eval()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        from orl.model.transformer import Transformer

        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True))
        if self.copy is None:
            with torch.device("meta"):
                self.copy = Transformer(self.model.config)
            self.copy = self.copy.to_empty(device=self.world.device).requires_grad_(False)
            if self.model.config.tie_word_embeddings:
                self.copy.lm_head.weight = self.copy.model.embed_tokens.weight
        self.copy.load_state_dict(full)
        return self.copy.eval()


def peak_memory_bytes(world: World) -> int:
    """This rank's peak memory: CUDA's allocator peak on a GPU, the process's peak resident set on the CPU."""
    if world.device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(world.device))
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
