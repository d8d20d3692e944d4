"""The model's configuration: the architecture, one dataclass that checks itself.

Every field can be set from the command line (`--n_layer=4`); `train.py` builds the flags from these fields.
Derived quantities (`head_dim`) are properties, never stored, so they can't drift out of sync. Only what changes the
function the model computes is here (and in every checkpoint); how it is computed (which attention backend, which
kernels) is chosen when a model is run: model/attention.py's backends, speed/.
"""
from dataclasses import asdict, dataclass, fields

from common.errors import need

POS_EMBS = ("rope", "sinusoidal", "learned", "alibi", "none")
ATTN_SCORES = ("dot", "additive", "bilinear")  # see model/scores.py
MLP_ACTS = ("gelu", "gelu_exact", "relu2")  # see model/blocks.py
CROSS_ATTNS = ("attention", "mean")  # the encoder-decoder's: see model/seq2seq.py

MAX_SIZE = 2**31  # sizes and windows are indices: torch's int32 kernels and index math stay below this


def number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass
class GPTConfig:
    NOT_FLAGS = {"vocab_size": "the tokenizer sets it; --bpe_vocab_size sizes a trained BPE (--tokenizer=bpe)"}
    # model
    vocab_size: int = 65  # set from the data's tokenizer by the training setup
    vocab_multiple: int = 1  # the embedding and head get rows up to the next multiple of this (64: GPT-2's 50,257
    #                          -> 50,304, whose matmuls tile evenly on a GPU); the extra rows are no token: the
    #                          logits stop at vocab_size, and exports leave them out
    block_size: int = 256  # the longest context the model is trained on (and the KV cache holds)
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0  # residual, attention and embedding dropout
    bias: bool = False  # biases in Linear and LayerNorm (GPT-2 has them; Llama-style models, and this default, not)
    pos_emb: str = "rope"  # 'rope', 'sinusoidal', 'learned', 'alibi' or 'none'
    rope_base: float = 10000.0  # RoPE's theta: wavelength of the slowest-rotating pair
    attn_score: str = "dot"  # 'dot' = q.k/sqrt(d), 'bilinear' = q^T W k/sqrt(d) (Luong), 'additive' =
    #                          v^T tanh(W1 q + W2 k)
    causal: bool = True  # True: decoder (each position sees the past); False: bidirectional encoder
    window: int | None = None  # sliding-window attention: keys fewer than `window` positions away (a decoder's
    #                            query sees at most `window` keys, itself included; an encoder's, on both sides, at
    #                            most 2 * window - 1)
    cross_attn: str = "attention"  # the encoder-decoder only (--model=seq2seq): 'attention' = every decoder layer
    #                                cross-attends to every source position; 'mean' = the decoder reads one fixed
    #                                vector, the mean of the encoder's outputs (the bottleneck attention removed)
    # recipe levers (what each does to the loss and the step time: docs/speed.md); their defaults are the model
    # without them (GPT-2's choices), which a checkpoint's config that lacks their keys gets (from_dict)
    qk_norm: bool = False  # RMS-normalise each head's q and k (no gain) before RoPE and the scores: with the dot
    #                        score, |q.k| / sqrt(D) <= sqrt(D), so high learning rates cannot blow the softmax up
    mlp_act: str = "gelu"  # 'gelu' (GPT-2's tanh GELU), 'gelu_exact' (the erf GELU of BERT, nanoGPT and
    #                        GPT-NeoX) or 'relu2' (relu(x)^2, So et al. 2021)
    tie_head: bool = True  # False: a separate output head instead of reusing the token embedding
    zero_init: bool = False  # zero-initialise the projections that write into the residual stream (and an untied
    #                          head): each block starts as the identity

    def __post_init__(self):
        for name in ("vocab_size", "vocab_multiple", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            need(type(value) is int and 0 < value < MAX_SIZE, f"{name}={value!r} must be a positive integer "
                 f"below 2**31")
        need(self.n_embd % self.n_head == 0,
             f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}; pick n_embd as a multiple of n_head")
        for name in ("bias", "causal", "qk_norm", "tie_head", "zero_init"):  # a string 'false' would be true
            need(type(getattr(self, name)) is bool, f"{name}={getattr(self, name)!r} must be True or False")
        need(number(self.dropout) and 0.0 <= self.dropout < 1.0, f"dropout={self.dropout!r} must be a number in [0, 1)")
        need(self.pos_emb in POS_EMBS, f"pos_emb={self.pos_emb!r} is not one of {', '.join(POS_EMBS)}")
        need(self.attn_score in ATTN_SCORES,
             f"attn_score={self.attn_score!r} is not one of {', '.join(ATTN_SCORES)}")
        need(self.cross_attn in CROSS_ATTNS,
             f"cross_attn={self.cross_attn!r} is not one of {', '.join(CROSS_ATTNS)}")
        need(self.mlp_act in MLP_ACTS, f"mlp_act={self.mlp_act!r} is not one of {', '.join(MLP_ACTS)}")
        need(number(self.rope_base) and self.rope_base > 1.0, f"rope_base={self.rope_base!r} must be a number > 1")
        if self.pos_emb == "rope":
            need(self.head_dim % 2 == 0, f"pos_emb='rope' needs an even head_dim, got {self.head_dim} "
                 f"(n_embd={self.n_embd} / n_head={self.n_head})")
        need(self.window is None or (type(self.window) is int and 0 < self.window < MAX_SIZE),
             f"window={self.window!r} must be a positive integer below 2**31, or None (full attention)")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def padded_vocab(self) -> int:
        """Rows of the embedding and the head: vocab_size rounded up to a multiple of vocab_multiple."""
        return -(-self.vocab_size // self.vocab_multiple) * self.vocab_multiple

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        """Build from a dict (e.g. a checkpoint's), ignoring keys that are not model fields (a checkpoint may carry
        attn_impl, dropout_impl or linear_impl: run-time choices, speed/)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
