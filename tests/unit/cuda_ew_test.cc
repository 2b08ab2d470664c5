// The CUDA elementwise kernels' per-element arithmetic and broadcast
// indexing (src/backends/cuda/ew_common.h: the same text NVRTC compiles
// into the device program), and the parameters nodes give them
// (ew_params.cc), checked on the host against double references and
// hand-derived strides. Needs no GPU; runs in every build.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/cuda/ew_common.h"
#include "backends/cuda/ew_params.h"
#include "ir/graph.h"
#include "ops/op_registry.h"

namespace kiln::cuda {
namespace {

double RefUnary(int op, double x, double alpha, double beta, double gamma) {
  switch (op) {
    case kKilnRelu: return x < 0 ? 0 : x;
    case kKilnSigmoid: return 1 / (1 + std::exp(-x));
    case kKilnTanh: return std::tanh(x);
    case kKilnAbs: return std::fabs(x);
    case kKilnNeg: return -x;
    case kKilnExp: return std::exp(x);
    case kKilnLog: return std::log(x);
    case kKilnSqrt: return std::sqrt(x);
    case kKilnReciprocal: return 1 / x;
    case kKilnErf: return std::erf(x);
    case kKilnFloor: return std::floor(x);
    case kKilnCeil: return std::ceil(x);
    case kKilnSoftplus: return std::log(std::exp(x) + 1);
    case kKilnSoftsign: return x / (1 + std::fabs(x));
    case kKilnLeakyRelu: return x >= 0 ? x : alpha * x;
    case kKilnElu: return x < 0 ? alpha * (std::exp(x) - 1) : x;
    case kKilnSelu: return x > 0 ? gamma * x : gamma * (alpha * std::exp(x) - alpha);
    case kKilnHardSigmoid: return std::max(0.0, std::min(1.0, alpha * x + beta));
    case kKilnHardSwish: return x * std::max(0.0, std::min(1.0, x / 6 + 0.5));
    case kKilnGeluErf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case kKilnGeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case kKilnSin: return std::sin(x);
    case kKilnCos: return std::cos(x);
  }
  return std::nan("");
}

TEST(CudaElementwise, EveryUnaryOpAgainstDouble) {
  for (int op = 0; op < kKilnUnaryOpCount; ++op) {
    KilnEwParams p{};
    p.op = op;
    p.alpha = 0.3f;
    p.beta = 0.4f;
    p.gamma = 1.5f;
    double worst = 0;
    for (int i = -2400; i <= 2400; ++i) {
      float x = static_cast<float>(i) / 200.f;  // [-12, 12]
      if ((op == kKilnLog || op == kKilnSqrt) && x <= 0) continue;
      if (op == kKilnReciprocal && x == 0) continue;
      const double want = RefUnary(op, x, p.alpha, p.beta, p.gamma);
      const double got = kiln_unary_op(p, x);
      const double err = std::fabs(got - want) / std::max(1.0, std::fabs(want));
      worst = std::max(worst, err);
    }
    EXPECT_LT(worst, 2e-6) << "op " << op;
  }
  KilnEwParams p{};
  p.op = kKilnRelu;
  EXPECT_TRUE(std::isnan(kiln_unary_op(p, std::nanf(""))));  // NaN propagates through Relu
  p.op = kKilnSoftplus;
  EXPECT_EQ(kiln_unary_op(p, 100.f), 100.f);  // no overflow of exp(100)
  EXPECT_NEAR(kiln_unary_op(p, -100.f), std::exp(-100.0), 1e-45);
  p.op = kKilnUnaryOpCount;  // unknown: NaN, never the input back
  EXPECT_TRUE(std::isnan(kiln_unary_op(p, 1.f)));
}

TEST(CudaElementwise, EveryBinaryOpAgainstDouble) {
  const float xs[] = {-3.5f, -1.f, -0.25f, 0.f, 0.5f, 2.f, 7.25f};
  for (float a : xs) {
    for (float b : xs) {
      KilnEwParams p{};
      auto run = [&](int op) {
        p.op = op;
        return kiln_binary_op(p, a, b);
      };
      EXPECT_EQ(run(kKilnAdd), a + b);
      EXPECT_EQ(run(kKilnSub), a - b);
      EXPECT_EQ(run(kKilnMul), a * b);
      if (b != 0) EXPECT_EQ(run(kKilnDiv), a / b);
      EXPECT_EQ(run(kKilnMax), std::max(a, b));
      EXPECT_EQ(run(kKilnMin), std::min(a, b));
      EXPECT_EQ(run(kKilnPRelu), a < 0 ? b * a : a);
      if (a > 0) EXPECT_NEAR(run(kKilnPow), std::pow(static_cast<double>(a), b), 1e-5 * std::pow(a, b));
    }
  }
  KilnEwParams p{};
  const float nan = std::nanf("");
  p.op = kKilnMax;
  EXPECT_TRUE(std::isnan(kiln_binary_op(p, nan, 1.f)));
  EXPECT_TRUE(std::isnan(kiln_binary_op(p, 1.f, nan)));
  p.op = kKilnMin;
  EXPECT_TRUE(std::isnan(kiln_binary_op(p, nan, 1.f)));
  EXPECT_TRUE(std::isnan(kiln_binary_op(p, 1.f, nan)));
}

// A node of `op` in a throwaway graph.
struct OneNode {
  ir::Graph g;
  ir::Node* n;
  explicit OneNode(const std::string& op, const std::string& domain = "") {
    n = g.AddNode(op, "n", {}, {}, domain);
  }
};

// The device loop's indexing, run on the host: c[i] = a[oa] + b[ob].
std::vector<float> BroadcastAdd(const KilnEwParams& p, const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> c(static_cast<std::size_t>(p.n));
  for (long long i = 0; i < p.n; ++i) {
    long long oa, ob;
    kiln_ew_offsets(p, i, &oa, &ob);
    EXPECT_GE(oa, 0);
    EXPECT_LT(oa, static_cast<long long>(a.size()));
    EXPECT_GE(ob, 0);
    EXPECT_LT(ob, static_cast<long long>(b.size()));
    c[static_cast<std::size_t>(i)] = kiln_binary_op(p, a[static_cast<std::size_t>(oa)], b[static_cast<std::size_t>(ob)]);
  }
  return c;
}

TEST(CudaElementwise, BroadcastStridesAndIndexing) {
  OneNode add("Add");
  // [2,3,4] + [3,1]: b varies along dim 1 only.
  auto p = BinaryParams(*add.n, {2, 3, 4}, {2, 3, 4}, {3, 1});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->contiguous, 0);
  EXPECT_EQ(p->n, 24);
  EXPECT_EQ(p->sa[0], 12);
  EXPECT_EQ(p->sa[1], 4);
  EXPECT_EQ(p->sa[2], 1);
  EXPECT_EQ(p->sb[0], 0);
  EXPECT_EQ(p->sb[1], 1);
  EXPECT_EQ(p->sb[2], 0);
  std::vector<float> a(24), b = {100, 200, 300};
  for (int i = 0; i < 24; ++i) a[i] = static_cast<float>(i);
  const std::vector<float> c = BroadcastAdd(*p, a, b);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(c[i], static_cast<float>(i) + 100.f * static_cast<float>((i / 4) % 3 + 1)) << i;

