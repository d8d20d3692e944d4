"""What a model is trained to predict. The objective owns the training batch transform, the validation transform,
how its model generates text, and what a checkpoint records about it; the attention direction follows from it.

    decoder  causal attention, next-token loss at every position (GPT)
    encoder  bidirectional attention, masked-LM loss at ~15% selected positions (BERT; masking: training/masked_lm.py)
    cheater  bidirectional attention with the next-token loss: position t sees token t+1, its own target. It shows
             what the causal mask prevents: its training loss collapses, and behind a causal mask it predicts worse
             than the decoder (tests/e2e/test_encoder_runs.py).
    seq2seq  the encoder-decoder (model/seq2seq.py) on pairs (data/pairs.py): the loss on the target tokens, and
             the exact-match accuracy of greedy decoding on the validation pairs

Adding an objective: subclass Objective, register it in OBJECTIVES and objective_class, and test it; train.py,
sample.py and the checkpoint pick it up by name (`--model=NAME`).

Shapes: B batch, T positions.
"""

import math

import torch

from data.mask_token import with_mask_token
from data.pairs import with_stop_token
from inference.generate import NonFiniteLogits, generate_stream, never_writing
from inference.masked import generate_by_masks
from inference.translate import translate
from training.masked_lm import Masker


class Objective:
    name = "decoder"
    causal = True  # the model's attention direction (GPTConfig.causal follows it)
    val_is_next_token = True  # its validation loss is a next-token loss: bits/byte and perplexity mean something
    needs_mask_token = False  # its inputs contain [MASK]
    counts_tokens = False  # its batches vary in length: tokens/s counts each one's tokens (`tokens`), not rows x
    #                        block_size

    @staticmethod
    def flops_per_token(model) -> float:
        """Training FLOPs per token counted by tokens/s (MFU's numerator per token)."""
        return model.flops_per_token()

    def __init__(self, mask_id: int | None = None):
        self.mask_id = mask_id  # the [MASK] id when the vocabulary has one (an encoder, or a decoder beside one)

    def train_batch(self, x: torch.Tensor, y: torch.Tensor, seed: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) inputs and next-token targets -> what the model trains on; seed makes any randomness repeatable."""
        return x, y

    def val_batch(self, x: torch.Tensor, y: torch.Tensor, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The same for validation batch `index` (its global index: the same in every run and process count)."""
        return x, y

    def describe(self) -> str:
        return ""

    def loss(self, model, x, y) -> torch.Tensor:
        """The training (and validation) loss of one batch from train_batch / val_batch."""
        return model(x, y)[1]

    def stream(self, model, prompt: list[int], max_new_tokens: int, generator=None, use_cache: bool = True,
               **sampling):
        """Yields new token ids one at a time (sampling: temperature, top_k, top_p, min_p, stop_tokens). The KV
        cache is used where the model is causal (it is the same text, faster)."""
        idx = torch.tensor([prompt], device=next(model.parameters()).device)
        with never_writing(model, self.mask_id):  # a decoder's [MASK] (beside an encoder) is no text
            for token in generate_stream(model, idx, max_new_tokens, use_cache=use_cache and self.causal,
                                         generator=generator, **sampling):
                yield int(token[0])


class Cheater(Objective):
    name = "cheater"
    causal = False


class MaskedLM(Objective):
    """The encoder's objective: bidirectional attention, loss at the selected positions only."""
    name = "encoder"
    causal = False
    val_is_next_token = False  # a masked-token loss: its bits/byte would not compare with a decoder's
    needs_mask_token = True

    def __init__(self, tokenizer, rate: float = 0.15, span: int = 1):
        super().__init__(tokenizer.mask_id)
        self.masker = Masker(tokenizer.mask_id, tokenizer.vocab_size, tuple(tokenizer.special_ids), rate, span)

    def train_batch(self, x, y, seed):
        return self.masker(x, seed)  # targets only at the selected positions

    def val_batch(self, x, y, index):
        return self.masker.validation(x, index)

    def describe(self) -> str:
        m = self.masker
        return f", masked LM at {m.rate:.0%}" + (f" in spans of 1-{m.span}" if m.span > 1 else "")

    def stream(self, model, prompt, max_new_tokens, generator=None, use_cache=False, stop_tokens=None, **sampling):
        yield from generate_by_masks(model, prompt, max_new_tokens, self.mask_id, generator=generator,
                                     stop_tokens=stop_tokens, **sampling)


