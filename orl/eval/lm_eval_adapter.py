"""Our engines as an lm-eval (lm-evaluation-harness) model, registered as "orl".

    import orl.eval.lm_eval_adapter  # registers the model
    lm_eval.simple_evaluate(model="orl", model_args="engine=dlmrt,ckpt=DIR,policy=threshold:0.9",
                            tasks=["tinycode_gen"], task_manager=TaskManager(include_path=TASKS_DIR))

Any engine of orl.engines.registry works (dlmrt, reference, hf, hf-assisted, dflash,
vllm, sglang); `draft=DIR` gives the draft / drafter checkpoint and `method=M` a serving
row's method (orl serving-args). The device defaults to CUDA where torch sees one.

- generate_until: one greedy request per instance through the engine. Engines stop
  at <eos> or the budget only, so the completion is generated to `max_gen_toks`
  (clamped to the model's context) and then cut at the first `until` string. For
  greedy decoding this is the same text a decoder that stopped on the string would
  return, at the price of some tokens generated past it.
- loglikelihood / loglikelihood_rolling: for AR checkpoints, exact log-probabilities
  from our Transformer (the model, whatever engine decodes). For block-diffusion
  checkpoints (ours and SDAR / TraDo) NotImplementedError, with the reason (see
  DIFFUSION_LOGLIKELIHOOD).
- Chat templates: `simple_evaluate(..., apply_chat_template=True)` (`--apply_chat_template`)
  sends each request through the checkpoint's own template (tokenizer_config.json), as
  `orl eval-quality --chat` does; instruct checkpoints (SDAR-Chat, TraDo-Instruct, Qwen3)
  are evaluated on their own distribution that way.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from orl.errors import InputError

TASKS_DIR = Path(__file__).resolve().parent / "lm_eval_tasks"

DIFFUSION_LOGLIKELIHOOD = (
    "loglikelihood is not available for a block-diffusion checkpoint: the model has no left-to-right "
    "factorisation p(x_i | x_<i), so log p(continuation | context) is not computable in one pass; its "
    "masked-denoising objective only bounds it (an ELBO estimated by sampling masks), and lm-eval's "
    "'is_greedy' has no meaning for parallel decoding. Score dLLMs with generate_until tasks."
)


def default_device() -> str:
    """CUDA when torch sees a GPU (a GPU runner evaluates on it unless told otherwise), else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def cut_at_stop(text: str, until: list[str]) -> str:
    """Text before the earliest occurrence of any stop string (empty strings ignored)."""
    cut = len(text)
    for stop in until:
        if stop:
            index = text.find(stop)
            if index != -1:
                cut = min(cut, index)
    return text[:cut]


def generation_budget(prompt_len: int, requested: int, max_positions: int, block_size: int = 1) -> int:
    """New tokens that fit: the request, clamped to the context and rounded down to whole blocks."""
    room = (max_positions - prompt_len) // block_size * block_size
    if room <= 0:
        raise InputError(
            f"prompt: {prompt_len} tokens leave no room to generate in a context of {max_positions}"
            + (f" (blocks of {block_size})" if block_size > 1 else "")
        )
    return min(requested, room)


@torch.inference_mode()
def continuation_logprob(
    model, context: list[int], continuation: list[int], max_positions: int
) -> tuple[float, bool]:
    """(Σ log p(continuation | context), whether greedy decoding would produce the continuation).

    `context` must be non-empty (callers prepend <eos> as the document start). The
    window keeps the last max_positions + 1 tokens; the continuation must fit in it.
    """
    if not continuation:
        return 0.0, True
    if len(continuation) > max_positions:
        raise InputError(
            f"loglikelihood: continuation of {len(continuation)} tokens exceeds the context ({max_positions})"
        )
    tokens = (context + continuation)[-(max_positions + 1) :]
    device = next(model.parameters()).device
    inputs = torch.tensor([tokens[:-1]], device=device)
    logits = model(inputs)[0, -len(continuation) :].float()  # mask None: causal attention
    logprobs = torch.log_softmax(logits, dim=-1)
    target = torch.tensor(continuation, device=device)
    total = float(logprobs.gather(-1, target[:, None]).sum())
    greedy = bool((logprobs.argmax(-1) == target).all())
    return total, greedy


