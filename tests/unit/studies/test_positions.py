"""The positional study's pieces (studies/positions.py); the study end to end: tests/e2e/test_studies.py."""
from conftest import tiny_model
from data.tokenizer import CharTokenizer
from studies.positions import cached_sample


def test_the_sample_prompt_drops_the_characters_the_corpus_lacks():
    """The default prompt 'ROMEO:' on a corpus without ':' samples from 'ROMEO', as if given that prompt: the study
    must not stop after its first run for a prompt."""
    tokenizer = CharTokenizer("ROMEabc \n")
    model = tiny_model(seed=3, vocab_size=tokenizer.vocab_size, pos_emb="rope")
    sample = cached_sample(model, tokenizer, "ROMEO:", 20, seed=7)
    assert sample == cached_sample(model, tokenizer, "ROMEO", 20, seed=7)
    assert sample.startswith("ROMEO") and len(sample) == len("ROMEO") + 20
