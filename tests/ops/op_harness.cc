// Backend-parametrised op harness (in the manner of ggml's test-backend-ops):
// every op case runs as a one-node model on every registered device and is
// compared with the CPU's output and with a float64 reference written here
// independently of Kiln's kernels (naive loops in double).
//
//   kiln_op_harness [--device all|cpu|sim|SPEC] [--op TYPE] [--perf [--runs N]]
//                   [--wrong-kernel TYPE] [--expect-on-device TYPE,TYPE,...]
//                   [--allow-on-cpu CASE,CASE,...] [--compile-only]
//
// Every case runs three times: in float32, and again as a float16 and as a
// bfloat16 graph (inputs, weights and output in that type; the reference
// computed in double from the inputs rounded to it, within the output's
// rounding: 2^-11 relative for float16, 2^-8 for bfloat16).
//
// --perf prints each case's median run time per device instead of checking.
// --wrong-kernel TYPE replaces the CPU library's kernel for TYPE with one
// that is deliberately wrong (adds 1e-3 to its first output element): the
// harness must then fail (ctest op_harness_catches_a_wrong_kernel).
// --expect-on-device: for a device other than cpu, a case whose node of one
// of these types is placed on the CPU (the device has no kernel for it)
// fails, so a device's kernels are known to have run (gpu-check.sh names
// the ops cuda has kernels for). --allow-on-cpu names cases exempt from it
// (a geometry the device's kernel does not take, placed on the CPU by
// design). --compile-only compiles each case for each device and checks
// placement without running (a target that compiles without its hardware:
// cuda on a machine without a GPU).
// Exit status: 0 all cases pass, 1 any failure (each named: case, device,
// element, got vs expected).
#include <algorithm>
#include <sstream>
#include <set>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "api/compiler.h"
#include "backends/cpu/kernel.h"
#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "ops/op_registry.h"
#include "runtime/devices.h"

