// QuantDepthwise (quant_depthwise.h) per layer shape: the fastest of --runs
// runs (a kernel's floor on a noisy host), quantizing x's rows and
// convolving them, each output row then multiplied by a scale (scalar; none
// with --no-epilogue), and for comparison QuantizeCenteredFloat over all of
// x alone. NHWC float32, 3x3, pads 1, batch 1.
// Usage: quant_depthwise_bench [--threads N] [--runs N] [--no-epilogue] [C,H,W,stride ...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/kernels/quant_depthwise.h"

namespace {
double Us(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
}
double Min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
}  // namespace

int main(int argc, char** argv) {
  int threads = 1, runs = 50;
  bool rescale = true;
  std::vector<std::string> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--no-epilogue") rescale = false;
    else shapes.push_back(a);
  }
  if (shapes.empty()) {  // MobileNetV2's depthwise layers
    shapes = {"32,112,112,1", "96,112,112,2", "144,56,56,1", "144,56,56,2", "192,28,28,1",
              "192,28,28,2",  "384,14,14,1",  "576,14,14,1", "576,14,14,2", "960,7,7,1"};
  }
  kiln::cpu::UseThreads(threads);
  std::mt19937 rng(1);
  std::printf("%-16s %10s %10s %10s\n", "C,H,W,stride", "run us", "Gvals/s", "quant us");
  double total = 0;
  for (const std::string& sh : shapes) {
    long c = 0, h = 0, w = 0, s = 1;
    if (std::sscanf(sh.c_str(), "%ld,%ld,%ld,%ld", &c, &h, &w, &s) < 3) return 2;
    kiln::cpu::QuantDepthwiseShape ds;
    ds.n = 1, ds.c = c, ds.h = h, ds.w = w, ds.kh = ds.kw = 3, ds.sh = ds.sw = s, ds.pad_top = ds.pad_left = 1;
    ds.oh = (h + 2 - 3) / s + 1, ds.ow = (w + 2 - 3) / s + 1;
    kiln::cpu::QuantDepthwise k;
    if (!k.Plan(ds)) return 3;
    std::vector<std::int8_t> wt(static_cast<std::size_t>(c * 9));
    for (auto& v : wt) v = static_cast<std::int8_t>(static_cast<int>(rng() % 256) - 128);
    k.PackWeights(wt.data());
    std::vector<float> x(static_cast<std::size_t>(h * w * c)), y(static_cast<std::size_t>(ds.oh * ds.ow * c));
    std::uniform_real_distribution<float> dist(0.f, 10.f);  // ties (x / s within 2^-13 of n + 0.5) rare
    for (auto& v : x) v = dist(rng);
    std::vector<float> sc(static_cast<std::size_t>(c), 1e-3f);
    auto epi = [&](std::int64_t, float* row, std::int64_t pixels, float*, float*) {
      if (!rescale) return;
      for (std::int64_t p = 0; p < pixels; ++p)
        for (long j = 0; j < c; ++j) row[p * c + j] *= sc[static_cast<std::size_t>(j)];
    };
    std::vector<double> t;
    for (int r = 0; r < runs + 3; ++r) {
      const auto a = std::chrono::steady_clock::now();
      k.Run(x.data(), 0.04f, 0, y.data(), epi);
      if (r >= 3) t.push_back(Us(a));
    }
    const double m = Min(t);
    total += m;
    std::vector<float> xq(x.size());
    t.clear();
    for (int r = 0; r < runs + 3; ++r) {
      const auto a = std::chrono::steady_clock::now();
      kiln::cpu::QuantizeCenteredFloat(x.data(), xq.data(), static_cast<std::int64_t>(x.size()), 0.04f, 0);
      if (r >= 3) t.push_back(Us(a));
    }
    const double mq = Min(t);
    std::printf("%-16s %10.1f %10.2f %10.1f\n", sh.c_str(), m, static_cast<double>(x.size()) / m / 1e3, mq);
  }
  std::printf("%-16s %10.1f\n", "total", total);
  return 0;
}
