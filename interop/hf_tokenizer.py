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
One difference stays: our encode() reads the literal text "<|endoftext|>" as plain text; Hugging Face's tokenizer
(like its own GPT-2) reads it as the special token, as ours does with allow_eot=True.
"""
import json
import os

from data.bpe import byte_stand_ins
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


def build_hf_tokenizer(tokenizer: Tokenizer):
    """Our tokenizer -> a `tokenizers.Tokenizer` that encodes text to our ids (the literal "<|endoftext|>" aside:
    see the module docstring)."""
    from tokenizers import AddedToken, Regex, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

    if tokenizer.name == "char":
        hf = HFTokenizer(models.WordLevel({c: i for i, c in enumerate(tokenizer.chars)}, unk_token=None))
        hf.pre_tokenizer = pre_tokenizers.Split(Regex(ANY_CHARACTER), behavior="isolated")
        hf.decoder = decoders.Fuse()  # the characters back to back, no spaces between tokens
        return hf
    ranks = tokenizer.encoding._mergeable_ranks  # tiktoken keeps them on the Encoding: {token bytes: id}
    vocab, merges = bpe_vocab_and_merges(ranks)
    vocab[EOT] = tokenizer.eot_id
    hf = HFTokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)  # GPT-2's split pattern
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken(EOT, special=True, normalized=False)])
    return hf


def write_hf_tokenizer(tokenizer: Tokenizer, folder: str, block_size: int) -> None:
    """tokenizer.json and tokenizer_config.json into folder, for AutoTokenizer.from_pretrained(folder)."""
    build_hf_tokenizer(tokenizer).save(os.path.join(folder, TOKENIZER_FILE))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": block_size,
              "clean_up_tokenization_spaces": False,  # decode must give our text back, spaces and all
              "add_bos_token": False, "add_eos_token": False}
    if tokenizer.eot_id is not None:  # gpt2 and bpe start and end documents with <|endoftext|>
        config.update(bos_token=EOT, eos_token=EOT)
    with open(os.path.join(folder, CONFIG_FILE), "w") as f:
        json.dump(config, f, indent=1)
