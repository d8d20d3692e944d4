"""sample.py's choices on a GPU: the compiled step by default where it can run, token reads a chunk at a time,
and the text cut at the first stop token."""
import torch

from conftest import tiny_model
from sample import SampleConfig, compiles, read_in_chunks, until_stop


def test_the_compiled_step_is_the_default_on_cuda_where_it_can_run():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    model = tiny_model()
    assert compiles(SampleConfig(), cuda, model) and not compiles(SampleConfig(), cpu, model)
    assert not compiles(SampleConfig(compile=False), cuda, model)
    assert compiles(SampleConfig(compile=True), cpu, model)
    assert not compiles(SampleConfig(), cuda, tiny_model(pos_emb="alibi"))  # the step cannot build ALiBi's bias
    assert not compiles(SampleConfig(), cuda, tiny_model(attn_impl="tiled"))  # nor walk the tiled attention's tiles
    assert not compiles(SampleConfig(kv_cache=False), cuda, model)
    assert not compiles(SampleConfig(draft="out-small"), cuda, model)


def test_tokens_read_in_chunks_are_the_tokens_in_order():
    tokens = [torch.tensor([i]) for i in range(10)]
    for n in (1, 3, 8, 20):
        assert list(read_in_chunks(iter(tokens), n)) == list(range(10))


def test_the_text_ends_at_the_first_stop_token():
    assert list(until_stop([5, 6, 0, 0, 0], [0])) == [5, 6, 0]
    assert list(until_stop([5, 6], [0])) == [5, 6]
    assert list(until_stop([5, 0, 6], None)) == [5, 0, 6]


def test_half_weights_keep_the_positions_tables_in_float32():
    from sample import half_weights

    for pos_emb in ("rope", "alibi"):
        model = half_weights(tiny_model(pos_emb=pos_emb), torch.bfloat16)
        assert model.wte.weight.dtype == torch.bfloat16 and model.blocks[0].attn.qkv.weight.dtype == torch.bfloat16
        assert all(b.dtype == torch.float32 for b in model.pos.buffers())
