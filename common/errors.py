"""The errors a user can fix, and nothing else.

Every mistake a user can make (a bad flag, a missing file, a corpus too small, a checkpoint from elsewhere) is
raised as a UserError subclass whose message is one line naming the problem and the fix; `common/cli.run` prints
it as `error: ...` and exits 2. Anything else (a bug in our code, in torch or numpy) is not a UserError and keeps
its traceback: it must never look like the user's fault.

UserError derives from ValueError, so code that validates values (a config's __post_init__) stays idiomatic.
"""
import os


class UserError(ValueError):
    """A mistake the user can fix; the message is one line that says how."""


class FlagError(UserError):
    """A flag that cannot be parsed: unknown name, wrong type, bad preset or config file."""


class ConfigError(UserError):
    """A flag's value that a config dataclass refuses (n_embd not divisible by n_head, ...)."""


class SetupError(UserError):
    """A run that cannot start as asked: device, dtype, out_dir, resume mismatches."""


class CheckpointError(UserError):
    """A checkpoint that is missing, corrupt, unsafe or not ours."""


class DataError(UserError):
    """A corpus, prepared folder or tokenizer problem."""


class DiskError(UserError):
    """A write that failed for lack of space, a quota or a failing disk (common/files.py says which file, how much)."""


def need(ok: bool, message: str, error: type[UserError] = ConfigError) -> None:
    """Validation in one line: `need(n > 0, f"n={n} must be > 0")`."""
    if not ok:
        raise error(message)


def need_seed(seed: int) -> None:
    """A seed every random generator here takes: torch's (below 2^64, and a process adds its rank) and numpy's
    (not negative)."""
    need(0 <= seed < 2**63, f"seed={seed} must be an integer in [0, 2^63)")


def most_per_machine() -> int:
    """The most threads (--threads) or processes (data/prepare.py --workers) a command runs: a few per core (never
    under 64). Beyond it they only stall the machine, and 2^31 threads overflow torch.set_num_threads' C int."""
    return max(64, 4 * (os.cpu_count() or 1))


def need_threads(threads: int | None) -> None:
    """A --threads that torch.set_num_threads takes and this machine can run: None (torch's choice) or up to
    most_per_machine()."""
    most = most_per_machine()
    need(threads is None or 0 < threads <= most, f"threads={threads} must be a positive integer up to {most} (this "
         f"machine has {os.cpu_count()} CPU cores) or None")
