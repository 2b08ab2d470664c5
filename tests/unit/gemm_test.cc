// MatMul and Gemm with a constant B, which the CPU kernel packs at load
// (oneDNN's preferred layout, or row-major with a padded row stride): results
// against loops in double, for shapes where the padding applies (N a multiple
// of 1024), where it does not (N < 64), with Gemm's transB, alpha and beta.
// Inputs are multiples of 1/4 below 4 in magnitude, so every sum is exact in
// float32 whatever order the kernel adds in. A packed weight read from a
// mapped .kiln leaves no resident copy of its source pages behind. Kernels
// for plans of varying shapes take A's rows at run time and share B's packed
// copy between row counts.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "backends/cpu/kernel.h"
#include "ops/fused_attrs.h"
#include "node_runner.h"
#include "test_util.h"

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

// A batch of 0 against a constant matrix (B's leading dims broadcast from
// 1): the output is empty, [0, 3, 6], with and without a fused bias (the
// kernel broadcast 0 with 1 as 1 and asked oneDNN for a one-row output
// from a 0-row A, which failed the load; fuzz).
TEST(MatMul, EmptyBatchAgainstAMatrixIsEmpty) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "fused bias" : "no bias");
    std::vector<In> ins = {In(DType::kFloat32, {0, 3, 4}), F32T({4, 6}, Quarters(24, 3))};
    if (bias) ins.push_back(F32T({6}, Quarters(6, 4)));
    NodeRunner r("MatMul", 13, ins);
    if (bias) r.Attr(ops::kBiasAttr, Int(1));
    auto out = r.Run({F32T({0, 3, 4}, {})});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()[0]->shape(), (Shape{0, 3, 6}));
  }
}

// Resident bytes (smaps "Rss") of this process's mappings of files whose
// path contains `part`.
std::int64_t MappedRssBytes(const std::string& part) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool ours = false;
  std::int64_t kib = 0;
  while (std::getline(in, line)) {
    const std::string first = line.substr(0, line.find(' '));
    if (first.find('-') != std::string::npos && first.find(':') == std::string::npos) {  // "start-end perms ..."
      ours = line.find(part) != std::string::npos;
    } else if (ours && line.rfind("Rss:", 0) == 0) {
      std::istringstream f(line.substr(4));
      std::int64_t v = 0;
      f >> v;
      kib += v;
    }
  }
  return kib * 1024;
}

TEST(Gemm, PackedWeightReleasesItsMappedSourcePages) {
  if (!test::DefaultDeviceMapsHostMemory()) GTEST_SKIP() << "the device copies weights; nothing is mapped in place";
  // y = x[2, 256] * W[256, 1024]: W (1 MiB) lies in the mapped .kiln, whose
  // weights the loader reads in full (CRC-32), or in its own mapped weight
  // file (external_weight 1, read in full for its SHA-256); then the MatMul
  // packs it.
  const std::int64_t m = 2, k = 256, n = 1024;
  const std::vector<float> w = Quarters(k * n, 3), x = Quarters(m * k, 4);
  for (int external : {0, 1}) {
    SCOPED_TRACE(external ? "external weight file" : "weights in the .kiln");
    auto g = std::make_unique<ir::Graph>();
    ir::Value* xv = g->AddValue("x", DType::kFloat32, {m, k});
    g->inputs().push_back(xv);
    ir::Value* wv = g->AddConstant("w", test::F32({k, n}, w));
    ir::Value* yv = g->AddValue("y", DType::kFloat32, {m, n});
    g->AddNode("MatMul", "mm", {xv, wv}, {yv});
    g->outputs().push_back(yv);
    test::TempDir dir;
    CompileOptions copts;
    copts.external_weight = external;
    if (external) copts.external_weight_dir = dir.file("weight");
    LoadOptions lopts;
    lopts.weight_load_mode = WeightLoadMode::kMap;
    lopts.verify_weights = true;
    auto model = test::CompileAndLoad(std::move(g), dir, nullptr, copts, lopts);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    // Under a quarter of W stays resident (the graph partition and the edge
    // pages that W shares with its neighbours may).
    EXPECT_LT(MappedRssBytes(dir.file(external ? "weight/" : "m.kiln")), k * n * 4 / 4);
    std::vector<float> y(static_cast<std::size_t>(m * n));
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {m, k})}, {TensorRef::Of(y.data(), {m, n})}).ok());
    ExpectEqual(y, MatMulRef(x, w, 1, m, k, n));
  }
}


