"""What the CPU kernel library is built from, shared by the install-time build (``setup.py``,
which loads this file by path: no torch, no package imports) and the first-use build in
:mod:`.kernels`, so both compile the same sources with the same flags."""

from __future__ import annotations

import hashlib
from pathlib import Path

# source -> its own flags: the exp sum of row_stats may reorder (fast-math vectorises expf
# through glibc's libmvec); the GEMM's FMA chains must not
# (and the layer glue keeps transformers' elementwise rounding: no fused multiply-adds)
SOURCES = {"_sgemm.c": (), "_rowstats.c": ("-ffast-math",), "_layers.c": ("-ffp-contract=off",)}
FLAGS = ("-O3", "-mavx512f", "-mavx512vl", "-mfma", "-fopenmp", "-fPIC")
LINK_FLAGS = ("-fopenmp",)  # libgomp by soname: torch's copy, already loaded, serves it
LIBRARIES = ("m",)
INSTALLED_STEM = "libspectool_kernels"


def source_digest(here: Path) -> str:
    """Sources and flags, hashed: an installed library is used only if built from exactly these."""
    digest = hashlib.sha256(" ".join((*FLAGS, *LINK_FLAGS, *LIBRARIES)).encode())
    for name, extra in SOURCES.items():
        digest.update(name.encode() + " ".join(extra).encode() + (here / name).read_bytes())
    return digest.hexdigest()[:16]


def installed_name(here: Path) -> str:
    """File name of the install-time library. The digest in it means a checkout whose C sources
    changed after ``pip install -e .`` never loads the stale build (it falls back to the cache)."""
    return f"{INSTALLED_STEM}-{source_digest(here)}.so"
