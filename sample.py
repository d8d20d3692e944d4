"""Sample from a trained checkpoint, streaming tokens to the terminal as they are generated.

    python sample.py --out_dir=out --start="ROMEO:" --num_samples=3 --max_new_tokens=500 --temperature=0.8

`--quantize=int8` stores the blocks' and the head's weights as int8 for decoding (faster on CPU; its quality cost:
docs/speed.md).
`--dtype=bfloat16` decodes with bf16 weights: half the bytes to read per token. On an x86 CPU the bf16 linear
weights, and the float32 ones except on an Intel CPU, are packed once into oneDNN's layout (speed/packed.py;
`--pack_weights=false` is the off switch).
`--compile=true` runs each new token through one torch.compile'd step with fixed shapes (inference/decode_step.py): the
same text but where compiled rounding breaks a near-tie, faster per token once compiled (the compile itself takes
seconds, once per run); on a CPU its one-row products (float32 ones, but on an Intel CPU those of 2^22 weights or
more; bf16 ones up to 2^20 weights, and a vocabulary's head) and its attention are loops the compiler fuses
(speed/one_token.py; `--step_loops=false` is the off switch).
`--draft=out-small` decodes speculatively (inference/speculative.py): a small checkpoint trained on the same tokens
guesses `--draft_tokens` ahead and the model checks them in one forward; greedy gives the model's own text.
`--batch=true` draws the `--num_samples` samples as one batch and prints each when all are done (the default on a
GPU, where one batch costs about what one sample does); on a GPU `--compile` is on and the weights are bf16 by default.
`--start=FILE:prompt.txt` reads the prompt from a file. The KV cache is on by default; `--kv_cache=false` runs
the uncached reference loop, which gives the same text for the same seed (only slower), unless float rounding
breaks a near-tie between two tokens.

An encoder checkpoint (train.py --model=encoder) fills masks instead, printing the top candidates of each:
    python sample.py --out_dir=out-enc --start="But soft, what [MASK]ight through yonder window"
and, given a prompt without [MASK], generates by appending one [MASK] at a time (no KV cache is possible: slow).

Two ways to look inside instead of sampling:
    python sample.py --start="ROMEO:" --attention=maps.png       # the prompt's attention maps (visualize.py)
    python sample.py --start="ROMEO:" --temperatures=0.5,1,2     # the next-token distribution at each temperature
"""
import functools
import os
import sys
import time
from dataclasses import dataclass

from common import cli  # first: a Ctrl-C while torch imports prints one line (common/cli.py)
import torch

from common import flag_scope
from common.device import autocast, need_dtype, pick_device, pick_dtype
from common.errors import ConfigError, FlagError, UserError, need_seed
from common import flags
from data.mask_token import MASK_TEXT, encode_prompt
import speed
from speed import SpeedConfig
from speed import int8_kernel
from speed.one_token import OneTokenLoops
from speed.packed import pack_weights
from inference.checkpoint import (Checkpoint, import_command, in_folder_or_file, is_hf_folder, load_for_inference,
                                  other_checkpoint, path_in)
from inference.decode_step import StaticDecoder, traceable
from inference.generate import (MIN_TEMPERATURE, NonFiniteLogits, check_past_context, check_sampling,
                                generate_stream, never_writing, next_token_probs)
from inference.masked import fill_masks, generate_by_masks
from inference.quantize import QUANTIZE_CHOICES, quantize
from inference.speculative import most_guesses, same_tokens, speculative_stream
from model.seq2seq import check_length

# what a checkpoint's objective means for its samples (train.py --model=..., training/objectives.py)
NOTES = {"cheater": "[a bidirectional model trained on next tokens (the cheater): it learned to copy, not to predict; "
                    "expect garbage; no KV cache]",
         "encoder": "[encoder: no [MASK] in the prompt, so it generates by appending one [MASK] and predicting it; no "
                    "KV cache is possible (every token attends to later ones), so each token re-runs the whole window]"}

