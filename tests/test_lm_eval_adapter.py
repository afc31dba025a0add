"""The lm-eval adapter: a shipped offline task evaluated through dlmrt, likelihoods for AR checkpoints."""

from __future__ import annotations

import importlib.metadata
import json
import socket

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-eval is the optional 'eval' extra")

from lm_eval.api.instance import Instance  # noqa: E402

from orl.eval import lm_eval_adapter as adapter  # noqa: E402


@pytest.fixture
def no_network(monkeypatch):
    """Offline mode for the HF libraries, and any TCP/UDP connect fails loudly."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    real_connect = socket.socket.connect

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise OSError(f"network disabled in this test (tried {address})")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


def _request(kind: str, *args) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=tuple(args), idx=0)


def test_shipped_task_data_matches_the_generator():
    from orl.tasks import tinycode

    rows = [json.loads(line) for line in (adapter.TASKS_DIR / "tinycode_gen.jsonl").read_text().splitlines()]
    expected = tinycode.eval_problems("medium")[: len(rows)]
    assert len(rows) == 8
    for row, problem in zip(rows, expected, strict=True):
        assert row == {k: problem[k] for k in ("task_id", "prompt", "canonical_solution", "entry_point")}


def test_device_defaults_to_cuda_where_there_is_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert adapter.default_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert adapter.default_device() == "cpu"


def test_the_floor_is_the_version_with_custom_dataset():
    """The shipped task loads its data with `custom_dataset` (lm-eval 0.4.9): the eval extra says so."""
    from orl.io import REPO_ROOT

    assert 'eval = ["lm-eval>=0.4.9"]' in (REPO_ROOT / "pyproject.toml").read_text()
    assert "custom_dataset" in (adapter.TASKS_DIR / "tinycode_gen.yaml").read_text()
    installed = tuple(int(x) for x in importlib.metadata.version("lm-eval").split(".")[:3])
    assert installed >= (0, 4, 9)


def test_cut_at_stop_and_budget():
    assert adapter.cut_at_stop("abc\ndef x\nghi", ["\ndef ", "gh"]) == "abc"
    assert adapter.cut_at_stop("abc", []) == "abc"
    assert adapter.cut_at_stop("abc", [""]) == "abc"
    assert adapter.generation_budget(10, 64, 256) == 64
    assert adapter.generation_budget(200, 64, 256) == 56
    assert adapter.generation_budget(200, 64, 256, block_size=16) == 48  # whole blocks only
    from orl.errors import InputError

    with pytest.raises(InputError, match="no room"):
        adapter.generation_budget(250, 64, 256, block_size=16)


def test_simple_evaluate_offline_through_dlmrt(smoke_models, no_network):
    """The shipped YAML task, lm-eval's own evaluator, our dlmrt engine (eager mode: no compile time)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from orl.decoding import Policy
    from orl.engines.registry import build_engine

    limit = 3
    results = lm_eval.simple_evaluate(
        model="orl",
        model_args=f"engine=dlmrt-eager,ckpt={smoke_models[1]},policy=threshold:0.9",
        tasks=["tinycode_gen"],
        task_manager=TaskManager(include_path=str(adapter.TASKS_DIR)),
        limit=limit,
        bootstrap_iters=0,
        log_samples=True,
    )
    scores = results["results"]["tinycode_gen"]
    assert 0.0 <= scores["exact_match,none"] <= 1.0 and 0.0 <= scores["first_line_match,none"] <= 1.0
    samples = results["samples"]["tinycode_gen"]
    assert len(samples) == limit
    # Each response is the engine's own greedy completion, cut at the task's stop strings.
    engine = build_engine("dlmrt-eager", smoke_models[1], policy=Policy.parse("threshold:0.9"))
    for sample in samples:
        expected = adapter.cut_at_stop(
            engine.generate(sample["doc"]["prompt"], 64).text, ["\ndef ", "\nclass ", "\nif __name__"]
        )
        assert sample["resps"][0][0] == expected


@pytest.mark.slow
def test_simple_evaluate_offline_through_compiled_dlmrt(smoke_models, no_network):
    import lm_eval
    from lm_eval.tasks import TaskManager

    results = lm_eval.simple_evaluate(
        model="orl",
        model_args=f"engine=dlmrt,ckpt={smoke_models[1]},policy=threshold:0.9",
        tasks=["tinycode_gen"],
        task_manager=TaskManager(include_path=str(adapter.TASKS_DIR)),
        limit=2,
        bootstrap_iters=0,
    )
    assert results["results"]["tinycode_gen"]["sample_len"] == 2


