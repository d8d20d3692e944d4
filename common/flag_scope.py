"""Where each flag applies: for every command, a table of the conditions under which a flag does something. The
commands' checks read it (a flag given where it does not apply is refused in one line naming it and why, before
anything is written) and so does --help (each flag shows where it applies, e.g. `[encoder]`).

A condition is a set of facts about the run that the command knows before it does any work: the model kind
(train.py's --model; for sample.py and visualize.py the checkpoint's), the optimizer, how the run starts
(--init_from), the data it trains on or prepares (its tokenizer, whether --input holds .jsonl or .parquet files, its
split: the same rules for train.py and data/prepare.py), a few flags other flags need (--draft, --html,
--wandb_log), and for bench.py the targets it runs and --quick. A flag applies where every fact of every rule that
names it holds; a fact the command does not know yet is not checked (train.py --init_from=resume learns the model
kind from the checkpoint, and checks again then).

Only explicit flags are checked (typed, or set in --config): a preset's values are not the user's choice, so a
preset may set muon_lr and the user choose --optimizer=adamw. A rule that would break a habit (a config file that
names a wandb project and leaves --wandb_log to the command line) notes the flag instead of refusing it.
"""
import os
import sys
from dataclasses import dataclass

from common.errors import FlagError
from common.flags import set_in

KINDS = ("decoder", "encoder", "cheater", "seq2seq")  # train.py --model; a checkpoint's kind
TEXT = ("decoder", "encoder", "cheater")  # the kinds that read text (seq2seq reads pairs)


@dataclass(frozen=True)
class Rule:
    flags: tuple[str, ...]
    when: dict  # {fact: the values it must have}; every fact must hold
    hint: str = ""  # what to do instead, said after "drop it"
    note: bool = False  # True: an explicit flag where it does not apply is ignored with a one-line note


def rule(flags: str, hint: str = "", note: bool = False, **when) -> Rule:
    return Rule(tuple(flags.split()), when, hint, note)


@dataclass(frozen=True)
class Table:
    everywhere: tuple[str, ...]  # the command's flags that apply wherever it runs
    rules: tuple[Rule, ...]
    set_by: dict  # {flag: the flag that sets it}: accepted when it agrees, refused when it contradicts

    def flags(self) -> set:
        return {*self.everywhere, *(f for r in self.rules for f in r.flags), *self.set_by}


def table(everywhere: str, *rules: Rule, set_by: dict | None = None) -> Table:
    return Table(tuple(everywhere.split()), rules, set_by or {})


# bench.py's targets (--target=all runs each): a run of several targets holds each of them (broken: any one will do)
BENCH_TARGETS = ("ttq", "quality", "throughput", "mfu", "sampling", "llama_cpp", "prepare", "evaluate", "memory")
TIMED_IN_ROUNDS = tuple(t for t in BENCH_TARGETS if t != "prepare")  # data prep times each row once, by processes
QUICK_SETS = ("--quick sets it (tiny sizes, one round, nothing compiled: the same smoke test everywhere); leave out "
              "--quick to choose it")
TO_SEQ2SEQ = "--model=seq2seq trains on --pairs=FILE (.tsv or .jsonl) or --task"
SEQ2SEQ_SAMPLE = "give an encoder-decoder the text to translate as --source"
NOT_SAMPLING = "--attention, --temperatures and an encoder's [MASK] in --start do not sample"
PROBE_TASKS = ("copy", "induction", "recall", "dyck")  # insight/probe_tasks.py's TASKS (common/ cannot import it)
# sample.py's modes: (where a flag applies, what this run does instead, the --help tag)
MODES = {"sample": ("sampling", "samples", "sampling"),
         "translate": ("translating --source", "translates --source", "--source"),
         "masks": ("filling [MASK]s", "fills the prompt's [MASK]s", "[MASK]"),
         "temperatures": ("the --temperatures table", "prints the --temperatures table", "--temperatures"),
         "attention": ("the --attention maps", "draws the --attention maps", "--attention")}

# The data flags (PrepareConfig's, data/config.py) where they apply: the same for train.py and data/prepare.py
DATA_RULES = (
    rule("bpe_vocab_size", "--tokenizer=char and gpt2 have vocabularies of their own", tokenizer=("bpe",)),
    rule("word_cache", "--tokenizer=char looks each character up (no words to cache)", tokenizer=("gpt2", "bpe")),
    rule("text_field", "a text file is read whole (it has no fields)", records=(True,)),
    rule("val_tokens", "--split=works and tail give validation a fixed share of the text", split=("docs",)),
    rule("dataset archive", "--input is read instead of the built-in dataset", data=("dataset",)),
)

