// Replay overhead of the recorded task list (sunk execution) and the cost of
// an address refresh.
//
//   replay_bench [--nodes 1000] [--runs 2000] [--device SPEC] [--refresh-nodes 8] [--elems 4096]
//
// 1. A chain of N tiny built-in ops (Relu on one float): median time per run
//    divided by N = the executor's per-task overhead (sync replay), and the
//    same through a stream (ExecuteGraphWithStreamAsync + Synchronize).
// 2. The ArgsUpdater sample's op at a tiny size (16 floats): runs that keep
//    the same buffers vs runs that alternate two buffer sets; the difference
//    is what an address change adds (compare, UpdateHostArgs, block copy).
// 3. Data-dependent extents: NonZero on 64 floats, then a chain of N/5 Neg ops
//    on its [1, <=64] result. Every Neg is a dynamic task (per-run inference on
//    the actual shape, kernel cache lookup): median time per run / tasks = the
//    per-task cost of the dynamic path, next to (1)'s static replay.
// 4. Address refresh with device memory (on --device; cpu, sim or cuda): a
//    chain of --refresh-nodes Relus on --elems floats whose input and output
//    are DeviceBuffers of that device (TensorRef::on_device, bound in place):
//    runs that keep the same buffers vs runs that alternate two sets; the
//    difference is what moving the bindings costs per run (argument blocks
//    rewritten and copied to the device). On a device other than cpu, (1)
//    runs there with host tensors (copied in and out each run) and (2)-(3)
//    are skipped (a CPU custom op; data-dependent extents on a recording
//    device).
// Prints one JSON line per measurement.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../examples/custom_op/args_refresh_add/add_ops.h"
#include "kiln/custom_op.h"
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
  int nodes = 1000, runs = 2000, refresh_nodes = 8, elems = 4096;
  std::string device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--nodes") nodes = std::atoi(argv[i + 1]);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else if (a == "--device") device = argv[i + 1];
    else if (a == "--refresh-nodes") refresh_nodes = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--elems") elems = std::max(1, std::atoi(argv[i + 1]));
  }
  kiln::SessionOptions so;
  so.load.device = device;
  kiln::Session s(so);
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
  kiln::Status sync_st;
  double sync_ns = TimeNs(runs, [&](int) {
    kiln::Status st = s.RunGraph(*id, in, out);
    if (!st.ok() && sync_st.ok()) sync_st = st;
  });
  if (!sync_st.ok()) return Fail(sync_st);
  auto stream = kiln::Stream::Create(device);
  if (!stream.ok()) return Fail(stream.status());
  kiln::Status async_st;
  double async_ns = TimeNs(runs, [&](int) {
    kiln::Status st = s.ExecuteGraphWithStreamAsync(*id, **stream, in, out);
    if (st.ok()) st = (*stream)->Synchronize();
    if (!st.ok() && async_st.ok()) async_st = st;
  });
  if (!async_st.ok()) return Fail(async_st);
  std::printf("{\"bench\":\"replay\",\"device\":\"%s\",\"nodes\":%d,\"tasks\":%zu,\"runs\":%d,\"sync_run_us\":%.2f,"
              "\"sync_ns_per_task\":%.1f,\"stream_run_us\":%.2f,\"stream_ns_per_task\":%.1f}\n",
              device.c_str(), nodes, tasks, runs, sync_ns / 1e3, sync_ns / tasks, async_ns / 1e3, async_ns / tasks);

  // 4. Address refresh with device memory.
  {
    kiln::Graph gr("refresh_chain");
    auto rc = gr.AddInput("x", kiln::DType::kFloat32, {elems});
    for (int i = 0; i < refresh_nodes; ++i) {
      auto r = gr.AddOp(i % 2 ? "Relu" : "Neg", {rc});
      if (!r.ok()) return Fail(r.status());
      rc = r.value()[0];
    }
    if (kiln::Status st = gr.AddOutput(rc, "y"); !st.ok()) return Fail(st);
    auto rid = s.AddGraph(std::move(gr));
    if (!rid.ok()) return Fail(rid.status());
    const std::size_t bytes = static_cast<std::size_t>(elems) * sizeof(float);
    std::unique_ptr<kiln::DeviceBuffer> bin[2], bout[2];
    for (int k = 0; k < 2; ++k) {
      auto i = kiln::DeviceBuffer::Allocate(device, bytes);
      auto o = kiln::DeviceBuffer::Allocate(device, bytes);
      if (!i.ok()) return Fail(i.status());
      if (!o.ok()) return Fail(o.status());
      bin[k] = std::move(i).value();
      bout[k] = std::move(o).value();
      std::vector<float> v(static_cast<std::size_t>(elems), k ? -2.f : -1.f);
      if (kiln::Status st = bin[k]->CopyFromHost(v.data(), bytes); !st.ok()) return Fail(st);
    }
    auto dref = [&](int k) {
      return std::pair<std::vector<kiln::TensorRef>, std::vector<kiln::TensorRef>>{
          {bin[k]->Ref(kiln::DType::kFloat32, {elems})}, {bout[k]->Ref(kiln::DType::kFloat32, {elems})}};
    };
    auto d0 = dref(0), d1 = dref(1);
    if (kiln::Status st = s.RunGraph(*rid, d0.first, d0.second); !st.ok()) return Fail(st);
    kiln::Model* rm = s.GetLoadedGraph(*rid);
    if (kiln::Status st = rm->Execute(d1.first, d1.second); !st.ok()) return Fail(st);
    kiln::Status r_st;
    double r_same = TimeNs(runs, [&](int) {
      kiln::Status st = rm->Execute(d0.first, d0.second);
      if (!st.ok() && r_st.ok()) r_st = st;
    });
    double r_moved = TimeNs(runs, [&](int i) {
      auto& r = i % 2 ? d1 : d0;
      kiln::Status st = rm->Execute(r.first, r.second);
      if (!st.ok() && r_st.ok()) r_st = st;
    });
    if (!r_st.ok()) return Fail(r_st);
    // Neg, Relu, Neg, ... on a constant input: the chain's definition, here.
    for (int k = 0; k < 2; ++k) {
      std::vector<float> out(static_cast<std::size_t>(elems));
      if (kiln::Status st = bout[k]->CopyToHost(out.data(), bytes); !st.ok()) return Fail(st);
      double v = k ? -2.0 : -1.0;
      for (int i = 0; i < refresh_nodes; ++i) v = i % 2 ? std::max(v, 0.0) : -v;
      if (out[0] != static_cast<float>(v) || out.back() != static_cast<float>(v)) {
        return Fail(kiln::Error(kiln::StatusCode::kInternal, "wrong refresh chain result: ", out[0], " vs ", v));
      }
    }
    std::printf("{\"bench\":\"refresh_device\",\"device\":\"%s\",\"nodes\":%d,\"elems\":%d,\"runs\":%d,"
                "\"same_addresses_us\":%.3f,\"moved_addresses_us\":%.3f,\"refresh_cost_us\":%.3f}\n",
                device.c_str(), refresh_nodes, elems, runs, r_same / 1e3, r_moved / 1e3, (r_moved - r_same) / 1e3);
  }
  if (device != "cpu") return 0;

  // 2. Address refresh for the ArgsUpdater sample's op.
  // The sample's package (built with this benchmark), loaded as Kiln loads
  // any package.
  if (kiln::Status st = kiln::LoadCustomOpLibrary(KILN_SAMPLE_PACKAGE); !st.ok()) return Fail(st);
  kiln::Graph ga("add");
  auto a = ga.AddInput("x", kiln::DType::kFloat32, {4, 4});
  auto b = ga.AddInput("y", kiln::DType::kFloat32, {4, 4});
  auto z = ga.AddOp(add_sample::kAddRefresh, {a, b});
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

  // 3. Dynamic tasks.
  const int dyn_nodes = std::max(1, nodes / 5);
  kiln::Graph gd("dynamic_chain");
  auto dx = gd.AddInput("x", kiln::DType::kFloat32, {64});
  auto nz = gd.AddOp("NonZero", {dx});
  if (!nz.ok()) return Fail(nz.status());
  auto dcur = nz.value()[0];
  for (int i = 0; i < dyn_nodes; ++i) {
    auto r = gd.AddOp("Neg", {dcur});
    if (!r.ok()) return Fail(r.status());
    dcur = r.value()[0];
  }
  if (kiln::Status st = gd.AddOutput(dcur, "y"); !st.ok()) return Fail(st);
  auto did = s.AddGraph(std::move(gd));
  if (!did.ok()) return Fail(did.status());
  std::vector<float> xs(64, 0.f);
  for (int i = 0; i < 64; i += 2) xs[i] = 1.f;  // 32 non-zeros
  std::vector<std::int64_t> ys(64);
  std::vector<kiln::TensorRef> din = {kiln::TensorRef::Of(xs.data(), {64})},
                               dout = {kiln::TensorRef::Of(ys.data(), {1, 64})};
  if (kiln::Status st = s.RunGraph(*did, din, dout); !st.ok()) return Fail(st);
  kiln::Model* dm = s.GetLoadedGraph(*did);
  const std::int64_t want = dyn_nodes % 2 ? -2 : 2;  // index of the 2nd non-zero, negated N times
  if (dm->output_shape(0) != kiln::Shape{1, 32} || ys[1] != want) {
    return Fail(kiln::Error(kiln::StatusCode::kInternal, "wrong dynamic chain result"));
  }
  const std::size_t dtasks = dm->last_stats().tasks_run;
  double dyn_ns = TimeNs(runs, [&](int) { (void)s.RunGraph(*did, din, dout); });
  std::printf("{\"bench\":\"dynamic\",\"tasks\":%zu,\"runs\":%d,\"run_us\":%.2f,\"ns_per_task\":%.1f}\n",
              dtasks, runs, dyn_ns / 1e3, dyn_ns / dtasks);
  return 0;
}
