"""Real-format checkpoints built with transformers itself, and SDAR's reference decoding loop.

Fixture builders (used by tests/conftest.py, scope="session"; reusable by any test):
- `build_qwen_tokenizer`: a tiny byte-level BPE whose vocabulary is padded so that
  Qwen's special tokens sit at Qwen's ids (<|endoftext|> 151643, <|im_start|> 151644,
  <|im_end|> 151645, ... </think> 151668) and, for SDAR / TraDo, <|MASK|> at 151669;
  saved by transformers' PreTrainedTokenizerFast (tokenizer.json, tokenizer_config.json,
  chat_template.jinja), with a ChatML chat template;
- `build_qwen3_checkpoint`: a random-init transformers Qwen3ForCausalLM (hidden 64,
  2 layers, Qwen's vocabulary of 151936) saved with `save_pretrained(max_shard_size=...)`
  in bfloat16 (several shards + index), generation_config eos ids [151645, 151643];
- `build_sdar_checkpoint`: the same saved as SDAR does (architectures SDARForCausalLM,
  model_type sdar, block_size, mask_token_id 151669), next to a Qwen3-format twin
  that transformers loads (transformers has no SDAR class; the weights are Qwen3's).

`sdar_generate` reproduces JetAstra/SDAR generate.py's `block_diffusion_generate` under
greedy decoding, over transformers' Qwen3 with 4-D block masks: the oracle the
harness's SDAR-layout decoders are tested against (tokens, and forwards counted SDAR's way).
"""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

QWEN_VOCAB = 151936  # Qwen3's embedding rows (the tokenizer has fewer tokens)
ENDOFTEXT, IM_START, IM_END, SDAR_MASK_ID = 151643, 151644, 151645, 151669
QWEN_SPECIAL_TOKENS = [  # Qwen2.5 / Qwen3 added tokens, in id order from 151643
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]
SDAR_MASK = "<|MASK|>"

# A ChatML template written for these tests: a default system turn, role checks, the generation prompt.
CHAT_TEMPLATE = (
    "{%- if messages[0].role != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% "
    "endif %}"
    "{%- for message in messages %}"
    "{%- if message.role not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' ~ message.role) }}{% endif %}"
    "<|im_start|>{{ message.role }}\n{{ message.content | trim }}<|im_end|>\n"
    "{%- endfor %}\n"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_level_bpe(vocab_size: int = 600):
    """Vocabulary and merges of a small byte-level BPE trained on TinyCode text."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from orl.tasks import tinycode

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    texts = (p + c for p, c in itertools.islice(tinycode.train_stream(0, "easy"), 800))
    backend.train_from_iterator(texts, trainer=trainer)
    model = json.loads(backend.to_str())["model"]
    return model["vocab"], [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]


def build_qwen_tokenizer(out_dir: Path, *, with_mask: bool) -> Path:
    """A Qwen-style tokenizer in `out_dir` (saved by transformers), special tokens at Qwen's ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab, merges = _byte_level_bpe()
    # Unreachable filler entries (no merge produces them) push the added tokens to Qwen's ids.
    for i in range(ENDOFTEXT - len(vocab)):
        vocab[f"<filler_{i}>"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    specials = QWEN_SPECIAL_TOKENS + ([SDAR_MASK] if with_mask else [])
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    assert backend.token_to_id("<|endoftext|>") == ENDOFTEXT and backend.token_to_id("<|im_end|>") == IM_END
    assert not with_mask or backend.token_to_id(SDAR_MASK) == SDAR_MASK_ID
    kwargs = {"mask_token": SDAR_MASK} if with_mask else {}
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        **kwargs,
    )
    wrapped.save_pretrained(str(out_dir))
    return out_dir


def _random_qwen3(*, tie: bool, seed: int, logit_gain: float):
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=QWEN_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rope_theta=1e6,
        max_position_embeddings=40960,
        tie_word_embeddings=tie,
        bos_token_id=ENDOFTEXT,
        eos_token_id=IM_END,
        pad_token_id=ENDOFTEXT,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)  # larger than init: position-dependent, peaked predictions
        # Sharper output distributions: greedy paths with both confident and unconfident steps.
        model.lm_head.weight.mul_(logit_gain)
    model.generation_config = GenerationConfig(
        bos_token_id=ENDOFTEXT, eos_token_id=[IM_END, ENDOFTEXT], pad_token_id=ENDOFTEXT
    )
    return model


