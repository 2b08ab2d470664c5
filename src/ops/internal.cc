// Internal ops (domain "kiln").
//
// FileConstant: a constant whose bytes live in an external weight file.
// Attributes: location (file, relative to the weight directory), offset and
// length (bytes), dtype (ONNX element type number), shape; optional
// kiln.sha256 (content hash). No inputs, one output. Created only by the
// compiler (ExternalizeConstants); a model may not contain it (the ONNX
// importer refuses Kiln's domain).
//
// MemcpyToHost / MemcpyFromHost: copies between the target device's memory
// and host memory, inserted by the placement pass around nodes that run on
// the CPU because the target lacks their kernel. One input, one output of
// the same type and shape; the output lives in host memory (ToHost) or in
// the device's (FromHost). They run on the target device.
//
// Gelu: the exact (erf) GELU, x * 0.5 * (1 + erf(x / sqrt(2))), one float32
// input and output; created by the fuse-gelu pass from the five nodes
// exporters write for it.
#include "ops/common_infer.h"

namespace kiln::ops {
namespace {

Status InferFileConstant(InferContext& c) {
  const ir::Node& n = c.node();
  for (const char* a : {"location", "offset", "length", "dtype", "shape"}) {
    if (!n.HasAttr(a)) return c.Fail("missing attribute '", a, "'");
  }
  const auto dtype = static_cast<DType>(n.GetInt("dtype", 0));
  if (!DTypeSupported(dtype)) return c.Fail("attribute 'dtype' = ", n.GetInt("dtype", 0), " is not a supported type");
  const Shape shape = n.GetInts("shape");
  const std::int64_t offset = n.GetInt("offset", -1), length = n.GetInt("length", -1);
  if (offset < 0 || length < 0) return c.Fail("attributes 'offset'/'length' must be >= 0");
  KILN_ASSIGN_OR_RETURN(const std::int64_t bytes, CheckedTensorBytes(dtype, shape, StrCat(n.Describe(), ": attribute 'shape'")));
  if (bytes != length) {
    return c.Fail("attribute 'length' = ", length, " does not match dtype ", DTypeName(dtype), " x shape ",
                  ShapeToString(shape), " = ", bytes, " bytes");
  }
  c.SetOutput(0, dtype, shape);
  return Status::Ok();
}

}  // namespace

void RegisterInternalOps(OpRegistry& r) {
  OpDef d;
  d.type = "FileConstant";
  d.domain = "kiln";
  d.versions = {1};
  d.min_inputs = d.max_inputs = 0;
  d.attributes = {"location", "offset", "length", "dtype", "shape"};
  d.infer = InferFileConstant;
  r.Register(d);
  {
    OpDef g;  // kiln.Gelu: x * 0.5 * (1 + erf(x / sqrt(2))), fused by the fuse-gelu pass
    g.type = "Gelu";
    g.domain = "kiln";
    g.versions = {1};
    g.input_types = {DType::kFloat32};
    g.infer = InferSameAsInput;
    r.Register(g);
  }
  for (const char* copy : {ir::kMemcpyToHost, ir::kMemcpyFromHost}) {
    OpDef c;
    c.type = copy;
    c.domain = "kiln";
    c.versions = {1};
    c.infer = InferSameAsInput;
    r.Register(c);
  }
}

}  // namespace kiln::ops