namespace kiln {
namespace {

using Vec = std::vector<double>;
using I64 = std::int64_t;

struct Input {
  Shape shape;
  bool constant = false;  // a weight (embedded constant) instead of a model input
};

struct Case {
  std::string name;
  std::string op;
  std::vector<Input> inputs;
  std::vector<std::pair<std::string, ir::Attribute>> attrs;
  Shape out;
  std::function<Vec(const std::vector<Vec>&)> ref;
};

I64 Numel(const Shape& s) {
  I64 n = 1;
  for (I64 d : s) n *= d;
  return n;
}

// Index of out position `o` (row-major over `out`) broadcast into `in`.
I64 BroadcastIndex(I64 o, const Shape& out, const Shape& in) {
  I64 idx = 0, stride = 1;
  for (int d = static_cast<int>(out.size()) - 1, e = static_cast<int>(in.size()) - 1; d >= 0; --d, --e) {
    const I64 c = o % out[d];
    o /= out[d];
    if (e >= 0) {
      if (in[e] != 1) idx += c * stride;
      stride *= in[e];
    }
  }
  return idx;
}

Case Binary(const char* op, Shape a, Shape b, Shape out, std::function<double(double, double)> f) {
  Case c;
  c.name = std::string(op) + "_broadcast";
  c.op = op;
  c.inputs = {{a}, {b}};
  c.out = out;
  c.ref = [=](const std::vector<Vec>& in) {
    Vec y(Numel(out));
    for (I64 o = 0; o < Numel(out); ++o) y[o] = f(in[0][BroadcastIndex(o, out, a)], in[1][BroadcastIndex(o, out, b)]);
    return y;
  };
  return c;
}

// MatMul of 2-D-or-more operands with numpy batch broadcasting (`b_const`:
// B a weight), referenced by the loops of the definition.
Case BatchedMatMul(const std::string& name, Shape as, Shape bs, bool b_const) {
  const I64 M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const std::size_t r = std::max(ab.size(), bb.size());
  while (ab.size() < r) ab.insert(ab.begin(), 1);
  while (bb.size() < r) bb.insert(bb.begin(), 1);
  Shape ob(r);
  for (std::size_t i = 0; i < r; ++i) ob[i] = std::max(ab[i], bb[i]);
  Case c;
  c.name = name;
  c.op = "MatMul";
  c.inputs = {{as}, {bs, b_const}};
  c.out = ob;
  c.out.push_back(M);
  c.out.push_back(N);
  c.ref = [=](const std::vector<Vec>& in) {
    const I64 batch = Numel(ob);
    Vec y(static_cast<std::size_t>(batch * M * N), 0.0);
    for (I64 t = 0; t < batch; ++t) {
      I64 rem = t, ia = 0, ib = 0, sa = 1, sb = 1;
      for (std::size_t d = r; d-- > 0;) {
        const I64 i = rem % ob[d];
        rem /= ob[d];
        ia += (ab[d] == 1 ? 0 : i) * sa;
        ib += (bb[d] == 1 ? 0 : i) * sb;
        sa *= ab[d];
        sb *= bb[d];
      }
      for (I64 i = 0; i < M; ++i)
        for (I64 j = 0; j < N; ++j)
          for (I64 k = 0; k < K; ++k)
            y[static_cast<std::size_t>((t * M + i) * N + j)] +=
                in[0][static_cast<std::size_t>((ia * M + i) * K + k)] * in[1][static_cast<std::size_t>((ib * K + k) * N + j)];
    }
    return y;
  };
  return c;
}

Case Unary(const char* op, Shape s, std::function<double(double)> f) {
  Case c;
  c.name = op;
  c.op = op;
  c.inputs = {{s}};
  c.out = s;
  c.ref = [=](const std::vector<Vec>& in) {
    Vec y(in[0].size());
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = f(in[0][i]);
    return y;
  };
  return c;
}

// 2-D convolution, NCHW, with groups, pads (top, left, bottom, right), strides.
Case Conv(const std::string& name, I64 n, I64 cin, I64 h, I64 w, I64 cout, I64 kh, I64 kw, I64 group,
          std::vector<I64> pads, std::vector<I64> strides, bool bias) {
  const I64 oh = (h + pads[0] + pads[2] - kh) / strides[0] + 1, ow = (w + pads[1] + pads[3] - kw) / strides[1] + 1;
  Case c;
  c.name = name;
  c.op = "Conv";
  c.inputs = {{{n, cin, h, w}}, {{cout, cin / group, kh, kw}, true}};
  if (bias) c.inputs.push_back({{cout}, true});
  c.attrs = {{"pads", ir::Attribute::Ints(pads)}, {"strides", ir::Attribute::Ints(strides)},
             {"group", ir::Attribute::Int(group)}, {"kernel_shape", ir::Attribute::Ints({kh, kw})}};
  c.out = {n, cout, oh, ow};
  c.ref = [=](const std::vector<Vec>& in) {
    Vec y(Numel({n, cout, oh, ow}), 0.0);
    const I64 cg = cin / group, og = cout / group;
    for (I64 b = 0; b < n; ++b)
      for (I64 co = 0; co < cout; ++co)
        for (I64 i = 0; i < oh; ++i)
          for (I64 j = 0; j < ow; ++j) {
            double acc = bias ? in[2][co] : 0.0;
            const I64 g = co / og;
            for (I64 ci = 0; ci < cg; ++ci)
              for (I64 u = 0; u < kh; ++u)
                for (I64 v = 0; v < kw; ++v) {
                  const I64 yy = i * strides[0] - pads[0] + u, xx = j * strides[1] - pads[1] + v;
                  if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                  acc += in[0][((b * cin + g * cg + ci) * h + yy) * w + xx] * in[1][((co * cg + ci) * kh + u) * kw + v];
                }
            y[((b * cout + co) * oh + i) * ow + j] = acc;
          }
    return y;
  };
  return c;
}

Case Pool(const std::string& name, bool max, I64 n, I64 ch, I64 h, I64 w, I64 k, I64 s, I64 pad, bool count_pad) {
  const I64 oh = (h + 2 * pad - k) / s + 1, ow = (w + 2 * pad - k) / s + 1;
  Case c;
  c.name = name;
  c.op = max ? "MaxPool" : "AveragePool";
  c.inputs = {{{n, ch, h, w}}};
  c.attrs = {{"kernel_shape", ir::Attribute::Ints({k, k})}, {"strides", ir::Attribute::Ints({s, s})},
             {"pads", ir::Attribute::Ints({pad, pad, pad, pad})}};
  if (!max) c.attrs.push_back({"count_include_pad", ir::Attribute::Int(count_pad ? 1 : 0)});
  c.out = {n, ch, oh, ow};
  c.ref = [=](const std::vector<Vec>& in) {
    Vec y(Numel({n, ch, oh, ow}));
    for (I64 b = 0; b < n * ch; ++b)
      for (I64 i = 0; i < oh; ++i)
        for (I64 j = 0; j < ow; ++j) {
          double acc = max ? -INFINITY : 0.0;
          I64 cnt = 0;
          for (I64 u = 0; u < k; ++u)
            for (I64 v = 0; v < k; ++v) {
              const I64 yy = i * s - pad + u, xx = j * s - pad + v;
              if (yy < 0 || yy >= h || xx < 0 || xx >= w) {
                if (count_pad) ++cnt;
                continue;
              }
              const double x = in[0][(b * h + yy) * w + xx];
              acc = max ? std::max(acc, x) : acc + x;
              ++cnt;
            }
          y[(b * oh + i) * ow + j] = max ? acc : acc / static_cast<double>(cnt);
        }
    return y;
  };
  return c;
}

std::vector<Case> Cases() {
  std::vector<Case> cs;
  cs.push_back(Binary("Add", {2, 3, 4}, {4}, {2, 3, 4}, [](double a, double b) { return a + b; }));
  cs.push_back(Binary("Mul", {2, 1, 4}, {3, 1}, {2, 3, 4}, [](double a, double b) { return a * b; }));
  cs.push_back(Binary("Sub", {5, 1}, {1, 6}, {5, 6}, [](double a, double b) { return a - b; }));
  cs.push_back(Binary("Div", {7}, {7}, {7}, [](double a, double b) { return a / b; }));
  cs.back().name = "Div_guarded";  // divisor in [0.5, 1.5] (MakeInputs)
  cs.push_back(Unary("Relu", {3, 17}, [](double x) { return x > 0 ? x : 0; }));
  cs.push_back(Unary("Sigmoid", {4, 9}, [](double x) { return 1 / (1 + std::exp(-x)); }));
  cs.push_back(Unary("Tanh", {33}, [](double x) { return std::tanh(x); }));
  cs.push_back(Unary("Exp", {2, 8}, [](double x) { return std::exp(x); }));
  cs.push_back(Unary("Abs", {19}, [](double x) { return std::fabs(x); }));
  {
    Case c;
    c.name = "MatMul";
    c.op = "MatMul";
    c.inputs = {{{3, 4}}, {{4, 5}}};
    c.out = {3, 5};
    c.ref = [](const std::vector<Vec>& in) {
      Vec y(15, 0.0);
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j)
          for (int k = 0; k < 4; ++k) y[i * 5 + j] += in[0][i * 4 + k] * in[1][k * 5 + j];
      return y;
    };
    cs.push_back(c);
  }
  // Batched products: A's batch folded into M (a 2-D weight B), evenly
  // spaced batches (one strided GEMM; A broadcast with stride 0), and a
  // partial broadcast (pointer arrays).
  cs.push_back(BatchedMatMul("MatMul_batch_folded", {2, 5, 3, 4}, {4, 6}, true));
  cs.push_back(BatchedMatMul("MatMul_batch_strided", {2, 3, 4}, {2, 4, 5}, false));
  cs.push_back(BatchedMatMul("MatMul_batch_a_broadcast", {5, 4}, {2, 3, 4, 6}, false));
  cs.push_back(BatchedMatMul("MatMul_batch_partial_broadcast", {2, 1, 3, 4}, {3, 4, 2}, false));
  {
    Case c;  // y = 0.5 * A * B^T + 2 * C
    c.name = "Gemm_transB_alpha_beta";
    c.op = "Gemm";
    c.inputs = {{{3, 4}}, {{5, 4}, true}, {{5}, true}};
    c.attrs = {{"transB", ir::Attribute::Int(1)}, {"alpha", ir::Attribute::Float(0.5f)},
               {"beta", ir::Attribute::Float(2.f)}};
    c.out = {3, 5};
    c.ref = [](const std::vector<Vec>& in) {
      Vec y(15, 0.0);
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j) {
          double acc = 0;
          for (int k = 0; k < 4; ++k) acc += in[0][i * 4 + k] * in[1][j * 4 + k];
          y[i * 5 + j] = 0.5 * acc + 2.0 * in[2][j];
        }
      return y;
    };
    cs.push_back(c);
  }
  cs.push_back(Conv("Conv_pad1_stride2_bias", 1, 2, 5, 5, 3, 3, 3, 1, {1, 1, 1, 1}, {2, 2}, true));
  cs.push_back(Conv("Conv_grouped", 1, 4, 4, 4, 4, 3, 3, 2, {0, 0, 0, 0}, {1, 1}, false));
  cs.push_back(Conv("Conv_asymmetric_pads", 2, 3, 6, 5, 2, 2, 3, 1, {0, 1, 1, 0}, {1, 2}, true));
  cs.push_back(Pool("MaxPool_2x2", true, 1, 2, 5, 5, 2, 2, 0, false));
  cs.push_back(Pool("AveragePool_pad_exclude", false, 1, 2, 4, 4, 3, 1, 1, false));
  cs.push_back(Pool("AveragePool_pad_include", false, 1, 1, 5, 5, 3, 2, 1, true));
  {
    Case c;
    c.name = "Softmax_last_axis";
    c.op = "Softmax";
    c.inputs = {{{2, 5}}};
    c.attrs = {{"axis", ir::Attribute::Int(-1)}};
    c.out = {2, 5};
    c.ref = [](const std::vector<Vec>& in) {
      Vec y(10);
      for (int r = 0; r < 2; ++r) {
        double m = -INFINITY, s = 0;
        for (int j = 0; j < 5; ++j) m = std::max(m, in[0][r * 5 + j]);
        for (int j = 0; j < 5; ++j) s += std::exp(in[0][r * 5 + j] - m);
        for (int j = 0; j < 5; ++j) y[r * 5 + j] = std::exp(in[0][r * 5 + j] - m) / s;
      }
      return y;
    };
    cs.push_back(c);
  }
  {
    Case c;
    c.name = "GlobalAveragePool";
    c.op = "GlobalAveragePool";
    c.inputs = {{{1, 3, 4, 5}}};
    c.out = {1, 3, 1, 1};
    c.ref = [](const std::vector<Vec>& in) {
      Vec y(3, 0.0);
      for (int ch = 0; ch < 3; ++ch) {
        for (int i = 0; i < 20; ++i) y[ch] += in[0][ch * 20 + i];
        y[ch] /= 20.0;
      }
      return y;
    };
    cs.push_back(c);
  }
  {
    Case c;
    c.name = "Transpose_201";
    c.op = "Transpose";
    c.inputs = {{{2, 3, 4}}};
    c.attrs = {{"perm", ir::Attribute::Ints({2, 0, 1})}};
    c.out = {4, 2, 3};
    c.ref = [](const std::vector<Vec>& in) {
      Vec y(24);
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 3; ++b)
          for (int d = 0; d < 4; ++d) y[(d * 2 + a) * 3 + b] = in[0][(a * 3 + b) * 4 + d];
      return y;
    };
    cs.push_back(c);
  }
  {
    Case c;
    c.name = "Concat_axis1";
    c.op = "Concat";
    c.inputs = {{{2, 2}}, {{2, 3}}};
    c.attrs = {{"axis", ir::Attribute::Int(1)}};
    c.out = {2, 5};
    c.ref = [](const std::vector<Vec>& in) {
      Vec y(10);
      for (int r = 0; r < 2; ++r) {
        for (int j = 0; j < 2; ++j) y[r * 5 + j] = in[0][r * 2 + j];
        for (int j = 0; j < 3; ++j) y[r * 5 + 2 + j] = in[1][r * 3 + j];
      }
      return y;
    };
    cs.push_back(c);
  }
  {
    Case c;  // scale, bias, mean, var constants; var made positive below
    c.name = "BatchNormalization";  // variance in [0.25, 1.25] (MakeInputs)
    c.op = "BatchNormalization";
    c.inputs = {{{1, 3, 2, 2}}, {{3}, true}, {{3}, true}, {{3}, true}, {{3}, true}};
    c.attrs = {{"epsilon", ir::Attribute::Float(1e-3f)}};
    c.out = {1, 3, 2, 2};
    c.ref = [](const std::vector<Vec>& in) {
      Vec y(12);
      for (int ch = 0; ch < 3; ++ch) {
        const double var = in[4][ch];
        for (int i = 0; i < 4; ++i) {
          const double x = in[0][ch * 4 + i];
          y[ch * 4 + i] = in[1][ch] * (x - in[3][ch]) / std::sqrt(var + static_cast<double>(1e-3f)) + in[2][ch];
        }
      }
      return y;
    };
    cs.push_back(c);
  }
  return cs;
}

