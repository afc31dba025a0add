"""The shared decoding rules (orl/decoding/): commit policies, the <eos> rule, residual context."""

from __future__ import annotations

import math

import pytest
import torch

from orl.decoding import Policy, commit_mask, cut_at_eos, denoise_step
from orl.decoding.eos import block_finished_with_eos
from orl.decoding.residual import residual_embeddings
from orl.decoding.step import entropy_and_confidence
from orl.errors import InputError
from orl.model.transformer import ModelConfig, Transformer


def _model(embedding: torch.Tensor, adapter: bool = False) -> Transformer:
    """A one-layer model whose input embedding is `embedding` (what the residual mixes over)."""
    vocab, dim = embedding.shape
    model = Transformer(
        ModelConfig(
            vocab_size=vocab,
            hidden_size=dim,
            intermediate_size=8,
            num_hidden_layers=1,
            num_attention_heads=1,
            num_key_value_heads=1,
            head_dim=4,
        )
    )
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(embedding)
    if adapter:
        model.add_residual_adapter()
    return model


EOS = torch.tensor([1])

ALL = torch.ones(1, 4, dtype=torch.bool)


def picks(policy: str, confidence: list[float], masked: torch.Tensor = ALL) -> list[int]:
    chosen = commit_mask(Policy.parse(policy), torch.tensor([confidence]), masked)
    return torch.nonzero(chosen[0]).flatten().tolist()


def test_threshold_commits_every_position_at_or_above_tau():
    assert picks("threshold:0.9", [0.95, 0.5, 0.9, 0.3]) == [0, 2]


def test_threshold_commits_the_single_most_confident_when_none_reaches_tau():
    assert picks("threshold:0.9", [0.4, 0.6, 0.5, 0.3]) == [1]


def test_threshold_never_commits_a_position_that_is_not_masked():
    masked = torch.tensor([[False, True, True, True]])
    assert picks("threshold:0.9", [0.99, 0.2, 0.95, 0.1], masked) == [2]
    assert picks("threshold:0.9", [0.99, 0.2, 0.5, 0.1], masked) == [2]  # fallback among masked only


def test_fixed_commits_the_top_k_with_ties_broken_by_position():
    assert picks("fixed:2", [0.5, 0.7, 0.7, 0.7]) == [1, 2]
    assert picks("fixed:1", [0.3, 0.3, 0.3, 0.3]) == [0]
    assert picks("fixed:3", [0.1, 0.9, 0.2, 0.8]) == [1, 2, 3]


def test_fixed_with_k_above_the_masked_count_commits_all_masked():
    masked = torch.tensor([[True, False, True, False]])
    assert picks("fixed:3", [0.1, 0.9, 0.2, 0.8], masked) == [0, 2]


def test_factor_commits_the_nth_most_confident_while_c_is_at_least_1_minus_f_over_n_plus_1():
    # f = 1: bounds 1 - 1/2 = 0.5, 1 - 1/3 = 0.667, 1 - 1/4 = 0.75, 1 - 1/5 = 0.8 for n = 1..4.
    assert picks("factor:1", [0.6, 0.9, 0.2, 0.7]) == [1, 3]  # 0.9 >= 0.5, 0.7 >= 0.667, 0.6 < 0.75
    assert picks("factor:1", [0.95, 0.9, 0.85, 0.8]) == [0, 1, 2, 3]
    assert picks("factor:1", [0.3, 0.2, 0.1, 0.4]) == [3]  # none qualifies: the most confident one
    # A larger f is more permissive: f = 2 gives bounds 0, 1/3, 1/2, 3/5.
    assert picks("factor:2", [0.6, 0.9, 0.2, 0.7]) == [0, 1, 3]


def test_factor_commits_a_prefix_of_the_ranking_even_with_ties():
    # Ranks by confidence (ties: lower index first): 0.7@1 (bound 0.5), 0.7@2 (0.667), 0.7@3 (0.75 fails).
    assert picks("factor:1", [0.1, 0.7, 0.7, 0.7]) == [1, 2]


@pytest.mark.parametrize("spec", ["threshold:0.9", "fixed:2", "factor:1"])
def test_rows_with_nothing_masked_are_untouched(spec):
    policy = Policy.parse(spec)
    logits = torch.randn(2, 4, 11, generator=torch.Generator().manual_seed(0)) * 5
    tokens = torch.tensor([[7, 7, 7, 7], [3, 4, 5, 6]])
    masked = torch.tensor([[True, True, True, True], [False, False, False, False]])
    assert not commit_mask(policy, entropy_and_confidence(logits)[1], masked)[1].any()
    out = denoise_step(policy, logits, tokens, masked, EOS)
    assert out.tokens[1].tolist() == [3, 4, 5, 6]
    assert not out.masked[1].any() and not out.committed[1].any()
    assert out.committed[0].any()  # the other row still makes progress


