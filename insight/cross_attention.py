"""An encoder-decoder's cross-attention for one source, as the PNG grid and the explorer page show it.

    view = cross_attention_view(model, tokenizer, "abcdef")            # the target: what greedy decoding writes
    view = cross_attention_view(model, tokenizer, "abcdef", "fedcba")  # the target given (teacher forcing)
    view.weights                                                       # (L, H, T, S)

Row t belongs to the decoder step that writes target token t (its query has read STOP, the start token, and the
target tokens before t); the last row of a target that ends writes STOP, which shows where the model looks to
decide that the target is complete. Columns are the real source tokens only: padding gets weight 0 and is not
shown. The weights come from the math path (insight/attention_maps.py), whatever backend the model runs with.

Shapes: L decoder layers, H heads, T target tokens (rows), S real source tokens (columns).
"""
from dataclasses import dataclass

import torch

from common.errors import DataError, UserError
from common.eval_mode import evaluating
from data.pairs import STOP_TEXT
from inference.translate import translate

from .attention_maps import cross_attention_maps


@dataclass
class CrossAttentionView:
    source: list[int]  # the source's ids (S)
    target: list[int]  # what each decoder step writes (T); a target that ends has STOP last
    source_texts: list[str]  # each source token as text
    target_texts: list[str]  # each target token as text, STOP spelled STOP_TEXT
    weights: torch.Tensor  # (L, H, T, S) float32 on the CPU; each row sums to 1
    generated: bool  # True: greedy decoding wrote the target; False: it was given


@torch.no_grad()
def cross_weights(model, source, target_in, source_valid=None) -> torch.Tensor:
    """source (1, S), target_in (1, T) = STOP + the target shifted right, source_valid (1, S) or None ->
    (L, H, T, S') with S' the real source positions only (right padding: the first S')."""
    maps = cross_attention_maps(model, source, target_in, source_valid)[:, 0].float().cpu()  # (L, H, T, S)
    real = source.size(1) if source_valid is None else int(source_valid[0].sum())
    return maps[..., :real]  # (L, H, T, S')


def token_texts(tokenizer, ids) -> list[str]:
    """Each id as its own text; STOP (which the tokenizer decodes to nothing) as STOP_TEXT."""
    return [STOP_TEXT if i == tokenizer.stop_id else tokenizer.token_text(i) for i in ids]


def encoded(tokenizer, text: str, flag: str) -> list[int]:
    """text's ids; a character the vocabulary lacks is refused naming the flag that gave the text."""
    try:
        return tokenizer.encode(text)
    except DataError as e:
        raise DataError(f"--{flag}: {e}") from None


def need_source_length(n: int, positions_max: int | None, max_tokens: int | None, flag: str) -> None:
    """A source as long as sample.py translates: learned positions end at block_size, the others at no length. The
    smaller limit is named: the other cannot be reached."""
    if positions_max is not None and n > positions_max and not (max_tokens and max_tokens < positions_max):
        raise UserError(f"the source is {n} tokens and at most {positions_max} can be shown (block_size="
                        f"{positions_max}, the most these learned positions encode); shorten it")
    if max_tokens and n > max_tokens:
        raise UserError(f"the source is {n} tokens and at most {max_tokens} can be shown (--{flag}={max_tokens}); "
                        f"shorten it")


def cross_attention_view(model, tokenizer, source_text: str, target_text: str = "",
                         max_tokens: int | None = None, flag: str = "max_tokens") -> CrossAttentionView:
    """The cross-attention of source_text, for target_text or (when empty) the target greedy decoding writes.
    max_tokens: the longest source or target shown, the value of --flag; a target is block_size at most (what a
    translation writes), a source too where its positions are learned (as sample.py --source translates it)."""
    if model.config.cross_attn == "mean":
        raise UserError("this checkpoint was trained with cross_attn='mean': the decoder reads one fixed summary of "
                        "the source, not its tokens, so there is no target x source map to draw; visualise a "
                        "checkpoint trained with the default cross-attention")
    limit = min(max_tokens or model.config.block_size, model.config.block_size)  # a target: what translate writes
    source = encoded(tokenizer, source_text, "source")
    if not source:
        raise UserError("the source to visualise is empty; pass some text with --source=...")
    need_source_length(len(source), model.source_pos.max_len, max_tokens, flag)
    device = next(model.parameters()).device
    src = torch.tensor([source], device=device)  # (1, S)
    stop = tokenizer.stop_id
    if target_text:
        target = encoded(tokenizer, target_text, "target") + [stop]  # the last step writes STOP
        if len(target) > limit:
            raise UserError(f"the target is {len(target) - 1} tokens and STOP makes {len(target)}, more than the "
                            f"{limit} that can be shown; shorten --target")
    else:  # a row per written token, as many as sample.py's translation writes: the decoder reads the start token
        target = translate(model, src, model.config.block_size, stop, stop)[0].tolist()  # and all but the last
        if stop in target:
            target = target[:target.index(stop) + 1]
        if len(target) > limit:  # the first rows alone would pass for the whole target
            raise UserError(f"greedy decoding writes a target of {len(target)} tokens (with STOP, if it ends), more "
                            f"than the {limit} that --{flag}={max_tokens} shows; raise --{flag}, or give a shorter "
                            f"--target=TEXT")
    target_in = torch.tensor([[stop] + target[:-1]], device=device)  # (1, T): the decoder's input
    with evaluating(model):
        weights = cross_weights(model, src, target_in)  # (L, H, T, S)
    return CrossAttentionView(source, target, token_texts(tokenizer, source), token_texts(tokenizer, target),
                              weights, generated=not target_text)
