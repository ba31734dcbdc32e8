"""_lib.py: finds and loads libclremat with ctypes and declares the embedding API
(include/clremat_api.h).

The library is found through $CLREMAT_LIBRARY (a path, e.g. a build tree's
.libs/libclremat.so), then pkg-config's libdir for clremat, then the system's
library path (ctypes.util.find_library). ctypes.CDLL releases the GIL for the
whole of every foreign call, so other Python threads run while the library
plans or trains."""

import ctypes
import ctypes.util
import os
import subprocess

from .errors import DeviceNotFoundError, Error, InvalidArgumentError, ModelError, OutOfMemoryError

# status codes (include/clremat.h)
OK = 0
ERR_OUT_OF_MEMORY = -2001
ERR_INVALID_ARGUMENT = -2002
ERR_NO_DEVICE = -2003
ERR_DEVICE_NOT_FOUND = -2004
ERR_IO = -2006
ERR_PARSE = -2007
ERR_SHAPE = -2008
ERR_MISMATCH = -2012

F32, F64, I32, I64 = 0, 1, 2, 3


class Tensor(ctypes.Structure):
    """clremat_api_tensor."""

    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("dims", ctypes.POINTER(ctypes.c_int64)), ("data", ctypes.c_void_p)]


PROGRESS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_double)


def _candidates():
    env = os.environ.get("CLREMAT_LIBRARY")
    if env:
        return [env]
    found = []
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "clremat"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
        if libdir:
            found.append(os.path.join(libdir, "libclremat.so"))
    except (OSError, subprocess.SubprocessError):
        pass
    name = ctypes.util.find_library("clremat")
    if name:
        found.append(name)
    found.append("libclremat.so")
    return found


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("clremat: cannot load libclremat (set CLREMAT_LIBRARY to its path, or install it so that "
                      "pkg-config or the library path finds it): " + "; ".join(errors))


lib = _load()
_c = ctypes
for name, res, args in [
    ("clremat_last_error", _c.c_char_p, []),
    ("clremat_status_str", _c.c_char_p, [_c.c_int]),
    ("clremat_api_free", None, [_c.c_void_p]),
    ("clremat_api_error_bytes", _c.c_int, [_c.POINTER(_c.c_uint64), _c.POINTER(_c.c_uint64)]),
    ("clremat_api_error_position", _c.c_int, [_c.POINTER(_c.c_char_p), _c.POINTER(_c.c_int), _c.POINTER(_c.c_int)]),
    ("clremat_api_devices", _c.c_int, [_c.POINTER(_c.c_void_p)]),
    ("clremat_api_plan", _c.c_int, [_c.c_char_p, _c.c_char_p, _c.POINTER(_c.c_void_p)]),
    ("clremat_api_pareto", _c.c_int, [_c.c_char_p, _c.c_char_p, _c.POINTER(_c.c_void_p)]),
    ("clremat_api_compare", _c.c_int, [_c.c_char_p, _c.c_char_p, _c.POINTER(_c.c_void_p)]),
    ("clremat_api_fit", _c.c_int, [_c.c_char_p, _c.c_char_p, _c.POINTER(_c.c_void_p)]),
    ("clremat_api_train", _c.c_int, [_c.c_char_p, _c.c_char_p, _c.POINTER(Tensor), _c.c_int, PROGRESS, _c.c_void_p,
                                     _c.POINTER(_c.c_void_p)]),
    ("clremat_api_run_free", None, [_c.c_void_p]),
    ("clremat_api_run_json", _c.c_char_p, [_c.c_void_p]),
    ("clremat_api_run_weight_count", _c.c_int, [_c.c_void_p]),
    ("clremat_api_run_weight", _c.c_int, [_c.c_void_p, _c.c_int, _c.POINTER(_c.c_char_p), _c.POINTER(_c.c_int),
                                          _c.POINTER(_c.POINTER(_c.c_int64)), _c.POINTER(_c.POINTER(_c.c_float))]),
]:
    fn = getattr(lib, name)
    fn.restype = res
    fn.argtypes = args


def _text(b):
    return b.decode("utf-8", "replace") if b else ""


def error(status):
    """The exception for status, with the library's message and recorded details."""
    msg = _text(lib.clremat_last_error()) or f"libclremat failed with status {status}"
    name = _text(lib.clremat_status_str(status))
    if status == ERR_OUT_OF_MEMORY:
        need, avail = ctypes.c_uint64(), ctypes.c_uint64()
        if lib.clremat_api_error_bytes(ctypes.byref(need), ctypes.byref(avail)):
            return OutOfMemoryError(msg, status, name, need.value, avail.value)
        return OutOfMemoryError(msg, status, name)
    if status in (ERR_NO_DEVICE, ERR_DEVICE_NOT_FOUND):
        return DeviceNotFoundError(msg, status, name)
    f, line, col = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int()
    if lib.clremat_api_error_position(ctypes.byref(f), ctypes.byref(line), ctypes.byref(col)):
        return ModelError(msg, status, name, _text(f.value), line.value, col.value)
    if status in (ERR_PARSE, ERR_SHAPE):
        return ModelError(msg, status, name)
    if status == ERR_INVALID_ARGUMENT:
        return InvalidArgumentError(msg, status, name)
    return Error(msg, status, name)


def call_json(fn, *args):
    """Calls an API function that hands back a JSON report string; returns the text."""
    out = ctypes.c_void_p()
    st = fn(*args, ctypes.byref(out))
    if st != OK:
        raise error(st)
    try:
        return ctypes.string_at(out.value).decode("utf-8")
    finally:
        lib.clremat_api_free(out)
