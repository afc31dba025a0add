"""The base training losses: running a batch as length-sorted groups gives the one-forward loss."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import small_config


def _batch(tokenizer, block_size):
    from orl.tasks import tinycode
    from orl.train.data import pair_batch

    return pair_batch(tokenizer, 3, 0, 10, tinycode.TaskMix("easy"), 160, block_size=block_size)


def test_length_groups_cover_every_row_once_in_length_order():
    from orl.train.objectives import length_groups

    lengths = torch.tensor([9, 3, 7, 3, 12, 5, 1])
    groups = length_groups(lengths, 3)
    rows = torch.cat(groups)
    assert sorted(rows.tolist()) == list(range(7))
    assert lengths[rows].tolist() == sorted(lengths.tolist())
    assert len(length_groups(lengths, 20)) == 7  # never an empty group


@pytest.mark.parametrize("loss_name", ["ar", "masked_block"])
def test_grouped_loss_and_gradients_equal_one_forward(tokenizer, loss_name):
    from orl.model.transformer import Transformer
    from orl.train.objectives import ar_count, ar_sum, masked_block_sum, noise_one_block

    torch.manual_seed(0)
    mode = "causal" if loss_name == "ar" else "block-causal"
    model = Transformer(small_config(tokenizer, attention_mode=mode, block_size=8))
    batch = _batch(tokenizer, 8)
    assert int(batch.lengths.min()) < int(batch.lengths.max())  # the rows really differ in length

    def loss_and_grads(groups):
        model.zero_grad()
        if loss_name == "ar":
            loss = ar_sum(model, batch, groups=groups) / ar_count(batch)
        else:
            noise = noise_one_block(batch, 8, tokenizer.mask_id, torch.Generator().manual_seed(5))
            loss = masked_block_sum(model, batch, noise, groups=groups) / noise.count
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    one_loss, one_grads = loss_and_grads(1)
    grouped_loss, grouped_grads = loss_and_grads(4)
    torch.testing.assert_close(grouped_loss, one_loss, rtol=1e-5, atol=1e-6)
    for grouped, one in zip(grouped_grads, one_grads, strict=True):
        torch.testing.assert_close(grouped, one, rtol=1e-4, atol=1e-6)
