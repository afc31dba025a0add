"""The tokenizer: tokenizer.json (HF `tokenizers`) plus the special ids the harness needs.

Two kinds of tokenizer load through the same `load_tokenizer`:
- ours (the tiny models): a byte-level BPE trained here, with the literal
  special tokens <pad>, <eos> and [MASK] and no other file;
- real Qwen-family ones (Qwen3, SDAR, TraDo): tokenizer.json next to
  tokenizer_config.json (special-token strings, the chat template),
  generation_config.json (the eos ids, a list) and config.json (eos / pad /
  mask ids). Qwen's ids: <|endoftext|> 151643, <|im_end|> 151645, and for
  SDAR / TraDo the mask <|MASK|> 151669.

Where several files name the same thing, the first that has it wins:
- eos ids: generation_config.json `eos_token_id`, config.json `eos_token_id`,
  tokenizer_config.json `eos_token`, the literal <eos> (what transformers'
  `generate` stops on, in the same order);
- mask: tokenizer_config.json `mask_token`, a literal [MASK] or <|MASK|>,
  config.json `mask_token_id`;
- pad: tokenizer_config.json `pad_token`, config.json / generation_config.json
  `pad_token_id`, a literal <pad>, else the primary eos.
Every id or token named by a file must exist in tokenizer.json; an error names
the file, the field and the token.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

from orl.errors import CheckpointError, InputError
from orl.io import atomic_write_json, atomic_write_text, read_json_object

MASK, EOS, PAD = "[MASK]", "<eos>", "<pad>"
SPECIAL_TOKENS = [PAD, EOS, MASK]
SDAR_MASK = "<|MASK|>"  # SDAR / TraDo's mask token (id 151669 in their tokenizers)
TOKENIZER, TOKENIZER_CONFIG, GENERATION_CONFIG, MODEL_CONFIG = (
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "config.json",
)
CHAT_TEMPLATE_FILE = "chat_template.jinja"  # where transformers >= 4.43 saves the template
# The named special tokens transformers hands a chat template (PreTrainedTokenizerBase.special_tokens_map).
TEMPLATE_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass
class Tokenizer:
    """A thin wrapper that knows the special ids the harness needs."""

    backend: object  # tokenizers.Tokenizer
    eos_id: int  # the primary end-of-sequence id (the first of eos_ids)
    pad_id: int
    mask_id: int | None  # None for a tokenizer without a mask token (AR-only models)
    path: Path | None = None
    eos_ids: tuple[int, ...] = ()  # every id that ends a sequence (Qwen: <|im_end|>, <|endoftext|>)
    chat_template: str | None = None
    template_tokens: dict[str, str] = field(default_factory=dict)  # bos_token, eos_token, ... as strings

    def __post_init__(self) -> None:
        if not self.eos_ids:
            self.eos_ids = (self.eos_id,)
        if self.eos_id not in self.eos_ids:
            self.eos_ids = (self.eos_id, *self.eos_ids)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def decode_completion(self, ids: list[int]) -> str:
        """Text of a completion: everything before the first eos (any of eos_ids), special tokens removed."""
        ids = list(ids)
        ends = [i for i, token in enumerate(ids) if token in self.eos_ids]
        if ends:
            ids = ids[: ends[0]]
        return self.backend.decode(ids, skip_special_tokens=True)

    def apply_chat_template(self, prompt: str) -> str:
        """`prompt` as a single user turn followed by the assistant's generation prompt.

        Rendered as transformers' `apply_chat_template(..., add_generation_prompt=True,
        tokenize=False)` renders it: same Jinja settings, same variables.
        """
        if self.chat_template is None:
            where = self.path.parent / TOKENIZER_CONFIG if self.path else TOKENIZER_CONFIG
            raise InputError(f"{where}: chat_template: this tokenizer has no chat template")
        return render_chat_template(
            self.chat_template, [{"role": "user", "content": prompt}], self.template_tokens
        )

    def save(self, path: str | Path) -> None:
        atomic_write_text(path, self.backend.to_str(pretty=True))


def render_chat_template(
    template: str, messages: list[dict], special_tokens: dict[str, str], add_generation_prompt: bool = True
) -> str:
    """Render a Hugging Face chat template the way transformers does.

    A sandboxed Jinja environment with trim_blocks and lstrip_blocks, the loopcontrols
    extension, a `tojson` that keeps non-ASCII and HTML characters, and the globals
    `raise_exception` and `strftime_now`; the template sees `messages`, `tools` and
    `documents` (None here), `add_generation_prompt` and the special-token strings.
    """
    from datetime import datetime

    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        compiled = env.from_string(template)
        return compiled.render(
            messages=messages,
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **special_tokens,
        )
    except jinja2.TemplateError as exc:
        raise InputError(f"chat_template: cannot render ({exc})") from None


def train_bpe(
    texts, vocab_size: int = 1024, sample_count: int = 20000, split_digits: bool = False
) -> Tokenizer:
    """Train a byte-level BPE on (an iterator of) texts; special tokens get the first ids. With
    `split_digits` every digit is a token of its own, as in Qwen3's tokenizer (no merge crosses a digit)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = HFTokenizer(models.BPE())
    # Byte-level without the leading-space trick: code indentation must round-trip exactly.
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits
        else byte_level
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(itertools.islice(texts, sample_count), trainer=trainer)
    eos_id = backend.token_to_id(EOS)
    return Tokenizer(
        backend, eos_id=eos_id, pad_id=backend.token_to_id(PAD), mask_id=backend.token_to_id(MASK)
    )


def _read_side_file(path: Path) -> dict:
    """A JSON object from an optional file next to tokenizer.json ({} when absent)."""
    return read_json_object(path) if path.is_file() else {}


def _token_string(value, path: Path, name: str) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if value is None:
        return None
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    if isinstance(value, str):
        return value
    raise CheckpointError(f"{path}: {name}: expected a token string, got {json.dumps(value)}")


class _SpecialIds:
    """Resolves special tokens and ids against one tokenizer.json, naming the file that asked."""

    def __init__(self, backend, tokenizer_path: Path):
        self.backend, self.tokenizer_path = backend, tokenizer_path
        self.size = backend.get_vocab_size(with_added_tokens=True)

    def of_token(self, token: str, path: Path, name: str) -> int:
        token_id = self.backend.token_to_id(token)
        if token_id is None:
            raise CheckpointError(f"{path}: {name}: the token {token!r} is not in {self.tokenizer_path}")
        return token_id

    def of_ids(self, value, path: Path, name: str) -> tuple[int, ...]:
        """An id field that may be one integer or a list of them (eos_token_id)."""
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise CheckpointError(
                f"{path}: {name}: expected a token id or a list of token ids, got {json.dumps(value)}"
            )
        for v in values:
            if not 0 <= v < self.size:
                raise CheckpointError(
                    f"{path}: {name}: token id {v} is outside {self.tokenizer_path} (its {self.size} tokens)"
                )
        return tuple(dict.fromkeys(values))

    def literal(self, *tokens: str) -> int | None:
        for token in tokens:
            token_id = self.backend.token_to_id(token)
            if token_id is not None:
                return token_id
        return None


def _chat_template(folder: Path, tok_config: dict) -> str | None:
    template_file = folder / CHAT_TEMPLATE_FILE
    if template_file.is_file():
        return template_file.read_text()
    template = tok_config.get("chat_template")
    if isinstance(template, list):  # older multi-template form: [{"name": "default", "template": "..."}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise CheckpointError(f"{folder / TOKENIZER_CONFIG}: chat_template: expected a Jinja template string")
    return template


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load tokenizer.json (a file, or a checkpoint directory) with its side files."""
    from tokenizers import Tokenizer as HFTokenizer

    path = Path(path)
    if path.is_dir():
        path = path / TOKENIZER
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found (expected a tokenizer.json)")
    try:
        backend = HFTokenizer.from_file(str(path))
    except Exception as exc:  # the Rust parser's message is precise but not user-facing
        raise CheckpointError(f"{path}: not a valid tokenizer.json ({str(exc).splitlines()[0]})") from None
    folder = path.parent
    tok_path, gen_path, cfg_path = (
        folder / TOKENIZER_CONFIG,
        folder / GENERATION_CONFIG,
        folder / MODEL_CONFIG,
    )
    tok_config, gen_config, model_config = (
        _read_side_file(tok_path),
        _read_side_file(gen_path),
        _read_side_file(cfg_path),
    )
    ids = _SpecialIds(backend, path)
    tokens = {name: _token_string(tok_config.get(name), tok_path, name) for name in TEMPLATE_TOKENS}

    if gen_config.get("eos_token_id") is not None:
        eos_ids = ids.of_ids(gen_config["eos_token_id"], gen_path, "eos_token_id")
    elif model_config.get("eos_token_id") is not None:
        eos_ids = ids.of_ids(model_config["eos_token_id"], cfg_path, "eos_token_id")
    elif tokens["eos_token"] is not None:
        eos_ids = (ids.of_token(tokens["eos_token"], tok_path, "eos_token"),)
    elif ids.literal(EOS) is not None:
        eos_ids = (ids.literal(EOS),)
    else:
        raise CheckpointError(
            f"{path}: added_tokens: the special token {EOS!r} is missing, and no "
            f"{GENERATION_CONFIG} / {MODEL_CONFIG} eos_token_id or {TOKENIZER_CONFIG} "
            "eos_token names another"
        )

    if tokens["mask_token"] is not None:
        mask_id = ids.of_token(tokens["mask_token"], tok_path, "mask_token")
    elif ids.literal(MASK, SDAR_MASK) is not None:
        mask_id = ids.literal(MASK, SDAR_MASK)
    elif model_config.get("mask_token_id") is not None:
        mask_id = ids.of_ids(model_config["mask_token_id"], cfg_path, "mask_token_id")[0]
    else:
        mask_id = None

    if tokens["pad_token"] is not None:
        pad_id = ids.of_token(tokens["pad_token"], tok_path, "pad_token")
    elif model_config.get("pad_token_id") is not None:
        pad_id = ids.of_ids(model_config["pad_token_id"], cfg_path, "pad_token_id")[0]
    elif gen_config.get("pad_token_id") is not None:
        pad_id = ids.of_ids(gen_config["pad_token_id"], gen_path, "pad_token_id")[0]
    else:
        pad_id = ids.literal(PAD)
        pad_id = eos_ids[0] if pad_id is None else pad_id

    return Tokenizer(
        backend,
        eos_id=eos_ids[0],
        pad_id=pad_id,
        mask_id=mask_id,
        path=path,
        eos_ids=eos_ids,
        chat_template=_chat_template(folder, tok_config),
        template_tokens={k: v for k, v in tokens.items() if v is not None},
    )


def tokenizer_config(tokenizer: Tokenizer) -> dict:
    """tokenizer_config.json content that transformers' AutoTokenizer reads back to the same special
    tokens."""

    def token(token_id: int | None) -> str | None:
        return None if token_id is None else tokenizer.backend.id_to_token(token_id)

    out = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tokenizer.template_tokens.get("bos_token"),
        "eos_token": token(tokenizer.eos_id),
        "pad_token": token(tokenizer.pad_id),
        "clean_up_tokenization_spaces": False,
    }
    if tokenizer.mask_id is not None:
        out["mask_token"] = token(tokenizer.mask_id)
    if tokenizer.chat_template is not None:
        out["chat_template"] = tokenizer.chat_template
    return out


def generation_config(tokenizer: Tokenizer) -> dict:
    """generation_config.json content: the end ids (a list where there are several), bos and pad."""
    eos = list(tokenizer.eos_ids)
    return {
        "bos_token_id": tokenizer.eos_id,
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
        "pad_token_id": tokenizer.pad_id,
    }


def save_tokenizer_files(tokenizer: Tokenizer, folder: str | Path) -> None:
    """tokenizer.json, tokenizer_config.json and generation_config.json: what load_tokenizer and
    transformers read."""
    folder = Path(folder)
    tokenizer.save(folder / TOKENIZER)
    atomic_write_json(folder / TOKENIZER_CONFIG, tokenizer_config(tokenizer))
    atomic_write_json(folder / GENERATION_CONFIG, generation_config(tokenizer))