# On a GPU the sampled tokens are read back (a host sync) this many at a time, so the GPU runs ahead of the terminal
READ_EVERY = {"cuda": 8}


@dataclass
class SampleConfig:
    out_dir: str = "out"
    ckpt: str = "best"  # 'best', 'last' or a path to a .pt file
    start: str = "\n"  # the prompt, or FILE:path to read it from a file; <|endoftext|> in it is the gpt2/bpe
    #                     document separator, as samples print it
    num_samples: int = 1
    max_new_tokens: int = 500  # an encoder-decoder writes at most its block_size tokens a target
    temperature: float = 0.8  # 0 = greedy; a translation (--source) is greedy unless --temperature is given
    top_k: int | None = 200
    top_p: float | None = None
    min_p: float | None = None
    seed: int = 1337
    kv_cache: bool = True
    past_context: str = "slide"  # past block_size: 'slide' drops the oldest quarter of the window (the model never
    #                              sees more than it was trained on); 'extend' keeps every token, as llama.cpp does
    #                              (no re-prefill; not for learned positions; inference/generate.py)
    device: str = "auto"
    dtype: str | None = None  # None: float32 on a CPU (the reference), 'auto' on a GPU; 'auto' picks bf16 where it
    #                           is native. A half dtype casts the weights too (decoding reads each once per token)
    quantize: str | None = None  # 'int8': int8 weight-only linear layers for decoding (inference/quantize.py)
    pack_weights: bool = True  # x86: bf16 weights, and float32 except on Intel, in oneDNN's layout (speed/packed.py)
    compile: bool | None = None  # torch.compile the one-token decoding step (inference/decode_step.py); needs
    #                              kv_cache. None: on for a cached decoder on CUDA, off elsewhere
    step_loops: bool = True  # on a CPU the compiled step computes its one-row products and its one-query attention
    #                          as loops of its own, not oneDNN's, MKL's and SDPA's kernels (speed/one_token.py)
    batch: bool | None = None  # draw the num_samples samples as one batch, each printed when all are done (instead
    #                            of one after another, streamed); None: on CUDA
    draft: str | None = None  # a small model's out_dir or .pt: speculative decoding (inference/speculative.py)
    draft_tokens: int = 4  # the draft's guesses per forward of the model
    source: str | None = None  # an encoder-decoder (seq2seq) checkpoint: the text to translate, or FILE:path to
    #                            translate every line of a file (one output line per input line: a target's line
    #                            breaks and backslashes written \n, \r and \\)
    source_batch: int = 64  # sources translated together, right-padded
    attention: str | None = None  # a .png path: draw the prompt's attention maps there instead of sampling
    temperatures: str | None = None  # e.g. "0.5,1,2": print the next-token distribution at each, instead of sampling
    top_tokens: int = 8  # the likeliest tokens listed: each [MASK]'s candidates, the --temperatures table's rows

    def __post_init__(self):
        if self.num_samples < 1 or self.max_new_tokens < 0:
            raise ConfigError(f"num_samples={self.num_samples} must be >= 1 and max_new_tokens="
                             f"{self.max_new_tokens} >= 0")
        check_sampling(self.temperature, self.top_k, self.top_p, self.min_p)
        need_dtype(self.dtype, left_out="float32 on a CPU, auto on a GPU")
        need_seed(self.seed)
        if self.quantize is not None and self.quantize not in QUANTIZE_CHOICES:
            raise ConfigError(f"quantize={self.quantize} is not one of {', '.join(QUANTIZE_CHOICES)} (or leave it "
                              f"out for the float weights)")
        if self.compile and not self.kv_cache:
            raise ConfigError("--compile=true compiles the cached decoding step: it needs --kv_cache=true")
        if self.draft is not None and (self.compile or not self.kv_cache):
            given = "--compile=true" if self.compile else "--kv_cache=false"  # both: refused just above
            raise ConfigError(f"--draft decodes with both models' KV caches and eager forwards: drop {given} or the "
                              f"draft")
        check_past_context(self.past_context)
        if self.past_context == "extend" and self.draft is not None:
            raise ConfigError("--draft slides its window past block_size: drop --past_context=extend or the draft")
        if self.draft_tokens < 1:
            raise ConfigError(f"draft_tokens={self.draft_tokens} must be >= 1 (the draft's guesses per round)")
        if self.source_batch < 1:
            raise ConfigError(f"source_batch={self.source_batch} must be >= 1")
        if self.top_tokens < 1:
            raise ConfigError(f"top_tokens={self.top_tokens} must be >= 1")
        for t in parse_temperatures(self.temperatures):
            try:
                check_sampling(t)
            except ConfigError as e:  # named as typed: --temperature is another flag
                raise ConfigError(f"--temperatures={self.temperatures}: {e}") from None


