"""errors.py: the exceptions raised for failures of libclremat.

Every failure of the library raises a subclass of :class:`Error` carrying the
library's own message, its status code and status name."""


class Error(Exception):
    """A failure reported by libclremat (``status``: its code, ``status_name``: e.g.
    ``"CLREMAT_ERR_PARSE"``, ``message``: the library's message)."""

    def __init__(self, message, status=0, status_name=""):
        super().__init__(message)
        self.message = message
        self.status = status
        self.status_name = status_name


class OutOfMemoryError(Error):
    """The step does not fit: ``bytes_needed`` and ``bytes_available`` (None when the
    library did not record them)."""

    def __init__(self, message, status=0, status_name="", bytes_needed=None, bytes_available=None):
        super().__init__(message, status, status_name)
        self.bytes_needed = bytes_needed
        self.bytes_available = bytes_available


class ModelError(Error):
    """A bad model file: ``file``, ``line`` and ``col`` (1-based) where the library found it,
    None when it named no position."""

    def __init__(self, message, status=0, status_name="", file=None, line=None, col=None):
        super().__init__(message, status, status_name)
        self.file = file
        self.line = line
        self.col = col


class DeviceNotFoundError(Error):
    """No OpenCL device at all, or none matching the selection."""


class InvalidArgumentError(Error, ValueError):
    """A bad option or argument (also a ValueError)."""
