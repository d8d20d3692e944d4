"""Training settings: one dataclass that checks itself, the presets (configs/NAME.toml), and `configure`, which
turns train.py's flags into the configs.

Model fields (n_layer, pos_emb, ...) live in model/config.py's GPTConfig; train.py accepts both as flags.
"""
import os
from dataclasses import asdict, dataclass, fields

import configs
from common.device import need_dtype
from common.errors import CheckpointError, ConfigError, FlagError, SetupError, need, need_seed, need_threads
from common import flags
from common import flag_scope
from common.flags import parse_configs
from data.config import PrepareConfig
from data.pair_batches import TASKS
from data.pairs import pairs_facts
from data.split import input_facts
from model import GPTConfig
from inference.checkpoint import LAST, Checkpoint, read_train_config
from speed import SpeedConfig
from training.objectives import OBJECTIVES, objective_class
from training.optim import OPTIMIZERS


@dataclass
class TrainConfig(PrepareConfig):
    """The training settings; the data settings (dataset, input, split, tokenizer, ...) are PrepareConfig's, the
    fields it inherits: declared once, the same flags for train.py and data/prepare.py."""
    # I/O
    out_dir: str = "out"
    init_from: str = "scratch"  # 'scratch', 'resume' (continue out_dir/ckpt_last.pt), 'auto' (resume when out_dir
    #                             has a checkpoint, else start: the one command line for every restart of an
    #                             elastic job) or 'hf:FOLDER' (a Hugging Face GPT-2's or GPT-NeoX's weights)
    overwrite: bool = False  # allow a scratch run to replace the run already in out_dir
    # what is trained (training/objectives.py, compare.py)
    model: str = "decoder"  # 'decoder' = causal attention, next-token objective; 'encoder' = bidirectional
    #                         attention, masked-LM objective (BERT); 'cheater' = bidirectional attention with the
    #                         next-token objective (each position sees its own target: what the causal mask
    #                         prevents); 'seq2seq' = the encoder-decoder, trained on --pairs or --task
    mask_rate: float = 0.15  # encoder: share of positions selected for the loss (80% [MASK], 10% random, 10% kept)
    mask_span: int = 1  # encoder: selected runs of 1..mask_span positions (span masking; 1 = single positions)
    mask_token: bool = False  # give a decoder the [MASK] id too (unused), so its parameters equal the encoder's
    # seq2seq: the encoder-decoder trains on pairs (data/pairs.py): a file, or a built-in task
    pairs: str | None = None  # a .tsv (source TAB target) or .jsonl file of pairs, tokenized by --tokenizer
    source_field: str = "source"  # .jsonl pairs: the key of the source text
    target_field: str = "target"  # .jsonl pairs: the key of the target text
    task: str | None = None  # 'reverse' or 'sort': random letter strings and their answer; None without --pairs:
    #                          reverse
    task_min_len: int = 4  # the task's sources have task_min_len..task_max_len letters
    task_max_len: int = 16
    # batches and schedule
    batch_size: int = 32  # sequences per micro-step (per process)
    gradient_accumulation_steps: int = 1  # micro-steps per optimizer step (per process)
    total_batch_size: int | None = None  # tokens per optimizer step over all processes; sets the accumulation
    max_iters: int = 2000
    eval_interval: int = 250
    eval_iters: int = 20  # validation batches per evaluation (a fixed, evenly spaced subset)
    log_interval: int = 10
    checkpoint_every_s: float = 0.0  # also write ckpt_last.pt when this many seconds passed since the last one
    #                                  (long runs: a crash or a preemption loses at most this much); 0 = off
    # AdamW and the learning-rate schedule (linear warmup, cosine decay to min_lr)
    learning_rate: float = 2e-3
    min_lr: float = 2e-4
    warmup_iters: int = 100
    lr_decay_iters: int | None = None  # None: max_iters
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # 0 disables clipping
    optimizer: str = "adamw"  # 'adamw' (everything), or 'muon': Muon (training/muon.py, orthogonalised momentum)
    #                           on the blocks' Linear weights at muon_lr, AdamW at learning_rate on embeddings, head
    #                           and gains; both follow the schedule. A Muon step costs more on a CPU and saves steps
    muon_lr: float = 0.02  # Muon's peak learning rate (Keller Jordan's default)
    muon_momentum: float = 0.95  # Muon's (Nesterov) momentum
    muon_ns_steps: int = 5  # Newton-Schulz iterations per update: fewer are cheaper and orthogonalise less
    on_nonfinite: str = "stop"  # a NaN/inf loss or gradient: 'stop' the run, or 'skip' that step's update (a
    #                             validation loss that is not finite: stop, or say it and go on, never the best;
    #                             weights not finite at a checkpoint: stop, or say it and save none)
    # system
    device: str = "auto"  # 'auto' (cuda > mps > cpu), or any torch device string
    dtype: str = "auto"  # 'auto', 'float32', 'bfloat16' or 'float16' (autocast dtype of matmuls)
    compile: bool | None = None  # torch.compile the model: the first step compiles for a minute, then steps are
    #                              faster. None: on for CUDA, off elsewhere (on a CPU the compile outlasts short runs)
    reuse_freed_memory: bool = True  # CPU runs: glibc's malloc keeps freed memory for the next step's tensors
    #                                  instead of mapping fresh pages every step (common/malloc.py)
    threads: int | None = None  # CPU threads for torch (None: torch's choice, OMP_NUM_THREADS); on a busy machine
    #                             fewer threads than cores can be much faster
    backend: str = "auto"  # torch.distributed backend under torchrun: 'auto' (nccl on GPUs, gloo on CPUs)
    fsdp: bool = False  # under torchrun: shard weights, gradients and optimizer state instead of replicating (DDP)
    seed: int = 1337
    # samples shown at each evaluation and at the end
    sample_prompt: str = "\n"  # as sample.py's --start: <|endoftext|> in it is the gpt2/bpe document separator
    sample_tokens: int = 200
    # what attention learns
    log_induction: bool = True  # at each evaluation, the best head's induction (prefix-matching) score and which
    #                             head (metrics.jsonl induction_score, induction_head; insight/induction.py): one
    #                             forward of 64 tokens
    # benchmarks scored at each evaluation (inference/tasks.py, docs/evaluation.md)
    eval_tasks: str | None = None  # multiple-choice .jsonl files, comma-separated: each one's acc, acc_norm and
    #                                acc_token into metrics.jsonl and wandb (tasks/NAME/acc_norm, ...)
    eval_tasks_n: int | None = 200  # the first N items of each task file at each evaluation (None: all of them)
    # wandb (offline unless WANDB_MODE=online; `wandb sync out/wandb/...` uploads later)
    wandb_log: bool = False
    wandb_project: str = "small-gpt"
    wandb_run_name: str | None = None  # None: decoder-rope-4x4x128-ctx128-char (from the config)
    wandb_attention_probe: str = "ROMEO:\nBut soft, what light through yonder window breaks?"  # '' = no maps
    wandb_group: str | None = None  # None: the data and model size, so a study of one option shares a group

    def __post_init__(self):
        super().__post_init__()  # the data settings
        need(self.init_from in ("scratch", "resume", "auto") or self.init_from.startswith("hf:"),
             f"init_from={self.init_from!r} must be 'scratch', 'resume', 'auto' or 'hf:FOLDER' (a local Hugging Face "
             f"GPT-2 or GPT-NeoX)")
        need(self.model in OBJECTIVES, f"model={self.model!r} is not one of {', '.join(OBJECTIVES)}")
        need(0.0 < self.mask_rate < 1.0, f"mask_rate={self.mask_rate} must be in (0, 1); BERT's is 0.15")
        need(self.mask_span >= 1, f"mask_span={self.mask_span} must be >= 1 (1 = single positions)")
        need(self.model == "decoder" or not self.init_from.startswith("hf:"),
             f"init_from={self.init_from} loads a Hugging Face GPT-2 or GPT-NeoX, a decoder; it cannot start "
             f"--model={self.model}: train that one with --init_from=scratch")
        self.check_training_data()
        for name in ("batch_size", "gradient_accumulation_steps", "max_iters", "eval_interval", "eval_iters",
                     "log_interval"):
            need(getattr(self, name) > 0, f"{name}={getattr(self, name)} must be a positive integer")
        need(self.total_batch_size is None or self.total_batch_size > 0,
             f"total_batch_size={self.total_batch_size} must be a positive number of tokens or None")
        need(self.warmup_iters >= 0, f"warmup_iters={self.warmup_iters} must be >= 0")
        need(self.lr_decay_iters is None or self.lr_decay_iters > 0,
             f"lr_decay_iters={self.lr_decay_iters} must be a positive integer or None")
        need(self.learning_rate > 0, f"learning_rate={self.learning_rate} must be > 0")
        need(0 <= self.min_lr <= self.learning_rate, f"min_lr={self.min_lr} must be in [0, learning_rate="
             f"{self.learning_rate}] (the rate decays from learning_rate to min_lr); pass a --min_lr in that range, "
             f"e.g. --min_lr={self.learning_rate / 10:g} (a tenth)")
        need(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, f"beta1={self.beta1}, beta2={self.beta2} must be in [0, 1)")
        for name in ("weight_decay", "grad_clip"):
            need(getattr(self, name) >= 0, f"{name}={getattr(self, name)} must be >= 0")
        need(self.optimizer in OPTIMIZERS, f"optimizer={self.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        need(self.muon_lr > 0 and 0 <= self.muon_momentum < 1,
             f"muon_lr={self.muon_lr} must be > 0 and muon_momentum={self.muon_momentum} in [0, 1)")
        self.check_weight_decay()
        need(1 <= self.muon_ns_steps <= 20, f"muon_ns_steps={self.muon_ns_steps} must be in 1..20 (5 is usual)")
        need(not (self.fsdp and self.optimizer == "muon"),
             "optimizer='muon' is not supported with --fsdp=true (it orthogonalises whole matrices, FSDP shards "
             "them); use --optimizer=adamw")
        need(self.on_nonfinite in ("stop", "skip"), f"on_nonfinite={self.on_nonfinite!r} must be 'stop' or 'skip'")
        need_dtype(self.dtype)
        need_seed(self.seed)
        need(self.checkpoint_every_s >= 0, f"checkpoint_every_s={self.checkpoint_every_s} must be >= 0 (0 = off)")
        need(self.sample_tokens >= 0, f"sample_tokens={self.sample_tokens} must be >= 0")
        need_threads(self.threads)
        need(self.eval_tasks_n is None or self.eval_tasks_n > 0, f"eval_tasks_n={self.eval_tasks_n} must be a "
             f"positive number of items or None (all)")
        need(self.eval_tasks is None or self.model == "decoder", f"--eval_tasks scores next-token probabilities; "
             f"--model={self.model} has none to score with: drop the flag")

    def check_weight_decay(self):
        """Decoupled decay scales the decayed weights by 1 - lr x weight_decay a step (Muon's at muon_lr): at the
        peak rate that must stay above 0."""
        rates = ("learning_rate", "muon_lr") if self.optimizer == "muon" else ("learning_rate",)
        rate = max(rates, key=lambda name: getattr(self, name))
        lr, decay = getattr(self, rate), self.weight_decay
        if lr * decay >= 1:  # (the message divides by both)
            over = " and ".join(f"--{name}" for name in rates if getattr(self, name) * decay >= 1)  # each to lower
            raise ConfigError(f"weight_decay={decay:g} with {rate}={lr:g} multiplies the decayed weights by 1 - "
                              f"{lr:g} x {decay:g} = {1 - lr * decay:g} at the peak rate: each step would zero them "
                              f"or flip their sign; lower --weight_decay below {1 / lr:g} (0.1 is usual) or {over} "
                              f"below {1 / decay:g}")

    def check_training_data(self):
        """seq2seq trains on pairs (--pairs or a --task), with the settings that suit them; the other models on
        text."""
        if self.model == "seq2seq":
            need(self.pairs is None or self.task is None, "--pairs and --task both name the pairs to train on; give "
                 "one of them")
            need(self.task is None or self.task in TASKS, f"task={self.task!r} is not one of {', '.join(TASKS)}")
            need(self.pairs is not None or 0 < self.task_min_len <= self.task_max_len, f"task_min_len="
                 f"{self.task_min_len} and task_max_len={self.task_max_len} must be positive with task_min_len <= "
                 f"task_max_len")  # (with --pairs they apply to nothing: flag_scope refuses them, saying so)
            need(not self.fsdp, "--fsdp=true shards a GPT's blocks; train --model=seq2seq with DDP (torchrun without "
                 "--fsdp)")
            need(self.total_batch_size is None, "--total_batch_size counts block_size tokens a row, which pairs do "
                 "not fill; set --batch_size and --gradient_accumulation_steps for --model=seq2seq")
            need(self.input is None, f"--input={self.input} is text for the other models; --model=seq2seq trains on "
                 f"--pairs=FILE (.tsv or .jsonl) or --task")
            need(self.pairs is not None or self.tokenizer == "char", f"--tokenizer={self.tokenizer} tokenizes a "
                 f"--pairs file; a --task's letters are their own char vocabulary: drop the flag")
            need(not self.mask_token, "--mask_token=true gives a decoder the encoder's [MASK] id; --model=seq2seq has "
                 "no use for it: drop the flag")
        elif self.init_from not in ("resume", "auto"):  # a resumed run's model is its checkpoint's: flag_scope
            #                                              checks --pairs and --task against it once it is read
            need(self.pairs is None and self.task is None, f"--pairs and --task are data for --model=seq2seq; "
                 f"--model={self.model} trains on text (--dataset or --input)")

    def to_dict(self) -> dict:
        return asdict(self)

    def accumulation(self, block_size: int, world_size: int) -> int:
        """Micro-steps per optimizer step. With total_batch_size the global batch stays the same at any world
        size: 1 process accumulates what N processes compute side by side."""
        if self.total_batch_size is None:
            return self.gradient_accumulation_steps
        per_micro = self.batch_size * block_size * world_size  # tokens of one micro-step over all processes
        if self.total_batch_size % per_micro:
            rows, uneven = divmod(self.total_batch_size, block_size * world_size)  # a step's rows per process
            batch = max(b for b in range(1, self.batch_size) if rows % b == 0) if rows and not uneven else None
            raise ConfigError(f"total_batch_size={self.total_batch_size} is not a multiple of batch_size x block_size "
                              f"x processes = {self.batch_size} x {block_size} x {world_size} = {per_micro}; pass "
                              + (f"a --batch_size that divides {rows} (e.g. --batch_size={batch}) or " if batch else "")
                              + f"a --total_batch_size that is a multiple of {per_micro}")
        return self.total_batch_size // per_micro


