"""The fixed-shape decode step (inference/decode_step.py): eager and compiled, it gives the eager loop's tokens."""
import pytest
import torch

from common.errors import ConfigError
from conftest import POS_EMBS, tiny_model
from inference.decode_step import GraphCall, StaticDecoder
from inference.quantize import quantize
from inference.generate import generate
import speed
from speed import SpeedConfig, int8_kernel
from speed.one_token import OneTokenLoops

STATIC_POS_EMBS = [p for p in POS_EMBS if p != "alibi"]
# at init a tied head makes greedy decoding repeat the prompt's last token whatever the cache holds: tests that compare
# greedy tokens only untie it
UNTIED = dict(tie_head=False)


def generate_both(model, prompt, n, decoder, **kw):
    """(the default cached loop's output, the decoder's), each from a generator seeded alike."""
    out = []
    for d in (None, decoder):
        out.append(generate(model, prompt, n, decoder=d, generator=torch.Generator().manual_seed(7), **kw))
    return out


@pytest.mark.parametrize("pos_emb", STATIC_POS_EMBS)
@pytest.mark.parametrize("overrides", [{}, {"window": 5}, {"qk_norm": True}])
def test_static_steps_give_the_cached_loops_tokens(pos_emb, overrides):
    model = tiny_model(pos_emb=pos_emb, **overrides)
    prompt = torch.randint(0, 37, (2, 5), generator=torch.Generator().manual_seed(0))
    decoder = StaticDecoder(model, compile=False)
    # 30 new tokens with block_size 16: the window slides and the cache is re-prefilled twice
    for kw in (dict(temperature=0.0), dict(temperature=1.0, top_k=10)):
        want, got = generate_both(model, prompt, 30, decoder, **kw)
        assert torch.equal(got, want), kw


@pytest.mark.parametrize("pos_emb", STATIC_POS_EMBS)
@pytest.mark.parametrize("window", [None, 3])
def test_static_steps_handle_left_padded_prompts(pos_emb, window):
    model = tiny_model(pos_emb=pos_emb, window=window, **UNTIED)
    prompts = [[1, 2, 3, 4, 5, 6], [7], [8, 9, 10]]
    want, got = generate_both(model, prompts, 20, StaticDecoder(model, compile=False), temperature=0.0)
    assert got == want


@pytest.mark.parametrize("pos_emb", STATIC_POS_EMBS)
@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("padded", [False, True])
def test_step_logits_match_an_uncached_forward(pos_emb, window, padded):
    """Each step's logits against the whole sequence run again without a cache. A window narrower than the real
    tokens (3) with left-padded rows is the case where the keys a token attends to and its position part ways."""
    model = tiny_model(pos_emb=pos_emb, window=window)
    idx = torch.randint(0, 37, (3, 12), generator=torch.Generator().manual_seed(2))
    pad = torch.ones(3, 12, dtype=torch.bool)  # (B, T) True at real tokens
    if padded:
        pad[1, :5] = False  # ragged prompts: row 1 has 1 real token of 6, row 2 has 3
        pad[2, :3] = False
    decoder = StaticDecoder(model, compile=False)
    with torch.no_grad():
        cache = model.new_cache(3)
        model(idx[:, :6], cache=cache, pad_mask=pad[:, :6] if padded else None)  # prefill, then one step per token
        for t in range(6, 12):
            got = decoder(idx[:, t:t + 1], cache)  # (B, V)
            want, _ = model(idx[:, :t + 1], pad_mask=pad[:, :t + 1] if padded else None, last_only=True)  # (B, 1, V)
            assert torch.allclose(got, want[:, -1], atol=1e-5), t


def test_alibi_and_training_mode_are_refused():
    with pytest.raises(ValueError, match="alibi"):
        StaticDecoder(tiny_model(pos_emb="alibi"), compile=False)
    with pytest.raises(ValueError, match="eval"):
        StaticDecoder(tiny_model().train(), compile=False)


