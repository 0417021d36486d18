"""C kernels for the tree decoder on CPU, built on first use.

:class:`PackedLinear` — fp32 linear layers on one panel-packed weight copy. Why: on a CPU
the rows of a verified tree (1–48) make a GEMM that should cost what streaming the weights
costs, whatever the row count. MKL's kernels either re-pack the weights on every call or
need one packed copy per row count (≈ 0.54 GB each for SmolLM2 in fp32). The kernel in
``_sgemm.c`` packs each weight once into 64-column panels, serves every row count from that
copy, prefetches the weight stream under its FMAs, and gives each row the same result whatever
other rows share the call.

:func:`row_stats` — the greedy token and the top-k softmax probabilities of each logits row in
one pass, instead of torch's argmax + softmax + topk over [n, V] (``_rowstats.c``).

``_layers.c`` — every decoder layer of a Llama model for those few rows in one call, on the
panel GEMM (used by :mod:`.fused`).

Where the library comes from, first that applies (:func:`library`), and only on an x86-64 CPU
with AVX-512 and without ``SPECTOOL_CPU_KERNELS=0``:

1. the copy built at install (``setup.py``, an optional extension) into this package
   directory, if it was built from the sources beside it (:mod:`._kernel_sources`);
2. otherwise (a pure wheel, a failed optional build, C sources edited since) a build on first
   use with the system C compiler (``cc``/``gcc``, about a second) into
   ``$SPECTOOL_KERNEL_CACHE`` (default ``~/.cache/spectool/kernels``), keyed by sources, flags
   and compiler;
3. otherwise none: :func:`available` is False and callers keep torch's kernels.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch  # first: the kernel must bind to the OpenMP runtime torch has loaded

from spectool.settings import settings

from ._kernel_sources import FLAGS, LIBRARIES, LINK_FLAGS, SOURCES, installed_name, source_digest

__all__ = ["MAX_ROWS", "PackedLinear", "available", "library", "row_stats"]

log = logging.getLogger(__name__)

MAX_ROWS = 48  # above this, BLAS kernels built for large M win (prefill)
_HERE = Path(__file__).parent
MAX_TOP_K = 64
_lib: ctypes.CDLL | None = None
_tried = False


def _cache_dir() -> Path:
    root = settings().kernel_cache
    return root if root else Path.home() / ".cache" / "spectool" / "kernels"


def _installed() -> Path | None:
    """The library ``setup.py`` built into this package, if built from these sources."""
    path = _HERE / installed_name(_HERE)
    return path if path.is_file() else None


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def _build(compiler: str) -> Path:
    """The first-use build, into the cache; reused while sources, flags and compiler match."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256((source_digest(_HERE) + version).encode()).hexdigest()[:16]
    target = _cache_dir() / f"kernels-{digest}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # build beside the target and rename: concurrent first uses never load a half-written file
    work = Path(tempfile.mkdtemp(dir=target.parent))
    try:
        objects = []
        for name, extra in SOURCES.items():
            obj = work / (name[:-2] + ".o")
            _run([compiler, *FLAGS, *extra, "-c", str(_HERE / name), "-o", str(obj)])
            objects.append(str(obj))
        libs = [f"-l{name}" for name in LIBRARIES]
        _run([compiler, "-shared", *LINK_FLAGS, *objects, "-o", str(work / "lib.so"), *libs])
        os.replace(work / "lib.so", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"{cmd[0]} failed: {done.stderr.strip()[:400]}")


