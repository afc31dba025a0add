"""The `hf` and `hf-assisted` baselines: transformers' own `generate`, greedy.

`hf` is plain greedy decoding of the AR checkpoint through
`AutoModelForCausalLM.generate`; `hf-assisted` is the same call with
`assistant_model=` a small draft model (transformers' assisted generation,
i.e. speculative decoding with greedy acceptance), the CPU stand-in for the
draft-model speculative row of Table 2.

TPF is counted, never estimated: a forward pre-hook on the target module and
another on the draft module count every forward call `generate` makes.

How forwards are counted (orl/engines/forwards.py, the same for every engine):
- the first target forward carries the prompt (`nfe_prefill` = 1); it already yields
  the first new token (plain greedy) or verifies the first drafted tokens (assisted).
- `nfe` is every later target forward. Plain greedy therefore has nfe == generated
  tokens - 1; assisted generation's acceptance length (tokens per target forward,
  bonus token included) is orl/eval/speculative.py's.
- `draft_forwards` counts the draft model's forward calls.

Verification (orl/decoding/verify.py). Strict verification runs transformers' own assisted
generation (its greedy comparison is the strict rule: the draft token must equal the target's
argmax). transformers has no hook for another acceptance rule, so relaxed verification (any δ,
δ = 1 included) runs `HFEngine._speculate`: the same algorithm written out over the same two
transformers models and their DynamicCaches (constant draft of k tokens, the draft stopping at
<eos>, never past the budget), accepting with the project's one rule, `accept`. At δ = 1 it
decodes exactly transformers' greedy tokens with the same target forwards (tests/test_relaxed.py),
so a δ sweep's δ = 1 point is the strict reference timed through the same loop.

Text goes through our tokenizer (orl.tokenizer), not transformers', so prompts
and completions round-trip exactly as for every other engine.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from orl.decoding import cut_at_eos, plan_request
from orl.decoding.verify import STRICT, Verification, accept
from orl.engines.base import EngineInfo, Generation
from orl.engines.forwards import decode_forwards
from orl.errors import CheckpointError, InputError
from orl.model.provenance import model_name


@dataclass(frozen=True)
class AssistConfig:
    """The draft strategy of assisted generation, pinned: applied afresh to the draft before every request.

    transformers' strategy has three moving parts (generation/candidate_generator.py):
    - `num_assistant_tokens_schedule`: "heuristic" grows / shrinks the draft length after every
      verification, and keeps it across calls on the same draft model; we pin "constant";
    - `assistant_confidence_threshold` (transformers' default 0.4): the draft stops early when its
      token's probability falls below it (ConfidenceCriteria, only when the threshold is > 0);
    - and when scikit-learn is installed, that threshold is re-tuned *inside each request*: after
      every verification an ROC curve of (draft probability, accepted?) picks the threshold that
      minimises false positives + 3 false negatives, so the draft length of later steps depends on
      earlier ones (AssistedCandidateGenerator.update_candidate_strategy).
    The default here turns the confidence stop off (threshold None -> 0), which also turns the ROC
    re-tuning off whether or not scikit-learn is installed: a constant draft of
    `num_assistant_tokens` tokens per verification, the strategy vLLM's draft_model and SGLang's
    STANDALONE speculative decoding use. A threshold > 0 is honoured as transformers does it, and
    the record says whether it was being re-tuned (strategy()).
    """

    num_assistant_tokens: int = 5  # draft tokens proposed per target verification
    confidence_threshold: float | None = None  # None: no early stop, hence no re-tuning either

    def strategy(self) -> dict:
        """What the record says about the draft strategy transformers ran."""
        from transformers.utils import is_sklearn_available

        threshold = self.confidence_threshold or 0.0
        return {"num_assistant_tokens": self.num_assistant_tokens, "schedule": "constant",
                "confidence_threshold": threshold or None, "confidence_stop": threshold > 0,
                "threshold_retuned_per_request": threshold > 0 and is_sklearn_available(),
                "sklearn_installed": is_sklearn_available()}  # fmt: skip


class ForwardCounter:
    """Counts forward calls of a module through a pre-hook (removable)."""

    def __init__(self, module: torch.nn.Module):
        self.count = 0
        self._handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, module, args) -> None:
        self.count += 1

    def reset(self) -> None:
        self.count = 0

    def remove(self) -> None:
        self._handle.remove()


def load_hf_causal_lm(
    ckpt_dir: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
):
    """AutoModelForCausalLM from a local AR checkpoint directory (never the network)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from orl.model.checkpoint import AR_ARCH, CONFIG, read_config

    # a "Loading weights" bar per model would drown the harness's own output
    hf_logging.disable_progress_bar()

    config = read_config(ckpt_dir)
    if config["architectures"][0] != AR_ARCH:
        # transformers would load a block-diffusion checkpoint as a causal Qwen3 model
        # without complaint (same tensors, model_type qwen3) and decode nonsense.
        raise CheckpointError(
            f"{Path(ckpt_dir) / CONFIG}: architectures: the hf engines need an AR checkpoint ({AR_ARCH}), "
            f"got {config['architectures'][0]}"
        )
    model = AutoModelForCausalLM.from_pretrained(str(ckpt_dir), local_files_only=True, dtype=dtype)
    return model.to(device).eval()


def _same_vocabulary(a, b) -> bool:
    return a.eos_id == b.eos_id and a.backend.get_vocab(with_added_tokens=True) == b.backend.get_vocab(
        with_added_tokens=True
    )


def load_hf_engine(
    ckpt_dir: str | Path,
    *,
    draft_dir: str | Path | None = None,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    assist: AssistConfig | None = None,
    ignore_eos: bool = False,
    verification: Verification = STRICT,
) -> HFEngine:
    """The hf (or, with a draft, hf-assisted) engine of a local AR checkpoint directory."""
    from orl.model.checkpoint import TOKENIZER, read_config
    from orl.tokenizer import load_tokenizer

    ckpt_dir = Path(ckpt_dir)
    tokenizer = load_tokenizer(ckpt_dir / TOKENIZER)
    model = load_hf_causal_lm(ckpt_dir, device, dtype)
    draft = None
    if draft_dir is not None:
        draft_dir = Path(draft_dir)
        if not _same_vocabulary(tokenizer, load_tokenizer(draft_dir / TOKENIZER)):
            raise CheckpointError(
                f"{draft_dir / TOKENIZER}: the draft's tokenizer differs from the target's "
                f"({ckpt_dir / TOKENIZER}); assisted generation here needs one shared vocabulary"
            )
        draft = load_hf_causal_lm(draft_dir, device, dtype)
    name = model_name(read_config(ckpt_dir), ckpt_dir)
    return HFEngine(
        model,
        tokenizer,
        model_name=name,
        ckpt_dir=ckpt_dir,
        draft=draft,
        draft_dir=draft_dir,
        assist=assist,
        ignore_eos=ignore_eos,
        verification=verification,
    )


def cache_keyword(model: torch.nn.Module) -> str:
    """The keyword a transformers causal LM's forward takes its KV cache by: `cache` in 5.25,
    `past_key_values` in 5.19 (vLLM's environment) and 4.x. An undeclared name is dropped by its **kwargs
    and the model would silently decode without its context, so the name is read from the signature."""
    declared = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in declared:
            return name
    raise CheckpointError(
        f"{type(model).__name__}.forward takes its KV cache by neither `cache` nor `past_key_values` "
        "(the transformers versions this engine knows); relaxed verification needs one of them"
    )


def _keep(cache, length: int) -> None:
    """Cut a transformers cache back to its first `length` positions (its crop takes how many to remove)."""
    remove = cache.get_seq_length() - length
    if remove > 0:
        cache.crop(-remove)


class HFEngine:
    """Greedy `generate` of a transformers causal LM, optionally assisted by a draft model."""

    def __init__(
        self,
        model,
        tokenizer,
        *,
        model_name: str,
        ckpt_dir: Path | None = None,
        draft=None,
        draft_dir: Path | None = None,
        assist: AssistConfig | None = None,
        ignore_eos: bool = False,
        verification: Verification = STRICT,
    ):
        if verification.relaxed and draft is None:
            raise InputError("--verification: relaxed verification needs a draft model (engine hf-assisted)")
        self.model, self.tokenizer, self.model_name = model, tokenizer, model_name
        self.ckpt_dir, self.draft, self.draft_dir = ckpt_dir, draft, draft_dir
        self.device = next(model.parameters()).device
        self.precision = str(next(model.parameters()).dtype).replace("torch.", "")
        self.assist = assist or AssistConfig()
        self.ignore_eos = ignore_eos  # speed runs: generate to the budget whatever the model emits
        self.verification = verification
        self.name = "hf-assisted" if draft is not None else "hf"
        self.max_positions = int(model.config.max_position_embeddings)
        self.target_forwards = ForwardCounter(model)
        self.draft_forwards = ForwardCounter(draft) if draft is not None else None
        # The relaxed loop calls both models itself (_logits), with their caches passed by name.
        self.cache_keywords = {id(m): cache_keyword(m) for m in (model, draft) if m is not None}

    def describe(self) -> EngineInfo:
        """The record's view: policy = the speculation settings (None for plain greedy)."""
        rule = self.verification
        policy = (
            None
            if self.draft is None
            else {
                "name": "assisted-relaxed" if rule.relaxed else "assisted-greedy",
                "params": {**asdict(self.assist), "verification": str(rule)},
            }
        )
        settings = {"stop_at_eos": not self.ignore_eos}
        if self.draft_dir is not None:
            settings["draft"] = str(self.draft_dir)
        if self.draft is not None:
            settings["draft_strategy"] = self.assist.strategy()
            settings["verification"] = rule.to_record()
            settings["loop"] = (
                "orl speculative loop (orl/engines/hf.py HFEngine._speculate)"
                if rule.relaxed
                else "transformers generate (assisted generation)"
            )
        ckpt = str(self.ckpt_dir) if self.ckpt_dir is not None else None
        return EngineInfo(
            self.name,
            self.model_name,
            ckpt,
            self.precision,
            str(self.device),
            policy,
            settings,
            speculative=self.draft is not None,
        )

    def compile_key(self, prompt: str, max_new_tokens: int) -> None:
        return None

    def close(self) -> None:
        pass  # nothing beyond memory

    def _reset_assistant(self) -> None:
        config = self.draft.generation_config
        config.num_assistant_tokens = self.assist.num_assistant_tokens
        config.num_assistant_tokens_schedule = "constant"
        # 0 disables both the confidence stop and its per-request re-tuning (AssistConfig).
        config.assistant_confidence_threshold = self.assist.confidence_threshold or 0.0

    @torch.inference_mode()
    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        tok = self.tokenizer
        ids = tok.encode(prompt)
        plan_request(len(ids), max_new_tokens, self.max_positions)
        if self.verification.relaxed:
            return self._speculate(ids, max_new_tokens)
        input_ids = torch.tensor([ids], device=self.device)
        kwargs = {"min_new_tokens": max_new_tokens} if self.ignore_eos else {}
        if self.draft is not None:
            self._reset_assistant()
            self.draft_forwards.reset()
            kwargs["assistant_model"] = self.draft
        self.target_forwards.reset()
        start = time.perf_counter()
        output = self.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            eos_token_id=list(tok.eos_ids),
            pad_token_id=tok.pad_id,
            **kwargs,
        )
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        wall = time.perf_counter() - start
        generated = output[0, len(ids) :].tolist()
        if not self.ignore_eos:
            generated = cut_at_eos(generated, tok.eos_ids)
        prefill = 1 if self.target_forwards.count else 0
        return Generation(
            token_ids=generated,
            text=tok.decode_completion(generated),
            nfe=decode_forwards(self.target_forwards.count, prefill),
            nfe_prefill=prefill,
            wall_time_s=wall,
            draft_forwards=self.draft_forwards.count if self.draft is not None else 0,
        )

    def _logits(self, model, cache, tokens: list[int]) -> torch.Tensor:
        """One forward of `model` over `tokens` after what `cache` holds; float32 logits [len(tokens), V],
        with <eos> impossible in speed runs (what transformers' min_new_tokens does for the strict path)."""
        cache_argument = {self.cache_keywords[id(model)]: cache}
        out = model(input_ids=torch.tensor([tokens], device=self.device), use_cache=True, **cache_argument)
        logits = out.logits[0].float()
        if self.ignore_eos:
            logits[:, list(self.tokenizer.eos_ids)] = float("-inf")
        return logits

    def _speculate(self, ids: list[int], max_new_tokens: int) -> Generation:
        """Assisted generation with this engine's verification rule (module docstring): the draft proposes
        up to k tokens greedily, the target scores them in one forward, `accept` keeps a prefix and emits
        the target's own token after it; both caches are cut back to the tokens kept."""
        from transformers import DynamicCache

        eos = set(self.tokenizer.eos_ids)
        self.target_forwards.reset()
        self.draft_forwards.reset()
        start = time.perf_counter()
        target_cache = DynamicCache(config=self.model.config)
        draft_cache = DynamicCache(config=self.draft.config)
        committed, generated = list(ids), []
        target_done = draft_done = 0  # positions below these are in each cache
        drafted = accepted = 0
        while len(generated) < max_new_tokens:
            L = len(committed)
            k = min(self.assist.num_assistant_tokens, max_new_tokens - len(generated) - 1)
            draft: list[int] = []
            pending = committed[draft_done:]
            while len(draft) < k:
                token = int(self._logits(self.draft, draft_cache, pending)[-1].argmax())
                draft.append(token)
                pending = [token]
                if token in eos and not self.ignore_eos:
                    break  # nothing after <eos> is worth verifying (transformers' draft stops there too)
            draft_done = L + len(draft) - 1 if draft else draft_done
            logits = self._logits(self.model, target_cache, committed[target_done:] + draft)
            n, emitted = accept(logits[L - 1 - target_done :], draft, self.verification)
            new = draft[:n] + [emitted]
            target_done = L + n  # the kept drafts' keys/values stay cached; the emitted token is not yet
            _keep(target_cache, target_done)
            if draft_done > target_done:
                draft_done = target_done
                _keep(draft_cache, draft_done)
            drafted, accepted = drafted + len(draft), accepted + n
            committed += new
            generated += new
            if not self.ignore_eos and eos & set(new):
                break
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        wall = time.perf_counter() - start
        if not self.ignore_eos:
            generated = cut_at_eos(generated, self.tokenizer.eos_ids)
        generated = generated[:max_new_tokens]
        return Generation(
            token_ids=generated,
            text=self.tokenizer.decode_completion(generated),
            nfe=decode_forwards(self.target_forwards.count, 1),
            nfe_prefill=1,
            wall_time_s=wall,
            draft_forwards=self.draft_forwards.count,
            extra={"drafted_tokens": drafted, "accepted_tokens": accepted},
        )


def build_hf(
    ckpt_dir: str | Path,
    *,
    draft_dir: str | Path | None,
    device: str,
    dtype: torch.dtype | None,
    ignore_eos: bool,
    verification: Verification,
    num_speculative_tokens: int | None,
) -> HFEngine:
    """hf, or hf-assisted with a draft (orl/engines/registry.py DirectoryBuild); float32 unless `dtype`
    says otherwise; `num_speculative_tokens` pins the draft's tokens per verification."""
    assist = AssistConfig(num_assistant_tokens=num_speculative_tokens) if num_speculative_tokens else None
    return load_hf_engine(
        ckpt_dir,
        draft_dir=draft_dir,
        device=device,
        dtype=dtype or torch.float32,
        ignore_eos=ignore_eos,
        assist=assist,
        verification=verification,
    )
