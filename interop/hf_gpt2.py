"""Our GPT <-> Hugging Face's GPT-2 (`GPT2LMHeadModel`): the config and the weights, name by name. No files here
(interop/export.py and interop/import_hf.py read and write folders) and no `transformers` import: the mapping is
plain tensors, and the tests hold it against transformers' own implementation.

GPT-2 is our model with one setting of each option: learned absolute positions, pre-norm LayerNorm (eps 1e-5),
tanh-approximate GELU ("gelu_new"), a tied output head, full causal attention, biases everywhere. Two differences
are only of layout:
- HF's GPT-2 uses `Conv1D` layers, whose weight is (in, out): the transpose of nn.Linear's (out, in).
- Our bias=False model has no bias tensors; GPT-2 always has them, so export writes zeros (exact: x + 0 = x), and
  import gives bias=True.

Shapes: C n_embd, V vocab_size, P block_size (n_positions).
"""
import torch

from common.errors import UserError
from model import GPT, GPTConfig

HF_PREFIX = "transformer."  # GPT2LMHeadModel's body; the original OpenAI upload has no prefix (import takes both)
# HF buffers that are not weights: the causal mask older transformers versions saved. Ignored on import.
HF_BUFFERS = (".attn.bias", ".attn.masked_bias")
GELU_TANH = ("gelu_new", "gelu_pytorch_tanh")  # both are 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))
LN_EPS = 1e-5  # nn.LayerNorm's default, which our model uses
ARCH = "GPT2LMHeadModel"


def gpt2_refusal(cfg: GPTConfig, to: str = "GPT-2") -> str | None:
    """Why GPT-2 cannot express this config (one line), or None when it can; `to` names the export's target in
    the line (a GGUF file holds the same graph)."""
    if cfg.pos_emb != "learned":
        return (f"pos_emb='{cfg.pos_emb}' cannot be exported to {to}, which has only learned absolute positions "
                f"(pos_emb='learned')")
    if cfg.window is not None:
        return (f"window={cfg.window} (sliding-window attention) cannot be exported to {to}, which attends to the "
                f"whole context")
    if not cfg.causal:
        return (f"causal=false (a bidirectional model: train.py --model=encoder or --model=cheater) cannot be exported "
                f"to {to}, which is a causal decoder")
    if getattr(cfg, "qk_norm", False):
        return f"qk_norm=true cannot be exported to {to}, which does not normalise q and k; train with qk_norm=false"
    if getattr(cfg, "mlp_act", "gelu") != "gelu":
        return (f"mlp_act='{cfg.mlp_act}' cannot be exported to {to}, whose MLP uses the tanh GELU; train with "
                f"mlp_act='gelu'")
    if not getattr(cfg, "tie_head", True):
        return (f"tie_head=false (an untied output head) cannot be exported to {to}, whose head is the token "
                "embedding; train with tie_head=true")
    if getattr(cfg, "attn_score", "dot") != "dot":
        return (f"attn_score='{cfg.attn_score}' cannot be exported to {to}, whose attention is the scaled dot "
                f"product (attn_score='dot')")
    return None


refusal = gpt2_refusal  # the name interop/export.py calls every target's check by


def hf_config(cfg: GPTConfig, eot_id: int | None) -> dict:
    """The config.json of a GPT2LMHeadModel with our architecture (written by hand: no transformers needed)."""
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": cfg.vocab_size, "n_positions": cfg.block_size, "n_embd": cfg.n_embd, "n_layer": cfg.n_layer,
        "n_head": cfg.n_head, "n_inner": None,  # None: 4 * n_embd, our MLP width
        "activation_function": "gelu_new", "layer_norm_epsilon": LN_EPS,
        "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.dropout,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True, "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": eot_id, "eos_token_id": eot_id,  # GPT-2 starts and ends documents with <|endoftext|>
    }


def _layer_names(i: int) -> list[tuple[str, str, bool]]:
    """(our name, HF name without prefix, transposed?) for block i's weights; biases follow their weight."""
    ours, hf = f"blocks.{i}.", f"h.{i}."
    return [(ours + "norm1", hf + "ln_1", False), (ours + "attn.qkv", hf + "attn.c_attn", True),
            (ours + "attn.proj", hf + "attn.c_proj", True), (ours + "norm2", hf + "ln_2", False),
            (ours + "mlp.up", hf + "mlp.c_fc", True), (ours + "mlp.down", hf + "mlp.c_proj", True)]


def _all_names(n_layer: int) -> list[tuple[str, str, bool]]:
    names = [name for i in range(n_layer) for name in _layer_names(i)]
    return names + [("norm", "ln_f", False)]


