#include "backends/cuda/ew_params.h"

#include <map>

#include "common/checked.h"
#include "ops/fused_attrs.h"
#include "ops/window.h"

namespace kiln::cuda {
namespace {

const std::map<std::string, int>& UnaryOps() {
  static const auto* m = new std::map<std::string, int>{
      {"Relu", kKilnRelu},         {"Sigmoid", kKilnSigmoid},     {"Tanh", kKilnTanh},
      {"Abs", kKilnAbs},           {"Neg", kKilnNeg},             {"Exp", kKilnExp},
      {"Log", kKilnLog},           {"Sqrt", kKilnSqrt},           {"Reciprocal", kKilnReciprocal},
      {"Erf", kKilnErf},           {"Floor", kKilnFloor},         {"Ceil", kKilnCeil},
      {"Softplus", kKilnSoftplus}, {"Softsign", kKilnSoftsign},   {"LeakyRelu", kKilnLeakyRelu},
      {"Elu", kKilnElu},           {"Selu", kKilnSelu},           {"HardSigmoid", kKilnHardSigmoid},
      {"HardSwish", kKilnHardSwish}, {"Sin", kKilnSin},           {"Cos", kKilnCos}};
  return *m;
}

const std::map<std::string, int>& BinaryOps() {
  static const auto* m = new std::map<std::string, int>{{"Add", kKilnAdd}, {"Sub", kKilnSub}, {"Mul", kKilnMul},
                                                         {"Div", kKilnDiv}, {"Pow", kKilnPow}, {"Max", kKilnMax},
                                                         {"Min", kKilnMin}, {"PRelu", kKilnPRelu}};
  return *m;
}

const std::map<std::string, int>& CompareOps() {
  static const auto* m = new std::map<std::string, int>{{"Less", kKilnLess}, {"LessOrEqual", kKilnLessOrEqual},
                                                         {"Greater", kKilnGreater}, {"GreaterOrEqual", kKilnGreaterOrEqual},
                                                         {"Equal", kKilnEqual}};
  return *m;
}

bool AllFloat32(const std::vector<DType>& dtypes) {
  if (dtypes.empty()) return false;
  for (DType t : dtypes) {
    if (t != DType::kFloat32) return false;
  }
  return true;
}

KilnEwParams Blank() {
  KilnEwParams p{};
  p.alpha = p.beta = p.gamma = 0.f;
  return p;
}

}  // namespace

// Cast's element types on CUDA (KilnCastType), -1 for the others.
int CastCode(DType t) {
  switch (t) {
    case DType::kFloat32: return kKilnCastF32;
    case DType::kInt32: return kKilnCastI32;
    case DType::kInt64: return kKilnCastI64;
    case DType::kBool: return kKilnCastBool;
    case DType::kUInt8: return kKilnCastU8;
    case DType::kInt8: return kKilnCastI8;
    default: return -1;
  }
}

EwKind ElementwiseKind(const std::string& op_type, const std::string& domain, const std::vector<DType>& dtypes) {
  if (domain == "kiln") {
    if (op_type == ir::kMemcpyToHost || op_type == ir::kMemcpyFromHost) return EwKind::kCopy;
    if (op_type == "Gelu" && AllFloat32(dtypes) && dtypes.size() == 1) return EwKind::kUnary;
    return EwKind::kNone;
  }
  if (!domain.empty()) return EwKind::kNone;
  if (op_type == "Identity" && dtypes.size() == 1 && dtypes[0] != DType::kUndefined && dtypes[0] != DType::kString) {
    return EwKind::kCopy;
  }
  // Views (the memory plan usually aliases them: no kernel runs; where it
  // cannot, the bytes are copied). Extra inputs are int64 shapes or axes.
  if ((op_type == "Reshape" || op_type == "Flatten" || op_type == "Squeeze" || op_type == "Unsqueeze") &&
      !dtypes.empty() && dtypes[0] != DType::kUndefined && dtypes[0] != DType::kString) {
    for (std::size_t i = 1; i < dtypes.size(); ++i) {
      if (dtypes[i] != DType::kInt64 && dtypes[i] != DType::kUndefined) return EwKind::kNone;
    }
    return EwKind::kCopy;
  }
  if (op_type == "Transpose" && dtypes.size() == 1) {
    const std::size_t b = DTypeSize(dtypes[0]);
    return (b == 1 || b == 2 || b == 4 || b == 8) && dtypes[0] != DType::kString ? EwKind::kTranspose : EwKind::kNone;
  }
  if (op_type == "Where" && dtypes.size() == 3 && dtypes[0] == DType::kBool && dtypes[1] == dtypes[2] &&
      dtypes[1] != DType::kString) {
    const std::size_t b = DTypeSize(dtypes[1]);
    return b == 1 || b == 2 || b == 4 || b == 8 ? EwKind::kWhere : EwKind::kNone;
  }
  if (CompareOps().count(op_type) && dtypes.size() == 2 && dtypes[0] == dtypes[1] &&
      (dtypes[0] == DType::kFloat32 || dtypes[0] == DType::kInt64)) {
    return EwKind::kCompare;
  }
  if (op_type == "Gather" && dtypes.size() == 2 && dtypes[0] != DType::kString && dtypes[0] != DType::kUndefined &&
      (dtypes[1] == DType::kInt64 || dtypes[1] == DType::kInt32)) {
    const std::size_t b = DTypeSize(dtypes[0]);
    return b == 1 || b == 2 || b == 4 || b == 8 ? EwKind::kGather : EwKind::kNone;
  }
  if (op_type == "Cast" && dtypes.size() == 1 && CastCode(dtypes[0]) >= 0) return EwKind::kCast;
  if ((op_type == "MaxPool" || op_type == "AveragePool" || op_type == "GlobalAveragePool" ||
       op_type == "GlobalMaxPool") &&
      dtypes.size() == 1 && dtypes[0] == DType::kFloat32) {
    return EwKind::kPool;
  }
  if (op_type == "Softmax" && dtypes.size() == 1 && dtypes[0] == DType::kFloat32) {
    return EwKind::kSoftmax;
  }
  if (op_type == "LayerNormalization" && (dtypes.size() == 2 || dtypes.size() == 3) && dtypes[0] == DType::kFloat32 &&
      dtypes[1] == DType::kFloat32 && (dtypes.size() == 2 || dtypes[2] == DType::kFloat32 || dtypes[2] == DType::kUndefined)) {
    return EwKind::kLayerNorm;
  }
  if (!AllFloat32(dtypes)) return EwKind::kNone;
  if (dtypes.size() == 1 && UnaryOps().count(op_type)) return EwKind::kUnary;
  if (dtypes.size() == 2 && BinaryOps().count(op_type)) return EwKind::kBinary;
  return EwKind::kNone;
}

Result<KilnEwParams> CastParams(const ir::Node& node, const Shape& x, DType from, int* types) {
  const ir::Attribute* to_attr = node.FindAttr("to");
  const int from_code = CastCode(from);
  const int to_code = to_attr ? CastCode(static_cast<DType>(node.GetInt("to", 0))) : -1;
  if (from_code < 0 || to_code < 0) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": no CUDA Cast from ", DTypeName(from), " to ",
                 to_attr ? DTypeName(static_cast<DType>(node.GetInt("to", 0))) : std::string("(no 'to')"));
  }
  *types = from_code * 16 + to_code;
  KilnEwParams p = Blank();
  KILN_ASSIGN_OR_RETURN(p.n, CheckedNumElements(x, node.Describe() + " input"));
  p.rank = 1;
  p.dims[0] = p.n;
  p.contiguous = 1;
  return p;
}

