"""The package's exception and warning: what the library or the daemon reported."""


class WdriftError(RuntimeError):
    pass


class RefusedWarning(UserWarning):
    """Snapshots the daemon refused for good (not conflicts, which raise): flush() and close() warn
    with how many since the last warning and the latest reason. warnings.simplefilter("error",
    wdrift.RefusedWarning) makes them raise."""
