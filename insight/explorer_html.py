"""The attention explorer: one self-contained HTML page (inline JS and CSS, no network) for a text and a checkpoint.

    python visualize.py --out_dir=out --html=attention.html --text="ROMEO: ..."

The page shows the tokens as text; hovering a token (or clicking it, which pins it) shades every token by the
attention weight the chosen layer and head (or their mean) gives it; a layer x head grid of thumbnails picks the
map, each captioned with the head's induction scores (insight/induction.py; none for a context under 4 tokens).

Storage: the weights are quantised to 16 bits (w -> round(w * 65535), error <= 7.7e-6) and, for a decoder, only
the lower triangle is kept (row t has t + 1 keys): 512 tokens x 16 heads is 4.2 MB before base64. The page decodes
them once into a Uint16Array; shading a row then reads T numbers.
Each shaded token carries its weight in data-weight (6 decimals) so that a browser test can read it back.

An encoder-decoder's page (cross_explorer_html) shows its cross-attention instead: the target tokens in one row
(the queries: what each decoder step writes, insight/cross_attention.py), the real source tokens in another (the
keys, padding never shown); a target token shades the source tokens by the weight it gives them. Every row is
full there (T x S per head: a target step may read any source token) and the thumbnails have no induction scores.
Shapes: L layers, H heads, T tokens (the target's, in a cross-attention page), S source tokens.
"""
import base64
import html
import json

import torch

from common.errors import UserError
from common.eval_mode import evaluating
from data.mask_token import encode_prompt

from .explorer_page import PAGE
from .induction import has_room, induction_scores, special_ids
from .attention_maps import KINDS, attention_maps, objective_of

MAX_TOKENS = 512  # the page stays fast up to here (and far beyond the PNG grid's 64)
SCALE = 65535  # 16-bit quantisation of weights in [0, 1]


def quantise(maps: torch.Tensor, causal: bool) -> bytes:
    """maps (L, H, T, T), or (L, H, T, S) when not causal -> little-endian uint16 bytes, per head the rows one after
    another (a decoder's row t holds keys 0..t only)."""
    q = (maps.double().clamp(0, 1) * SCALE).round().to(torch.int32)  # (L, H, T, T)
    T = maps.size(-1)
    if causal:
        rows, cols = torch.tril_indices(T, T)  # row-major: (0,0), (1,0), (1,1), (2,0), ...
        q = q[..., rows, cols]  # (L, H, T(T+1)/2)
    return q.to(torch.int32).numpy().astype("<u2").tobytes()


def dequantise(blob: bytes, L: int, H: int, T: int, causal: bool, S: int | None = None) -> torch.Tensor:
    """The inverse of quantise, for tests and tools: (L, H, T, S) float32, S = T unless given."""
    import numpy as np

    S = T if S is None else S
    flat = torch.from_numpy(np.frombuffer(blob, dtype="<u2").astype("float32") / SCALE)
    maps = torch.zeros(L, H, T, S)
    if causal:
        rows, cols = torch.tril_indices(T, T)
        maps[..., rows, cols] = flat.view(L, H, -1)
    else:
        maps[:] = flat.view(L, H, T, S)
    return maps


# the other control characters as their Unicode pictures: a NUL has no width to hover, a carriage return looks blank
CONTROL_PICTURES = {**{c: 0x2400 + c for c in range(32) if chr(c) not in "\n\t"}, 0x7F: 0x2421}


def shown(text: str) -> str:
    """A token as the page prints it: newlines, tabs and other control characters visible (the page breaks the line
    after the token once per newline in it, META.newline)."""
    return text.replace("\n", "\u21b5").replace("\t", "\u21e5").translate(CONTROL_PICTURES)


def page_data(model, tokenizer, text: str, max_tokens: int = MAX_TOKENS, objective: str | None = None) -> dict:
    """Everything the page needs, as JSON-able values plus the quantised weights (base64). The text is read as
    sample.py reads a prompt; objective: the model's --model (attention_maps.objective_of)."""
    objective = objective_of(model, objective)
    ids = encode_prompt(tokenizer, text, objective == "encoder")
    if not ids:
        raise UserError("the text to explore is empty; pass some text with --text=...")
    limit = min(max_tokens, model.config.block_size)
    if len(ids) > limit:
        why = (f"this model's context is {model.config.block_size}" if limit == model.config.block_size
               else f"the page shows at most --html_max_tokens={max_tokens}")
        raise UserError(f"the text is {len(ids)} tokens and {why}; shorten the text")
    device = next(model.parameters()).device
    with evaluating(model):
        maps = attention_maps(model, torch.tensor([ids], device=device))[:, 0].float().cpu()  # (L, H, T, T)
    scores = induction_scores(model, avoid=special_ids(tokenizer)) if has_room(model) else None  # captions: none
    cfg = model.config
    texts = [tokenizer.token_text(i) for i in ids]
    return {"tokens": [shown(t) for t in texts], "newline": [t.count("\n") for t in texts],
            "layers": cfg.n_layer, "heads": cfg.n_head, "causal": cfg.causal,
            "title": (f"{KINDS[objective]}, {cfg.n_layer} layers x "
                      f"{cfg.n_head} heads, pos_emb={cfg.pos_emb}, {len(ids)} tokens"),
            "prefix": None if scores is None else [[round(float(v), 3) for v in row] for row in scores.prefix],
            "copy": None if scores is None else [[round(float(v), 3) for v in row] for row in scores.copy],
            "weights": base64.b64encode(quantise(maps, cfg.causal)).decode("ascii")}


def cross_page_data(model, view) -> dict:
    """An encoder-decoder's page data from its cross-attention view (insight/cross_attention.py): the target's
    tokens are the queries ('tokens'), the source's the keys ('source')."""
    cfg = model.config
    L, H, T, S = view.weights.shape
    how = "written by greedy decoding" if view.generated else "given"
    target, source = view.target_texts, view.source_texts
    return {"tokens": [shown(t) for t in target], "newline": [t.count("\n") for t in target],
            "source": [shown(t) for t in source], "source_newline": [t.count("\n") for t in source],
            "layers": L, "heads": H, "causal": False,
            "title": (f"encoder-decoder cross-attention, {cfg.n_layer} decoder layers x {cfg.n_head} heads, "
                      f"{S} source tokens, {T} target token{'s' * (T > 1)} ({how})"),
            "weights": base64.b64encode(quantise(view.weights, causal=False)).decode("ascii")}


def explorer_html(model, tokenizer, text: str, max_tokens: int = MAX_TOKENS, objective: str | None = None) -> str:
    """The page as one string."""
    return page_html(page_data(model, tokenizer, text, max_tokens, objective))


def cross_explorer_html(model, view) -> str:
    """An encoder-decoder's cross-attention page as one string (view: insight/cross_attention.py)."""
    return page_html(cross_page_data(model, view))


def page_html(data: dict) -> str:
    data = dict(data)
    weights = data.pop("weights")
    # no '<' inside the script's data: '</script>' would end it, '<!--' then '<script>' would keep it from ending
    meta = json.dumps(data).replace("<", "\\u003c")
    return (PAGE.replace("__TITLE__", html.escape(data["title"]))
            .replace("__META__", meta)
            .replace("__WEIGHTS__", weights))
