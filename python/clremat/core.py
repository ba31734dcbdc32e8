"""core.py: the Python face of libclremat: devices(), Model (plan, pareto, train),
compare() and fit(). Every result is built from the library's own --json report (the same
bytes `clremat ... --json` prints for the same options); nothing is computed here."""

import ctypes
import dataclasses
import json
import os
import shutil
import tempfile

import numpy as np

from . import _lib
from .errors import InvalidArgumentError


@dataclasses.dataclass(frozen=True)
class Device:
    """One OpenCL device (`clremat devices --json`)."""

    id: str
    platform: str
    name: str
    vendor: str
    type: str
    driver_version: str
    device_version: str
    opencl_c_version: str
    compute_units: int
    global_mem_bytes: int
    max_alloc_bytes: int
    out_of_order_queues: bool
    profiling: bool
    free_mem_bytes: object  # int or None (not reported)


def devices():
    """Every OpenCL device of every platform, as :class:`Device` records."""
    report = json.loads(_lib.call_json(_lib.lib.clremat_api_devices))
    names = {f.name for f in dataclasses.fields(Device)}
    return [Device(**{k: v for k, v in d.items() if k in names}) for d in report["devices"]]


def _options(**kw):
    opts = {k: v for k, v in kw.items() if v is not None}
    for k, v in opts.items():
        if isinstance(v, float) and not np.isfinite(v):
            raise InvalidArgumentError(f"option '{k}' must be a finite number, got {v}")
    return json.dumps(opts).encode()


def _path(p):
    return os.fsencode(p)


@dataclasses.dataclass
class Plan:
    """A remat plan (`clremat plan --json`): ``layers`` (one dict per layer),
    ``predicted_peak_bytes``, ``recompute_flops``, ``step_flops`` and the whole
    report in ``report``."""

    report: dict

    @property
    def layers(self):
        return self.report["layers"]

    @property
    def predicted_peak_bytes(self):
        return self.report["memory"]["predicted_peak_bytes"]

    @property
    def recompute_flops(self):
        return self.report["flops"]["recompute"]

    @property
    def step_flops(self):
        return self.report["flops"]["step"]

    def to_frame(self):
        """The per-layer rows as a pandas DataFrame (needs pandas)."""
        try:
            import pandas
        except ImportError as e:
            raise ImportError("Plan.to_frame needs pandas (pip install pandas)") from e
        return pandas.DataFrame(self.layers)


@dataclasses.dataclass
class TrainResult:
    """A training run (`clremat train --json`): ``losses`` (float32 numpy array, one
    per step), ``step_time_ms``, ``memory`` (predicted and measured peaks, ...),
    ``weights`` (dict of float32 numpy arrays by "LAYER/PARAM": views of the library's
    trained parameters, no copy) and ``report``."""

    report: dict
    losses: np.ndarray
    weights: dict

    @property
    def step_time_ms(self):
        return self.report["step_time_ms"]

    @property
    def memory(self):
        return self.report["memory"]

    @property
    def predicted_peak_bytes(self):
        return self.report["memory"]["predicted_peak_bytes"]

    @property
    def measured_peak_bytes(self):
        return self.report["memory"]["measured_peak_bytes"]


_DTYPES = {np.dtype(np.float32): _lib.F32, np.dtype(np.float64): _lib.F64, np.dtype(np.int32): _lib.I32,
           np.dtype(np.int64): _lib.I64}


