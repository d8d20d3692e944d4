"""Train a small GPT. `python train.py` trains a character-level model of Shakespeare's complete works on the CPU
in a minute or two; every setting is a flag (`--n_layer=4`, `--preset=fast-cpu`, `--config=my.toml`): see
`python train.py --help` and README.md.

A run, top to bottom (each step in the module named):
  1. the flags become the configs: what to train, the model, how it is computed   training/config.py
     (a flag given where it does not apply is refused; a resume keeps its           common/flag_scope.py
     checkpoint's device)
  2. under torchrun, this process joins the group (one process: nothing to join)  training/distributed.py
  3. what out_dir holds: a run already training there is refused at once; a      training/out_dir.py
     resumed run's settings are its checkpoint's (and the flags' changes)
  4. everything is built and checked, and nothing written: the data (prepared     training/setup.py
     once), the objective, the model (fresh, resumed or imported) with the speed    training/run_data.py
     levers applied, the optimizer, the batches
  5. out_dir is locked and claimed: only now is anything written there            training/out_dir.py
  6. the loop trains, evaluating, checkpointing and sampling every eval_interval  training/loop.py
     steps; Ctrl-C or SIGTERM saves a checkpoint after the current step and says how to resume
Exit codes: 0 done, 2 a mistake in the flags or the data (one line saying what to change), 130/143 stopped.
"""
import sys

from common import cli
from training import distributed, loop, out_dir, setup
from training.config import checkpoint_system, configure
from training.loop import on_disk
from training.metrics import need_wandb_mode
from training.stopping import Stopped


def main(argv) -> None:
    configs = configure(argv)  # 1
    if configs is None:  # --help: the flags are printed
        return
    tc, model_overrides, sc, explicit = configs
    tc = checkpoint_system(tc, explicit)  # a resumed run: the checkpoint's --device and --backend
    d, device_name = distributed.init(tc.device, tc.backend)  # 2
    lock = None
    try:
        out_dir.refuse_if_in_use(tc.out_dir, d)  # 3
        tc, ckpt = out_dir.starting_config(tc, model_overrides, explicit, d)
        need_wandb_mode(tc.wandb_log)  # the resumed run's setting too
        tasks = []
        if tc.eval_tasks:  # every line of the task files checked now, before any data is prepared
            from inference.tasks import read_tasks

            tasks = read_tasks(tc.eval_tasks, tc.eval_tasks_n, flag="eval_tasks")
        init_model = None
        if tc.init_from.startswith("hf:"):  # a Hugging Face GPT-2's weights, as a fresh run's starting point
            from interop.import_hf import initializer

            init_model = initializer(tc.init_from[len("hf:"):], model_overrides, explicit, tc.tokenizer,
                                     tc.mask_token, tc.bpe_vocab_size)
        run = setup.build(tc, model_overrides, explicit, d, device_name, init_model, sc, ckpt)  # 4
        hooks = evaluation_hooks(run, tasks)  # the tasks tokenized: refused here, before out_dir is touched
        loop.announce(run)  # the banner: a stdout that cannot be written stops the run here, too
        lock = out_dir.lock_out_dir(tc.out_dir, d)  # 5
        out_dir.claim_out_dir(run)
        loop.train(run, *hooks)  # 6
        distributed.barrier(d)  # no process tears the group down while another still talks in it
    except Stopped as stopped:  # a graceful stop: the checkpoint is saved and the resume command printed
        raise SystemExit(stopped.code) from None
    except KeyboardInterrupt:  # a second Ctrl-C, or one before the loop began
        if d.master:  # under torchrun it reaches every process
            print(f"interrupted: {on_disk(tc.out_dir)}", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        if lock is not None:
            lock.close()
        distributed.shutdown(d)


def evaluation_hooks(run, tasks: list) -> tuple[list, list]:
    """What each evaluation adds besides the validation loss: (metrics columns, wandb images), each a function of
    (model, tokenizer). The looking-inside lives in insight/, which the training loop does not import; the
    multiple-choice tasks (--eval_tasks, read by main) are scored by inference/evaluation.py."""
    tc, columns, images = run.tc, [], []
    if tasks:  # each task's acc, acc_norm and acc_token (metrics.jsonl, wandb: tasks/NAME/...)
        from inference.evaluation import task_columns
        from inference.tasks import encode_task

        encoded = {t.name: encode_task(t, run.tokenizer, run.config.block_size) for t in tasks}
        columns.append(lambda model, tokenizer: task_columns(model, encoded, run.dtype))
    if tc.model == "seq2seq":  # both read a text model's attention; the encoder-decoder reports exact matches
        return columns, images
    if tc.log_induction:  # the best head's induction score and which head (metrics.jsonl, wandb)
        from insight.induction import training_row

        columns.append(training_row)
    if tc.wandb_log and tc.wandb_attention_probe:  # the attention maps of a fixed line, as a wandb image
        from insight.attention_figures import attention_image  # here: matplotlib is slow to import

        probe = tc.wandb_attention_probe
        images.append(lambda model, tokenizer: ("attention/maps", attention_image(model, tokenizer, probe,
                                                                                  objective=tc.model), probe))
    return columns, images


def entry() -> int:
    """The `small-gpt-train` console command."""
    try:
        code = cli.run(main, sys.argv[1:])
    except SystemExit as e:  # a graceful stop's 130/143
        code = e.code if isinstance(e.code, int) else 1
    cli.exit_process(code)  # without the interpreter's teardown: ~1 s sooner, and no gloo abort (see there)
    return code  # not reached


if __name__ == "__main__":
    sys.exit(entry())