Result<KilnEwParams> UnaryParams(const ir::Node& node, const Shape& out) {
  KilnEwParams p = Blank();
  KILN_ASSIGN_OR_RETURN(p.n, CheckedNumElements(out, node.Describe() + " output"));
  p.rank = 1;
  p.dims[0] = p.n;
  p.contiguous = 1;
  const std::string& t = node.op_type();
  if (node.domain() == "kiln" && t == "Gelu") {
    const std::string approx = node.GetString("approximate", "none");
    if (approx != "none" && approx != "tanh") {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": approximate '", approx, "' is not none or tanh");
    }
    p.op = approx == "tanh" ? kKilnGeluTanh : kKilnGeluErf;
    return p;
  }
  auto it = UnaryOps().find(t);
  if (it == UnaryOps().end() || !node.domain().empty()) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": no CUDA elementwise kernel for ", t);
  }
  p.op = it->second;
  if (t == "LeakyRelu") p.alpha = node.GetFloat("alpha", 0.01f);
  if (t == "Elu") p.alpha = node.GetFloat("alpha", 1.0f);
  if (t == "HardSigmoid") {
    p.alpha = node.GetFloat("alpha", 0.2f);
    p.beta = node.GetFloat("beta", 0.5f);
  }
  if (t == "Selu") {
    const bool v1 = node.since_version() < 6;  // as the CPU kernel reads it
    p.alpha = node.GetFloat("alpha", v1 ? 1.6732f : 1.67326319217681884765625f);
    p.gamma = node.GetFloat("gamma", v1 ? 1.0507f : 1.05070102214813232421875f);
  }
  return p;
}