def _tensor(name, a):
    """A clremat_api_tensor over array a, in place (no copy)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: expected a numpy array, got {type(a).__name__}")
    if a.dtype.newbyteorder("=") != a.dtype or a.dtype not in _DTYPES:
        raise TypeError(f"{name}: dtype {a.dtype} is not supported; give float32 (or float64, int32, int64 for "
                        "ids), native byte order")
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError(f"{name}: the array is not C-contiguous; pass np.ascontiguousarray({name})")
    if a.ndim < 1 or a.ndim > 8:
        raise ValueError(f"{name}: shape {a.shape}: it needs a first dimension of samples (1 to 8 dimensions)")
    dims = (ctypes.c_int64 * a.ndim)(*a.shape)
    t = _lib.Tensor(name.encode(), _DTYPES[a.dtype], a.ndim, dims, a.ctypes.data if a.size else None)
    return t, dims


def _data_tensors(data, validation):
    """The four data tensors from (x, y) and an optional (val_x, val_y)."""
    try:
        x, y = data
    except (TypeError, ValueError):
        raise TypeError("data: give (x, y) numpy arrays, a data file path or a synthetic task name") from None
    if validation is None:
        vx, vy = x[:0], y[:0]
    else:
        vx, vy = validation
    arrays = {"train_x": x, "train_y": y, "val_x": vx, "val_y": vy}
    for k, a in arrays.items():
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{k}: expected a numpy array, got {type(a).__name__}")
    if x.ndim < 1 or y.ndim < 1 or x.shape[0] != y.shape[0]:
        raise ValueError(f"data: x has shape {x.shape} and y {y.shape}: both need the same sample count first")
    made = [_tensor(k, a) for k, a in arrays.items()]
    arr = (_lib.Tensor * 4)(*[t for t, _ in made])
    return arr, (made, arrays)


class Model:
    """A model: a clremat model file (JSON), a .keras file, or a dict in the clremat
    model format. No Keras import happens unless :meth:`from_keras` is used."""

    def __init__(self, path_or_dict):
        self._tmp = None
        if isinstance(path_or_dict, dict):
            fd, path = tempfile.mkstemp(prefix="clremat-model-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(path_or_dict, f, indent=1)
            self._tmp = path
            self.path = path
        elif isinstance(path_or_dict, (str, os.PathLike)):
            self.path = os.fspath(path_or_dict)
        else:
            raise TypeError("Model takes a model file path or a dict in the clremat model format, got "
                            f"{type(path_or_dict).__name__}")

    def __del__(self):
        if getattr(self, "_tmp", None):
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
        if getattr(self, "_keras_dir", None):
            shutil.rmtree(self._keras_dir, ignore_errors=True)

    @classmethod
    def from_keras(cls, keras_model):
        """The clremat model of an in-memory Keras 3 model, saved to a temporary .keras file
        (which the library imports)."""
        d = tempfile.mkdtemp(prefix="clremat-keras-")
        path = os.path.join(d, "model.keras")
        try:
            keras_model.save(path)
        except BaseException:
            shutil.rmtree(d, ignore_errors=True)
            raise
        m = cls(path)
        m._keras_dir = d
        return m

    def plan(self, remat="none", batch=32, memory_limit=None, optimizer=None, accumulate=None, device=None,
             gemm=None, overlap=None, no_fused_update=None, offload=None, actions=None, precision=None):
        """The remat plan (`clremat plan --json` with the same options; precision: "float32",
        "mixed_float16" or "mixed_bfloat16", None for the model file's)."""
        opts = _options(remat=remat, batch=batch, memory_limit=memory_limit, optimizer=optimizer,
                        accumulate=accumulate, device=device, gemm=gemm, overlap=overlap,
                        no_fused_update=no_fused_update, offload=offload, actions=actions, precision=precision)
        return Plan(json.loads(_lib.call_json(_lib.lib.clremat_api_plan, _path(self.path), opts)))

    def pareto(self, batch=32, points=None, optimizer=None, accumulate=None, no_fused_update=None,
               precision=None):
        """The Pareto front of peak bytes against recompute FLOPs (`clremat plan --pareto --json`):
        a dict with "front" and "modes"."""
        opts = _options(batch=batch, points=points, optimizer=optimizer, accumulate=accumulate,
                        no_fused_update=no_fused_update, precision=precision)
        return json.loads(_lib.call_json(_lib.lib.clremat_api_pareto, _path(self.path), opts))

    def train(self, data=None, steps=200, device=None, remat=None, batch=32, validation=None, progress=None,
              **options):
        """Trains (`clremat train --json`). data: (x, y) numpy arrays (float32 C-contiguous
        arrays are trained from in place, no copy; ids may be int32/int64), a data file path, a synthetic task
        name, or None (the model's synthetic task); validation: (val_x, val_y) with array data.
        progress(step, steps, loss) is called after every step; an exception in it stops the
        run and is raised again here. Other options as the command's (lr, optimizer, seed,
        warmup, memory_limit, gemm, accumulate, precision, ...)."""
        tensors, n, keep = None, 0, None
        if data is not None and not isinstance(data, (str, os.PathLike)):
            tensors, keep = _data_tensors(data, validation)
            n = 4
        elif validation is not None:
            raise InvalidArgumentError("validation applies to array data; a data file holds its own val_x, val_y")
        elif data is not None:
            options["data"] = os.fspath(data)
        opts = _options(steps=steps, device=device, remat=remat, batch=batch, **options)
        failure = []

        def hook(_user, step, total, loss):
            try:
                progress(int(step), int(total), float(loss))
                return 0
            except BaseException as e:  # stop the run, raise it again after the call
                failure.append(e)
                return 1

        cb = _lib.PROGRESS(hook) if progress else _lib.PROGRESS()
        run = ctypes.c_void_p()
        st = _lib.lib.clremat_api_train(_path(self.path), opts, tensors, n, cb, None, ctypes.byref(run))
        del keep  # the arrays stay alive until here: the library read them in place
        err = _lib.error(st) if st != _lib.OK else None
        result = _train_result(run) if run.value else None
        if failure:
            raise failure[0]
        if err is not None:
            err.result = result  # the steps run before the failure, if any
            raise err
        return result


class _RunOwner:
    """Owns a clremat_api_run: the weights' arrays view its memory and keep it alive;
    the library frees it when the last of them is gone."""

    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        if self.handle:
            _lib.lib.clremat_api_run_free(self.handle)
            self.handle = None


def _train_result(run):
    """The TrainResult of a run handle; takes it over (frees it with the last weight)."""
    owner = _RunOwner(run.value)
    report = json.loads(_lib.lib.clremat_api_run_json(owner.handle).decode("utf-8"))
    weights = {}
    for i in range(_lib.lib.clremat_api_run_weight_count(owner.handle)):
        name, rank = ctypes.c_char_p(), ctypes.c_int()
        dims, data = ctypes.POINTER(ctypes.c_int64)(), ctypes.POINTER(ctypes.c_float)()
        st = _lib.lib.clremat_api_run_weight(owner.handle, i, ctypes.byref(name), ctypes.byref(rank),
                                             ctypes.byref(dims), ctypes.byref(data))
        if st != _lib.OK:
            raise _lib.error(st)
        shape = tuple(dims[d] for d in range(rank.value))
        count = int(np.prod(shape)) if shape else 1
        # no copy: a view of the library's float32 parameters, which stay alive as long as it does
        buf = (ctypes.c_float * count).from_address(ctypes.addressof(data.contents))
        buf._owner = owner
        weights[name.value.decode()] = np.frombuffer(buf, dtype=np.float32).reshape(shape)
    losses = np.array([np.nan if v is None else v for v in report["losses"]], dtype=np.float32)
    return TrainResult(report, losses, weights)


def compare(model, devices=None, remat=None, batch=None, steps=None, warmup=None, **options):
    """The acceptance protocol over devices and remat modes (`clremat compare --json`);
    remat: modes separated by commas or a list; returns the report (a dict with "runs")."""
    path = model.path if isinstance(model, Model) else os.fspath(model)
    if isinstance(remat, (list, tuple)):
        remat = ",".join(remat)
    if isinstance(devices, (list, tuple)):
        devices = ",".join(devices)
    opts = _options(devices=devices, remat=remat, batch=batch, steps=steps, warmup=warmup, **options)
    return json.loads(_lib.call_json(_lib.lib.clremat_api_compare, _path(path), opts))


def fit(model, memory=None, remat=None, device=None, batch=None, **options):
    """Will a training step fit each memory size, with which remat mode, how fast, and the
    largest batch that fits (`clremat fit --json`). memory: a byte count, a text such as
    "8GiB", or a list of them (None: the device's memory); remat: modes separated by commas
    or a list; device: step times from that device (without it and with memory given, no
    step times). Other options: optimizer, max_batch, steps, calibration_batch, accumulate
    (a K or a list), offload, recalibrate. Returns the report (a dict with "sizes")."""
    path = model.path if isinstance(model, Model) else os.fspath(model)
    if isinstance(remat, (list, tuple)):
        remat = ",".join(remat)
    opts = _options(memory=memory, remat=remat, device=device, batch=batch, **options)
    return json.loads(_lib.call_json(_lib.lib.clremat_api_fit, _path(path), opts))
