"""Our RoPE GPT <-> Hugging Face's GPT-NeoX (`GPTNeoXForCausalLM`): the config and the weights, name by name. No
files and no `transformers` import here, as in interop/hf_gpt2.py; the tests hold the mapping against transformers.

GPT-NeoX with `use_parallel_residual=false` (x + attn(ln1(x)), then x + mlp(ln2(x))) and `partial_rotary_factor=1`
(every pair of every head rotates) is our pre-norm RoPE decoder:
- RoPE: the same convention. Ours rotates pairs (i, i + D/2) (model/positional.py); NeoX's `rotate_half` does the
  same, with theta_i = base^(-2i/D) over the full head_dim. So q and k need no permutation. Scaled RoPE (a
  rope_type other than "default": linear, dynamic, ...) is refused on import, under either key transformers reads
  it from: `rope_parameters`, or the older top-level `rope_scaling`, which wins when both are there.
- The fused qkv matrix: ours stacks [all q heads; all k heads; all v heads] (rows 3C); NeoX interleaves per head
  [q_h; k_h; v_h] for h = 0..H-1. Export regroups the rows (and the bias), import undoes it.
- MLP: tanh GELU is "gelu_pytorch_tanh" (the same torch op as ours), the erf GELU "gelu" (mlp_act="gelu_exact"),
  relu(x)^2 is "relu2".
- Biases: NeoX's MLP and LayerNorms always have them, its attention has them when attention_bias=true. Our
  bias=False model is written with zero biases (exact: x + 0 = x), so import gives bias=True.
- The head: tied (`tie_word_embeddings=true`, only embed_in is saved) or untied (`embed_out`, NeoX's own name).
Levers no NeoX option expresses are refused in one line naming the flag (neox_refusal).

Shapes: C n_embd, H n_head, D head_dim, V vocab_size.
"""
import torch

from common.errors import UserError
from model import GPT, GPTConfig

PREFIX = "gpt_neox."
HEAD = "embed_out.weight"  # the untied head; transformers 5 calls the module lm_head but saves NeoX's name
HEAD_NAMES = (HEAD, "lm_head.weight")  # import takes either
# our mlp_act -> HF's hidden_act, the same function; and back (gelu_new is the same formula as gelu_pytorch_tanh)
ACTS = {"gelu": "gelu_pytorch_tanh", "gelu_exact": "gelu", "relu2": "relu2"}
ACTS_BACK = {"gelu_pytorch_tanh": "gelu", "gelu_new": "gelu", "gelu": "gelu_exact", "relu2": "relu2"}
LN_EPS = 1e-5  # nn.LayerNorm's default, which our model uses
ARCH = "GPTNeoXForCausalLM"
HF_BUFFERS = (".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq")  # older saves; not weights


def neox_refusal(cfg: GPTConfig, to: str = "GPT-NeoX") -> str | None:
    """Why GPT-NeoX cannot express this config (one line), or None when it can; `to` names the export's target in
    the line (a GGUF file holds the same graph)."""
    if cfg.pos_emb != "rope":
        return f"pos_emb='{cfg.pos_emb}' cannot be exported to {to}, whose positions are RoPE (pos_emb='rope')"
    if cfg.window is not None:
        return (f"window={cfg.window} (sliding-window attention) cannot be exported to {to}, which attends to "
                f"the whole context")
    if not cfg.causal:
        return (f"causal=false (a bidirectional model: train.py --model=encoder or --model=cheater) cannot be exported "
                f"to {to}, which is a causal decoder")
    if cfg.qk_norm:
        return f"qk_norm=true cannot be exported to {to}, which does not normalise q and k; train with qk_norm=false"
    if cfg.attn_score != "dot":
        return (f"attn_score='{cfg.attn_score}' cannot be exported to {to}, whose attention is the scaled dot "
                f"product (attn_score='dot')")
    if cfg.mlp_act not in ACTS:
        return f"mlp_act='{cfg.mlp_act}' has no Hugging Face activation name; use one of {', '.join(ACTS)}"
    return None


refusal = neox_refusal  # the name interop/export.py calls every target's check by


