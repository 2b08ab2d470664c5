"""Kiln: compile ONNX models to .kiln files and run them.

    import kiln, numpy as np
    kiln.compile("resnet18.onnx", "out/resnet18.kiln", external_weight=2)
    m = kiln.load("out/resnet18.kiln", threads=2)
    y = m.run({"input": np.random.rand(1, 3, 224, 224).astype(np.float32)})
    print(m.inputs, m.outputs, m.summary().external_weights)

Inputs that are C-contiguous arrays of the input's dtype are used in place,
outputs are arrays Kiln writes directly (pass `outputs=` to reuse your own);
the GIL is released while a model runs; errors raise kiln.Error subclasses
(InvalidArgument, NotFound, Unimplemented, IoError, Corrupt, OutOfRange,
Internal) carrying Kiln's message. See docs/python.md.
"""
from . import _kiln
from ._kiln import (Corrupt, Error, ExternalWeight, Internal, InvalidArgument, IoError, Model, NotFound,
                    OutOfRange, Summary, TensorInfo, Unimplemented, __version__, custom_op_search_dirs,
                    load_custom_op_library, load_custom_op_packages, registered_custom_op)

__all__ = ["compile", "load", "load_bytes", "Session", "Model", "Summary", "TensorInfo", "ExternalWeight", "Error",
           "InvalidArgument", "NotFound", "Unimplemented", "IoError", "Corrupt", "OutOfRange", "Internal",
           "load_custom_op_packages", "load_custom_op_library", "custom_op_search_dirs", "registered_custom_op",
           "__version__"]


def _load_args(threads=1, device="", weight_dir=None, trust_weight_dir=False, weight_load="auto",
               verify_weights=False, weights=None, weight_files=None, max_plans=8, max_plan_bytes=0):
    a = _kiln._LoadArgs()
    a.max_plans = int(max_plans)
    a.max_plan_bytes = int(max_plan_bytes)
    a.threads = int(threads)
    a.device = device or ""
    a.weight_dir = None if weight_dir is None else str(weight_dir)
    a.trust_weight_dir = bool(trust_weight_dir)
    a.weight_load = weight_load
    a.verify_weights = bool(verify_weights)
    a.weights = None if weights is None else dict(weights)
    a.weight_files = None if weight_files is None else dict(weight_files)
    return a


def compile(model, output, external_weight=0, external_weight_dir=None, input_shapes=None, target="cpu",
            model_name=None, input_spec=None):
    """Compiles ONNX file `model` into `output` (written atomically), with
    external weights (0 embedded, 1 one file per weight, 2 one combined file)
    in `external_weight_dir` (default: <output dir>/weight). `input_shapes`
    fixes dims: {"input": [1, 3, 224, 224]}. `input_spec` takes the CLI's
    --input-shape grammar: ranges ("ids:1..8,1..512") and gears
    ("ids:1,128|4,512"). Custom-op packages under $KILN_CUSTOM_OP_PATH are
    loaded first. Returns a Summary."""
    shapes = None if input_shapes is None else {k: [int(d) for d in v] for k, v in input_shapes.items()}
    return _kiln.compile(str(model), str(output), int(external_weight),
                         None if external_weight_dir is None else str(external_weight_dir), shapes, target,
                         model_name, input_spec)


def load(path, threads=1, device="", weight_dir=None, trust_weight_dir=False, weight_load="auto",
         verify_weights=False, weights=None, weight_files=None, max_plans=8, max_plan_bytes=0):
    """Loads a .kiln file. `device`: "cpu" (default: $KILN_DEVICE, else cpu)
    or "sim[:options]". `weight_dir`: where external weights are (default:
    the directory the file records, else <model dir>/weight);
    `trust_weight_dir`: use a recorded directory outside the model's own.
    `weight_load`: auto, map, copy or staged. `weights`: {file name: buffer}
    of weight files you already hold in memory (kept alive by the model).
    `weight_files`: {file_id: path or buffer} for weights made by the C++
    graph API's AddFileConstant, resolved at load. `max_plans`, `max_plan_bytes`:
    a model with symbolic dims or shape inputs keeps at most this many plans
    (one per input signature) and this many arena bytes in all (0: no bound),
    dropping the least recently used."""
    return _kiln.load(str(path), _load_args(threads, device, weight_dir, trust_weight_dir, weight_load,
                                            verify_weights, weights, weight_files, max_plans, max_plan_bytes))


def load_bytes(data, threads=1, device="", weight_dir=None, weight_load="auto", verify_weights=False, weights=None,
               weight_files=None):
    """Loads a .kiln image held in memory (bytes or any buffer; copied)."""
    return _kiln.load_bytes(data, _load_args(threads, device, weight_dir, False, weight_load, verify_weights,
                                             weights, weight_files))


class Session:
    """Models and graphs sharing external weights (each weight loaded once
    per device and content). Graphs are ONNX files added, compiled (with the
    session's external-weight mode), loaded and run by id."""

    def __init__(self, external_weight=0, external_weight_dir=None, threads=1, device="", weight_dir=None,
                 weights=None):
        self._s = _kiln.Session(int(external_weight),
                                None if external_weight_dir is None else str(external_weight_dir),
                                _load_args(threads, device, weight_dir, False, "auto", False, weights))

    def load(self, path, **kw):
        return self._s.load(str(path), _load_args(**kw))

    def add_graph(self, onnx_path, input_shapes=None):
        return self._s.add_graph(str(onnx_path), input_shapes)

    def compile_graph(self, graph_id):
        self._s.compile_graph(graph_id)

    def load_graph(self, graph_id):
        self._s.load_graph(graph_id)

    def run_graph(self, graph_id, inputs):
        return self._s.run_graph(graph_id, inputs)

    def remove_graph(self, graph_id):
        self._s.remove_graph(graph_id)

    def graph_summary(self, graph_id):
        return self._s.graph_summary(graph_id)

    def weight_stats(self):
        return self._s.weight_stats()