def library() -> ctypes.CDLL | None:
    """The loaded kernel library, or None where it cannot run here (reason logged once)."""
    global _lib, _tried
    if _tried:
        return _lib
    _tried = True
    if not settings().cpu_kernels:
        return None
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    if not _cpu_has("avx512f"):  # checked before loading: the library's code is AVX-512
        return None
    lib = _load()
    if lib is None:
        return None
    if not lib.spectool_sgemm_supported():
        return None
    p, i = ctypes.c_void_p, ctypes.c_int64
    for name, args, result in (  # the C signatures: arguments, result
        ("spectool_sgemm_packed_floats", [i, i], i),
        ("spectool_sgemm_pack", [p, i, i, p], None),
        ("spectool_sgemm", [p, i, i, p, i, i, p, p, i], None),
        ("spectool_row_stats", [p, i, i, i, p, p, p], None),
        ("spectool_llama_layers", [p, p, i, i, p, p, p, i, p, p, p], ctypes.c_int),
        ("spectool_llama_max_head_dim", [], i),
    ):
        getattr(lib, name).argtypes, getattr(lib, name).restype = args, result
    _lib = lib
    return lib


def _load() -> ctypes.CDLL | None:
    """The installed library, else the cache build; None if neither can be had."""
    installed = _installed()
    if installed is not None:
        try:
            return ctypes.CDLL(str(installed))
        except OSError as exc:  # e.g. copied to a machine without libgomp: try building here
            log.warning("spectool: installed CPU kernels do not load (%s)", exc)
    compiler = _compiler()
    if compiler is None:
        log.info("spectool: no installed CPU kernels and no C compiler; tree GEMMs stay on torch's kernels")
        return None
    try:
        return ctypes.CDLL(str(_build(compiler)))
    except OSError as exc:
        log.warning("spectool: CPU kernels unavailable (%s)", exc)
        return None


def _cpu_has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as info:
            return any(line.startswith("flags") and flag in line.split() for line in info)
    except OSError:
        return False


def available() -> bool:
    return library() is not None


class PackedLinear:
    """``F.linear(x, weight, bias)`` for inputs of 1..:data:`MAX_ROWS` rows, on a panel-packed
    copy of ``weight`` (fp32, CPU). Wider inputs fall back to ``F.linear``."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        lib = library()
        if lib is None:
            raise RuntimeError("spectool's CPU kernels are not available on this machine")
        if weight.dtype != torch.float32 or weight.device.type != "cpu" or weight.dim() != 2:
            raise ValueError("PackedLinear takes a 2-D fp32 CPU weight")
        self.weight, self.bias = weight, bias  # references, for the wide fallback
        w = weight.detach().contiguous()
        self.n, self.k = w.shape
        self.packed = torch.empty(lib.spectool_sgemm_packed_floats(self.n, self.k))
        lib.spectool_sgemm_pack(w.data_ptr(), self.n, self.k, self.packed.data_ptr())
        self._bias = None if bias is None else bias.detach().float().contiguous()
        self._call = lib.spectool_sgemm

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.k if x.shape[-1] == self.k else -1
        if not 0 < rows <= MAX_ROWS or x.dtype != torch.float32 or x.requires_grad:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, self.k)
        if flat.stride(1) != 1:
            flat = flat.contiguous()
        y = torch.empty(rows, self.n)
        self._call(
            flat.data_ptr(),
            rows,
            flat.stride(0),
            self.packed.data_ptr(),
            self.n,
            self.k,
            None if self._bias is None else self._bias.data_ptr(),
            y.data_ptr(),
            self.n,
        )
        return y.view(*x.shape[:-1], self.n)


def row_stats(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits [n, V] -> (argmax [n] (first maximum, as ``torch.argmax``), top-k ids [n, k],
    top-k softmax probabilities [n, k]); torch's ops where the kernel is not available."""
    k = min(k, logits.shape[-1])
    lib = library()
    if lib is None or logits.dim() != 2 or k > MAX_TOP_K or logits.device.type != "cpu":
        probs, ids = logits.float().softmax(dim=-1).topk(k, dim=-1)
        return logits.argmax(-1), ids, probs
    x = logits.float().contiguous()
    n, vocab = x.shape
    argmax = torch.empty(n, dtype=torch.long)
    ids = torch.empty(n, k, dtype=torch.long)
    probs = torch.empty(n, k)
    if n:
        lib.spectool_row_stats(x.data_ptr(), n, vocab, k, argmax.data_ptr(), ids.data_ptr(), probs.data_ptr())
    return argmax, ids, probs
