"""Attention maps and the temperature table from a checkpoint train.py wrote (a tiny decoder, and its weights as an
encoder), through sample.py and visualize.py."""
import pytest
import torch

from conftest import is_png, run_script, tiny_args


@pytest.fixture(scope="module")
def checkpoints(corpus, tmp_path_factory):
    """A tiny decoder trained by train.py, and the same weights as a bidirectional encoder (same shapes)."""
    root = tmp_path_factory.mktemp("vis")
    r = run_script("train.py", tiny_args(corpus, root / "dec", "--max_iters=4", "--eval_interval=4"))
    assert r.returncode == 0, r.stderr[-2000:]
    ckpt = torch.load(root / "dec" / "ckpt_best.pt", weights_only=True)
    ckpt["model_config"]["causal"] = False
    (root / "enc").mkdir()
    torch.save(ckpt, root / "enc" / "ckpt_best.pt")
    return root / "dec", root / "enc"


def load(out_dir):
    from inference.checkpoint import load_for_inference, path_in as find_checkpoint

    return load_for_inference(find_checkpoint(str(out_dir), "best"), torch.device("cpu"))[:2]


def test_heatmap_data_decoder_lower_triangular_encoder_full(checkpoints):
    from insight.attention_figures import attention_data, encode_probe

    for out_dir, causal in zip(checkpoints, (True, False)):
        model, tokenizer = load(out_dir)
        idx = encode_probe(model, tokenizer, "ROMEO:\nLove night", cut=True)  # 17 tokens: the last 16 kept
        data = attention_data(model, idx)  # (n_layer, H + 1, T, T), the last 'head' is the mean
        assert data.shape == (2, 3, 16, 16)
        torch.testing.assert_close(data.sum(-1), torch.ones(2, 3, 16))
        above = data[..., torch.ones(16, 16, dtype=torch.bool).triu(diagonal=1)]  # entries above the diagonal
        assert (above == 0).all() if causal else (above > 0).all()  # exactly zero, or a sees-the-future encoder
        torch.testing.assert_close(data[:, -1], data[:, :-1].mean(1))