def test_generate_until_honours_until_and_max_gen_toks(ar_ckpt_dir):
    lm = adapter.OrlLM(engine="reference", ckpt=str(ar_ckpt_dir))
    prompt = "def f(x):\n"
    full = lm.engine.generate(prompt, 6).text
    assert full, "the random model produced an empty completion; pick another prompt"
    stop = full[len(full) // 2 :][:2] or full[:1]
    out = lm.generate_until(
        [_request("generate_until", prompt, {"until": [stop], "max_gen_toks": 6})], disable_tqdm=True
    )
    assert out == [adapter.cut_at_stop(full, [stop])]
    assert len(out[0]) < len(full)
    from orl.errors import InputError

    with pytest.raises(InputError, match="greedily"):
        lm.generate_until(
            [_request("generate_until", prompt, {"do_sample": True, "temperature": 0.7})], disable_tqdm=True
        )


def test_loglikelihood_matches_transformers(ar_ckpt_dir):
    from transformers import AutoModelForCausalLM

    lm = adapter.OrlLM(engine="reference", ckpt=str(ar_ckpt_dir))
    context, continuation = "def f(x):\n", "    return x + 1\n"
    ((logprob, _),) = lm.loglikelihood([_request("loglikelihood", context, continuation)])
    ctx, cont = lm._split(context, continuation)
    hf = AutoModelForCausalLM.from_pretrained(
        str(ar_ckpt_dir), local_files_only=True, dtype=torch.float32
    ).eval()
    with torch.no_grad():
        logits = hf(torch.tensor([ctx + cont])).logits[0].float()
    expected = torch.log_softmax(logits[len(ctx) - 1 : -1], -1).gather(-1, torch.tensor(cont)[:, None]).sum()
    assert logprob == pytest.approx(float(expected), abs=1e-3)
    assert logprob < 0


def test_is_greedy_and_rolling(ar_ckpt_dir):
    from orl.engines.reference import ReferenceAR
    from orl.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(ar_ckpt_dir)
    context = ckpt.tokenizer.encode("def g(n):\n")
    greedy = ReferenceAR(ckpt).generate("def g(n):\n", 5).token_ids
    max_pos = ckpt.model.config.max_position_embeddings
    logprob, is_greedy = adapter.continuation_logprob(ckpt.model, context, greedy, max_pos)
    assert is_greedy and logprob < 0
    altered = greedy[:-1] + [(greedy[-1] + 1) % ckpt.model.config.vocab_size]
    assert adapter.continuation_logprob(ckpt.model, context, altered, max_pos)[1] is False

    lm = adapter.OrlLM(engine="reference", ckpt=str(ar_ckpt_dir))
    text = "def g(n):\n    return n\n"
    (rolling,) = lm.loglikelihood_rolling([_request("loglikelihood_rolling", text)])
    ids = ckpt.tokenizer.encode(text)
    assert rolling == pytest.approx(
        adapter.continuation_logprob(ckpt.model, [ckpt.tokenizer.eos_id], ids, max_pos)[0], abs=1e-4
    )


def test_loglikelihood_of_a_diffusion_model_explains_why_not(smoke_models):
    lm = adapter.OrlLM(engine="reference", ckpt=str(smoke_models[1]), policy="threshold:0.9")
    with pytest.raises(NotImplementedError, match="block-diffusion"):
        lm.loglikelihood([_request("loglikelihood", "a", "b")])
    with pytest.raises(NotImplementedError, match="ELBO"):
        lm.loglikelihood_rolling([_request("loglikelihood_rolling", "a")])


def test_chat_template_for_instruct_checkpoints_as_transformers_renders_it(sdar_ckpt, no_network):
    """SDAR (an instruct layout: Qwen-style tokenizer with a ChatML template) through lm-eval's own evaluator
    with apply_chat_template: every request reaches the engine rendered as transformers renders it, and
    the checkpoint counts as block diffusion (no likelihoods)."""
    import lm_eval
    from lm_eval.tasks import TaskManager
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(sdar_ckpt.dir))
    lm = adapter.OrlLM(engine="reference", ckpt=str(sdar_ckpt.dir), device="cpu", max_gen_toks=8)
    assert lm.is_diffusion and lm.block_size == sdar_ckpt.block_size
    history = [{"role": "user", "content": "def add(a, b):"}]
    assert lm.apply_chat_template(history) == hf.apply_chat_template(
        history, tokenize=False, add_generation_prompt=True
    )
    prefill = [*history, {"role": "assistant", "content": "    return"}]
    assert lm.apply_chat_template(prefill, add_generation_prompt=False) == hf.apply_chat_template(
        prefill, tokenize=False, add_generation_prompt=False
    )
    with pytest.raises(NotImplementedError, match="block-diffusion"):
        lm.loglikelihood([_request("loglikelihood", "a", "b")])

    # The prompts are what this test checks (decoding through lm-eval is the simple_evaluate tests'): the
    # real engine decodes each with a 4-token budget instead of the task's 64, one forward per token of a
    # bf16 checkpoint (about 45 s less on a CPU without bf16 instructions).
    seen = []
    real_generate = lm.engine.generate
    lm.engine.generate = lambda prompt, budget: seen.append(prompt) or real_generate(prompt, min(budget, 4))
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=["tinycode_gen"],
        limit=2,
        bootstrap_iters=0,
        log_samples=True,
        task_manager=TaskManager(include_path=str(adapter.TASKS_DIR)),
        apply_chat_template=True,
    )
    prompts = [sample["doc"]["prompt"] for sample in results["samples"]["tinycode_gen"]]
    assert sorted(seen) == sorted(
        hf.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    )


def test_a_checkpoint_without_a_template_says_so(ar_ckpt_dir):
    lm = adapter.OrlLM(engine="reference", ckpt=str(ar_ckpt_dir), device="cpu")  # our BPE: no chat template
    with pytest.raises(adapter.InputError, match="tokenizer_config.json: chat_template"):
        lm.apply_chat_template([{"role": "user", "content": "x"}])
