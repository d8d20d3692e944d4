"""Attention weight against what a key really does to the prediction: are the maps an explanation?

For a head h of layer l, a query position t and a key s it attends to, the head's output at t is
sum_s a[t, s] v_s (then projected). Ablating the key removes exactly its term: subtract a[t, s] v_s from the head's
output at t (before the output projection), run the rest of the model, and measure how much the logit of the right
next token (or the task's answer) at t changes, centred over the vocabulary (z = logits - their mean):
    effect[t, s] = |z_t[y_t] - z_t[y_t | key s removed from head h at t]|
(The logit, not log p: a confident model's log p sits at 0 and its changes vanish below float32's resolution.)
If the weight were the explanation, effect would rank keys as the weight does. Per head we report Spearman's rank
correlation between a[t, s] and effect[t, s] over every (t, s) pair, and how often the most attended key is also
the most effective one (top-1 agreement). Shapes: L layers, H heads, T tokens, D head_dim, R ablated rows.
"""
import torch

from common.eval_mode import evaluating
from model.masks import build_mask

from .attention_maps import on_math, recording

CHUNK = 256  # ablated copies of the sequence per forward


def ranks(x: torch.Tensor) -> torch.Tensor:
    """(N,) -> (N,) float ranks 0..N-1 (ties in float data are negligible here)."""
    r = torch.empty_like(x, dtype=torch.float64)
    r[x.argsort()] = torch.arange(x.numel(), dtype=torch.float64)
    return r


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    ra, rb = ranks(a) - (a.numel() - 1) / 2, ranks(b) - (b.numel() - 1) / 2
    return float((ra * rb).sum() / (ra.norm() * rb.norm()).clamp(min=1e-12))


class KeyRemoved:
    """Pre-hook on a layer's output projection: in row r of the batch, subtract delta[r] (D,) from head h's slice at
    position t[r]."""

    def __init__(self, proj, head: int, head_dim: int, t: torch.Tensor, delta: torch.Tensor):
        self.cols = slice(head * head_dim, (head + 1) * head_dim)
        self.t, self.delta = t, delta  # (R,), (R, D)
        self.handle = proj.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        y = args[0].clone()  # (R, T, H*D)
        rows = torch.arange(y.size(0), device=y.device)
        y[rows, self.t, self.cols] -= self.delta
        return (y,)


@torch.no_grad()
def clean_pass(model, idx: torch.Tensor):
    """idx (1, T) -> (maps (L, H, T, T), values (L, H, T, D), centred logits (T, V)) of one unablated forward."""
    cfg = model.config
    values = []
    hooks = [b.attn.qkv.register_forward_hook(
        lambda m, a, out: values.append(out[0, :, 2 * cfg.n_embd:].view(-1, cfg.n_head, cfg.head_dim).transpose(0, 1)))
        for b in model.blocks]  # v: (H, T, D); RoPE and QK-norm touch only q and k
    try:
        with recording(model) as weights:
            logits, _ = model(idx)  # (1, T, V)
    finally:
        for h in hooks:
            h.remove()
    return torch.stack(weights)[:, 0], torch.stack(values), centred(logits[0])


def centred(logits: torch.Tensor) -> torch.Tensor:
    """(..., V) -> the logits minus their mean over the vocabulary (adding a constant to all changes nothing)."""
    logits = logits.float()
    return logits - logits.mean(-1, keepdim=True)


@torch.no_grad()
def key_effects(model, idx: torch.Tensor, targets: torch.Tensor, queries: list[int]) -> list[dict]:
    """For every layer and head, every query in queries and every key it sees: the weight and the ablation effect.
    idx (1, T); targets (T,) the right token at each position. Returns [{"layer", "head", "t", "s", "weight",
    "effect"}] with tensors of R entries each (one per (query, key) pair). Runs in eval mode (no dropout), the
    model's own mode restored after."""
    with evaluating(model):
        return _key_effects(model, idx, targets, queries)


def _key_effects(model, idx: torch.Tensor, targets: torch.Tensor, queries: list[int]) -> list[dict]:
    cfg = model.config
    maps, values, z = clean_pass(model, idx)
    T = idx.size(1)
    # a key the causal mask or the sliding window hides has weight 0 and effect 0: not a pair (a tie in both rankings)
    seen = build_mask(0, T, cfg.causal, cfg.window)  # (1, 1, T, T) or None (every key)
    pairs = [(t, s) for t in queries for s in range(T) if seen is None or seen[0, 0, t, s]]
    t_all = torch.tensor([p[0] for p in pairs])  # (R,)
    s_all = torch.tensor([p[1] for p in pairs])  # (R,)
    clean = z[t_all, targets[t_all]]  # (R,)
    out = []
    for layer in range(cfg.n_layer):
        for head in range(cfg.n_head):
            w = maps[layer, head, t_all, s_all]  # (R,)
            delta = w.unsqueeze(1) * values[layer, head, s_all]  # (R, D): the key's term in the head's output
            effect = torch.empty(len(pairs))
            for lo in range(0, len(pairs), CHUNK):
                hi = min(lo + CHUNK, len(pairs))
                hook = KeyRemoved(model.blocks[layer].attn.proj, head, cfg.head_dim, t_all[lo:hi], delta[lo:hi])
                try:
                    with on_math(model):
                        logits, _ = model(idx.expand(hi - lo, T))  # (r, T, V); the math path, as above
                finally:
                    hook.handle.remove()
                rows = torch.arange(hi - lo)
                ablated = centred(logits[rows, t_all[lo:hi]])[rows, targets[t_all[lo:hi]]]
                effect[lo:hi] = (clean[lo:hi] - ablated).abs()
            out.append({"layer": layer, "head": head, "t": t_all, "s": s_all, "weight": w.float(), "effect": effect})
    return out


def top1_agreement(r: dict) -> float:
    """The share of queries whose most attended key is also the key whose removal changes the prediction most."""
    hits = []
    for t in r["t"].unique():
        rows = r["t"] == t
        hits.append(float(r["weight"][rows].argmax() == r["effect"][rows].argmax()))
    return sum(hits) / len(hits)


def agreement(results: list[dict]) -> dict:
    """Per head {"rho", "top1"}, and per layer the mean over its heads: {"heads": {(l, h): ...}, "layers": {l: ...}}."""
    heads = {(r["layer"], r["head"]): {"rho": spearman(r["weight"], r["effect"]), "top1": top1_agreement(r)}
             for r in results}
    layers = {}
    for layer in sorted({lh[0] for lh in heads}):
        mine = [v for (lyr, _), v in heads.items() if lyr == layer]
        layers[layer] = {k: sum(v[k] for v in mine) / len(mine) for k in ("rho", "top1")}
    return {"heads": heads, "layers": layers}