Status FillBroadcast3(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b, const Shape& c,
                      KilnEwParams* pp) {
  KilnEwParams& p = *pp;
  if (out.size() > KILN_EW_MAX_RANK || a.size() > out.size() || b.size() > out.size() || c.size() > out.size()) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": CUDA kernels broadcast up to ",
                 KILN_EW_MAX_RANK, " dims with inputs of no higher rank than the output (output ",
                 ShapeToString(out), ", inputs ", ShapeToString(a), ", ", ShapeToString(b), ", ", ShapeToString(c), ")");
  }
  p.contiguous = a == out && b == out && c == out;
  p.rank = static_cast<int>(out.size());
  const Shape* ins[3] = {&a, &b, &c};
  long long* strides[3] = {p.sa, p.sb, p.sc};
  for (int k = 0; k < 3; ++k) {
    const Shape& s = *ins[k];
    const std::size_t lead = out.size() - s.size();  // numpy: shapes aligned at the right
    long long stride = 1;
    for (std::size_t d = out.size(); d-- > 0;) {
      p.dims[d] = out[d];
      if (d < lead) {
        strides[k][d] = 0;
        continue;
      }
      const std::int64_t in = s[d - lead];
      if (in == out[d]) {
        strides[k][d] = out[d] == 1 ? 0 : stride;
        std::int64_t next = 0;
        if (!CheckedMul(stride, in, &next)) {
          return Error(StatusCode::kOutOfRange, node.Describe(), ": input ", k, " shape ", ShapeToString(s),
                       " overflows int64");
        }
        stride = next;
      } else if (in == 1) {
        strides[k][d] = 0;
      } else {
        return Error(StatusCode::kInvalidArgument, node.Describe(), ": input ", k, " shape ", ShapeToString(s),
                     " does not broadcast to the output ", ShapeToString(out));
      }
    }
  }
  if (p.rank == 0) {  // scalars: one element
    p.rank = 1;
    p.dims[0] = 1;
    p.sa[0] = p.sb[0] = p.sc[0] = 0;
  }
  return Status::Ok();
}

Status FillBroadcast(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b, KilnEwParams* p) {
  // c = a scalar: it never limits the rank, and its strides stay 0.
  KILN_RETURN_IF_ERROR(FillBroadcast3(node, out, a, b, {}, p));
  p->contiguous = a == out && b == out;
  return Status::Ok();
}

Result<KilnEwParams> BinaryParams(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b) {
  KilnEwParams p = Blank();
  auto it = BinaryOps().find(node.op_type());
  if (it == BinaryOps().end() || !node.domain().empty()) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": no CUDA elementwise kernel for ", node.op_type());
  }
  p.op = it->second;
  KILN_ASSIGN_OR_RETURN(p.n, CheckedNumElements(out, node.Describe() + " output"));
  KILN_RETURN_IF_ERROR(FillBroadcast(node, out, a, b, &p));
  return p;
}

namespace {
Result<int> AxisOf(const ir::Node& node, std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= std::max<std::int64_t>(r, 1)) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": axis ", axis, " is out of range for rank ", rank);
  }
  return static_cast<int>(axis < 0 ? axis + r : axis);
}
std::int64_t Prod(const Shape& s, std::size_t b, std::size_t e) {
  std::int64_t p = 1;
  for (std::size_t i = b; i < e && i < s.size(); ++i) p *= s[i];
  return p;
}
}  // namespace

Result<KilnRowParams> SoftmaxParams(const ir::Node& node, const Shape& x) {
  KILN_RETURN_IF_ERROR(CheckedNumElements(x, node.Describe() + " input").status());
  KilnRowParams p{};
  p.log = 0;  // (the kernel can; Kiln's op set has no LogSoftmax yet)
  const bool v13 = node.since_version() >= 13;
  KILN_ASSIGN_OR_RETURN(int axis, AxisOf(node, node.GetInt("axis", v13 ? -1 : 1), x.size()));
  const std::size_t a = static_cast<std::size_t>(axis);
  if (x.empty()) {  // a scalar: one row of one
    p.outer = p.len = p.inner = 1;
  } else if (v13) {
    p.outer = Prod(x, 0, a);
    p.len = x[a];
    p.inner = Prod(x, a + 1, x.size());
  } else {  // 2-D coercion: [prod(dims[:axis]), prod(dims[axis:])]
    p.outer = Prod(x, 0, a);
    p.len = Prod(x, a, x.size());
    p.inner = 1;
  }
  return p;
}

