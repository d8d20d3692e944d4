"""Speed levers: how a built model is computed, chosen when it is run, never part of its config (a training
checkpoint notes its run's levers only for a resume to continue with them).

The model (model/) is the architecture in plain PyTorch: nn.Linear, nn.Dropout, attention on the fused backend.
`apply` turns a built model into a faster one that computes the same function (dropout: the same distribution,
other draws), with the same parameters and state_dict keys, the way gpt-fast quantizes a built model and nanochat
converts layers from its training script:

    model = GPT(config).to(device)
    speed.apply(model, SpeedConfig(attn_impl="math"))

Each lever has its off switch (a flag of train.py, sample.py and evaluate.py) and an ablation row in docs/speed.md:
- attn_impl:    which attention backend (model/attention.py); 'math' runs the plain causal case through
                speed/causal_blocks.py (scale and mask in one matmul, query blocks on a CPU)
- dropout_impl: 'rand' draws dropout masks in bulk (speed/dropout.py), 'bernoulli' keeps torch's nn.Dropout
- linear_impl:  'onednn' multiplies float32 linear layers on an x86 CPU other than Intel's (MKL there) in oneDNN
                (speed/linear.py), and without autograd computes the MLP's up projection and tanh GELU in one call
                (speed/gelu_mlp.py); 'aten' keeps nn.Linear and the MLP's own forward
- qk_impl:      'fused' computes QK-norm and RoPE in one autograd function (speed/qk_rope.py), 'aten' keeps the
                module's torch ops
and ReLU^2's one-pass backward (speed/relu2.py), which changes no number, is always applied.
"""
from dataclasses import dataclass, replace

from common.errors import need

ATTN_IMPLS = ("auto", "sdpa", "math", "tiled")
DROPOUT_IMPLS = ("rand", "bernoulli")
LINEAR_IMPLS = ("onednn", "aten")
QK_IMPLS = ("fused", "aten")


@dataclass
class SpeedConfig:
    # how the model is computed (not part of the model: any run may choose another); on CUDA, the levers that no flag
    # or config file sets are attn_impl=auto, dropout_impl=bernoulli and qk_impl=aten
    attn_impl: str = "auto"  # 'sdpa' = fused kernel (FlashAttention on GPU), 'math' = the formula written out,
    #                          'tiled' = FlashAttention's online softmax in plain PyTorch (teaching, slow), 'auto' =
    #                          sdpa, or math for a learned attn_score (only math computes one)
    dropout_impl: str = "rand"  # 'rand': dropout masks drawn in bulk, ~4x cheaper on a CPU (speed/dropout.py);
    #                             'bernoulli': torch's nn.Dropout and SDPA's own attention dropout
    linear_impl: str = "onednn"  # 'onednn': float32 linear layers on an x86 CPU in oneDNN where it is faster
    #                              (speed/linear.py), the MLP's tanh GELU inside its up projection without autograd
    #                              (speed/gelu_mlp.py); 'aten': torch's nn.Linear
    qk_impl: str = "fused"  # 'fused': QK-norm and RoPE in one autograd function, fewer passes over q and k
    #                         (speed/qk_rope.py); 'aten': the attention module's own torch ops

    def __post_init__(self):
        need(self.attn_impl in ATTN_IMPLS, f"attn_impl={self.attn_impl!r} is not one of {', '.join(ATTN_IMPLS)}")
        need(self.dropout_impl in DROPOUT_IMPLS,
             f"dropout_impl={self.dropout_impl!r} is not one of {', '.join(DROPOUT_IMPLS)}")
        need(self.linear_impl in LINEAR_IMPLS,
             f"linear_impl={self.linear_impl!r} is not one of {', '.join(LINEAR_IMPLS)}")
        need(self.qk_impl in QK_IMPLS, f"qk_impl={self.qk_impl!r} is not one of {', '.join(QK_IMPLS)}")


# On a GPU the fused kernels win: SDPA runs FlashAttention, which never stores the T x S scores the math path keeps
# for every layer, and torch's dropout is one kernel where the bulk masks are several. The presets' choices were
# measured on a CPU, so on CUDA these replace them (QK-norm and RoPE are left to torch.compile there: the fused
# function is measured on a CPU only); only a flag or a config file chooses otherwise.
GPU_CHOICES = {"attn_impl": "auto", "dropout_impl": "bernoulli", "qk_impl": "aten"}


def for_device(sc: SpeedConfig, explicit: dict, device_type: str) -> SpeedConfig:
    """sc as run on device_type: on CUDA, GPU_CHOICES for every lever not set in `explicit` (the flags and the
    config file); elsewhere sc unchanged."""
    if device_type != "cuda":
        return sc
    return replace(sc, **{k: v for k, v in GPU_CHOICES.items() if k not in explicit})


def apply(model, sc: SpeedConfig | None = None):
    """Applies the levers sc asks for to model (built, on its device) in place; returns model."""
    from model.attention import attention_layers, use_backend
    from speed.causal_blocks import CausalBlocks
    from speed.dropout import use_bulk_dropout
    from speed.gelu_mlp import use_fused_gelu_mlp
    from speed.linear import use_onednn_linear
    from speed.qk_rope import use_fused_qk_norm_rope
    from speed.relu2 import use_fused_relu2

    sc = sc or SpeedConfig()
    if sc.attn_impl != "auto":
        use_backend(model, sc.attn_impl)  # refuses a backend that cannot compute a learned score
    if sc.attn_impl == "math":
        for layer in attention_layers(model):
            layer.backend = CausalBlocks()  # the formula, and its plain causal case faster
    if sc.dropout_impl == "rand":
        use_bulk_dropout(model, CausalBlocks)
    if sc.linear_impl == "onednn":
        use_onednn_linear(model)
        use_fused_gelu_mlp(model)
    if sc.qk_impl == "fused":
        use_fused_qk_norm_rope(model)
    return use_fused_relu2(model)