def parse_temperatures(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        return [flags.float_of(t, f"--temperatures={text}: ") for t in text.split(",")]
    except FlagError:  # a ValueError too: a number past a float's range, as typed
        raise
    except ValueError:
        raise ConfigError(f"--temperatures={text} is not a comma-separated list of numbers (e.g. 0.5,1,2)") from None


@torch.no_grad()
def temperature_table(model, tokenizer, prompt: list[int], temperatures: list[float], top: int) -> str:
    """The next-token distribution after `prompt` at each temperature: softmax(logits / t). Dividing by t keeps
    the tokens' order (so one list of the most likely tokens serves every column) and only changes how sharp
    the distribution is: t -> 0 puts everything on the top token (greedy), t -> inf tends to uniform."""
    device = next(model.parameters()).device
    idx = torch.tensor([prompt[-model.config.block_size:]], device=device)  # (1, T)
    logits, _ = model(idx, last_only=True)
    logits = logits[:, -1].float()  # (1, V)
    if not torch.isfinite(torch.softmax(logits, dim=-1)).all():  # a table of NaN, its entropy max(0, NaN) = 0
        raise NonFiniteLogits()
    probs = [(torch.nn.functional.one_hot(logits.argmax(-1), logits.size(-1)).float() if t == 0
              else next_token_probs(logits, t))[0] for t in temperatures]  # one column each; t=0: greedy
    order = logits[0].argsort(descending=True)[:top].tolist()
    labels = {i: repr(tokenizer.token_text(i)) for i in order}
    width = max(12, *(len(s) for s in labels.values()))
    lines = ["next token".ljust(width) + "".join(f"   T={t:<5g}" for t in temperatures)]
    for i in order:
        lines.append(labels[i].ljust(width) + "".join(f"   {p[i].item():7.4f}" for p in probs))
    lines.append("(the rest)".ljust(width) + "".join(f"   {1 - p[order].sum().item():7.4f}" for p in probs))
    entropy = [max(0.0, -(p * p.clamp_min(1e-30).log2()).sum().item()) for p in probs]
    lines.append("entropy bits".ljust(width) + "".join(f"   {h:7.3f}" for h in entropy))
    return "\n".join(lines)


def read_prompt(start: str, flag: str = "start") -> str:
    if start.startswith("FILE:"):
        path = os.path.expanduser(start[len("FILE:"):])  # as a path flag's: the shell leaves the ~ of FILE:~/p.txt
        try:
            # Without the byte-order mark an editor may put first; newline="": the line ends as stored (\r\n stays
            # \r\n, as prepare keeps it in the training text, and a lone \r ends no --source line)
            with open(path, encoding="utf-8-sig", newline="") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"--{flag}=FILE:{path} cannot be read ({type(e).__name__}); "
                            f"give a UTF-8 text file") from None
    return start