  // Both sides broadcast: [2,1,4] x [1,3,1] -> [2,3,4].
  auto q = BinaryParams(*add.n, {2, 3, 4}, {2, 1, 4}, {1, 3, 1});
  ASSERT_TRUE(q.ok());
  std::vector<float> a2(8), b2 = {1000, 2000, 3000};
  for (int i = 0; i < 8; ++i) a2[i] = static_cast<float>(i);
  const std::vector<float> c2 = BroadcastAdd(*q, a2, b2);
  for (int i0 = 0; i0 < 2; ++i0)
    for (int i1 = 0; i1 < 3; ++i1)
      for (int i2 = 0; i2 < 4; ++i2)
        EXPECT_EQ(c2[(i0 * 3 + i1) * 4 + i2], static_cast<float>(i0 * 4 + i2) + 1000.f * static_cast<float>(i1 + 1));

  // A scalar, and equal shapes (contiguous).
  auto s = BinaryParams(*add.n, {5}, {5}, {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->sb[0], 0);
  auto e = BinaryParams(*add.n, {2, 2}, {2, 2}, {2, 2});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->contiguous, 1);
  auto scalars = BinaryParams(*add.n, {}, {}, {});
  ASSERT_TRUE(scalars.ok());
  EXPECT_EQ(scalars->n, 1);
  EXPECT_EQ(BroadcastAdd(*scalars, {2.f}, {3.f})[0], 5.f);
  // Empty output: nothing to do.
  auto empty = BinaryParams(*add.n, {0, 3}, {0, 3}, {3});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->n, 0);
}

TEST(CudaElementwise, RefusesWhatItCannotIndex) {
  OneNode add("Add");
  auto bad = BinaryParams(*add.n, {2, 3}, {2, 3}, {2});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not broadcast"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("'n'"), std::string::npos) << bad.status().message();  // names the node
  auto deep = BinaryParams(*add.n, Shape(9, 1), Shape(9, 1), Shape(9, 1));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kUnimplemented);
  OneNode conv("Conv");
  EXPECT_FALSE(BinaryParams(*conv.n, {1}, {1}, {1}).ok());
  EXPECT_FALSE(UnaryParams(*conv.n, {1}).ok());
}