def test_at_least_one_commit_per_row_with_something_masked():
    policy = Policy.parse("threshold:1.0")
    logits = torch.zeros(3, 5, 9)  # uniform: every confidence is 1/9
    masked = torch.tensor([[True] * 5, [False, False, True, False, True], [False] * 5])
    out = denoise_step(policy, logits, torch.zeros(3, 5, dtype=torch.long), masked, EOS)
    assert out.committed.sum(-1).tolist() == [1, 1, 0]


def _logits_favouring(tokens: list[int], vocab: int = 6, strength: float = 10.0) -> torch.Tensor:
    logits = torch.zeros(1, len(tokens), vocab)
    for i, t in enumerate(tokens):
        logits[0, i, t] = strength - i * 0.5  # earlier positions slightly more confident
    return logits


def test_eos_commit_fills_every_later_position_and_the_block_then_finishes():
    eos, mask = 1, 5
    tokens = torch.full((1, 5), mask)
    masked = torch.ones(1, 5, dtype=torch.bool)
    logits = _logits_favouring([3, 4, 1, 2, 2])
    logits[0, 2, eos] = 50.0  # <eos> at position 2 is by far the most confident
    out = denoise_step(Policy.parse("fixed:1"), logits, tokens, masked, torch.tensor([eos]))
    assert out.tokens[0].tolist() == [mask, mask, eos, eos, eos]
    assert out.masked[0].tolist() == [True, True, False, False, False]
    assert out.committed[0].tolist() == [False, False, True, True, True]
    assert not block_finished_with_eos(out.tokens, out.masked, torch.tensor([eos]))[
        0
    ]  # positions before <eos> are open
    out = denoise_step(Policy.parse("fixed:2"), logits, out.tokens, out.masked, torch.tensor([eos]))
    assert out.tokens[0].tolist() == [3, 4, eos, eos, eos] and not out.masked.any()
    assert block_finished_with_eos(out.tokens, out.masked, torch.tensor([eos]))[0]


def test_block_without_eos_is_not_finished():
    tokens = torch.tensor([[3, 4, 2, 2]])
    assert not block_finished_with_eos(tokens, torch.zeros(1, 4, dtype=torch.bool), EOS)[0]


def test_entropy_and_confidence_match_a_direct_computation():
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(1))
    probs, entropy, confidence, prediction = entropy_and_confidence(logits)
    direct = torch.softmax(logits, -1)
    assert torch.allclose(probs, direct, atol=1e-6)
    assert torch.allclose(entropy, -(direct * direct.log()).sum(-1), atol=1e-5)
    assert torch.equal(prediction, direct.argmax(-1)) and torch.allclose(confidence, direct.amax(-1))


def test_residual_input_is_mask_embedding_plus_entropy_weighted_expected_embedding():
    gen = torch.Generator().manual_seed(2)
    vocab, dim, mask_id, alpha = 9, 5, 8, 0.7
    embedding = torch.randn(vocab, dim, generator=gen)
    tokens = torch.tensor([[mask_id, 3, mask_id, mask_id]])
    masked = tokens == mask_id
    probs = torch.softmax(torch.randn(1, 4, vocab, generator=gen) * 3, -1)
    entropy = -(probs * probs.log()).sum(-1)
    out = residual_embeddings(_model(embedding), tokens, masked, probs, entropy, alpha, mask_id)
    for i in range(4):
        if masked[0, i]:
            w = alpha * (1 - float(entropy[0, i]) / math.log(vocab))
            r = sum(float(probs[0, i, v]) * embedding[v] for v in range(vocab))
            expected = embedding[mask_id] + w * r
        else:
            expected = embedding[tokens[0, i]]  # committed positions use E[token]
        assert torch.allclose(out[0, i], expected, atol=1e-5), i


