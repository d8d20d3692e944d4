"""What the interop tests share (tests/unit/interop/, tests/e2e/test_gguf_in_llama_cpp.py): models with weights that
hide no swapped tensor, checkpoints made from them, a small trained BPE, and the round trip through a Hugging Face
class."""
import torch

from inference.generate import generate
from data.tokenizer import GPT2_PATTERN, bpe_tokenizer
from inference.checkpoint import Checkpoint
from interop.export import export

ATOL = 1e-4  # float32, logits of size ~1-10 through two blocks: differences come from summation order only
CHARS = "".join(chr(c) for c in range(ord("!"), ord("!") + 37))  # a 37-character vocabulary, tiny_model's size


def perturb(model, scale=0.1, seed=1):
    """Random weights everywhere, LayerNorm and biases included: ones and zeros would hide a swapped tensor."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


def as_checkpoint(model, meta=None, data_dir=None) -> Checkpoint:
    meta = meta or {"tokenizer": "char", "vocab_size": len(CHARS), "eot_id": None, "chars": CHARS}
    return Checkpoint(weights=model.state_dict(), model_config=model.config, step=7, data_meta=meta, data_dir=data_dir)


def small_bpe():
    from data.bpe import train_bpe

    return bpe_tokenizer(train_bpe(["the night the light, ça va? thy love " * 30], 300, GPT2_PATTERN))


def assert_round_trip(hf, ours, folder, hf_class, config_keys):
    """ours, loaded from hf (61 tokens, context 16), gives hf's logits; exported to folder and read back by
    hf_class, it is hf again: every weight bit for bit, and each of config_keys. Returns the model read back."""
    idx = torch.randint(0, 61, (2, 16))
    with torch.no_grad():
        assert (hf(idx).logits - ours(idx)[0]).abs().max().item() < ATOL

    chars = "".join(chr(c) for c in range(ord("!"), ord("!") + 61))
    export(as_checkpoint(ours, {"tokenizer": "char", "vocab_size": 61, "eot_id": None, "chars": chars}), folder)
    back = hf_class.from_pretrained(folder)
    a, b = hf.state_dict(), back.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # bit for bit
    for key in config_keys:
        assert getattr(back.config, key) == getattr(hf.config, key), key
    return back


def greedy_both(ours, hf, prompt, n):
    want = generate(ours, prompt, n, temperature=0)
    # an explicit attention mask: otherwise transformers takes every token equal to pad_token_id for padding
    got = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, do_sample=False,
                      pad_token_id=0)
    return want, got


def read_gguf(path):
    """A GGUF file through the gguf package's own reader: ({field: value}, {tensor name: array})."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(path))
    fields = {name: f.contents() for name, f in reader.fields.items()}
    tensors = {t.name: np.array(t.data).reshape(tuple(reversed(t.shape.tolist()))) for t in reader.tensors}
    return fields, tensors
