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
    from orl.train.objectives import ar_count, ar_sum, masked_blocks_sum, noise_blocks

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
            noise = noise_blocks(batch, 8, tokenizer.mask_id, torch.Generator().manual_seed(5))
            loss = masked_blocks_sum(model, noise, groups=groups) / noise.count
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    one_loss, one_grads = loss_and_grads(1)
    grouped_loss, grouped_grads = loss_and_grads(4)
    torch.testing.assert_close(grouped_loss, one_loss, rtol=1e-5, atol=1e-6)
    for grouped, one in zip(grouped_grads, one_grads, strict=True):
        torch.testing.assert_close(grouped, one, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("noised", ["every", "one"])
@pytest.mark.parametrize("layout", ["after-prompt", "absolute"])
def test_one_forward_over_the_noisy_copy_equals_decoding_each_block_on_its_own(tokenizer, layout, noised):
    """The copy trick trains what decoding sees: block j, noised, over the clean row before it.

    The reference runs one forward per block in the plain block-causal layout (the row cut after
    block j, block j replaced by its noisy tokens) and sums its weighted cross-entropy.
    """
    import torch.nn.functional as F

    from orl.model.masks import layout_block_limits, mask_from_limits
    from orl.model.transformer import Transformer
    from orl.train.objectives import masked_blocks_sum, noise_blocks

    torch.manual_seed(0)
    B = 8
    model = Transformer(
        small_config(tokenizer, attention_mode="block-causal", block_size=B, block_layout=layout)
    )
    batch = _batch(tokenizer, B) if layout == "after-prompt" else _absolute_batch(tokenizer, B)
    noise = noise_blocks(batch, B, tokenizer.mask_id, torch.Generator().manual_seed(1), layout, noised)
    expected = torch.zeros(())
    blocks_seen = 0
    for r in range(len(batch.ids)):
        clean, start, stop = (int(x[r]) for x in (noise.clean_lengths, noise.copy_start, noise.copy_end))
        for block_start in range(start, stop, B):
            end = min(block_start + B, stop)
            copy = slice(clean + block_start - start, clean + end - start)
            ids = batch.ids[r, :end].clone()
            ids[block_start:end] = noise.ids[r, copy]
            assert noise.masked[r, copy].any()  # at least one masked position in every block
            idx = torch.arange(end)
            origin = int(noise.mask_origin[r])
            mask = mask_from_limits(layout_block_limits(layout, idx[None, :], origin, B), idx)
            logits = model(ids[None], mask=mask)[0, block_start:end]
            ce = F.cross_entropy(logits, batch.ids[r, block_start:end], reduction="none")
            expected = expected + (ce * noise.weight[r, copy]).sum()
            blocks_seen += 1
    # "every": rows with several blocks are in the batch; "one": one block per row
    assert blocks_seen > len(batch.ids) if noised == "every" else blocks_seen == len(batch.ids)
    torch.testing.assert_close(masked_blocks_sum(model, noise), expected, rtol=1e-4, atol=1e-4)


def _absolute_batch(tokenizer, block_size):
    from orl.tasks import tinycode
    from orl.train.data import pair_batch

    return pair_batch(
        tokenizer, 3, 0, 6, tinycode.TaskMix("easy"), 160, block_size=block_size, layout="absolute"
    )