TABLES = {
    "train.py": table(
        "out_dir init_from model tokenizer data_root on_bad progress batch_size "
        "gradient_accumulation_steps max_iters eval_interval eval_iters log_interval checkpoint_every_s "
        "learning_rate min_lr warmup_iters lr_decay_iters weight_decay beta1 beta2 grad_clip optimizer on_nonfinite "
        "device dtype compile reuse_freed_memory threads seed sample_tokens wandb_log "
        "vocab_multiple block_size n_layer n_head n_embd dropout bias pos_emb attn_score window qk_norm "
        "mlp_act zero_init attn_impl dropout_impl linear_impl qk_impl config",
        rule("mask_rate mask_span", model=("encoder",)),
        rule("mask_token", "an encoder has its [MASK] id already; --model=seq2seq has no use for one",
             model=("decoder", "cheater")),
        rule("cross_attn", model=("seq2seq",)),
        rule("rope_base", "the other positions have no rotation to set the wavelengths of", pos_emb=("rope",)),
        rule("tie_head", "--model=seq2seq always ties its head to the token embedding", model=TEXT),
        rule("pairs task", "--model=decoder, encoder and cheater train on text (--dataset or --input)",
             model=("seq2seq",)),
        rule("source_field target_field", "a --task has no keys to name", model=("seq2seq",),
             data=("pairs",)),
        rule("source_field target_field", "a .tsv line is source TAB target, with no keys to name",
             pairs_file=("jsonl",)),
        rule("task_min_len task_max_len", "a --pairs file holds its own lengths", model=("seq2seq",),
             data=("task",)),
        rule("input split text_field val_tokens workers word_cache shard_tokens", TO_SEQ2SEQ, model=TEXT),
        rule("dataset archive", TO_SEQ2SEQ, model=TEXT),
        *DATA_RULES,
        rule("total_batch_size", "pairs do not fill block_size tokens a row; set --batch_size and "
             "--gradient_accumulation_steps for --model=seq2seq", model=TEXT),
        rule("fsdp", "train --model=seq2seq with DDP (torchrun without --fsdp)", model=TEXT),
        rule("backend", "a single process joins no group (start it with torchrun to use a backend)",
             torchrun=(True,)),
        rule("log_induction sample_prompt wandb_attention_probe", "an encoder-decoder is scored by exact match and "
             "its sample is a validation source", model=TEXT),
        rule("muon_lr muon_momentum muon_ns_steps", optimizer=("muon",)),
        rule("eval_tasks", "an encoder, a cheater and an encoder-decoder have no next-token probabilities to score "
             "choices with", model=("decoder",)),
        rule("eval_tasks_n", "it caps the items of --eval_tasks", eval_tasks=(True,)),
        rule("overwrite", "--init_from=resume and auto continue the run in out_dir", init_from=("scratch", "hf")),
        rule("preset", "a resumed run keeps its checkpoint's settings and changes those the flags give",
             init_from=("scratch", "auto", "hf")),
        rule("wandb_project wandb_run_name wandb_group wandb_attention_probe", note=True, wandb_log=(True,)),
        set_by={"causal": "model"}),
    "data/prepare.py": table("input split tokenizer data_root workers shard_tokens on_bad progress", *DATA_RULES),
    "sample.py": table(
        "out_dir ckpt device dtype quantize attn_impl qk_impl",
        rule("dropout_impl", trains=(True,)),
        rule("start num_samples top_tokens", SEQ2SEQ_SAMPLE, kind=TEXT),
        rule("attention", "visualize.py --source=TEXT draws an encoder-decoder's cross-attention", kind=TEXT),
        rule("kv_cache", "an encoder's and a cheater's tokens attend to later ones, so there is no cache",
             kind=("decoder", "seq2seq")),
        rule("past_context compile step_loops draft", kind=("decoder",)),
        rule("temperatures", "an encoder predicts masks, so put [MASK] in --start; an encoder-decoder samples a "
             "target with --source and --temperature", kind=("decoder", "cheater")),
        rule("batch", kind=("decoder", "cheater")),
        rule("batch", "speculative decoding draws one sample at a time", draft=(False,)),
        rule("draft_tokens", kind=("decoder",)),
        rule("draft_tokens", draft=(True,)),
        rule("source source_batch", "pass --start=... to sample from it", kind=("seq2seq",)),
        rule("source_batch", "one source is translated alone", source_file=(True,)),
        # what the run does (sample.py's run_mode): only sampling and translating draw tokens
        rule("num_samples past_context compile step_loops draft batch", NOT_SAMPLING, mode=("sample",)),
        rule("pack_weights", "int8 layers are not packed", quantized=(False,)),
        rule("linear_impl", "--quantize=int8 replaces every linear layer (the blocks' and the head) by an int8 one",
             quantized=(False,)),
        rule("step_loops", "it changes the step --compile=true compiles, so add --compile=true to use it",
             cpu_step=(True,)),
        rule("max_new_tokens temperature top_k top_p min_p seed kv_cache", NOT_SAMPLING,
             mode=("sample", "translate")),
        rule("top_tokens", "it sets how many tokens those list", mode=("masks", "temperatures")),
        rule("top_k top_p min_p seed", "an encoder-decoder translates greedily unless --temperature is given",
             temperature=(True,)),
        rule("top_k top_p min_p seed", "a greedy temperature always picks the likeliest token", greedy=(False,))),
    "visualize.py": table(
        "out_dir out html",
        rule("ckpt device", "pass --out, --html or --induction to draw from the checkpoint too", checkpoint=(True,)),
        rule("text induction induction_curve", "a seq2seq checkpoint is drawn as its cross-attention, so give "
             "--source=TEXT (and --target=TEXT to choose the target)", kind=TEXT),
        rule("max_tokens", "--html_max_tokens limits the page; pass --out=FILE.png to draw the grid too", grid=(True,)),
        rule("text", "--induction scores a sequence of its own and --induction_curve the logged run", drawn=(True,)),
        rule("source target", "give the text as --text=TEXT", kind=("seq2seq",)),
        rule("html_max_tokens", "--max_tokens limits the PNG", html=(True,)),
        rule("wandb_log wandb_project", "it logs the --html page", html=(True,)),
        rule("wandb_project", wandb_log=(True,))),
    "evaluate.py": table(
        "tasks text batch_tokens device dtype out init_from attn_impl linear_impl qk_impl",
        rule("dropout_impl", trains=(True,)),
        rule("out_dir ckpt", "--init_from=hf:FOLDER scores that folder's model", model_from=("run",)),
        rule("limit", "it caps the items of --tasks", tasks=(True,)),
        rule("stride", "it moves --text's sliding window", text=(True,))),
    # bench.py: the flags each target reads (the rest read none); --quick sets the sizes, rounds and compiles itself
    "bench.py": table(
        "target quick",
        rule("threads", "data prep runs data/prepare.py's processes, 1 and 2 --workers", target=TIMED_IN_ROUNDS),
        rule("repeats", "data prep times each row once", target=TIMED_IN_ROUNDS),
        rule("against_nanogpt", target=("ttq", "quality", "throughput", "sampling")),
        rule("input", target=("ttq", "quality", "prepare")),
        rule("preset", target=("ttq",)),
        rule("quality_preset", target=("quality",)),
        rule("batch_size steps", target=("throughput", "mfu")),
        rule("compile_step", target=("mfu",)),
        rule("new_tokens compile_sampling", target=("sampling",)),
        rule("new_tokens_llama", target=("llama_cpp",)),
        rule("prepare_sizes", target=("prepare",)),
        rule("eval_items", target=("evaluate",)),
        rule("no_hf", target=("sampling", "evaluate")),
        rule("lengths plot", target=("memory",)),
        rule("repeats batch_size steps new_tokens new_tokens_llama prepare_sizes eval_items compile_sampling "
             "compile_step lengths", QUICK_SETS, quick=(False,))),
    # probe.py: each task's size applies where --tasks runs that task; the run's tasks are a tuple (any one holds)
    "probe.py": table(
        "out tasks pos_embs models eval_batches seed threads wandb_log n_layer n_head n_embd steps batch_size "
        "learning_rate weight_decay mixed",
        *(rule(f"{task}_n", "it sizes that task's sequences", probe_tasks=(task,)) for task in PROBE_TASKS),
        rule("wandb_project", note=True, wandb_log=(True,))),
    # compare.py: --study picks one study, whose own dataclass holds the rest; every flag of a study applies to it but
    # --wandb_project, which names where --wandb_log=true logs
    "compare.py": table("study"),
    "compare.py --study=encoder": table(
        "out n_layer n_head n_embd block_size pos_emb batch_size max_iters learning_rate warmup_iters evals "
        "eval_iters mask_rate mask_span input split data_root archive text_field on_bad seed cloze_positions "
        "cloze_left cloze_right "
        "nll_windows pppl_windows probe prompts gen_tokens temperature top_k wandb_log",
        rule("wandb_project", note=True, wandb_log=(True,))),
    "compare.py --study=positions": table(
        "out scores n_layer n_head n_embd block_size batch_size max_iters learning_rate warmup_iters eval_iters "
        "input split data_root archive text_field on_bad seed eval_windows sample_prompt"),
    "compare.py --study=attention": table(
        "out ckpt_dir ckpt windows query_every probe_task probe_n probe_pos_emb probe_steps probe_sequences seed"),
    "compare.py --study=seq2seq": table(
        "out task min_len max_len eval_max_len n_layer n_head n_embd block_size pos_emb batch_size max_iters "
        "learning_rate warmup_iters eval_iters seed eval_per_length map_len map_pairs wandb_log",
        rule("wandb_project", note=True, wandb_log=(True,))),
}


