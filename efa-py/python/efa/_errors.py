"""The exceptions, as the `efa` package defines them: `EfaError(operation, err, detail)`
is an OSError (`.errno`, `.strerror`, `.operation`); the Rust core's errors arrive with
their own words as `detail`."""

from __future__ import annotations

import errno as _errno
import os


class EfaError(OSError):
    """Raised when an EFA call fails or is refused."""

    def __init__(self, operation, err, detail=None):
        self.operation = operation
        self.detail = detail
        super().__init__(err, detail if detail is not None else os.strerror(err))


class CompletionError(EfaError):
    """Raised by :meth:`WC.raise_for_status` for a failed completion (`.wc`)."""

    def __init__(self, wc, detail=None):
        self.wc = wc
        if detail is None:
            detail = "work request %d failed: %s (vendor error 0x%x)" % (
                wc.wr_id, wc.status_str, wc.vendor_err)
        super().__init__("poll_cq", _errno.EIO, detail)
