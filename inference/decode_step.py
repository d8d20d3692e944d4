"""One decoding step with fixed shapes, so that torch.compile can turn it into a few fused kernels.

After int8 weights (inference/quantize.py) about half of a one-token forward is not the matmuls but hundreds of small
ops (casts, views, slices, layer norms, a one-query attention), each paying the eager dispatcher's overhead. A
compiler fuses them, but only into a graph it can reuse token after token, which needs every shape fixed:

- the KV cache is read whole: its buffers already hold max_len columns (model/kv_cache.py); the columns not
  written yet are hidden by the mask (key column <= the new token's column) instead of sliced away;
- the new token's column is a tensor, not a Python int, so a new position is a new input, not a new graph;
- its K and V are written into that column in place (index_copy_), with no allocation.

The step reuses the model's own trunk (GPT.trunk: same weights, same blocks, same attention backends); only the
per-forward context is built differently. A caller may have the step traced inside a TorchFunctionMode that
computes some of its ops another way (sample.py does on a CPU: speed/one_token.py). The prompt (prefill) and each
slide of the context window stay on the model's ordinary forward: they are run once every block_size/4 tokens. Run
eagerly, a step's logits equal the uncached forward's to float32 rounding for every positional option it takes
(ALiBi is refused), with or without a window and left padding (tests/unit/inference/test_decode_step.py); compiled,
the fused kernels round differently, so a greedy pick can differ where two logits are nearly tied.

Shapes: B batch, H heads, L = max_len cache columns, D head_dim, C n_embd, V vocab_size.
"""
import types
import weakref

import torch

from common.errors import ConfigError

from model.attention import AttentionContext, Tiled, attention_layers
from model.kv_cache import KVCache


# cpp_wrapper: on a CPU inductor calls its kernels from generated C++ instead of Python, ~0.1-0.3 ms less per token
# here; on a GPU the same option compiles against CUDA's headers, which a pip install of torch may lack
# realize_acc_reads_threshold: inductor writes out any elementwise result that reads more than 2 inputs instead of
# computing it inside each of its consumers' loops. A one-row product's loop runs once per output row, so a layer
# norm computed inside it would be computed again for each of the N rows (50,257 times in GPT-2's head)
CPU_COMPILE_OPTIONS = {"cpp_wrapper": True, "realize_acc_reads_threshold": 2}


class ColumnWriter:
    """The cache slot an attention layer sees during a step: writes k, v at column `col`, returns every column."""

    def __init__(self, k, v, col):
        self.k, self.v, self.col = k, v, col  # (B, H, L, D) each: this layer's buffers; col (1,) long

    def update(self, k, v):
        """k, v: (B, H, 1, D). Returns all keys/values (B, H, L, D); the mask hides columns after col."""
        self.k.index_copy_(2, self.col, k)  # (B, H, L, D), column col overwritten in place
        self.v.index_copy_(2, self.col, v)
        return self.k, self.v


class Columns:
    """What trunk() takes for a cache: one ColumnWriter per layer."""

    def __init__(self, k, v, col):
        self.layers = [ColumnWriter(k_l, v_l, col) for k_l, v_l in zip(k, v)]


def decode_step(model, idx, k, v, col, key_valid):
    """idx: (B, 1) the newest token; k, v: n_layer cache buffers (B, H, L, D) each; col: (1,) long, the column idx
    goes in; key_valid: (B, L) bool, False at left padding, or None. Returns logits (B, V)."""
    cfg = model.config
    L = k[0].size(2)
    k_idx = torch.arange(L, device=idx.device)  # (L,) key columns
    written = k_idx <= col  # (L,) the cached columns and the new one
    seen = written if cfg.window is None else written & (col - k_idx < cfg.window)  # (L,) the keys it may attend
    mask = seen.view(1, 1, 1, L)  # (1, 1, T=1, L)
    if key_valid is None:
        pos = col.view(1, 1)  # (1, 1) no padding: position == column
    else:
        mask = mask & key_valid.view(-1, 1, 1, L)  # (B, 1, 1, L)
        # the position counts every real token so far, not only those inside the window band it attends to
        pos = (key_valid & written).sum(-1, keepdim=True) - 1  # (B, 1)
    ctx = AttentionContext(mask=mask, empty=None, bias=None, rope=model.pos.rotation(pos), is_causal=False)
    return model.logits(model.trunk(idx, pos, ctx, Columns(k, v, col)))[:, -1]  # (B, V)


def own_copy(fn):
    """fn as a new function with a code object of its own. torch.compile keeps the graphs it compiled, and counts them
    against torch._dynamo.config.recompile_limit (8), per code object: one shared by every decoder would fail at the
    ninth model or shape in a process; a copy per decoder counts only that decoder's shapes."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def traced_in(mode):
    """decode_step run inside the TorchFunctionMode class `mode`, for torch.compile to trace."""
    def step(*args):
        with mode():
            return decode_step(*args)
    return step


def traceable(model) -> bool:
    """Whether torch.compile can trace the step for model: ALiBi's bias is built from Python ints, and the tiled
    attention (model/tiled_attention.py) chooses its tiles by reading the mask's values."""
    return model.config.pos_emb != "alibi" and not any(isinstance(layer.backend, Tiled)
                                                       for layer in attention_layers(model))


