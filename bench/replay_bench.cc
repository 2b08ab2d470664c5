// Replay overhead of the recorded task list (sunk execution) and the cost of
// an address refresh.
//
//   replay_bench [--nodes 1000] [--runs 2000]
//
// 1. A chain of N tiny built-in ops (Relu on one float): median time per run
//    divided by N = the executor's per-task overhead (sync replay), and the
//    same through a stream (ExecuteGraphWithStreamAsync + Synchronize).
// 2. The ArgsUpdater sample's op at a tiny size (16 floats): runs that keep
//    the same buffers vs runs that alternate two buffer sets; the difference
//    is what an address change adds (compare, UpdateHostArgs, block copy).
// Prints one JSON line per measurement.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../examples/custom_op/args_refresh_add/add_ops.h"
#include "kiln/graph.h"
#include "kiln/runtime.h"
#include "kiln/stream.h"

namespace {

double MedianNs(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double TimeNs(int runs, Fn fn) {
  std::vector<double> ns;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn(i);
    ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
  }
  return MedianNs(ns);
}

int Fail(const kiln::Status& s) {
  std::fprintf(stderr, "replay_bench: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 1000, runs = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--nodes") nodes = std::atoi(argv[i + 1]);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
  }
  kiln::Session s;
  // 1. Per-task replay overhead.
  kiln::Graph g("chain");
  auto cur = g.AddInput("x", kiln::DType::kFloat32, {1});
  for (int i = 0; i < nodes; ++i) {
    auto r = g.AddOp("Relu", {cur});
    if (!r.ok()) return Fail(r.status());
    cur = r.value()[0];
  }
  if (kiln::Status st = g.AddOutput(cur, "y"); !st.ok()) return Fail(st);
  auto id = s.AddGraph(std::move(g));
  if (!id.ok()) return Fail(id.status());
  float x = 1.f, y = 0.f;
  std::vector<kiln::TensorRef> in = {kiln::TensorRef::Of(&x, {1})}, out = {kiln::TensorRef::Of(&y, {1})};
  if (kiln::Status st = s.RunGraph(*id, in, out); !st.ok()) return Fail(st);
  const std::size_t tasks = s.GetLoadedGraph(*id)->last_stats().tasks_run;
  double sync_ns = TimeNs(runs, [&](int) { (void)s.RunGraph(*id, in, out); });
  auto stream = kiln::Stream::Create();
  if (!stream.ok()) return Fail(stream.status());
  double async_ns = TimeNs(runs, [&](int) {
    (void)s.ExecuteGraphWithStreamAsync(*id, **stream, in, out);
    (void)(*stream)->Synchronize();
  });
  std::printf("{\"bench\":\"replay\",\"nodes\":%d,\"tasks\":%zu,\"runs\":%d,\"sync_run_us\":%.2f,"
              "\"sync_ns_per_task\":%.1f,\"stream_run_us\":%.2f,\"stream_ns_per_task\":%.1f}\n",
              nodes, tasks, runs, sync_ns / 1e3, sync_ns / tasks, async_ns / 1e3, async_ns / tasks);

  // 2. Address refresh for the ArgsUpdater sample's op.
  if (kiln::Status st = KILN_REGISTER_CUSTOM_OP(AddRefresh, add_sample::AddRefreshOp); !st.ok()) return Fail(st);
  kiln::Graph ga("add");
  auto a = ga.AddInput("x", kiln::DType::kFloat32, {4, 4});
  auto b = ga.AddInput("y", kiln::DType::kFloat32, {4, 4});
  auto z = ga.AddOp("AddRefresh", {a, b});
  if (!z.ok()) return Fail(z.status());
  if (kiln::Status st = ga.AddOutput(z.value()[0], "z"); !st.ok()) return Fail(st);
  auto aid = s.AddGraph(std::move(ga));
  if (!aid.ok()) return Fail(aid.status());
  if (kiln::Status st = s.LoadGraph(*aid, stream->get()); !st.ok()) return Fail(st);
  std::vector<float> bx[2] = {std::vector<float>(16, 1), std::vector<float>(16, 2)};
  std::vector<float> by[2] = {std::vector<float>(16, 3), std::vector<float>(16, 4)};
  std::vector<float> bz[2] = {std::vector<float>(16), std::vector<float>(16)};
  auto refs = [&](int k) {
    return std::pair<std::vector<kiln::TensorRef>, std::vector<kiln::TensorRef>>{
        {kiln::TensorRef::Of(bx[k].data(), {4, 4}), kiln::TensorRef::Of(by[k].data(), {4, 4})},
        {kiln::TensorRef::Of(bz[k].data(), {4, 4})}};
  };
  auto r0 = refs(0), r1 = refs(1);
  kiln::Model* m = s.GetLoadedGraph(*aid);
  double same_ns = TimeNs(runs, [&](int) { (void)m->Execute(r0.first, r0.second); });
  double moved_ns = TimeNs(runs, [&](int i) {
    auto& r = i % 2 ? r1 : r0;
    (void)m->Execute(r.first, r.second);
  });
  if (bz[0][0] != 4.f || bz[1][0] != 6.f) return Fail(kiln::Error(kiln::StatusCode::kInternal, "wrong sums"));
  std::printf("{\"bench\":\"refresh\",\"runs\":%d,\"same_addresses_us\":%.3f,\"moved_addresses_us\":%.3f,"
              "\"refresh_cost_us\":%.3f}\n",
              runs, same_ns / 1e3, moved_ns / 1e3, (moved_ns - same_ns) / 1e3);
  return 0;
}
