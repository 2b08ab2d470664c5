#include "backends/cuda/ew_params.h"

#include <map>

#include "common/checked.h"

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

EwKind ElementwiseKind(const std::string& op_type, const std::string& domain, const std::vector<DType>& dtypes) {
  if (domain == "kiln") {
    if (op_type == ir::kMemcpyToHost || op_type == ir::kMemcpyFromHost) return EwKind::kCopy;
    if (op_type == "Gelu" && AllFloat32(dtypes) && dtypes.size() == 1) return EwKind::kUnary;
    return EwKind::kNone;
  }
  if (!domain.empty()) return EwKind::kNone;
  if (op_type == "Identity" && dtypes.size() == 1 && dtypes[0] != DType::kUndefined) return EwKind::kCopy;
  if (!AllFloat32(dtypes)) return EwKind::kNone;
  if (dtypes.size() == 1 && UnaryOps().count(op_type)) return EwKind::kUnary;
  if (dtypes.size() == 2 && BinaryOps().count(op_type)) return EwKind::kBinary;
  return EwKind::kNone;
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
    const bool v1 = node.since_version() > 0 && node.since_version() < 6;
    p.alpha = node.GetFloat("alpha", v1 ? 1.6732f : 1.67326319217681884765625f);
    p.gamma = node.GetFloat("gamma", v1 ? 1.0507f : 1.05070102214813232421875f);
  }
  return p;
}

Status FillBroadcast(const ir::Node& node, const Shape& out, const Shape& a, const Shape& b, KilnEwParams* pp) {
  KilnEwParams& p = *pp;
  if (out.size() > KILN_EW_MAX_RANK || a.size() > out.size() || b.size() > out.size()) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": CUDA kernels broadcast up to ",
                 KILN_EW_MAX_RANK, " dims with inputs of no higher rank than the output (output ",
                 ShapeToString(out), ", inputs ", ShapeToString(a), " and ", ShapeToString(b), ")");
  }
  p.contiguous = a == out && b == out;
  p.rank = static_cast<int>(out.size());
  const Shape* ins[2] = {&a, &b};
  long long* strides[2] = {p.sa, p.sb};
  for (int k = 0; k < 2; ++k) {
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
    p.sa[0] = p.sb[0] = 0;
  }
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

}  // namespace kiln::cuda
