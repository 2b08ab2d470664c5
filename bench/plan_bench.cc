// The cost of a new plan for a model with symbolic input dims: the first run
// at a new signature of input shapes pays shape inference, the memory plan
// and the executor (kernels, argument blocks, the recorded list).
//
//   plan_bench MODEL.kiln [--threads N] [--rounds R] [--plan-only] SIG [SIG ...]
//
// A SIG gives every input's shape, inputs separated by ';' and dims by ',':
// "1,16;1,16" for a model with two [batch, seq] inputs. Inputs are zeros
// (valid token ids and masks; plans of shape-input models depend on values
// and are not this program's subject). In one process, after one warm-up
// plan at the first signature (which pays one-time costs: oneDNN's first
// primitives, the thread pool), each signature is run R times in a row; the
// first of those runs makes its plan. Prints one JSON line per signature:
// the plan's time and parts (PlanStats), the first run's wall time (its
// plan included) and the median of the later runs; then a summary line with
// the medians over the signatures (the warm-up signature excluded), where
// first_run_extra_us is what the first run took beyond its plan and a
// later run (a plan dropped from the cache, cold code and memory). --plan-only makes the plans
// (OutputShapesFor) and runs nothing: for profiling the planning alone.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/runtime.h"

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t b = 0;
  for (;;) {
    const std::size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) return out;
    b = e + 1;
  }
}

int Usage() {
  std::fprintf(stderr, "usage: plan_bench MODEL.kiln [--threads N] [--rounds R] [--plan-only] SIG [SIG ...]\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  const std::string path = argv[1];
  int threads = 1, rounds = 5;
  bool plan_only = false;
  std::vector<std::vector<kiln::Shape>> sigs;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--plan-only") {
      plan_only = true;
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(2, std::atoi(argv[++i]));
    } else {
      std::vector<kiln::Shape> sig;
      for (const std::string& in : Split(a, ';')) {
        kiln::Shape s;
        for (const std::string& d : Split(in, ',')) {
          char* end = nullptr;
          const long long v = std::strtoll(d.c_str(), &end, 10);
          if (d.empty() || *end != '\0' || v < 0 || v > (1 << 20)) {
            std::fprintf(stderr, "plan_bench: bad dim '%s' in '%s'\n", d.c_str(), a.c_str());
            return 1;
          }
          s.push_back(v);
        }
        sig.push_back(std::move(s));
      }
      sigs.push_back(std::move(sig));
    }
  }
  if (sigs.size() < 2) return Usage();
  kiln::LoadOptions lo;
  lo.threads = threads;
  // (The default plan cache: 8 plans, least recently used dropped.)
  auto model = kiln::Model::Load(path, lo);
  if (!model.ok()) {
    std::fprintf(stderr, "plan_bench: %s\n", model.status().ToString().c_str());
    return 1;
  }
  kiln::Model& m = *model.value();
  std::vector<double> plan_us, spec_us, mem_us, exec_us, first_over_us;
  for (std::size_t k = 0; k < sigs.size(); ++k) {
    const auto& sig = sigs[k];
    if (sig.size() != m.inputs().size()) {
      std::fprintf(stderr, "plan_bench: signature %zu has %zu inputs, the model %zu\n", k, sig.size(),
                   m.inputs().size());
      return 1;
    }
    std::vector<std::vector<unsigned char>> in_bufs, out_bufs;
    std::vector<kiln::TensorRef> ins, outs;
    for (std::size_t i = 0; i < sig.size(); ++i) {
      std::size_t n = kiln::DTypeSize(m.inputs()[i].dtype);
      for (std::int64_t d : sig[i]) n *= static_cast<std::size_t>(d);
      in_bufs.emplace_back(n, 0);
    }
    for (std::size_t i = 0; i < sig.size(); ++i) {
      ins.push_back({in_bufs[i].data(), m.inputs()[i].dtype, sig[i]});
    }
    const std::uint64_t made = m.plan_stats().created;
    std::vector<double> run_us;
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      if (r == 0) {
        auto shapes = m.OutputShapesFor(ins);
        if (!shapes.ok()) {
          std::fprintf(stderr, "plan_bench: %s\n", shapes.status().ToString().c_str());
          return 1;
        }
        for (std::size_t o = 0; o < shapes.value().size(); ++o) {
          std::size_t n = kiln::DTypeSize(m.outputs()[o].dtype);
          for (std::int64_t d : shapes.value()[o]) n *= static_cast<std::size_t>(d);
          out_bufs.emplace_back(n, 0);
          outs.push_back({out_bufs[o].data(), m.outputs()[o].dtype, shapes.value()[o]});
        }
      }
      if (plan_only) {
        run_us.push_back(0);
        run_us.push_back(0);
        break;
      }
      const kiln::Status st = m.Execute(ins, outs);
      if (!st.ok()) {
        std::fprintf(stderr, "plan_bench: %s\n", st.ToString().c_str());
        return 1;
      }
      run_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    const kiln::PlanStats ps = m.plan_stats();
    if (ps.created != made + 1) {
      std::fprintf(stderr, "plan_bench: signature %zu made %llu plans (a repeated signature?)\n", k,
                   static_cast<unsigned long long>(ps.created - made));
      return 1;
    }
    const double later = Median(std::vector<double>(run_us.begin() + 1, run_us.end()));
    std::string text;
    for (std::size_t i = 0; i < sig.size(); ++i) {
      text += i ? ";" : "";
      for (std::size_t d = 0; d < sig[i].size(); ++d) text += (d ? "," : "") + std::to_string(sig[i][d]);
    }
    std::printf(
        "{\"signature\": \"%s\", \"warmup\": %s, \"plan_us\": %.1f, \"specialize_us\": %.1f, "
        "\"memory_plan_us\": %.1f, \"executor_us\": %.1f, \"first_run_us\": %.1f, \"run_us\": %.1f}\n",
        text.c_str(), k == 0 ? "true" : "false", ps.last_plan_us, ps.last_specialize_us, ps.last_memory_plan_us,
        ps.last_executor_us, run_us[0], later);
    if (k == 0) continue;
    plan_us.push_back(ps.last_plan_us);
    spec_us.push_back(ps.last_specialize_us);
    mem_us.push_back(ps.last_memory_plan_us);
    exec_us.push_back(ps.last_executor_us);
    first_over_us.push_back(run_us[0] - ps.last_plan_us - later);
  }
  std::printf(
      "{\"summary\": true, \"signatures\": %zu, \"threads\": %d, \"plan_us\": %.1f, \"specialize_us\": %.1f, "
      "\"memory_plan_us\": %.1f, \"executor_us\": %.1f, \"first_run_extra_us\": %.1f}\n",
      plan_us.size(), threads, Median(plan_us), Median(spec_us), Median(mem_us), Median(exec_us),
      Median(first_over_us));
  return 0;
}