def build_qwen3_checkpoint(
    out_dir: Path,
    *,
    tie: bool = True,
    seed: int = 0,
    logit_gain: float = 8.0,
    max_shard_size: str = "8MB",
    with_mask: bool = False,
) -> Path:
    """A random Qwen3 AR checkpoint, bf16, sharded, with a Qwen-style tokenizer."""
    model = _random_qwen3(tie=tie, seed=seed, logit_gain=logit_gain)
    model.to(torch.bfloat16).save_pretrained(str(out_dir), max_shard_size=max_shard_size)
    build_qwen_tokenizer(out_dir, with_mask=with_mask)
    return out_dir


@dataclass(frozen=True)
class SdarFixture:
    dir: Path  # the SDAR-format checkpoint (what the harness loads)
    hf_dir: Path  # the same weights as a transformers Qwen3 checkpoint (what the oracle runs)
    block_size: int


def build_sdar_checkpoint(
    root: Path, *, block_size: int = 4, seed: int = 1, logit_gain: float = 8.0
) -> SdarFixture:
    """An SDAR-format checkpoint (untied, bf16, sharded) and its Qwen3-format twin."""
    hf_dir = build_qwen3_checkpoint(
        root / "qwen3-twin", tie=False, seed=seed, logit_gain=logit_gain, with_mask=True
    )
    sdar_dir = root / "sdar"
    shutil.copytree(hf_dir, sdar_dir)
    config = json.loads((sdar_dir / "config.json").read_text())
    config.update(
        architectures=["SDARForCausalLM"],
        model_type="sdar",
        block_size=block_size,
        mask_token_id=SDAR_MASK_ID,
    )
    (sdar_dir / "config.json").write_text(json.dumps(config, indent=2))
    return SdarFixture(dir=sdar_dir, hf_dir=hf_dir, block_size=block_size)


def load_hf_qwen3(ckpt_dir: Path, dtype: torch.dtype = torch.float32):
    from transformers import Qwen3ForCausalLM

    return Qwen3ForCausalLM.from_pretrained(str(ckpt_dir), dtype=dtype).eval()


# --------------------------------------------------------------------------------------
# SDAR's reference loop (JetAstra/SDAR generate.py, block_diffusion_generate), greedy
# --------------------------------------------------------------------------------------


def sdar_block_mask(num_blocks: int, block_size: int) -> torch.Tensor:
    """[L, L] bool, L = num_blocks * block_size: query i may attend key j iff block(j) <= block(i)."""
    blocks = torch.arange(num_blocks * block_size) // block_size
    return blocks[None, :] <= blocks[:, None]


