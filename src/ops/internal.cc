// Internal ops (domain "kiln").
//
// FileConstant: a constant whose bytes live in an external weight file; its
// attributes are ops/file_constant.h. Created by the compiler
// (ExternalizeConstants) and, with a file_id, by Graph::AddFileConstant; an
// ONNX model may not contain it (the importer refuses Kiln's domain).
//
// MemcpyToHost / MemcpyFromHost: copies between the target device's memory
// and host memory, inserted by the placement pass around nodes that run on
// the CPU because the target lacks their kernel. One input, one output of
// the same type and shape; the output lives in host memory (ToHost) or in
// the device's (FromHost). They run on the target device.
//
// Gelu: the exact (erf) GELU, x * 0.5 * (1 + erf(x / sqrt(2))), one float32
// input and output; with approximate="tanh" (format version 11) its tanh
// approximation, x * 0.5 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Created by the fuse-gelu pass from the nodes exporters write for them.
#include "ops/common_infer.h"
#include "ops/file_constant.h"

namespace kiln::ops {
namespace {

Status InferFileConstant(InferContext& c) {
  // Every attribute is checked by the one decoder.
  KILN_ASSIGN_OR_RETURN(weights::WeightRef r, DecodeFileConstant(c.node()));
  c.SetOutput(0, r.dtype, r.shape);
  return Status::Ok();
}

// kiln.Gelu: `approximate` is absent, "none" or "tanh" (a string).
Status InferGelu(InferContext& c) {
  if (const ir::Attribute* a = c.node().FindAttr("approximate")) {
    if (a->kind != ir::Attribute::Kind::kString || (a->s != "none" && a->s != "tanh")) {
      return Error(StatusCode::kInvalidArgument, c.node().Describe(),
                   ": attribute 'approximate' must be the string \"none\" or \"tanh\", found ",
                   a->kind == ir::Attribute::Kind::kString ? StrCat("\"", a->s, "\"") : std::string("another kind"));
    }
  }
  return InferSameAsInput(c);
}

}  // namespace

void RegisterInternalOps(OpRegistry& r) {
  OpDef d;
  d.type = "FileConstant";
  d.domain = "kiln";
  d.versions = {1};
  d.min_inputs = d.max_inputs = 0;
  d.attributes = {"location", "file_id", "offset", "length", "dtype", "shape"};
  d.infer = InferFileConstant;
  r.Register(d);
  {
    OpDef g;  // kiln.Gelu: erf or tanh GELU, fused by the fuse-gelu pass
    g.type = "Gelu";
    g.domain = "kiln";
    g.versions = {1};
    g.input_types = {DType::kFloat32};
    g.attributes = {"approximate"};
    g.infer = InferGelu;
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