def checked(argv) -> tuple[SampleConfig, SpeedConfig, dict, Checkpoint, str, str | None]:
    """The flags -> (SampleConfig, SpeedConfig, the flags given explicitly, the Checkpoint, the mode, the prompt's
    text: None for an encoder-decoder, which reads --source). The checkpoint says what kind of model it holds, and
    with the flags what the run does (run_mode), so every explicit flag is checked against them
    (common/flag_scope.py) here: before the model is built or anything is printed. --start=FILE: is read once: the
    mode and the prompt come from the same text, also where FILE is a pipe."""
    per_class, explicit = flags.parse_configs(argv, (SampleConfig, SpeedConfig), {})
    sc, speed_config = SampleConfig(**per_class[SampleConfig]), SpeedConfig(**per_class[SpeedConfig])
    if sc.attention:  # a type matplotlib cannot write, or a folder in the way: refused now, not after the model ran
        from insight.attention_figures import need_figure_file

        need_figure_file(sc.attention, "attention")
    ckpt = Checkpoint.load(path_in(sc.out_dir, sc.ckpt))
    text = None if ckpt.objective == "seq2seq" else read_prompt(sc.start)
    mode = run_mode(sc, ckpt.objective, text)
    facts = {"kind": ckpt.objective, "draft": sc.draft is not None, "mode": mode, "trains": False,
             "quantized": sc.quantize is not None,  # int8 layers: nothing left for --pack_weights to pack
             # --step_loops changes only a step compiled for a CPU (speed/one_token.py); the default compiles on CUDA
             "cpu_step": bool(sc.compile) and pick_device(sc.device).type == "cpu"}
    if mode == "translate":  # an encoder-decoder translates greedily unless --temperature is given
        facts["temperature"] = "temperature" in explicit
        if sc.source is not None:  # none: refused when it translates (print_translations)
            facts["source_file"] = sc.source.startswith("FILE:")  # a file's lines are batched; one text goes alone
    if mode in ("sample", "translate") and facts.get("temperature", True):
        facts["greedy"] = sc.temperature < MIN_TEMPERATURE  # as sample_next decides
    notes = flag_scope.check("sample.py", explicit, facts)
    limit = ckpt.model_config.block_size  # an encoder-decoder's decoder has no window to slide past it
    if mode == "translate" and "max_new_tokens" in explicit and sc.max_new_tokens > limit:
        notes.append(f"note: an encoder-decoder writes at most block_size={limit} tokens of a target; "
                     f"--max_new_tokens={sc.max_new_tokens} is cut to {limit}")
    flag_scope.print_notes(notes)
    return sc, speed_config, explicit, ckpt, mode, text


def run_mode(sc: SampleConfig, kind: str, text: str | None) -> str:
    """What main does: 'translate' (an encoder-decoder's --source), 'attention' (draws the prompt's maps), 'masks'
    (an encoder fills the [MASK]s of its prompt), 'temperatures' (the table) or 'sample' (draws num_samples samples).
    Only 'sample' and 'translate' draw tokens: the flags of drawing apply there only."""
    if kind == "seq2seq":
        return "translate"
    if sc.attention:
        return "attention"
    if kind == "encoder" and MASK_TEXT in text:  # the text that encodes to the mask id
        return "masks"
    return "temperatures" if sc.temperatures and kind != "encoder" else "sample"