class Seq2SeqObjective(Objective):
    """The encoder-decoder's: a batch is ((source, source_valid, target_in), targets) (data/pair_batches.py's
    collate)."""
    name = "seq2seq"
    val_is_next_token = False  # a loss on the target given the source: no bits/byte of a text to compare
    counts_tokens = True

    def __init__(self, stop_id: int):
        super().__init__(None)
        self.stop_id = stop_id

    def loss(self, model, x, y):
        source, source_valid, target_in = x
        return model(source, target_in, y, source_valid)[1]

    def describe(self) -> str:
        return ", encoder-decoder"

    @staticmethod
    def tokens(x, y) -> torch.Tensor:
        """The real tokens of a batch, padding left out: its sources' and its targets' (STOP + target, what the
        decoder reads). A 0-d tensor on the batch's device: counting waits for nothing."""
        _, source_valid, _ = x
        return source_valid.sum() + (y >= 0).sum()

    @staticmethod
    def flops_per_token(model) -> float:
        """Half the model's estimate per pair of positions (model/seq2seq.py), one source and one target position:
        the source tokens run through the encoder, the target tokens through the decoder."""
        return model.flops_per_token() / 2

    @torch.no_grad()
    def decode_counts(self, model, x, y) -> torch.Tensor:
        """Greedy decoding of a validation batch against its targets (target + STOP): (exact pairs, pairs,
        right tokens, tokens), the token counts over the reference's positions; what a row writes ends at its first
        STOP."""
        source, source_valid, _ = x
        real = y >= 0
        try:
            out = translate(model, source, y.size(1), self.stop_id, self.stop_id, source_valid)  # (B, N), N <= T
        except NonFiniteLogits:  # nothing written to count (--on_nonfinite=skip evaluates on): no accuracy, not 0
            nan = torch.full((), math.nan, dtype=torch.float64, device=y.device)
            return torch.stack([nan, nan.new_tensor(y.size(0)), nan, real.sum().double()])
        # a stopped row repeats STOP while others decode on: those are not predictions (else a row's count would
        # depend on its batch)
        stop = (out == self.stop_id).long()  # (B, N)
        out = out.masked_fill(stop.cumsum(1) - stop > 0, -2)  # after a row's first STOP: nothing written
        pred = torch.full_like(y, -2)
        pred[:, :out.size(1)] = out
        right = (pred == y) & real
        exact = (right | ~real).all(dim=1)
        pairs = torch.full((), y.size(0), device=y.device)  # on the batch's device, as the counts beside it
        return torch.stack([exact.sum(), pairs, right.sum(), real.sum()]).double()

    def stream(self, model, prompt, max_new_tokens, generator=None, use_cache=True, stop_tokens=None, **sampling):
        """prompt: the source's ids; yields the target's ids, ending before STOP."""
        source = torch.tensor([prompt], device=next(model.parameters()).device)
        out = translate(model, source, min(max_new_tokens, model.config.block_size), self.stop_id, self.stop_id,
                        generator=generator, use_cache=use_cache, **sampling)
        for token in out[0].tolist():
            if token == self.stop_id:
                return
            yield token


OBJECTIVES = ("decoder", "encoder", "cheater", "seq2seq")  # --model=NAME


def objective_class(name: str) -> type[Objective]:
    return {"decoder": Objective, "encoder": MaskedLM, "cheater": Cheater, "seq2seq": Seq2SeqObjective}[name]


def build(name: str, tokenizer, mask_token: bool = False, mask_rate: float = 0.15, mask_span: int = 1):
    """-> (objective, tokenizer). An encoder (or mask_token=True, to give a decoder the same vocabulary and so the
    same parameter count) adds the [MASK] id to the tokenizer's vocabulary."""
    cls = objective_class(name)
    if cls.needs_mask_token or mask_token:
        tokenizer = with_mask_token(tokenizer)
    mask_id = getattr(tokenizer, "mask_id", None)
    if name == "encoder":
        return cls(tokenizer, mask_rate, mask_span), tokenizer
    if name == "seq2seq":
        tokenizer = with_stop_token(tokenizer)
        return cls(tokenizer.stop_id), tokenizer
    return cls(mask_id), tokenizer
