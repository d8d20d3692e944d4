"""Our tokenizers as Hugging Face tokenizer.json files, built with the `tokenizers` library, so that
`AutoTokenizer.from_pretrained(folder)` (and `pipeline("text-generation", model=folder)`) gives our ids (tested on a
whole validation text and on tricky text), but for the one difference below.

- char: a WordLevel model over our characters (id i = chars[i]); the text is split into single characters first.
  A character outside the vocabulary is an error on both sides (there is no unknown token).
- gpt2 and bpe (byte-level BPE, run by tiktoken here): a byte-level BPE model. tiktoken stores ranks
  {token bytes: id} and merges, at each step, the adjacent pair whose concatenation has the lowest rank; Hugging
  Face's BPE merges the pair of the highest priority in a list. Listing every split (left, right) of every token
  whose halves are tokens, in the order of the token's rank, gives the same merges in the same order. Bytes are
  written with GPT-2's printable stand-ins (data/bpe.py), the ByteLevel pre-tokenizer splits with GPT-2's pattern
  (the one tiktoken uses for both), and `<|endoftext|>` is the special token with our id.
A tokenizer with the [MASK] id (a decoder trained with --mask_token=true, data/mask_token.py) has `[MASK]` as a
special token at that id, the last: as our encode() does, the text "[MASK]" becomes that id wherever it stands.
One difference stays: our encode() reads the literal text "<|endoftext|>" as plain text; Hugging Face's tokenizer
(like its own GPT-2) reads it as the special token, as ours does with allow_eot=True.
"""
import json
import os

from data.bpe import byte_stand_ins
from data.mask_token import MASK_TEXT
from data.tokenizer import EOT, Tokenizer

TOKENIZER_FILE, CONFIG_FILE = "tokenizer.json", "tokenizer_config.json"  # Hugging Face's names
ANY_CHARACTER = r"[\s\S]"  # one character, newlines included


def bpe_vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """tiktoken's ranks -> Hugging Face's byte-level vocabulary {stand-in string: id} and merges, in priority order."""
    stand_in = byte_stand_ins()

    def text(token: bytes) -> str:
        return "".join(stand_in[b] for b in token)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges = []  # (token rank, left rank, right rank, left, right)
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], text(left), text(right)))
    merges.sort()
    return vocab, [(left, right) for *_, left, right in merges]


def mask_token(tokenizer: Tokenizer) -> dict[str, int]:
    """{"[MASK]": its id} for a tokenizer with the [MASK] id (data/mask_token.py: one past the base vocabulary), else
    {}: the text our encode() turns into that id wherever it stands."""
    mask_id = getattr(tokenizer, "mask_id", None)
    return {MASK_TEXT: mask_id} if mask_id is not None else {}


def build_hf_tokenizer(tokenizer: Tokenizer):
    """Our tokenizer -> a `tokenizers.Tokenizer` that encodes text to our ids (the literal "<|endoftext|>" aside:
    see the module docstring), [MASK] included when ours has it."""
    from tokenizers import AddedToken, Regex, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

    special = mask_token(tokenizer)
    if tokenizer.name == "char":
        vocab = {c: i for i, c in enumerate(tokenizer.chars)}
        hf = HFTokenizer(models.WordLevel({**vocab, **special}, unk_token=None))
        hf.pre_tokenizer = pre_tokenizers.Split(Regex(ANY_CHARACTER), behavior="isolated")
        hf.decoder = decoders.Fuse()  # the characters back to back, no spaces between tokens
    else:
        ranks = tokenizer.encoding._mergeable_ranks  # tiktoken keeps them on the Encoding: {token bytes: id}
        vocab, merges = bpe_vocab_and_merges(ranks)
        special = {EOT: tokenizer.eot_id, **special}  # no BPE token is "[MASK]": GPT-2's pattern splits it first
        hf = HFTokenizer(models.BPE({**vocab, **special}, merges, fuse_unk=False, byte_fallback=False))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)  # GPT-2's split pattern
        hf.decoder = decoders.ByteLevel()
    # matched in the text before the split, whole, at the ids in the vocabulary above
    hf.add_special_tokens([AddedToken(text, special=True, normalized=False) for text in special])
    return hf


def write_hf_tokenizer(tokenizer: Tokenizer, folder: str, block_size: int) -> None:
    """tokenizer.json and tokenizer_config.json into folder, for AutoTokenizer.from_pretrained(folder)."""
    build_hf_tokenizer(tokenizer).save(os.path.join(folder, TOKENIZER_FILE))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": block_size,
              "clean_up_tokenization_spaces": False,  # decode must give our text back, spaces and all
              "add_bos_token": False, "add_eos_token": False}
    if tokenizer.eot_id is not None:  # gpt2 and bpe start and end documents with <|endoftext|>
        config.update(bos_token=EOT, eos_token=EOT)
    if mask_token(tokenizer):
        config.update(mask_token=MASK_TEXT)
    with open(os.path.join(folder, CONFIG_FILE), "w") as f:
        json.dump(config, f, indent=1)
