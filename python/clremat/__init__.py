"""clremat: Python bindings of libclremat, an OpenCL training backend with
rematerialization and a planner that predicts device-memory peaks to the byte.

    import clremat
    m = clremat.Model("models/mlp_deep.json")
    print(m.plan(remat="full", batch=64).predicted_peak_bytes)

See docs/python.md. The library is loaded with ctypes (_lib.py)."""

from .errors import DeviceNotFoundError, Error, InvalidArgumentError, ModelError, OutOfMemoryError
from .core import Device, Model, Plan, TrainResult, compare, devices, fit

__all__ = ["Device", "DeviceNotFoundError", "Error", "InvalidArgumentError", "Model", "ModelError",
           "OutOfMemoryError", "Plan", "TrainResult", "compare", "devices", "fit"]