// Seeded inputs in [-1, 1]; Div's divisor and BatchNormalization's variance
// are shifted so the reference's guard matches the data.
std::vector<std::vector<float>> MakeInputs(const Case& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<std::vector<float>> in;
  for (const Input& i : c.inputs) {
    std::vector<float> v(static_cast<std::size_t>(Numel(i.shape)));
    for (float& x : v) x = u(rng);
    in.push_back(std::move(v));
  }
  if (c.name == "Div_guarded") {
    for (float& x : in[1]) x = std::fabs(x) + 0.5f;
  }
  if (c.op == "BatchNormalization") {
    for (float& x : in[4]) x = std::fabs(x) + 0.25f;
  }
  return in;
}

// float32 values as `dt` (float32, float16 or bfloat16, round to nearest
// even) and back.
std::vector<std::uint16_t> ToHalfBits(const std::vector<float>& v, DType dt) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = dt == DType::kFloat16 ? FloatToHalf(v[i]) : FloatToBFloat16(v[i]);
  return out;
}
std::vector<float> FromHalfBits(const std::vector<std::uint16_t>& v, DType dt) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = dt == DType::kFloat16 ? HalfToFloat(v[i]) : BFloat16ToFloat(v[i]);
  return out;
}
void RoundTo(std::vector<std::vector<float>>& data, DType dt) {
  if (dt == DType::kFloat32) return;
  for (auto& v : data) v = FromHalfBits(ToHalfBits(v, dt), dt);
}