def test_residual_off_alpha_zero_and_step_zero_all_give_the_plain_mask_embedding():
    gen = torch.Generator().manual_seed(3)
    embedding = torch.randn(9, 5, generator=gen)
    tokens = torch.tensor([[8, 2, 8]])
    masked = tokens == 8
    probs = torch.softmax(torch.randn(1, 3, 9, generator=gen), -1)
    entropy = -(probs * probs.log()).sum(-1)
    plain = embedding[tokens]
    model = _model(embedding)
    assert torch.equal(residual_embeddings(model, tokens, masked, probs, entropy, 0.0, 8), plain)
    assert torch.equal(residual_embeddings(model, tokens, masked, None, None, 0.7, 8), plain)
    # dlmrt's static-shape step 0: zero distributions make the residual term exactly zero.
    zeros = torch.zeros_like(probs)
    assert torch.equal(residual_embeddings(model, tokens, masked, zeros, torch.zeros(1, 3), 0.7, 8), plain)
    # The adapter form: a fresh adapter adds exactly 0, a trained one α·g(z) at masked positions only.
    fresh = _model(embedding, adapter=True)
    assert torch.equal(residual_embeddings(fresh, tokens, masked, probs, entropy, 0.7, 8, "adapter"), plain)
    with torch.no_grad():
        fresh.residual_adapter.w2.weight.normal_(generator=gen)
    mixed = residual_embeddings(fresh, tokens, masked, probs, entropy, 0.7, 8, "adapter")
    z = probs @ embedding
    expected = embedding[8] + 0.7 * fresh.residual_adapter(z)
    assert torch.allclose(mixed[masked], expected[masked], atol=1e-6)
    assert torch.equal(mixed[~masked], plain[~masked])


@pytest.mark.parametrize(
    "spec",
    [
        "nope:1",
        "threshold",
        "threshold:abc",
        "threshold:0",
        "threshold:1.5",
        "fixed:0",
        "fixed:1.5",
        "factor:-1",
    ],
)
def test_bad_policy_specs_are_rejected_with_the_flag_named(spec):
    with pytest.raises(InputError, match="--policy"):
        Policy.parse(spec)


def test_policy_round_trips_through_its_string_and_record():
    for spec, record in [
        ("threshold:0.9", {"tau": 0.9}),
        ("strict-threshold:0.9", {"tau": 0.9}),
        ("fixed:2", {"k": 2}),
        ("factor:1", {"f": 1.0}),
    ]:
        policy = Policy.parse(spec)
        assert Policy.parse(str(policy)) == policy
        assert policy.to_record()["params"] == record
        assert Policy.from_record(policy.to_record()) == policy
        assert str(policy) == spec


@pytest.mark.parametrize(
    "record, message",
    [
        ({"name": "greedy", "params": {}}, "expected {'name'"),
        ({"name": "threshold", "params": {"k": 2}}, r"params.tau: expected a number"),
        ({"name": "threshold", "params": {"tau": True}}, r"params.tau: expected a number"),
        ({"name": "fixed", "params": {"k": 0}}, "positive integer"),
        ("threshold:0.9", "expected {'name'"),
    ],
)
def test_bad_policy_records_name_the_field(record, message):
    with pytest.raises(InputError, match=message):
        Policy.from_record(record, "x.jsonl line 3: policy")


def test_a_policy_knows_its_parameter_label_and_sweep_points():
    policy = Policy.parse("threshold:0.9")
    assert (policy.parameter, policy.label()) == ("tau", "τ=0.9")
    assert [str(p) for p in (policy.with_value(0.5), Policy.parse("factor:1").with_value(2))] == [
        "threshold:0.5",
        "factor:2",
    ]
    assert (
        Policy.parse("fixed:1").with_value(3) == Policy("fixed", 3)
        and Policy.parse("fixed:2").parameter == "k"
    )
    with pytest.raises(InputError, match=r"--thresholds: a threshold must be in \(0, 1\]"):
        policy.with_value(2, "--thresholds")
    with pytest.raises(InputError, match="unknown policy 'greedy'"):
        Policy.checked("greedy", 1, "--policy")


def test_the_strict_variant_is_the_policys_own():
    assert str(Policy.parse("threshold:0.85").strict_variant()) == "strict-threshold:0.85"
    for spec in ("strict-threshold:0.9", "fixed:1", "factor:1"):
        with pytest.raises(InputError, match="no strict variant"):
            Policy.parse(spec).strict_variant()


def test_the_decision_bound_is_the_confidence_a_rank_must_reach():
    assert Policy.parse("threshold:0.9").bound(3) == pytest.approx(0.9)
    assert Policy.parse("strict-threshold:0.7").bound(0) == pytest.approx(0.7)
    assert Policy.parse("factor:1").bound(1) == pytest.approx(1 - 1 / 3)  # n = 2: 1 - f / (n + 1)
    assert Policy.parse("fixed:2").bound(0) is None  # a rank cut has no confidence bound


