// The CUDA MatMul/Gemm plan (src/backends/cuda/gemm_params.h), run through
// a host emulation of what the GPU does with it: the pointer kernel's
// address arithmetic (ew_common.h's kiln_ew_offsets, the same text the
// device compiles), then a column-major batched GEMM with cuBLAS's
// semantics (op, m, n, k, leading dimensions). Compared with a row-major
// product computed in double straight from ONNX's definitions. No GPU.
#include <gtest/gtest.h>

#include <random>

#include "backends/cuda/ew_common.h"
#include "backends/cuda/gemm_params.h"
#include "ir/graph.h"

namespace kiln::cuda {
namespace {

// cuBLAS sgemm on column-major data: C = alpha * op(A) op(B) + beta * C.
void ColMajorGemm(bool ta, bool tb, long long m, long long n, long long k, float alpha, const float* A,
                  long long lda, const float* B, long long ldb, float beta, float* C, long long ldc) {
  for (long long j = 0; j < n; ++j) {
    for (long long i = 0; i < m; ++i) {
      double acc = 0;
      for (long long l = 0; l < k; ++l) {
        const double a = ta ? A[l + i * lda] : A[i + l * lda];
        const double b = tb ? B[j + l * ldb] : B[l + j * ldb];
        acc += a * b;
      }
      C[i + j * ldc] = static_cast<float>(alpha * acc + (beta == 0.f ? 0.0 : beta * C[i + j * ldc]));
    }
  }
}

// What the GemmKernel makes the GPU do, on the host.
std::vector<float> RunPlan(const GemmPlan& p, const std::vector<float>& a, const std::vector<float>& b,
                           const std::vector<float>* c) {
  std::vector<float> y(static_cast<std::size_t>(p.batch * p.y_mat), -777.f);
  if (p.has_bias) {
    for (long long i = 0; i < p.bias.n; ++i) {
      long long oa, ob;
      kiln_ew_offsets(p.bias, i, &oa, &ob);
      y[static_cast<std::size_t>(i)] = (*c)[static_cast<std::size_t>(ob)];
    }
  }
  for (long long i = 0; i < p.batch; ++i) {
    if (p.strided) {  // cublasGemm(StridedBatched)Ex on the bases
      EXPECT_LE(i * p.stride_second + (p.second_t ? p.k * p.ld_second : p.n * p.ld_second),
                static_cast<long long>(a.size()));
      EXPECT_LE(i * p.stride_first + (p.first_t ? p.m * p.ld_first : p.k * p.ld_first),
                static_cast<long long>(b.size()));
      ColMajorGemm(p.first_t, p.second_t, p.m, p.n, p.k, p.alpha, b.data() + i * p.stride_first, p.ld_first,
                   a.data() + i * p.stride_second, p.ld_second, p.has_bias ? p.beta : 0.f,
                   y.data() + i * p.stride_out, p.ld_out);
      continue;
    }
    long long oa, ob;
    kiln_ew_offsets(p.batch_bcast, i, &oa, &ob);
    EXPECT_LE((oa + 1) * p.a_mat, static_cast<long long>(a.size()));
    EXPECT_LE((ob + 1) * p.b_mat, static_cast<long long>(b.size()));
    ColMajorGemm(p.first_t, p.second_t, p.m, p.n, p.k, p.alpha, b.data() + ob * p.b_mat, p.ld_first,
                 a.data() + oa * p.a_mat, p.ld_second, p.has_bias ? p.beta : 0.f, y.data() + i * p.y_mat, p.ld_out);
  }
  return y;
}

std::vector<float> Random(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

std::size_t Numel(const Shape& s) {
  std::size_t n = 1;
  for (auto d : s) n *= static_cast<std::size_t>(d);
  return n;
}

// numpy matmul in double: batch dims broadcast, 1-D operands promoted.
std::vector<double> RefMatMul(const std::vector<float>& a, Shape as, const std::vector<float>& b, Shape bs,
                              Shape* out_shape) {
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const long long M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const std::size_t r = std::max(ab.size(), bb.size());
  while (ab.size() < r) ab.insert(ab.begin(), 1);
  while (bb.size() < r) bb.insert(bb.begin(), 1);
  Shape ob(r);
  for (std::size_t i = 0; i < r; ++i) ob[i] = std::max(ab[i], bb[i]);
  const std::size_t batch = Numel(ob);
  std::vector<double> y(batch * static_cast<std::size_t>(M * N));
  for (std::size_t t = 0; t < batch; ++t) {
    std::size_t rem = t, ia = 0, ib = 0, sa = 1, sb = 1;
    for (std::size_t d = r; d-- > 0;) {
      const std::size_t c = rem % static_cast<std::size_t>(ob[d]);
      rem /= static_cast<std::size_t>(ob[d]);
      ia += (ab[d] == 1 ? 0 : c) * sa;
      ib += (bb[d] == 1 ? 0 : c) * sb;
      sa *= static_cast<std::size_t>(ab[d]);
      sb *= static_cast<std::size_t>(bb[d]);
    }
    for (long long i = 0; i < M; ++i)
      for (long long j = 0; j < N; ++j) {
        double acc = 0;
        for (long long l = 0; l < K; ++l)
          acc += static_cast<double>(a[ia * M * K + i * K + l]) * b[ib * K * N + l * N + j];
        y[t * M * N + i * N + j] = acc;
      }
  }
  *out_shape = ob;
  if (!a1) out_shape->push_back(M);
  if (!b1) out_shape->push_back(N);
  return y;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << what << " at " << i;
  }
}

struct OneNode {
  ir::Graph g;
  ir::Node* n;
  explicit OneNode(const std::string& op) { n = g.AddNode(op, "mm", {}, {}); }
};

TEST(CudaGemmPlan, MatMulShapesThroughTheEmulatedGpu) {
  OneNode mm("MatMul");
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},          {{2, 3, 4}, {2, 4, 5}}, {{2, 3, 4}, {4, 5}},   {{3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {3, 4, 2}}, {{4}, {4, 5}},          {{2, 3, 4}, {4}},      {{4}, {4}},
      {{1, 7}, {7, 1}},          {{2, 2, 1, 6}, {1, 2, 6, 3}}, {{2, 5, 3, 4}, {4, 6}},  {{1, 2, 3, 4}, {2, 4, 5}},
      {{5, 4}, {2, 3, 4, 6}}};
  // Which run as one strided GEMM (hand-derived: batch dims all present or
  // all 1 per operand, or a 2-D B); the others through the pointer arrays.
  const std::vector<bool> strided = {true, true, true, true, false, true, true,
                                     true, true, false, true, true, true};
  // A's batch folded into M (one GEMM, cuBLAS's n = batch * M).
  const std::vector<long long> folded_n = {3, 3, 6, 3, 3, 1, 6, 1, 1, 1, 30, 3, 5};
  std::size_t idx = 0;
  unsigned seed = 1;
  for (const auto& [as, bs] : cases) {
    const auto a = Random(Numel(as), seed++), b = Random(Numel(bs), seed++);
    Shape out;
    const std::vector<double> want = RefMatMul(a, as, b, bs, &out);
    auto plan = MatMulPlan(*mm.n, as, bs, out);
    const std::string what = ShapeToString(as) + " x " + ShapeToString(bs);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().ToString();
    EXPECT_EQ(plan->batch * plan->y_mat, static_cast<long long>(want.size())) << what;
    EXPECT_EQ(plan->strided, strided[idx]) << what;
    EXPECT_EQ(plan->n, folded_n[idx]) << what;
    ExpectClose(RunPlan(*plan, a, b, nullptr), want, what);
    // The same product through the pointer arrays.
    GemmPlan pointers = *plan;
    if (pointers.strided && pointers.n == static_cast<long long>(as.size() == 1 ? 1 : as[as.size() - 2])) {
      pointers.strided = false;
      ExpectClose(RunPlan(pointers, a, b, nullptr), want, what + " (pointer arrays)");
    }
    ++idx;
  }
}

TEST(CudaGemmPlan, GemmTransposesAlphaBetaAndBias) {
  const long long M = 3, N = 5, K = 4;
  unsigned seed = 100;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (const Shape& cs : {Shape{}, Shape{N}, Shape{M, 1}, Shape{M, N}, Shape{1}}) {
        for (bool has_c : {false, true}) {
          if (!has_c && !cs.empty()) continue;
          OneNode g("Gemm");
          g.n->SetAttr("transA", ir::Attribute::Int(ta));
          g.n->SetAttr("transB", ir::Attribute::Int(tb));
          g.n->SetAttr("alpha", ir::Attribute::Float(0.75f));
          g.n->SetAttr("beta", ir::Attribute::Float(-1.5f));
          const Shape as = ta ? Shape{K, M} : Shape{M, K}, bs = tb ? Shape{N, K} : Shape{K, N};
          const auto a = Random(Numel(as), seed++), b = Random(Numel(bs), seed++);
          const auto c = Random(Numel(cs), seed++);
          std::vector<double> want(static_cast<std::size_t>(M * N));
          for (long long i = 0; i < M; ++i)
            for (long long j = 0; j < N; ++j) {
              double acc = 0;
              for (long long l = 0; l < K; ++l) {
                const double av = ta ? a[l * M + i] : a[i * K + l];
                const double bv = tb ? b[j * K + l] : b[l * N + j];
                acc += av * bv;
              }
              double cv = 0;
              if (has_c) {
                if (cs.size() == 2) cv = c[(cs[0] == 1 ? 0 : i) * cs[1] + (cs[1] == 1 ? 0 : j)];
                else if (cs.size() == 1) cv = c[cs[0] == 1 ? 0 : j];
                else cv = c[0];  // a scalar C
              }
              want[i * N + j] = 0.75 * acc + (has_c ? -1.5 * cv : 0);
            }
          auto plan = GemmOpPlan(*g.n, as, bs, has_c, cs, {M, N});
          const std::string what = "transA " + std::to_string(ta) + " transB " + std::to_string(tb) + " C " +
                                   (has_c ? ShapeToString(cs) : "none");
          ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().ToString();
          EXPECT_EQ(plan->has_bias, has_c) << what;
          ExpectClose(RunPlan(*plan, a, b, &c), want, what);
        }
      }
    }
  }
}

