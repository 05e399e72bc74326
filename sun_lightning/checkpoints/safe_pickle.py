"""Unpickling of a checkpoint's state blobs with an allow-list (checkpoints are code).

A checkpoint is loaded with ``torch.load(weights_only=True)`` (Lightning's default on torch ≥ 2.6):
tensors, plain containers and numbers only. The exploration state inside it keeps a few objects as
pickled bytes (the pseudocount, the environments, the numpy and Python RNG states:
:mod:`sun_lightning.exploration.state`, :mod:`sun_lightning.envs.state`); those are unpickled here, where a
global that is not on the allow-list (this package's classes, gymnasium's env, space and wrapper
classes, numpy arrays and RNGs, torch tensors) stops the load, naming it, before anything runs.

A run's own environment may come from another package (Gymnasium-Robotics, a user's ``data.env_package``): the
classes of the modules its env was built from are trusted too (:func:`trust`, called where the env is built). That
code is imported already, to make the env, so trusting its classes runs nothing a fresh run would not; nothing
else is added, and a class from any other module is still refused before it runs.
"""

from __future__ import annotations

import io
import pickle

import torch

from sun_lightning.errors import ConfigError

#: Modules whose classes (never their functions) a state blob may name.
CLASS_MODULES = ("sun_lightning.", "gymnasium.envs.", "gymnasium.spaces.", "gymnasium.wrappers.common",
                 "gymnasium.vector.vector_env")
#: Functions and classes a state blob may name outside those modules (numpy arrays and RNGs, torch tensors).
ALLOWED = frozenset({
    "collections.OrderedDict", "builtins.slice",
    "numpy.ndarray", "numpy.dtype",
    "numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray.scalar", "numpy.core.multiarray.scalar",
    "numpy.random._pickle.__generator_ctor", "numpy.random._pickle.__bit_generator_ctor",
    "numpy.random._pickle.__randomstate_ctor", "numpy.random.bit_generator.__pyx_unpickle_SeedSequence",
    "numpy.random.bit_generator.SeedSequence",
    "numpy.random._pcg64.PCG64", "numpy.random._mt19937.MT19937", "numpy.random._philox.Philox",
    "numpy.random._sfc64.SFC64", "numpy.random.mtrand.RandomState", "numpy.random._generator.Generator",
    "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter", "torch.device", "torch.Size",
    "torch._C.Generator", "torch.storage._load_from_bytes",
    "sun_lightning.envs.state._bare", "sun_lightning.envs.state._set_vars",  # an EzPickle env's attributes
})
_trusted: set[str] = set()  # modules whose classes this process's env was built from (trust())


def trust(*modules: str | None) -> None:
    """Allow the classes of ``modules`` and their submodules in state blobs from now on: the modules this process
    imported to build its env (``data.env_package``, the env's entry point: :func:`env_modules`)."""
    _trusted.update(module for module in modules if module)


def trusted(module: str) -> bool:
    """Whether the classes of ``module`` may be unpickled: the package's own, gymnasium's, or those :func:`trust` added."""
    return module.startswith(CLASS_MODULES) or any(module == m or module.startswith(m + ".") for m in _trusted)


def _storage_from_bytes(data: bytes):
    # torch's own ``_load_from_bytes`` loads with weights_only=False: a storage needs no more than True.
    return torch.load(io.BytesIO(data), weights_only=True)


class _AllowListUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        qualified = f"{module}.{name}"
        if qualified == "torch.storage._load_from_bytes":
            return _storage_from_bytes
        if qualified in ALLOWED:
            return super().find_class(module, name)
        if trusted(module):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(qualified)


def read_checkpoint(path: str, weights_only: bool = True) -> dict:
    """A checkpoint's contents, memory-mapped (tensors are not read), loaded as Lightning will load it.

    Raises:
        ConfigError: ``weights_only`` and the file holds an object ``torch.load`` refuses (one line naming it).
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only, mmap=True)
    except pickle.UnpicklingError as error:
        reason = next((line.strip() for line in str(error).splitlines() if "GLOBAL" in line or "Unsupported" in line),
                      str(error).strip().splitlines()[0])
        raise ConfigError(f"checkpoint {path} holds an object that loading with weights_only=True refuses ({reason}): "
                          "a checkpoint is code; pass --weights_only false only for one you trust (docs/faults.md)"
                          ) from None


def loads(blob: bytes, persistent_load=None):
    """``pickle.loads`` for a checkpoint's state blob, refusing globals outside the allow-list (``persistent_load``:
    what the blob's persistent ids stand for, where its writer used them; without it, one is refused).

    Raises:
        ConfigError: the blob names a global that is not allowed (one line naming it).
    """
    try:
        unpickler = _AllowListUnpickler(io.BytesIO(blob))
        if persistent_load is not None:
            unpickler.persistent_load = persistent_load
        return unpickler.load()
    except pickle.UnpicklingError as error:
        raise ConfigError(f"the checkpoint's state names {error}, which is not on the allow-list of "
                          "sun_lightning.checkpoints.safe_pickle (a checkpoint is code: load only checkpoints you trust, "
                          "see docs/faults.md)") from error

