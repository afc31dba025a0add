"""A copy of a module tree that shares every parameter and buffer with the original.

What an engine changes on its own copy of a checkpoint's model (fused projections, oneDNN linears,
compiled layers) must not reach the checkpoint's other users, while the weights stay one set: no
tensor is held twice, and an in-place update of the original (an optimizer step on ORL's training
model, which the rollout decodes with) is seen by the copy at once.
"""

from __future__ import annotations

import copy

from torch import nn


def copy_sharing_weights(model: nn.Module) -> nn.Module:
    """A deep copy of `model`'s modules whose parameters and buffers are `model`'s own tensors."""
    shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return copy.deepcopy(model, memo=shared)