class StaticDecoder:
    """Runs generate's one-token steps through decode_step, compiled once (compile=True) or eager.

    decoder = StaticDecoder(model, compile=True)
    generate(model, prompt, 500, temperature=0.0, decoder=decoder)   # the tokens of a run without it, but for near-ties

    mode: a TorchFunctionMode class the compiled step is traced in, to change how some ops are computed there (on a
    CPU sample.py passes speed/one_token.py's OneTokenLoops); None traces the step as it is.
    """

    def __init__(self, model, compile: bool = True, mode=None):
        if model.config.pos_emb == "alibi":
            raise ConfigError("pos_emb='alibi' builds its score bias from Python ints: the compiled decoding step "
                              "does not support it; sample without --compile")
        if compile and not traceable(model):
            raise ConfigError("--attn_impl=tiled walks its tiles in Python and skips those the mask hides, which "
                              "torch.compile cannot trace: sample without --compile, or with another --attn_impl")
        if model.training:
            raise ValueError("the static decoder is for inference: call model.eval() first (dropout is off there)")
        self.model = model
        on_cpu = next(model.parameters()).device.type == "cpu"
        self.options = CPU_COMPILE_OPTIONS if on_cpu else None
        # dynamic=False: one graph for every position (col is a tensor); fullgraph: a graph break is a bug here; a copy
        # of the step's code for this decoder alone, so that other models in the process do not count as its recompiles
        self.step = (torch.compile(own_copy(traced_in(mode) if mode else decode_step), fullgraph=True, dynamic=False,
                                   backend=self.inductor) if compile else decode_step)
        # on a CPU the weights are frozen: constants of the compiled code, so inductor packs bf16 ones into oneDNN's
        # layout once (speed/packed.py does the same for the eager step); read while tracing, so set then
        self.freezing = compile and on_cpu
        # the column, kept on the device, and the cache it counts for (a weak reference: it need not outlive generate)
        self.col, self.cache, self.expected = None, lambda: None, None
        self.graphs = {}  # the inputs' shapes -> their compiled graph, called directly (GraphCall), or None
        self.compiling = None  # what inductor compiled during the last trace (GraphCall.of)

    def inductor(self, gm, example_inputs):
        """torch.compile's backend: inductor with the decoder's options, and a note of what it compiled."""
        import torch._inductor  # here: it imports torch._dynamo, start-up a run without compile skips
        graph = torch._inductor.compile(gm, example_inputs, options=self.options)
        first = []  # the outputs of the graph's first call

        def run(*inputs):
            out = graph(*inputs)
            if not first:
                first.append(out)
            return out
        self.compiling = graph, list(example_inputs), first
        return run

    def __call__(self, idx, cache: KVCache):
        """idx: (B, 1) the newest token, not yet in the cache (a prefill has allocated its buffers).
        Returns logits (B, V) and advances the cache by one column."""
        cache.reserve(1, None, idx.device)  # raises when full; marks the column valid
        # the column lives on the device and counts up there: a fresh tensor each token would be a copy from the
        # host each token (made again only for a new cache, after a prefill or a slide)
        if self.cache() is not cache or self.expected != cache.pos:
            self.col, self.cache = torch.tensor([cache.pos], device=idx.device), weakref.ref(cache)  # (1,)
        else:
            self.col += 1
        self.expected = cache.pos + 1
        idx = idx.clone(memory_format=torch.contiguous_format)  # (B, 1) strides (1, 1): a slice's change each step
        k, v = [slot.k for slot in cache.layers], [slot.v for slot in cache.layers]  # n_layer x (B, H, L, D)
        args = (self.model, idx, k, v, self.col, cache.valid)
        logits = self.step(*args) if self.step is decode_step else self.compiled(args, (idx.shape, k[0].shape,
                                                                                       k[0].dtype, cache.valid is None))
        cache.advance(1)
        return logits

    def compiled(self, args, shapes):
        """The compiled step. Its first call with these shapes goes through torch.compile, which traces it and has
        inductor compile the graph; after that the graph is called directly (GraphCall), without torch.compile's
        per-call work: its guards (a check of every weight and input before each call: a visible share of a small
        model's step) and the gathering of the weights from the model into the graph's inputs. Where the graph cannot
        be called directly, every call goes through torch.compile."""
        if shapes in self.graphs:
            graph = self.graphs[shapes]
            return graph(args) if graph else self.step(*args)
        self.compiling = None
        from torch._inductor import config
        with config.patch(freezing=self.freezing):
            logits = self.step(*args)
        self.graphs[shapes] = GraphCall.of(self.compiling, args, logits)
        self.compiling = None  # what it holds of this first call (its cache, its logits) is not kept alive
        return logits


class GraphCall:
    """A compiled step's graph, called with the inputs torch.compile gave it at its first call, the step's own inputs
    (the token, the cache buffers, the column, the padding mask) replaced by this call's. The weights stay those of the
    first call: the decoder is for inference, its model is not trained meanwhile."""

    def __init__(self, graph, inputs, slots):
        self.graph, self.inputs, self.slots = graph, inputs, slots

    @staticmethod
    def own_inputs(args):
        """decode_step's tensors that change from call to call."""
        _, idx, k, v, col, key_valid = args
        return [idx, *k, *v, col] + ([] if key_valid is None else [key_valid])

    @classmethod
    def of(cls, compiling, args, logits):
        """A GraphCall, or None where this graph cannot be called directly: torch.compile compiled nothing this
        time (it reused a graph of its own), or the graph's inputs or output are not the step's as they were traced."""
        if compiling is None:
            return None
        graph, inputs, first = compiling
        where = {id(t): i for i, t in enumerate(inputs)}
        own = cls.own_inputs(args)
        if (not first or first[0][0] is not logits or any(id(t) not in where for t in own)
                or len({id(t) for t in own}) != len(own)):
            return None
        first.clear()
        slots = [where[id(t)] for t in own]
        for i in slots:
            inputs[i] = None  # the first call's cache is not kept alive
        return cls(graph, inputs, slots)

    def __call__(self, args):
        inputs = list(self.inputs)  # a copy: the graph's caller empties the list it is given
        for i, t in zip(self.slots, self.own_inputs(args)):
            inputs[i] = t
        return self.graph(*inputs)[0]