std::set<std::string>& ExpectOnDevice() {
  static std::set<std::string> s;
  return s;
}
std::set<std::string>& AllowOnCpu() {
  static std::set<std::string> s;
  return s;
}

// Compiled for `target` ("cpu" by default): a device with kernels for only
// some ops (cuda) gets a file whose other nodes are placed on the CPU.
Result<std::string> Compile(const Case& c, const std::vector<std::vector<float>>& data, const std::string& dir,
                            DType dt, const std::string& target = "cpu") {
  auto g = std::make_unique<ir::Graph>();
  g->set_name(c.name);
  std::vector<ir::Value*> ins;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    if (c.inputs[i].constant) {
      auto t = std::make_shared<HostTensor>(dt, c.inputs[i].shape);
      if (dt == DType::kFloat32) {
        std::memcpy(t->mutable_data(), data[i].data(), data[i].size() * sizeof(float));
      } else {
        const auto bits = ToHalfBits(data[i], dt);
        std::memcpy(t->mutable_data(), bits.data(), bits.size() * 2);
      }
      ins.push_back(g->AddConstant(name, t));
    } else {
      ir::Value* v = g->AddValue(name, dt, c.inputs[i].shape);
      g->inputs().push_back(v);
      ins.push_back(v);
    }
  }
  ir::Value* y = g->AddValue("y", dt);
  ir::Node* n = g->AddNode(c.op, "node", ins, {y});
  for (auto& [k, a] : c.attrs) n->SetAttr(k, a);
  if (const ops::OpDef* d = ops::OpRegistry::Get().Find(c.op, "")) n->set_since_version(d->versions.back());
  g->outputs().push_back(y);
  CompileOptions opts;
  opts.target = target;
  KILN_ASSIGN_OR_RETURN(format::CompiledModel m, CompileGraph(std::move(g), opts));
  std::string base_name = c.name;
  for (const char* suffix : {"_float16", "_bfloat16"}) {
    const std::string sfx = suffix;
    if (base_name.size() > sfx.size() && base_name.compare(base_name.size() - sfx.size(), sfx.size(), sfx) == 0) {
      base_name.resize(base_name.size() - sfx.size());
    }
  }
  if (target != "cpu" && !AllowOnCpu().count(base_name)) {
    for (const auto& node : m.graph->nodes()) {
      if (ExpectOnDevice().count(node->op_type()) && ir::IsHostPlaced(*node)) {
        return Error(StatusCode::kInternal, node->Describe(), " was placed on the CPU, but device '", target,
                     "' should run it (--expect-on-device)");
      }
    }
  }
  std::string tag = target;
  for (char& ch : tag) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  const std::string path = dir + "/" + c.name + "_" + DTypeName(dt) + "_" + tag + ".kiln";
  KILN_RETURN_IF_ERROR(format::WriteModelFile(m, path));
  return path;
}

