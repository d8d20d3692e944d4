"""The model's configuration: one dataclass that checks itself, plus named presets.

Every field can be set from the command line (`--n_layer=4`); `train.py` builds the flags from these fields.
Derived quantities (`head_dim`) are properties, never stored, so they can't drift out of sync.
"""
from dataclasses import asdict, dataclass, fields

from common.errors import need

POS_EMBS = ("rope", "sinusoidal", "learned", "alibi", "none")
ATTN_IMPLS = ("sdpa", "math", "tiled")
ATTN_SCORES = ("dot", "additive", "bilinear")  # see model/scores.py
MLP_ACTS = ("gelu", "gelu_exact", "relu2")  # see model/blocks.py
DROPOUT_IMPLS = ("rand", "bernoulli")  # see model/dropout.py
LINEAR_IMPLS = ("onednn", "aten")  # see model/linear.py


MAX_SIZE = 2**31  # sizes and windows are indices: torch's int32 kernels and index math stay below this


@dataclass
class GPTConfig:
    NOT_FLAGS = {"vocab_size": "the tokenizer sets it; --bpe_vocab_size sizes a trained BPE (--tokenizer=bpe)"}
    # model
    vocab_size: int = 65  # set from the data's tokenizer by the training setup
    block_size: int = 256  # the longest context the model is trained on (and the KV cache holds)
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0  # residual, attention and embedding dropout
    bias: bool = False  # biases in Linear and LayerNorm (GPT-2 had them; without is a little faster and as good)
    pos_emb: str = "rope"  # one of POS_EMBS
    rope_base: float = 10000.0  # RoPE's theta: wavelength of the slowest-rotating pair
    attn_impl: str = "sdpa"  # 'sdpa' = fused kernel (FlashAttention on GPU), 'math' = textbook reference,
    #                          'tiled' = FlashAttention's online softmax in plain PyTorch (teaching, slow)
    attn_score: str = "dot"  # 'dot' = q.k/sqrt(d), 'bilinear' = q^T W k (Luong), 'additive' = v^T tanh(W1 q + W2 k)
    causal: bool = True  # True: decoder (each position sees the past); False: bidirectional encoder
    window: int | None = None  # sliding-window attention: each query sees at most `window` keys
    # Speed levers. The defaults are the architecture every earlier checkpoint has, so old checkpoints (which lack
    # these keys) load unchanged. What each one does to the loss and the step time: README.md, "Speed".
    qk_norm: bool = False  # RMS-normalise each head's q and k (no gain) before RoPE and the scores: with the dot
    #                        score, |q.k| / sqrt(D) <= sqrt(D), so high learning rates cannot blow the softmax up
    mlp_act: str = "gelu"  # one of MLP_ACTS: 'gelu' (GPT-2's tanh GELU), 'gelu_exact' (the erf GELU of BERT,
    #                        nanoGPT and GPT-NeoX; ~2x cheaper than the tanh form on a CPU) or 'relu2' (relu(x)^2,
    #                        So et al. 2021, a cheaper op on a CPU)
    tie_head: bool = True  # False: a separate output head instead of reusing the token embedding
    zero_init: bool = False  # zero-initialise the projections that write into the residual stream (and an untied
    #                          head): each block starts as the identity
    dropout_impl: str = "rand"  # one of DROPOUT_IMPLS: how the dropout masks are drawn, the same distribution
    #                             either way: 'rand' (one bulk uniform draw per mask, attention dropout on the math
    #                             path on a CPU: ~4x cheaper masks there, model/dropout.py) or 'bernoulli' (torch's
    #                             nn.Dropout and SDPA's own attention dropout)
    linear_impl: str = "onednn"  # one of LINEAR_IMPLS: which kernels multiply the linear layers, the same math either
    #                              way: 'onednn' (float32 on a CPU, products of 2,048+ rows and 2^25+ multiply-adds:
    #                              oneDNN's, ~1.1x faster there; torch's elsewhere; model/linear.py) or 'aten'
    #                              (nn.Linear)

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            need(type(value) is int and 0 < value < MAX_SIZE, f"{name}={value!r} must be a positive integer "
                 f"below 2**31")
        need(self.n_embd % self.n_head == 0,
             f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}; pick n_embd as a multiple of n_head")
        need(0.0 <= self.dropout < 1.0, f"dropout={self.dropout} must be in [0, 1)")
        need(self.pos_emb in POS_EMBS, f"pos_emb={self.pos_emb!r} is not one of {', '.join(POS_EMBS)}")
        need(self.attn_impl in ATTN_IMPLS, f"attn_impl={self.attn_impl!r} is not one of {', '.join(ATTN_IMPLS)}")
        need(self.attn_score in ATTN_SCORES,
             f"attn_score={self.attn_score!r} is not one of {', '.join(ATTN_SCORES)}")
        # Not switched silently: the fused and tiled paths hard-code q.k, so a learned score asks for the math path.
        need(self.attn_score == "dot" or self.attn_impl == "math",
             f"attn_score={self.attn_score!r} is computed on the math path only, not attn_impl={self.attn_impl!r}; "
             f"pass --attn_impl=math")
        need(self.attn_impl != "tiled" or self.dropout == 0.0,
             f"attn_impl='tiled' has no attention dropout, but dropout={self.dropout}; "
             f"use dropout=0 or attn_impl='math'")
        need(self.dropout_impl in DROPOUT_IMPLS,
             f"dropout_impl={self.dropout_impl!r} is not one of {', '.join(DROPOUT_IMPLS)}")
        need(self.linear_impl in LINEAR_IMPLS,
             f"linear_impl={self.linear_impl!r} is not one of {', '.join(LINEAR_IMPLS)}")
        need(self.mlp_act in MLP_ACTS, f"mlp_act={self.mlp_act!r} is not one of {', '.join(MLP_ACTS)}")
        need(self.rope_base > 1.0, f"rope_base={self.rope_base} must be > 1")
        if self.pos_emb == "rope":
            need(self.head_dim % 2 == 0, f"pos_emb='rope' needs an even head_dim, got {self.head_dim} "
                 f"(n_embd={self.n_embd} / n_head={self.n_head})")
        need(self.window is None or (type(self.window) is int and 0 < self.window < MAX_SIZE),
             f"window={self.window!r} must be a positive integer below 2**31, or None (full attention)")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        """Build from a dict (e.g. a checkpoint's), ignoring keys that are not model fields."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# Model-size presets: plain dicts of overrides (train.py's presets add training settings on top).
MODEL_PRESETS = {
    "tiny": dict(n_layer=2, n_head=2, n_embd=32, block_size=16),  # tests
    "nanogpt-cpu": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, pos_emb="learned"),
    "nanogpt-char": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, pos_emb="learned"),
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, pos_emb="learned", bias=True),
}
