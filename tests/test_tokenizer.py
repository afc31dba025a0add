"""Tokenizers: ours (literal specials) and Qwen-family ones (side files, eos lists, chat templates)."""

from __future__ import annotations

import json
import shutil

import pytest

from orl.errors import CheckpointError, InputError
from orl.tokenizer import load_tokenizer, tokenizer_config, train_bpe
from orl.train.config import STAGE_SECTIONS, load_preset

from .real_checkpoints import CHAT_TEMPLATE, ENDOFTEXT, IM_END, IM_START, SDAR_MASK_ID


def test_our_tiny_tokenizer_keeps_its_literal_special_tokens(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "tokenizer.json")
    loaded = load_tokenizer(tmp_path)
    assert (loaded.eos_id, loaded.pad_id, loaded.mask_id) == (
        tokenizer.eos_id,
        tokenizer.pad_id,
        tokenizer.mask_id,
    )
    assert loaded.eos_ids == (loaded.eos_id,) and loaded.chat_template is None
    with pytest.raises(
        InputError, match=r"tokenizer_config\.json: chat_template: this tokenizer has no chat template"
    ):
        loaded.apply_chat_template("hi")


def test_split_digits_makes_every_digit_its_own_token(tmp_path):
    """tokenizer.split_digits: no token holds two digits (Qwen3's rule), text round-trips, the saved
    tokenizer.json keeps the rule; without it the same corpus merges whole numbers. Only the stages that
    read the tokenizer section change digest; the default leaves every digest as it was."""
    lines = [
        f"So she has {a} + {b} = {a + b} apples.\n    return x[{a}:] * {b}\n"
        for a in range(40)
        for b in range(9)
    ]
    text = "So she has 13 + 5 = 18 apples.\n    return x[102:] * 7\n"
    digit_tokens = {}
    for split in (False, True):
        tok = train_bpe(iter(lines), vocab_size=400, sample_count=len(lines), split_digits=split)
        tok.save(tmp_path / f"{split}.json")
        loaded = load_tokenizer(tmp_path / f"{split}.json")
        ids = loaded.encode(text)
        assert loaded.decode(ids) == text
        pieces = [loaded.decode([i]) for i in ids]
        digit_tokens[split] = [p for p in pieces if any(c.isdigit() for c in p)]
    assert all(len(p) == 1 for p in digit_tokens[True]) and "".join(digit_tokens[True]) == "135181027"
    assert any(sum(c.isdigit() for c in p) > 1 for p in digit_tokens[False])

    plain = load_preset("tiny")
    split = load_preset("tiny", overrides={"tokenizer": {"split_digits": True}})
    assert plain.digest() == load_preset("tiny", overrides={"tokenizer": {"split_digits": False}}).digest()
    changed = {
        stage
        for stage, sections in STAGE_SECTIONS.items()
        if plain.digest(*sections) != split.digest(*sections)
    }
    assert changed == {"ar", "draft"}


def test_qwen_tokenizer_ids_come_from_the_side_files(qwen3_ckpt_dir, sdar_ckpt):
    qwen = load_tokenizer(qwen3_ckpt_dir)
    assert qwen.eos_ids == (IM_END, ENDOFTEXT) and qwen.eos_id == IM_END  # generation_config.json's list
    assert qwen.pad_id == ENDOFTEXT and qwen.mask_id is None and qwen.vocab_size == 151669
    sdar = load_tokenizer(sdar_ckpt.dir / "tokenizer.json")
    assert sdar.mask_id == SDAR_MASK_ID and sdar.vocab_size == 151670


def test_completion_stops_at_any_eos(qwen3_ckpt_dir):
    tok = load_tokenizer(qwen3_ckpt_dir)
    ids = tok.encode("x = 1")
    assert tok.decode_completion(ids + [ENDOFTEXT] + tok.encode(" junk")) == "x = 1"
    assert tok.decode_completion(ids + [IM_END, 5]) == "x = 1"


def test_eos_order_generation_config_then_config_then_tokenizer_config(qwen3_ckpt_dir, tmp_path):
    folder = tmp_path / "tok"
    shutil.copytree(qwen3_ckpt_dir, folder)
    (folder / "generation_config.json").unlink()
    assert load_tokenizer(folder).eos_ids == (IM_END,)  # config.json's eos_token_id
    config = json.loads((folder / "config.json").read_text())
    config.pop("eos_token_id")
    (folder / "config.json").write_text(json.dumps(config))
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    tok_config["eos_token"] = "<|endoftext|>"
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config))
    assert load_tokenizer(folder).eos_ids == (ENDOFTEXT,)
    tok_config.pop("eos_token")
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config))
    with pytest.raises(
        CheckpointError, match=r"tokenizer\.json: added_tokens: the special token '<eos>' is missing"
    ):
        load_tokenizer(folder)


@pytest.mark.parametrize("where", ["chat_template.jinja", "tokenizer_config.json"])
def test_chat_template_renders_as_transformers_renders_it(where, sdar_ckpt, tmp_path):
    from transformers import AutoTokenizer

    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(sdar_ckpt.dir / name, folder / name)
    if where == "tokenizer_config.json":  # the older form real Qwen3 checkpoints ship
        (folder / "chat_template.jinja").unlink()
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config["chat_template"] = CHAT_TEMPLATE
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    ours = load_tokenizer(folder)
    theirs = AutoTokenizer.from_pretrained(str(folder))
    prompt = 'def add(a, b):\n    """Return a + b."""\n'
    expected = theirs.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    rendered = ours.apply_chat_template(prompt)
    assert rendered == expected
    assert rendered.startswith("<|im_start|>system\n") and rendered.endswith("<|im_start|>assistant\n")
    ids = ours.encode(rendered)
    assert ids.count(IM_START) == 3 and ids.count(IM_END) == 2  # control tokens encode as single ids
    assert ids == theirs(rendered, add_special_tokens=False)["input_ids"]


def test_tokenizer_config_round_trips_through_transformers(sdar_ckpt, tmp_path):
    from transformers import AutoTokenizer

    tok = load_tokenizer(sdar_ckpt.dir)
    folder = tmp_path / "out"
    folder.mkdir()
    tok.save(folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(tok)))
    theirs = AutoTokenizer.from_pretrained(str(folder))
    assert (theirs.eos_token, theirs.pad_token, theirs.mask_token) == (
        "<|im_end|>",
        "<|endoftext|>",
        "<|MASK|>",
    )
    again = load_tokenizer(folder)
    assert (again.mask_id, again.pad_id, again.eos_id) == (SDAR_MASK_ID, ENDOFTEXT, IM_END)
    assert again.apply_chat_template("hi") == tok.apply_chat_template("hi")