def main(argv) -> None:
    """Picks the mode: --help, an encoder-decoder's translations, the prompt's attention maps, an encoder's filled
    masks, the next-token table at each temperature, or (the default) num_samples generated samples."""
    if flags.asks_help(argv):
        print(flags.help_text((SampleConfig, SpeedConfig), {}, tags=flag_scope.tags("sample.py")))
        return
    sc, speed_config, explicit, ckpt, mode, text = checked(argv)
    device = pick_device(sc.device)
    dtype = pick_dtype(sc.dtype or ("auto" if device.type == "cuda" else "float32"), device)
    model, tokenizer = ckpt.build_model(device).eval(), ckpt.tokenizer()
    speed_config = speed.for_device(speed_config, explicit, device.type)
    model = for_decoding(model, sc, speed_config, dtype)
    if mode == "translate":
        sampled = "temperature" in explicit and sc.temperature >= MIN_TEMPERATURE  # below it sample_next is greedy
        print_translations(sc, model, tokenizer, ckpt, device, dtype, sampled)
        return
    if mode == "attention":  # works for encoders too: it draws, it does not generate
        draw_attention(model, tokenizer, text, sc.attention, ckpt.objective)
        return
    if sc.past_context == "extend":  # a decoder's (flag_scope refuses it elsewhere)
        check_past_context(sc.past_context, model)
    prompt = encoded_prompt(tokenizer, text, ckpt.objective == "encoder")
    with never_writing(model, ckpt.mask_id):  # [MASK] is no text (a decoder has one only beside an encoder)
        if mode == "masks":
            print_filled(model, tokenizer, prompt, ckpt.mask_id, sc.top_tokens)
        elif mode == "temperatures":
            print(temperature_table(model, tokenizer, prompt, parse_temperatures(sc.temperatures), sc.top_tokens))
        else:
            generate(sc, model, tokenizer, prompt, ckpt, device, dtype, speed_config)


def draw_attention(model, tokenizer, text: str, path: str, objective: str) -> None:
    """--attention=FILE.png: the prompt's attention maps (insight/attention_figures.py), written to path."""
    from insight.attention_figures import attention_figure, save_figure  # here: matplotlib is slow to import

    figure = attention_figure(model, tokenizer, text, flags=("--start", None), objective=objective)  # no --max_tokens
    print(f"wrote {save_figure(figure, path)}")


def encoded_prompt(tokenizer, text: str, encoder: bool) -> list[int]:
    """The prompt's ids (read as data/mask_token.py's encode_prompt says). An empty one is a decoder's start token;
    an encoder has nothing to start from."""
    prompt = encode_prompt(tokenizer, text, encoder)
    if encoder and not prompt:
        raise UserError(f"the prompt is empty; pass --start=\"some text with {MASK_TEXT}\" to fill masks, or a "
                        f"prompt to continue")
    if not prompt:
        if tokenizer.eot_id is None:
            raise UserError("the prompt is empty and this tokenizer has no start token; pass --start=...")
        prompt = [tokenizer.eot_id]
    return prompt


def sampling(sc: SampleConfig) -> dict:
    """The sampling flags, as generate_stream and its kin take them."""
    return dict(temperature=sc.temperature, top_k=sc.top_k, top_p=sc.top_p, min_p=sc.min_p)


@dataclass
class Decoding:
    """What every sampling mode of a decoder or an encoder shares: the model, its device and dtype, where to stop,
    whether the KV cache is used, and the compiled step (--compile: a causal model's cache, so never an encoder's)."""
    sc: SampleConfig
    model: torch.nn.Module
    device: torch.device
    dtype: torch.dtype
    use_cache: bool
    stop: list[int] | None
    compiled: dict  # {"decoder": StaticDecoder} or {}

    @classmethod
    def for_model(cls, sc: SampleConfig, model, tokenizer, device, dtype) -> "Decoding":
        use_cache = sc.kv_cache and model.config.causal
        stop = [tokenizer.eot_id] if tokenizer.eot_id is not None else None
        compiled = {}
        if compiles(sc, device, model) and use_cache:
            compiled["decoder"] = StaticDecoder(model, compile=True, mode=OneTokenLoops if sc.step_loops else None)
        return cls(sc, model, device, dtype, use_cache, stop, compiled)

    def new_tokens(self, idx: torch.Tensor, generator):
        """idx (B, T) -> generate_stream's (B,) device tensors, one per new token."""
        sc = self.sc
        return generate_stream(self.model, idx, sc.max_new_tokens, generator=generator, use_cache=self.use_cache,
                               stop_tokens=self.stop, check_every=READ_EVERY.get(self.device.type, 1), **sampling(sc),
                               past_context=sc.past_context, **self.compiled)