Result<KilnRowParams> LayerNormParams(const ir::Node& node, const Shape& x, const Shape& scale, bool has_bias,
                                      const Shape& bias, int num_outputs) {
  if (num_outputs != 1) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": LayerNormalization's Mean and InvStdDev outputs are not computed on CUDA");
  }
  KILN_RETURN_IF_ERROR(CheckedNumElements(x, node.Describe() + " input").status());
  KILN_ASSIGN_OR_RETURN(int axis, AxisOf(node, node.GetInt("axis", -1), x.size()));
  KilnRowParams p{};
  p.outer = Prod(x, 0, static_cast<std::size_t>(axis));
  p.len = Prod(x, static_cast<std::size_t>(axis), x.size());
  p.inner = 1;
  p.epsilon = node.GetFloat("epsilon", 1e-5f);
  p.has_bias = has_bias;
  p.y_index = 3;  // set by the kernel from the inputs' count
  auto stride_of = [&](const Shape& s, const char* what, int* stride) -> Status {
    const std::int64_t n = Prod(s, 0, s.size());
    if (n == p.len) {
      *stride = 1;
    } else if (n == 1) {
      *stride = 0;
    } else {
      return Error(StatusCode::kUnimplemented, node.Describe(), ": ", what, " of shape ", ShapeToString(s),
                   " is neither the normalised shape's ", p.len, " elements nor one");
    }
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(stride_of(scale, "scale", &p.scale_stride));
  if (has_bias) KILN_RETURN_IF_ERROR(stride_of(bias, "B", &p.bias_stride));
  return p;
}

Result<KilnTransposeParams> TransposeParams(const ir::Node& node, const Shape& in, DType dtype) {
  KilnTransposeParams p{};
  if (in.size() > KILN_EW_MAX_RANK) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": Transpose of rank ", in.size(), " (CUDA: up to ",
                 KILN_EW_MAX_RANK, ")");
  }
  std::vector<std::int64_t> perm;
  if (const ir::Attribute* a = node.FindAttr("perm")) {
    perm = a->ints;
  } else {
    for (std::size_t i = in.size(); i-- > 0;) perm.push_back(static_cast<std::int64_t>(i));
  }
  if (perm.size() != in.size()) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": perm has ", perm.size(), " entries for rank ", in.size());
  }
  std::vector<long long> stride(in.size(), 1);
  for (std::size_t d = in.size(); d-- > 1;) stride[d - 1] = stride[d] * in[d];
  std::vector<bool> seen(in.size(), false);
  for (std::size_t d = 0; d < perm.size(); ++d) {
    const std::int64_t q = perm[d] < 0 ? perm[d] + static_cast<std::int64_t>(in.size()) : perm[d];
    if (q < 0 || q >= static_cast<std::int64_t>(in.size()) || seen[static_cast<std::size_t>(q)]) {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": perm is not a permutation of 0..", in.size() - 1);
    }
    seen[static_cast<std::size_t>(q)] = true;
    p.out_dims[d] = in[static_cast<std::size_t>(q)];
    p.in_strides[d] = stride[static_cast<std::size_t>(q)];
  }
  p.rank = static_cast<int>(in.size());
  KILN_ASSIGN_OR_RETURN(p.n, CheckedNumElements(in, node.Describe() + " input"));
  p.elem_bytes = static_cast<int>(DTypeSize(dtype));
  if (p.rank == 0) {
    p.rank = 1;
    p.out_dims[0] = 1;
    p.in_strides[0] = 0;
  }
  return p;
}

Result<KilnEwParams> WhereParams(const ir::Node& node, const Shape& out, const Shape& cond, const Shape& x,
                                 const Shape& y, DType dtype) {
  KilnEwParams p = Blank();
  KILN_ASSIGN_OR_RETURN(p.n, CheckedNumElements(out, node.Describe() + " output"));
  KILN_RETURN_IF_ERROR(FillBroadcast3(node, out, cond, x, y, &p));
  p.op = static_cast<int>(DTypeSize(dtype));
  return p;
}