@register_model("orl")
class OrlLM(LM):
    """An lm-eval model backed by one of our engines."""

    def __init__(
        self,
        engine: str = "dlmrt",
        ckpt: str | None = None,
        draft: str | None = None,
        policy: str = "fixed:1",
        device: str | None = None,
        max_gen_toks: int = 256,
        residual: bool = True,
        method: str | None = None,
        batch_size=None,
        max_batch_size=None,
    ):
        super().__init__()
        from orl.decoding import Policy
        from orl.engines.registry import build_engine
        from orl.model.checkpoint import read_config
        from orl.model.config import is_diffusion_arch
        from orl.tokenizer import load_tokenizer

        if ckpt is None:
            raise InputError("model_args: ckpt=DIR is required (the checkpoint directory)")
        # batch_size / max_batch_size are lm-eval's; every engine here serves batch-1 requests.
        self.ckpt_dir = Path(ckpt)
        self.config = read_config(self.ckpt_dir)
        self.is_diffusion = is_diffusion_arch(self.config["architectures"][0])
        self.block_size = int(self.config.get("block_size", 1)) if self.is_diffusion else 1
        self.max_positions = int(self.config.get("max_position_embeddings", 0))
        self.tokenizer = load_tokenizer(self.ckpt_dir)
        self.max_gen_toks = int(max_gen_toks)
        self._device = device or default_device()
        self.engine_name = engine
        self.engine = build_engine(
            engine,
            self.ckpt_dir,
            policy=Policy.parse(str(policy)),
            draft_dir=draft,
            device=self._device,
            residual=_as_bool(residual),
            method=method,
        )
        self._ar_model = None

    # ---- generation ------------------------------------------------------------------

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from tqdm.auto import tqdm

        out = []
        for request in tqdm(requests, desc=f"generate_until ({self.engine_name})", disable=disable_tqdm):
            context, gen_kwargs = request.args
            gen_kwargs = dict(gen_kwargs or {})
            if gen_kwargs.get("do_sample") or float(gen_kwargs.get("temperature", 0.0) or 0.0) > 0.0:
                raise InputError(
                    "generate_until: the orl engines decode greedily (temperature 0); "
                    f"got do_sample={gen_kwargs.get('do_sample')}, "
                    f"temperature={gen_kwargs.get('temperature')}"
                )
            until = gen_kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            requested = int(gen_kwargs.get("max_gen_toks", self.max_gen_toks))
            budget = generation_budget(
                len(self.tokenizer.encode(context)), requested, self.max_positions, self.block_size
            )
            text = cut_at_stop(self.engine.generate(context, budget).text, until)
            self.cache_hook.add_partial("generate_until", request.args, text)
            out.append(text)
        return out

    # ---- likelihoods (AR checkpoints) -------------------------------------------------

    def _model(self):
        if self.is_diffusion:
            raise NotImplementedError(DIFFUSION_LOGLIKELIHOOD)
        if self._ar_model is None:
            # Our own model code scores the AR checkpoint, whichever engine generates.
            from orl.model.checkpoint import load_checkpoint

            self._ar_model = load_checkpoint(self.ckpt_dir, device=self._device).model
        return self._ar_model

    def _split(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Token ids of context and continuation, tokenized together when the boundary allows it."""
        ctx = self.tokenizer.encode(context)
        whole = self.tokenizer.encode(context + continuation)
        if whole[: len(ctx)] == ctx:
            cont = whole[len(ctx) :]
        else:  # a merge across the boundary: score the continuation's own tokens
            cont = self.tokenizer.encode(continuation)
        return (ctx or [self.tokenizer.eos_id]), cont

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        model = self._model()
        out = []
        for request in requests:
            context, continuation = request.args
            result = continuation_logprob(model, *self._split(context, continuation), self.max_positions)
            self.cache_hook.add_partial("loglikelihood", request.args, result)
            out.append(result)
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        model = self._model()
        out = []
        for request in requests:
            (text,) = request.args
            windows = get_rolling_token_windows(
                self.tokenizer.encode(text),
                prefix_token=self.tokenizer.eos_id,
                max_seq_len=self.max_positions,
                context_len=1,
            )
            total = 0.0
            for window in windows:
                context, continuation = make_disjoint_window(window)
                total += continuation_logprob(model, context, continuation, self.max_positions)[0]
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, total)
            out.append(total)
        return out

    # ---- chat templates -----------------------------------------------------------------

    @property
    def tokenizer_name(self) -> str:
        return str(self.ckpt_dir / "tokenizer.json")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """The checkpoint's template (lm-eval records it with the results); None where it has none."""
        return self.tokenizer.chat_template

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """lm-eval's few-shot chat history rendered by the checkpoint's template, as transformers renders
        it."""
        from orl.tokenizer import render_chat_template

        if self.tokenizer.chat_template is None:
            raise InputError(
                f"{self.ckpt_dir / 'tokenizer_config.json'}: chat_template: this checkpoint has no chat "
                "template (evaluate it without apply_chat_template)"
            )
        return render_chat_template(
            self.tokenizer.chat_template,
            chat_history,
            self.tokenizer.template_tokens,
            add_generation_prompt=add_generation_prompt,
        )


def _as_bool(value) -> bool:
    """model_args arrive as strings ("False") or already parsed values."""
    if isinstance(value, str):
        if value.lower() in ("1", "true", "yes"):
            return True
        if value.lower() in ("0", "false", "no"):
            return False
        raise InputError(f"model_args: expected true/false, got {value!r}")
    return bool(value)