TEST(CudaGemmPlan, RefusesWhatItCannotRun) {
  OneNode mm("MatMul");
  EXPECT_FALSE(MatMulPlan(*mm.n, {3, 4}, {5, 6}, {3, 6}).ok());         // inner dims
  EXPECT_FALSE(MatMulPlan(*mm.n, {2, 3, 4}, {3, 4, 5}, {2, 3, 5}).ok());  // batch dims
  EXPECT_FALSE(MatMulPlan(*mm.n, {}, {3}, {}).ok());
  auto k0 = MatMulPlan(*mm.n, {3, 0}, {0, 5}, {3, 5});
  ASSERT_FALSE(k0.ok());
  EXPECT_EQ(k0.status().code(), StatusCode::kUnimplemented);
  auto big = MatMulPlan(*mm.n, {1, std::int64_t{3} << 31}, {std::int64_t{3} << 31, 1}, {1, 1});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("int range"), std::string::npos) << big.status().message();
  EXPECT_NE(big.status().message().find("'mm'"), std::string::npos);
  auto empty = MatMulPlan(*mm.n, {0, 4}, {4, 5}, {0, 5});  // nothing to compute: fine
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->n, 0);
  OneNode g("Gemm");
  EXPECT_FALSE(GemmOpPlan(*g.n, {3, 4}, {4, 5}, false, {}, {3, 6}).ok());
  EXPECT_FALSE(GemmOpPlan(*g.n, {2, 3, 4}, {4, 5}, false, {}, {3, 5}).ok());
  EXPECT_FALSE(GemmOpPlan(*g.n, {3, 4}, {4, 5}, true, {2, 5}, {3, 5}).ok());  // C does not broadcast
}

}  // namespace
}  // namespace kiln::cuda