# Presets: files of overrides (configs/NAME.toml), applied before --config and flags
PRESETS = {name: flags.load_toml(str(configs.path(name))) for name in configs.names()}


CLASSES = (TrainConfig, GPTConfig, SpeedConfig)  # train.py's flags: what to train, the model, how it is computed


def configure(argv) -> tuple[TrainConfig, dict, SpeedConfig, dict] | None:
    """Flags -> (TrainConfig, GPTConfig overrides, SpeedConfig, the values the flags and config file set explicitly);
    with --help (or -h), every flag is printed (help_text) and None returned.
    Model fields are checked here too, with a placeholder vocabulary, so a bad --n_head fails before any data is
    prepared. The attention direction follows the objective (--model); a --causal that contradicts it is refused.
    A fresh run's flags are checked against where they apply (common/flag_scope.py) here; a resumed one's once
    its checkpoint is read (resumed_config), since the checkpoint says what is trained. The notes the checks make
    are kept in explicit.notes, said by training/loop.py's announce once every check of the run has passed."""
    args, wants_help = flags.without_help(argv), flags.asks_help(argv)
    per_class, explicit = parse_configs(args, CLASSES, PRESETS, default_preset=configs.DEFAULT)
    given_here = flags.split_argv(args)
    preset = given_here.get("preset")  # given by the user: a resumed run has no use for it
    notes = over_the_preset(per_class[TrainConfig], explicit)
    if wants_help:
        print_help(per_class, explicit, preset, given_here.get("config"))
        return None
    tc = flags.built(TrainConfig, per_class[TrainConfig], explicit)
    given = flags.Named({*explicit, *(["preset"] if preset else [])}, explicit.files, explicit.preset,
                        explicit.preset_name)
    if tc.init_from in ("resume", "auto"):
        # the facts known before the checkpoint is read; --backend's before the checkpoint's moves the run
        notes += flag_scope.check("train.py", given, {"init_from": tc.init_from,
                                                      "torchrun": flag_scope.under_torchrun()})
        if preset and tc.init_from == "auto" and os.path.isfile(os.path.join(tc.out_dir, LAST)):
            notes.append(f"note: --init_from=auto resumes {os.path.join(tc.out_dir, LAST)}, which keeps its own "
                         f"settings: --preset={preset} applies to a fresh start only")
    model_overrides = per_class[GPTConfig]
    model_overrides["causal"] = objective_class(tc.model).causal
    flags.built(GPTConfig, model_overrides, explicit)
    sc = flags.built(SpeedConfig, per_class[SpeedConfig], explicit)
    if tc.init_from not in ("resume", "auto"):  # auto: once the run knows it starts fresh (training/out_dir.py)
        notes += fresh_checks(tc, explicit, model_overrides)
    need_torchrun(tc)
    explicit.notes += notes
    return tc, model_overrides, sc, explicit