struct RunResult {
  std::vector<float> out;
  double median_ms = 0;
};

Result<RunResult> RunOn(const std::string& path, const std::string& device, const Case& c,
                        std::vector<std::vector<float>>& data, int runs, DType dt) {
  LoadOptions o;
  o.device = device;
  KILN_ASSIGN_OR_RETURN(auto model, Model::Load(path, o));
  std::vector<TensorRef> ins;
  std::vector<std::vector<std::uint16_t>> half_in;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].constant) continue;
    if (dt == DType::kFloat32) {
      ins.push_back(TensorRef::Of(data[i].data(), c.inputs[i].shape));
    } else {
      half_in.push_back(ToHalfBits(data[i], dt));
      ins.push_back({half_in.back().data(), dt, c.inputs[i].shape});
    }
  }
  RunResult r;
  r.out.assign(static_cast<std::size_t>(Numel(c.out)), NAN);
  std::vector<std::uint16_t> half_out(r.out.size());
  const TensorRef out = dt == DType::kFloat32 ? TensorRef::Of(r.out.data(), c.out)
                                               : TensorRef{half_out.data(), dt, c.out};
  if (model->outputs().size() != 1 || model->outputs()[0].shape != c.out) {
    return Error(StatusCode::kInternal, c.name, ": model output shape ", ShapeToString(model->outputs()[0].shape),
                 ", the harness expects ", ShapeToString(c.out));
  }
  std::vector<double> times;
  for (int i = 0; i < std::max(1, runs); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(model->Execute(ins, {out}));
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (dt != DType::kFloat32) r.out = FromHalfBits(half_out, dt);
  std::sort(times.begin(), times.end());
  r.median_ms = times[times.size() / 2];
  return r;
}

