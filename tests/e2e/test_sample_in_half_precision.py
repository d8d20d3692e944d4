"""sample.py with --dtype=bfloat16 and float16 (a GPU's default is bf16): every way it samples, for every positional
option, on tiny checkpoints of each objective made here (random weights: what is checked is that each mode runs in
half precision and prints what it should, and that the half weights give the float32 model's logits to rounding)."""
from dataclasses import replace

import pytest
import torch

import sample
from common import cli
from conftest import POS_EMBS, tiny_config
from inference.checkpoint import Checkpoint
from model import GPT, Seq2Seq

CHARS = "abcdefghijklmnopqrstuvwxyz .,:;!?ABCD"  # 37 characters; the model has one id more (a [MASK] or a STOP)
HALF = ["bfloat16", "float16"]


def save(folder, model, objective, mask_id=None):
    meta = {"tokenizer": "char", "vocab_size": len(CHARS), "eot_id": None, "chars": CHARS}
    folder.mkdir()
    Checkpoint(weights=model.state_dict(), model_config=model.config, step=1, data_meta=meta, objective=objective,
               mask_id=mask_id).save(str(folder / "ckpt_best.pt"))
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{(objective, pos_emb): out_dir} for the decoder, the cheater, the encoder and the encoder-decoder."""
    root, out = tmp_path_factory.mktemp("half"), {}
    for pos_emb in POS_EMBS:
        config = tiny_config(vocab_size=len(CHARS) + 1, pos_emb=pos_emb)
        torch.manual_seed(0)
        for objective, model in [("decoder", GPT(config)), ("cheater", GPT(replace(config, causal=False))),
                                 ("encoder", GPT(replace(config, causal=False))), ("seq2seq", Seq2Seq(config))]:
            mask_id = len(CHARS) if objective == "encoder" else None
            out[objective, pos_emb] = save(root / f"{objective}-{pos_emb}", model, objective, mask_id)
    return out


def modes(runs, pos_emb):
    """(name, argv, what stdout or stderr must hold) for each way sample.py samples."""
    decoder = f"--out_dir={runs['decoder', pos_emb]}"
    common = ["--max_new_tokens=5", "--start=ab"]
    seq2seq = [f"--out_dir={runs['seq2seq', pos_emb]}", "--source=abc", "--max_new_tokens=5"]
    return [("cached", [decoder, *common], "sample 1"),
            ("uncached", [decoder, *common, "--kv_cache=false"], "sample 1"),
            ("batch", [decoder, *common, "--num_samples=2", "--batch=true"], "sample 2"),
            ("draft", [decoder, *common, "--temperature=0", f"--draft={runs['decoder', pos_emb]}"], "sample 1"),
            ("temperatures", [decoder, "--start=ab", "--temperatures=0.5,1"], "T=0.5"),
            ("cheater", [f"--out_dir={runs['cheater', pos_emb]}", *common], "sample 1"),
            ("fill masks", [f"--out_dir={runs['encoder', pos_emb]}", "--start=ab[MASK]c"], "[MASK] 1"),
            ("append masks", [f"--out_dir={runs['encoder', pos_emb]}", *common], "sample 1"),
            ("translate", seq2seq, "1 source(s)"),
            ("translate uncached", [*seq2seq, "--kv_cache=false"], "1 source(s)"),
            ("int8", [decoder, *common, "--quantize=int8"], "sample 1"),
            ("int8 translate", [*seq2seq, "--quantize=int8"], "1 source(s)")]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_every_mode_samples_in_half_precision(runs, pos_emb, dtype, capsys):
    """A learned position table was put back to float32 beside half weights: every learned-position model (GPT-2's
    imports, encoders, encoder-decoders) stopped at its first forward with 'mixed dtype'."""
    torch.set_num_threads(1)  # models this small are faster on one thread (restored by conftest's fixture)
    for name, argv, shown in modes(runs, pos_emb):
        capsys.readouterr()
        assert cli.run(sample.main, [*argv, "--device=cpu", f"--dtype={dtype}"]) == 0, (name, capsys.readouterr().err)
        out = capsys.readouterr()
        assert shown in out.out + out.err, (name, out)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("pos_emb", POS_EMBS)
@pytest.mark.parametrize("cls", [GPT, Seq2Seq])
def test_half_weights_give_the_float_models_logits_to_rounding(cls, pos_emb, dtype):
    """Every parameter in dtype (a learned position table too), RoPE's frequencies and ALiBi's slopes still float32;
    the logits those weights give are the float32 model's, to the rounding of dtype."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = cls(tiny_config(pos_emb=pos_emb)).eval()
    idx = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(idx, idx)[0] if cls is Seq2Seq else model(idx)[0]  # (B, T, V)
        half = sample.half_weights(model, dtype)
        assert all(p.dtype == dtype for p in half.parameters())
        assert all(b.dtype == torch.float32 for b in half.buffers())
        got = half(idx, idx)[0] if cls is Seq2Seq else half(idx)[0]
    assert got.dtype == dtype
    assert (got.float() - want).abs().max() < 0.02 * want.abs().max(), (got.float() - want).abs().max()