def to_hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """Our weights -> GPT2LMHeadModel's state dict, without lm_head.weight (tied to wte, as HF saves it)."""
    cfg = model.config
    refusal = gpt2_refusal(cfg)
    if refusal:
        raise UserError(refusal)
    ours = {k: v.detach() for k, v in model.unpadded_state_dict().items()}
    out = {HF_PREFIX + "wte.weight": ours["wte.weight"],  # (V, C)
           HF_PREFIX + "wpe.weight": ours["pos.table.weight"]}  # (P, C)
    for our_name, hf_name, transposed in _all_names(cfg.n_layer):
        w = ours[our_name + ".weight"]  # Linear: (out, in); LayerNorm: (C,)
        out[HF_PREFIX + hf_name + ".weight"] = w.t() if transposed else w  # Conv1D: (in, out)
        out_features = w.shape[0]
        bias = ours.get(our_name + ".bias")  # absent when bias=False
        out[HF_PREFIX + hf_name + ".bias"] = bias if bias is not None else torch.zeros(out_features, dtype=w.dtype)
    return {k: v.contiguous().clone() for k, v in out.items()}


def config_from_hf(hf: dict, dropout: float = 0.0) -> GPTConfig:
    """A GPT-2 config.json -> our GPTConfig; refuses (one line) a GPT-2 variant our model cannot run exactly."""
    def need(ok, msg):
        if not ok:
            raise UserError(f"this Hugging Face model cannot be imported: {msg}")

    need(hf.get("model_type") == "gpt2", f"model_type={hf.get('model_type')!r}, only 'gpt2' is supported")
    need(hf.get("activation_function", "gelu_new") in GELU_TANH,
         f"activation_function={hf.get('activation_function')!r}; our MLP uses the tanh GELU ('gelu_new')")
    need(hf.get("n_inner") in (None, 4 * hf["n_embd"]), f"n_inner={hf.get('n_inner')}; our MLP is 4 * n_embd wide")
    need(abs(hf.get("layer_norm_epsilon", LN_EPS) - LN_EPS) < 1e-12,
         f"layer_norm_epsilon={hf.get('layer_norm_epsilon')}; ours is {LN_EPS}")
    need(hf.get("scale_attn_weights", True), "scale_attn_weights=false (ours divides scores by sqrt(head_dim))")
    need(not hf.get("scale_attn_by_inverse_layer_idx", False), "scale_attn_by_inverse_layer_idx=true")
    need(not hf.get("add_cross_attention", False), "add_cross_attention=true (ours is decoder-only)")
    need(hf.get("tie_word_embeddings", True), "tie_word_embeddings=false (our head is tied to the embedding)")
    return GPTConfig(vocab_size=hf["vocab_size"], block_size=hf["n_positions"], n_layer=hf["n_layer"],
                     n_head=hf["n_head"], n_embd=hf["n_embd"], dropout=dropout, bias=True, pos_emb="learned")


def from_hf_state_dict(cfg: GPTConfig, hf_state: dict[str, torch.Tensor]) -> GPT:
    """GPT2LMHeadModel's (or GPT2Model's) state dict -> our GPT with bias=True, learned positions."""
    state = {}
    for k, v in hf_state.items():
        k = k[len(HF_PREFIX):] if k.startswith(HF_PREFIX) else k
        if k.endswith(HF_BUFFERS) or k == "lm_head.weight":
            continue  # a mask buffer, or the head tied to wte
        state[k] = v

    def take(name):
        if name not in state:
            raise UserError(f"this Hugging Face model has no weight {name}, which GPT-2 with n_layer={cfg.n_layer} has")
        return state.pop(name)

    ours = {"wte.weight": take("wte.weight"), "pos.table.weight": take("wpe.weight")}
    for our_name, hf_name, transposed in _all_names(cfg.n_layer):
        w = take(hf_name + ".weight")
        ours[our_name + ".weight"] = w.t() if transposed else w  # Conv1D (in, out) -> Linear (out, in)
        ours[our_name + ".bias"] = take(hf_name + ".bias")
    if state:
        raise UserError(f"this Hugging Face model has weights GPT-2's layout does not: {', '.join(sorted(state)[:5])}")
    model = GPT(cfg)
    model.load_state_dict({k: v.contiguous() for k, v in ours.items()}, strict=False)
    missing = set(model.state_dict()) - set(ours) - {"head.weight"}  # the head is wte: tied, not loaded
    assert not missing, f"weights not set on import: {sorted(missing)}"
    return model