# How a fact is said: where a flag applies (given the values it needs), and what this run has instead
def _one_of(values) -> str:
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _article(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


DATA = {"dataset": "the built-in dataset", "input": "--input", "pairs": "--pairs", "task": "--task"}
VALUES = {"model": KINDS, "kind": KINDS, "optimizer": ("adamw", "muon"), "data": tuple(DATA),  # each fact's values
          "init_from": ("scratch", "resume", "auto", "hf"), "wandb_log": (False, True), "draft": (False, True),
          "html": (False, True), "tasks": (False, True), "text": (False, True), "model_from": ("run", "hf"),
          "tokenizer": ("char", "gpt2", "bpe"), "records": (False, True), "split": ("works", "tail", "docs"),
          "mode": tuple(MODES), "temperature": (False, True), "grid": (False, True), "drawn": (False, True),
          "checkpoint": (False, True),
          "greedy": (False, True), "trains": (False, True), "target": BENCH_TARGETS, "quick": (False, True),
          "quantized": (False, True), "cpu_step": (False, True), "source_file": (False, True),
          "pairs_file": ("tsv", "jsonl"), "probe_tasks": PROBE_TASKS,
          "torchrun": (False, True), "eval_tasks": (False, True),
          "pos_emb": ("rope", "sinusoidal", "learned", "alibi", "none")}  # model/config.py's POS_EMBS
SAY = {  # fact -> (where(values), this run(value), tag(values))
    "model": (lambda vs: f"to --model={_one_of(vs)}", lambda v: f"this run is --model={v}", "/".join),
    "kind": (lambda vs: f"to {_article(_one_of(vs))} checkpoint", lambda v: f"this is {_article(v)} checkpoint",
             "/".join),
    "optimizer": (lambda vs: f"to --optimizer={_one_of(vs)}", lambda v: f"this run is --optimizer={v}", "/".join),
    "init_from": (lambda vs: f"to --init_from={_one_of(v if v != 'hf' else 'hf:FOLDER' for v in vs)}",
                  lambda v: f"this run is --init_from={v if v != 'hf' else 'hf:FOLDER'}",
                  lambda vs: "--init_from=" + "/".join(v if v != "hf" else "hf:" for v in vs)),
    "data": (lambda vs: "without --input" if vs == ("dataset",) else f"to {_one_of(DATA[v] for v in vs)}",
             lambda v: "--input is given" if v == "input" else f"this run trains on {DATA[v]}",
             lambda vs: "/".join(DATA[v] if v != "dataset" else "no --input" for v in vs)),
    "pos_emb": (lambda vs: f"to --pos_emb={_one_of(vs)}", lambda v: f"this run is --pos_emb={v}",
                lambda vs: "--pos_emb=" + "/".join(vs)),
    "torchrun": (lambda vs: "under torchrun", lambda v: "this run is one process, not started by torchrun",
                 lambda vs: "torchrun"),
    "wandb_log": (lambda vs: "with --wandb_log=true", lambda v: "this run is --wandb_log=false",
                  lambda vs: "--wandb_log=true"),
    "draft": (lambda vs: "with --draft" if vs[0] else "without --draft",
              lambda v: "--draft is given" if v else "no --draft is given",
              lambda vs: "--draft" if vs[0] else "no --draft"),
    "html": (lambda vs: "with --html", lambda v: "no --html is given", lambda vs: "--html"),
    "tasks": (lambda vs: "with --tasks", lambda v: "no --tasks is given", lambda vs: "--tasks"),  # evaluate.py's
    "eval_tasks": (lambda vs: "with --eval_tasks", lambda v: "no --eval_tasks is given",  # train.py's
                   lambda vs: "--eval_tasks"),
    "text": (lambda vs: "with --text", lambda v: "no --text is given", lambda vs: "--text"),
    "model_from": (lambda vs: "to a run's checkpoint", lambda v: "--init_from=hf:FOLDER is given",
                   lambda vs: "a run"),
    "tokenizer": (lambda vs: f"to --tokenizer={_one_of(vs)}", lambda v: f"this run is --tokenizer={v}",
                  lambda vs: "--tokenizer=" + "/".join(vs)),
    "records": (lambda vs: "to .jsonl and .parquet files", lambda v: "this run reads no .jsonl or .parquet file",
                lambda vs: ".jsonl/.parquet"),
    "pairs_file": (lambda vs: f"to a .{_one_of(vs)} --pairs file", lambda v: f"this run's --pairs is a .{v} file",
                   lambda vs: "/".join(f".{v}" for v in vs)),
    "split": (lambda vs: f"to --split={_one_of(vs)}", lambda v: f"this run is --split={v}",
              lambda vs: "--split=" + "/".join(vs)),
    "mode": (lambda vs: f"to {_one_of(MODES[v][0] for v in vs)}", lambda v: f"this run {MODES[v][1]}",
             lambda vs: "/".join(MODES[v][2] for v in vs)),
    # bench.py: the targets of this run (a tuple: several), and --quick
    "target": (lambda vs: f"to --target={_one_of(vs)}",
               lambda v: f"this run is --target={v if isinstance(v, str) else ','.join(v)}", "/".join),
    # probe.py: the tasks this run trains (a tuple: several)
    "probe_tasks": (lambda vs: f"to --tasks with {_one_of(vs)}", lambda v: f"this run is --tasks={','.join(v)}",
                    lambda vs: "--tasks with " + "/".join(vs)),
    "quick": (lambda vs: "without --quick", lambda v: "--quick is given", lambda vs: "no --quick"),
    # sample.py and evaluate.py run the model in eval mode: no dropout to draw
    "trains": (lambda vs: "to training", lambda v: "the model runs here without dropout", lambda vs: "training"),
    # sample.py's drawing modes: a temperature below inference/generate.py's MIN_TEMPERATURE (0 too) is greedy
    "greedy": (lambda vs: "to sampling with --temperature of 1e-05 or more",
               lambda v: "a --temperature below 1e-05 is greedy", lambda vs: "--temperature >= 1e-05"),
    # sample.py: int8 weights (--quantize), and whether a decoding step is compiled for a CPU (--compile=true there)
    "quantized": (lambda vs: "to float weights (no --quantize)", lambda v: "--quantize=int8 is given",
                  lambda vs: "no --quantize"),
    "cpu_step": (lambda vs: "to the compiled step on a CPU", lambda v: "this run compiles no step on a CPU",
                 lambda vs: "--compile on a CPU"),
    # visualize.py: whether it draws the PNG grid, and whether it draws --text at all (the grid or the page)
    "grid": (lambda vs: "to the PNG grid", lambda v: "this run draws no grid: --html and --induction draw it only "
             "with --out", lambda vs: "the PNG grid"),
    "checkpoint": (lambda vs: "to a run that reads a checkpoint", lambda v: "this run draws --induction_curve alone, "
                   "from metrics.jsonl", lambda vs: "not --induction_curve alone"),
    "drawn": (lambda vs: "to the PNG grid and the --html page", lambda v: "this run draws neither",
              lambda vs: "the grid or page"),
    # sample.py's translations only (a fact the other modes leave out): greedy unless --temperature is given
    "temperature": (lambda vs: "to a translation with --temperature", lambda v: "this translation is greedy: no "
                    "--temperature is given", lambda vs: "--temperature with --source"),
    # and whether they are a file's lines, translated in batches (--source=FILE:path), or one --source text
    "source_file": (lambda vs: "to --source=FILE:path (a file's lines, translated in batches)",
                    lambda v: "--source is one text", lambda vs: "--source=FILE:"),
}


def broken(r: Rule, facts: dict) -> str | None:
    """The first fact of r that this run does not meet (facts it does not know are not checked), or None."""
    return next((f for f, values in r.when.items() if f in facts and not holds(facts[f], values)), None)


def holds(value, values) -> bool:
    """Whether a fact's value is one of values; a fact with several values (a tuple: bench.py's targets) holds
    where any of them is."""
    return any(v in values for v in value) if isinstance(value, tuple) else value in values


def refusal(names: list[str], r: Rule, fact: str, facts: dict, given=()) -> str:
    """'--mask_rate applies to --model=encoder only (this run is --model=decoder); drop it', with '(set in
    --config=FILE)' after the flags a config file gave (given: common/flags.py's Named or Given)."""
    where, this, _ = SAY[fact]
    several = len(names) > 1
    flags = " and ".join(f"--{n}" for n in names) + set_in(names, given)
    line = f"{flags} appl{'y' if several else 'ies'} {where(r.when[fact])} only ({this(facts[fact])})"
    if r.note:
        return f"{line}; ignored"
    return f"{line}; drop {'them' if several else 'it'}" + (f": {r.hint}" if r.hint else "")


def check(command: str, given, facts: dict) -> list[str]:
    """Refuses (FlagError, one line) the explicit flags (`given`) of the first rule that this run breaks; returns
    the notes of the flags ignored instead (rules with note=True). `set_by` flags are checked by their command."""
    notes = []
    for r in TABLES[command].rules:
        names = [n for n in r.flags if n in given]
        fact = broken(r, facts) if names else None
        if fact is None:
            continue
        if not r.note:
            raise FlagError(refusal(names, r, fact, facts, given))
        notes.append(f"note: {refusal(names, r, fact, facts, given)}")
    return notes


def applies(command: str, flag: str, facts: dict) -> bool:
    return all(broken(r, facts) is None for r in TABLES[command].rules if flag in r.flags and not r.note)


def tags(command: str) -> dict:
    """{flag: '[encoder]'} for --help: where each flag with a rule applies (a note rule's flag, ignored elsewhere
    rather than refused: '[--wandb_log=true, else ignored]')."""
    t = TABLES[command]
    out = {f: f"[set by --{by}]" for f, by in t.set_by.items()}
    for r in t.rules:
        said = " ".join(SAY[fact][2](values) for fact, values in r.when.items()) + (", else ignored" if r.note else "")
        for f in r.flags:
            out[f] = f"{out[f][:-1]}; {said}]" if f in out else f"[{said}]"
    return out


def train_facts(tc) -> dict:
    """The facts of a train.py run, from its TrainConfig (what its --input holds and its split, which only data/
    can tell, training/config.py's scope_facts adds)."""
    data = ("pairs" if tc.pairs is not None else "task") if tc.model == "seq2seq" else \
        ("input" if tc.input is not None else "dataset")
    return {"model": tc.model, "optimizer": tc.optimizer, "data": data, "wandb_log": tc.wandb_log,
            "init_from": "hf" if tc.init_from.startswith("hf:") else tc.init_from,
            "eval_tasks": tc.eval_tasks is not None, "tokenizer": tc.tokenizer, "torchrun": under_torchrun()}


def under_torchrun() -> bool:
    """Whether torchrun started this process: it sets RANK, as training/distributed.py's init reads it."""
    return "RANK" in os.environ


def prepare_facts(pc) -> dict:
    """The facts of a data/prepare.py run, from its PrepareConfig (what its --input holds and its split, which only
    data/ can tell, data/split.py's input_facts adds)."""
    return {"data": "input" if pc.input is not None else "dataset", "tokenizer": pc.tokenizer}


def evaluate_facts(ec) -> dict:
    """The facts of an evaluate.py run, from its EvaluateConfig."""
    return {"tasks": ec.tasks is not None, "text": ec.text is not None,
            "model_from": "hf" if ec.init_from else "run", "trains": False}


def print_notes(notes: list[str]) -> None:
    """The notes on stderr, once: under torchrun only rank 0 says them (the flags are checked before the process
    group exists, so the rank is torchrun's RANK, as training/distributed.py reads it)."""
    if os.environ.get("RANK", "0") == "0":
        for line in notes:
            print(line, file=sys.stderr)
