"""Finds and loads libgcagent_client.so.1 and declares its C signatures (gcagent_client.h)."""

import ctypes
import os
from pathlib import Path

LIB_NAME = "libgcagent_client.so.1"
# Where a wheel built from the repository root (pyproject.toml) puts the library and the agent.
BUNDLED_DIR = Path(__file__).resolve().parent / "_bundled"
ABI_VERSION = 1         # the oldest library this package works with (host tensors)
DEVICE_ABI_VERSION = 2  # GPU tensors need at least this one
MEMBERSHIP_ABI_VERSION = 4  # gcagent_result_nodes and gcagent_resync_root
WAIT_ANY_ABI_VERSION = 5  # gcagent_wait_any and gcagent_buffer_fd
STATE_ABI_VERSION = 6  # gcagent_state_get, _free, _put and gcagent_declare_dtypes
JOB_ITERATION_ABI_VERSION = 7  # gcagent_job_iteration
REDUCTION_TIMEOUT_ABI_VERSION = 8  # gcagent_reduction_timeout_ms


class Tensor(ctypes.Structure):
    _fields_ = [
        ("key", ctypes.c_uint64),
        ("elements", ctypes.c_uint64),
        ("priority", ctypes.c_int32),
        ("codec", ctypes.c_char_p),
        ("param_keys", ctypes.POINTER(ctypes.c_char_p)),
        ("param_values", ctypes.POINTER(ctypes.c_char_p)),
        ("param_count", ctypes.c_size_t),
    ]


class Step(ctypes.Structure):
    _fields_ = [("iteration", ctypes.c_uint64), ("key", ctypes.c_uint64)]


def _candidates():
    """Where the library is looked for, in order: GCAGENT_CLIENT_LIB, the copy bundled in the
    wheel, the path baked in at pip-install time of clients/python, then the system loader
    (LD_LIBRARY_PATH, ldconfig)."""
    explicit = os.environ.get("GCAGENT_CLIENT_LIB")
    if explicit:
        return [("GCAGENT_CLIENT_LIB", explicit)]
    found = []
    bundled = BUNDLED_DIR / LIB_NAME
    if bundled.is_file():
        found.append(("the wheel's bundled copy", str(bundled)))
    try:
        from gcagent._installed_path import LIBRARY
        if LIBRARY:
            found.append(("the path recorded at install time", LIBRARY))
    except ImportError:
        pass
    found.append(("the system loader", LIB_NAME))
    return found


def _declare(lib, version):
    u32, u64, sz = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t
    client_p, keys_p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)
    sigs = {
        "gcagent_abi_version": (u32, []),
        "gcagent_status_string": (ctypes.c_char_p, [ctypes.c_int]),
        "gcagent_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, u32, u32, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_void_p)]),
        "gcagent_declare": (ctypes.c_int, [client_p, ctypes.POINTER(Tensor), sz]),
        "gcagent_buffer": (ctypes.POINTER(ctypes.c_float), [client_p, u64]),
        "gcagent_buffer_elements": (u64, [client_p, u64]),
        "gcagent_submit": (ctypes.c_int, [client_p, u64, keys_p, sz]),
        "gcagent_wait": (ctypes.c_int, [client_p, u64, keys_p, sz, ctypes.c_int]),
        "gcagent_poll": (ctypes.c_int, [client_p, u64, keys_p, sz]),
        "gcagent_set_reply_timeout": (ctypes.c_int, [client_p, ctypes.c_int]),
        "gcagent_last_error": (ctypes.c_char_p, [client_p]),
        "gcagent_trainer_id": (u32, [client_p]),
        "gcagent_node_rank": (u32, [client_p]),
        "gcagent_node_count": (u32, [client_p]),
        "gcagent_close": (None, [client_p]),
    }
    if version >= DEVICE_ABI_VERSION:
        uuid_p, stream_p = ctypes.POINTER(ctypes.c_uint8), ctypes.c_void_p
        sigs.update({
            "gcagent_gpu_uuid": (ctypes.c_int, [ctypes.c_int, uuid_p]),
            "gcagent_declare_device": (ctypes.c_int, [client_p, ctypes.POINTER(Tensor), sz, uuid_p]),
            "gcagent_device_buffer": (u64, [client_p, u64]),
            "gcagent_submit_device": (ctypes.c_int, [client_p, u64, keys_p, sz, stream_p]),
            "gcagent_wait_device": (ctypes.c_int, [client_p, u64, keys_p, sz, ctypes.c_int, stream_p]),
        })
    if version >= MEMBERSHIP_ABI_VERSION:
        sigs.update({
            "gcagent_result_nodes": (u32, [client_p, ctypes.POINTER(u32), u32]),
            "gcagent_resync_root": (ctypes.c_int64, [client_p]),
        })
    if version >= WAIT_ANY_ABI_VERSION:
        sigs.update({
            "gcagent_wait_any": (ctypes.c_int, [client_p, ctypes.POINTER(Step), sz, ctypes.c_int, ctypes.c_int,
                                                ctypes.POINTER(sz)]),
            "gcagent_buffer_fd": (ctypes.c_int, [client_p, u64, ctypes.POINTER(u64)]),
        })
    if version >= STATE_ABI_VERSION:
        bytes_p = ctypes.POINTER(ctypes.c_uint8)
        sigs.update({
            "gcagent_state_get": (ctypes.c_int, [client_p, u64, ctypes.POINTER(bytes_p), ctypes.POINTER(u64)]),
            "gcagent_state_free": (None, [bytes_p]),
            "gcagent_state_put": (ctypes.c_int, [client_p, u64, ctypes.c_char_p, u64, ctypes.POINTER(u32)]),
            "gcagent_declare_dtypes": (ctypes.c_int, [client_p, ctypes.POINTER(Tensor), ctypes.POINTER(ctypes.c_uint8),
                                                      sz]),
        })
    if version >= JOB_ITERATION_ABI_VERSION:
        sigs["gcagent_job_iteration"] = (ctypes.c_int, [client_p, u64, ctypes.POINTER(u64)])
    if version >= REDUCTION_TIMEOUT_ABI_VERSION:
        sigs["gcagent_reduction_timeout_ms"] = (u32, [client_p])
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_lib = None


def load():
    """The loaded library; raises OSError naming every place tried when none works."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for where, path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{where} ({path}): {e}")
            continue
        version = lib.gcagent_abi_version()
        if version < ABI_VERSION:
            raise OSError(f"gcagent: {path} has C ABI version {version}, this package needs {ABI_VERSION}")
        _lib = _declare(lib, version)
        _lib.abi_version = version
        return _lib
    raise OSError("gcagent: cannot load " + LIB_NAME + "; tried " + "; ".join(tried) +
                  ". Set GCAGENT_CLIENT_LIB to the library built in the build tree (clients/" + LIB_NAME + ")")
