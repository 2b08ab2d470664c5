// MatMul and Gemm with a constant B, which the CPU kernel packs at load
// (oneDNN's preferred layout, or row-major with a padded row stride): results
// against loops in double, for shapes where the padding applies (N a multiple
// of 1024), where it does not (N < 64), with Gemm's transB, alpha and beta.
// Inputs are multiples of 1/4 below 4 in magnitude, so every sum is exact in
// float32 whatever order the kernel adds in.
#include <gtest/gtest.h>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::In;
using test::Int;
using test::NodeRunner;
using test::Values;

std::vector<float> Quarters(std::int64_t n, int seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(((i * 7 + seed * 13) % 29) - 14) * 0.25f;
  return v;
}

// y[b, m, n] = sum_k a[b, m, k] * w[k, n]
std::vector<double> MatMulRef(const std::vector<float>& a, const std::vector<float>& w, std::int64_t batch,
                              std::int64_t m, std::int64_t k, std::int64_t n) {
  std::vector<double> y(static_cast<std::size_t>(batch * m * n), 0.0);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t t = 0; t < k; ++t) s += double(a[(b * m + i) * k + t]) * w[t * n + j];
        y[(b * m + i) * n + j] = s;
      }
  return y;
}

void ExpectEqual(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
}

TEST(Gemm, MatMulWithAConstantBAtPaddedAndNarrowWidths) {
  // N 1024 (row stride a multiple of 4 KiB: packed with a padded stride),
  // 96 (padded to 112), 7 (narrow: kept), with a batched 3-D A.
  for (std::int64_t n : {1024, 96, 7}) {
    const std::int64_t batch = 2, m = 5, k = 33;
    const std::vector<float> a = Quarters(batch * m * k, 1), w = Quarters(k * n, 2);
    NodeRunner r("MatMul", 13, {In(DType::kFloat32, {batch, m, k}), F32T({k, n}, w)});
    auto out = r.Run({F32T({batch, m, k}, a)});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(r.out_shape(), (Shape{batch, m, n}));
    ExpectEqual(Values<float>(out.value()[0]), MatMulRef(a, w, batch, m, k, n));
  }
}

TEST(Gemm, ConstantTransposedBWithAlphaAndBeta) {
  // Y = 0.5 * A[3,20] * B^T (B [80,20]) + 2 * C[80]
  const std::int64_t m = 3, k = 20, n = 80;
  const std::vector<float> a = Quarters(m * k, 3), bt = Quarters(n * k, 4), c = Quarters(n, 5);
  std::vector<float> w(static_cast<std::size_t>(k * n));
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t t = 0; t < k; ++t) w[t * n + j] = bt[j * k + t];
  std::vector<double> want = MatMulRef(a, w, 1, m, k, n);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) want[i * n + j] = 0.5 * want[i * n + j] + 2.0 * c[j];
  NodeRunner r("Gemm", 13, {In(DType::kFloat32, {m, k}), F32T({n, k}, bt), F32T({n}, c)});
  r.Attr("transB", Int(1)).Attr("alpha", ir::Attribute::Float(0.5f)).Attr("beta", ir::Attribute::Float(2.f));
  auto out = r.Run({F32T({m, k}, a)});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectEqual(Values<float>(out.value()[0]), want);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// K = 0: the product is empty, Y = beta * C (and MatMul gives zeros).
TEST(Gemm, EmptyReductionGivesBetaTimesC) {
  const std::int64_t m = 2, n = 80;
  const std::vector<float> c = Quarters(n, 6);
  NodeRunner r("Gemm", 13, {In(DType::kFloat32, {m, 0}), F32T({0, n}, {}), F32T({n}, c)});
  r.Attr("beta", ir::Attribute::Float(2.f));
  auto out = r.Run({F32T({m, 0}, {})});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> want(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m * n; ++i) want[i] = 2.0 * c[i % n];
  ExpectEqual(Values<float>(out.value()[0]), want);
  NodeRunner mm("MatMul", 13, {In(DType::kFloat32, {m, 0}), F32T({0, n}, {})});
  auto z = mm.Run({F32T({m, 0}, {})});
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  ExpectEqual(Values<float>(z.value()[0]), std::vector<double>(static_cast<std::size_t>(m * n), 0.0));
}

}  // namespace
}  // namespace kiln
