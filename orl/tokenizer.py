"""The tokenizer: tokenizer.json (HF `tokenizers`) with [MASK], <eos> and <pad>.

The tiny models use a byte-level BPE trained here on the TinyCode train stream;
a real model's tokenizer.json is loaded by the same `load_tokenizer`, as long as
it defines the special tokens the harness needs (or the config names them).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from orl.errors import CheckpointError
from orl.io import atomic_write_text

MASK, EOS, PAD = "[MASK]", "<eos>", "<pad>"
SPECIAL_TOKENS = [PAD, EOS, MASK]


@dataclass
class Tokenizer:
    """A thin wrapper that knows the special ids the harness needs."""

    backend: object  # tokenizers.Tokenizer
    eos_id: int
    pad_id: int
    mask_id: int | None  # None for a tokenizer without a mask token (AR-only models)
    path: Path | None = None

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """Every id that ends a completion (the primary one first)."""
        return (self.eos_id,)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def decode_completion(self, ids: list[int]) -> str:
        """Text of a completion: everything before the first <eos>, special tokens removed."""
        ids = list(ids)
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.backend.decode(ids, skip_special_tokens=True)

    def save(self, path: str | Path) -> None:
        atomic_write_text(path, self.backend.to_str(pretty=True))


def train_bpe(texts, vocab_size: int = 1024, sample_count: int = 20000) -> Tokenizer:
    """Train a byte-level BPE on (an iterator of) texts; special tokens get the first ids."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = HFTokenizer(models.BPE())
    # Byte-level without the leading-space trick: code indentation must round-trip exactly.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(itertools.islice(texts, sample_count), trainer=trainer)
    return _wrap(backend, None)


def _wrap(backend, path: Path | None, mask_token: str = MASK, eos_token: str = EOS, pad_token: str = PAD) -> Tokenizer:
    def special(token: str, required: bool) -> int | None:
        token_id = backend.token_to_id(token)
        if token_id is None and required:
            where = path or "tokenizer"
            raise CheckpointError(f"{where}: added_tokens: the special token {token!r} is missing")
        return token_id

    eos_id = special(eos_token, True)
    pad_id = special(pad_token, False)
    return Tokenizer(backend, eos_id=eos_id, pad_id=eos_id if pad_id is None else pad_id,
                     mask_id=special(mask_token, False), path=path)


def load_tokenizer(path: str | Path, *, eos_token: str = EOS, mask_token: str = MASK) -> Tokenizer:
    """Load tokenizer.json from a file or a checkpoint directory."""
    from tokenizers import Tokenizer as HFTokenizer

    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found (expected a tokenizer.json)")
    try:
        backend = HFTokenizer.from_file(str(path))
    except Exception as exc:  # the Rust parser's message is precise but not user-facing
        raise CheckpointError(f"{path}: not a valid tokenizer.json ({str(exc).splitlines()[0]})") from None
    return _wrap(backend, path, mask_token=mask_token, eos_token=eos_token)