def generate(sc: SampleConfig, model, tokenizer, prompt: list[int], ckpt, device, dtype,
             speed_config: SpeedConfig) -> None:
    """num_samples samples continuing the prompt: drawn as one batch (a GPU's default), or one after another and
    streamed, by the model alone, speculatively with a --draft, or for an encoder by filling appended masks."""
    encoder = ckpt.objective == "encoder"
    if ckpt.objective in NOTES:
        print(NOTES[ckpt.objective], file=sys.stderr)
    decoding = Decoding.for_model(sc, model, tokenizer, device, dtype)
    draft, stats = None, None
    if sc.draft:
        draft, stats = load_draft(sc, tokenizer, device, speed_config, dtype), {}
    header = f" (step {ckpt.step} checkpoint)"
    if (sc.batch if sc.batch is not None else device.type == "cuda") and sc.num_samples > 1 and not (encoder or draft):
        with autocast(device, dtype):
            print_batch(sc, tokenizer, prompt, decoding, header)
        return
    note = ("encoder: a full forward per token, no cache" if encoder
            else f"speculative, up to {most_guesses(model, draft, sc.draft_tokens)} guesses per round"
            if draft is not None
            else f"kv_cache={decoding.use_cache}" + (", compiled step (the first sample includes the compile)"
                                                     if decoding.compiled else ""))
    mask_id = ckpt.mask_id if encoder else None
    stream = functools.partial(sample_stream, decoding, prompt, draft=draft, stats=stats, mask_id=mask_id)
    print_samples(sc, tokenizer, prompt, device, stream, header, note)
    if stats:
        print(f"[draft: {stats['accepted']} of {stats['proposed']} guesses kept "
              f"({stats['accepted'] / max(1, stats['proposed']):.0%}) in the last sample]", file=sys.stderr)


def sample_stream(decoding: Decoding, prompt: list[int], generator, draft=None, stats=None, mask_id=None):
    """One sample's new ids, as they are drawn: speculatively with a draft model, by filling appended masks for an
    encoder (mask_id: its [MASK]), else by the model's own generate_stream, read back READ_EVERY at a time."""
    sc = decoding.sc
    with autocast(decoding.device, decoding.dtype):
        if draft is not None:
            yield from speculative_stream(decoding.model, draft, prompt, sc.max_new_tokens, k=sc.draft_tokens,
                                          generator=generator, stats=stats, stop_tokens=decoding.stop, **sampling(sc))
        elif mask_id is not None:  # it writes by filling masks
            yield from generate_by_masks(decoding.model, prompt, sc.max_new_tokens, mask_id, generator=generator,
                                         stop_tokens=decoding.stop, **sampling(sc))
        else:
            tokens = decoding.new_tokens(torch.tensor([prompt], device=decoding.device), generator)
            yield from until_stop(read_in_chunks(tokens, READ_EVERY.get(decoding.device.type, 1)), decoding.stop)


