"""The one exception type for problems a user can fix (bad path, bad flag, corpus too small)."""


class DataError(ValueError):
    # The message is one line that names the problem and the fix; the CLI prints it as `error: <msg>`
    # and exits 2, and train.py can do the same, so no user mistake ends in a traceback.
    pass