def test_in_a_graph_the_value_is_a_tensor_except_a_rank_cut():
    graph = Policy.parse("threshold:0.9").in_graph("cpu")
    assert torch.is_tensor(graph.value) and graph.value.dtype == torch.float32
    assert Policy.parse("fixed:2").in_graph("cpu") == Policy("fixed", 2)
    confidence = torch.tensor([[0.95, 0.5, 0.9, 0.3]])
    assert torch.equal(
        commit_mask(graph, confidence, ALL), commit_mask(Policy.parse("threshold:0.9"), confidence, ALL)
    )


def test_reading_a_policy_does_not_import_torch():
    """The tables read policies from records (orl.report) without loading torch."""
    import subprocess
    import sys

    code = (
        "import sys; from orl.decoding.policy import Policy; Policy.parse('threshold:0.9').label(); "
        "import orl.report.matching; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_strict_threshold_commits_only_above_tau_as_sglang_and_sdar_do():
    assert picks("strict-threshold:0.9", [0.95, 0.5, 0.9, 0.3]) == [0]  # 0.9 itself is not above 0.9
    assert picks("threshold:0.9", [0.95, 0.5, 0.9, 0.3]) == [0, 2]
    assert picks("strict-threshold:0.9", [0.4, 0.6, 0.5, 0.3]) == [1]  # the most confident one, as always


def test_any_of_several_end_tokens_fills_and_finishes_the_block():
    eos_ids = torch.tensor([7, 1])  # e.g. Qwen's <|im_end|> and <|endoftext|>
    logits = _logits_favouring([3, 1, 2, 2], vocab=8)
    logits[0, 1, 1] = 50.0
    out = denoise_step(
        Policy.parse("fixed:1"), logits, torch.full((1, 4), 5), torch.ones(1, 4, dtype=torch.bool), eos_ids
    )
    assert out.tokens[0].tolist() == [5, 1, 7, 7]  # filled with the primary end token
    assert out.masked[0].tolist() == [True, False, False, False]


def test_without_the_fill_positions_after_eos_stay_masked():
    logits = _logits_favouring([3, 1, 2, 2])
    logits[0, 1, 1] = 50.0
    out = denoise_step(
        Policy.parse("fixed:1"),
        logits,
        torch.full((1, 4), 5),
        torch.ones(1, 4, dtype=torch.bool),
        EOS,
        eos_fill=False,
    )
    assert out.masked[0].tolist() == [True, False, True, True]


def test_the_eos_cut_keeps_the_first_end_token_and_drops_the_rest():
    assert cut_at_eos([5, 6, 1, 4, 1], [1]) == [5, 6, 1]
    assert cut_at_eos([5, 7, 1], [1, 7]) == [5, 7]
    assert cut_at_eos([5, 6], [1]) == [5, 6]


# ---------------------------------------------------------------------------------------
# The run of <eos> predictions before a committed <eos> (the trailing-<eos> rule)
# ---------------------------------------------------------------------------------------


def _right_to_left_tail(text: list[int], block: int, vocab: int = 8) -> torch.Tensor:
    """Logits of one block: `text`, then <eos> to the end, each <eos> more confident than the one before
    it, so fixed(1) alone would commit the tail right to left, one position per step."""
    logits = torch.zeros(1, block, vocab)
    for i in range(block):
        if i < len(text):
            logits[0, i, text[i]] = 4.0
        else:
            logits[0, i, 1] = 6.0 + i
    return logits


def test_committing_the_last_eos_commits_the_whole_predicted_tail_at_once():
    logits = _right_to_left_tail([3, 4], 6)
    out = denoise_step(
        Policy.parse("fixed:1"), logits, torch.full((1, 6), 5), torch.ones(1, 6, dtype=torch.bool), EOS
    )
    assert out.tokens[0].tolist() == [5, 5, 1, 1, 1, 1]
    assert out.committed[0].tolist() == [False, False, True, True, True, True]


@pytest.mark.parametrize("breaker", ["masked text", "committed text"])
def test_the_run_stops_at_a_position_not_predicted_eos(breaker):
    logits = _right_to_left_tail([3, 4], 6)
    logits[0, 3] = 0.0
    logits[0, 3, 2] = 4.0  # position 3 now predicts text, between the <eos> predictions of 2 and 4-5
    tokens, masked = torch.full((1, 6), 5), torch.ones(1, 6, dtype=torch.bool)
    if breaker == "committed text":
        tokens[0, 3], masked[0, 3] = 2, False
    out = denoise_step(Policy.parse("fixed:1"), logits, tokens, masked, EOS)
    assert out.tokens[0].tolist()[3:] == [2 if breaker == "committed text" else 5, 1, 1]
    assert out.masked[0].tolist() == [True, True, True, breaker == "masked text", False, False]


def test_without_the_fill_there_is_no_run():
    logits = _right_to_left_tail([3, 4], 6)
    out = denoise_step(
        Policy.parse("fixed:1"),
        logits,
        torch.full((1, 6), 5),
        torch.ones(1, 6, dtype=torch.bool),
        EOS,
        eos_fill=False,
    )
    assert out.committed[0].tolist() == [False] * 5 + [True]


class _ScriptedModel(torch.nn.Module):
    """A stand-in block-diffusion model whose logits depend only on the position: the completion's text
    at its positions, then <eos> with confidence rising to the block's end (the right-to-left pattern)."""

    def __init__(self, text: list[int], prompt_len: int, block: int, vocab: int = 8):
        super().__init__()
        self.config = type("Config", (), {"max_position_embeddings": 256})()
        self.weight = torch.nn.Parameter(torch.zeros(vocab, 4))
        self.text, self.prompt_len, self.block, self.vocab = text, prompt_len, block, vocab

    @property
    def embedding(self) -> torch.Tensor:
        return self.weight

    def residual_term(self, z: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight[..., None] * z  # no adapter: the entropy-weighted form

    def forward(self, inputs_embeds, positions, mask, logits_to_keep=None):
        if logits_to_keep is not None:
            positions = positions[:, -logits_to_keep:]
        logits = torch.zeros(*positions.shape, self.vocab)
        for row, pos in enumerate(positions.tolist()):
            for col, p in enumerate(pos):
                i = p - self.prompt_len  # completion index
                if 0 <= i < len(self.text):
                    logits[row, col, self.text[i]] = 4.0
                elif i >= len(self.text):
                    logits[row, col, 1] = 6.0 + i % self.block
        return logits


@pytest.mark.parametrize("length", [3, 8, 13, 16])
def test_fixed_1_tpf_is_at_least_one_when_the_tail_is_predicted_eos(length):
    from orl.decoding import DecodeRule, decode_blocks

    B, prompt = 8, [6, 6, 6]
    text = [2 + i % 5 for i in range(length)]  # no end token among them
    model = _ScriptedModel(text, len(prompt), B)
    for policy in ("fixed:1", "threshold:0.9", "factor:1.0"):
        rule = DecodeRule(policy=Policy.parse(policy), block=B, mask_id=7, eos_ids=(1,))
        result = decode_blocks(model, [prompt], rule, max_new_tokens=32, pad_id=0)
        assert result.completions[0] == text + [1]
        assert len(result.completions[0]) >= result.nfe[0], (
            policy
        )  # TPF >= 1: no forward only for dropped tail
        if policy == "fixed:1":
            assert result.nfe[0] == length + 1  # one forward per kept token, the <eos> included
    # Without the run, fixed(1) spends a forward on every dropped tail position.
    rule = DecodeRule(policy=Policy.parse("fixed:1"), block=B, mask_id=7, eos_ids=(1,), eos_fill=False)
    assert (
        decode_blocks(model, [prompt], rule, max_new_tokens=32, pad_id=0).nfe[0] == -(-(length + 1) // B) * B
    )


def test_parity_measures_a_decisions_margin_from_the_policys_own_bound():
    from orl.eval.parity import StepRecord, decision_margin

    confidence = torch.tensor([0.905, 0.5, 0.2, 0.1])
    step = StepRecord(
        confidence=confidence,
        top2=torch.tensor([[0.905, 0.05]] + [[0.5, 0.1]] * 3),
        masked=torch.ones(4, dtype=torch.bool),
        committed=torch.tensor([True, False, False, False]),
        tokens=torch.zeros(4, dtype=torch.long),
    )
    first = torch.tensor([True, False, False, False])
    assert decision_margin(Policy.parse("threshold:0.9"), step, first) == pytest.approx(
        0.005, abs=1e-6
    )  # from τ
    assert decision_margin(Policy.parse("factor:1"), step, first) == pytest.approx(
        0.405, abs=1e-6
    )  # from 1 - 1/2
    assert decision_margin(Policy.parse("fixed:1"), step, first) == pytest.approx(
        0.405, abs=1e-6
    )  # from the next rank