def test_the_tiled_attention_is_refused_when_compiled_only():
    model = tiny_model(attn_impl="tiled", **UNTIED)
    with pytest.raises(ConfigError, match="attn_impl=tiled"):
        StaticDecoder(model, compile=True)
    prompt = torch.randint(0, 37, (2, 5), generator=torch.Generator().manual_seed(0))
    want, got = generate_both(model, prompt, 20, StaticDecoder(model, compile=False), temperature=0.0)
    assert torch.equal(got, want)


def test_decoder_needs_the_cache():
    model = tiny_model()
    with pytest.raises(ValueError, match="use_cache=True"):
        generate(model, torch.tensor([[1]]), 3, use_cache=False, decoder=StaticDecoder(model, compile=False))


@pytest.mark.slow  # ~10-20 s each on 2 cores: inductor writes and builds C++ (run with -m slow)
@pytest.mark.parametrize("weights", ["float32", "int8", "bfloat16"])
@pytest.mark.parametrize("loops", [False, True])
def test_compiled_step_gives_the_same_tokens_and_compiles_once(weights, loops):
    """torch.compile (inductor, C++ on CPU) of the step: same greedy tokens, close logits, and one graph for every
    position and every slide of the window (a recompile per token would be slower than no compile at all). bf16
    weights are frozen into the compiled code (packed for oneDNN on a CPU). loops: traced in speed/one_token.py's
    OneTokenLoops, as sample.py compiles it on a CPU."""
    torch._dynamo.reset()
    model = tiny_model(pos_emb="rope")
    if weights == "int8":
        quantize(model, "int8", int8_kernel.for_device("cpu"))
    if weights == "bfloat16":
        model = model.to(torch.bfloat16)
        model.pos.float()
    prompt = torch.randint(0, 37, (1, 3), generator=torch.Generator().manual_seed(0))
    decoder = StaticDecoder(model, compile=True, mode=OneTokenLoops if loops else None)
    with torch._dynamo.config.patch(recompile_limit=1):  # with fullgraph=True a second graph is an error
        want, got = generate_both(model, prompt, 30, decoder, temperature=0.0)
    assert torch.equal(got, want)
    idx = want[:, :10]
    with torch.no_grad():
        cache = model.new_cache(1)
        model(idx[:, :-1], cache=cache)
        logits = decoder(idx[:, -1:], cache)  # (1, V)
        ref, _ = model(idx, last_only=True)
    assert torch.allclose(logits.float(), ref[:, -1].float(), atol={"float32": 1e-4, "int8": 2e-2}.get(weights, 5e-2))


@pytest.mark.slow
@pytest.mark.parametrize("window", [None, 3])
def test_compiled_loops_handle_left_padded_prompts(window):
    """The loops' attention takes the step's per-row mask (left padding, and a window narrower than the prompt): a
    batch of prompts of different lengths gets the eager cached loop's greedy tokens."""
    torch._dynamo.reset()
    model = tiny_model(pos_emb="rope", window=window, **UNTIED)
    prompts = [[1, 2, 3, 4, 5, 6], [7], [8, 9, 10]]
    want, got = generate_both(model, prompts, 20, StaticDecoder(model, compile=True, mode=OneTokenLoops),
                              temperature=0.0)
    assert got == want