def transfer_counts(block_size: int, steps: int) -> list[int]:
    """Tokens to commit at each denoising step: block_size / steps, the remainder on the first steps."""
    base, extra = divmod(block_size, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


@dataclass
class SdarOutput:
    tokens: list[int]  # prompt + every decoded block (SDAR's `x`, without the blocks never reached)
    prompt_length: int
    denoise_forwards: int  # forwards that predicted masked positions
    store_forwards: int  # SDAR's extra forward per finished block that only writes its keys/values
    overwrites: int  # non-masked positions rewritten by top-k over -inf confidences (see below)

    @property
    def completion(self) -> list[int]:
        return self.tokens[self.prompt_length :]


@torch.no_grad()
def sdar_generate(
    model,
    prompt_ids: list[int],
    *,
    mask_id: int,
    gen_length: int,
    block_length: int,
    denoising_steps: int,
    remasking_strategy: str = "low_confidence_dynamic",
    confidence_threshold: float = 0.85,
    stop_ids: list[int] | None = None,
) -> SdarOutput:
    """SDAR's block_diffusion_generate with greedy sampling (argmax; confidence = its softmax probability).

    Semantics reproduced (generate.py):
    - the sequence is ceil((P + gen_length) / B) blocks of B at absolute positions; the
      prompt fills the first P, masks the rest;
    - the P // B full prompt blocks are context (block-causal, bidirectional inside each
      block); decoding starts at block P // B, which holds the prompt's tail (P % B
      tokens, kept as they are) and masks;
    - each step predicts the current block over everything before it, bidirectional
      inside the block (the prompt's tail too), logits at a position predicting it;
    - commit rule at step s, k = transfer_counts(B, steps)[s]: `low_confidence_static`
      commits the top-k confidences among masked positions; `low_confidence_dynamic`
      commits every masked position with confidence > threshold when there are at least
      k of them, else the top-k; `sequential` the k positions from the first mask on;
    - confidences of non-masked positions are -inf and top-k runs over the whole block:
      when fewer than k positions are still masked (the prompt-tail block, or after a
      dynamic step that committed more than k), top-k also picks non-masked positions and
      overwrites them with the current argmax (`overwrites` counts them);
    - a finished block costs SDAR one more forward that stores its keys/values
      (`store_forwards`); it changes no token;
    - after each block, generation stops if any stop id occurs after the prompt.

    generate.py keeps a KV cache of finished blocks; here every step recomputes the whole
    prefix instead. Under the block-causal mask a finished block's keys and values depend
    only on blocks up to itself, so both compute the same numbers. `model` is a
    transformers causal LM called with (input_ids, attention_mask [1, 1, t, t] bool,
    position_ids).
    """
    if remasking_strategy not in ("low_confidence_dynamic", "low_confidence_static", "sequential"):
        raise ValueError(f"unknown remasking strategy {remasking_strategy!r}")
    device = next(model.parameters()).device
    P, B = len(prompt_ids), block_length
    num_blocks = (P + gen_length + B - 1) // B
    full_mask = sdar_block_mask(num_blocks, B).to(device)
    positions = torch.arange(num_blocks * B, device=device)[None]
    x = torch.full((1, num_blocks * B), mask_id, dtype=torch.long, device=device)
    x[0, :P] = torch.tensor(prompt_ids, device=device)
    counts = transfer_counts(B, denoising_steps)
    denoise = store = overwrites = 0
    last = P // B
    for block in range(P // B, num_blocks):
        lo, hi = block * B, (block + 1) * B
        for step in range(denoising_steps + 1):
            cur = x[:, lo:hi]  # a view: commits below write into x
            masked = cur == mask_id
            if not bool(masked.any()):
                store += 1
                break
            logits = model(
                input_ids=x[:, :hi],
                attention_mask=full_mask[None, None, :hi, :hi],
                position_ids=positions[:, :hi],
            ).logits[:, lo:hi]
            denoise += 1
            x0_p, x0 = torch.softmax(logits.float(), dim=-1).max(dim=-1)
            k = counts[step]
            transfer = torch.zeros_like(masked)
            if remasking_strategy == "sequential":
                first = int(masked[0].nonzero()[0])
                transfer[0, first : first + k] = True
            else:
                confidence = torch.where(masked, x0_p, torch.tensor(-torch.inf, device=device))
                high = confidence[0] > confidence_threshold
                if remasking_strategy == "low_confidence_dynamic" and int(high.sum()) >= k:
                    transfer[0] = high
                else:
                    transfer[0, torch.topk(confidence[0], k).indices] = True
            overwrites += int((transfer & ~masked).sum())
            cur[transfer] = x0[transfer]
        last = block + 1
        if stop_ids is not None and any(int(t) in stop_ids for t in x[0, P:hi]):
            break
    return SdarOutput(
        tokens=x[0, : last * B].tolist(),
        prompt_length=P,
        denoise_forwards=denoise,
        store_forwards=store,
        overwrites=overwrites,
    )
