// Sample: address refresh with and without ArgsUpdater.
//
// Two graphs z = x + y on [N, N] float32 (N = 4096 by default), one with
// AddRefresh (implements ArgsUpdater), one with AddNoRefresh (does not, so
// Kiln inserts Identity copies for x, y and z). Both ops come from the
// package libcust_opapi.so (add_ops.cc), which Kiln finds through
// $KILN_CUSTOM_OP_PATH. Each graph is loaded once (its task list recorded)
// and run --runs times after warm-up, alternating two sets of input/output
// buffers so the addresses change every run. Every output is checked against
// x + y computed here.
//
//   KILN_CUSTOM_OP_PATH=output args_refresh_add [--size N] [--runs R] [--warmup W]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "add_ops.h"
#include "kiln/custom_op.h"
#include "kiln/graph.h"
#include "kiln/runtime.h"
#include "kiln/stream.h"

namespace {

int Fail(const kiln::Status& s) {
  std::fprintf(stderr, "args_refresh_add: %s\n", s.ToString().c_str());
  return 1;
}

struct Buffers {
  std::vector<float> x, y, z;
};

// Builds, compiles and loads z = op(x, y); returns the graph id.
kiln::Result<std::uint32_t> MakeGraph(kiln::Session& s, const char* op, long n, kiln::Stream& stream) {
  kiln::Graph g(op);
  auto x = g.AddInput("x", kiln::DType::kFloat32, {n, n});
  auto y = g.AddInput("y", kiln::DType::kFloat32, {n, n});
  KILN_ASSIGN_OR_RETURN(auto z, g.AddOp(op, {x, y}, {}, 1, std::string(op) + "_node"));
  KILN_RETURN_IF_ERROR(g.AddOutput(z[0], "z"));
  KILN_ASSIGN_OR_RETURN(std::uint32_t id, s.AddGraph(std::move(g)));
  KILN_RETURN_IF_ERROR(s.CompileGraph(id));
  KILN_RETURN_IF_ERROR(s.LoadGraph(id, &stream));
  return id;
}

struct Timing {
  double median_us = 0, mean_us = 0;
};

// Microseconds per run over `runs` timed runs, alternating buffer sets.
kiln::Result<Timing> Time(kiln::Session& s, std::uint32_t id, kiln::Stream& stream, Buffers (&b)[2], long n,
                          int runs, int warmup) {
  std::vector<double> us;
  for (int i = 0; i < warmup + runs; ++i) {
    Buffers& cur = b[i % 2];
    std::fill(cur.z.begin(), cur.z.end(), -1.f);
    auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(s.ExecuteGraphWithStreamAsync(
        id, stream, {kiln::TensorRef::Of(cur.x.data(), {n, n}), kiln::TensorRef::Of(cur.y.data(), {n, n})},
        {kiln::TensorRef::Of(cur.z.data(), {n, n})}));
    KILN_RETURN_IF_ERROR(stream.Synchronize());
    auto t1 = std::chrono::steady_clock::now();
    if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    for (std::size_t k = 0; k < cur.z.size(); ++k) {
      if (cur.z[k] != cur.x[k] + cur.y[k]) {
        return kiln::Error(kiln::StatusCode::kInternal, "run ", i, ": z[", k, "] = ", cur.z[k], ", expected ",
                           cur.x[k] + cur.y[k]);
      }
    }
  }
  std::sort(us.begin(), us.end());
  Timing t;
  t.median_us = us[us.size() / 2];
  for (double v : us) t.mean_us += v / static_cast<double>(us.size());
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  long n = 4096;
  int runs = 100, warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--size") n = std::atol(argv[i + 1]);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else if (a == "--warmup") warmup = std::atoi(argv[i + 1]);
    else return Fail(kiln::Error(kiln::StatusCode::kInvalidArgument, "unknown argument ", a));
  }
  if (n < 1 || runs < 1 || warmup < 0) return Fail(kiln::Error(kiln::StatusCode::kInvalidArgument, "bad arguments"));
  // The package registers both ops (as `kiln compile` / `kiln run` load it).
  kiln::Status st = kiln::LoadCustomOpPackages();
  if (!st.ok()) return Fail(st);
  for (const char* op : {add_sample::kAddRefresh, add_sample::kAddNoRefresh}) {
    if (!kiln::FindCustomOp(op)) {
      const char* env = std::getenv("KILN_CUSTOM_OP_PATH");
      return Fail(kiln::Error(kiln::StatusCode::kNotFound, "custom op ", op, " is not registered: install the "
                              "package (run.sh) and point KILN_CUSTOM_OP_PATH at it (now: ",
                              env ? env : "not set", ")"));
    }
  }

  Buffers b[2];
  for (int k = 0; k < 2; ++k) {
    b[k].x.resize(n * n);
    b[k].y.resize(n * n);
    b[k].z.resize(n * n);
    for (long i = 0; i < n * n; ++i) {
      b[k].x[i] = static_cast<float>((i * 7 + k) % 1000) * 0.5f;
      b[k].y[i] = static_cast<float>((i * 13 + 3 * k) % 977) * 0.25f;
    }
  }
  auto stream = kiln::Stream::Create();
  if (!stream.ok()) return Fail(stream.status());
  kiln::Session session;
  auto with = MakeGraph(session, "AddRefresh", n, **stream);
  if (!with.ok()) return Fail(with.status());
  auto without = MakeGraph(session, "AddNoRefresh", n, **stream);
  if (!without.ok()) return Fail(without.status());
  auto summary = session.GetCompiledGraphSummary(without.value());
  if (summary.ok()) {
    for (auto& id : summary->inserted_identities) std::printf("[Info] inserted %s: %s\n", id.node.c_str(), id.reason.c_str());
  }
  auto t_with = Time(session, with.value(), **stream, b, n, runs, warmup);
  if (!t_with.ok()) return Fail(t_with.status());
  auto t_without = Time(session, without.value(), **stream, b, n, runs, warmup);
  if (!t_without.ok()) return Fail(t_without.status());
  std::printf("[Info] input shape [%ld, %ld] float32 (x, y), %d timed iterations after %d warm-up, per graph\n", n,
              n, runs, warmup);
  std::printf("[Check] %d runs per graph, every output equal to x + y\n", runs + warmup);
  std::printf("[Perf] With ArgsUpdater: median %.1f us, average %.1f us per run\n", t_with->median_us,
              t_with->mean_us);
  std::printf("[Perf] Without ArgsUpdater: median %.1f us, average %.1f us per run\n", t_without->median_us,
              t_without->mean_us);
  std::printf("[Perf] Speedup: %.2f x (medians)\n", t_without->median_us / t_with->median_us);
  return 0;
}