Result<KilnEwParams> CompareParams(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b) {
  auto it = CompareOps().find(node.op_type());
  if (it == CompareOps().end() || !node.domain().empty()) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": no CUDA compare kernel for ", node.op_type());
  }
  KilnEwParams p = Blank();
  p.op = it->second;
  KILN_ASSIGN_OR_RETURN(p.n, CheckedNumElements(out, node.Describe() + " output"));
  KILN_RETURN_IF_ERROR(FillBroadcast(node, out, a, b, &p));
  return p;
}

Result<KilnPoolParams> PoolParams(const ir::Node& node, const Shape& x, const Shape& y, int num_outputs) {
  if (num_outputs != 1) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": MaxPool's Indices output is not computed on CUDA");
  }
  if (node.GetInt(ops::kNhwcAttr, 0) != 0) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": channels-last pooling is not on CUDA");
  }
  if (x.size() < 3 || x.size() > 5 || y.size() != x.size()) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": CUDA pooling takes 1 to 3 spatial dims, X has shape ",
                 ShapeToString(x));
  }
  KILN_RETURN_IF_ERROR(CheckedNumElements(x, node.Describe() + " input").status());
  KilnPoolParams p{};
  KILN_ASSIGN_OR_RETURN(p.n, CheckedNumElements(y, node.Describe() + " output"));
  const std::size_t sp = x.size() - 2, lead = 3 - sp;
  for (int d = 0; d < 3; ++d) {
    p.in[d] = p.out[d] = p.kern[d] = p.stride[d] = p.dil[d] = 1;
    p.pad_begin[d] = p.pad_end[d] = 0;
  }
  const bool global = node.op_type().rfind("Global", 0) == 0;
  const bool is_max = node.op_type() == "MaxPool" || node.op_type() == "GlobalMaxPool";
  p.mode = is_max ? kKilnPoolMax : node.GetInt("count_include_pad", 0) ? kKilnPoolAvgInclude : kKilnPoolAvgExclude;
  if (global) {
    for (std::size_t i = 0; i < sp; ++i) {
      p.in[lead + i] = p.kern[lead + i] = x[2 + i];
      p.out[lead + i] = 1;
    }
  } else {
    const std::vector<std::int64_t> kernel = node.GetInts("kernel_shape");
    if (kernel.size() != sp) {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": kernel_shape has ", kernel.size(), " values for ",
                   sp, " spatial dims");
    }
    KILN_ASSIGN_OR_RETURN(ops::Window win, ops::ComputeWindow(node, Shape(x.begin() + 2, x.end()), kernel, true));
    for (std::size_t i = 0; i < sp; ++i) {
      p.in[lead + i] = x[2 + i];
      p.out[lead + i] = win.out[i];
      p.kern[lead + i] = win.kernel[i];
      p.stride[lead + i] = win.strides[i];
      p.dil[lead + i] = win.dilations[i];
      p.pad_begin[lead + i] = win.pads_begin[i];
      p.pad_end[lead + i] = win.pads_end[i];
    }
  }
  for (std::size_t i = 0; i < sp; ++i) {
    if (y[2 + i] != p.out[lead + i] || y[0] != x[0] || y[1] != x[1]) {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": output ", ShapeToString(y),
                   " does not match the window over ", ShapeToString(x));
    }
  }
  return p;
}

Result<KilnGatherParams> GatherParams(const ir::Node& node, const Shape& data, DType dtype, const Shape& indices,
                                      DType index_type) {
  if (data.empty()) return Error(StatusCode::kInvalidArgument, node.Describe(), ": Gather of a scalar");
  KILN_ASSIGN_OR_RETURN(int axis, AxisOf(node, node.GetInt("axis", 0), data.size()));
  const std::size_t a = static_cast<std::size_t>(axis);
  KilnGatherParams p{};
  KILN_RETURN_IF_ERROR(CheckedNumElements(data, node.Describe() + " data").status());
  KILN_ASSIGN_OR_RETURN(p.n_idx, CheckedNumElements(indices, node.Describe() + " indices"));
  p.outer = Prod(data, 0, a);
  p.axis_len = data[a];
  p.inner = Prod(data, a + 1, data.size());
  std::int64_t n = 0;
  if (!CheckedMul(p.outer * p.inner, p.n_idx, &n)) {
    return Error(StatusCode::kOutOfRange, node.Describe(), ": Gather output overflows int64");
  }
  p.n = n;
  p.elem_bytes = static_cast<int>(DTypeSize(dtype));
  p.idx64 = index_type == DType::kInt64;
  return p;
}

}  // namespace kiln::cuda