def need_torchrun(tc: TrainConfig) -> None:
    """--fsdp=true outside torchrun is refused (torchrun's one process is allowed: FSDP over a group of one holds
    everything and trains as without it)."""
    if tc.fsdp and not flag_scope.under_torchrun():
        raise SetupError("--fsdp=true shards the model over torchrun's processes: start it with torchrun "
                         "(torchrun --standalone --nproc_per_node=2 train.py ...)")


def over_the_preset(train_values: dict, explicit: dict) -> list[str]:
    """The preset's values the explicit flags replace beyond their own (train_values changed in place): under --fsdp
    its Muon, and an explicit accumulation its total_batch_size. Returns the notes that say so."""
    notes = []
    if train_values.get("fsdp") and train_values.get("optimizer") == "muon" and "optimizer" not in explicit:
        # the preset's Muon orthogonalises whole matrices, which FSDP shards: AdamW at its own default rates
        defaults = {f: TrainConfig.__dataclass_fields__[f].default for f in ("optimizer", "learning_rate", "min_lr")}
        train_values.update({f: v for f, v in defaults.items() if f not in explicit})
        notes.append("note: --fsdp=true shards the matrices the preset's Muon orthogonalises whole; using "
                     "--optimizer=adamw (set --optimizer to choose)")
    return notes + explicit_accumulation(train_values, explicit, flags.whose("total_batch_size", explicit))


