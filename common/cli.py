"""How every command ends: 0 on success; on a mistake the user can fix, one line `error: ...` and exit code 2.

Mistakes are raised as ValueError subclasses (FlagError, SetupError, CheckpointError, DataError) with a message
that names the problem and the fix. Set SMALLGPT_DEBUG=1 to see the full traceback instead.
"""
import os
import sys


def run(main, argv) -> int:
    try:
        main(argv)
        return 0
    except ValueError as e:
        if os.environ.get("SMALLGPT_DEBUG"):
            raise
        message = " ".join(str(e).split())  # one line, whatever the message held
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the last checkpoint in out_dir is complete; continue with --init_from=resume",
              file=sys.stderr)
        return 130
