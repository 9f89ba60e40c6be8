"""The package's exception: a failure that the library or the daemon reported."""


class WdriftError(RuntimeError):
    pass