def print_help(per_class: dict, explicit: dict, preset: str | None, config: str | None) -> None:
    """Every flag with the value this run would use (a fresh run's: over_the_preset's, and a preset's warmup
    shortened as fresh_checks shortens it), and where it applies."""
    values = {f.name: f.default for cls in CLASSES for f in fields(cls)}
    values.update({k: v for cls in CLASSES for k, v in per_class[cls].items()})
    values["warmup_iters"] = fresh_warmup(values["warmup_iters"], values["max_iters"], explicit)
    if values["init_from"] in ("resume", "auto"):  # the checkpoint is not read for --help
        print(f"--init_from={values['init_from']}: the values below are a fresh run's; a resumed run continues with "
              f"its checkpoint's settings (out_dir/{LAST}), and only the flags given change them")
    print(flags.help_text(CLASSES, PRESETS, values, preset or configs.DEFAULT, flag_scope.tags("train.py"),
                          {name: configs.note(name) for name in PRESETS}, config))


def fresh_warmup(warmup: int, max_iters: int, explicit: dict) -> int:
    """The warmup a fresh run takes: one no flag gave (the preset's 50 in a 100-step run) longer than a quarter of
    max_iters is cut to a tenth of it."""
    if warmup > max_iters // 4 and "warmup_iters" not in explicit:
        return max(1, max_iters // 10)
    return warmup


def fresh_checks(tc: TrainConfig, explicit: dict, model_overrides: dict) -> list[str]:
    """A run that starts (not a resumed one): its flags against where they apply, a preset's warmup shortened for
    a short run, the schedule checked, a --task's longest target against block_size. Returns the notes to print."""
    check_causal(tc, explicit)
    model = None if tc.init_from.startswith("hf:") else GPTConfig(**model_overrides)  # an import's: its folder's
    if tc.model == "seq2seq" and tc.pairs is None and tc.task_max_len + 1 > model.block_size:
        raise ConfigError(f"--task_max_len={tc.task_max_len} needs --block_size of at least {tc.task_max_len + 1} (a "
                          f"target holds its letters and STOP); block_size is {model.block_size}")
    notes, origins = [], {k: flags.whose(k, explicit) for k in ("warmup_iters", "lr_decay_iters", "max_iters")}
    short = fresh_warmup(tc.warmup_iters, tc.max_iters, explicit)
    if short != tc.warmup_iters:
        notes.append(f"note: warmup_iters={tc.warmup_iters} ({origins['warmup_iters']}) would be more than a quarter "
                     f"of max_iters={tc.max_iters}; using warmup_iters={short} (a tenth; set --warmup_iters to "
                     f"choose)")
        origins["warmup_iters"] = (f"a tenth of max_iters, shortened from {origins['warmup_iters']} "
                                   f"{tc.warmup_iters}")
        tc.warmup_iters = short
    check_schedule(tc, explicit, "the preset's", origins)
    facts = scope_facts(tc, model)
    return notes + flag_scope.check("train.py", explicit, facts)


def check_causal(tc: TrainConfig, explicit: dict) -> None:
    """The attention direction follows the objective: a --causal that contradicts --model is refused. A fresh run's
    only: a resumed one's model is its checkpoint's, and resumed_config compares --causal with that."""
    causal = objective_class(tc.model).causal
    if "causal" in explicit and explicit["causal"] != causal:
        raise SetupError(f"--causal={flags.typed(explicit['causal'])} contradicts --model={tc.model} (which sets "
                         f"causal={flags.typed(causal)}); drop --causal and choose --model={', '.join(OBJECTIVES)}")


def scope_facts(tc: TrainConfig, model: GPTConfig | None = None) -> dict:
    """The facts where train.py's flags apply (common/flag_scope.py): the TrainConfig's, for a text model what
    data/prepare.py will find in the text (data/split.py's input_facts; a seq2seq run reads pairs), and the model's
    positions where the model is known."""
    data = input_facts(tc) if tc.model != "seq2seq" else pairs_facts(tc)
    positions = {} if model is None else {"pos_emb": model.pos_emb}
    return {**flag_scope.train_facts(tc), **data, **positions}


def explicit_accumulation(values: dict, explicit: dict, whose: str) -> list[str]:
    """An explicit --gradient_accumulation_steps beats a total_batch_size the flags did not give (a preset's, a
    checkpoint's), which is dropped with a note; both given explicitly are refused. values is changed in place."""
    if "gradient_accumulation_steps" not in explicit or values.get("total_batch_size") is None:
        return []
    if "total_batch_size" in explicit:
        raise FlagError(f"--total_batch_size={values['total_batch_size']} and --gradient_accumulation_steps="
                        f"{values['gradient_accumulation_steps']} both set the micro-steps of an optimizer step; give "
                        f"one of them")
    dropped, values["total_batch_size"] = values["total_batch_size"], None
    return [f"note: --gradient_accumulation_steps={values['gradient_accumulation_steps']} replaces {whose} "
            f"total_batch_size={dropped}"]


def check_schedule(tc: TrainConfig, explicit: dict, whose: str, origins: dict | None = None) -> None:
    """Refuses a warmup that reaches lr_decay_iters before the run ends: the rate would fall from its peak straight to
    min_lr there (the cosine has ended). A run that ends within its warmup only warms up: that is allowed (a short
    run with the preset's warmup). Only where a flag set one of the three (a preset's own values are consistent).
    whose: where the values no flag gave come from; origins: another origin for some of them (a shortened warmup)."""
    if tc.lr_decay_iters is None or not tc.lr_decay_iters <= tc.warmup_iters < tc.max_iters:
        return
    if not {"warmup_iters", "lr_decay_iters", "max_iters"} & set(explicit):
        return
    said = {k: f"{k}={getattr(tc, k)}" + ("" if k in explicit else f" ({(origins or {}).get(k, whose)})")
            for k in ("warmup_iters", "lr_decay_iters", "max_iters")}
    raise ConfigError(f"{said['warmup_iters']} is not below {said['lr_decay_iters']}: the learning rate would fall "
                      f"from its peak straight to min_lr at step {tc.warmup_iters} and stay there until "
                      f"{said['max_iters']}; lower --warmup_iters or raise --lr_decay_iters")


def saved_settings(saved: dict, notes: list) -> dict:
    """A checkpoint's train_config -> a value for every TrainConfig field: the saved ones converted to their field's
    type (a FlagError names one that cannot be), the defaults for fields the checkpoint predates. A setting this
    version no longer has is dropped, with a note (added to notes)."""
    known = flags.field_types(TrainConfig)
    gone = sorted(set(saved) - set(known))
    if gone:
        notes.append(f"note: the checkpoint's training settings {', '.join(gone)} are not this version's; ignored")
    return {**{f.name: f.default for f in fields(TrainConfig)},
            **{k: flags.convert(k, v, known[k][1]) for k, v in saved.items() if k in known}}


# the validation set: eval_iters batches of batch_size windows (an encoder-decoder's: pairs); losses scored by runs
# that differ in either are on other windows and compare with nothing
VALIDATION_SET = ("eval_iters", "batch_size")


def other_validation(old: dict, new: dict) -> list[str]:
    """The VALIDATION_SET settings two train_configs differ in (a setting one of them lacks is not compared)."""
    return [k for k in VALIDATION_SET if k in old and k in new and old[k] != new[k]]


# training flags a checkpoint was made for, like the model's shape: what is trained (and so the vocabulary) and
# the optimizer whose state it holds
KEPT_ON_RESUME = ("model", "mask_token", "optimizer")


def checkpoint_system(tc: TrainConfig, explicit: dict) -> TrainConfig:
    """A resumed run (--init_from=resume, or auto with a checkpoint in out_dir) runs where its checkpoint did: the
    checkpoint's --device and --backend unless a flag gives them, which is said when it moves the run. Read before
    the process group starts, which needs both, from the checkpoint's settings alone (its weights stay on disk)."""
    path = os.path.join(tc.out_dir, LAST)
    if tc.init_from not in ("resume", "auto") or not os.path.isfile(path):
        return tc
    saved, notes = read_train_config(path), []
    for name in ("device", "backend"):
        old = saved.get(name)
        if not isinstance(old, str):  # an import's, or not a setting of ours: resumed_config says what it is
            continue
        if name not in explicit:
            setattr(tc, name, old)
        elif explicit[name] != old:
            notes.append(f"note: resuming with --{name}={explicit[name]}; the checkpoint was trained with "
                         f"--{name}={old}")
    explicit.notes += notes
    return tc


def resumed_config(tc: TrainConfig, model_overrides: dict, explicit: dict,
                   world_size: int = 1) -> tuple[TrainConfig, Checkpoint]:
    """For --init_from=resume: the checkpoint's configs, with explicitly given training flags (e.g. a larger
    --max_iters) applied on top, and those flags checked against where they apply to this checkpoint's run. The
    model's shape cannot change under a checkpoint; out_dir is always the command line's (the folder may have
    moved). world_size: this run's processes (another number than the checkpoint's run had may change a step's
    batch: said). Its notes are added to explicit.notes (said once the run's checks have passed)."""
    path = os.path.join(tc.out_dir, LAST)
    ckpt, notes = checkpoint_to_resume(tc.out_dir), []
    try:
        saved = saved_settings(ckpt.train_config, notes)
    except FlagError as e:
        raise CheckpointError(f"{path} holds a training setting this code cannot read ({e}); the file is corrupt "
                              f"or not ours") from None
    kept = {**ckpt.model_config.to_dict(), "model": ckpt.objective, **{k: saved[k] for k in KEPT_ON_RESUME}}
    for k, v in {**model_overrides, **explicit}.items():
        if k in explicit and k in kept and kept[k] != v:
            raise SetupError(f"--{k}={flags.typed(v)}{flags.set_in([k], explicit)} differs from the checkpoint's "
                             f"{k}={flags.typed(kept[k])}; a "
                             f"resumed run keeps its model and optimizer: drop the flag or start a new --out_dir")
    if "max_iters" in explicit and explicit["max_iters"] < ckpt.step:
        raise SetupError(f"--max_iters={explicit['max_iters']} is below step {ckpt.step}, where the checkpoint in "
                         f"{tc.out_dir} is: there is nothing left to train; pass a --max_iters above {ckpt.step}")
    if ("max_iters" in explicit and "lr_decay_iters" not in explicit and saved.get("lr_decay_iters") is None
            and saved["warmup_iters"] < saved["max_iters"]):
        # a longer (or shorter) run keeps the schedule it started with: the cosine still ends where it was
        # planned to, then min_lr; --lr_decay_iters sets another horizon. A run that ended within its warmup
        # planned no cosine: it decays to the new max_iters, as an uninterrupted run would
        saved["lr_decay_iters"] = saved["max_iters"]
    changed = {k for k in ("warmup_iters", "lr_decay_iters") if k in explicit and explicit[k] != saved[k]}
    saved.update({k: v for k, v in explicit.items() if k in saved})
    notes += explicit_accumulation(saved, explicit, "the checkpoint's")
    notes += from_start_folder(saved, explicit, ckpt.started_in, path)
    resumed = TrainConfig(**{**saved, "out_dir": tc.out_dir})
    facts = scope_facts(resumed, ckpt.model_config)
    notes += flag_scope.check("train.py", explicit, facts)
    if changed:  # the schedule it trained with stands; one the flags change is checked as a fresh run's
        check_schedule(resumed, explicit, "the checkpoint's")
    need_torchrun(resumed)  # the checkpoint's --fsdp, or the flag's
    explicit.notes += notes + other_process_count(resumed, ckpt, world_size)
    return resumed, ckpt


# TrainConfig's settings that name files or folders a run reads (eval_tasks: comma-separated files); out_dir is the
# command line's
PATH_SETTINGS = tuple(f.name for f in fields(TrainConfig) if flags.is_path(f.name, TrainConfig) and f.name != "out_dir")
MADE_OR_SPARE = ("data_root", "archive")  # a folder made where it is missing; the sdist read only to prepare again


def from_start_folder(saved: dict, explicit: dict, started_in: str | None, path: str) -> list[str]:
    """A resumed run's relative paths (saved: its settings, the flags' applied; changed in place) are read from the
    folder they were given in: the checkpoint's from the one its run was started in (started_in), the flags' from
    this one. Away from that folder all are made absolute: the same corpus is read and the same prepared data
    reused, and the run's checkpoints (which keep started_in, not this folder) read them right. Without started_in
    (an older checkpoint) they are read from here, as where that folder is gone (the tree moved): then a checkpoint's
    file that is not here either is refused, naming where it was relative to; a data_root or archive is read from
    here, said. Returns the notes."""
    here = os.getcwd()
    if started_in is None or os.path.isdir(started_in) and os.path.samefile(started_in, here):
        return []
    gone, notes = not os.path.isdir(started_in), []
    for name in PATH_SETTINGS:
        if saved[name] is None or gone and name in explicit:
            continue
        # (eval_tasks: comma-separated files, each ~ expanded, as inference/tasks.py reads them)
        files = ([os.path.expanduser(f.strip()) for f in saved[name].split(",") if f.strip()]
                 if name == "eval_tasks" else [saved[name]])
        if not gone:
            saved[name] = ",".join(os.path.join(here if name in explicit else started_in, f) for f in files)
            continue
        missing = next((f for f in files if not (os.path.isabs(f) or os.path.exists(f))), None)  # (from here)
        where = f"relative to {started_in}, where its run was started, which no longer exists"
        if missing is not None and name in MADE_OR_SPARE:
            notes.append(f"note: the checkpoint's --{name}={saved[name]} was {where}; reading it from this folder")
        elif missing is not None:
            raise SetupError(f"--{name}={missing} comes from the checkpoint {path}, {where}, and is not in this "
                             f"folder either; run train.py from where that folder is now, or pass --{name}")
    return notes


def checkpoint_to_resume(out_dir: str) -> Checkpoint:
    """out_dir's last checkpoint, refused (one line) where there is no run to resume: an import's weights (step 0, no
    optimizer, no data) or a Hugging Face folder, whose import would be refused the same way."""
    path = os.path.join(out_dir, LAST)
    if not os.path.exists(path) and os.path.isfile(os.path.join(out_dir, "config.json")):
        raise SetupError(f"{out_dir} is a Hugging Face model folder, not a run of this project: there is no run to "
                         f"resume; start one from its weights with --init_from=hf:{out_dir} and another --out_dir")
    ckpt = Checkpoint.load(path)
    if ckpt.source is not None:  # an import (interop/import_hf.py)
        raise SetupError(f"{path} was imported from {ckpt.source}, not trained here: there is no run to resume; "
                         f"start one from those weights with --init_from={ckpt.source} and another --out_dir")
    return ckpt


def other_process_count(tc: TrainConfig, ckpt: Checkpoint, world_size: int) -> list[str]:
    """A resume by another number of processes than its checkpoint's run had (the checkpoint holds one random state
    per process): without total_batch_size each process still trains batch_size x gradient_accumulation_steps rows
    a step, so a step's batch changes with the number of processes; said, with the flags that keep it (none where
    its rows do not split evenly over this many processes)."""
    saved = len(ckpt.rng or ())  # none: an import's, no run to compare with
    if not saved or saved == world_size or tc.total_batch_size is not None:
        return []
    before = checkpoint_rows(ckpt.train_config, tc, saved, ckpt.model_config.block_size)
    now = tc.batch_size * tc.gradient_accumulation_steps * world_size
    if now == before:  # the flags made up for it
        return []
    rows = "pairs" if tc.model == "seq2seq" else "sequences"
    keep = keeping_flags(tc, before, world_size, ckpt.model_config.block_size)
    keep = (f"{keep} keeps the checkpoint's" if keep else
            f"{before} {rows} do not split evenly over {world_size} processes")
    return [f"note: the checkpoint's run had {saved} process(es) and this one has {world_size}: a step now trains on "
            f"{now} {rows}, not {before} ({keep})"]


def checkpoint_rows(old: dict, tc: TrainConfig, processes: int, block_size: int) -> int:
    """The rows a step of the checkpoint's run trained on (old: its train_config; processes: its run's): its
    total_batch_size's where it had one (its gradient_accumulation_steps flag was then not what it ran)."""
    if old.get("total_batch_size") is not None:
        return old["total_batch_size"] // block_size
    return old.get("batch_size", tc.batch_size) * old.get("gradient_accumulation_steps", 1) * processes


def keeping_flags(tc: TrainConfig, rows: int, world_size: int, block_size: int) -> str:
    """The flags that make a step train on `rows` rows over world_size processes ('' where they do not split evenly):
    total_batch_size must be a multiple of batch_size x block_size x processes, so batch_size may have to shrink."""
    per_process, uneven = divmod(rows, world_size)
    if uneven:
        return ""
    batch = max(b for b in range(1, min(tc.batch_size, per_process) + 1) if per_process % b == 0)
    if tc.model == "seq2seq":  # pairs vary in length: no total_batch_size
        accum = per_process // batch
        return f"--batch_size={batch}" + (f" --gradient_accumulation_steps={accum}"
                                          if accum != tc.gradient_accumulation_steps else "")
    return f"--total_batch_size={rows * block_size}" + (f" --batch_size={batch}" if batch != tc.batch_size else "")


def run_speed(sc: SpeedConfig, explicit: dict, ckpt: Checkpoint | None) -> tuple[SpeedConfig, list[str]]:
    """(how the run computes, as chosen before the device's own choices; the levers a flag or config file gave,
    which speed.for_device leaves alone). A resumed run computes as the run it continues chose to, with the levers
    its flags give explicitly on top; a checkpoint without them (older, or an import) takes the command line's.
    A lever the checkpoint has and this version not is dropped, noted in explicit.notes."""
    given = [f.name for f in fields(SpeedConfig) if f.name in explicit]
    if ckpt is None or ckpt.speed_config is None:
        return sc, given
    known = {f.name for f in fields(SpeedConfig)}
    gone = sorted(set(ckpt.speed_config) - known)
    if gone:
        explicit.notes.append(f"note: the checkpoint's speed levers {', '.join(gone)} are not this version's; "
                              f"ignored")
    chosen = {k: v for k, v in ckpt.speed_config.items() if k in known}
    try:
        sc = SpeedConfig(**{**chosen, **{k: explicit[k] for k in given}})
    except ConfigError as e:
        raise CheckpointError(f"the checkpoint's speed levers are not this code's ({e}); give that lever as a flag "
                              f"to choose one") from None
    return sc, sorted(set(ckpt.speed_flags or ()) & known | set(given))