def test_sample_py_writes_attention_png(checkpoints, tmp_path):
    out = tmp_path / "maps.png"
    r = run_script("sample.py", [f"--out_dir={checkpoints[0]}", "--start=ROMEO:", f"--attention={out}"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert is_png(out)


def test_visualize_py_draws_an_encoder(checkpoints, tmp_path):
    import visualize

    out = tmp_path / "enc.png"
    visualize.main([f"--out_dir={checkpoints[1]}", "--text=Sweet moon", f"--out={out}"])
    assert is_png(out)


def test_temperature_table(checkpoints, capsys):
    import sample

    sample.main([f"--out_dir={checkpoints[0]}", "--start=ROMEO:", "--temperatures=0,0.5,1,2", "--top_tokens=3"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[-4:] == ["T=0", "T=0.5", "T=1", "T=2"]
    top = [float(x) for x in lines[1].split()[-4:]]  # the most likely token at each temperature
    assert top[0] == 1.0 and top[1] > top[2] > top[3] > 0  # greedy, then flatter as the temperature rises
    entropy = [float(x) for x in lines[-1].split()[-4:]]
    assert entropy[0] == 0.0 and entropy[1] < entropy[2] < entropy[3]
    with pytest.raises(ValueError, match="temperatures=hot"):
        sample.main([f"--out_dir={checkpoints[0]}", "--temperatures=hot"])


def test_a_repeated_temperature_gets_a_column_of_its_own(checkpoints, capsys):
    import sample

    sample.main([f"--out_dir={checkpoints[0]}", "--start=ROMEO:", "--temperatures=1,1,0.5", "--top_tokens=3"])
    lines = capsys.readouterr().out.strip().splitlines()
    for row in (lines[1], lines[-1]):  # the most likely token's probability, and the entropy
        first, again, half = (float(x) for x in row.split()[-3:])
        assert first == again != half


def test_figures_go_into_new_folders_and_unwritable_file_types_are_refused_first(checkpoints, tmp_path):
    import sample
    import visualize
    from common.errors import ConfigError

    out = tmp_path / "new" / "folder" / "maps.png"
    sample.main([f"--out_dir={checkpoints[0]}", "--start=ROMEO:", f"--attention={out}"])
    assert is_png(out)
    with pytest.raises(ConfigError, match="attention=.*no .txt files"):
        sample.main([f"--out_dir={checkpoints[0]}", "--start=ROMEO:", f"--attention={tmp_path / 'maps.txt'}"])
    page = tmp_path / "page.html"  # written first, were the induction figure's type not checked before it
    with pytest.raises(ConfigError, match="induction=.*no .doc files"):
        visualize.main([f"--out_dir={checkpoints[0]}", f"--html={page}", f"--induction={tmp_path / 'i.doc'}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]


@pytest.mark.parametrize("flag", ["--out", "--html", "--induction", "--induction_curve"])
def test_visualize_refuses_a_folder_for_a_file_before_drawing(checkpoints, tmp_path, flag):
    """The drawing was done and its rename onto the folder failed: an IsADirectoryError traceback."""
    import visualize
    from common.errors import FlagError

    folder = tmp_path / "maps"
    folder.mkdir()
    kind = "HTML page" if flag == "--html" else "image file"
    with pytest.raises(FlagError, match=rf"^{flag}={folder} is a folder; give the path of the {kind} to write$"):
        visualize.main([f"--out_dir={checkpoints[0]}", "--text=ROMEO", f"{flag}={folder}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maps"] and not list(folder.iterdir())


def test_visualize_checks_the_default_out_only_where_it_draws_the_grid(checkpoints, tmp_path, monkeypatch):
    """--html, --induction or --induction_curve alone draw no grid: a working folder where attention.png cannot be
    written (read-only, or a folder of that name) refused them as --out=attention.png, a file they never write."""
    import visualize

    monkeypatch.chdir(tmp_path)
    (tmp_path / "attention.png").mkdir()
    visualize.main([f"--out_dir={checkpoints[0]}", "--text=ROMEO", "--html=page.html",
                    f"--induction={tmp_path / 'heads.png'}"])
    assert (tmp_path / "page.html").is_file() and is_png(tmp_path / "heads.png")
    assert not list((tmp_path / "attention.png").iterdir())


@pytest.mark.parametrize("beside", ["--html", "--induction"])
def test_visualize_checks_an_out_given_with_the_page_or_the_induction_figure(checkpoints, tmp_path, beside):
    """--out given beside --html or --induction draws the grid too: a folder there is refused before anything is
    written, as --out alone is, not after the other file was written."""
    import visualize
    from common.errors import FlagError

    folder, other = tmp_path / "maps", tmp_path / ("page.html" if beside == "--html" else "heads.png")
    folder.mkdir()
    with pytest.raises(FlagError, match=rf"^--out={folder} is a folder; give the path of the image file to write$"):
        visualize.main([f"--out_dir={checkpoints[0]}", "--text=ROMEO", f"{beside}={other}", f"--out={folder}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maps"] and not list(folder.iterdir())


@pytest.mark.parametrize("where, said", [("maps", "is a folder; give the path of the image file to write"),
                                         ("notes.txt/maps.png", "is a file, not a folder")])
def test_sample_refuses_an_attention_path_it_cannot_write_before_the_model_runs(checkpoints, tmp_path, where, said,
                                                                                 monkeypatch):
    """A folder at --attention: IsADirectoryError when the drawn figure was renamed onto it; a file in the way of its
    folder: FileExistsError from making the folder. Both after the model had run."""
    import sample
    from common.errors import FlagError

    (tmp_path / "maps").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.setattr(sample, "draw_attention", lambda *a: pytest.fail("the model ran before the refusal"))
    with pytest.raises(FlagError, match=f"^--attention={tmp_path / where}.*{said}"):
        sample.main([f"--out_dir={checkpoints[0]}", "--start=ROMEO:", f"--attention={tmp_path / where}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maps", "notes.txt"]
    assert not list((tmp_path / "maps").iterdir())


@pytest.mark.parametrize("device, said", [("x", "is not a torch device"), ("", "is not a torch device"),
                                          ("cuda:7", "CUDA is not available here")])
def test_visualize_refuses_a_device_it_cannot_use_in_one_line(checkpoints, tmp_path, device, said, monkeypatch):
    """torch.device(--device) raised a RuntimeError traceback ('Invalid device string') for any typo."""
    import visualize
    from common.errors import SetupError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "maps.png"
    with pytest.raises(SetupError, match=f"^--device={device}.*{said}"):
        visualize.main([f"--out_dir={checkpoints[0]}", "--text=ROMEO", f"--out={out}", f"--device={device}"])
    assert not out.exists()
    visualize.main([f"--out_dir={checkpoints[0]}", "--text=ROMEO", f"--out={out}", "--device=auto"])
    assert is_png(out)  # auto: the CPU here, as in every other command


def test_sample_attention_refusals_name_sample_py_flags(tmp_path):
    """sample.py --attention's prompt is --start, and it has no --max_tokens: its refusals named visualize.py's flags
    (an empty prompt: '--text=... or --start=...'; a long one: 'raise --max_tokens', an unknown flag there)."""
    import sample
    from common.errors import UserError
    from conftest import tiny_model
    from data.tokenizer import CharTokenizer

    model, tokenizer = tiny_model(block_size=128), CharTokenizer("abc")
    with pytest.raises(UserError, match=r"^the text to visualise is empty; pass some text with --start=\.\.\.$"):
        sample.draw_attention(model, tokenizer, "", str(tmp_path / "a.png"), "decoder")
    with pytest.raises(UserError, match=r"^the text is 70 tokens and a figure shows at most 64; shorten the text$"):
        sample.draw_attention(model, tokenizer, "a" * 70, str(tmp_path / "a.png"), "decoder")
    assert not list(tmp_path.iterdir())


def test_a_cheaters_pictures_read_mask_as_its_prompt_does(tmp_path):
    """A cheater trained with --mask_token=true: visualize.py's page and figure and sample.py --attention read
    `[MASK]` in the text as characters, as its prompt is read (its data never held the id), and name it a cheater."""
    import sample
    import visualize
    from conftest import tiny_model
    from inference.checkpoint import Checkpoint
    from pages import page_parts

    chars = "[MASK] ab"
    model = tiny_model(vocab_size=len(chars) + 1, causal=False)
    meta = {"tokenizer": "char", "vocab_size": len(chars), "eot_id": None, "chars": chars}
    Checkpoint(weights=model.state_dict(), model_config=model.config, step=1, data_meta=meta, objective="cheater",
               mask_id=len(chars)).save(str(tmp_path / "ckpt_best.pt"))
    text = "a [MASK]"
    visualize.main([f"--out_dir={tmp_path}", f"--text={text}", f"--html={tmp_path / 'p.html'}"])
    meta, _ = page_parts((tmp_path / "p.html").read_text())
    assert meta["tokens"] == list(text) and meta["title"].startswith("cheater")
    sample.main([f"--out_dir={tmp_path}", f"--start={text}", f"--attention={tmp_path / 'a.png'}"])
    assert is_png(tmp_path / "a.png")
