"""The package's exception and warning: what the library or the daemon reported."""


class WdriftError(RuntimeError):
    pass


class RefusedWarning(UserWarning):
    """Snapshots the daemon refused for good (not conflicts, which raise): flush() and close() warn
    with how many since the last warning. The library has already said each refusal, with its
    reason, on stderr when it came; the warning does not repeat it (said once), but carries it:
    .count is how many, .latest the last one's words. warnings.simplefilter("error",
    wdrift.RefusedWarning) makes them raise."""

    def __init__(self, message, count=0, latest=""):
        super().__init__(message)
        self.count = count
        self.latest = latest