@pytest.mark.slow
def test_the_compiled_step_traces_again_for_other_shapes():
    """After its first call the decoder skips torch.compile's guards for shapes it has traced: a batch of another
    size must still be traced (with the guards) rather than run through the first graph."""
    torch._dynamo.reset()
    model = tiny_model(pos_emb="rope", **UNTIED)
    decoder = StaticDecoder(model, compile=True)
    for prompt in (torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[7, 8, 9]])):
        want, got = generate_both(model, prompt, 12, decoder, temperature=0.0)
        assert torch.equal(got, want)
    assert len(decoder.graphs) == 2
    torch._dynamo.reset()  # every graph gone: the decoder traces again rather than fail
    want, got = generate_both(model, torch.tensor([[7, 8, 9]]), 12, decoder, temperature=0.0)
    assert torch.equal(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("loops", [False, True])
def test_after_its_first_call_the_compiled_graph_runs_without_torch_compile(loops):
    """Once traced, each step calls inductor's graph directly (GraphCall), with this call's token, cache buffers and
    column: torch.compile itself is never called again, through the new caches of the window's slides and through
    left padding, and the tokens stay the eager loop's."""
    torch._dynamo.reset()
    model = tiny_model(pos_emb="rope", block_size=16, **UNTIED)
    decoder = StaticDecoder(model, compile=True, mode=OneTokenLoops if loops else None)
    prompts = [[1, 2, 3, 4, 5, 6], [7], [8, 9, 10]]
    for prompt in (torch.tensor([[1, 2, 3]]), prompts):
        generate(model, prompt, 2, decoder=decoder, temperature=0.0)  # traces this shape
    assert len(decoder.graphs) == 2 and all(isinstance(g, GraphCall) for g in decoder.graphs.values())

    def refused(*args):
        raise AssertionError("torch.compile was called after the trace")
    decoder.step = refused
    for prompt in (torch.tensor([[1, 2, 3]]), prompts):
        want, got = generate_both(model, prompt, 40, decoder, temperature=0.0)  # 40 tokens: several slides
        assert got == want if isinstance(got, list) else torch.equal(got, want)


@pytest.mark.slow
def test_one_process_compiles_the_steps_of_twelve_models(monkeypatch):
    """torch.compile keeps at most recompile_limit (8) graphs per code object: with one step shared by every decoder,
    the ninth model of another shape in a process was refused (a notebook, an evaluation of several checkpoints,
    bench.py). Twelve decoders of twelve widths each compile their own step, call it directly (GraphCall) and give
    the eager loop's tokens. The limit is dynamo's, so the first eleven graphs run as dynamo traced them
    (torch._inductor.compile stood in for: seconds per graph saved); the last is inductor's, as sample.py's."""
    import torch._inductor

    torch._dynamo.reset()
    inductor = torch._inductor.compile
    monkeypatch.setattr(torch._inductor, "compile", lambda gm, example_inputs, options=None: gm)
    prompt = torch.tensor([[1, 2, 3]])
    for i in range(12):
        if i == 11:
            monkeypatch.setattr(torch._inductor, "compile", inductor)
        model = tiny_model(seed=i, n_layer=1, n_embd=8 * (i + 2), pos_emb=STATIC_POS_EMBS[i % len(STATIC_POS_EMBS)])
        decoder = StaticDecoder(model, compile=True, mode=OneTokenLoops)
        want, got = generate_both(model, prompt, 6, decoder, temperature=0.0)
        assert torch.equal(got, want), i
        assert [type(g) for g in decoder.graphs.values()] == [GraphCall], i


def test_a_graph_is_not_called_directly_unless_its_inputs_and_output_are_the_steps():
    """GraphCall.of falls back to torch.compile (None) where the compiled graph's inputs lack the step's own tensors,
    or its first output is not the step's logits, or nothing was compiled."""
    idx, k, v, col, logits = torch.zeros(1, 1), [torch.zeros(1)], [torch.zeros(1)], torch.zeros(1), torch.zeros(1, 5)
    args = (None, idx, k, v, col, None)
    weight = torch.ones(3)

    def graph(*inputs):
        return (logits,)
    call = GraphCall.of((graph, [weight, idx, k[0], v[0], col], [(logits,)]), args, logits)
    assert isinstance(call, GraphCall)
    assert call.inputs == [weight, None, None, None, None]  # the first call's cache is not kept
    assert GraphCall.of(None, args, logits) is None
    assert GraphCall.of((graph, [weight, idx, k[0], col], [(logits,)]), args, logits) is None  # v is not an input
    assert GraphCall.of((graph, [weight, idx, k[0], v[0], col], [(logits.clone(),)]), args, logits) is None


def test_a_graph_call_drops_the_first_output_and_refuses_a_graph_run_never_or_with_shared_inputs():
    """GraphCall.of lets go of the first call's output, and gives None where the graph never ran (no first output) or
    where two of the step's own tensors are one (a graph traced with them shared could not be given two)."""
    idx, k, v, col, logits = torch.zeros(1, 1), [torch.zeros(1)], [torch.zeros(1)], torch.zeros(1), torch.zeros(1, 5)
    weight = torch.ones(3)

    def graph(*inputs):
        return (logits,)
    first = [(logits,)]
    assert isinstance(GraphCall.of((graph, [weight, idx, k[0], v[0], col], first), (None, idx, k, v, col, None),
                                   logits), GraphCall)
    assert first == []  # the first call's logits are not kept alive
    assert GraphCall.of((graph, [weight, idx, k[0], v[0], col], []), (None, idx, k, v, col, None), logits) is None
    shared = (None, idx, k, k, col, None)  # v is k
    assert GraphCall.of((graph, [weight, idx, k[0], col], [(logits,)]), shared, logits) is None


def test_a_step_copies_nothing_from_the_host(monkeypatch):
    """The step's column lives on the device and counts up there: one tensor made from a host number per cache (the
    prefill, and each slide of the window), not one per token."""
    model = tiny_model(block_size=16, **UNTIED)
    made, tensor = [], torch.tensor

    def counted(*args, **kwargs):
        made.append(args)
        return tensor(*args, **kwargs)
    want = generate(model, torch.tensor([[1, 2, 3]]), 40, temperature=0.0)  # 40 tokens: several slides
    decoder = StaticDecoder(model, compile=False)
    monkeypatch.setattr(torch, "tensor", counted)
    got = generate(model, tensor([[1, 2, 3]]), 40, temperature=0.0, decoder=decoder)
    monkeypatch.undo()
    assert torch.equal(got, want)
    columns = [a for a in made if a and isinstance(a[0], list) and len(a[0]) == 1]  # torch.tensor([cache.pos])
    assert 1 <= len(columns) <= 40 // 4  # a prefill, then one per slide (a quarter of the window each)


@pytest.mark.parametrize("pos_emb", ["rope", "none"])
@pytest.mark.parametrize("window", [None, 5])
def test_static_steps_extend_past_the_block_like_the_cached_loop(pos_emb, window):
    model = tiny_model(pos_emb=pos_emb, window=window, **UNTIED)
    prompts = [[1, 2, 3, 4, 5, 6], [7], [8, 9, 10]]
    want, got = generate_both(model, prompts, 30, StaticDecoder(model, compile=False), temperature=0.0,
                              past_context="extend")
    assert got == want
    assert len(got[1]) == 31  # 30 new tokens after a 1-token prompt: twice the block, no slide


@pytest.mark.slow
def test_compiled_step_of_a_model_with_the_cpu_levers_applied():
    """sample.py applies speed/'s levers before it compiles the step: QK-norm and RoPE's fused function and ReLU^2's
    (fast-cpu's and quality-cpu's model) must trace too, and give the eager loop's greedy tokens."""
    torch._dynamo.reset()
    model = speed.apply(tiny_model(pos_emb="rope", qk_norm=True, mlp_act="relu2", **UNTIED), SpeedConfig())
    prompt = torch.randint(0, 37, (1, 3), generator=torch.Generator().manual_seed(0))
    want, got = generate_both(model, prompt, 30, StaticDecoder(model, compile=True, mode=OneTokenLoops),
                              temperature=0.0)
    assert torch.equal(got, want)


@pytest.mark.parametrize("outside", [1, 3])  # columns the decoder did not write
def test_a_step_after_the_cache_advanced_without_the_decoder_writes_the_caches_column(outside):
    """The decoder counts its column up on the device; a cache that moved on meanwhile (tokens run through the
    model's own forward) must be read at its own position, not at one past the decoder's last step."""
    model = tiny_model()
    idx = torch.randint(0, 37, (2, 10), generator=torch.Generator().manual_seed(3))
    decoder = StaticDecoder(model, compile=False)
    with torch.no_grad():
        cache = model.new_cache(2)
        model(idx[:, :4], cache=cache)
        decoder(idx[:, 4:5], cache)
        model(idx[:, 5:5 + outside], cache=cache)
        got = decoder(idx[:, 5 + outside:6 + outside], cache)  # (B, V)
        want, _ = model(idx[:, :6 + outside], last_only=True)  # (B, 1, V)
    assert cache.pos == 6 + outside
    assert torch.allclose(got, want[:, -1], atol=1e-5)
