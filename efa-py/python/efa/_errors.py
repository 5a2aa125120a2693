"""The exceptions, as the `efa` package defines them: `EfaError(operation, err, detail)`
is an OSError (`.errno`, `.strerror`, `.operation`); the Rust core's errors arrive with
their own words as `detail`."""

from __future__ import annotations

import errno as _errno
import os


class EfaError(OSError):
    """Raised when an EFA call fails or is refused (`.errno`, `.strerror`, `.operation`)."""

    def __init__(self, operation, err, detail=None):
        self.operation = operation
        self.detail = detail
        msg = ("%s failed: %s" % (operation, os.strerror(err))
               if detail is None else str(detail))
        super().__init__(err, msg)


class CompletionError(EfaError):
    """Raised by :meth:`WC.raise_for_status` for a failed completion (`.wc`, `.status`,
    `.vendor_err`)."""

    def __init__(self, wc, detail=None):
        self.wc = wc
        self.status = wc.status
        self.vendor_err = wc.vendor_err
        if detail is None:
            detail = "work completion failed: %s (status=%d, vendor_err=0x%x)" % (
                wc.status_str, wc.status, wc.vendor_err)
        super().__init__("work completion", _errno.EIO, detail)