TEST(CudaElementwise, WhichOpsAndAttributes) {
  const std::vector<DType> f1 = {DType::kFloat32}, f2 = {DType::kFloat32, DType::kFloat32};
  EXPECT_EQ(ElementwiseKind("Relu", "", f1), EwKind::kUnary);
  EXPECT_EQ(ElementwiseKind("Add", "", f2), EwKind::kBinary);
  EXPECT_EQ(ElementwiseKind("Add", "", {DType::kInt64, DType::kInt64}), EwKind::kNone);  // float32 only
  EXPECT_EQ(ElementwiseKind("Add", "", {DType::kFloat16, DType::kFloat16}), EwKind::kNone);
  EXPECT_EQ(ElementwiseKind("Max", "", {DType::kFloat32, DType::kFloat32, DType::kFloat32}), EwKind::kNone);
  EXPECT_EQ(ElementwiseKind("Add", "com.microsoft", f2), EwKind::kNone);
  EXPECT_EQ(ElementwiseKind("Gelu", "kiln", f1), EwKind::kUnary);
  EXPECT_EQ(ElementwiseKind(ir::kMemcpyToHost, "kiln", {DType::kInt64}), EwKind::kCopy);
  EXPECT_EQ(ElementwiseKind("Identity", "", {DType::kUInt8}), EwKind::kCopy);
  EXPECT_EQ(ElementwiseKind("Identity", "", {DType::kString}), EwKind::kNone);  // no bytes to copy
  EXPECT_EQ(ElementwiseKind("Conv", "", f2), EwKind::kNone);

  OneNode leaky("LeakyRelu");
  auto p = UnaryParams(*leaky.n, {3});
  ASSERT_TRUE(p.ok());
  EXPECT_FLOAT_EQ(p->alpha, 0.01f);  // ONNX's default
  leaky.n->SetAttr("alpha", ir::Attribute::Float(0.2f));
  EXPECT_FLOAT_EQ(UnaryParams(*leaky.n, {3})->alpha, 0.2f);
  OneNode hs("HardSigmoid");
  auto h = UnaryParams(*hs.n, {3});
  EXPECT_FLOAT_EQ(h->alpha, 0.2f);
  EXPECT_FLOAT_EQ(h->beta, 0.5f);
  OneNode gelu("Gelu", "kiln");
  EXPECT_EQ(UnaryParams(*gelu.n, {3})->op, kKilnGeluErf);
  gelu.n->SetAttr("approximate", ir::Attribute::String("tanh"));
  EXPECT_EQ(UnaryParams(*gelu.n, {3})->op, kKilnGeluTanh);
  gelu.n->SetAttr("approximate", ir::Attribute::String("fast"));
  EXPECT_FALSE(UnaryParams(*gelu.n, {3}).ok());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::cuda {
namespace {

// Softmax as the device runs it (row bases from ew_common.h), on the host.
std::vector<double> EmulateSoftmax(const KilnRowParams& p, const std::vector<float>& x) {
  std::vector<double> y(x.size(), -1);
  for (long long r = 0; r < p.outer * p.inner; ++r) {
    const long long base = kiln_row_base(p, r);
    double m = -INFINITY, s = 0;
    for (long long j = 0; j < p.len; ++j) m = std::max(m, static_cast<double>(x[base + j * p.inner]));
    for (long long j = 0; j < p.len; ++j) s += std::exp(x[base + j * p.inner] - m);
    for (long long j = 0; j < p.len; ++j) {
      const double v = x[base + j * p.inner] - m;
      y[base + j * p.inner] = p.log ? v - std::log(s) : std::exp(v) / s;
    }
  }
  return y;
}

TEST(CudaRowKernels, SoftmaxAxesByOpsetAndTheirRows) {
  ir::Graph g;
  ir::Node* n = g.AddNode("Softmax", "sm", {}, {});
  const Shape x = {2, 3, 4};
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>((i * 7) % 11) * 0.3f;
  // Opset 13, axis 1: each (i, k) normalised over j.
  n->set_since_version(13);
  n->SetAttr("axis", ir::Attribute::Int(1));
  auto p = SoftmaxParams(*n, x);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->outer, 2);
  EXPECT_EQ(p->len, 3);
  EXPECT_EQ(p->inner, 4);
  auto y = EmulateSoftmax(*p, v);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double s = 0;
      for (int j = 0; j < 3; ++j) s += std::exp(static_cast<double>(v[i * 12 + j * 4 + k]));
      for (int j = 0; j < 3; ++j) EXPECT_NEAR(y[i * 12 + j * 4 + k], std::exp(static_cast<double>(v[i * 12 + j * 4 + k])) / s, 1e-12);
    }
  // Opset 11, axis 1: the 2-D coercion, rows of 12.
  n->set_since_version(11);
  p = SoftmaxParams(*n, x);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->outer, 2);
  EXPECT_EQ(p->len, 12);
  EXPECT_EQ(p->inner, 1);
  y = EmulateSoftmax(*p, v);
  for (int i = 0; i < 2; ++i) {
    double s = 0;
    for (int j = 0; j < 12; ++j) s += std::exp(static_cast<double>(v[i * 12 + j]));
    for (int j = 0; j < 12; ++j) EXPECT_NEAR(y[i * 12 + j], std::exp(static_cast<double>(v[i * 12 + j])) / s, 1e-12);
  }
  // Default axis: -1 from 13, 1 before.
  n->SetAttr("axis", ir::Attribute::Int(-1));
  n->set_since_version(13);
  EXPECT_EQ(SoftmaxParams(*n, x)->inner, 1);
  EXPECT_EQ(SoftmaxParams(*n, x)->len, 4);
  n->SetAttr("axis", ir::Attribute::Int(3));
  EXPECT_FALSE(SoftmaxParams(*n, x).ok());
  EXPECT_EQ(ElementwiseKind("LogSoftmax", "", {DType::kFloat32}), EwKind::kNone);  // not in Kiln's op set
}

