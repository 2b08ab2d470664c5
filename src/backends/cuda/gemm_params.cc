#include "backends/cuda/gemm_params.h"

#include <algorithm>
#include <climits>

#include "backends/cuda/ew_params.h"
#include "common/checked.h"

namespace kiln::cuda {
namespace {

Status CheckInt(const ir::Node& node, const GemmPlan& p) {
  for (long long v : {p.m, p.n, p.k, p.batch, p.ld_first, p.ld_second, p.ld_out}) {
    if (v > INT_MAX) {
      return Error(StatusCode::kUnimplemented, node.Describe(), ": a GEMM dimension of ", v,
                   " exceeds cuBLAS's int range");
    }
  }
  if (p.k == 0 && p.m > 0 && p.n > 0) {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": an empty reduction (K = 0) is not run on CUDA");
  }
  return Status::Ok();
}

// Row-major M x K (or K x M when trans) times K x N (or N x K).
void SetProduct(GemmPlan& p, long long M, long long N, long long K, bool ta, bool tb) {
  p.first_t = tb;
  p.second_t = ta;
  p.m = N;
  p.n = M;
  p.k = K;
  p.ld_first = tb ? K : N;
  p.ld_second = ta ? M : K;
  p.ld_out = N;
  p.a_mat = M * K;
  p.b_mat = K * N;
  p.y_mat = M * N;
}

// Where every operand's matrices are evenly spaced over the batch, the plan
// runs as one strided GEMM: A's batch folded into M where B has no batch
// dims (A's rows are then one M*batch x K matrix, Y's one M*batch x N), else
// per operand a stride of one matrix (its batch dims are the output's) or 0
// (all its batch dims are 1).
void SetStrided(GemmPlan& p, const Shape& ob, const Shape& ab, const Shape& bb, bool a_promoted) {
  if (p.batch > 1 && bb.empty() && !a_promoted && !p.second_t && p.batch * p.n <= INT_MAX) {
    p.n *= p.batch;  // cuBLAS's n is M
    p.y_mat *= p.batch;
    p.a_mat *= p.batch;
    p.batch = 1;
    p.batch_bcast.n = 1;
  }
  auto stride = [&](const Shape& s, long long mat, long long* out) {
    Shape padded(ob.size() - s.size(), 1);
    padded.insert(padded.end(), s.begin(), s.end());
    if (padded == ob) {
      *out = mat;
      return true;
    }
    if (std::all_of(s.begin(), s.end(), [](std::int64_t d) { return d == 1; })) {
      *out = 0;
      return true;
    }
    return false;
  };
  if (p.batch == 1) {
    p.strided = true;
    return;
  }
  p.strided = stride(ab, p.a_mat, &p.stride_second) && stride(bb, p.b_mat, &p.stride_first);
  p.stride_out = p.y_mat;
}

}  // namespace

Result<GemmPlan> MatMulPlan(const ir::Node& node, const Shape& a, const Shape& b, const Shape& out) {
  if (a.empty() || b.empty()) return Error(StatusCode::kInvalidArgument, node.Describe(), ": MatMul of a scalar");
  Shape a2 = a, b2 = b;
  if (a2.size() == 1) a2.insert(a2.begin(), 1);
  if (b2.size() == 1) b2.push_back(1);
  const long long M = a2[a2.size() - 2], K = a2.back(), N = b2.back();
  if (b2[b2.size() - 2] != K) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": MatMul of ", ShapeToString(a), " and ",
                 ShapeToString(b), ": inner dims differ");
  }
  const Shape ab(a2.begin(), a2.end() - 2), bb(b2.begin(), b2.end() - 2);
  Shape ob = ab.size() >= bb.size() ? ab : bb;
  for (std::size_t i = 0; i < ob.size(); ++i) {  // numpy broadcast of the batch dims
    const std::size_t ia = i + ab.size() - ob.size(), ib = i + bb.size() - ob.size();
    const long long da = i + ab.size() >= ob.size() ? ab[ia] : 1;
    const long long db = i + bb.size() >= ob.size() ? bb[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      return Error(StatusCode::kInvalidArgument, node.Describe(), ": MatMul batch dims of ", ShapeToString(a),
                   " and ", ShapeToString(b), " do not broadcast");
    }
    ob[i] = da == 1 ? db : da;
  }
  GemmPlan p;
  SetProduct(p, M, N, K, false, false);
  KILN_ASSIGN_OR_RETURN(p.batch, CheckedNumElements(ob, node.Describe() + " batch"));
  KILN_RETURN_IF_ERROR(FillBroadcast(node, ob, ab, bb, &p.batch_bcast));
  p.batch_bcast.n = p.batch;
  std::int64_t out_n = 0, want_n = 0;
  KILN_ASSIGN_OR_RETURN(out_n, CheckedNumElements(out, node.Describe() + " output"));
  if (!CheckedMul(p.batch, M * N, &want_n) || out_n != want_n) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": output ", ShapeToString(out), " is not ",
                 ShapeToString(a), " x ", ShapeToString(b));
  }
  SetStrided(p, ob, ab, bb, a.size() == 1);
  KILN_RETURN_IF_ERROR(CheckInt(node, p));
  return p;
}

Result<GemmPlan> GemmOpPlan(const ir::Node& node, const Shape& a, const Shape& b, bool has_c, const Shape& c,
                            const Shape& out) {
  if (a.size() != 2 || b.size() != 2 || out.size() != 2) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": Gemm needs 2-D A, B and Y");
  }
  const bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  const long long M = ta ? a[1] : a[0], K = ta ? a[0] : a[1];
  const long long N = tb ? b[0] : b[1], Kb = tb ? b[1] : b[0];
  if (K != Kb || out[0] != M || out[1] != N) {
    return Error(StatusCode::kInvalidArgument, node.Describe(), ": Gemm of ", ShapeToString(a), " and ",
                 ShapeToString(b), " (transA ", ta, ", transB ", tb, ") cannot give ", ShapeToString(out));
  }
  GemmPlan p;
  SetProduct(p, M, N, K, ta, tb);
  p.alpha = node.GetFloat("alpha", 1.f);
  p.beta = node.GetFloat("beta", 1.f);
  p.batch = 1;
  KILN_RETURN_IF_ERROR(FillBroadcast(node, {}, {}, {}, &p.batch_bcast));
  p.batch_bcast.n = 1;
  p.has_bias = has_c && p.beta != 0.f;
  if (p.has_bias) {
    KILN_RETURN_IF_ERROR(FillBroadcast(node, out, out, c, &p.bias));
    p.bias.n = M * N;
  }
  p.strided = true;  // one matrix each
  KILN_RETURN_IF_ERROR(CheckInt(node, p));
  return p;
}

}  // namespace kiln::cuda