// Plans of a model with symbolic dims (KernelInit::varying_shapes): MatMul
// with a constant B (with a fused bias and Relu) and Gemm with transB and a
// bias C and alpha, at several row counts, each kernel made as a new plan would make
// it, all sharing one PrepackCache: results as the loops in double, and B
// packed once for every row count.
TEST(Gemm, VaryingShapesTakeRowsAtRunTimeAndShareThePackedB) {
  const std::int64_t k = 19, n = 96;
  const std::vector<float> w = Quarters(k * n, 5), bias = Quarters(n, 6);
  for (bool gemm : {false, true}) {
    SCOPED_TRACE(gemm ? "Gemm, transB, C" : "MatMul, bias, Relu");
    device::PrepackCache cache;
    std::vector<float> wt(static_cast<std::size_t>(k * n));  // [n, k] for transB
    for (std::int64_t i = 0; i < k; ++i)
      for (std::int64_t j = 0; j < n; ++j) wt[j * k + i] = w[i * n + j];
    auto wc = gemm ? F32T({n, k}, wt) : F32T({k, n}, w);
    auto bc = F32T({n}, bias);
    std::vector<std::unique_ptr<cpu::Kernel>> held;  // as the cached plans hold theirs
    for (std::int64_t rows : {1, 5, 37, 3}) {
      SCOPED_TRACE(rows);
      // MatMul: A [rows/... , k] as [1, rows, k]; Gemm: [rows, k].
      const Shape a_shape = gemm ? Shape{rows, k} : Shape{1, rows, k};
      const Shape y_shape = gemm ? Shape{rows, n} : Shape{1, rows, n};
      const std::vector<float> a = Quarters(rows * k, static_cast<int>(rows));
      NodeRunner r(gemm ? "Gemm" : "MatMul", 13, {In(DType::kFloat32, a_shape), wc, bc});
      if (gemm) {
        r.Attr("transB", Int(1)).Attr("alpha", ir::Attribute::Float(0.5f));  // alpha folded into the packed B
      } else {
        r.Attr(ops::kBiasAttr, Int(1));
        r.Attr(ops::kActAttr, ir::Attribute::String("Relu"));
      }
      cpu::KernelInit init;
      init.node = &r.node();
      init.inputs = {{DType::kFloat32, a_shape}, {DType::kFloat32, wc->shape()}, {DType::kFloat32, {n}}};
      init.outputs = {{DType::kFloat32, y_shape}};
      init.const_inputs = {nullptr, wc.get(), bc.get()};
      init.prepack_cache = &cache;
      init.varying_shapes = true;
      auto kernel = cpu::CreateKernel(init);
      ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
      std::vector<float> y(static_cast<std::size_t>(rows * n), -1.f);
      std::vector<void*> ptrs = {const_cast<float*>(a.data()), const_cast<void*>(wc->data()),
                                 const_cast<void*>(bc->data()), y.data()};
      ASSERT_TRUE(kernel.value()->Run({ptrs.data(), 3}).ok());
      std::vector<double> want = MatMulRef(a, w, 1, rows, k, n);
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double& v = want[i * n + j];
          if (gemm) v *= 0.5;
          v += bias[j];
          if (!gemm) v = std::max(v, 0.0);
        }
      ExpectEqual(y, want);
      held.push_back(std::move(kernel).value());
    }
    EXPECT_EQ(cache.made(), 1u);
    EXPECT_EQ(cache.shared(), 3u);
  }
}

}  // namespace
}  // namespace kiln