def hf_config(cfg: GPTConfig, eot_id: int | None) -> dict:
    """The config.json of a GPTNeoXForCausalLM with our architecture."""
    return {
        "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
        "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.block_size, "hidden_size": cfg.n_embd,
        "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head, "intermediate_size": 4 * cfg.n_embd,
        "hidden_act": ACTS[cfg.mlp_act], "layer_norm_eps": LN_EPS, "use_parallel_residual": False,
        "attention_bias": True, "tie_word_embeddings": cfg.tie_head,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_base, "partial_rotary_factor": 1.0},
        "rotary_pct": 1.0, "rotary_emb_base": cfg.rope_base,  # the same, for readers of the older keys (llama.cpp)
        "hidden_dropout": cfg.dropout, "attention_dropout": cfg.dropout, "initializer_range": 0.02,
        "use_cache": True, "bos_token_id": eot_id, "eos_token_id": eot_id, "pad_token_id": None,
    }


def qkv_to_neox(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """(3C, ...) rows [q heads; k heads; v heads] -> [q_0; k_0; v_0; q_1; ...]: NeoX's per-head layout."""
    rest = w.shape[1:]
    return w.reshape(3, n_head, -1, *rest).transpose(0, 1).reshape(w.shape)  # (H, 3, D, ...) flattened


def qkv_from_neox(w: torch.Tensor, n_head: int) -> torch.Tensor:
    rest = w.shape[1:]
    return w.reshape(n_head, 3, -1, *rest).transpose(0, 1).reshape(w.shape)  # (3, H, D, ...) flattened


def _layer_names(i: int) -> list[tuple[str, str]]:
    ours, hf = f"blocks.{i}.", f"{PREFIX}layers.{i}."
    return [(ours + "norm1", hf + "input_layernorm"), (ours + "attn.qkv", hf + "attention.query_key_value"),
            (ours + "attn.proj", hf + "attention.dense"), (ours + "norm2", hf + "post_attention_layernorm"),
            (ours + "mlp.up", hf + "mlp.dense_h_to_4h"), (ours + "mlp.down", hf + "mlp.dense_4h_to_h")]


def _all_names(n_layer: int) -> list[tuple[str, str]]:
    return [n for i in range(n_layer) for n in _layer_names(i)] + [("norm", PREFIX + "final_layer_norm")]


def to_hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """Our weights -> GPTNeoXForCausalLM's state dict as save_pretrained writes it (a tied head is not saved)."""
    cfg = model.config
    refusal = neox_refusal(cfg)
    if refusal:
        raise UserError(refusal)
    ours = {k: v.detach() for k, v in model.unpadded_state_dict().items()}
    out = {PREFIX + "embed_in.weight": ours["wte.weight"]}  # (V, C)
    for our_name, hf_name in _all_names(cfg.n_layer):
        w = ours[our_name + ".weight"]  # Linear (out, in), the layout NeoX's nn.Linear has too; LayerNorm (C,)
        b = ours.get(our_name + ".bias")  # absent when bias=False
        b = b if b is not None else torch.zeros(w.shape[0], dtype=w.dtype)
        if our_name.endswith("attn.qkv"):
            w, b = qkv_to_neox(w, cfg.n_head), qkv_to_neox(b, cfg.n_head)  # (3C, C), (3C,)
        out[hf_name + ".weight"], out[hf_name + ".bias"] = w, b
    if not cfg.tie_head:
        out[HEAD] = ours["head.weight"]  # (V, C)
    return {k: v.contiguous().clone() for k, v in out.items()}


def rope_settings(hf: dict) -> tuple[str, dict]:
    """(the key, the dict) transformers takes RoPE's settings from: the older top-level `rope_scaling` wins over
    `rope_parameters` when both are there, as transformers' GPTNeoXConfig decides; {} when neither is."""
    for key in ("rope_scaling", "rope_parameters"):
        if hf.get(key):
            return key, hf[key]
    return "rope_parameters", {}


def config_from_hf(hf: dict, dropout: float = 0.0) -> GPTConfig:
    """A GPT-NeoX config.json -> our GPTConfig; refuses (one line) a variant our model cannot run exactly."""
    def need(ok, msg):
        if not ok:
            raise UserError(f"this Hugging Face model cannot be imported: {msg}")

    key, rope = rope_settings(hf)
    need(isinstance(rope, dict), f"{key} is a JSON {type(rope).__name__}, not an object")
    partial = rope.get("partial_rotary_factor", hf.get("rotary_pct", 0.25))  # 0.25: NeoX's default
    kind = rope.get("rope_type", rope.get("type", "default"))  # "type": the older name
    need(hf.get("model_type") == "gpt_neox", f"model_type={hf.get('model_type')!r}, not 'gpt_neox'")
    need(not hf.get("use_parallel_residual", True), "use_parallel_residual=true (our blocks are sequential)")
    need(partial == 1.0, f"partial_rotary_factor={partial}; our RoPE rotates the whole head")
    need(kind == "default", f"{key} has rope_type={kind!r} (scaled RoPE); our RoPE is unscaled")
    need(hf.get("hidden_act", "gelu") in ACTS_BACK,
         f"hidden_act={hf.get('hidden_act', 'gelu')!r}; ours is one of {', '.join(ACTS_BACK)}")
    need(hf.get("intermediate_size") == 4 * hf["hidden_size"],
         f"intermediate_size={hf.get('intermediate_size')}; our MLP is 4 * hidden_size wide")
    need(abs(hf.get("layer_norm_eps", LN_EPS) - LN_EPS) < 1e-12,
         f"layer_norm_eps={hf.get('layer_norm_eps')}; ours is {LN_EPS}")
    return GPTConfig(vocab_size=hf["vocab_size"], block_size=hf["max_position_embeddings"],
                     n_layer=hf["num_hidden_layers"], n_head=hf["num_attention_heads"], n_embd=hf["hidden_size"],
                     dropout=dropout, bias=True, pos_emb="rope",
                     rope_base=float(rope.get("rope_theta", hf.get("rotary_emb_base", 10000.0))),
                     mlp_act=ACTS_BACK[hf.get("hidden_act", "gelu")], tie_head=hf.get("tie_word_embeddings", False))


def from_hf_state_dict(cfg: GPTConfig, hf_state: dict[str, torch.Tensor]) -> GPT:
    """GPTNeoXForCausalLM's state dict -> our GPT with bias=True and RoPE."""
    state = {k: v for k, v in hf_state.items() if not k.endswith(HF_BUFFERS)}

    def take(name, default=None):
        if name not in state:
            if default is not None:
                return default
            raise UserError(f"this Hugging Face model has no weight {name}, which GPT-NeoX with "
                            f"n_layer={cfg.n_layer} has")
        return state.pop(name)

    ours = {"wte.weight": take(PREFIX + "embed_in.weight")}
    for our_name, hf_name in _all_names(cfg.n_layer):
        w = take(hf_name + ".weight")
        b = take(hf_name + ".bias", torch.zeros(w.shape[0], dtype=w.dtype))  # attention_bias=false: zeros
        if our_name.endswith("attn.qkv"):
            w, b = qkv_from_neox(w, cfg.n_head), qkv_from_neox(b, cfg.n_head)
        ours[our_name + ".weight"], ours[our_name + ".bias"] = w, b
    heads = [state.pop(n) for n in HEAD_NAMES if n in state]  # a tied head saved anyway is embed_in: dropped
    if not cfg.tie_head:
        if not heads:
            raise UserError("this Hugging Face model has tie_word_embeddings=false but no embed_out.weight")
        ours["head.weight"] = heads[0]
    if state:
        raise UserError(f"this Hugging Face model has weights GPT-NeoX's layout does not: "
                        f"{', '.join(sorted(state)[:5])}")
    model = GPT(cfg)
    model.load_state_dict({k: v.contiguous() for k, v in ours.items()}, strict=False)
    missing = set(model.state_dict()) - set(ours) - ({"head.weight"} if cfg.tie_head else set())  # tied: it is wte
    assert not missing, f"weights not set on import: {sorted(missing)}"
    return model