def print_translations(sc: SampleConfig, model, tokenizer, ckpt, device, dtype, sampled: bool) -> None:
    """An encoder-decoder's targets for --source: one line, or one line per line of --source=FILE:path, in order.
    Greedy unless --temperature is given."""
    if sc.source is None:
        raise UserError("this is an encoder-decoder checkpoint: it writes a target for a source; pass "
                        "--source=\"TEXT\" or --source=FILE:path (one source per line)")
    if sc.source.startswith("FILE:"):  # lines end at \n only: one output line per line an editor shows (an empty
        text = read_prompt(sc.source, "source")  # file has none)
        texts = [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []
    else:
        texts = [sc.source]
    ids = []  # an unknown character, or a source past learned positions, is named with its line
    for n, text in enumerate(texts, 1):
        try:
            ids.append(tokenizer.encode(text))
            check_length(len(ids[-1]), model.source_pos, "source")
        except UserError as e:
            where = f"line {n} of {sc.source[len('FILE:'):]}" if sc.source.startswith("FILE:") else "--source"
            raise UserError(f"{where}: {e}") from None
    chosen = sampling(sc) if sampled else dict(temperature=0.0)
    generator = torch.Generator(device=device).manual_seed(sc.seed)
    from inference.translate import translate_sources

    t0 = time.perf_counter()
    with autocast(device, dtype):
        out = translate_sources(model, tokenizer, ids, sc.max_new_tokens, sc.source_batch, generator,
                                use_cache=sc.kv_cache, **chosen)
    for line in out:  # a file's sources: one line each, as documented, whatever line breaks a target holds
        print(one_line(line) if sc.source.startswith("FILE:") else line)
    print(f"[{len(texts)} source(s) in {time.perf_counter() - t0:.2f} s, "
          f"{'sampled' if sampled else 'greedy (pass --temperature=... to sample)'}, step {ckpt.step} checkpoint]",
          file=sys.stderr)


def one_line(text: str) -> str:
    """text on one line: each backslash doubled, each line feed and carriage return written as the two characters
    \\n and \\r, so the line reads back to the text (a target may hold line breaks: a .jsonl pair's can)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def read_in_chunks(tokens, n: int):
    """(1,) device tensors -> ints, read back n at a time (one sync per chunk)."""
    chunk = []
    for token in tokens:
        chunk.append(token)
        if len(chunk) == n:
            yield from torch.cat(chunk).tolist()
            chunk = []
    if chunk:
        yield from torch.cat(chunk).tolist()


def until_stop(ids, stop: list[int] | None):
    """ids up to and including the first stop token (a stream checked every few tokens runs a little past it)."""
    for i in ids:
        yield i
        if stop and i in stop:
            return


def for_decoding(model, sc: SampleConfig, speed_config: SpeedConfig, dtype):
    """A loaded model with the decoding levers applied: half weights for a half dtype, the speed levers, int8,
    packed weights."""
    if dtype != torch.float32:
        model = half_weights(model, dtype)
    speed.apply(model, speed_config)
    quantize(model, sc.quantize, int8_kernel.for_device(next(model.parameters()).device))
    if sc.pack_weights:
        pack_weights(model)
    return model


def half_weights(model, dtype):
    """The weights in dtype (decoding reads every one of them for every token: half the bytes), a learned position
    table with them (a weight like the others: the token embeddings it is added to are in dtype), but the positions'
    fixed tables, computed once (RoPE's frequencies, ALiBi's slopes: buffers), stay float32, as trained: bf16
    frequencies rotate far positions by visibly wrong angles."""
    model = model.to(dtype)
    for name in ("pos", "source_pos", "target_pos"):  # a GPT's, or an encoder-decoder's two sides
        positions = getattr(model, name, None)
        if positions is not None:
            for key, table in list(positions.named_buffers(recurse=False)):
                setattr(positions, key, table.float())  # the registered buffer replaced, persistence kept
    return model


def compiles(sc: SampleConfig, device, model) -> bool:
    """--compile, or where it is not given: on CUDA, for a model the compiled step supports, without a draft."""
    if sc.compile is not None:
        return sc.compile
    return device.type == "cuda" and sc.kv_cache and sc.draft is None and traceable(model)


def print_batch(sc: SampleConfig, tokenizer, prompt: list[int], decoding: Decoding, header: str) -> None:
    """The num_samples samples drawn as one batch (the prompt in every row), printed when all are done, each cut at
    its end-of-text token; the batch's speed on stderr."""
    generator = torch.Generator(device=decoding.device).manual_seed(sc.seed)
    idx = torch.tensor([prompt] * sc.num_samples, device=decoding.device)  # (B, T)
    t0 = time.perf_counter()
    steps = list(decoding.new_tokens(idx, generator))
    rows = torch.stack(steps, dim=1).tolist() if steps else [[] for _ in range(sc.num_samples)]  # one read
    elapsed = time.perf_counter() - t0
    rows = [list(until_stop(row, decoding.stop)) for row in rows]
    for i, row in enumerate(rows):
        print(f"---------- sample {i + 1}{header} ----------")
        print(tokenizer.decode(prompt + row))
    n = sum(len(row) for row in rows)
    print(f"[{sc.num_samples} samples as one batch: {n} tokens in {elapsed:.2f} s, {n / max(elapsed, 1e-9):,.0f} "
          f"tokens/s, kv_cache={decoding.use_cache}" + (", compiled step" if decoding.compiled else "") + "]",
          file=sys.stderr)


def load_draft(sc: SampleConfig, tokenizer, device, speed_config: SpeedConfig, dtype):
    """The --draft checkpoint (the model's is a decoder's: common/flag_scope.py), checked to speak its tokens."""
    which = sc.ckpt if sc.ckpt in ("last", "best") else "best"  # --ckpt=FILE.pt names the model's file, not the draft's
    path = in_folder_or_file(sc.draft, which)
    if not os.path.exists(path):
        other = other_checkpoint(path) if os.path.isdir(sc.draft) else None
        fix = (f"pass --draft={os.path.join(sc.draft, other)} to use the one there" if other else
               f"it is a Hugging Face model folder: import it first ({import_command(sc.draft)}) and pass --draft=RUN"
               if is_hf_folder(sc.draft) else "give a trained out_dir or a .pt file")
        raise UserError(f"--draft={sc.draft}: no checkpoint at {path}; {fix}")
    draft, draft_tokenizer, draft_ckpt = load_for_inference(path, device)
    if draft_ckpt.objective != "decoder":
        raise UserError(f"--draft={sc.draft} is a --model={draft_ckpt.objective} run: the draft must be a decoder "
                        f"(causal) run; train it with --model=decoder on the same data and --tokenizer")
    if not same_tokens(tokenizer, draft_tokenizer):
        raise UserError(f"--draft={sc.draft} speaks other tokens than this model (another tokenizer or vocabulary); "
                        f"train the draft on the same data and --tokenizer")
    return for_decoding(draft, sc, speed_config, dtype)


def print_filled(model, tokenizer, prompt: list[int], mask_id: int, top: int) -> None:
    """An encoder's answer to a prompt with [MASK]s: the filled text, then each mask's top candidates."""
    filled, candidates = fill_masks(model, prompt, mask_id, top)
    print(tokenizer.decode(filled))
    for n, (pos, cands) in enumerate(candidates, 1):
        shown = ", ".join(f"{tokenizer.token_text(i)!r} {p:.3f}" for i, p in cands)
        print(f"[MASK] {n} (token {pos}): {shown}")


def print_samples(sc: SampleConfig, tokenizer, prompt: list[int], device, stream, header: str, note: str) -> None:
    """sc.num_samples samples, each printed token by token as stream(generator) yields ids, then its speed on
    stderr. One generator seeded by --seed runs through all of them: the samples differ, the run repeats."""
    generator = torch.Generator(device=device).manual_seed(sc.seed)
    for i in range(sc.num_samples):
        print(f"---------- sample {i + 1}{header} ----------")
        decode = tokenizer.stream_decoder()
        print(decode(prompt), end="", flush=True)
        t0, n = time.perf_counter(), 0
        for token in stream(generator):
            print(decode([token]), end="", flush=True)
            n += 1
        elapsed = time.perf_counter() - t0
        print(decode([], final=True))  # a sample that ends inside a character: its bytes, as the batch prints them
        print(f"[{n} tokens in {elapsed:.2f} s, {n / max(elapsed, 1e-9):,.0f} tokens/s, {note}]", file=sys.stderr)


def entry() -> int:
    """The `small-gpt-sample` console command."""
    code = cli.run(main, sys.argv[1:])
    cli.exit_process(code)  # without the interpreter's teardown (common/cli.py)
    return code  # not reached


if __name__ == "__main__":
    sys.exit(entry())
