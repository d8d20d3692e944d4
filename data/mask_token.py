"""The `[MASK]` token of the masked-LM encoder: one id past a tokenizer's vocabulary.

`with_mask_token(tokenizer)` wraps any tokenizer: the text `[MASK]` in a prompt encodes to the mask id, and the
mask id decodes back to `[MASK]`. The prepared .bin files never contain it (masks are put in at training time), so
the same prepared folder serves the decoder and the encoder. compare.py gives the decoder the same extra id, so
the two models have exactly the same parameters.
"""
from data.tokenizer import Tokenizer

MASK_TEXT = "[MASK]"


class MaskTokenizer(Tokenizer):
    mask_text = MASK_TEXT  # the text that encodes to mask_id

    def __init__(self, base: Tokenizer):
        self.base, self.name, self.eot_id = base, base.name, base.eot_id
        self.mask_id = base.vocab_size  # the last id
        self.vocab_size = base.vocab_size + 1

    def __getattr__(self, name):  # anything else (e.g. a char tokenizer's `chars`) is the base tokenizer's
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    @property
    def special_ids(self) -> list[int]:
        """Ids that are not text: never a random replacement in the masked-LM corruption."""
        return [self.mask_id] + ([self.eot_id] if self.eot_id is not None else [])

    def encode(self, text: str, allow_eot: bool = False) -> list[int]:
        ids = []
        for i, part in enumerate(text.split(MASK_TEXT)):
            if i:
                ids.append(self.mask_id)
            if part:
                ids += self.base.encode(part, allow_eot)
        return ids

    def encode_documents(self, texts):
        return self.base.encode_documents(texts)

    def _runs(self, ids):
        """ids -> runs of real ids, with None standing for each mask."""
        run = []
        for i in (ids.tolist() if hasattr(ids, "tolist") else ids):
            if int(i) == self.mask_id:
                yield run
                yield None
                run = []
            else:
                run.append(int(i))
        yield run

    def decode_bytes(self, ids) -> bytes:
        return b"".join(MASK_TEXT.encode() if r is None else self.base.decode_bytes(r) for r in self._runs(ids))

    def decode(self, ids) -> str:
        return "".join(MASK_TEXT if r is None else self.base.decode(r) for r in self._runs(ids))


def with_mask_token(tokenizer: Tokenizer) -> MaskTokenizer:
    return tokenizer if isinstance(tokenizer, MaskTokenizer) else MaskTokenizer(tokenizer)


def as_data(tokenizer: Tokenizer) -> Tokenizer:
    """The tokenizer that reads text as the prepared data does: a MaskTokenizer's base, which spells a literal
    `[MASK]` out as its characters (a decoder scored on a text never saw the mask id); any other unchanged."""
    return tokenizer.base if isinstance(tokenizer, MaskTokenizer) else tokenizer


def encode_prompt(tokenizer: Tokenizer, text: str, encoder: bool) -> list[int]:
    """A prompt's ids, read as the model's own inputs were: only the encoder trained on the [MASK] id, so `[MASK]` is
    that id for it and characters for any other (a decoder's or the cheater's data never held the id, which
    --mask_token only adds to the vocabulary). `<|endoftext|>` is the separator token, as a sample prints it."""
    return (tokenizer if encoder else as_data(tokenizer)).encode(text, allow_eot=True)
