"""How every command ends: 0 on success; on a mistake the user can fix, one line `error: ...` and exit code 2.

Under torchrun every process meets the same mistake; only rank 0 prints it (torchrun then adds its own summary
of the failed processes: the line to read is the one starting with `error:`).

Only UserError (common/errors.py) is a user mistake. Any other exception is a bug, ours or a library's, and keeps
its full traceback (exit 1): it must never be dressed up as the user's fault. Set SMALLGPT_DEBUG=1 to see the
traceback of a UserError too.
"""
import os
import sys

from common.errors import UserError


def run(main, argv) -> int:
    try:
        main(argv)
        return 0
    except UserError as e:
        if os.environ.get("SMALLGPT_DEBUG"):
            raise
        message = " ".join(str(e).split())  # one line, whatever the message held
        if os.environ.get("RANK", "0") == "0":  # under torchrun every process fails alike: rank 0 says it once
            print(f"error: {message}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `train.py --help | head`: the reader left; nothing to say, nowhere to say it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes stdout
        return 1
