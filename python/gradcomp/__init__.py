"""gradcomp from Python: the public C API (libgradcomp-api.so) through ctypes.

gradcomp.torch holds the PyTorch DDP communication hook (docs/usage.md,
"PyTorch DDP communication hook"); gradcomp.capi the library binding it uses.
Importing this package loads nothing: the library is opened at first use.
"""
from gradcomp.capi import GradcompError  # noqa: F401  (standard library only)

__all__ = ["GradcompError"]