// |got - want| <= atol + rtol * |want| for every element; the first failure
// is described in *why.
bool Close(const std::vector<float>& got, const Vec& want, double rtol, double atol, std::string* why) {
  if (got.size() != want.size()) {
    *why = StrCat(got.size(), " elements, expected ", want.size());
    return false;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "element %zu: got %.9g, expected %.9g (|diff| %.3g > %.3g)", i, g, w,
                    std::fabs(g - w), atol + rtol * std::fabs(w));
      *why = buf;
      return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  using namespace kiln;
  std::string device_arg = "all", only_op, wrong;
  bool perf = false, compile_only = false;
  int runs = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--device") device_arg = next();
    else if (a == "--op") only_op = next();
    else if (a == "--perf") perf = true;
    else if (a == "--runs") runs = std::max(1, std::atoi(next().c_str()));
    else if (a == "--wrong-kernel") wrong = next();
    else if (a == "--expect-on-device" || a == "--allow-on-cpu") {
      std::set<std::string>& into = a == "--allow-on-cpu" ? AllowOnCpu() : ExpectOnDevice();
      std::stringstream ss(next());
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (!item.empty()) into.insert(item);
      }
    }
    else if (a == "--compile-only") compile_only = true;
    else {
      std::fprintf(stderr, "unknown argument '%s' (see the header of tests/ops/op_harness.cc)\n", a.c_str());
      return 1;
    }
  }
  std::vector<std::string> devices;
  if (device_arg == "all") {
    // Every kind this build has that opens here (cuda needs a GPU).
    for (const std::string& k : runtime::DeviceKinds()) {
      auto d = runtime::OpenDevice(k);
      if (d.ok()) {
        devices.push_back(k);
      } else {
        std::printf("device %s skipped: %s\n", k.c_str(), d.status().ToString().c_str());
      }
    }
  } else {
    devices = {device_arg};
  }
  if (!wrong.empty()) {
    // A deliberately wrong kernel: the real one, then its first output
    // element nudged by 1e-3.
    const cpu::KernelFactory* real = cpu::KernelRegistry::Get().Find(wrong);
    if (!real) {
      std::fprintf(stderr, "--wrong-kernel: no CPU kernel for '%s'\n", wrong.c_str());
      return 1;
    }
    cpu::KernelFactory inner = *real;
    cpu::KernelRegistry::Get().Register(wrong, [inner](const cpu::KernelInit& init) -> Result<std::unique_ptr<cpu::Kernel>> {
      KILN_ASSIGN_OR_RETURN(auto k, inner(init));
      std::shared_ptr<cpu::Kernel> shared(std::move(k));
      return cpu::MakeFn([shared](const cpu::KernelArgs& a) -> Status {
        KILN_RETURN_IF_ERROR(shared->Run(a));
        *a.out_as<float>(0) += 1e-3f;
        return Status::Ok();
      });
    });
  }
  char tmpl[] = "/tmp/kiln_op_harness_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  int failures = 0, checked = 0;
  if (perf) std::printf("%-28s %-8s %12s\n", "case", "device", "median_ms");
  for (const Case& base : Cases()) {
   if (!only_op.empty() && base.op != only_op) continue;
   for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    Case c = base;
    if (dt != DType::kFloat32) c.name += std::string("_") + DTypeName(dt);
    auto data = MakeInputs(c, 0x5EED + checked);
    RoundTo(data, dt);  // the reference sees the values the model gets
    auto path = Compile(c, data, dir, dt);
    if (!path.ok()) {
      std::printf("FAIL %s: compile: %s\n", c.name.c_str(), path.status().ToString().c_str());
      ++failures;
      continue;
    }
    std::vector<Vec> din;
    for (auto& v : data) din.emplace_back(v.begin(), v.end());
    const Vec want = c.ref(din);
    // A half output is the exact result rounded once (nearest even): within
    // half a unit in the last place, 2^-11 (float16) or 2^-8 (bfloat16) of
    // its magnitude.
    const double rtol = dt == DType::kFloat16 ? 1e-5 + std::ldexp(1.0, -11)
                        : dt == DType::kBFloat16 ? 1e-5 + std::ldexp(1.0, -8) : 1e-5;
    std::vector<float> cpu_out;
    for (const std::string& dev : devices) {
      // Each device gets a file compiled for it (a device that lacks ops,
      // sim:lack=... or cuda, runs those nodes on the CPU).
      const bool own_file = dev != "cpu";
      auto dev_path = own_file ? Compile(c, data, dir, dt, dev) : path;
      if (!dev_path.ok()) {
        std::printf("FAIL %s on %s: compile: %s\n", c.name.c_str(), dev.c_str(), dev_path.status().ToString().c_str());
        ++failures;
        continue;
      }
      if (compile_only) continue;
      auto r = RunOn(dev_path.value(), dev, c, data, perf ? runs : 1, dt);
      if (!r.ok()) {
        std::printf("FAIL %s on %s: %s\n", c.name.c_str(), dev.c_str(), r.status().ToString().c_str());
        ++failures;
        continue;
      }
      if (perf) {
        std::printf("%-28s %-8s %12.4f\n", c.name.c_str(), dev.c_str(), r->median_ms);
        continue;
      }
      std::string why;
      if (!Close(r->out, want, rtol, 1e-6, &why)) {
        std::printf("FAIL %s on %s vs float64 reference: %s\n", c.name.c_str(), dev.c_str(), why.c_str());
        ++failures;
      }
      if (dev == "cpu") {
        cpu_out = r->out;
      } else if (!cpu_out.empty()) {
        const Vec cpu_d(cpu_out.begin(), cpu_out.end());
        if (!Close(r->out, cpu_d, 1e-6, 1e-7, &why)) {
          std::printf("FAIL %s on %s vs cpu: %s\n", c.name.c_str(), dev.c_str(), why.c_str());
          ++failures;
        }
      }
    }
    ++checked;
   }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!perf) {
    std::printf("%s: %d case(s) on %zu device(s), %d failure(s)\n", failures ? "FAILED" : "ok", checked,
                devices.size(), failures);
  }
  return failures ? 1 : 0;
}