TEST(CudaRowKernels, LayerNormRowsAndParameterStrides) {
  ir::Graph g;
  ir::Node* n = g.AddNode("LayerNormalization", "ln", {}, {});
  n->SetAttr("axis", ir::Attribute::Int(1));
  n->SetAttr("epsilon", ir::Attribute::Float(1e-3f));
  auto p = LayerNormParams(*n, {2, 3, 4}, {3, 4}, true, {1}, 1);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->outer, 2);
  EXPECT_EQ(p->len, 12);
  EXPECT_EQ(p->scale_stride, 1);
  EXPECT_EQ(p->bias_stride, 0);
  EXPECT_FLOAT_EQ(p->epsilon, 1e-3f);
  EXPECT_FALSE(LayerNormParams(*n, {2, 3, 4}, {4}, false, {}, 1).ok());   // scale neither 12 nor 1
  EXPECT_FALSE(LayerNormParams(*n, {2, 3, 4}, {3, 4}, false, {}, 3).ok());  // Mean / InvStdDev wanted
}

TEST(CudaRowKernels, TransposeOffsetsAgainstTheDefinition) {
  ir::Graph g;
  ir::Node* n = g.AddNode("Transpose", "t", {}, {});
  n->SetAttr("perm", ir::Attribute::Ints({2, 0, 1}));
  const Shape in = {2, 3, 4};
  auto p = TransposeParams(*n, in, DType::kFloat32);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->elem_bytes, 4);
  // out[k][i][j] = in[i][j][k], out shape [4, 2, 3].
  for (long long k = 0; k < 4; ++k)
    for (long long i = 0; i < 2; ++i)
      for (long long j = 0; j < 3; ++j)
        EXPECT_EQ(kiln_transpose_offset(*p, (k * 2 + i) * 3 + j), i * 12 + j * 4 + k);
  n->SetAttr("perm", ir::Attribute::Ints({0, 0, 1}));
  EXPECT_FALSE(TransposeParams(*n, in, DType::kFloat32).ok());
  ir::Node* rev = g.AddNode("Transpose", "r", {}, {});  // no perm: reversed dims
  auto q = TransposeParams(*rev, {2, 5}, DType::kInt64);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->elem_bytes, 8);
  for (long long a = 0; a < 5; ++a)
    for (long long b = 0; b < 2; ++b) EXPECT_EQ(kiln_transpose_offset(*q, a * 2 + b), b * 5 + a);
  EXPECT_EQ(ElementwiseKind("Transpose", "", {DType::kUInt8}), EwKind::kTranspose);
  EXPECT_EQ(ElementwiseKind("Softmax", "", {DType::kFloat32}), EwKind::kSoftmax);
  EXPECT_EQ(ElementwiseKind("LayerNormalization", "", {DType::kFloat32, DType::kFloat32, DType::kUndefined}),
            EwKind::kLayerNorm);
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::cuda {
namespace {

TEST(CudaDataKernels, WhereBroadcastsThreeWays) {
  ir::Graph g;
  ir::Node* n = g.AddNode("Where", "w", {}, {});
  // cond [2,1], x [3], y [2,3] -> [2,3]
  auto p = WhereParams(*n, {2, 3}, {2, 1}, {3}, {2, 3}, DType::kFloat32);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->op, 4);  // element bytes
  const unsigned char cond[2] = {1, 0};
  const float x[3] = {10, 20, 30}, y[6] = {-1, -2, -3, -4, -5, -6};
  const float want[6] = {10, 20, 30, -4, -5, -6};
  for (long long i = 0; i < 6; ++i) {
    long long oc, ox, oy;
    kiln_ew_offsets3(*p, i, &oc, &ox, &oy);
    EXPECT_EQ(cond[oc] ? x[ox] : y[oy], want[i]) << i;
  }
  EXPECT_FALSE(WhereParams(*n, {2, 3}, {3, 1}, {3}, {2, 3}, DType::kFloat32).ok());
  EXPECT_EQ(ElementwiseKind("Where", "", {DType::kBool, DType::kInt64, DType::kInt64}), EwKind::kWhere);
  EXPECT_EQ(ElementwiseKind("Where", "", {DType::kFloat32, DType::kInt64, DType::kInt64}), EwKind::kNone);
  EXPECT_EQ(ElementwiseKind("Where", "", {DType::kBool, DType::kInt64, DType::kInt32}), EwKind::kNone);
}

TEST(CudaDataKernels, ComparesFloatAndInt64) {
  ir::Graph g;
  const char* ops[] = {"Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal"};
  for (const char* op : ops) {
    ir::Node* n = g.AddNode(op, std::string("c_") + op, {}, {});
    auto p = CompareParams(*n, {3}, {3}, {});
    ASSERT_TRUE(p.ok()) << op;
    for (float a : {-1.f, 2.f, 2.5f}) {
      const float b = 2.f;
      const bool want = std::string(op) == "Less" ? a < b : std::string(op) == "LessOrEqual" ? a <= b
                        : std::string(op) == "Greater" ? a > b : std::string(op) == "GreaterOrEqual" ? a >= b : a == b;
      EXPECT_EQ(kiln_compare(p->op, a, b), want) << op << " " << a;
    }
    const long long big = (1LL << 60) + 1;  // beyond double's exact integers
    EXPECT_EQ(kiln_compare(p->op, big, big - 1),
              std::string(op) == "Greater" || std::string(op) == "GreaterOrEqual") << op;
  }
  EXPECT_EQ(ElementwiseKind("Less", "", {DType::kInt64, DType::kInt64}), EwKind::kCompare);
  EXPECT_EQ(ElementwiseKind("Less", "", {DType::kInt32, DType::kInt32}), EwKind::kNone);
}

// Cast through CastParams' type codes and kiln_cast_at, against values
// derived by hand from the conversions Kiln's CPU Cast defines (truncation,
// NaN -> 0, saturation, wrapping, != 0, round to nearest).
TEST(CudaDataKernels, CastConversionsByHand) {
  ir::Graph g;
  auto run = [&](DType from, DType to, const void* x, void* y, long long n) {
    ir::Node* c = g.AddNode("Cast", "cast" + std::to_string(g.nodes().size()), {}, {});
    c->SetAttr("to", ir::Attribute::Int(static_cast<std::int64_t>(to)));
    int types = -1;
    auto p = CastParams(*c, {n}, from, &types);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_EQ(p->n, n);
    for (long long i = 0; i < n; ++i) kiln_cast_at(x, types >> 4, y, types & 15, i);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float f[] = {0.f, 2.7f, -2.7f, 127.9f, -128.9f, 300.2f, -300.2f, 3e9f, -3e9f, 1e19f, -1e19f, nan, inf, -inf};
  constexpr long long kN = 14;
  {
    long long y[kN];
    run(DType::kFloat32, DType::kInt64, f, y, kN);
    const long long want[kN] = {0, 2, -2, 127, -128, 300, -300, 3000000000LL, -3000000000LL,
                                std::numeric_limits<long long>::max(), std::numeric_limits<long long>::min(), 0,
                                std::numeric_limits<long long>::max(), std::numeric_limits<long long>::min()};
    for (int i = 0; i < kN; ++i) EXPECT_EQ(y[i], want[i]) << "float32 -> int64 of " << f[i];
  }
  {
    int y[kN];
    run(DType::kFloat32, DType::kInt32, f, y, kN);
    const int want[kN] = {0, 2, -2, 127, -128, 300, -300, 2147483647, -2147483647 - 1, 2147483647, -2147483647 - 1,
                          0, 2147483647, -2147483647 - 1};
    for (int i = 0; i < kN; ++i) EXPECT_EQ(y[i], want[i]) << "float32 -> int32 of " << f[i];
  }
  {
    signed char y[kN];
    run(DType::kFloat32, DType::kInt8, f, y, kN);
    const int want[kN] = {0, 2, -2, 127, -128, 127, -128, 127, -128, 127, -128, 0, 127, -128};
    for (int i = 0; i < kN; ++i) EXPECT_EQ(y[i], want[i]) << "float32 -> int8 of " << f[i];
  }
  {
    unsigned char y[kN];
    run(DType::kFloat32, DType::kUInt8, f, y, kN);
    // Through int64, then modulo 256: 300 -> 44, -300 -> 212, -2 -> 254,
    // 3e9 = 0xB2D05E00 -> 0x00, int64 max -> 255, int64 min -> 0.
    const int want[kN] = {0, 2, 254, 127, 128, 44, 212, 0, 0, 255, 0, 0, 255, 0};
    for (int i = 0; i < kN; ++i) EXPECT_EQ(y[i], want[i]) << "float32 -> uint8 of " << f[i];
  }
  {
    unsigned char y[kN];
    run(DType::kFloat32, DType::kBool, f, y, kN);
    for (int i = 0; i < kN; ++i) EXPECT_EQ(y[i], i == 0 ? 0 : 1) << "float32 -> bool of " << f[i];  // NaN != 0
  }
  const long long v[] = {0, 1, -1, 255, 256, -129, (1LL << 40) + 1, (1LL << 53) + 1, (1LL << 24) + 1,
                         std::numeric_limits<long long>::min()};
  constexpr long long kM = 10;
  {
    float y[kM];
    run(DType::kInt64, DType::kFloat32, v, y, kM);
    // 2^40 + 1 and 2^24 + 1 are ties or below half an ulp: to nearest even.
    const float want[kM] = {0.f, 1.f, -1.f, 255.f, 256.f, -129.f, 1099511627776.f, 9007199254740992.f, 16777216.f,
                            -9223372036854775808.f};
    for (int i = 0; i < kM; ++i) EXPECT_EQ(y[i], want[i]) << "int64 -> float32 of " << v[i];
  }
  {
    int y[kM];
    run(DType::kInt64, DType::kInt32, v, y, kM);
    const int want[kM] = {0, 1, -1, 255, 256, -129, 1, 1, 16777217, 0};  // low 32 bits
    for (int i = 0; i < kM; ++i) EXPECT_EQ(y[i], want[i]) << "int64 -> int32 of " << v[i];
  }
  {
    signed char y8[kM];
    unsigned char u8[kM], b[kM];
    run(DType::kInt64, DType::kInt8, v, y8, kM);
    run(DType::kInt64, DType::kUInt8, v, u8, kM);
    run(DType::kInt64, DType::kBool, v, b, kM);
    const int want8[kM] = {0, 1, -1, -1, 0, 127, 1, 1, 1, 0}, wantu8[kM] = {0, 1, 255, 255, 0, 127, 1, 1, 1, 0};
    for (int i = 0; i < kM; ++i) {
      EXPECT_EQ(y8[i], want8[i]) << "int64 -> int8 of " << v[i];
      EXPECT_EQ(u8[i], wantu8[i]) << "int64 -> uint8 of " << v[i];
      EXPECT_EQ(b[i], v[i] != 0 ? 1 : 0) << "int64 -> bool of " << v[i];
    }
  }
  {
    const unsigned char bools[] = {0, 1, 7};  // any non-zero byte is true
    float y[3];
    long long z[3];
    run(DType::kBool, DType::kFloat32, bools, y, 3);
    run(DType::kBool, DType::kInt64, bools, z, 3);
    EXPECT_EQ(y[0], 0.f);
    EXPECT_EQ(y[1], 1.f);
    EXPECT_EQ(y[2], 1.f);
    EXPECT_EQ(z[2], 1);
    const signed char s8[] = {-128, -1, 127};
    int w[3];
    run(DType::kInt8, DType::kInt32, s8, w, 3);
    EXPECT_EQ(w[0], -128);
    EXPECT_EQ(w[1], -1);
    EXPECT_EQ(w[2], 127);
    const unsigned char u[] = {0, 200, 255};
    run(DType::kUInt8, DType::kInt64, u, z, 3);
    EXPECT_EQ(z[1], 200);
    EXPECT_EQ(z[2], 255);
  }
  // Which casts CUDA takes: six types each way; half types and strings stay on the CPU.
  EXPECT_EQ(ElementwiseKind("Cast", "", {DType::kInt64}), EwKind::kCast);
  EXPECT_EQ(ElementwiseKind("Cast", "", {DType::kFloat16}), EwKind::kNone);
  ir::Node* to_half = g.AddNode("Cast", "to_half", {}, {});
  to_half->SetAttr("to", ir::Attribute::Int(static_cast<std::int64_t>(DType::kFloat16)));
  int types = 0;
  EXPECT_FALSE(CastParams(*to_half, {3}, DType::kFloat32, &types).ok());
  ir::Node* no_to = g.AddNode("Cast", "no_to", {}, {});
  EXPECT_FALSE(CastParams(*no_to, {3}, DType::kFloat32, &types).ok());
}

TEST(CudaDataKernels, GatherIndicesAxesAndOutOfRange) {
  ir::Graph g;
  ir::Node* n = g.AddNode("Gather", "g", {}, {});
  n->SetAttr("axis", ir::Attribute::Int(1));
  // data [2,4,3], indices [2] = {3, -1} -> out [2,2,3]; -1 is the last row.
  auto p = GatherParams(*n, {2, 4, 3}, DType::kFloat32, {2}, DType::kInt64);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n, 12);
  const long long idx[2] = {3, -1};
  for (long long o = 0; o < 2; ++o)
    for (long long j = 0; j < 2; ++j)
      for (long long k = 0; k < 3; ++k) {
        const long long i = (o * 2 + j) * 3 + k;
        EXPECT_EQ(kiln_gather_source(*p, i, idx[kiln_gather_index_slot(*p, i)]), (o * 4 + 3) * 3 + k) << i;
      }
  EXPECT_EQ(kiln_gather_source(*p, 0, 4), -1);   // out of range: no read
  EXPECT_EQ(kiln_gather_source(*p, 0, -5), -1);
  EXPECT_EQ(kiln_gather_source(*p, 0, -4), 0);
  n->SetAttr("axis", ir::Attribute::Int(3));
  EXPECT_FALSE(GatherParams(*n, {2, 4, 3}, DType::kFloat32, {2}, DType::kInt64).ok());
  EXPECT_EQ(ElementwiseKind("Gather", "", {DType::kFloat32, DType::kInt64}), EwKind::kGather);
  EXPECT_EQ(ElementwiseKind("Gather", "", {DType::kFloat32, DType::kFloat32}), EwKind::kNone);
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::cuda {
namespace {

// Pooling in double over an explicitly padded copy of x (pads, plus the
// ceil-mode overhang): a tap counts for the average's include-pad divisor
// when it lies in the padded input, for everything else when it lies in x.
std::vector<double> RefPool(const std::vector<float>& x, const Shape& xs, const ir::Node& node, const Shape& ys) {
  const std::size_t sp = xs.size() - 2;
  const bool global = node.op_type().rfind("Global", 0) == 0;
  const bool is_max = node.op_type().find("Max") != std::string::npos;
  const bool include = node.GetInt("count_include_pad", 0) != 0;
  std::vector<std::int64_t> k(sp), st(sp, 1), dl(sp, 1), pb(sp, 0), pe(sp, 0);
  for (std::size_t d = 0; d < sp; ++d) {
    k[d] = global ? xs[2 + d] : node.GetInts("kernel_shape")[d];
    if (!global) {
      if (node.HasAttr("strides")) st[d] = node.GetInts("strides")[d];
      if (node.HasAttr("dilations")) dl[d] = node.GetInts("dilations")[d];
      if (node.HasAttr("pads")) {
        pb[d] = node.GetInts("pads")[d];
        pe[d] = node.GetInts("pads")[d + sp];
      }
    }
  }
  const std::int64_t planes = xs[0] * xs[1];
  std::int64_t in_plane = 1, out_plane = 1;
  for (std::size_t d = 0; d < sp; ++d) {
    in_plane *= xs[2 + d];
    out_plane *= ys[2 + d];
  }
  std::vector<double> y(static_cast<std::size_t>(planes * out_plane));
  std::vector<std::int64_t> o(sp), t(sp);
  for (std::int64_t pl = 0; pl < planes; ++pl) {
    for (std::int64_t oi = 0; oi < out_plane; ++oi) {
      std::int64_t r = oi;
      for (std::size_t d = sp; d-- > 0;) {
        o[d] = r % ys[2 + d];
        r /= ys[2 + d];
      }
      double best = -INFINITY, sum = 0;
      std::int64_t count = 0, padded = 0, taps = 1;
      for (std::size_t d = 0; d < sp; ++d) taps *= k[d];
      for (std::int64_t ti = 0; ti < taps; ++ti) {
        std::int64_t q = ti;
        bool in_x = true, in_padded = true;
        std::int64_t off = 0;
        for (std::size_t d = sp; d-- > 0;) {
          t[d] = q % k[d];
          q /= k[d];
        }
        for (std::size_t d = 0; d < sp; ++d) {
          const std::int64_t pos = o[d] * st[d] + t[d] * dl[d] - pb[d];
          in_x = in_x && pos >= 0 && pos < xs[2 + d];
          in_padded = in_padded && pos >= -pb[d] && pos < xs[2 + d] + pe[d];
          off = off * xs[2 + d] + pos;
        }
        padded += in_padded;
        if (!in_x) continue;
        const double v = x[static_cast<std::size_t>(pl * in_plane + off)];
        best = std::max(best, v);
        sum += v;
        ++count;
      }
      y[static_cast<std::size_t>(pl * out_plane + oi)] = is_max ? best : sum / static_cast<double>(include ? padded : count);
    }
  }
  return y;
}

TEST(CudaPool, EveryModeAgainstAPaddedReference) {
  struct Case {
    std::string op;
    Shape x;
    std::vector<std::pair<std::string, ir::Attribute>> attrs;
  };
  using A = ir::Attribute;
  const std::vector<Case> cases = {
      {"MaxPool", {1, 2, 7, 8}, {{"kernel_shape", A::Ints({3, 3})}, {"strides", A::Ints({2, 2})}, {"pads", A::Ints({1, 1, 1, 1})}}},
      {"MaxPool", {2, 1, 9, 9}, {{"kernel_shape", A::Ints({2, 3})}, {"dilations", A::Ints({2, 1})}, {"ceil_mode", A::Int(1)},
                                 {"strides", A::Ints({2, 2})}}},
      {"AveragePool", {1, 3, 6, 7}, {{"kernel_shape", A::Ints({3, 3})}, {"pads", A::Ints({1, 0, 1, 2})}}},
      {"AveragePool", {1, 3, 6, 7}, {{"kernel_shape", A::Ints({3, 3})}, {"pads", A::Ints({1, 0, 1, 2})},
                                     {"count_include_pad", A::Int(1)}}},
      {"AveragePool", {1, 2, 7, 7}, {{"kernel_shape", A::Ints({2, 2})}, {"strides", A::Ints({2, 2})}, {"ceil_mode", A::Int(1)},
                                     {"count_include_pad", A::Int(1)}, {"pads", A::Ints({1, 1, 1, 1})}}},
      {"MaxPool", {1, 2, 10}, {{"kernel_shape", A::Ints({4})}, {"strides", A::Ints({3})}}},
      {"AveragePool", {1, 1, 4, 5, 6}, {{"kernel_shape", A::Ints({2, 3, 2})}, {"pads", A::Ints({1, 1, 0, 0, 1, 1})}}},
      {"GlobalAveragePool", {2, 3, 5, 4}, {}},
      {"GlobalMaxPool", {2, 3, 5, 4}, {}},
  };
  for (const Case& c : cases) {
    ir::Graph g;
    ir::Node* n = g.AddNode(c.op, "pool", {}, {});
    for (const auto& [k, v] : c.attrs) n->SetAttr(k, v);
    // The output shape from the op's own inference.
    auto* xv = g.AddValue("x", DType::kFloat32, c.x);
    auto* yv = g.AddValue("y", DType::kFloat32);
    ir::Node* inferred = g.AddNode(c.op, "pool2", {xv}, {yv});
    for (const auto& [k, v] : c.attrs) inferred->SetAttr(k, v);
    ASSERT_TRUE(ops::InferNode(*inferred).ok()) << c.op;
    const Shape ys = yv->shape();
    auto p = PoolParams(*n, c.x, ys, 1);
    ASSERT_TRUE(p.ok()) << c.op << ": " << p.status().ToString();
    std::vector<float> x(static_cast<std::size_t>(NumElements(c.x)));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((static_cast<int>(i) * 37) % 23) - 11.5f;
    const std::vector<double> want = RefPool(x, c.x, *n, ys);
    ASSERT_EQ(static_cast<std::size_t>(p->n), want.size()) << c.op;
    for (long long i = 0; i < p->n; ++i) {
      ASSERT_NEAR(kiln_pool_at(*p, x.data(), i), want[static_cast<std::size_t>(i)], 1e-5) << c.op << " " << ShapeToString(c.x) << " at " << i;
    }
  }
  ir::Graph g;
  ir::Node* mp = g.AddNode("MaxPool", "mp", {}, {});
  mp->SetAttr("kernel_shape", ir::Attribute::Ints({2, 2}));
  EXPECT_FALSE(PoolParams(*mp, {1, 1, 4, 4}, {1, 1, 3, 3}, 2).ok());  // Indices wanted
  EXPECT_FALSE(PoolParams(*mp, {1, 1, 4, 4}, {1, 1, 2, 2}, 1).ok());  // wrong output
}

}  // namespace
}  // namespace kiln::cuda
